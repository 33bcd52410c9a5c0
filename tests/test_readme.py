"""The README's sentences about results are generated from the committed tables, never typed by hand."""

from __future__ import annotations

import re

from conftest import ROOT


def test_readme_result_sentences_match_the_tables():
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"<!-- generated: (\S+) -->\n(.*?)\n<!-- end generated -->", text, re.S)
    assert blocks, "the README has no generated result sentence"
    for path, sentence in blocks:
        assert sentence.strip() == (ROOT / path).read_text().strip(), path
