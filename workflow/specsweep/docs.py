"""The documentation's generated parts, never typed by hand.

A Markdown file (README.md, docs/**/*.md, results/{run}/README.md) holds generated blocks:

    <!-- generated: results/h200-shapes/tables/readme.md -->
    ...the file's text...
    <!-- end generated -->

    <!-- generated: specsweep.docs.runs_summary() -->
    ...what the function returns for the repository root...
    <!-- end generated -->

The generators of docs/demo-runs.csv read the current demo (the last row's label) from `NAME()` and a recorded
earlier demo from `NAME(LABEL)`, e.g. `specsweep.docs.demo_between_runs(article)`.

`python -m specsweep.docs` rewrites every block from its source; `--check` only lists the stale ones (exit 1);
tests/test_readme.py fails on any. A committed run is one folder, results/{run}/, holding its config.yaml (the
config it ran), its README.md (the run's page) and what it measured; the README's table of committed runs is
`runs_summary`: one row per run page, its numbers read from the run's committed tables (a page whose run has
no committed tables yet gets a row that says so).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import re
import sys
from collections import Counter
from collections.abc import Callable
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import yaml

from . import claims, crossover, paths, stats
from .errors import SpecsweepError
from .escape import md_text, md_url

ROOT = Path(__file__).resolve().parents[2]
#: A block; an empty one (its end marker on the next line) matches too, so that it is filled, not skipped.
BLOCK = re.compile(r"(<!-- generated: (\S+) -->\n)(.*?)\n?(<!-- end generated -->)", re.S)
#: A committed run's page and the config it ran, in its folder results/{run}/.
RUN_PAGE = "README.md"
RUN_CONFIG = "config.yaml"
#: Above this many models a row names the count, not the list.
MAX_NAMED_MODELS = 4
#: The fresh `make demo` runs, one row per (run, entry): its speedups with their verdicts and the CPU entry.
DEMO_RUNS = "docs/demo-runs.csv"
#: The entry of a demo run that is the CPU profile's claim (its estimate: the pooled CV of tok/s, in %).
CPU_ENTRY = "CPU"


def doc_files(root: Path = ROOT) -> list[Path]:
    """The files whose generated blocks are kept in sync: README.md, every Markdown file under docs/ and every
    run page (results/{run}/README.md)."""
    return [root / "README.md", *sorted((root / "docs").rglob("*.md")), *run_pages(root).values()]


def blocks(text: str) -> list[tuple[str, str]]:
    """(source, content) of each generated block of a Markdown text."""
    return [(m.group(2), m.group(3)) for m in BLOCK.finditer(text)]


#: A generator's source: `specsweep.docs.NAME()`, or `specsweep.docs.NAME(DEMO)` for the demo generators
#: (DEMO_GENERATORS) given a recorded demo's label instead of the current one.
CALL = re.compile(r"specsweep\.docs\.(\w+)\(([\w.+-]*)\)")


def expected(root: Path, source: str) -> str:
    """What a block of this source holds: the file's text, or what `specsweep.docs.NAME()` (or
    `NAME(DEMO)`) returns."""
    if m := CALL.fullmatch(source):
        name, arg = m.groups()
        if not arg:
            return GENERATORS[name](root).strip()
        if name not in DEMO_GENERATORS:
            raise SpecsweepError(f"generated block {source}: only {', '.join(DEMO_GENERATORS)} take a demo label")
        return DEMO_GENERATORS[name](root, arg).strip()
    return (root / source).read_text().strip()


def stale(root: Path = ROOT) -> list[str]:
    """`file: source` for each generated block whose content differs from its source."""
    out = []
    for path in doc_files(root):
        for source, content in blocks(path.read_text()):
            if content.strip() != expected(root, source):
                out.append(f"{path.relative_to(root)}: {source}")
    return out


def refresh(root: Path = ROOT) -> list[Path]:
    """Rewrite every generated block from its source; the files changed."""
    changed = []
    for path in doc_files(root):
        text = path.read_text()
        new = BLOCK.sub(lambda m: m.group(1) + expected(root, m.group(2)) + "\n" + m.group(4), text)
        if new != text:
            path.write_text(new)
            changed.append(path)
    return changed


# ------------------------------------------------------------------------------------------- generators
def run_pages(root: Path = ROOT) -> dict[str, Path]:
    """Run name -> its page, results/{run}/README.md, for every run folder that has one."""
    return {p.parent.name: p for p in sorted((root / paths.RESULTS).glob(f"*/{RUN_PAGE}"))}


def run_configs(root: Path = ROOT) -> dict[str, Path]:
    """Run name -> the config it ran, results/{run}/config.yaml, for every run folder that has one."""
    return {p.parent.name: p for p in sorted((root / paths.RESULTS).glob(f"*/{RUN_CONFIG}"))}


def measures(config: Path) -> str:
    """What a run measures: its config header's first clause (the comment up to its first colon)."""
    header = []
    for line in config.read_text().splitlines():
        if not line.startswith("#"):
            break
        header.append(line.lstrip("#").strip())
    text = " ".join(header)
    return text.split(": ", 1)[0].rstrip(".") if text else ""


def _pages(root: Path) -> list[str]:
    return sorted(run_pages(root))


def _models(names: list[str], dummy: set[str]) -> str:
    """The run's models; all of them with random weights: '(random weights)' after them, some: after each."""
    if dummy and dummy >= set(names):
        shown = ", ".join(md_text(n) for n in names) if len(names) <= MAX_NAMED_MODELS else f"{len(names)} models"
        return shown + " (random weights)"
    if len(names) > MAX_NAMED_MODELS:
        some = sum(n in dummy for n in names)
        return f"{len(names)} models" + (f" ({some} with random weights)" if some else "")
    return ", ".join(md_text(n) + (" (random weights)" if n in dummy else "") for n in names)


def dummy_models(config: Path | None) -> set[str]:
    """The models a run's config gives random weights (`weights: dummy`)."""
    cfg = yaml.safe_load(config.read_text()) if config else {}
    return {m["name"] for m in cfg.get("models") or [] if m.get("weights") == "dummy"}


def _column(path: Path, name: str) -> list:
    from .tables import read_parquet  # checked against the set's MANIFEST.json

    return read_parquet(path.parent, path.name).column(name).to_pylist()


def _row(root: Path, run: str, config: Path | None) -> str:
    page = f"[{md_text(run)}]({md_url(f'{paths.RESULTS}/{run}/{RUN_PAGE}')})"
    what = measures(config) if config else ""
    dummy = dummy_models(config)
    tables = paths.tables_dir(run, root / paths.RESULTS)
    pre = paths.preflight_dir(run, root / paths.RESULTS)
    md, parquet, summary_json = paths.PREFLIGHT_REPORT
    if (tables / "measurements.parquet").is_file():
        starts = json.loads((tables / "gpu_time.json").read_text())["engine_starts"]
        reps = ", ".join(sorted({r for r in _column(tables / "cells.parquet", "replication") if r})) or "–"
        status = _column(tables / "measurements.parquet", "status")
        done = f"{status.count('ok')} of {len(status)}"
        models = _models(list(dict.fromkeys(_column(tables / "measurements.parquet", "model"))), dummy)
        out = f"[claims]({md_url((tables / 'claims.md').relative_to(root).as_posix())})"
    elif (pre / summary_json).is_file():
        summary = json.loads((pre / summary_json).read_text())
        verdicts = ", ".join(f"{v} {k}" for k, v in summary["cells"].items())
        done = f"{sum(summary['cells'].values())} verdicts: {verdicts}"
        starts = summary["engines"].get("ok", 0) + summary["engines"].get("failed", 0)
        reps = "one pass per cell"
        models = _models(list(dict.fromkeys(_column(pre / parquet, "model"))), dummy)
        out = f"[report]({md_url((pre / md).relative_to(root).as_posix())})"
    elif checks := sorted(paths.run_dir(run, root / paths.RESULTS).glob("fidelity/**/*.json")):
        docs = [json.loads(c.read_text()) for c in checks]
        done = f"{len(docs)} fidelity check" + ("s" if len(docs) != 1 else "")
        starts = sum(2 * d["runs_each"] for d in docs)  # each side's fresh engines
        reps = "engine starts"
        checked = list(dict.fromkeys(d["cell"].split("/")[0] for d in docs))
        models = _models(checked, {d["cell"].split("/")[0] for d in docs if d["model_weights"] == "dummy"})
        out = "[checks](docs/running.md)"
    else:
        return f"| {page} | – | {what} | not committed yet | – | – | – |"
    return f"| {page} | {models} | {what} | {done} | {starts} | {reps} | {out} |"


def runs_summary(root: Path = ROOT) -> str:
    """The README's table of committed runs: one row per run page, results/{run}/README.md."""
    configs = run_configs(root)
    rows = [_row(root, run, configs.get(run)) for run in _pages(root)]
    head = [
        "| run | model(s) | what it measures | measurements | engine starts | a cell's repeats are | decided |",
        "|---|---|---|---|---:|---|---|",
    ]
    return "\n".join(head + rows)


def verdict_rule(root: Path = ROOT) -> str:
    """The tables' verdict rule, as `specsweep.stats.VERDICT_RULE` states it."""
    return stats.VERDICT_RULE


def arm_coverage(root: Path = ROOT) -> str:
    """design.md's table of the verdict rule's coverage per arm: each way of pooling the between-start spread
    simulated at the committed runs' own per-cell spreads (specsweep.verdictsim.arm_coverage; committed runs
    only, those with a run page)."""
    from . import verdictsim

    arms = verdictsim.arm_coverage(root / "results", runs=set(run_pages(root)))
    return (
        "Per committed run measured on engine starts and way of pooling: the lowest coverage over the run's "
        "comparisons (the noisiest, named workload/step), the median coverage, and the median power (a true "
        f"{verdictsim.POWER_AT:.2f}x called `faster`), in %, from {verdictsim.SIMS:,} simulated runs; a cell in "
        f"bold misses {100 * verdictsim.ARM_MIN_COVERAGE:.0f} %\n\n" + verdictsim.arm_markdown(arms).rstrip("\n")
    )


def plan_summary(root: Path = ROOT) -> str:
    """design.md's table of `specsweep plan` over the committed runs whose models have a between-start spread:
    per run and model, the spread, the n the run used with its power, and the n that reaches the plan's target
    in each decision scenario (specsweep.plan, its defaults: a true 1.10x called `faster` in 80 % of studies)."""
    from . import plan, verdictsim

    names = [s.name for s in verdictsim.DECISION]
    rows = [
        f"| run | model | cells | between-start sd | n used | its power ({' / '.join(names)}) | "
        f"n for {100 * plan.TARGET:.0f} % ({' / '.join(names)}) |",
        "|---|---|---:|---:|---:|---|---|",
    ]
    # committed runs only (those with a run page): a run made here, `make demo`'s smoke, is not the doc's
    committed = [page.parent / "tables" for page in run_pages(root).values()]
    for tables in [t / "measurements.parquet" for t in committed if (t / "measurements.parquet").is_file()]:
        for p in plan.plan(tables.parent):
            m = p.noise
            if plan.why_none(p) or m.sd is None:
                continue
            power = " / ".join(plan.pct(p.power_used[n]) for n in names)
            needed = " / ".join(str(p.n_needed[n]) if p.n_needed[n] else f"> {plan.N_MAX}" for n in names)
            rows.append(
                f"| {md_text(tables.parent.parent.name)} | {md_text(m.model)} | {m.cells} | {100 * m.sd:.1f} % | "
                f"{m.n_used} | {power} | {needed} |"
            )
    return "\n".join(rows)


def pass_spread(root: Path = ROOT) -> str:
    """design.md's table of between-start spread against pass length over the committed runs
    (specsweep.plan.pass_spread): per model, workload, arm and device with a slope (3 or more cells, passes of several
    lengths), the passes, the between-start sd of log tok/s and of the pass in seconds, and the slope."""
    from . import plan

    def three(x: tuple[float, float, float], scale: float, spec: str, unit: str) -> str:
        med, lo, hi = (format(scale * v, spec) for v in x)
        return f"{med}{unit} ({lo}–{hi})"

    rows = [
        "| model | workload | step | device | cells | pass | between-start sd of log tok/s | of the pass | slope |",
        "|---|---|---|---|---:|---|---|---|---:|",
    ]
    for g in plan.pass_spread(root / "results"):
        if g.slope is None:
            continue
        rows.append(
            f"| {md_text(g.model)} | {md_text(g.workload)} | {g.arm} | {md_text(g.device)} | {g.cells} | "
            f"{g.pass_s[0]:.1f}–{g.pass_s[1]:.1f} s | {three(g.sd_log, 100, '.1f', ' %')} | "
            f"{three(g.sd_s, 1, '.2f', ' s')} | {g.slope:.2f} |"
        )
    return "\n".join(rows)


def claim_rules(root: Path = ROOT) -> str:
    """The claims and the rule that decides each, as `specsweep.claims` states them."""
    rows = ["| id | claim | rule |", "|---|---|---|"]
    rows += [f"| {cid} | {claims.LABELS[cid]} | {claims.RULES[cid]} |" for cid in claims.RULES]
    c9 = " ".join((claims.decide_c9.__doc__ or "").split(":", 1)[-1].split())
    rows.append(f"| C9 | {claims.C9_LABEL} | {c9} |")
    return "\n".join(rows)


def concurrency_summary(root: Path = ROOT) -> str:
    """The README's speedup against concurrency: one row per (run, model, workload, drafter) of every committed
    run with a crossover table, the speedup over vanilla at each measured b with its verdict, and b* (or the
    crossings, crossover.describe); a model with random weights is named so in its row."""
    from .tables import read_parquet  # checked against the set's MANIFEST.json

    rows: list[tuple[str, str, str, str, dict[int, str], str]] = []
    bs: set[int] = set()
    configs = run_configs(root)
    for run in _pages(root):
        dummy = dummy_models(configs.get(run))
        tables = paths.tables_dir(run, root / paths.RESULTS)
        if not (tables / "crossover.parquet").is_file():
            continue
        # (model, workload, step) -> b -> "speedup verdict", the all-at-once point (no b) left out
        at: dict[tuple[str, str, str], dict[int, str]] = {}
        for r in read_parquet(tables, "speedup.parquet").to_pylist():
            if r["concurrency"] is None:
                continue
            b = int(r["concurrency"])
            bs.add(b)
            curve = at.setdefault((r["model"], crossover.base_workload(r["workload"]), r["config"]), {})
            if r["speedup"] is not None:
                curve[b] = f"{r['speedup']:.2f} {r['verdict'].split(' (')[0]}"
        for x in read_parquet(tables, "crossover.parquet").to_pylist():
            curve = at.get((x["model"], x["workload"], x["step"]), {})
            if x["step"] != "vanilla-sync" and curve:
                model = x["model"] + (" (random weights)" if x["model"] in dummy else "")
                rows.append((run, model, x["workload"], x["step"], curve, crossover.describe(x)))
    cols = sorted(bs)
    head = ["| run | model | workload | drafter | " + " | ".join(f"b = {b}" for b in cols) + " | b* |"]
    head.append("|---|---|---|---|" + "---|" * len(cols) + "---|")
    body = [
        f"| {md_text(run)} | {md_text(m)} | {md_text(w)} | {md_text(d)} | "
        + " | ".join(curve.get(b, "–") for b in cols)
        + f" | {bstar} |"
        for run, m, w, d, curve, bstar in rows
    ]
    return "\n".join(head + body)


def fidelity_verdict(ratio: float | None, lo: float | None, hi: float | None) -> str:
    """VERDICT_RULE's verdict of specsweep over run_vllm at the fixed band stats.FIDELITY_BAND, faster and slower
    named for what they mean here: "specsweep higher" / "specsweep lower" (than vLLM's own harness)."""
    v = stats.verdict(ratio, lo, hi, band=stats.FIDELITY_BAND)
    return v.replace("faster", "specsweep higher").replace("slower", "specsweep lower")


def fidelity_summary(root: Path = ROOT) -> str:
    """Every committed fidelity check (results/{run}/fidelity/**.json): specsweep's engine against vLLM's
    run_vllm on one cell, each side's median over its fresh-engine passes, their ratio with its Welch interval
    on log throughput (stats.ratio_ci) and its verdict (fidelity_verdict). Its links are relative to docs/,
    where the block lives (docs/running.md)."""
    rows = [
        "| run | cell | weights | engine starts (each side) | specsweep tok/s (CV) | run_vllm tok/s (CV) "
        f"| ratio [95 % interval] | at ±{100 * stats.FIDELITY_BAND:g} % | vLLM |",
        "|---|---|---|---:|---:|---:|---|---|---|",
    ]
    for path in sorted((root / paths.RESULTS).glob("*/fidelity/**/*.json")):
        d = json.loads(path.read_text())
        ratio, lo, hi = d["ratio_of_medians"], d["ratio_lo"], d["ratio_hi"]
        interval = f"[{lo:.3f}, {hi:.3f}]" if lo is not None and hi is not None else "[–]"
        link = f"[{md_text(d['cell'])}]({md_url('../' + path.relative_to(root).as_posix())})"  # it lives in docs/
        rows.append(
            f"| {md_text(d['run'])} | {link} | {md_text(d['model_weights'])} | {d['runs_each']} "
            f"| {d['specsweep_median_tok_s']:,.0f} ({100 * d['specsweep_cv']:.1f} %) "
            f"| {d['harness_median_tok_s']:,.0f} ({100 * d['harness_cv']:.1f} %) | {ratio:.3f} {interval} "
            f"| {fidelity_verdict(ratio, lo, hi)} | {md_text(d['versions'].get('vllm'))} |"
        )
    if len(rows) == 2:
        rows.append("| – | no fidelity check committed | – | – | – | – | – | – | – |")
    return "\n".join(rows)


def _demo_rows(root: Path) -> list[dict[str, str]]:
    with (root / DEMO_RUNS).open(newline="") as fh:
        return list(csv.DictReader(fh))


def _demo_runs(root: Path, demo: str | None = None) -> dict[str, list[dict[str, str]]]:
    """Run -> its rows, in the file's order, for the runs of one demo: `demo`, by default the current one (the
    last row's `demo`)."""
    rows = _demo_rows(root)
    label = rows[-1]["demo"] if demo is None else demo
    runs: dict[str, list[dict[str, str]]] = {}
    for r in rows:
        if r["demo"] == label:
            runs.setdefault(r["run"], []).append(r)
    if not runs:
        known = ", ".join(dict.fromkeys(r["demo"] for r in rows))
        raise SpecsweepError(f"{DEMO_RUNS}: no run of demo {label!r} (recorded: {known})")
    return runs


def _entries(runs: dict[str, list[dict[str, str]]]) -> list[str]:
    return list(dict.fromkeys(r["entry"] for rows in runs.values() for r in rows))


def _two(x: str) -> str:
    """A recorded estimate at two decimals, rounded half up from its text (1.175 -> 1.18)."""
    return str(Decimal(x).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP))


def demo_runs(root: Path = ROOT, demo: str | None = None) -> str:
    """design.md's table of the fresh `make demo` runs (docs/demo-runs.csv): one row per run, each entry's
    speedup with its 95 % interval and verdict, the CPU entry with its pooled CV."""
    runs = _demo_runs(root, demo)
    entries = _entries(runs)
    speedups = [e for e in entries if e != CPU_ENTRY]
    head = "| run | commit | recorded | host | wall | in Snakemake | " + " | ".join(speedups) + " | band | CPU entry |"
    lines = [head, "|---:|---|---|---|---:|---:|" + "---|" * len(speedups) + "---:|---|"]
    for run, rows in runs.items():
        by = {r["entry"]: r for r in rows}
        first = rows[0]
        cells = [
            f"{by[e]['estimate']} [{by[e]['lo']}, {by[e]['hi']}] {by[e]['verdict']}" if e in by else "–"
            for e in speedups
        ]
        cpu = by.get(CPU_ENTRY)
        cv = f", {cpu['estimate']} % [{cpu['lo']}, {cpu['hi']}]" if cpu and cpu["estimate"] else ""
        lines.append(
            f"| {run} | {first['commit'] or '–'} | {first['date']} | {demo_host(first)} | {first['wall_s']} s "
            f"| {first['snakemake_s'] + ' s' if first['snakemake_s'] else '–'} | "
            + " | ".join(cells)
            + f" | ±{first['band_pct']} % | {cpu['verdict'] + cv if cpu else '–'} |"
        )
    return "\n".join(lines)


def demo_between_runs(root: Path = ROOT, demo: str | None = None) -> str:
    """design.md's check of the demo's intervals against the other fresh runs (docs/demo-runs.csv), one row per
    speedup entry: the runs' geometric mean and range, the standard deviation of the log estimate between runs
    beside the median half-width of one run's 95 % interval (in log units, as %), and in how many runs the
    interval holds the geometric mean of the other runs' estimates. If a run's interval took in all that moves
    a speedup between fresh runs, a little under 19 in 20 would hold it (the other runs' mean has noise of its
    own); a cell whose estimate moves more between runs than within one changes verdict between runs when it
    lies near the band."""
    runs = _demo_runs(root, demo)
    lines = [
        "| entry | runs | geometric mean [range] | sd between runs | median half-width in a run "
        "| holds the other runs' mean | verdicts |",
        "|---|---:|---|---:|---:|---:|---|",
    ]
    for e in _entries(runs):
        if e == CPU_ENTRY:
            continue
        mine = [r for rs in runs.values() for r in rs if r["entry"] == e and r["estimate"] and r["lo"] and r["hi"]]
        logs = [math.log(float(r["estimate"])) for r in mine]
        n = len(logs)
        if n < 2:
            continue
        total = sum(logs)
        mean = total / n
        sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / (n - 1))
        half = stats.median([(math.log(float(r["hi"])) - math.log(float(r["lo"]))) / 2 for r in mine]) or 0.0
        others = [math.exp((total - x) / (n - 1)) for x in logs]  # each run's: the other runs' mean
        held = sum(float(r["lo"]) <= m <= float(r["hi"]) for r, m in zip(mine, others, strict=True))
        counts = sorted(Counter(r["verdict"] for r in mine).items(), key=lambda kv: (-kv[1], kv[0]))
        lines.append(
            f"| {e} | {n} | {math.exp(mean):.3f} [{math.exp(min(logs)):.3f}, "
            f"{math.exp(max(logs)):.3f}] | {100 * sd:.1f} % | {100 * half:.1f} % | {held} of {n} | "
            + ", ".join(f"{v} {k}" for v, k in counts)
            + " |"
        )
    return "\n".join(lines)


def demo_expectation(root: Path = ROOT, demo: str | None = None) -> str:
    """The README's sentence of what to expect from `make demo`: over the recorded fresh runs of the current
    demo, each entry's verdicts with their counts (the speedups' range beside each drafter), how many runs
    agree with the most common verdict of every entry, and the range of their walls."""
    runs = _demo_runs(root, demo)
    rows = [r for rs in runs.values() for r in rs]

    def span(lo: str, hi: str) -> str:  # one value when every run gave the same
        return lo if lo == hi else f"{lo}–{hi}"

    parts = []
    for e in _entries(runs):
        mine = [r for r in rows if r["entry"] == e]
        said = _verdict_counts(Counter(r["verdict"] for r in mine))
        if e == CPU_ENTRY:
            parts.append(f"the CPU entry was {said}")
        else:
            est = sorted(Decimal(r["estimate"]) for r in mine)
            parts.append(f"{e} ({span(_two(str(est[0])), _two(str(est[-1])))}×) was {said}")
    usual = {e: Counter(r["verdict"] for r in rows if r["entry"] == e).most_common(1)[0][0] for e in _entries(runs)}
    agree = sum(all(r["verdict"] == usual[r["entry"]] for r in rs) for rs in runs.values())
    walls = sorted(int(rs[0]["wall_s"]) for rs in runs.values())
    n = len(runs)
    agreed = f"{agree} of the {n} gave every entry its most common verdict, and a run took" if n > 1 else "it took"
    host = {run: demo_host(rs[0]) for run, rs in runs.items()}
    kinds = Counter(host.values())
    if len(kinds) == 1:
        where = f"on {next(iter(kinds))} hosts" if n > 1 else f"on a {next(iter(kinds))} host"
        by_host = ""
    else:
        where = "on " + " and ".join(f"{k} hosts ({c})" for k, c in sorted(kinds.items()))
        by_host = "; " + _by_host(runs, host)
    return (
        f"In {n} fresh run{'s' if n > 1 else ''} of `make demo` {where}, "
        + ", ".join(parts[:-1])
        + f", and {parts[-1]}; {agreed} {span(str(walls[0]), str(walls[-1]))} s from a fresh clone, installing "
        f"included{by_host}."
    )


def demo_host(row: dict[str, str]) -> str:
    """A demo run's kind of host, from its row: cores, CPU model and the ISA of vLLM's CPU kernels where the
    run's cells named them (`2-core Intel(R) Xeon(R) Processor, avx512_bf16`), else the recorded `host`
    (`2-core`)."""
    model, isa, cores = (row.get(k) or "unknown" for k in ("cpu_model", "cpu_isa", "cpu_cores"))
    if model == "unknown":
        return row["host"].split()[0]
    return f"{cores}-core {model}" + ("" if isa == "unknown" else f", {isa}")


def _verdict_counts(counts: Counter[str]) -> str:
    """`faster` in 9 and `undecided` in 1: each verdict with its count, the most common first."""
    return " and ".join(f"`{v}` in {n}" for v, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def _by_host(runs: dict[str, list[dict[str, str]]], host: dict[str, str]) -> str:
    """Which entries gave one verdict on every kind of host (`host`: each run's kind), which gave one verdict on
    each kind but not the same on all (they depend on the host), and which varied within a kind; the last two
    with each kind's counts."""
    kinds = sorted(set(host.values()))
    held: list[str] = []
    depends: list[str] = []
    varied: list[str] = []
    for e in _entries(runs):
        per = {
            k: Counter(r["verdict"] for run, rs in runs.items() if host[run] == k for r in rs if r["entry"] == e)
            for k in kinds
        }
        name = "the CPU entry" if e == CPU_ENTRY else e
        if len({v for c in per.values() for v in c}) == 1:
            held.append(name)
            continue
        said = f"{name} (" + "; ".join(f"{k}: {_verdict_counts(c)}" for k, c in per.items()) + ")"
        (depends if all(len(c) == 1 for c in per.values()) else varied).append(said)
    out = f"the same verdict on every kind of host: {', '.join(held) or 'none'}"
    if depends:
        out += f"; depending on the host: {', '.join(depends)}"
    if varied:
        out += f"; varying within a kind of host: {', '.join(varied)}"
    return out


#: The generators that read docs/demo-runs.csv, which take a demo's label (`specsweep.docs.NAME(LABEL)`).
DEMO_GENERATORS: dict[str, Callable[[Path, str], str]] = {
    "demo_between_runs": demo_between_runs,
    "demo_expectation": demo_expectation,
    "demo_runs": demo_runs,
}

GENERATORS: dict[str, Callable[[Path], str]] = {
    "concurrency_summary": concurrency_summary,
    "demo_between_runs": demo_between_runs,
    "demo_expectation": demo_expectation,
    "demo_runs": demo_runs,
    "fidelity_summary": fidelity_summary,
    "runs_summary": runs_summary,
    "verdict_rule": verdict_rule,
    "claim_rules": claim_rules,
    "pass_spread": pass_spread,
    "arm_coverage": arm_coverage,
    "plan_summary": plan_summary,
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m specsweep.docs", description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="list the stale generated blocks; exit 1 if any")
    args = ap.parse_args(argv)
    try:
        if args.check:
            bad = stale()
            for line in bad:
                print(f"stale: {line}")
            return 1 if bad else 0
        for path in refresh():
            print(f"rewrote {path.relative_to(ROOT)}")
    except SpecsweepError as err:
        print(f"specsweep.docs: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
