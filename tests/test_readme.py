"""The README is a user guide, and every number it or docs/ states about results is generated from the committed
tables (specsweep.docs), never typed by hand."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from conftest import ROOT
from specsweep import docs
from specsweep.errors import SpecsweepError

#: What the repository's documentation and code never say: how the work behind it was organised (issues,
#: lent machines and their device time, holds of a machine, calls to it and their budget, sessions, search
#: indexes). offline-gpu/ is left out: its subject is operating one time-limited machine through calls.
PROCESS = re.compile(
    r"issue [0-9]+|lent (gpu |h200 )?machines?|device time|search index"
    r"|\bGPU hold\b|\bholds? of [0-9]|\b(machine|GPU) (is |was )?held\b|\bheld for [0-9]+ min"
    r"|\bper-call\b|\bcall's\b|\b(one|two|three|four|[0-9]+|its|each|every|next|later|first|last|separate) calls\b"
    r"|\b(this|that|one|the same|a later|the next|each|every) session\b|\bsessions? [0-9]+\b|\$BUDGET",
    re.I,
)


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


def test_every_committed_run_is_one_folder_with_a_page_and_a_row():
    """A committed run (tracked tables, preflight verdicts or fidelity checks) is one folder: its page
    results/<run>/README.md, with the plain `snakemake --configfile results/<run>/config.yaml` command, the
    offline GPU machine named at most once and a generated block of its tables (a run with tables or a
    report); the config it ran, results/<run>/config.yaml, whose `run:` is the folder's name; and a row in the
    README's generated table of committed results, which links the page and the run's claims, report or
    checks. Committed: tracked by git, so a user's own run (`make demo` writes results/smoke) is not asked for
    a page."""
    tracked = subprocess.run(
        ["git", "ls-files", "results/*/tables/claims.md", "results/*/preflight/report.md", "results/*/fidelity/*"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    runs = sorted({Path(f).parts[1] for f in tracked})
    assert "h200-fidelity" in runs and "preflight" in runs and "h200-reference" in runs
    summary = docs.runs_summary(ROOT)
    for run in runs:
        page, config = ROOT / "results" / run / "README.md", ROOT / "results" / run / "config.yaml"
        assert page.is_file(), f"no page results/{run}/README.md"
        text = page.read_text()
        assert yaml.safe_load(config.read_text())["run"] == run, f"results/{run}/config.yaml: not run {run}"
        command = rf"snakemake (\w+ )?--configfile results/{re.escape(run)}/config\.yaml"
        assert re.search(command, text), f"results/{run}/README.md: no plain snakemake command"
        offline = [ln for ln in text.splitlines() if "offline" in ln.lower()]
        assert len(offline) <= 1, f"results/{run}/README.md: the offline machine named again: {offline}"
        row = next((ln for ln in summary.splitlines() if f"[{run}](results/{run}/README.md)" in ln), None)
        assert row and "not committed yet" not in row, run
        if (ROOT / "results" / run / "fidelity").is_dir():
            assert "[checks](docs/running.md)" in row, row
            continue
        assert f"<!-- generated: results/{run}/" in text, f"results/{run}/README.md: no generated block of its tables"
        assert f"(results/{run}/tables/claims.md)" in row or f"(results/{run}/preflight/report.md)" in row, row
    assert "<!-- generated: specsweep.docs.runs_summary() -->" in (ROOT / "README.md").read_text()


def test_links_in_readme_and_docs_resolve():
    for path in docs.doc_files(ROOT):
        for target in re.findall(r"\]\(([^)#\s]+)\)", path.read_text()):
            if target.startswith(("http://", "https://")):
                continue
            assert (path.parent / target).exists(), f"{path.relative_to(ROOT)}: broken link {target}"


def process_talk(root: Path) -> list[str]:
    """`file: phrase` for every phrase of PROCESS in the README, docs/, config/, workflow/ and each run's page
    and config (results/*/README.md, results/*/config.yaml)."""
    files = [root / "README.md"]
    for top in ("docs", "config", "workflow"):
        files += sorted(p for p in (root / top).rglob("*") if p.is_file())
    files += sorted((root / "results").glob("*/README.md")) + sorted((root / "results").glob("*/config.yaml"))
    hits = []
    for path in files:
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        hits += [f"{path.relative_to(root)}: {m.group(0)}" for m in PROCESS.finditer(text)]
    return hits


def test_no_notes_on_how_the_work_was_organised():
    assert process_talk(ROOT) == []


@pytest.mark.parametrize(
    "phrase",
    [
        "so that one workload's nine engines fit one GPU hold of 30 minutes",
        "Where a machine is held for less than the whole run",
        "one machine held for 30 minutes, its calls sent as one batch",
        "`code-greedy` took three calls of the per-call mode, each stopping before the call's time limit",
        "`code-t1` ran as one detached Snakemake run over two calls",
        "bash offline-gpu/device-run.sh --start $BUDGET_S h200-reference $T",
        "sonnet at every b on a third, in one session: all 9 engines",
        "in session 3 vanilla's chat throughput rose",
        "the official repository where the search index holds it",
        "measured in this session on a lent H200 machine",
    ],
)
def test_process_talk_is_caught(tmp_path, phrase):
    """Each phrase of the kind once found in run pages, config headers and READMEs is caught, wherever it is:
    a run's page or config, docs/ or config/."""
    for where in ("results/r/README.md", "results/r/config.yaml", "docs/x.md", "config/x.yaml"):
        (tmp_path / where).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / where).write_text(f"before\n{phrase}\nafter\n")
    (tmp_path / "README.md").write_text("# a user guide\n")
    (tmp_path / "workflow").mkdir()
    hits = process_talk(tmp_path)
    assert {h.split(": ")[0] for h in hits} == {
        "results/r/README.md",
        "results/r/config.yaml",
        "docs/x.md",
        "config/x.yaml",
    }, hits


def test_concurrency_summary_reads_speedups_per_b_and_the_crossover(tmp_path):
    """One row per (run, model, workload, drafter) of a run with a crossover table: each measured b's speedup and
    verdict from speedup.parquet, '–' where a b has none, b* from crossover.parquet; the vanilla-sync control and
    curves with nothing measured are left out; a run without a crossover table adds nothing."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    for run in ("conc", "plain"):
        (tmp_path / "results" / run / "tables").mkdir(parents=True)
        (tmp_path / "results" / run / "README.md").write_text(f"# {run}\n")
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


def test_demo_runs_table_and_expectation_read_the_current_demo(tmp_path):
    """docs/demo-runs.csv is the record of fresh `make demo` runs: design.md's table has one row per run of the
    current demo (the last row's `demo`), and the README's sentence counts each entry's verdicts over them, the
    speedups' range at two decimals rounded half up from the recorded text, how many runs gave every entry its
    most common verdict, and the walls' range; runs of an earlier demo are left out of both."""
    head = "run,demo,commit,date,host,wall_s,snakemake_s,band_pct,entry,estimate,lo,hi,verdict\n"

    def run(n, demo, wall, ngram, verdict, cpu):
        base = f"{n},{demo},abc{n},2026-12-0{n},2-core,{wall},,5.0"
        return f"{base},code/ngram,{ngram},1.0,2.0,{verdict}\n{base},CPU,{cpu},1.0,9.0,confirmed\n"

    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "demo-runs.csv").write_text(
        head
        + run(1, "old", 2000, "0.800", "slower", "4.0")
        + run(2, "b1", 700, "1.175", "faster", "4.0")
        + run(3, "b1", 650, "1.612", "faster", "5.5")
        + run(4, "b1", 800, "1.204", "undecided", "7.0")
    )
    assert docs.demo_expectation(tmp_path) == (
        "In 3 fresh runs of `make demo` on 2-core hosts, code/ngram (1.18–1.61×) was `faster` in 2 and `undecided` in 1, "
        "and the CPU entry was `confirmed` in 3; 2 of the 3 gave every entry its most common verdict, and a run took "
        "650–800 s from a fresh clone, installing included."
    )
    table = docs.demo_runs(tmp_path).splitlines()
    assert [ln.split(" | ")[0] for ln in table[2:]] == ["| 2", "| 3", "| 4"]
    assert table[2] == (
        "| 2 | abc2 | 2026-12-02 | 2-core | 700 s | – | 1.175 [1.0, 2.0] faster | ±5.0 % | confirmed, 4.0 % [1.0, 9.0] |"
    )


def test_demo_expectation_names_its_hosts_and_what_depends_on_them(tmp_path):
    """Runs of one demo on two kinds of host (their CPU as the cells named it): the sentence names each kind with
    its number of runs, and says which entries gave the same verdict on every kind and which depended on the
    host, with each kind's counts."""
    head = "run,demo,commit,date,host,wall_s,snakemake_s,band_pct,entry,estimate,lo,hi,verdict,cpu_model,cpu_isa,cpu_cores,memory_gib\n"

    def run(n, wall, suffix, verdict, cpu, isa):
        base = f"{n},d,abc{n},2026-12-0{n},2-core,{wall},,5.0"
        host = f"{cpu},{isa},2,23.5"
        return (
            f"{base},code/ngram,1.500,1.3,1.7,faster,{host}\n{base},code/suffix,{suffix},0.9,1.3,{verdict},{host}\n"
            f"{base},CPU,4.0,1.0,9.0,confirmed,{host}\n"
        )

    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "demo-runs.csv").write_text(
        head
        + run(1, 800, "1.200", "faster", "Intel Xeon", "avx512_bf16")
        + run(2, 820, "1.010", "undecided", "AMD EPYC", "avx512")
        + run(3, 790, "1.210", "faster", "Intel Xeon", "avx512_bf16")
    )
    assert docs.demo_expectation(tmp_path) == (
        "In 3 fresh runs of `make demo` on 2-core AMD EPYC, avx512 hosts (1) and 2-core Intel Xeon, avx512_bf16 "
        "hosts (2), code/ngram (1.50×) was `faster` in 3, code/suffix (1.01–1.21×) was `faster` in 2 and "
        "`undecided` in 1, and the CPU entry was `confirmed` in 3; 2 of the 3 gave every entry its most common "
        "verdict, and a run took 790–820 s from a fresh clone, installing included; the same verdict on every "
        "kind of host: code/ngram, the CPU entry; depending on the host: code/suffix (2-core AMD EPYC, avx512: `undecided` "
        "in 1; 2-core Intel Xeon, avx512_bf16: `faster` in 2)."
    )
    # an entry whose verdict varied within one kind of host is said to vary, not to depend on the host
    (tmp_path / "docs" / "demo-runs.csv").write_text(
        head
        + run(1, 800, "1.200", "faster", "Intel Xeon", "avx512_bf16")
        + run(2, 820, "1.010", "undecided", "AMD EPYC", "avx512")
        + run(3, 790, "1.020", "undecided", "Intel Xeon", "avx512_bf16")
    )
    assert docs.demo_expectation(tmp_path).endswith(
        "the same verdict on every kind of host: code/ngram, the CPU entry; varying within a kind of host: "
        "code/suffix (2-core AMD EPYC, avx512: `undecided` in 1; 2-core Intel Xeon, avx512_bf16: `faster` in 1 "
        "and `undecided` in 1)."
    )
    # one run, one host: named as such
    (tmp_path / "docs" / "demo-runs.csv").write_text(head + run(1, 800, "1.200", "faster", "Intel Xeon", "avx512_bf16"))
    assert docs.demo_expectation(tmp_path).startswith(
        "In 1 fresh run of `make demo` on a 2-core Intel Xeon, avx512_bf16 host, code/ngram"
    )


def test_demo_between_runs_checks_each_interval_against_the_other_runs(tmp_path):
    """design.md's between-runs table: per speedup entry of the current demo, the geometric mean and range of
    the runs' estimates, the sd of the log estimate between runs, the median half-width of a run's interval (log
    units), and in how many runs the interval holds the geometric mean of the other runs' estimates; the CPU
    entry and earlier demos are left out."""
    head = "run,demo,commit,date,host,wall_s,snakemake_s,band_pct,entry,estimate,lo,hi,verdict\n"
    rows = [
        ("0", "old", "9.000", "8.000", "10.000", "faster"),
        ("1", "new", "1.000", "0.500", "2.000", "faster"),
        ("2", "new", "2.000", "1.000", "4.000", "faster"),
        ("3", "new", "4.000", "3.000", "6.000", "undecided"),
    ]
    text = head + "".join(
        f"{n},{demo},c,2026-12-04,2-core,700,,3.0,code/ngram,{est},{lo},{hi},{v}\n"
        f"{n},{demo},c,2026-12-04,2-core,700,,3.0,CPU,4.0,3.0,5.0,confirmed\n"
        for n, demo, est, lo, hi, v in rows
    )
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "demo-runs.csv").write_text(text)
    table = docs.demo_between_runs(tmp_path).splitlines()
    # logs 0, ln 2, 2 ln 2: mean ln 2, sd ln 2 (69.3 %); half-widths ln 2, ln 2, ln 2 / 2; the others' means
    # 2.828 (outside [0.5, 2]), 2 (inside [1, 4]) and 1.414 (outside [3, 6])
    assert table[2:] == ["| code/ngram | 3 | 2.000 [1.000, 4.000] | 69.3 % | 69.3 % | 1 of 3 | faster 2, undecided 1 |"]


def test_a_demo_block_can_name_an_earlier_demo(tmp_path):
    """`specsweep.docs.NAME(LABEL)` renders a demo generator over the runs of a recorded earlier demo (design.md
    keeps the reasoning of a demo the current one replaced); an unknown label, or a label given to a generator
    that takes none, is one line naming it, and the file is left as it was."""
    head = "run,demo,commit,date,host,wall_s,snakemake_s,band_pct,entry,estimate,lo,hi,verdict\n"
    rows = [("1", "old", "0.900"), ("2", "old", "1.100"), ("1", "new", "2.000"), ("2", "new", "2.200")]
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "demo-runs.csv").write_text(
        head + "".join(f"{n},{d},c,2026-12-05,2-core,700,,3.0,code/ngram,{e},0.5,3.0,undecided\n" for n, d, e in rows)
    )
    old = docs.expected(tmp_path, "specsweep.docs.demo_between_runs(old)").splitlines()[2]
    new = docs.expected(tmp_path, "specsweep.docs.demo_between_runs()").splitlines()[2]
    assert old.startswith("| code/ngram | 2 | 0.995 [0.900, 1.100] |") and new.startswith("| code/ngram | 2 | 2.098 [")
    assert docs.expected(tmp_path, "specsweep.docs.demo_runs(new)") == docs.demo_runs(tmp_path)
    with pytest.raises(SpecsweepError, match=r"^docs/demo-runs.csv: no run of demo 'b1' \(recorded: old, new\)$"):
        docs.expected(tmp_path, "specsweep.docs.demo_runs(b1)")
    with pytest.raises(SpecsweepError, match=r"^generated block specsweep.docs.runs_summary\(old\): only "):
        docs.expected(tmp_path, "specsweep.docs.runs_summary(old)")


def test_the_committed_demo_runs_are_complete():
    """Every recorded run of the current demo has all of its entries, each with an interval around its estimate
    and a verdict of the rule's words."""
    from specsweep.config import load_study

    runs = docs._demo_runs(ROOT)
    assert runs
    # the entries are the demo's drafter cells (config/smoke.yaml's groups; another model than the headline one
    # named), then the CPU entry and the size entries of its two models
    demo = load_study(ROOT / "config" / "smoke.yaml")
    head = demo.raw["headline_model"]
    planned = {
        (f"{c.workload}/{c.step}" if c.model == head else f"{c.model}/{c.workload}/{c.step}")
        for c in demo.cells
        if c.step != demo.baseline
    }
    entries = docs._entries(runs)
    assert set(entries[:-3]) == planned and entries[-3:] == ["CPU", "CPU-size", "CPU-R"]
    for run, rows in runs.items():
        assert [r["entry"] for r in rows] == entries, run
        for r in rows:
            assert r["verdict"] in {"faster", "slower", "equivalent", "undecided", "confirmed", "refuted"}, r
            if r["estimate"]:
                assert float(r["lo"]) <= float(r["estimate"]) <= float(r["hi"]), r


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
