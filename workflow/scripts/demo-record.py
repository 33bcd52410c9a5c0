#!/usr/bin/env python3
"""Append one fresh `make demo` run to docs/demo-runs.csv: every speedup of the run's tables with its 95 %
interval and verdict, and the CPU entry's pooled between-start CV with its interval.

    git clone . ../demo && cd ../demo && /usr/bin/time -f %e make demo SONNET=...   # note the seconds
    python workflow/scripts/demo-record.py --tables ../demo/results/smoke/tables --demo article \
        --commit $(git -C ../demo rev-parse --short HEAD) --wall-s 812 --snakemake-s 655 [--host "2-core ..."]

`--wall-s` is the whole `make demo` of the fresh clone (installing included), `--snakemake-s` its Snakemake
part (the time between the first and the last line Snakemake dates in its log); the run's CPU comes from its
cells (CPU_COLUMNS). The run number is the next one of the `--demo` label; the rows are appended, never
rewritten. `python -m specsweep.docs` then renders design.md's table and the README's sentence from the file.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "workflow"))

from specsweep import paths, stats  # noqa: E402
from specsweep.errors import SpecsweepError  # noqa: E402
from specsweep.escape import term_text  # noqa: E402
from specsweep.jsonio import read_json  # noqa: E402
from specsweep.safeyaml import load_yaml  # noqa: E402
from specsweep.tables import read_parquet  # noqa: E402
from specsweep.tables.fileset import checked_bytes  # noqa: E402

CSV = ROOT / "docs" / "demo-runs.csv"
#: The run's CPU (provenance.host_cpu, as its cells record it): model name, the ISA of vLLM's CPU kernels, cores
#: and memory; `unknown` in rows recorded before cells named it.
CPU_COLUMNS = ["cpu_model", "cpu_isa", "cpu_cores", "memory_gib"]
COLUMNS = ["run", "demo", "commit", "date", "host", "wall_s", "snakemake_s", "band_pct", "entry", "estimate", "lo",
           "hi", "verdict", *CPU_COLUMNS]  # fmt: skip
CV = re.compile(r"pooled over \d+ cells: ([\d.]+)% \[([\d.]+)%, ([\d.]+)%\]")


def _fmt(v: float | None) -> str:
    return "" if v is None else f"{v:.3f}"


#: The size entries of a CPU run's claims (claims.SIZE_ENTRIES): the first pair's ratio and its interval.
SIZE_IDS = ("CPU-size", "CPU-R")
RATIO = re.compile(r": (?:speedup|R) ([\d.]+) \[([\d.]+), ([\d.]+)\]")


def entries(tables: Path, headline: str | None = None) -> list[dict[str, str]]:
    """One row per speedup (the workload, `code@b1` at a concurrency, then the step; another model than the
    demo's `headline` model first names its model: `gemma3-270m/code/ngram`), in the tables' order, the CPU
    entry, and the size entries where the run has them (their first pair's ratio)."""
    out = []
    for r in read_parquet(tables, "speedup.parquet").to_pylist():
        verdict = (r.get("verdict") or "missing").split(" ")[0]
        name = f"{r['workload']}/{r['config']}"
        if headline is not None and r["model"] != headline:
            name = f"{r['model']}/{name}"
        out.append({"entry": name, "estimate": _fmt(r.get("speedup")),
                    "lo": _fmt(r.get("speedup_lo")), "hi": _fmt(r.get("speedup_hi")), "verdict": verdict})  # fmt: skip
    claims = read_claims(tables)
    cpu = next((c for c in claims if c["id"] == "CPU"), None)
    if cpu is not None:
        m = CV.search(cpu["evidence"])
        est, lo, hi = m.groups() if m else ("", "", "")
        out.append({"entry": "CPU", "estimate": est, "lo": lo, "hi": hi, "verdict": cpu["verdict"]})
    for c in claims:
        if c["id"] in SIZE_IDS and c["verdict"] != "not covered by this run":
            m = RATIO.search(c["evidence"])
            est, lo, hi = m.groups() if m else ("", "", "")
            out.append({"entry": c["id"], "estimate": est, "lo": lo, "hi": hi, "verdict": c["verdict"]})
    return out


def run_cells(tables: Path) -> list[tuple[Path, Any]]:
    """The run's cell documents (results/{run}/cells beside its tables), each with its path, read once for the
    checks below; a cell that is not JSON is one line naming it."""
    return [(path, read_json(path, "cell")) for path in paths.cell_files(tables.parent / "cells")]


def run_cpu(tables: Path, cells: list[tuple[Path, Any]]) -> dict[str, str]:
    """The CPU the run's cells record: one CPU, else a one-line error (a demo measured on two hosts is no one
    run); `unknown` where its cells predate the record."""
    seen = set()
    for _, doc in cells:
        cpu = doc.get("provenance", {}).get("cpu")
        if cpu:
            seen.add((cpu["model"], cpu["isa"], str(cpu["cores"]), str(cpu["memory_gib"])))
    if len(seen) > 1:
        raise SpecsweepError(f"--tables {tables}: its cells ran on {len(seen)} CPUs: {sorted(seen)}")
    return dict(zip(CPU_COLUMNS, seen.pop() if seen else ("unknown",) * len(CPU_COLUMNS), strict=True))


#: The CPU profile `make demo` runs (config/smoke.yaml): a run of another device or profile is no CPU demo run.
DEMO_RUN, DEMO_DEVICE = "smoke", "cpu"


def check_cpu_demo(tables: Path, cells: list[tuple[Path, Any]]) -> None:
    """The tables are a CPU demo run's: its config (results/<run>/config.yaml, beside the tables, as committed
    runs keep it) or, where a run folder has none (a fresh `make demo` writes only cells, workloads and tables),
    every cell of the run beside the tables names the CPU profile's run and device cpu; an H200 run's tables are
    refused, not recorded as a 2-core CPU demo."""
    config = tables.parent / "config.yaml"
    if config.is_file():
        cfg = load_yaml(config)
        found = {(cfg.get("run"), cfg.get("device", "gpu"))}
    else:
        if not cells:
            raise SpecsweepError(
                f"--tables {tables}: neither a config.yaml nor cells beside it, so it is not known to be a CPU demo run"
            )
        found = set()
        for path, doc in cells:
            try:
                found.add((doc["run"], doc["provenance"]["device"]["kind"]))
            except (KeyError, TypeError):
                raise SpecsweepError(f"cell {path}: not a cell document (no run or provenance.device.kind)") from None
    for run, device in sorted(found, key=str):
        if (run, device) != (DEMO_RUN, DEMO_DEVICE):
            raise SpecsweepError(
                f"--tables {tables}: run '{run}' on device {device}, not a CPU demo run (run {DEMO_RUN}, device "
                f"{DEMO_DEVICE}: make demo)"
            )


def read_claims(tables: Path) -> list[dict[str, Any]]:
    """claims.json of the tables, through the checked reader (checked against MANIFEST.json): a truncated or
    changed file is one line naming it."""
    try:
        claims = json.loads(checked_bytes(tables, "claims.json"))
    except ValueError as exc:
        raise SpecsweepError(f"tables {tables / 'claims.json'}: not valid JSON ({exc})") from None
    if not isinstance(claims, list) or not all(isinstance(c, dict) for c in claims):
        raise SpecsweepError(f"tables {tables / 'claims.json'}: not a list of claims")
    return claims


def check_fields(args: argparse.Namespace) -> None:
    """The numbers and words of a record: positive seconds, an ISO date, and fields without a comma, a line
    break or another control character (each would forge a column or a row of the CSV)."""
    for name in ("wall_s", "snakemake_s"):
        if getattr(args, name) <= 0:
            raise SpecsweepError(f"--{name.replace('_', '-')} {getattr(args, name)}: not a positive number of seconds")
    try:
        dt.date.fromisoformat(args.date)
    except ValueError:
        raise SpecsweepError(f"--date {term_text(args.date)}: not an ISO date (YYYY-MM-DD)") from None
    for name in ("demo", "commit", "host", "date"):
        value = getattr(args, name)
        if not value or "," in value or not value.isprintable():
            raise SpecsweepError(f"--{name} '{term_text(value)}': empty, or holds a comma or a control character")


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except SpecsweepError as exc:
        print(f"demo-record: error: {term_text(exc)}", file=sys.stderr)
        return 2


def _main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tables", type=Path, required=True, help="the fresh clone's results/smoke/tables")
    ap.add_argument("--demo", required=True, help="the demo's label (a new label starts a new table)")
    ap.add_argument("--commit", required=True)
    ap.add_argument("--wall-s", type=int, required=True)
    ap.add_argument("--snakemake-s", type=int, required=True)
    ap.add_argument("--host", default="2-core")
    ap.add_argument("--date", default=dt.date.today().isoformat())
    args = ap.parse_args(argv)
    if not (args.tables / "speedup.parquet").is_file():
        ap.error(f"--tables {args.tables}: no speedup.parquet (run `make demo` there first)")
    check_fields(args)
    cells = run_cells(args.tables)
    check_cpu_demo(args.tables, cells)
    headline = load_yaml(ROOT / "config" / "smoke.yaml").get("headline_model")  # the demo's entries keep its name
    new_entries = entries(args.tables, headline)  # read (and checked) before the CSV is opened for appending
    cpu = run_cpu(args.tables, cells)
    with CSV.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    run = 1 + max((int(r["run"]) for r in rows if r["demo"] == args.demo), default=0)
    common = {"run": str(run), "demo": args.demo, "commit": args.commit, "date": args.date, "host": args.host,
              "wall_s": str(args.wall_s), "snakemake_s": str(args.snakemake_s),
              "band_pct": f"{100 * stats.BAND:.1f}"}  # fmt: skip
    new = [common | e | cpu for e in new_entries]
    with CSV.open("a", newline="") as fh:
        csv.DictWriter(fh, COLUMNS, lineterminator="\n").writerows(new)
    print(f"{CSV.relative_to(ROOT)}: run {run} of demo '{args.demo}', {len(new)} entries")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
