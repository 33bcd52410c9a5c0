"""Would pairing by round tighten a run's speedup intervals? The tables' interval against a paired t.

The engines of a model start in interleaved rounds (round r holds repeat r of every ladder step), so a speedup
could also be estimated from the per-round log differences, step r over baseline r, with a paired t-interval
(n - 1 degrees of freedom). The tables' interval (stats.VERDICT_RULE: Welch's, each cell's own between-start
spread in the standard error) is printed beside it; the paired one is narrower only where the two
sides' engine starts move together from round to round: at n = 3 the paired t has 2 degrees of freedom
(t = 4.30). This prints both, for every (model, workload, step) of a run with the baseline's rounds matched,
from the run's `measurements.parquet`, judged with the band of its `speedup.parquet` (speedups whose repeats are
passes on one engine are left out):

    python3 workflow/scripts/pairing-check.py results/h200-reference/tables

A diagnostic of the statistics the tables use, not a result of the study: nothing is written but its stdout.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specsweep import stats
from specsweep.errors import SpecsweepError
from specsweep.tables import read_parquet

Key = tuple[str, str, object, str]


def rounds(tables: Path, baseline: str) -> dict[Key, tuple[dict[int, float], dict[int, float]]]:
    """(model, workload, concurrency, step) -> (step's tok/s by repeat, baseline's tok/s by repeat), one value per
    repeat (the geometric mean of its passes), ok measurements only."""
    path = tables / "measurements.parquet"
    if not path.is_file():
        raise SystemExit(f"pairing-check: {path}: no such file (give a run's tables folder)")
    rows = read_parquet(tables, "measurements.parquet").to_pylist()
    passes: dict[Key, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        if r["status"] == "ok" and r["output_tok_s"]:
            key = (r["model"], r["workload"], r.get("concurrency"), r["config"])
            passes[key][int(r["repeat"])].append(float(r["output_tok_s"]))
    by_rep = {k: {rep: stats.start_value(v) for rep, v in reps.items()} for k, reps in passes.items()}
    out = {}
    for (model, workload, conc, step), reps in sorted(by_rep.items(), key=lambda kv: str(kv[0])):
        base = by_rep.get((model, workload, conc, baseline))
        if step != baseline and base:
            out[(model, workload, conc, step)] = (reps, base)
    return out


def paired_log_ci(pairs: list[tuple[float, float]]) -> tuple[float, float, float] | None:
    """Geometric-mean ratio and its paired t-interval from (step, baseline) pairs of one round each: the per-round
    ratios' geometric mean and its t-interval on log values (stats.start_value, stats.cell_ci)."""
    ratios = [a / b for a, b in pairs]
    point, (lo, hi) = stats.start_value(ratios), stats.cell_ci(ratios)
    return None if point is None or lo is None or hi is None else (point, lo, hi)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tables", type=Path, help="a run's tables folder (results/RUN/tables)")
    ap.add_argument("--baseline", default="vanilla")
    args = ap.parse_args(argv)
    cells = rounds(args.tables, args.baseline)
    # the band each speedup was judged with; speedups whose repeats are passes on one engine are left out
    bands = {
        (r["model"], r["workload"], r.get("concurrency"), r["config"]): r["band"]
        for r in read_parquet(args.tables, "speedup.parquet").to_pylist()
        if r["replication"] == "engine starts"
    }
    print(
        "model workload step rounds corr | tables: ratio [lo, hi] half(log) verdict"
        " | paired: ratio [lo, hi] half(log) verdict"
    )
    narrower = compared = changed = 0
    for (model, workload, conc, step), (reps, base) in cells.items():
        band = bands.get((model, workload, conc, step))
        if band is None:
            continue
        matched = sorted(set(reps) & set(base))
        pairs = [(reps[r], base[r]) for r in matched]
        point, lo, hi = stats.speedup_ci(list(reps.values()), list(base.values()))
        paired = paired_log_ci(pairs)
        if lo is None or paired is None:
            continue
        corr = float(np.corrcoef(np.log([a for a, _ in pairs]), np.log([b for _, b in pairs]))[0, 1])
        w_half = math.log(hi / lo) / 2
        p_half = math.log(paired[2] / paired[1]) / 2
        w_verdict, p_verdict = stats.verdict(point, lo, hi, band), stats.verdict(*paired, band)
        compared += 1
        narrower += p_half < w_half
        changed += w_verdict != p_verdict
        where = workload if conc is None or f"@b{conc}" in workload else f"{workload}@b{conc}"
        print(
            f"{model} {where} {step} {len(matched)} {corr:+.2f} | {point:.3f} [{lo:.3f}, {hi:.3f}] {w_half:.3f} "
            f"{w_verdict} | {paired[0]:.3f} [{paired[1]:.3f}, {paired[2]:.3f}] {p_half:.3f} {p_verdict}"
        )
    print(
        f"paired interval narrower than the tables' in {narrower} of {compared} speedups; "
        f"verdict different in {changed} (band as in the run's speedup table)"
    )
    return 0


if __name__ == "__main__":
    try:
        raise SystemExit(main())
    except SpecsweepError as exc:  # a table its MANIFEST.json does not vouch for: one line
        raise SystemExit(f"pairing-check: {exc}") from None
