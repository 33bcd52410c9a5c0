"""Workloads on the real corpus: deterministic bytes, the article's properties, tamper detection."""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest

from specsweep import corpus, workloads
from specsweep.config import build_study
from specsweep.errors import SpecsweepError

SHA = "d58663195ba6780da5f029b920c7ac00cad1e435ee1df7e03bf9ec2470f8dea4"


@pytest.fixture(scope="module")
def lines(sonnet):
    return corpus.load_lines(sonnet, SHA)


@pytest.fixture
def paper(paper_cfg):
    return build_study(paper_cfg)


def test_corpus_is_checked(sonnet, tmp_path, lines):
    assert len(lines) == 518 - sonnet.read_text().count("\n\n")  # non-empty lines of the 518
    out = corpus.fetch("https://unused.invalid/", SHA, tmp_path / "s.txt", local=str(sonnet))
    assert out.read_bytes() == sonnet.read_bytes()
    crlf = tmp_path / "crlf.txt"
    crlf.write_bytes(sonnet.read_bytes().replace(b"\n", b"\r\n"))  # CRLF copy: same normalised text
    corpus.fetch("https://unused.invalid/", SHA, tmp_path / "s2.txt", local=str(crlf))
    bad = tmp_path / "bad.txt"
    bad.write_text(sonnet.read_text().replace("summer", "winter"))
    with pytest.raises(SpecsweepError, match=rf"corpus {bad}: sha256 .* expected {SHA}"):
        corpus.fetch("https://unused.invalid/", SHA, tmp_path / "s3.txt", local=str(bad))
    assert not (tmp_path / "s3.txt").exists()


def test_deterministic_bytes(paper, lines, tmp_path):
    for name in paper.workloads:
        a = workloads.build(paper.workloads, name, lines, 0, 8, SHA)
        b = workloads.build(paper.workloads, name, lines, 0, 8, SHA)
        workloads.write(a, tmp_path / "a.json")
        workloads.write(b, tmp_path / "b.json")
        assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()
        assert len(a["prompts"]) == paper.workloads[name].num_prompts
    other = workloads.build(paper.workloads, "sonnet", lines, 1, 8, SHA)
    assert other["content_sha256"] != workloads.build(paper.workloads, "sonnet", lines, 0, 8, SHA)["content_sha256"]


def test_sonnet_prompts(paper, lines):
    doc = workloads.build(paper.workloads, "sonnet", lines, 0, 8, SHA)
    pool = set(lines)
    repeats = []
    for p in doc["prompts"]:
        body = p["text"].split("\n\n", 1)[1].split("\n")
        assert len(body) == 164 and set(body) <= pool
        repeats.append(len(body) - len(set(body)))
    # drawn with replacement: 164 of 518 lines repeat ~24 lines on average (birthday problem)
    assert 15 < sum(repeats) / len(repeats) < 35


def test_chat_prompts(paper, lines):
    doc = workloads.build(paper.workloads, "chat", lines, 0, 8, SHA)
    sonnet = workloads.build(paper.workloads, "sonnet", lines, 0, 8, SHA)
    sonnet_len = sum(len(p["text"]) for p in sonnet["prompts"]) / len(sonnet["prompts"])
    for p in doc["prompts"]:
        assert 0.75 <= p["excerpt_share"] <= 0.85  # the article: 80 % sonnet excerpt ...
        question = re.search(r"\n\nQuestion: (.*)$", p["text"]).group(1)  # ... and a question at the end
        assert question in workloads.CHAT_QUESTIONS
        assert "answer in" not in p["text"].lower()  # nothing shortens the answer: it runs to EOS
        excerpt = p["text"].split("Excerpt:\n")[1].split("\n\nQuestion:")[0].split("\n")
        assert set(excerpt) <= set(lines)
        assert 0.85 < len(p["text"]) / sonnet_len < 1.2  # about a sonnet prompt's size
    assert len({p["text"] for p in doc["prompts"]}) > 0.9 * len(doc["prompts"])  # 518 starts x 8 questions


def test_code_prompts(paper, lines):
    doc = workloads.build(paper.workloads, "code", lines, 0, 8, SHA)
    spec = paper.workloads["code"]
    pattern = re.compile(r"^    # comment line (\d+): ((?:\w+ ){7}\w+)$", re.M)
    for p in doc["prompts"]:
        comments = pattern.findall(p["text"])
        assert [int(n) for n, _ in comments] == list(range(1, spec.functions * spec.comment_lines + 1))
        for _, words in comments:
            assert set(words.split()) <= set(workloads.CODE_WORDS)
        assert p["text"].count("def ") == spec.functions and p["text"].count("    pass") == spec.functions


@pytest.mark.parametrize(
    "name,expect",
    [
        ("mix-balanced", {"sonnet": 86, "chat": 85, "code": 85}),
        ("mix-ch", {"code": 179, "chat": 39, "sonnet": 38}),  # ties go by name
        ("mix-sh", {"sonnet": 179, "chat": 39, "code": 38}),
    ],
)
def test_mix_proportions(paper, lines, name, expect):
    doc = workloads.build(paper.workloads, name, lines, 0, 8, SHA)
    kinds = Counter(p["kind"] for p in doc["prompts"])
    assert kinds == Counter(expect)
    assert sum(kinds.values()) == 256
    # interleaved, not blocks
    assert len({p["kind"] for p in doc["prompts"][:20]}) > 1


def test_hand_edited_workload_is_refused(paper, lines, tmp_path):
    doc = workloads.build(paper.workloads, "code", lines, 0, 8, SHA)
    path = tmp_path / "code.json"
    workloads.write(doc, path)
    assert workloads.load(path)["content_sha256"] == doc["content_sha256"]
    edited = json.loads(path.read_text())
    edited["prompts"][3]["max_tokens"] = 4096
    path.write_text(json.dumps(edited))
    with pytest.raises(SpecsweepError, match=rf"workload file {path}: content hash mismatch"):
        workloads.load(path)
