"""The documentation's generated parts, never typed by hand.

A Markdown file (README.md, docs/**/*.md) holds generated blocks:

    <!-- generated: results/h200-shapes/tables/readme.md -->
    ...the file's text...
    <!-- end generated -->

    <!-- generated: specsweep.docs.runs_summary() -->
    ...what the function returns for the repository root...
    <!-- end generated -->

`python -m specsweep.docs` rewrites every block from its source; `--check` only lists the stale ones (exit 1);
tests/test_readme.py fails on any. The README's table of committed runs is `runs_summary`: one row per page
in docs/runs/, its numbers read from the run's committed tables (a page whose run has no committed tables
yet gets a row that says so).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path

import yaml

from . import claims, crossover, paths, stats
from .escape import md_text, md_url

ROOT = Path(__file__).resolve().parents[2]
#: A block; an empty one (its end marker on the next line) matches too, so that it is filled, not skipped.
BLOCK = re.compile(r"(<!-- generated: (\S+) -->\n)(.*?)\n?(<!-- end generated -->)", re.S)
RUN_PAGES = "docs/runs"
#: Run pages that are not runs.
NOT_RUNS = ("README",)
#: Above this many models a row names the count, not the list.
MAX_NAMED_MODELS = 4


def doc_files(root: Path = ROOT) -> list[Path]:
    """The files whose generated blocks are kept in sync: README.md and every Markdown file under docs/."""
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


def blocks(text: str) -> list[tuple[str, str]]:
    """(source, content) of each generated block of a Markdown text."""
    return [(m.group(2), m.group(3)) for m in BLOCK.finditer(text)]


def expected(root: Path, source: str) -> str:
    """What a block of this source holds: the file's text, or what `specsweep.docs.NAME()` returns."""
    if source.startswith("specsweep.docs.") and source.endswith("()"):
        fn: Callable[[Path], str] = GENERATORS[source[len("specsweep.docs.") : -2]]
        return fn(root).strip()
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
def run_configs(root: Path = ROOT) -> dict[str, Path]:
    """Run name -> the config file under config/ that names it (`run:`)."""
    out: dict[str, Path] = {}
    for path in sorted((root / "config").glob("*.yaml")):
        doc = yaml.safe_load(path.read_text())
        if isinstance(doc, dict) and isinstance(doc.get("run"), str):
            out.setdefault(doc["run"], path)
    return out


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
    return sorted(p.stem for p in (root / RUN_PAGES).glob("*.md") if p.stem not in NOT_RUNS)


def _models(names: list[str], dummy: bool) -> str:
    shown = ", ".join(md_text(n) for n in names) if len(names) <= MAX_NAMED_MODELS else f"{len(names)} models"
    return shown + (" (random weights)" if dummy else "")


def _column(path: Path, name: str) -> list:
    import pyarrow.parquet as pq

    return pq.read_table(path, columns=[name]).column(name).to_pylist()


def _row(root: Path, run: str, config: Path | None) -> str:

    page = f"[{md_text(run)}]({md_url(f'{RUN_PAGES}/{run}.md')})"
    what = measures(config) if config else ""
    cfg = yaml.safe_load(config.read_text()) if config else {}
    dummy = bool(cfg.get("models")) and all(m.get("weights") == "dummy" for m in cfg["models"])
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
    else:
        return f"| {page} | – | {what} | not committed yet | – | – | – |"
    return f"| {page} | {models} | {what} | {done} | {starts} | {reps} | {out} |"


def runs_summary(root: Path = ROOT) -> str:
    """The README's table of committed runs: one row per page in docs/runs/."""
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


def claim_rules(root: Path = ROOT) -> str:
    """The claims and the rule that decides each, as `specsweep.claims` states them."""
    rows = ["| id | claim | rule |", "|---|---|---|"]
    rows += [f"| {cid} | {claims.LABELS[cid]} | {claims.RULES[cid]} |" for cid in claims.RULES]
    c9 = " ".join((claims.decide_c9.__doc__ or "").split(":", 1)[-1].split())
    rows.append(f"| C9 | {claims.C9_LABEL} | {c9} |")
    return "\n".join(rows)


def concurrency_summary(root: Path = ROOT) -> str:
    """The README's speedup against concurrency: one row per (run, model, workload, drafter) of every committed
    run with a crossover table, the speedup over vanilla at each measured b with its verdict, and b*."""
    import pyarrow.parquet as pq

    rows: list[tuple[str, str, str, str, dict[int, str], str]] = []
    bs: set[int] = set()
    for run in _pages(root):
        tables = paths.tables_dir(run, root / paths.RESULTS)
        if not (tables / "crossover.parquet").is_file():
            continue
        # (model, workload, step) -> b -> "speedup verdict", the all-at-once point (no b) left out
        at: dict[tuple[str, str, str], dict[int, str]] = {}
        for r in pq.read_table(tables / "speedup.parquet").to_pylist():
            if r["concurrency"] is None:
                continue
            b = int(r["concurrency"])
            bs.add(b)
            curve = at.setdefault((r["model"], crossover.base_workload(r["workload"]), r["config"]), {})
            if r["speedup"] is not None:
                curve[b] = f"{r['speedup']:.2f} {r['verdict'].split(' (')[0]}"
        for x in pq.read_table(tables / "crossover.parquet").to_pylist():
            curve = at.get((x["model"], x["workload"], x["step"]), {})
            if x["step"] != "vanilla-sync" and curve:
                rows.append((run, x["model"], x["workload"], x["step"], curve, crossover.describe(x)))
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


GENERATORS: dict[str, Callable[[Path], str]] = {
    "concurrency_summary": concurrency_summary,
    "fidelity_summary": fidelity_summary,
    "runs_summary": runs_summary,
    "verdict_rule": verdict_rule,
    "claim_rules": claim_rules,
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m specsweep.docs", description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="list the stale generated blocks; exit 1 if any")
    args = ap.parse_args(argv)
    if args.check:
        bad = stale()
        for line in bad:
            print(f"stale: {line}")
        return 1 if bad else 0
    for path in refresh():
        print(f"rewrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
