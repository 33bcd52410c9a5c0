"""Data strings reach matplotlib, a terminal and Markdown as well as the report's reST: each boundary renders a
hostile name (mathtext, ANSI escapes, line breaks, pipes, backticks, HTML, link syntax) inert, and leaves the
names a config admits unchanged (the committed outputs re-render byte-identical: tests/test_reference_run.py,
tests/test_readme.py)."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path
from xml.etree import ElementTree

import pyarrow as pa
import pyarrow.parquet as pq

from conftest import ROOT
from specsweep import advise, cli, status
from specsweep.config import load_study
from specsweep.escape import figure_text, md_cell, md_code, md_text, term_text

#: One name with a bit of every format's markup: mathtext that fails to parse, an ANSI "clear screen" and a
#: colour, a line break that would forge a line, a Markdown table cell's end, a code span, an HTML tag, a
#: link and an image, emphasis, strikethrough, an entity.
HOSTILE = "chat $\\nosuch^{x}$ \x1b[2J\x1b[31m\nnext | `code` <img src=x onerror=alert(1)> [a](http://x) ![i](y) *b* _c_ ~~d~~ &amp;"
ORDINARY = ["smollm2-135m-instruct", "code@b16", "qwen2.5-7b-instruct", "vanilla-sync", "mix_ch", "run.1"]


def test_ordinary_names_pass_every_helper_unchanged():
    for name in ORDINARY:
        assert term_text(name) == md_text(name) == md_cell(name) == name
        assert md_code(name) == f"`{name}`"


def test_term_text_neutralises_control_characters():
    assert term_text("a\x1b[31mb\nc\r\u202ed\tq") == "a\\x1b[31mb\\nc\\r\\u202ed\\tq"
    assert term_text("naïve – ok") == "naïve – ok"  # printable Unicode stays


def test_md_text_is_inert_markdown():
    out = md_text(HOSTILE)
    assert "\n" not in out and "\x1b" not in out
    for bare in ("|", "`", "<img", "[a]", "![i]", "*b*", "_c_", "~~", "&amp;", "$"):
        assert bare not in out.replace("\\" + bare[0], ""), bare  # every one escaped
    assert md_text("a_b_c") == "a_b_c" and md_text("_x_") == "\\_x\\_"  # intraword underscores are text
    assert md_code("a`b") == "``a`b``" and md_code("`x") == "`` `x ``"
    assert md_cell("mean |K error|\nnext") == "mean \\|K error\\| next" and md_cell("a \\| b") == "a \\| b"


def _hostile_tables(tmp_path: Path, run: str, old: str, new: str) -> Path:
    """A committed run's tables with one workload renamed (its MANIFEST.json rewritten to match): tables are
    files, their names data."""
    dst = tmp_path / "tables"
    shutil.copytree(ROOT / "results" / run / "tables", dst)
    for f in dst.glob("*.parquet"):
        t = pq.read_table(f)
        if "workload" in t.column_names:
            col = [new if w == old else w for w in t.column("workload").to_pylist()]
            i = t.column_names.index("workload")
            t = t.set_column(i, "workload", pa.array(col, type=t.schema.field("workload").type))
            pq.write_table(t, f)
    digest = {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in sorted(dst.iterdir())}
    (dst / "MANIFEST.json").write_text(json.dumps({k: v for k, v in digest.items() if k != "MANIFEST.json"}))
    return dst


def test_figures_draw_a_hostile_workload_name_as_text(tmp_path):
    """A workload named with mathtext that does not parse failed the whole render (matplotlib's ParseFatal
    error); `$x^2$` was drawn as a formula. Figure text is drawn with mathtext off: every figure renders, with
    the same figures drawn as under the ordinary name."""
    from specsweep.figures import render_all
    from specsweep.view import left_out_by_config

    study = load_study(ROOT / "results" / "h200-suffix-depth" / "config.yaml")
    tables = _hostile_tables(tmp_path, study.run, "chat", HOSTILE + " \x07bell")
    manifest = render_all(
        tables, tmp_path / "figs", study.raw["headline_model"], study.run, left_out=left_out_by_config(study)
    )
    committed = json.loads((ROOT / "figures" / study.run / "manifest.json").read_text())
    assert sorted(manifest["figures"]) == sorted(committed["figures"])
    svgs = sorted((tmp_path / "figs").glob("*.svg"))
    assert svgs
    for svg in svgs:  # ESC and BEL were drawn as \x1b and \x07: every SVG is well-formed XML
        ElementTree.parse(svg)
        assert "\x1b" not in svg.read_text() and "\x07" not in svg.read_text()


def test_every_committed_svg_is_well_formed_xml():
    svgs = sorted((ROOT / "figures").rglob("*.svg"))
    assert len(svgs) >= 10
    for svg in svgs:
        ElementTree.parse(svg)


def test_figure_text_keeps_line_breaks_and_escapes_the_rest():
    assert figure_text("run\nH200 \x1b[31m\x07") == "run\nH200 \\x1b[31m\\x07"
    assert figure_text("h200-suffix-depth") == "h200-suffix-depth"


def test_advise_markdown_and_figure_keep_a_hostile_model_name_inert(tmp_path):
    adv = {
        "model": HOSTILE,
        "tables": "results/x`y/tables",
        "rows": [
            {
                "drafter": "ngram",
                "step": "ngram|<b>",
                "concurrency": c,
                "replay_concurrency": c,
                "K": 2.0,
                "T": 1.5,
                "T_lo": 1.4,
                "T_hi": 1.6,
                "R": 1.2,
                "R_lo": 1.1,
                "R_hi": 1.3,
                "speedup": 1.25,
                "speedup_lo": 1.1,
                "speedup_hi": 1.4,
            }  # fmt: skip
            for c in (1, 4)
        ],
        "recommendation": ["concurrency 1: turn on ngram (predicted 1.25x)"],
    }
    text = advise.markdown(adv)
    title = text.splitlines()[0]
    assert title == "# Should speculative decoding be on? " + md_text(HOSTILE)
    assert "\x1b" not in text and not re.search(r"(?<!\\)<img", text)
    assert "Step times from ``results/x`y/tables``" in text
    assert "(ngram\\|&lt;b&gt;)" in text or "ngram\\|" in text, text  # a step name keeps to its table cell
    advise.figure(adv, tmp_path / "advice.svg")  # mathtext off: no ParseFatalException from the title


def test_an_error_message_reaches_the_terminal_without_control_characters(tmp_path, capsys):
    """A message quotes data (here a path; elsewhere a file's line or a name): an ANSI escape or a line break
    in it is printed as its escape, so a message stays one line that cannot rewrite the screen."""
    bad = tmp_path / "x\x1b[2J\nforged: ok.json"
    bad.write_text("{}")
    out = tmp_path / "o.md"
    tables = ROOT / "results" / "h200-smollm2" / "tables"
    argv = ["advise", "--replay", str(bad), "--tables", str(tables), "--model", "m", "--out", str(out)]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "\x1b" not in err and err.count("\n") == 1 and "x\\x1b[2J forged: ok.json" in err


def test_status_prints_a_failure_records_message_inert():
    study = load_study(ROOT / "results" / "h200-smollm2" / "config.yaml")
    doc = status.progress(study, ROOT / "results")
    doc["failed"] = 1
    doc["failed_measurements"] = [{"measurement": "m/w/s/r1\x1b[1A", "error": "vLLM said \x1b[2Jboom\nforged line"}]
    text = status.render(doc)
    assert "\x1b" not in text and "  m/w/s/r1\\x1b[1A: vLLM said \\x1b[2Jboom\\nforged line" in text.splitlines()


def test_summary_markdown_keeps_a_hostile_failure_inert():
    """summary.md lists a failed cell with its error message (data from a failure record): a pipe, a line
    break, HTML or a link in it stays text of that one list item."""
    from specsweep.tables import summary_markdown

    study = load_study(ROOT / "results" / "h200-smollm2" / "config.yaml")
    row = {"model": "m", "workload": "w", "config": "vanilla", "concurrency": None, "status": "failed", "n": 0,
           "repeats": 3, "error": HOSTILE}  # fmt: skip
    text = summary_markdown(study, [row], [], {})
    (item,) = [line for line in text.splitlines() if line.startswith("- m/w/vanilla")]
    assert item == f"- m/w/vanilla (0/3): {md_text(HOSTILE)}" and "\x1b" not in text


def test_preflight_report_cells_are_inert():
    from specsweep.preflight import _fmt

    assert _fmt(HOSTILE) == md_text(HOSTILE) and _fmt(None) == "" and _fmt(1.5) == "1.5"


def test_claims_table_keeps_a_pipe_in_its_evidence_inside_the_cell():
    """C5's evidence says `mean |K error|`: its pipes split the row into six cells of a four-column table."""
    from specsweep import claims

    study = load_study(ROOT / "results" / "h200-smollm2" / "config.yaml")
    decided = [{"id": "C5", "claim": "linear K model", "verdict": "confirmed", "rule": "`rule` x",
                "evidence": "mean |K error| linear 0.83\nnext"}]  # fmt: skip
    row = claims.markdown(study, decided).splitlines()[-1]
    assert len(re.findall(r"(?<!\\)\|", row)) == 5, row
    assert row.endswith("| `rule` x | mean \\|K error\\| linear 0.83 next |")
