"""The README is a user guide, and every number it or docs/ states about results is generated from the committed
tables (specsweep.docs), never typed by hand."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from conftest import ROOT
from specsweep import docs

#: What the repository's documentation and code never say: how the work behind it was organised.
PROCESS = re.compile(r"issue [0-9]+|lent (gpu |h200 )?machine|device time", re.I)


def test_generated_blocks_match_their_sources():
    """README.md and docs/**/*.md: each `<!-- generated: SOURCE -->` block equals its file, or what its
    `specsweep.docs.NAME()` returns (`python -m specsweep.docs` rewrites them)."""
    text = (ROOT / "README.md").read_text()
    assert docs.blocks(text), "the README has no generated block"
    seen = 0
    for path in docs.doc_files(ROOT):
        for source, content in docs.blocks(path.read_text()):
            seen += 1
            want = docs.expected(ROOT, source)
            assert content.strip() == want, f"{path.relative_to(ROOT)}: {source} is stale (python -m specsweep.docs)"
    assert seen > len(docs.blocks(text)), "docs/ has no generated block"
    assert docs.stale(ROOT) == []


def test_an_empty_generated_block_is_filled(tmp_path):
    """A block whose end marker follows on the next line is stale, and `refresh` fills it (it was once
    skipped, leaving a run page with an empty block)."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "src.md").write_text("the source's text\n")
    page = tmp_path / "README.md"
    page.write_text("before\n<!-- generated: src.md -->\n<!-- end generated -->\nafter\n")
    assert docs.stale(tmp_path) == ["README.md: src.md"]
    docs.refresh(tmp_path)
    assert page.read_text() == "before\n<!-- generated: src.md -->\nthe source's text\n<!-- end generated -->\nafter\n"
    assert docs.stale(tmp_path) == []


def test_readme_is_a_user_guide():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines"
    commands = [ln.split("#")[0].strip() for ln in lines if ln.startswith("make ")]
    assert commands[:2] == ["make demo", "make test"], commands[:2]
    first_screen = "\n".join(lines[:30])
    for what in ("make demo", "make test", "Install", "CPU", "GPU node", "results/", "figures/"):
        assert what in first_screen, f"the README's first screen does not mention {what!r}"


def test_every_committed_run_has_a_page_and_a_row():
    """A run with committed tables (or preflight verdicts) has docs/runs/<run>.md and a row in the README's
    generated table of committed results, which links the page and the run's claims or report. Committed:
    tracked by git, so a user's own run (`make demo` writes results/smoke) is not asked for a page."""
    tracked = subprocess.run(
        ["git", "ls-files", "results/*/tables/claims.md", "results/*/preflight/report.md"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    runs = sorted({Path(f).parts[1] for f in tracked})
    assert runs
    summary = docs.runs_summary(ROOT)
    for run in runs:
        page = ROOT / "docs" / "runs" / f"{run}.md"
        assert page.is_file(), f"no page docs/runs/{run}.md"
        assert f"<!-- generated: results/{run}/" in page.read_text(), (
            f"docs/runs/{run}.md: no generated block of its tables"
        )
        row = next((ln for ln in summary.splitlines() if f"[{run}](docs/runs/{run}.md)" in ln), None)
        assert row and "not committed yet" not in row, run
        assert f"(results/{run}/tables/claims.md)" in row or f"(results/{run}/preflight/report.md)" in row, row
    assert "<!-- generated: specsweep.docs.runs_summary() -->" in (ROOT / "README.md").read_text()


def test_links_in_readme_and_docs_resolve():
    for path in docs.doc_files(ROOT):
        for target in re.findall(r"\]\(([^)#\s]+)\)", path.read_text()):
            if target.startswith(("http://", "https://")):
                continue
            assert (path.parent / target).exists(), f"{path.relative_to(ROOT)}: broken link {target}"


def test_no_notes_on_how_the_work_was_organised():
    hits = []
    for top in ("README.md", "docs", "config", "workflow"):
        base = ROOT / top
        for path in [base] if base.is_file() else sorted(p for p in base.rglob("*") if p.is_file()):
            try:
                text = path.read_text()
            except UnicodeDecodeError:
                continue
            hits += [f"{path.relative_to(ROOT)}: {m.group(0)}" for m in PROCESS.finditer(text)]
    assert hits == []


def test_concurrency_summary_reads_speedups_per_b_and_the_crossover(tmp_path):
    """One row per (run, model, workload, drafter) of a run with a crossover table: each measured b's speedup and
    verdict from speedup.parquet, '–' where a b has none, b* from crossover.parquet; the vanilla-sync control and
    curves with nothing measured are left out; a run without a crossover table adds nothing."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    for run in ("conc", "plain"):
        (tmp_path / "docs" / "runs").mkdir(parents=True, exist_ok=True)
        (tmp_path / "docs" / "runs" / f"{run}.md").write_text(f"# {run}\n")
        (tmp_path / "results" / run / "tables").mkdir(parents=True)
    t = tmp_path / "results" / "conc" / "tables"

    def sp(w, c, s, v):
        b = int(w.split("@b")[1]) if "@b" in w else None
        return {"model": "m", "workload": w, "config": c, "concurrency": b, "speedup": s, "verdict": v}

    pq.write_table(
        pa.Table.from_pylist(
            [
                sp("code@b1", "ngram", 2.345, "faster"),
                sp("code@b8", "ngram", 0.871, "undecided (n<2)"),
                sp("code", "ngram", 0.5, "slower"),  # all prompts at once: not a b
                sp("code@b1", "suffix", None, "missing"),
                sp("code@b1", "vanilla-sync", 0.8, "slower"),
            ]
        ),
        t / "speedup.parquet",
    )
    x = {"model": "m", "workload": "code", "b_star_lo": 1.5, "b_star_hi": 6.0, "n": 2}
    pq.write_table(
        pa.Table.from_pylist(
            [
                x | {"step": "ngram", "b_star": 3.2, "note": "crosses 1 between b = 1 and b = 8"},
                x | {"step": "suffix", "b_star": None, "note": "undecided (no concurrency measured)"},
                x | {"step": "vanilla-sync", "b_star": None, "note": "costs at every measured b (b = 1–8)"},
            ]
        ),
        t / "crossover.parquet",
    )
    assert docs.concurrency_summary(tmp_path).splitlines() == [
        "| run | model | workload | drafter | b = 1 | b = 8 | b* |",
        "|---|---|---|---|---|---|---|",
        "| conc | m | code | ngram | 2.35 faster | 0.87 undecided | b* = 3.2 [1.5, 6.0] |",
    ]


def test_docs_name_the_statistic_the_code_uses():
    """The speedups are ratios of geometric means over engine starts (tables.speedup_numbers, stats.ratio_ci);
    the README and docs/design.md said "ratio of medians"."""
    design = " ".join((ROOT / "docs/design.md").read_text().split())
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert "per non-baseline cell, the ratio of geometric means over engine starts" in design
    assert "the ratio of medians against" not in design
    assert "median over 3 engine starts, paired" not in readme
    assert "ratio of geometric means over engine starts" in readme


def test_readme_rows_of_random_weights_say_so():
    """Every README row drawn from random-weight cells names them: the concurrency summary's model column, and a
    run some of whose models have random weights names those."""
    for line in docs.concurrency_summary(ROOT).splitlines()[2:]:
        if "-dummy" in line:
            assert "(random weights)" in line, line
    assert docs._models(["a", "b"], {"b"}) == "a, b (random weights)" and docs._models(["a"], set()) == "a"
    assert docs._models(["a", "b"], {"a", "b"}) == "a, b (random weights)"
