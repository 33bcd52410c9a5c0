"""The serve-mode tables, the latency target and figure 10 on CONSTRUCTED rows and documents: made-up latencies
and throughputs written straight into the tables' columns (or the `serve` block of a cell document), to check
the edge cases a real CPU run does not reach (a step that stops meeting its target, served cells beside offline
ones, one operating point). The real served cells are checked in tests/test_serve_run.py."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from conftest import set_key
from specsweep import latency, tables
from specsweep.captions import captions, write_captions
from specsweep.config import build_study
from specsweep.figures import render_all
from specsweep.view import FIGURES, ONE_POINT, SERVE_FIGURE, Tables, left_out_by_config, planned_figures

RUN, MODEL = "serve-synthetic", "m-1b"
BS = (1, 4, 16)
#: made-up median TPOT (ms) per step at b = 1, 4, 16 against a 50 ms target: vanilla meets it at every b,
#: ngram up to b = 4 only
TPOT = {"vanilla": (10.0, 14.0, 30.0), "ngram": (6.0, 12.0, 60.0)}
TOK_S = {"vanilla": (40.0, 120.0, 300.0), "ngram": (70.0, 150.0, 280.0)}
TARGET = 50.0


def _serve_row(step: str, b: int | None, i: int, target: float | None = TARGET) -> dict[str, Any]:
    row: dict[str, Any] = dict.fromkeys((n for n, _ in tables.SERVE_COLUMNS), None)
    tpot = TPOT[step][i]
    row |= {
        "run": RUN,
        "model": MODEL,
        "workload": "code" if b is None else f"code@b{b}",
        "config": step,
        "method": "none" if step == "vanilla" else "ngram",
        "baseline": "vanilla",
        "concurrency": b,
        "request_rate": 4.0,
        "status": "ok",
        "n": 3,
        "n_starts": 3,
        "output_tok_s": TOK_S[step][i],
        "tpot_ms_median": tpot,
        "tpot_ms_p90": 1.2 * tpot,
        "tpot_ms_p99": 1.5 * tpot,
        "e2el_ms_median": 32 * tpot,
        "e2el_ms_p90": 40 * tpot,
        "e2el_ms_p99": 48 * tpot,
        "target_tpot_ms": target,
    }
    row["meets_target"] = latency.meets(row)
    return row


def _cell_row(step: str, b: int | None, tok_s: float) -> dict[str, Any]:
    row: dict[str, Any] = dict.fromkeys((n for n, _ in tables.CELL_COLUMNS), None)
    return row | {
        "run": RUN,
        "model": MODEL,
        "model_params_b": 1.0,
        "tp": 1,
        "workload": "code" if b is None else f"code@b{b}",
        "config": step,
        "method": "none" if step == "vanilla" else "ngram",
        "status": "ok",
        "n": 3,
        "n_starts": 3,
        "repeats": 3,
        "concurrency": b,
        "output_tok_s_median": tok_s,
        "device_name": "constructed",
        "vllm_version": "0.0.0-constructed",
    }


def constructed_tables(
    out: Path, bs: tuple[int | None, ...] = BS, serve: bool = True, target: float | None = TARGET
) -> None:
    crow = [_cell_row(s, b, TOK_S[s][i]) for s in ("vanilla", "ngram") for i, b in enumerate(bs)]
    meta = {"specsweep.run": RUN, "specsweep.repeats": "3", "specsweep.baseline": "vanilla"}
    out.mkdir(parents=True, exist_ok=True)
    pq.write_table(tables._table(crow, tables.CELL_COLUMNS, meta), out / "cells.parquet")
    pq.write_table(tables._table([], tables.SPEEDUP_COLUMNS, meta), out / "speedup.parquet")
    if serve:
        srows = [_serve_row(s, b, i, target) for s in ("vanilla", "ngram") for i, b in enumerate(bs)]
        pq.write_table(tables._table(srows, tables.SERVE_COLUMNS, meta), out / "serve.parquet")


def _render(tables_dir: Path, out: Path) -> dict:
    manifest = render_all(tables_dir, out, MODEL, RUN)
    write_captions(tables_dir, MODEL, out / "captions")
    return manifest


# ------------------------------------------------------------------------------------------- the target


def test_where_a_step_stops_meeting_the_target():
    """ngram meets 50 ms up to b = 4 and misses it from b = 16; vanilla meets it at every b; the cell with all
    prompts at once is the last operating point."""
    rows = [_serve_row(s, b, i) for s in ("vanilla", "ngram") for i, b in enumerate(BS)]
    got = {x.step: x for x in latency.limits(rows)}
    assert got["ngram"].note == "meets the target up to b = 4, misses it from b = 16 on"
    assert (got["ngram"].last_met, got["ngram"].first_miss) == (4, 16)
    assert got["vanilla"].note == "meets the target at every measured b" and got["vanilla"].first_miss is None
    assert got["ngram"].points == ((1, True), (4, True), (16, False))
    at_once = _serve_row("ngram", None, 0) | {"tpot_ms_median": 70.0}
    assert latency.limit(MODEL, "code", "ngram", {"tpot": TARGET}, [at_once, *rows[3:]]).points[-1] == (None, False)


@pytest.mark.parametrize(
    ("medians", "target", "note"),
    [
        ((60.0, 70.0, 80.0), TARGET, "misses the target at every measured b"),
        ((60.0, 20.0, 80.0), TARGET, "meets the target at b = 4, misses it at b = 1, b = 16 (not monotone in b)"),
        ((10.0, 20.0, 30.0), None, latency.NO_TARGET),
    ],
)
def test_the_target_notes(medians, target, note):
    rows = [
        _serve_row("ngram", b, i, target) | {"tpot_ms_median": m}
        for i, (b, m) in enumerate(zip(BS, medians, strict=True))
    ]
    for r in rows:
        r["meets_target"] = latency.meets(r)
    (got,) = latency.limits(rows)
    assert got.note == note


def test_a_cell_meets_every_target_or_none():
    row = _serve_row("ngram", 4, 1) | {"target_e2el_ms": 100.0}  # TPOT 12 ms meets 50, E2EL 384 ms misses 100
    assert latency.meets(row) is False and latency.target_text(latency.targets_of(row)) == "TPOT ≤ 50 ms, E2EL ≤ 100 ms"
    assert latency.meets(row | {"target_e2el_ms": 400.0}) is True
    assert latency.meets(row | {"tpot_ms_median": None}) is None  # a target without its latency decides nothing
    assert latency.meets(row | {"target_tpot_ms": None}) is False  # E2EL alone still misses
    assert latency.meets(row | {"target_tpot_ms": None, "target_e2el_ms": None}) is None


# ------------------------------------------------------------------------------------------- figure 10


@pytest.mark.slow  # matplotlib
def test_figure_10_renders_byte_identical_and_notes_the_target(tmp_path):
    constructed_tables(tmp_path / "t")
    m1, m2 = _render(tmp_path / "t", tmp_path / "a"), _render(tmp_path / "t", tmp_path / "b")
    assert m1 == m2 and set(m1["figures"]) | set(m1["left_out"]) == set(FIGURES)
    for rel in (f"{SERVE_FIGURE}.png", f"{SERVE_FIGURE}.svg", f"captions/{SERVE_FIGURE}.rst"):
        assert (tmp_path / "a" / rel).read_bytes() == (tmp_path / "b" / rel).read_bytes(), rel
    fig = m1["figures"][SERVE_FIGURE]
    assert len(fig["cells"]) == 2 * len(BS) and fig["missing"] == []
    assert f"{MODEL}/code/ngram: TPOT ≤ 50 ms: meets the target up to b = 4, misses it from b = 16 on" in fig["notes"]
    text = captions(tmp_path / "t", MODEL)[SERVE_FIGURE]
    assert "TPOT 6.0 ms at 70.0 tok/s (b = 1) → 60.0 ms at 280.0 tok/s (b = 16)" in text
    assert "meets the target up to b = 4, misses it from b = 16 on" in text
    svg = (tmp_path / "a" / f"{SERVE_FIGURE}.svg").read_text()
    assert "n = 3 repeats per cell" in svg


@pytest.mark.slow  # matplotlib
def test_a_target_far_above_every_point_is_written_not_drawn(tmp_path):
    """A 5 s TPOT target over points below 90 ms (p99): the panel keeps the points' scale and says where the
    target is; the 50 ms one is drawn as a line."""
    constructed_tables(tmp_path / "far", target=5000.0)
    _render(tmp_path / "far", tmp_path / "f")
    assert "TPOT ≤ 5000 ms: above every point, off the axis" in (tmp_path / "f" / f"{SERVE_FIGURE}.svg").read_text()
    constructed_tables(tmp_path / "near")
    _render(tmp_path / "near", tmp_path / "g")
    svg = (tmp_path / "g" / f"{SERVE_FIGURE}.svg").read_text()
    assert "target TPOT ≤ 50 ms" in svg and "off the axis" not in svg


@pytest.mark.slow  # matplotlib
def test_figure_10_with_one_b_or_no_serve_cell_is_left_out(tmp_path):
    constructed_tables(tmp_path / "one", bs=(4,))
    m = _render(tmp_path / "one", tmp_path / "f1")
    assert m["left_out"][SERVE_FIGURE] == ONE_POINT.format(points="b = 4")
    assert not (tmp_path / "f1" / f"{SERVE_FIGURE}.png").exists()
    constructed_tables(tmp_path / "none", serve=False)
    m = _render(tmp_path / "none", tmp_path / "f2")
    assert m["left_out"][SERVE_FIGURE].startswith("no serve-mode cell")
    assert not (tmp_path / "f2" / "captions" / f"{SERVE_FIGURE}.rst").exists()


def test_figure_10_draws_from_serve_parquet_only(tmp_path):
    """Tables without serve.parquet (every committed run) have no serve rows; with it, the view is theirs."""
    constructed_tables(tmp_path / "none", serve=False)
    assert not Tables.load(tmp_path / "none", RUN).serves
    constructed_tables(tmp_path / "t")
    data = Tables.load(tmp_path / "t", RUN)
    assert data.serves and set(data.served().cells) == set(data.serve) and len(data.serve) == 2 * len(BS)


# ------------------------------------------------------------------------------------------- the config


def _serve_cfg(smoke_cfg: dict, bs: list[int]) -> dict:
    """smoke.yaml with serve twins of vanilla and ngram (serve.baseline vanilla-serve) on code at `bs`."""
    cfg = set_key(smoke_cfg, "ladder.vanilla-serve", {"gpu_memory_utilization": 0.9, "mode": "serve"})
    ngram = copy.deepcopy(cfg["ladder"]["ngram"]) | {"mode": "serve"}
    cfg = set_key(cfg, "ladder.ngram-serve", ngram)
    cfg["serve"] = {"baseline": "vanilla-serve", "request_rate": 4.0, "goodput": {"tpot_ms": TARGET}}
    cfg = set_key(cfg, "workloads.code.concurrency", bs)
    work = [f"code@b{b}" for b in bs]
    cfg["groups"] = {"s": {"models": ["smollm2-135m-instruct"], "workloads": work, "steps": list(cfg["ladder"])}}
    return cfg


def test_a_serve_step_has_its_offline_twin(smoke_cfg):
    study = build_study(_serve_cfg(smoke_cfg, [1, 4]))
    assert study.serves and study.offline_twin("ngram-serve") == "ngram"
    assert study.offline_twin("vanilla-serve") == "vanilla"
    whole = build_study(set_key(smoke_cfg, "mode", "serve"))
    assert whole.serves and whole.offline_twin("ngram") is None
    assert not build_study(smoke_cfg).serves


def test_figure_10_planned_with_two_b_left_out_with_one(smoke_cfg):
    assert SERVE_FIGURE in planned_figures(build_study(_serve_cfg(smoke_cfg, [1, 4])))
    one = build_study(_serve_cfg(smoke_cfg, [4]))
    assert left_out_by_config(one)[SERVE_FIGURE] == ONE_POINT.format(points="b = 4")
    assert SERVE_FIGURE not in planned_figures(one) and SERVE_FIGURE not in planned_figures(build_study(smoke_cfg))


def test_tables_of_a_serving_run_add_their_files():
    assert tables.table_files() == tables.table_files(False) and not set(tables.SERVE_FILES) & set(tables.table_files())
    assert tables.table_files(True)[-3:] == tables.SERVE_FILES


# ------------------------------------------------------------------------------------------- served vs offline

B = 4


def _doc(step: str, mode: str, boot: str = "boot-1") -> dict[str, Any]:
    """The fields of a cell document that like-with-like reads (tables.conditions.comparable), and `serve`."""
    doc: dict[str, Any] = {
        "provenance": {
            "versions": {"vllm": "0.0.0-constructed", "torch": "0"},
            "device": {"name": "constructed", "count": 1, "driver": None},
            "harness": f"constructed {mode}",
            "machine": {"boot_id": boot},
        },
        "effective": {"dtype": "float32", "kv_cache_dtype": "auto"},
        "settings": {
            "sampling": {"temperature": 0.0},
            "engine": {},
            "env": {},
            "model": {},
            "ladder": {"engine": None, "env": None},
        },
        "dataset": {"content_sha256": "d"},
        "model_info": {"source": "m", "manifest_sha256": None, "prompt_format": "chat"},
    }
    if mode == "serve":
        doc["settings"] |= {"mode": "serve", "serve": {"request_rate": 4.0, "goodput_ms": {"tpot_ms": TARGET}}}
        i = BS.index(B)
        doc["serve"] = {
            "request_throughput": 2.0,
            "request_goodput": 1.5,
            **{
                f"{m}_ms": {"median": TPOT["ngram"][i], "p90": 2 * TPOT["ngram"][i], "p99": 3 * TPOT["ngram"][i]}
                for m in latency.LATENCIES
            },
        }
    return doc


def _speedup(step: str, sp: float) -> dict[str, Any]:
    return {
        "model": "smollm2-135m-instruct",
        "workload": f"code@b{B}",
        "config": step,
        "concurrency": B,
        "speedup": sp,
        "speedup_lo": sp * 0.9,
        "speedup_hi": sp * 1.1,
        "verdict": "faster",
    }


def _served_offline(study, offline: bool = True, boot: str = "boot-1") -> list[dict[str, Any]]:
    steps = {"vanilla-serve": "serve", "ngram-serve": "serve"} | (
        {"vanilla": "offline", "ngram": "offline"} if offline else {}
    )
    crow = [
        _cell_row(s, B, 100.0) | {"model": "smollm2-135m-instruct", "workload": f"code@b{B}", "run": study.run}
        for s in steps
    ]
    sp = [_speedup("ngram-serve", 1.2)] + ([_speedup("ngram", 1.5)] if offline else [])
    docs = {
        ("smollm2-135m-instruct", f"code@b{B}", s, B, 1): _doc(s, mode, boot if mode == "offline" else "boot-1")
        for s, mode in steps.items()
    }
    return tables.served_vs_offline_rows(study, crow, sp, docs)  # type: ignore[arg-type]


def test_served_speedup_beside_the_offline_one(smoke_cfg):
    study = build_study(_serve_cfg(smoke_cfg, [1, B]))
    (row,) = _served_offline(study)
    assert (row["config"], row["offline_config"], row["baseline"], row["offline_baseline"]) == (
        "ngram-serve",
        "ngram",
        "vanilla-serve",
        "vanilla",
    )
    assert row["status"] == "compared" and row["speedup_ratio"] == pytest.approx(1.2 / 1.5)
    assert (row["served_speedup"], row["offline_speedup"]) == (1.2, 1.5)


def test_no_offline_comparison_is_invented(smoke_cfg):
    """Without offline cells at this b, across machine boots, or in a run whose steps are all served: no ratio,
    and the row says why."""
    study = build_study(_serve_cfg(smoke_cfg, [1, B]))
    (row,) = _served_offline(study, offline=False)
    assert row["status"] == "no offline cells at this b" and row["speedup_ratio"] is None
    assert row["note"] == f"ngram b = {B}: not measured"
    (row,) = _served_offline(study, boot="boot-2")
    assert row["status"] == "not comparable" and row["speedup_ratio"] is None
    assert row["note"] == "served and offline cells measured under different machine_boot_id"
    whole = build_study(set_key(set_key(smoke_cfg, "mode", "serve"), "serve", {"request_rate": 4.0}))
    crow = [
        _cell_row(s, 1, 100.0) | {"model": "smollm2-135m-instruct", "workload": "code@b1"} for s in ("vanilla", "ngram")
    ]
    sp = [_speedup("ngram", 1.2) | {"workload": "code@b1", "concurrency": 1}]
    (row,) = tables.served_vs_offline_rows(whole, crow, sp, {})  # type: ignore[arg-type]
    assert row["status"] == "no offline cells at this b"
    assert row["note"] == "the run has no offline step with the ladder settings of ngram"


def test_serve_rows_and_their_summary_section(smoke_cfg):
    """A serve cell's row takes the client's latencies (median over repeats), its goodput share and whether it
    meets the target; the summary's serve section shows them and the served-against-offline table."""
    study = build_study(_serve_cfg(smoke_cfg, [1, B]))
    crow = [
        _cell_row(s, B, 100.0) | {"model": "smollm2-135m-instruct", "workload": f"code@b{B}"}
        for s in ("vanilla-serve", "ngram-serve")
    ]
    docs = {
        ("smollm2-135m-instruct", f"code@b{B}", s, B, r): _doc(s, "serve")
        for s in ("vanilla-serve", "ngram-serve")
        for r in (1, 2)
    }
    docs[("smollm2-135m-instruct", f"code@b{B}", "ngram-serve", B, 2)]["serve"]["tpot_ms"]["median"] = 14.0
    sp = [_speedup("ngram-serve", 1.2)]
    srows = tables.serve_rows(study, crow, sp, docs)  # type: ignore[arg-type]
    by = {r["config"]: r for r in srows}
    ngram = by["ngram-serve"]
    assert ngram["tpot_ms_median"] == pytest.approx((12.0 + 14.0) / 2) and ngram["tpot_ms_p99"] == 36.0
    assert ngram["goodput_share"] == 0.75 and ngram["meets_target"] is True and ngram["target_tpot_ms"] == TARGET
    assert ngram["baseline"] == "vanilla-serve" and ngram["speedup"] == 1.2 and by["vanilla-serve"]["speedup"] is None
    vrows = tables.served_vs_offline_rows(study, crow, sp, docs)  # type: ignore[arg-type]
    text = "\n".join(tables.serve_markdown(study, srows, vrows))
    assert "| 13.0 / 24.0 / 36.0 |" in text and "1.50 (75 %)" in text
    assert "meets the target at every measured b" in text and "no offline cells at this b" in text
