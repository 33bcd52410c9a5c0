"""Figure 9 (speedup and TPOT against concurrency) on CONSTRUCTED tables: cells at b = 1, 4, 16, 64 written
straight into the tables' columns, their speedups through the tables' own compare_cells (stats.ratio_ci,
stats.verdict). A rendering test, not a measurement: rendered twice, byte-identical; the crossovers it marks
are crossover.py's; runs without a concurrency axis leave it out and say why."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from specsweep import tables
from specsweep.captions import captions, write_captions
from specsweep.crossover import crossover_rows
from specsweep.figures import render_all
from specsweep.view import CONCURRENCY_FIGURE, FIGURES, crossovers, drawn_figures

RUN, MODEL, BASE = "conc-synthetic", "m-1b", "vanilla"
BS = (1, 4, 16, 64)
#: made-up speedup curves: code falls through 1 (ngram between 16 and 64, suffix between 4 and 16); chat/ngram
#: pays at every b, chat/suffix costs at every b
GAIN = {
    ("code", "ngram"): (2.0, 1.5, 1.15, 0.8),
    ("code", "suffix"): (2.6, 1.3, 0.85, 0.6),
    ("chat", "ngram"): (1.6, 1.45, 1.3, 1.2),
    ("chat", "suffix"): (0.8, 0.75, 0.7, 0.6),
}
SPREAD = (0.98, 1.0, 1.02)  # three repeats around each value


def _row(workload: str, config: str, b: int | None, tok_s: float) -> tuple[dict, dict[str, list[float]]]:
    row = dict.fromkeys((n for n, _ in tables.CELL_COLUMNS), None)
    tps = 8.0 if b is None else float(b)
    vals = {
        "output_tok_s": [tok_s * f for f in SPREAD],
        "tokens_per_step": [tps * f for f in SPREAD],
    }
    vals["step_time_ms"] = [1000 * t / s for t, s in zip(vals["tokens_per_step"], vals["output_tok_s"], strict=True)]
    vals["decode_step_time_ms"] = list(vals["step_time_ms"])
    row |= {
        "run": RUN,
        "model": MODEL,
        "model_params_b": 1.0,
        "tp": 1,
        "workload": workload if b is None else f"{workload}@b{b}",
        "config": config,
        "method": "none" if config == BASE else config,
        "group": "paper",
        "status": "ok",
        "n": 3,
        "repeats": 3,
        "prompts": 64,
        "device_name": "constructed",
        "vllm_version": "0.0.0-constructed",
        "concurrency": b,
        "tpot_s_median": None if b is None else 0.01 * (1 + b / 16) * (0.8 if config != BASE else 1.0),
        "ttft_s_median": None if b is None else 0.05 * b,
    }
    for m, v in vals.items():
        row |= {f"{m}_median": sorted(v)[1], f"{m}_lo": min(v), f"{m}_hi": max(v)}
    return row, vals


def constructed_tables(out: Path, axis: bool = True, fewer: str | None = None) -> None:
    """``fewer``: a baseline cell (workload@b) whose row says n = 2 of the 3 repeats planned."""
    crow, series = [], {}
    for w in ("code", "chat"):
        for b in (None, *(BS if axis else ())):
            base_tok = 100.0 * (b or 32) ** 0.8
            for cfg in (BASE, "ngram", "suffix"):
                gain = 1.0 if cfg == BASE else (1.1 if b is None else GAIN[(w, cfg)][BS.index(b)])
                row, vals = _row(w, cfg, b, base_tok * gain)
                if cfg == BASE and row["workload"] == fewer:
                    row["n"] = 2
                crow.append(row)
                series[(row["workload"], cfg)] = vals
    by = {(c["workload"], c["config"]): c for c in crow}
    sp = []
    for c in crow:
        if c["config"] == BASE:
            continue
        base = by[(c["workload"], BASE)]
        row = dict.fromkeys((n for n, _ in tables.SPEEDUP_COLUMNS), None)
        row |= {k: c[k] for k in ("run", "model", "model_params_b", "workload", "config", "method", "concurrency")}
        row |= {"baseline": BASE, "n": 3, "n_baseline": base["n"], "status": "ok"}
        row |= tables.compare_cells(c, base, series[(c["workload"], c["config"])], series[(c["workload"], BASE)])
        sp.append(row)
    meta = {"specsweep.run": RUN, "specsweep.repeats": "3", "specsweep.baseline": BASE}
    out.mkdir(parents=True, exist_ok=True)
    pq.write_table(tables._table(crow, tables.CELL_COLUMNS, meta), out / "cells.parquet")
    pq.write_table(tables._table(sp, tables.SPEEDUP_COLUMNS, meta), out / "speedup.parquet")


def _render(tables_dir: Path, out: Path) -> dict:
    manifest = render_all(tables_dir, out, MODEL, RUN)
    write_captions(tables_dir, MODEL, out / "captions")
    return manifest


@pytest.fixture(scope="module")
def conc_tables(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("conc-tables")
    constructed_tables(out)
    return out


@pytest.mark.slow
def test_figure_9_renders_byte_identical(conc_tables, tmp_path):
    m1, m2 = _render(conc_tables, tmp_path / "a"), _render(conc_tables, tmp_path / "b")
    assert m1 == m2 and set(m1["figures"]) | set(m1["left_out"]) == set(FIGURES)
    assert CONCURRENCY_FIGURE in m1["figures"]  # figures 1-8 without their cells here are left out, named
    for rel in (f"{CONCURRENCY_FIGURE}.png", f"{CONCURRENCY_FIGURE}.svg", f"captions/{CONCURRENCY_FIGURE}.rst"):
        assert (tmp_path / "a" / rel).read_bytes() == (tmp_path / "b" / rel).read_bytes(), rel
    fig9 = m1["figures"][CONCURRENCY_FIGURE]
    # every cell at a concurrency, none at the all-at-once point; figures 1-8 the other way round
    assert len(fig9["cells"]) == 2 * len(BS) * 3 and fig9["missing"] == []
    assert all("@b" in c["workload"] for c in fig9["cells"])
    assert all(
        "@b" not in c["workload"] for s in m1["figures"] if s != CONCURRENCY_FIGURE for c in m1["figures"][s]["cells"]
    )
    assert "n = 3 repeats per cell" in (tmp_path / "a" / f"{CONCURRENCY_FIGURE}.svg").read_text()


@pytest.mark.slow
def test_figure_9_labels_the_points_measured_with_fewer_repeats(tmp_path):
    constructed_tables(tmp_path / "t", fewer="code@b16")
    _render(tmp_path / "t", tmp_path / "f")
    svg = (tmp_path / "f" / f"{CONCURRENCY_FIGURE}.svg").read_text()
    # one label per panel at b = 16: the baseline's TPOT point, and the speedups that pair with it (n = the fewer)
    assert svg.count("n=2") == 2
    assert "n = 2–3 repeats per cell (3 planned; 1 cell with fewer, labelled n=…)" in svg


def test_figure_9_marks_the_crossovers_of_the_tables(conc_tables):
    from specsweep.crossover import describe
    from specsweep.view import Tables

    data = Tables.load(conc_tables, RUN)
    marked = crossovers(data.concurrency())
    sp = pq.read_table(conc_tables / "speedup.parquet").to_pylist()
    assert list(marked.values()) == crossover_rows(sp)  # the tables' function, on the same rows
    code_ngram = marked[(MODEL, "code", "ngram")]
    assert 16 < code_ngram["b_star"] < 64 and code_ngram["note"].startswith("crosses")
    assert 4 < marked[(MODEL, "code", "suffix")]["b_star"] < 16
    assert marked[(MODEL, "chat", "ngram")]["note"].startswith("pays at every measured b")
    assert marked[(MODEL, "chat", "suffix")]["note"].startswith("costs at every measured b")
    text = captions(conc_tables, MODEL)[CONCURRENCY_FIGURE]
    assert f"{MODEL}/code/ngram {describe(code_ngram)} (n = " in text and describe(code_ngram).startswith("b* = ")
    assert f"{MODEL}/chat/ngram: pays at every measured b" in text
    assert "ms at b = 1 →" in text and "ms at b = 64" in text


@pytest.mark.slow
def test_run_without_a_concurrency_axis_leaves_figure_9_out(tmp_path):
    constructed_tables(tmp_path / "t", axis=False)
    m = _render(tmp_path / "t", tmp_path / "f")
    assert CONCURRENCY_FIGURE not in m["figures"] and set(m["figures"]) <= set(drawn_figures(False))
    assert "no concurrency axis" in m["left_out"][CONCURRENCY_FIGURE]
    assert not (tmp_path / "f" / f"{CONCURRENCY_FIGURE}.png").exists()
    assert not (tmp_path / "f" / "captions" / f"{CONCURRENCY_FIGURE}.rst").exists()
