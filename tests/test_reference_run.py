"""The committed H200 reference run re-renders byte-identical tables and figures here, without a GPU."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from conftest import ROOT
from specsweep.captions import write_captions
from specsweep.config import load_study
from specsweep.figures import render_all
from specsweep.tables import build_tables
from specsweep.view import (
    FIGURES,
    dummy_models,
    left_out_by_config,
    load_k_ref,
    load_r_runs,
    planned_figures,
)

#: committed runs: config, cells in the tables, what the run holds
RUNS = {
    # part 1 of the H200 run: repeat 1 of vanilla and ngram on all six workloads (12 measurements)
    "h200-smollm2": ("results/h200-smollm2/config.yaml", 30),
    # R at scale: four Qwen2.5 shapes x 2 workloads x 3 ladder steps
    "h200-shapes": ("results/h200-shapes/config.yaml", 24),
    # R at scale on two GPUs: the 70B and 72B shapes at TP 2 (72B not yet measured); figure 8 adds h200-shapes
    "h200x2-shapes": ("results/h200x2-shapes/config.yaml", 12),
    # the 72B shape in fp8 on one H200, and the 32B shape in fp8 beside it (32B's spec cells mostly unmeasured)
    "h200-fp8-shapes": ("results/h200-fp8-shapes/config.yaml", 12),
    # concurrency: the 8B shape at b = 1..256 on code-t1/code-greedy, 3 engine starts per ladder step (the cells
    # of all prompts at once were not measured)
    "h200-concurrency": ("results/h200-concurrency/config.yaml", 48),
    # the same at the 32B shape, vanilla/ngram/suffix: code-greedy and code-t1 (3 engine starts per ladder step,
    # each workload on one boot; code-t1@b256/vanilla has 2)
    "h200-concurrency-32b": ("results/h200-concurrency-32b/config.yaml", 30),
    # the 8B shape again on another boot: b = 4, 16, 64 and all at once, vanilla/ngram/suffix, 3 engine starts each
    "h200-concurrency-boot2": ("results/h200-concurrency-boot2/config.yaml", 24),
    # concurrency with the real SmolLM2: code at b = 1..256 with 3 engine starts per ladder step, sonnet with 1-2,
    # chat at b = 1 and 256 with 2-3; chat's other b and the cells of all prompts at once not measured
    "h200-smollm2-concurrency": ("results/h200-smollm2-concurrency/config.yaml", 54),
    # the reference run with the real SmolLM2, every repeat its own engine start: code's ladder and controls
    # (6 cells x 3 engine starts, one boot), chat's ladder (4 x 3, another boot), sonnet's and mix-balanced's
    # (2 x 4 x 3 on 12 engine starts, a third boot), mix-ch's and mix-sh's (2 x 4 x 3 on 12 engine starts, a
    # fifth boot): all 78 measurements
    "h200-reference": ("results/h200-reference/config.yaml", 26),
    # the reference run at scale: the 7B shape's code-t1 and code-greedy x vanilla, ngram, suffix, vanilla-sync, 3
    # engine starts each in interleaved rounds (one boot); the 32B shape's code-t1 likewise (another boot), and
    # its code-greedy (a third boot): all 48 measurements
    "h200-shapes-reference": ("results/h200-shapes-reference/config.yaml", 16),
    # suffix's draft limit: vanilla and suffix-deep (tree depth 64) on chat and code, round 1 of 3 only (one engine
    # start each, one boot); the default suffix step not measured yet
    "h200-suffix-depth": ("results/h200-suffix-depth/config.yaml", 6),
    # group 1 of the steady-state GPU measurements on one H100, whole: the 8B shape's code-greedy at b = 1, 16
    # and 256 (a pool of prompts each) and each pool all at once, 54 measurements on 9 engine starts
    "h100-steady-8b": ("results/h100-steady-8b/config.yaml", 18),
}


#: the runs whose figure sets take longest to render (several seconds each): the slow tier
SLOW_RUNS = ("h200-smollm2", "h200-concurrency")


@pytest.mark.parametrize(
    "run", [pytest.param(r, marks=pytest.mark.slow) if r in SLOW_RUNS else r for r in sorted(RUNS)]
)
def test_reference_run_rerenders_byte_identical(run, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    config, n_cells = RUNS[run]
    study = load_study(config)
    assert study.run == run
    summary = build_tables(study, Path("results"), tmp_path / "tables")
    assert summary["cells"] == n_cells and summary["mismatches"] == [] and summary["stale"] == []
    for f in (ROOT / "results" / run / "tables").iterdir():
        assert (tmp_path / "tables" / f.name).read_bytes() == f.read_bytes(), f.name
    k_ref = load_k_ref(study.raw, ROOT / "results" / run / "tables")
    r_runs = load_r_runs(study.raw, ROOT / "results" / run / "tables")
    manifest = render_all(
        tmp_path / "tables",
        tmp_path / "figs",
        study.raw["headline_model"],
        study.run,
        k_ref,
        r_runs,
        dummy=dummy_models(study),
        left_out=left_out_by_config(study),
    )
    write_captions(
        tmp_path / "tables",
        study.raw["headline_model"],
        tmp_path / "figs" / "captions",
        r_runs=r_runs,
        dummy=dummy_models(study),
        left_out=manifest["left_out"],
    )
    committed = sorted(
        p.relative_to(ROOT / "figures" / run) for p in (ROOT / "figures" / run).rglob("*") if p.is_file()
    )
    drawn = list(manifest["figures"])
    assert set(drawn) | set(manifest["left_out"]) == set(FIGURES)
    assert len(committed) == 3 * len(drawn) + 1  # png + svg + caption per figure drawn, the manifest
    for rel in committed:
        assert (tmp_path / "figs" / rel).read_bytes() == (ROOT / "figures" / run / rel).read_bytes(), rel


def test_figure_8_draws_r_of_both_shape_runs(tmp_path):
    """h200x2-shapes' figure 8 reads h200-shapes' R too (config r_at_scale_runs): every size once, each R
    from the run that measured it, and its notes name each run's conditions (TP, prompt tokens)."""
    from specsweep.errors import SpecsweepError
    from specsweep.view import Tables, r_series

    study = load_study(ROOT / "results" / "h200x2-shapes" / "config.yaml")
    tables = ROOT / "results" / "h200x2-shapes" / "tables"
    others = load_r_runs(study.raw, tables)
    assert [d.run for d in others] == ["h200-shapes"]
    configs, workloads, series = r_series(Tables.load(tables, study.run), others)
    assert configs == ["ngram", "suffix"] and set(workloads) == {"code-t1", "code-greedy"}
    assert set(series) == {(c, w, None) for c in configs for w in workloads}
    for pts in series.values():
        assert [(p.size, p.run) for p in pts] == [
            (0.5, "h200-shapes"),
            (1.5, "h200-shapes"),
            (7.0, "h200-shapes"),
            (32.0, "h200-shapes"),
            (70.0, "h200x2-shapes"),
        ]
    # a run named twice (here: itself as the other run) gives each model once
    _, _, again = r_series(others[0], others)
    assert all(len(pts) == 4 for pts in again.values())
    notes = json.loads((ROOT / "figures" / "h200x2-shapes" / "manifest.json").read_text())["figures"]
    notes = notes["fig8_r_at_scale"]["notes"]
    assert any("run h200x2-shapes" in n and "TP 2" in n for n in notes)
    assert any("run h200-shapes" in n and "TP 1" in n for n in notes)
    # a named run without tables is a one-line error naming it
    with pytest.raises(SpecsweepError, match="r_at_scale_runs: run 'nope' has no tables"):
        load_r_runs({"r_at_scale_runs": ["nope"]}, tables)


def test_figure_8_keeps_fp8_sizes_on_lines_of_their_own():
    """h200-fp8-shapes' 72B (and 32B) shapes ran with fp8 weights: figure 8 draws them as lines of their own,
    never joined to the bf16 sizes of the other runs, and leaves out an R from a single repeat (32B's one
    ngram pass), naming it in the notes."""
    from specsweep.view import Tables, r_series

    study = load_study(ROOT / "results" / "h200-fp8-shapes" / "config.yaml")
    tables = ROOT / "results" / "h200-fp8-shapes" / "tables"
    data = Tables.load(tables, study.run)
    assert data.quantization("qwen2.5-72b-instruct") == "fp8"
    configs, workloads, series = r_series(data, load_r_runs(study.raw, tables))
    assert set(series) == {(c, w, q) for c in configs for w in workloads for q in (None, "fp8")}
    for (_, _, q), pts in series.items():
        if q == "fp8":
            assert [(p.model, p.run, p.quantization) for p in pts] == [
                ("qwen2.5-72b-instruct", "h200-fp8-shapes", "fp8")
            ]
        else:
            assert [p.size for p in pts] == [0.5, 1.5, 7.0, 32.0, 70.0]
            assert {p.run for p in pts} == {"h200-shapes", "h200x2-shapes"}
    notes = json.loads((ROOT / "figures" / "h200-fp8-shapes" / "manifest.json").read_text())["figures"]
    notes = notes["fig8_r_at_scale"]["notes"]
    assert any("run h200-fp8-shapes" in n and "quantized to fp8" in n for n in notes)
    assert any("single repeat" in n and "qwen2.5-32b-instruct/code-t1/ngram" in n for n in notes)


def test_random_weight_runs_draw_only_what_random_weights_measure():
    """The shape runs (every model `weights: dummy`) draw figure 8 (R) only; the manifest names every figure
    left out with the reason, and Snakemake's list of figures is the same."""
    for run in ("h200-shapes", "h200x2-shapes", "h200-fp8-shapes"):
        study = load_study(ROOT / "results" / run / "config.yaml")
        assert planned_figures(study) == ["fig8_r_at_scale"]
        manifest = json.loads((ROOT / "figures" / run / "manifest.json").read_text())
        assert list(manifest["figures"]) == ["fig8_r_at_scale"]
        assert sorted(manifest["left_out"]) == sorted(f for f in FIGURES if f != "fig8_r_at_scale")
        for stem, why in manifest["left_out"].items():
            want = {"fig9_concurrency": "no concurrency axis", "fig10_serve_latency": "no serve-mode cell"}
            assert want.get(stem, "random weights") in why, (run, stem)
            assert not (ROOT / "figures" / run / f"{stem}.png").exists()


def test_figure_8_has_no_prediction_panel_and_a_readable_band():
    """Figure 8 is R only (speedup = T / R; no K / R prediction), on a log axis that ends a little above the
    largest median: the 0.5B whiskers up to 21.4 are clipped and labelled, so the article's 1.25-1.40 band keeps
    a readable height."""
    from specsweep.claims import R_BAND
    from specsweep.figures import R_HEADROOM

    svg = (ROOT / "figures" / "h200-shapes" / "fig8_r_at_scale.svg").read_text()
    assert "PREDICTION" not in svg and "K / R" not in svg
    notes = json.loads((ROOT / "figures" / "h200-shapes" / "manifest.json").read_text())["figures"]
    notes = notes["fig8_r_at_scale"]["notes"]
    # passes on one engine are technical replicates: no interval, so no whisker (the 0.5B one reached 21.4)
    assert not [n for n in notes if n.startswith("whiskers clipped")]
    # the band's share of the log axis: 1.25-1.40 against 0.95 .. 8.55 x R_HEADROOM
    lo, hi = R_BAND
    share = math.log(hi / lo) / math.log(8.55 * R_HEADROOM / 0.95)
    assert share > 0.04  # against 0.01 of a linear axis up to the whisker's 21.37
    caption = (ROOT / "figures" / "h200-shapes" / "captions" / "fig8_r_at_scale.rst").read_text().replace("\\", "")
    assert "predicted" not in caption and "n = 3 repeats per cell" in caption


def test_footers_state_the_n_the_cells_have():
    """h200-smollm2 has every measured cell at n = 1 of 3 planned: footers and captions say so."""
    for stem in ("fig1_headline", "fig7_k_predicted"):
        svg = (ROOT / "figures" / "h200-smollm2" / f"{stem}.svg").read_text()
        assert "n = 1 repeat per cell (3 planned)" in svg, stem
        assert "n = 3" not in svg, stem
        caption = (ROOT / "figures" / "h200-smollm2" / "captions" / f"{stem}.rst").read_text().replace("\\", "")
        assert "n = 1 repeat per cell (3 planned)" in caption and "n = 3" not in caption, stem


def test_figure_8_footer_covers_every_model_it_draws():
    """Figure 8 draws R of every sized model of a run, so its caption's footer names them all, smallest first,
    with the n of all their cells and each missing cell by model: in h200-fp8-shapes one 32B cell has fewer
    passes and several are missing, which a footer of the largest model alone left unsaid."""
    for run in ("h200-shapes", "h200-fp8-shapes", "h200-shapes-reference"):
        caption = (ROOT / "figures" / run / "captions" / "fig8_r_at_scale.rst").read_text().replace("\\", "")
        foot = caption.split("\n\n")[-1]
        rows = pq.read_table(ROOT / "results" / run / "tables" / "cells.parquet").to_pylist()
        sizes = {r["model"]: r["model_params_b"] for r in rows}
        # every model of these runs has random weights, and the footer says so of each
        assert foot.startswith(
            "Models " + ", ".join(f"**{m}** (random weights)" for m in sorted(sizes, key=sizes.__getitem__))
        ), run
        for r in rows:
            cell = f"{r['model']}/{r['workload']}/{r['config']}"
            assert (cell in foot) == (not r["n"] or r["n"] < 3), (run, cell)


@pytest.mark.slow
def test_validation_rerenders_byte_identical(tmp_path, monkeypatch):
    """`specsweep validate` (every drafter cell of the real-weight concurrency run replayed from its stored
    token ids, and the advisor's predictions) gives the committed tables again, byte for byte; and the replay
    holds ngram's tolerance on every cell (suffix's gap is reported, see docs/replay.md)."""
    from specsweep import validate

    monkeypatch.chdir(ROOT)
    run = "h200-smollm2-concurrency"
    got = validate.validate(Path("results") / run / "cells", Path("results") / run / "tables", tmp_path / "v")
    for f in (ROOT / "results" / run / "validation").iterdir():
        assert (tmp_path / "v" / f.name).read_bytes() == f.read_bytes(), f.name
    cells = ROOT / "results" / run / "cells" / "smollm2-135m-instruct"
    ngram = [r for r in got["replay"] if r["method"] == "ngram"]
    assert len(ngram) == len(list(cells.glob("*@b*/ngram/r*.json"))) and all(r["within"] for r in ngram)
    # one prediction per drafter at each (workload, b) where the drafter and vanilla were both measured
    points = {(p.parent.parent.name, p.parent.name) for p in cells.glob("*@b*/*/r*.json") if p.parent.name != "vanilla"}
    points = {(w, c) for w, c in points if list((cells / w / "vanilla").glob("r*.json"))}
    assert len(got["advise"]) == len(points)


FIDELITY = sorted((ROOT / "results").glob("*/fidelity/**/*.json"))


@pytest.mark.parametrize("path", FIDELITY, ids=[p.relative_to(ROOT / "results").as_posix() for p in FIDELITY])
def test_committed_fidelity_recomputes_from_its_passes(path):
    """A committed fidelity check: interleaved fresh-engine passes, and its medians, ratio and interval are
    what stats computes from those passes; docs' table states the verdict at ±3 % from the same numbers."""
    from specsweep import docs, stats

    d = json.loads(path.read_text())
    n = d["runs_each"]
    assert n >= 3 and [p["order"] for p in d["passes"]] == list(range(1, 2 * n + 1))
    assert [p["side"] for p in d["passes"]] == d["order"]
    assert all({d["order"][2 * i], d["order"][2 * i + 1]} == {"specsweep", "harness"} for i in range(n))
    a = [p["output_tok_s"] for p in d["passes"] if p["side"] == "specsweep"]
    b = [p["output_tok_s"] for p in d["passes"] if p["side"] == "harness"]
    assert len(a) == len(b) == n
    for p in d["passes"]:
        assert p["output_tok_s"] == pytest.approx(p["output_tokens"] / p["elapsed_s"], rel=1e-9)
    assert d["specsweep_median_tok_s"] == stats.median(a) and d["harness_median_tok_s"] == stats.median(b)
    assert (d["ratio_of_medians"], d["ratio_lo"], d["ratio_hi"]) == pytest.approx(stats.ratio_ci(a, b), rel=1e-12)
    assert d["goal"] == [0.97, 1.03] and d["within_goal"] == (0.97 <= d["ratio_of_medians"] <= 1.03)
    row = next(ln for ln in docs.fidelity_summary(ROOT).splitlines() if d["cell"] + "]" in ln)
    assert f"| {docs.fidelity_verdict(d['ratio_of_medians'], d['ratio_lo'], d['ratio_hi'])} |" in row


def test_fidelity_summary_states_each_verdict_at_three_percent(tmp_path):
    from specsweep import docs

    def put(name: str, ratio: float, lo: float, hi: float) -> None:
        f = tmp_path / "results" / name / "fidelity" / "m" / "code" / "vanilla.json"
        f.parent.mkdir(parents=True)
        doc = {
            "run": name,
            "cell": f"{name}/code/vanilla",
            "model_weights": "dummy",
            "runs_each": 3,
            "specsweep_median_tok_s": 1000.0 * ratio,
            "harness_median_tok_s": 1000.0,
            "specsweep_cv": 0.01,
            "harness_cv": 0.01,
            "ratio_of_medians": ratio,
            "ratio_lo": lo,
            "ratio_hi": hi,
            "versions": {"vllm": "0.26.0"},
        }
        f.write_text(json.dumps(doc))

    assert "no fidelity check committed" in docs.fidelity_summary(tmp_path)
    put("eq", 1.01, 0.98, 1.02)
    put("hi", 1.08, 1.05, 1.11)
    put("lo", 0.90, 0.85, 0.95)
    put("und", 1.02, 1.00, 1.04)
    rows = {ln.split(" | ")[0].lstrip("| "): ln for ln in docs.fidelity_summary(tmp_path).splitlines()[2:]}
    assert "| equivalent |" in rows["eq"] and "| specsweep higher |" in rows["hi"]
    assert "| specsweep lower |" in rows["lo"] and "| undecided |" in rows["und"]
    assert "1.020 [1.000, 1.040]" in rows["und"] and "(../results/und/fidelity/m/code/vanilla.json)" in rows["und"]


def test_pairing_check_reproduces_the_tables_intervals() -> None:
    """workflow/scripts/pairing-check.py, the diagnostic behind design.md's "pairing by round", prints the
    interval the tables hold for every speedup of a committed run (the verdict rule's), and a paired interval
    around the same geometric-mean ratio."""
    import subprocess
    import sys

    tables = ROOT / "results" / "h200-shapes-reference" / "tables"
    out = subprocess.run(
        [sys.executable, str(ROOT / "workflow" / "scripts" / "pairing-check.py"), str(tables)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    want = {
        (r["model"], r["workload"], r["config"]): r
        for r in pq.read_table(tables / "speedup.parquet").to_pylist()
        if r["speedup_lo"] is not None
    }
    rows = [line for line in out if line.startswith("qwen2.5-")]
    assert len(rows) == len(want) >= 9  # two models share workloads and steps: keyed by model too
    for line in rows:
        fields = line.split()[:15]
        model, workload, step, rounds, _corr, _, ratio, wlo, whi, _half, verdict, _, pratio, plo, phi = fields
        w = want[(model, workload, step)]
        assert int(rounds) == 3
        assert float(ratio) == pytest.approx(w["speedup"], abs=6e-4)
        assert float(wlo.strip("[,")) == pytest.approx(w["speedup_lo"], abs=6e-4)
        assert float(whi.strip("]")) == pytest.approx(w["speedup_hi"], abs=6e-4)
        assert verdict == w["verdict"]
        assert pratio == ratio and float(plo.strip("[,")) < float(pratio) < float(phi.strip("]"))
    assert (
        out[-1].startswith("paired interval narrower than the tables' in ") and f" of {len(want)} speedups" in out[-1]
    )


def test_suffix_drafts_stop_at_12_tokens_at_vllms_defaults() -> None:
    """vLLM's suffix drafter proposes at most max_spec_factor x the matched prefix, match and draft together at
    most max_tree_depth tokens: at the defaults (1.0, 24) no draft runs past 12 tokens, whatever
    num_speculative_tokens says (docs/replay.md). Every committed cell of a suffix step at those defaults
    accepted nothing past position 12, most accepted something at 12 (the cap binds), and the cells measured
    with the limits raised (run h200-suffix-depth) accepted past it."""
    from specsweep.replay import SUFFIX_DEFAULTS

    limit_keys = ("suffix_decoding_max_tree_depth", "suffix_decoding_max_spec_factor")
    at_defaults: list[int] = []
    raised: list[int] = []
    for path in sorted(ROOT.glob("results/*/cells/**/r*.json")):
        cell = json.loads(path.read_text())
        spec = cell["settings"]["ladder"].get("speculative") or {}
        pos = (cell.get("spec") or {}).get("accepted_per_pos") or []
        if spec.get("method") != "suffix" or not any(pos):
            continue
        last = max(i + 1 for i, v in enumerate(pos) if v)
        if all(spec.get(k, SUFFIX_DEFAULTS[k]) == SUFFIX_DEFAULTS[k] for k in limit_keys):
            assert spec["num_speculative_tokens"] == 32 and last <= 12, (path, last)
            at_defaults.append(last)
        else:
            raised.append(last)
    assert len(at_defaults) >= 100 and at_defaults.count(12) > len(at_defaults) // 2
    assert raised and max(raised) > 12


def test_cells_at_b_show_their_occupancy_flag_a_low_one_or_say_it_was_not_recorded(monkeypatch):
    """The committed 32B concurrency cells predate the occupancy record: the summary says so and draws no
    column. With an occupancy put on their measurement rows (one ngram pass at 62 % of b, one cell's passes
    without a record), the summary shows each cell's lowest pass, flags the low one and every verdict it enters,
    and says "not recorded" where a pass lacks it; gpu_time counts the decided cells."""
    from specsweep import tables

    monkeypatch.chdir(ROOT)
    study = load_study("results/h200-concurrency-32b/config.yaml")
    rows, docs, _ = tables.load_measurements(study, Path("results"))

    def render() -> tuple[str, list[dict]]:
        crow = tables.cell_rows(study, rows, docs, False, [])
        sp = tables.speedup_rows(study, rows, crow, docs, False, [])
        return tables.summary_markdown(study, crow, sp, tables.gpu_time(study, rows, docs, sp)), sp

    text, sp = render()
    assert "Occupancy not recorded" in text and "occupancy |" not in text
    gt = tables.gpu_time(study, rows, docs, sp)
    decided = [s for s in sp if s["verdict"].split(" ")[0] in ("faster", "slower", "equivalent")]
    assert gt["decided_cells"] == len(decided) > 0
    assert gt["gpu_s_per_decided_cell"] == pytest.approx(gt["total_s"] / len(decided), abs=1e-3)

    ok = [r for r in rows if r["status"] == "ok" and r["concurrency"] is not None]
    low = next(r for r in ok if (r["workload"], r["config"]) == ("code-greedy@b256", "ngram"))
    unrecorded = ("code-t1@b1", "suffix")
    for r in ok:
        r |= {"_occupancy_recorded": (r["workload"], r["config"]) != unrecorded, "_occupancy": 0.97}
    low["_occupancy"] = 0.62
    text, _ = render()
    assert "| b | TPOT ms | occupancy | n |" in text
    lines = {tuple(c.strip() for c in line.split("|")[2:4]): line for line in text.splitlines() if "| code-" in line}
    assert "| 62 % (low) |" in lines[("code-greedy@b256", "ngram")]
    assert "(occupancy below 90 % of b)" in lines[("code-greedy@b256", "ngram")]
    assert "| not recorded |" in lines[unrecorded]
    others = [v for k, v in lines.items() if k not in (("code-greedy@b256", "ngram"), unrecorded)]
    assert others and all("| 97 % |" in v and "occupancy below" not in v for v in others)
    assert "Below 90 % of b: 32b/code-greedy@b256/ngram at concurrency 256." in text.replace(
        study.raw["headline_model"], "32b"
    )
