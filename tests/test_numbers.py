"""Numbers a reviewer accepts, on every committed run's tables: the summary's tok/s column is what the speedup
divides, no interval has zero width (an estimate the same on every start is shown as exact), and each cell's
per-request speed stands beside the batch's."""

from __future__ import annotations

import math
import re

import pyarrow.parquet as pq
import pytest

from conftest import ROOT

TABLES = sorted((ROOT / "results").glob("*/tables"))
#: an interval printed as [x, x]
ZERO_WIDTH = re.compile(r"\[(-?[\d.]+) ?[,–-] ?(-?[\d.]+)\]")


def _rows(t, name):
    return pq.read_table(t / name).to_pylist() if (t / name).is_file() else []


@pytest.mark.parametrize("t", TABLES, ids=lambda t: t.parent.name)
def test_the_summary_columns_divide(t):
    """speedup = tok/s / the baseline's tok/s: the speedup table's geometric means, and the summary's printed
    tok/s column, divide to the printed speedup (within the rounding of the printed values)."""
    sp = [s for s in _rows(t, "speedup.parquet") if s["speedup"] is not None and s["baseline_output_tok_s"]]
    for s in sp:
        assert s["speedup"] == pytest.approx(s["output_tok_s"] / s["baseline_output_tok_s"], rel=1e-12), s["config"]
    shown = {}
    lines = (t / "summary.md").read_text().splitlines()
    head = next(line for line in lines if line.startswith("| model | workload | config |"))
    cols = [c.strip() for c in head.strip("|").split("|")]
    for line in lines[lines.index(head) + 2 :]:
        if not line.startswith("| "):
            break
        cells = dict(zip(cols, (c.strip() for c in line.strip("|").split("|")), strict=True))
        if cells["tok/s"] != "–":
            tok = float(cells["tok/s"].split()[0])
            shown[(cells["model"], cells["workload"], cells["config"])] = (tok, cells["speedup"])
    checked = 0
    for s in sp:
        mine = shown.get((s["model"], s["workload"], s["config"]))
        base = shown.get((s["model"], s["workload"], s["baseline"]))
        if mine is None or base is None or mine[1] == "–":
            continue
        printed = float(mine[1].split()[0])
        # each tok/s printed to 0.05: the ratio of the printed values within that rounding of the printed speedup
        slack = 0.05 / mine[0] + 0.05 / base[0] + 0.0005 / printed
        assert abs(math.log(mine[0] / base[0] / printed)) <= slack * 1.01, (s["workload"], s["config"])
        checked += 1
    assert checked or not sp


@pytest.mark.parametrize("t", TABLES, ids=lambda t: t.parent.name)
def test_no_zero_width_interval_in_any_table(t):
    """No *_lo equal to its *_hi in a committed table, and no `[x, x]` printed in its Markdown: an estimate
    the same on every start says so (`x (same in n starts)`)."""
    for name in ("cells.parquet", "speedup.parquet", "crossover.parquet"):
        for r in _rows(t, name):
            for k, lo in r.items():
                hi_key = k[: -len("_lo")] + "_hi" if k.endswith("_lo") else None
                if hi_key and lo is not None and r.get(hi_key) is not None:
                    assert lo != r[hi_key], (name, k, r.get("workload"), r.get("config"))
    for md in sorted(t.glob("*.md")):
        for m in ZERO_WIDTH.finditer(md.read_text()):
            assert m.group(1) != m.group(2), (md.name, m.group(0))


def test_an_exact_estimate_is_shown_as_exact():
    """h200-concurrency's greedy T (the same tokens on every start) is exact in speedup.parquet (no interval,
    T_same_starts) and printed `x (same in n starts)` in the summary."""
    t = ROOT / "results" / "h200-concurrency" / "tables"
    exact = [s for s in _rows(t, "speedup.parquet") if s["T_same_starts"]]
    assert exact and all(s["T_lo"] is None and s["T_hi"] is None for s in exact)
    assert f"{exact[0]['T']:.2f} (same in {exact[0]['T_same_starts']} starts)" in (t / "summary.md").read_text()


def test_per_request_speed_beside_the_batchs():
    """Cells holding per-request latencies carry per-request output tok/s (median >= p10 > 0) and its speedup,
    which can differ from the batch's: a closed batch at b = 256 (all prompts at once) is set by its slowest
    request. Cells without per-request data say so."""
    t = ROOT / "results" / "h200-concurrency" / "tables"
    cells = [c for c in _rows(t, "cells.parquet") if c["n"]]
    assert cells and all(c["request_tok_s_median"] >= c["request_tok_s_p10"] > 0 for c in cells)
    sp = [s for s in _rows(t, "speedup.parquet") if s["request_speedup"] is not None]
    assert sp and all(
        s["request_speedup"] == pytest.approx(s["request_tok_s_median"] / s["baseline_request_tok_s_median"])
        for s in sp
    )
    old = ROOT / "results" / "h200-shapes" / "tables"  # measured before per-request latencies were recorded
    assert all(c["request_tok_s_median"] is None for c in _rows(old, "cells.parquet"))
    assert "no per-request data" in (old / "summary.md").read_text()
