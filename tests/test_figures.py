"""Figures at full size: a SYNTHETIC paper run (config/config.yaml, 156 cells x 3 repeats) written straight
into the tables' columns from a seeded RNG (a rendering test, not a measurement); every figure rendered
twice, byte-identical; no missing cells; figure 5's labels do not overlap; captions from the data."""

from __future__ import annotations

import copy
import io
import math
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import yaml

from conftest import ROOT
from specsweep import stats, tables
from specsweep.captions import captions, write_captions
from specsweep.config import build_study
from specsweep.figures import DPI, fig5_layout, render_all
from specsweep.view import drawn_figures as _drawn

# the paper run has no concurrency axis and no serve-mode step: figures 1-8 (figure 9: test_fig_concurrency.py,
# figure 10: test_serve_tables.py)
FIGURES = _drawn(False)

REPEATS = 3
NSPEC = {"ngram": 7, "suffix": 32, "trident": 32}


def paper_study(repeats: int = REPEATS):
    cfg = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    cfg["repeats"] = repeats
    return build_study(copy.deepcopy(cfg))


def _speedup_of(size: float, config: str, workload: str) -> float:
    """A plausible speedup: regression at <= 7B, gains above, suffix better on code; similar for 70B/72B."""
    base = 0.78 + 0.17 * math.log10(size / 0.125) if size < 10 else 1.05 + 0.12 * math.log10(size / 14)
    base *= {"ngram": 0.93, "suffix": 1.0, "trident": 1.04}[config]
    base *= {"code": 1.08, "sonnet": 1.03, "chat": 0.97}.get(workload, 1.0)
    return base


def synthetic_tables(out: Path, study=None, seed: int = 7, drop: tuple[tuple[str, str, str], ...] = ()) -> None:
    """cells.parquet and speedup.parquet of a made-up full run, with the tables' own columns and statistics.
    ``drop``: cells written as status missing (n = 0)."""
    study = study or paper_study()
    rng = np.random.default_rng(seed)
    meta = {
        "specsweep.run": study.run,
        "specsweep.repeats": str(study.repeats),
        "specsweep.baseline": study.baseline,
        "specsweep.allow_mismatch": "false",
        "specsweep.mismatches": "[]",
        "specsweep.allow_stale": "false",
        "specsweep.stale": "[]",
    }
    series: dict[tuple[str, str, str], dict[str, list[float]]] = {}
    crow = []
    for cell in study.cells:
        spec = study.models[cell.model]
        step = study.ladder[cell.step]
        method = step.method
        row = dict.fromkeys((n for n, _ in tables.CELL_COLUMNS), None)
        row |= tables.cell_identity(study, cell) | {"repeats": study.repeats}
        key = (cell.model, cell.workload, cell.step)
        if key in drop:
            row |= {"status": "missing", "n": 0}
            crow.append(row)
            continue
        size = spec.params_b
        base_tps = 180.0 + 20 * rng.random()  # baseline tokens per step (whole batch)
        base_step = 12.0 + 9.0 * math.log10(1 + size)  # ms
        r = 1.0 if method == "none" else 1.22 + 0.15 * rng.random()
        s = 1.0 if method == "none" else _speedup_of(size, cell.step, cell.workload) * (0.97 + 0.06 * rng.random())
        t = s * r
        n = study.repeats
        noise = lambda cv: 1 + cv * rng.standard_normal(n)  # noqa: E731
        vals: dict[str, list[float]] = {
            "tokens_per_step": list(base_tps * t * noise(0.01)),
            "step_time_ms": list(base_step * r * noise(0.02)),
        }
        vals["decode_step_time_ms"] = [x * 0.9 for x in vals["step_time_ms"]]
        vals["output_tok_s"] = [
            1000 * a / b * 0.98 for a, b in zip(vals["tokens_per_step"], vals["step_time_ms"], strict=False)
        ]
        vals["gen_wall_s"] = [256 * 600 / x for x in vals["output_tok_s"]]
        vals["gpu_util_mean"] = list((92 - (8 if method != "none" else 0)) * noise(0.01))
        vals["prefill_share"] = list(0.2 * noise(0.05))
        if method != "none":
            nspec = NSPEC[cell.step]
            drafts = 20000
            p1 = (0.35 if method == "ngram" else 0.45) + 0.25 * rng.random() + (0.1 if cell.workload == "code" else 0)
            rise = 0.02 + 0.05 * rng.random()
            p = [min(0.95, p1 + rise * i) for i in range(nspec)]
            shrink = 0.85 + 0.12 * rng.random()
            reach = [1.0 if method == "ngram" else shrink**i for i in range(nspec)]  # drafts this long
            acc, a = [], float(drafts)
            for i in range(nspec):
                a *= p[i] * (reach[i] / reach[i - 1] if i else 1.0)
                acc.append(int(a))
            dtok = int(drafts * sum(reach))
            k = 1 + sum(acc) / drafts
            vals["K"] = list(k * noise(0.01))
            vals["alpha"] = list(sum(acc) / dtok * noise(0.01))
            row |= {
                "drafts": drafts * n,
                "draft_tokens": dtok * n,
                "accepted": sum(acc) * n,
                "accepted_per_pos": [x * n for x in acc],
            }
        for m in tables.STAT_METRICS:
            v = vals.get(m)
            if v is None:
                continue
            lo, hi = stats.bootstrap_ci(v)
            row |= {f"{m}_median": stats.median(v), f"{m}_lo": lo, f"{m}_hi": hi, f"{m}_cv": stats.cv(v)}
        row |= {
            "status": "ok",
            "n": n,
            "prompts": 256,
            "input_tokens_mean": 1900.0,
            "output_tokens_mean": 600.0,
            "gpu_memory_utilization": step.gpu_memory_utilization,
            "cudagraph_mode_requested": (step.compilation or {}).get("cudagraph_mode", "default"),
            "cudagraph_mode_effective": "PIECEWISE",
            "async_scheduling": method == "none",
            "model_runner": "v2" if method == "none" else "v1",
            "device_name": "NVIDIA H200 (synthetic)",
            "vllm_version": "0.0.0-synthetic",
            "prompts_match_baseline_min": None if method == "none" else 250,
        }
        series[key] = vals
        crow.append(row)

    by_cell = {(c["model"], c["workload"], c["config"]): c for c in crow}
    sp = []
    for c in crow:
        if c["config"] == study.baseline:
            continue
        key = (c["model"], c["workload"], c["config"])
        bkey = (c["model"], c["workload"], study.baseline)
        base = by_cell[bkey]
        row = dict.fromkeys((n for n, _ in tables.SPEEDUP_COLUMNS), None)
        row |= {k: c[k] for k in ("run", "model", "model_params_b", "workload", "config", "method")}
        row |= {"baseline": study.baseline, "n": c["n"], "n_baseline": base["n"], "status": "missing"}
        if c["n"] and base["n"]:
            a, b = series[key], series[bkey]
            row |= {"status": "ok"} | tables.compare_cells(c, base, a, b)
        sp.append(row)
    out.mkdir(parents=True, exist_ok=True)
    pq.write_table(tables._table(crow, tables.CELL_COLUMNS, meta), out / "cells.parquet")
    pq.write_table(tables._table(sp, tables.SPEEDUP_COLUMNS, meta), out / "speedup.parquet")


@pytest.fixture(scope="module")
def paper_tables(tmp_path_factory) -> tuple[Path, object]:
    study = paper_study()
    out = tmp_path_factory.mktemp("paper-tables")
    synthetic_tables(out, study)
    return out, study


def _render(tables_dir: Path, out: Path, study) -> dict:
    manifest = render_all(tables_dir, out, study.raw["headline_model"], study.run)
    write_captions(tables_dir, study.raw["headline_model"], out / "captions")
    return manifest


@pytest.mark.slow
def test_full_size_run_renders_byte_identical_with_nothing_missing(paper_tables, tmp_path):
    tables_dir, study = paper_tables
    paper_cells = [c for c in study.cells if study.cell_groups[c] != "controls"]
    assert len(paper_cells) == 156 and study.repeats == 3
    m1 = _render(tables_dir, tmp_path / "a", study)
    m2 = _render(tables_dir, tmp_path / "b", study)
    assert m1 == m2
    names = sorted(p.relative_to(tmp_path / "a") for p in (tmp_path / "a").rglob("*") if p.is_file())
    assert len(names) == 2 * len(FIGURES) + len(FIGURES) + 1  # png + svg, captions, manifest
    for rel in names:
        assert (tmp_path / "a" / rel).read_bytes() == (tmp_path / "b" / rel).read_bytes(), rel
    assert list(m1["figures"]) == list(FIGURES) and m1["repeats"] == 3 and m1["baseline"] == "vanilla"
    for stem, fig in m1["figures"].items():
        assert fig["missing"] == [] and fig["partial"] == [], stem
        assert fig["cells"], stem
    # figure 5 uses every cell of the common workloads (sonnet, chat, code) of all 9 models
    assert len(m1["figures"]["fig5_model_size"]["cells"]) == 9 * 3 * 3
    # figure 7: every speculative cell of the run
    assert len(m1["figures"]["fig7_k_predicted"]["cells"]) == sum(
        1 for c in study.cells if study.ladder[c.step].method != "none"
    )
    # every figure states n (matplotlib keeps each text as a comment beside its glyph paths in the SVG)
    for stem in FIGURES:
        assert "n = 3 repeats per cell" in (tmp_path / "a" / f"{stem}.svg").read_text(), stem


def _overlap(a, b) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


@pytest.mark.parametrize("seed", [7, 3])
def test_fig5_labels_and_markers_do_not_overlap(paper_tables, tmp_path, seed):
    tables_dir, study = paper_tables
    if seed != 7:
        tables_dir = tmp_path / "t"
        synthetic_tables(tables_dir, study, seed=seed)
    layout = fig5_layout(tables_dir, study.run)
    boxes, markers = layout["labels"], layout["markers"]
    assert len(boxes) == 9 and len(markers) == 18
    texts = [t for t, _ in boxes]
    assert "llama-3.3-70b (70B)" in texts and "qwen2.5-72b (72B)" in texts
    for i, (ta, a) in enumerate(boxes):
        for tb, b in boxes[i + 1 :]:
            assert not _overlap(a, b), f"labels {ta!r} and {tb!r} overlap: {a} {b}"
    # no two markers on top of each other (70B and 72B included): centres at least a marker apart (6 pt)
    r = 6 * DPI / 72
    for i, (ka, xa, ya) in enumerate(markers):
        for kb, xb, yb in markers[i + 1 :]:
            assert math.hypot(xa - xb, ya - yb) >= r, f"markers {ka} and {kb} overlap"
    # and no label sits on a marker
    for t, bb in boxes:
        for k, x, y in markers:
            assert not _overlap(bb, (x - r / 2, y - r / 2, x + r / 2, y + r / 2)), f"label {t!r} on marker {k}"


@pytest.mark.slow
def test_missing_cells_are_listed_and_partial_runs_render(tmp_path):
    study = paper_study()
    drop = (
        ("llama-3.3-70b-instruct", "code", "trident"),
        ("llama-3.3-70b-instruct", "sonnet", "vanilla"),
        ("qwen2.5-7b-instruct", "chat", "ngram"),
    )
    synthetic_tables(tmp_path / "t", study, drop=drop)
    m = _render(tmp_path / "t", tmp_path / "f", study)
    missing = {
        stem: {(c["model"], c["workload"], c["config"]) for c in f["missing"]} for stem, f in m["figures"].items()
    }
    assert drop[0] in missing["fig1_headline"] and drop[1] in missing["fig1_headline"]
    assert drop[0] in missing["fig2_r_vs_k_code"] and drop[1] in missing["fig3_sonnet_ladder"]
    assert drop[2] in missing["fig5_model_size"] and drop[0] in missing["fig7_k_predicted"]
    assert all((tmp_path / "f" / f"{s}.png").is_file() for s in FIGURES)


def test_captions_read_the_data(paper_tables, tmp_path):
    tables_dir, study = paper_tables
    text = captions(tables_dir, study.raw["headline_model"])
    assert list(text) == list(FIGURES)
    assert "n = 3" in text["fig1_headline"].replace("\\", "")  # the caption is reST: data is escaped
    assert "gmu 0.80" in text["fig1_headline"] and "PIECEWISE" in text["fig1_headline"]
    assert "32" in text["fig1_headline"]
    # another ladder in the tables gives another caption: nothing is typed in
    cells = pq.read_table(tables_dir / "cells.parquet")
    rows = cells.to_pylist()
    for r in rows:
        if r["config"] == "trident":
            r["gpu_memory_utilization"] = 0.70
    other = tmp_path / "t"
    other.mkdir()
    pq.write_table(
        tables._table(rows, tables.CELL_COLUMNS, {k.decode(): v.decode() for k, v in cells.schema.metadata.items()}),
        other / "cells.parquet",
    )
    (other / "speedup.parquet").write_bytes((tables_dir / "speedup.parquet").read_bytes())
    assert "gmu 0.70" in captions(other, study.raw["headline_model"])["fig1_headline"]
    assert "geometric mean" in text["fig5_model_size"] and "Leviathan" in text["fig7_k_predicted"]
    # each caption is valid RST (the Snakemake report renders it): no warning from docutils
    docutils_core = pytest.importorskip("docutils.core")
    for stem, caption in text.items():
        err = io.StringIO()
        docutils_core.publish_string(
            caption, writer="null", settings_overrides={"warning_stream": err, "report_level": 1}
        )
        assert err.getvalue() == "", f"{stem}: {err.getvalue()}"


@pytest.mark.slow
def test_a_figure_without_data_is_left_out_and_named(tmp_path):
    """No sonnet cell of the headline model measured: figure 3 is not drawn (no empty axes) and the manifest's
    left_out names it with the reason; the caption is not written either."""
    study = paper_study()
    headline = study.raw["headline_model"]
    drop = tuple((headline, "sonnet", c) for c in study.ladder)
    synthetic_tables(tmp_path / "t", study, drop=drop)
    m = render_all(tmp_path / "t", tmp_path / "f", headline, study.run)
    write_captions(tmp_path / "t", headline, tmp_path / "f" / "captions", left_out=m["left_out"])
    # fig9: no concurrency axis, fig10: no serve-mode cell
    assert list(m["left_out"]) == ["fig3_sonnet_ladder", "fig9_concurrency", "fig10_serve_latency"]
    assert m["left_out"]["fig3_sonnet_ladder"].startswith("no measured cell among the")
    assert "fig3_sonnet_ladder" not in m["figures"]
    assert not (tmp_path / "f" / "fig3_sonnet_ladder.png").exists()
    assert not (tmp_path / "f" / "captions" / "fig3_sonnet_ladder.rst").exists()
    assert (tmp_path / "f" / "fig1_headline.png").is_file()


@pytest.mark.slow
def test_random_weights_draw_no_figure_about_acceptance(paper_tables, tmp_path):
    """The same tables with every model marked as random weights: figures 5 and 7 (speedup by size, K from
    acceptance) have no real-weight cell left and are left out; the config of a random-weight run leaves out
    every figure but 8 before any cell exists."""
    from specsweep.config import load_study
    from specsweep.view import left_out_by_config, planned_figures

    tables_dir, study = paper_tables
    m = render_all(tables_dir, tmp_path / "f", study.raw["headline_model"], study.run, dummy=set(study.models))
    assert {"fig5_model_size", "fig7_k_predicted"} <= set(m["left_out"])
    shapes = load_study(ROOT / "results" / "h200-shapes" / "config.yaml")
    left = left_out_by_config(shapes)
    assert list(left) == list(FIGURES[:-1]) and planned_figures(shapes) == ["fig8_r_at_scale"]
    assert all("random weights" in why for why in left.values())
    assert left_out_by_config(study) == {} and planned_figures(study) == list(FIGURES)


@pytest.mark.slow
def test_a_panel_without_data_is_left_out(tmp_path):
    """GPU utilisation measured nowhere (a CPU run): figure 6 draws throughput and wall time only and says
    which panel it left out."""
    study = paper_study()
    synthetic_tables(tmp_path / "t", study)
    cells = pq.read_table(tmp_path / "t" / "cells.parquet")
    rows = cells.to_pylist()
    for r in rows:
        for suffix in ("median", "lo", "hi", "cv"):
            r[f"gpu_util_mean_{suffix}"] = None
    meta = {k.decode(): v.decode() for k, v in cells.schema.metadata.items()}
    pq.write_table(tables._table(rows, tables.CELL_COLUMNS, meta), tmp_path / "t" / "cells.parquet")
    m = render_all(tmp_path / "t", tmp_path / "f", study.raw["headline_model"], study.run)
    notes = m["figures"]["fig6_gpu_util"]["notes"]
    assert any(n.startswith("panel 'GPU utilisation' left out") for n in notes)
    svg = (tmp_path / "f" / "fig6_gpu_util.svg").read_text()
    assert "GPU utilisation (mean %)" not in svg and "generation wall time (s)" in svg


def test_a_run_measured_only_at_concurrencies_plans_figure_9_alone():
    """Figures 1-8 draw the cells of all prompts at once; a run whose groups take only cells at a concurrency b
    (code@b2 and code@b4) plans figure 9 alone and says why for each other figure, so the workflow never waits
    for a figure the render leaves out. The CPU demo measures both, on two model sizes: every figure is planned;
    with its second model left out, all but the two drawn against model size."""
    import yaml

    from specsweep.config import build_study, load_study
    from specsweep.view import left_out_by_config, planned_figures

    demo = load_study(ROOT / "config" / "smoke.yaml")
    assert {c.workload for c in demo.cells} == {"sonnet", "chat", "code", "code@b4"}
    assert {c.model for c in demo.cells if c.workload == "code"} == {"smollm2-135m-instruct", "gemma3-270m"}
    assert not left_out_by_config(demo) and planned_figures(demo) == [*FIGURES, "fig9_concurrency"]
    cfg = yaml.safe_load((ROOT / "config" / "smoke.yaml").read_text())
    one = build_study({**cfg, "groups": {"demo": cfg["groups"]["demo"]}})
    assert set(left_out_by_config(one)) == {"fig5_model_size", "fig8_r_at_scale"}
    assert planned_figures(one) == [
        s for s in (*FIGURES, "fig9_concurrency") if s not in ("fig5_model_size", "fig8_r_at_scale")
    ]
    del cfg["groups"]["sizes"]
    cfg["groups"]["demo"]["workloads"] = ["code@b2", "code@b4"]
    at_b = build_study(cfg)
    left = left_out_by_config(at_b)
    assert planned_figures(at_b) == ["fig9_concurrency"] and list(left) == list(FIGURES)
    assert all(why.startswith("no cell with all prompts at once") for why in left.values())
    # a headline step the run does not measure: figures 1 and 6 are left out, naming it
    cfg["groups"]["demo"]["workloads"] = ["code", "chat"]
    no_head = left_out_by_config(build_study({**cfg, "headline_step": "trident"}))
    assert no_head["fig1_headline"].startswith("headline_step 'trident' is not a step the headline model")
    assert "fig6_gpu_util" in no_head and "fig2_r_vs_k_code" not in no_head
    # one workload at the article's point as well: figures 1-8 are planned again (those its workloads allow)
    cfg = yaml.safe_load((ROOT / "config" / "smoke.yaml").read_text())
    cfg["groups"]["demo"]["workloads"] = ["code"]  # all prompts at once, and at b = 2 and 4
    del cfg["groups"]["sizes"]  # and Gemma in the models, but in no group: not measured
    both = build_study(cfg)
    assert {"fig1_headline", "fig2_r_vs_k_code", "fig9_concurrency"} <= set(planned_figures(both))
    assert "fig3_sonnet_ladder" in left_out_by_config(both)  # no sonnet: as before
    # one model: figures 5 and 8 have no model-size axis to draw along, and say so
    assert left_out_by_config(both)["fig8_r_at_scale"] == "one model only: nothing to draw against model size: " + (
        "smollm2-135m-instruct"
    )
    assert left_out_by_config(both)["fig5_model_size"].startswith("one model only")
    # repeats: 1 (a cheap run): figure 8 draws no R from a single repeat, so it is not planned (the render
    # would leave it out and the workflow wait for it in vain), unless other runs' R is drawn beside
    one = build_study({**cfg, "repeats": 1})
    assert left_out_by_config(one)["fig8_r_at_scale"] == "R only from single repeats (the run has repeats: 1)"
    assert "fig8_r_at_scale" not in planned_figures(one)
    assert "fig8_r_at_scale" in planned_figures(build_study({**cfg, "repeats": 1, "r_at_scale_runs": ["h200-shapes"]}))


def test_throughput_bars_are_the_geometric_means_the_labels_are_ratios_of(paper_tables):
    """Figures 1 and 3 draw tok/s bars labelled with the speedup, a ratio of geometric means over engine starts:
    the bars are those geometric means (not medians, which put trident's bar above suffix's while its label was
    lower), and the footer says so."""
    from specsweep.figures import _Ctx, _fig3_sonnet_ladder
    from specsweep.view import Tables

    tables_dir, study = paper_tables
    data = Tables.load(tables_dir, study.run)
    model = study.raw["headline_model"]
    ctx = _Ctx(data=data, model=model, out_dir=None)
    _fig3_sonnet_ladder(ctx)
    fig = ctx.keep["fig3_sonnet_ladder"]
    heights = sorted(round(p.get_height(), 6) for p in fig.axes[0].patches if p.get_height() > 0)
    ladder = data.ladder(model, "sonnet")
    geo = [data.geo((model, "sonnet", c), "output_tok_s") for c in ladder]
    med = [data.val((model, "sonnet", c), "output_tok_s") for c in ladder]
    assert heights == sorted(round(v.point, 6) for v in geo if v is not None)
    assert all(g.lo < g.point < g.hi for g in geo) and [g.point for g in geo] != [m.point for m in med]
    # the geometric mean of each cell's engine starts, which the speedup is a ratio of
    sp = data.spd((model, "sonnet", "trident"), "speedup").point
    assert sp == pytest.approx(geo[ladder.index("trident")].point / geo[0].point, rel=1e-9)
    texts = [t.get_text() for t in fig.texts]
    assert any("bar/marker = geometric mean over engine starts" in t for t in texts), texts


def test_a_model_size_axis_with_one_model_is_left_out(tmp_path):
    """Figures 5 and 8 of h200-reference drew one model on a model-size axis: left out, the reason in the
    manifest."""
    from specsweep.figures import LeftOut, _Ctx, _fig5_model_size, _fig8_r_at_scale
    from specsweep.view import ONE_MODEL, Tables

    data = Tables.load(ROOT / "results/h200-reference/tables", "h200-reference")
    ctx = _Ctx(data=data, model="smollm2-135m-instruct", out_dir=None)
    for draw in (_fig5_model_size, _fig8_r_at_scale):
        with pytest.raises(LeftOut, match=ONE_MODEL):
            draw(ctx)
    cfg = yaml.safe_load((ROOT / "results/h200-reference/config.yaml").read_text())
    from specsweep.view import left_out_by_config

    left = left_out_by_config(build_study(cfg))
    assert left["fig5_model_size"].startswith(ONE_MODEL) and left["fig8_r_at_scale"].startswith(ONE_MODEL)


def test_figures_of_random_weights_say_so_in_title_and_caption():
    """Figure 9 of h200-concurrency-32b showed 6.9x with only the model's name saying random weights."""
    from specsweep.figures import _Ctx, _fig9_concurrency
    from specsweep.view import CONCURRENCY_FIGURE, Tables

    tables_dir, run, model = ROOT / "results/h200-concurrency-32b/tables", "h200-concurrency-32b", "qwen2.5-32b-dummy"
    data = Tables.load(tables_dir, run)
    data.dummy = frozenset({model})
    ctx = _Ctx(data=data, model=model, out_dir=None)
    _fig9_concurrency(ctx)
    title = ctx.keep[CONCURRENCY_FIGURE]._suptitle.get_text().replace("\n", " ")
    assert f"(random weights: {model})" in title, title
    text = captions(tables_dir, model, run, dummy={model})[CONCURRENCY_FIGURE].replace("\\", "")
    assert f"**{model}** (random weights)" in text, text[-400:]


def test_a_zero_width_interval_is_named_identical():
    """Three identical values give an interval of zero width, which says nothing about spread: shown as exact,
    the same in every start (or prompt)."""
    from specsweep import claims
    from specsweep.captions import _v
    from specsweep.view import Val

    assert stats.interval_text(2.11, 2.11, ".2f", 3) == " (same in 3 starts)"
    assert stats.interval_text(2.0, 2.2) == " [2.00, 2.20]"
    assert _v(Val(2.11, 2.11, 2.11, 3)) == "2.11 (same in 3 starts)"
    assert _v(Val(1.0, 1.0, 1.0, 3), over="prompts") == "1.00 (same in every prompt)"
    assert tables._ci(2.11, 2.11, 2.11) == "2.11 (same in every start)"
    assert claims._iv(1.0, 1.0, 1.0, none=claims.NO_PROMPTS) == "1.00 (same in every prompt)"
    assert claims._iv(1.0, None, None, none=claims.NO_PROMPTS, same=40) == "1.00 (same in 40 prompts)"
    assert tables.markdown._exact(1.0, None, None, 3) == "1.00 (same in 3 starts)"
    assert tables._ci(1.001, 1.0004, 1.0016) == "1.001 [1.000, 1.002]"  # more digits, never [1.00, 1.00]
