"""The article's claims are decided for the right reason: each rule on constructed table rows (pure
functions, known answers) and on the committed runs' tables."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import yaml

from conftest import ROOT
from specsweep import claims, stats, tables
from specsweep.config import build_study


def _study(config: str = "results/h200-smollm2/config.yaml", **over):
    cfg = yaml.safe_load((ROOT / config).read_text())
    params_b = over.pop("params_b", None)
    if params_b is not None:
        cfg["models"][0]["params_b"] = params_b
    cfg.update(over)
    return build_study(cfg)


def _sp(model_b: float, config: str, method: str, verdict: str, speedup: float, **kw) -> dict:
    row = dict.fromkeys((n for n, _ in tables.SPEEDUP_COLUMNS), None)
    row |= {
        "model": f"m{model_b}",
        "model_params_b": model_b,
        "workload": "code",
        "config": config,
        "method": method,
        "status": "ok",
        "speedup": speedup,
        "speedup_lo": speedup * 0.95,
        "speedup_hi": speedup * 1.05,
        "verdict": verdict,
    } | kw
    return row


def _cell(model: str, workload: str, config: str, **kw) -> dict:
    row = dict.fromkeys((n for n, _ in tables.CELL_COLUMNS), None)
    return row | {"model": model, "workload": workload, "config": config, "n": 3, "repeats": 3, "status": "ok"} | kw


def _meas(model: str, workload: str, config: str, step_ms: list[float]) -> list[dict]:
    return [
        {
            "model": model,
            "workload": workload,
            "config": config,
            "status": "ok",
            "repeat": i + 1,
            "step_time_ms": v,
            "decode_step_time_ms": v,
            "output_tok_s": 1000.0 / v,
            "concurrency": None,
            "_start": f"{workload}-{config}-{i}",
        }
        for i, v in enumerate(step_ms)
    ]


def _runs(model: str, workload: str, config: str, values: list[float], metric: str = "output_tok_s") -> list[dict]:
    """Measurement rows of one cell, each value its own engine start (as the tables' rows: `_start`)."""
    return [
        {"model": model, "workload": workload, "config": config, "concurrency": None, "status": "ok",
         "repeat": i + 1, metric: v, "_start": f"{workload}-{config}-{i}"}
        for i, v in enumerate(values)
    ]  # fmt: skip


def _by_id(decided: list[dict]) -> dict[str, dict]:
    return {c["id"]: c for c in decided}


def test_every_claim_states_its_rule_and_numbers():
    study = _study()
    decided = claims.decide(study, [], [_sp(0.135, "ngram", "ngram", "slower", 0.7)], [])
    assert [c["id"] for c in decided] == [f"C{i}" for i in range(1, 9)]
    for c in decided:
        assert c["rule"] == claims.RULES[c["id"]] and c["rule"], c["id"]
    md = claims.markdown(study, decided)
    assert "| claim | verdict | rule | evidence |" in md and claims.VERDICT_RULE in md
    assert "0.700 [0.665, 0.735] slower" in _by_id(decided)["C1"]["evidence"]


def test_c1_and_c8_follow_the_verdicts_by_prefix():
    study = _study()
    assert _by_id(claims.decide(study, [], [_sp(0.5, "ngram", "ngram", "faster", 1.3)], []))["C1"]["verdict"] == (
        "refuted"
    )
    slower = [_sp(0.5, "ngram", "ngram", "slower", 0.7), _sp(0.5, "suffix", "suffix", "slower", 0.8)]
    assert _by_id(claims.decide(study, [], slower, []))["C1"]["verdict"] == "confirmed"
    # two cells: an `equivalent` refutes only where it holds at the family-wise level (each at 97.5 %)
    equivalent = [
        _sp(0.5, "ngram", "ngram", "slower", 0.7),
        _sp(0.5, "suffix", "suffix", "equivalent", 1.0, baseline="vanilla"),
    ]
    starts = _runs("m0.5", "code", "suffix", [1000.0, 1002.0, 998.0, 1001.0]) + _runs(
        "m0.5", "code", "vanilla", [1000.0] * 4
    )
    c1 = _by_id(claims.decide(study, [], equivalent, starts))["C1"]
    assert (
        c1["verdict"] == "refuted" and "family-wise (2 cells, each interval at 97.50 %): refuted by" in c1["evidence"]
    )
    unsure = [_sp(0.5, "ngram", "ngram", "slower", 0.7), _sp(0.5, "suffix", "suffix", "undecided (n<2)", 1.0)]
    assert _by_id(claims.decide(study, [], unsure, []))["C1"]["verdict"] == "undecided"
    big = _by_id(claims.decide(study, [], [_sp(70.0, "trident", "suffix", "faster", 1.4)], []))
    assert big["C8"]["verdict"] == "confirmed"
    assert big["C1"]["verdict"] == claims.NOT_COVERED and big["C1"]["evidence"] == "no such cells"
    # passes on one engine decide nothing, and say what the verdicts alone would give
    tech = _by_id(claims.decide(_study(engine_per_repeat=False), [], slower, []))["C1"]
    assert tech["verdict"] == claims.TECHNICAL and "would say confirmed" in tech["evidence"]


def test_c1_refutes_only_at_the_family_wise_level():
    """One `equivalent` among 19 cells, from 2 engine starts a side that happened to agree (the case of run
    h200-reference's mix-ch/suffix): at 95 % it lies inside the band, at 1 - 0.05 / 19 it does not, so C1 is
    undecided and says which cell was taken again; with no engine starts to recompute from, nothing refutes."""
    study = _study()
    a, b = [9538.0, 9697.0], [10239.0, 9986.0]
    p, lo, hi = stats.ratio_ci(a, b)
    band = 0.197
    v = stats.verdict(p, lo, hi, band=band)
    assert v == "equivalent"
    eq = _sp(0.135, "suffix", "suffix", v, p, speedup_lo=lo, speedup_hi=hi, band=band, baseline="vanilla")
    rest = [_sp(0.135, f"s{i}", "ngram", "undecided", 0.9, band=band, baseline="vanilla") for i in range(18)]
    rows = _runs("m0.135", "code", "suffix", a) + _runs("m0.135", "code", "vanilla", b)
    c1 = _by_id(claims.decide(study, [], [eq, *rest], rows))["C1"]
    assert c1["verdict"] == "undecided", c1["evidence"]
    assert "family-wise (19 cells, each interval at 99.74 %): no cell refutes (m0.135/code/suffix [" in c1["evidence"]
    assert _by_id(claims.decide(study, [], [eq, *rest], []))["C1"]["verdict"] == "undecided"
    # a `faster` cell of 5 tight engine starts a side still refutes at 99.74 %
    fa, fb = [1300.0, 1302.0, 1298.0, 1301.0, 1299.0], [1000.0, 1001.0, 999.0, 1000.5, 999.5]
    p, lo, hi = stats.ratio_ci(fa, fb)
    fast = _sp(0.135, "ngram", "ngram", stats.verdict(p, lo, hi, band=band), p, band=band, baseline="vanilla")
    rows = _runs("m0.135", "code", "ngram", fa) + _runs("m0.135", "code", "vanilla", fb)
    assert _by_id(claims.decide(study, [], [fast, *rest], rows))["C1"]["verdict"] == "refuted"


def test_family_wise_refutation_keeps_its_error_rate():
    """Ten cells, each truly just slower than the band's edge (speedup 0.97 x 0.9995, band 3 %), 5 engine starts
    a side: a cell's 95 % interval lands inside the band (a false `equivalent`) up to 2.5 % of the time, so
    "refuted when any is equivalent" would refute in 18 % of studies (seeded: 0.177); the family-wise rule
    refutes in at most 5 % (seeded: 0.014), 2,000 simulated studies."""
    rng = np.random.default_rng(7)
    truth, band, m, n, sims = 0.97 * 0.9995, 0.03, 10, 5, 2000
    raw = fw = 0
    for _ in range(sims):
        sp, rows = [], []
        for i in range(m):
            a = np.exp(math.log(1000.0 * truth) + rng.normal(0.0, 0.01, n)).tolist()
            b = np.exp(math.log(1000.0) + rng.normal(0.0, 0.01, n)).tolist()
            p, lo, hi = stats.ratio_ci(a, b)
            cfg = f"c{i}"
            sp.append(
                _sp(
                    0.135,
                    cfg,
                    "ngram",
                    stats.verdict(p, lo, hi, band=band),
                    p,
                    speedup_lo=lo,
                    speedup_hi=hi,
                    band=band,
                    baseline=f"v{i}",
                )
            )
            rows += _runs("m0.135", "code", cfg, a) + _runs("m0.135", "code", f"v{i}", b)
        raw += any(s["verdict"] == "equivalent" for s in sp)
        fam = claims.Family(rows)
        fw += claims._speedup_claim("C1", sp, set(), False, lambda s: True, "slower", fam)["verdict"] == "refuted"
    assert raw / sims > 0.12, f"uncorrected: {raw / sims:.3f}"
    assert fw / sims <= 0.05, f"family-wise: {fw / sims:.3f}"


def test_random_weights_give_the_true_reason():
    """Dummy-weight cells exist but say nothing about acceptance or speedup: the reason says so, not 'no such
    cells'."""
    study = build_study(yaml.safe_load((ROOT / "results/h200-shapes/config.yaml").read_text()))
    row = _sp(7.0, "ngram", "ngram", "slower", 0.5, model="qwen2.5-7b-instruct", R_decode=5.6)
    spec = _cell("qwen2.5-7b-instruct", "code-t1", "suffix", K_median=1.0, drafts=100, draft_tokens=3200)
    spec |= {"accepted_per_pos": [0] * 32}
    by_id = _by_id(claims.decide(study, [spec], [row], []))
    for cid in ("C1", "C2", "C5"):
        assert by_id[cid]["verdict"] == claims.NOT_COVERED, cid
        assert "random weights" in by_id[cid]["evidence"] and "no such cells" not in by_id[cid]["evidence"], cid


def test_c6_decides_from_32b_and_up_only_and_r0_of_random_weights():
    study = _study(params_b=70.0)
    m = "smollm2-135m-instruct"
    inside = _sp(70.0, "ngram", "ngram", "slower", 0.9, model=m, R_decode=1.30, R_decode_lo=1.27, R_decode_hi=1.36)
    small = _sp(7.0, "ngram", "ngram", "slower", 0.5, model="m7", R_decode=5.6, R_decode_lo=5.3, R_decode_hi=5.7)
    c6 = _by_id(claims.decide(study, [], [inside, small], []))["C6"]
    assert c6["verdict"] == "confirmed", c6  # the 7B R far outside the band does not enter
    assert c6["cells"] == [f"{m}/code/ngram"] and "1 R of models < 32B not deciding" in c6["evidence"]
    outside = inside | {"workload": "chat", "R_decode": 1.6, "R_decode_lo": 1.5, "R_decode_hi": 1.7}
    outside |= {"baseline": "vanilla"}
    # one of two cells wholly outside: refuted where it stays outside at 97.5 % (engine starts to recompute from)
    steps = _runs(m, "chat", "ngram", [16.0, 16.1, 15.9], "decode_step_time_ms")
    steps += _runs(m, "chat", "vanilla", [10.0, 10.05, 9.95], "decode_step_time_ms")
    c6 = _by_id(claims.decide(study, [], [inside, outside], steps))["C6"]
    assert (
        c6["verdict"] == "refuted" and "family-wise (2 cells, each interval at 97.50 %): refuted by" in c6["evidence"]
    )
    assert f"{m}/chat/ngram R [1.5" in c6["evidence"], c6["evidence"]
    # two starts a side that happen to agree: outside at 95 %, not at 97.5 %
    lucky = _runs(m, "chat", "ngram", [14.4, 14.5], "decode_step_time_ms")
    lucky += _runs(m, "chat", "vanilla", [10.0, 10.5], "decode_step_time_ms")
    c6 = _by_id(claims.decide(study, [], [inside, outside], lucky))["C6"]
    assert c6["verdict"] == "undecided" and "no cell refutes" in c6["evidence"], c6["evidence"]
    straddles = inside | {"R_decode_lo": 1.2}
    assert _by_id(claims.decide(study, [], [straddles], []))["C6"]["verdict"] == "undecided"
    # random weights: R_full (drafts accepted, K > 1.05) is context, never a verdict; R0 decides
    shapes = build_study(
        yaml.safe_load((ROOT / "results/h200-shapes/config.yaml").read_text()) | {"engine_per_repeat": True}
    )
    m32 = "qwen2.5-32b-instruct"
    r0 = _sp(32.0, "ngram", "ngram", "slower", 0.9, model=m32, workload="code-t1", R_decode=1.3, R_decode_lo=1.26)
    r0 |= {"R_decode_hi": 1.38}
    full = _sp(32.0, "ngram", "ngram", "faster", 1.06, model=m32, workload="code-greedy", K=7.2, R_decode=3.8)
    full |= {"R_decode_lo": 3.6, "R_decode_hi": 3.9}
    c6 = _by_id(claims.decide(shapes, [], [r0, full], []))["C6"]
    assert c6["verdict"] == "confirmed" and c6["cells"] == [f"{m32}/code-t1/ngram"]
    # R0 measured (K 1.0, drafts all rejected): inside the band it bounds R from below and confirms nothing
    c6 = _by_id(claims.decide(shapes, [], [r0 | {"K": 1.0}, full], []))["C6"]
    assert c6["verdict"] == "undecided" and "bound only" in c6["evidence"], c6["evidence"]
    assert "R_full" in c6["evidence"] and "3.80 [3.60, 3.90]" in c6["evidence"]


def _split_rows(m: str, w: str, async_off: float, drafting: float) -> list[dict]:
    """Step times of vanilla, vanilla-sync (async_off times slower) and ngram (drafting times vanilla-sync's)."""
    base = [10.0, 10.1, 9.9]
    sync = [v * async_off for v in base]
    rows = _meas(m, w, "vanilla", base) + _meas(m, w, "vanilla-sync", sync)
    return rows + _meas(m, w, "ngram", [v * drafting for v in sync])


def test_c6_splits_r_into_async_scheduling_and_drafting_with_vanilla_sync():
    """With vanilla-sync cells, R = (vanilla-sync / vanilla) x (drafter / vanilla-sync) is stated beside R."""
    study = _study(params_b=70.0)
    m, w = "smollm2-135m-instruct", "code"
    rows = _split_rows(m, w, 1.2, 1.1)
    sp = _sp(70.0, "ngram", "ngram", "slower", 0.9, model=m, R_decode=1.32, R_decode_lo=1.30, R_decode_hi=1.34)
    c6 = _by_id(claims.decide(study, [], [sp], rows))["C6"]
    assert "async off 1.20" in c6["evidence"] and "drafting 1.10" in c6["evidence"], c6["evidence"]
    assert f"{m}/{w}/vanilla-sync" in c6["cells"]


def test_c6_states_the_split_of_smaller_models_as_context_only():
    """Below 32B R decides nothing, but where vanilla-sync ran its split is stated; those cells are not C6's."""
    study = _study(params_b=70.0)
    m, w = "m7", "code"
    rows = _split_rows(m, w, 1.8, 1.2)
    small = _sp(7.0, "ngram", "ngram", "slower", 0.5, model=m, R_decode=2.16, R_decode_lo=2.1, R_decode_hi=2.2)
    big = "m70"
    inside = _sp(70.0, "ngram", "ngram", "slower", 0.9, model=big, R_decode=1.30, R_decode_lo=1.27, R_decode_hi=1.36)
    c6 = _by_id(claims.decide(study, [], [inside, small], rows))["C6"]
    assert c6["verdict"] == "confirmed" and c6["cells"] == [f"{big}/code/ngram"], c6
    ev = c6["evidence"]
    assert "1 R of models < 32B not deciding" in ev and "of which with the control: m7/code/ngram 2.16" in ev, ev
    assert "async off 1.80" in ev and "drafting 1.20" in ev, ev
    # without the small model's control cells, no split and no 'of which'
    c6 = _by_id(claims.decide(study, [], [inside, small], []))["C6"]
    assert "of which" not in c6["evidence"], c6["evidence"]


def test_c6_states_the_split_of_r_full_beside_it():
    """Random weights accepting every draft (R_full) decide nothing, but where vanilla-sync ran, its split shows
    how much of R_full is the engine's (async scheduling off) and how much is drafting and verifying."""
    study = build_study(yaml.safe_load((ROOT / "results/h200-shapes-reference/config.yaml").read_text()))
    m, w = "qwen2.5-32b-instruct", "code-greedy"
    rows = _split_rows(m, w, 1.12, 2.6)
    full = _sp(32.0, "ngram", "ngram", "faster", 1.05, model=m, workload=w, K=7.2, R_decode=2.91)
    full |= {"R_decode_lo": 2.8, "R_decode_hi": 3.0}
    c6 = _by_id(claims.decide(study, [], [full], rows))["C6"]
    ev = c6["evidence"]
    assert c6["verdict"] == "not covered by this run" and c6["cells"] == [], c6
    assert f"(R_full): {m}/{w}/ngram 2.91 [2.80, 3.00] = async off 1.12 [" in ev, ev
    assert "× drafting 2.60 [" in ev and "(vanilla-sync) (K 7.20)" in ev, ev
    # without the control's cells, R_full alone
    ev = _by_id(claims.decide(study, [], [full], []))["C6"]["evidence"]
    assert "async off" not in ev and "(K 7.20)" in ev, ev


def _spec_cell(model: str, workload: str, k: float, k_lo: float | None, pos: list[int], drafts: int, dtok: int):
    k_hi = None if k_lo is None else k + (k - k_lo)
    row = _cell(model, workload, "ngram", method="ngram", K_median=k, K_lo=k_lo, K_hi=k_hi)
    return row | {"drafts": drafts, "draft_tokens": dtok, "accepted_per_pos": pos}


def test_c5_refutes_a_form_that_misses_every_cell_one_way():
    study = _study()
    m = "smollm2-135m-instruct"
    # positively correlated positions: p1 = 0.5 of 7-token drafts, then nearly every next one accepted:
    # K = 1 + sum(pos) / drafts ~ 3.9; linear 1 + 0.5 * 7 = 4.5 over-predicts, Leviathan ~ 2.0 under-predicts
    pos = [5000, 4800, 4600, 4400, 4200, 4000, 3800]
    k = 1 + sum(pos) / 10000
    cells = [_spec_cell(m, w, k, k - 0.05, pos, 10000, 70000) for w in ("code", "chat")]
    c5 = _by_id(claims.decide(study, cells, [], []))["C5"]
    assert c5["verdict"] == "refuted"
    assert "linear over-predicts 2 of 2" in c5["evidence"] and "leviathan under-predicts 2 of 2" in c5["evidence"]
    assert "above p1 (Wilson intervals apart) in 2 of 2" in c5["evidence"]
    # i.i.d. positions at p = 0.5: Leviathan fits, the linear form over-predicts: refuted (linear is worse)
    iid = [5000, 2500, 1250, 625, 312, 156, 78]
    cells = [_spec_cell(m, w, 1 + sum(iid) / 10000, None, iid, 10000, 70000) for w in ("code", "chat")]
    assert _by_id(claims.decide(study, cells, [], []))["C5"]["verdict"] == "refuted"
    # every position accepted with p1 = 1: both forms give K = g + 1 = 8: neither refuted
    full = [10000] * 7
    cells = [_spec_cell(m, w, 8.0, 7.95, full, 10000, 70000) for w in ("code", "chat")]
    assert _by_id(claims.decide(study, cells, [], []))["C5"]["verdict"] == "undecided"
    # measured K 4.5 [4.45, 4.55]: the linear form (1 + 0.5 * 7) fits, Leviathan's (~2.0) misses low: confirmed
    lin = [5000, 3750, 3000, 2500, 2100, 1900, 1750]
    cells = [_spec_cell(m, w, 1 + 0.5 * 7, 4.45, lin, 10000, 70000) for w in ("code", "chat")]
    c5 = _by_id(claims.decide(study, cells, [], []))["C5"]
    assert c5["verdict"] == "confirmed", c5["evidence"]


def test_k_predictions_known_answer():
    # p1 = 6/10, g = 40/10 = 4: linear 1 + 0.6 * 4 = 3.4; Leviathan (1 - 0.6^5) / 0.4
    row = {"drafts": 10, "draft_tokens": 40, "accepted_per_pos": [6, 3, 1], "K_median": 2.0}
    p = claims.k_predictions(row)
    assert p["K_linear"] == pytest.approx(3.4)
    assert p["K_leviathan"] == pytest.approx((1 - 0.6**5) / 0.4)
    assert p["conditional_acceptance"] == pytest.approx([0.6, 0.5, 1 / 3])
    lo, hi = stats.wilson(6, 10)
    assert (p["p1_lo"], p["p1_hi"]) == (lo, hi) and lo < 0.6 < hi
    assert p["K_linear_lo"] == pytest.approx(1 + lo * 4) and p["K_linear_hi"] == pytest.approx(1 + hi * 4)
    assert claims.k_predictions({"drafts": 0, "draft_tokens": 0, "accepted_per_pos": [], "K_median": None}) is None
    # past the last position where anything was accepted the counters say nothing (vLLM's suffix drafter
    # never drafts past 12 tokens at its defaults, num_speculative_tokens 32): None, not a conditional 0
    capped = claims.k_predictions({"drafts": 10, "draft_tokens": 40, "accepted_per_pos": [6, 3, 0, 0], "K_median": 1.9})
    assert capped["conditional_acceptance"][:2] == pytest.approx([0.6, 0.5])
    assert capped["conditional_acceptance"][2:] == [None, None]
    assert stats.continuation(10, [6, 3, 0, 0]) == [(1, 6.0, 10.0), (2, 3.0, 6.0)]
    assert stats.continuation(10, [0, 0]) == []


def test_c3_uses_the_model_band_and_the_article_point_only():
    """C3 (trident over suffix-full on chat) judges its ratio with the model's band, as every verdict of the
    tables does, and from the cells at the article's point: a cell measured at a concurrency b does not enter."""
    study = _study()
    m = "smollm2-135m-instruct"
    cells = [
        _cell(m, "chat", step, cudagraph_mode_effective=mode)
        for step, mode in (("trident", "PIECEWISE"), ("suffix-full", "FULL"))
    ]
    rows = _runs(m, "chat", "trident", [1100.0, 1105.0, 1095.0]) + _runs(
        m, "chat", "suffix-full", [1000.0, 1002.0, 998.0]
    )
    at_b1 = [r | {"concurrency": 1, "output_tok_s": 50.0, "_start": r["_start"] + "@b1"} for r in rows]
    narrow = _sp(0.135, "ngram", "ngram", "slower", 0.7, model=m, band=0.03)
    c3 = _by_id(claims.decide(study, cells, [narrow], rows + at_b1))["C3"]
    assert c3["verdict"] == "confirmed" and "tok/s ratio 1.100 [" in c3["evidence"], c3["evidence"]
    wide = narrow | {"band": 0.2}  # the run's engine starts spread 20 %: a 10 % gain lies inside the band
    c3 = _by_id(claims.decide(study, cells, [wide], rows + at_b1))["C3"]
    assert c3["verdict"] == "refuted" and "equivalent" in c3["evidence"], c3["evidence"]


def test_c4_reads_the_measured_utilisation():
    study = _study()
    m = "smollm2-135m-instruct"
    cells = [
        _cell(m, "chat", "vanilla", gpu_util_mean_lo=90.0, gpu_util_mean_hi=94.0),
        _cell(m, "chat", "trident", gpu_util_mean_lo=70.0, gpu_util_mean_hi=75.0),
    ]
    sp = _sp(0.135, "trident", "suffix", "faster", 1.5, model=m, workload="chat")
    sp |= {"gpu_util_mean": 73.3, "baseline_gpu_util_mean": 93.8}
    c4 = _by_id(claims.decide(study, cells, [sp], []))["C4"]
    assert c4["verdict"] == "confirmed" and "vanilla 93.8–93.8 %" in c4["evidence"]
    assert _by_id(claims.decide(study, cells, [sp | {"verdict": "slower"}], []))["C4"]["verdict"] == "refuted"
    # of two trident cells one is `slower` at 95 % from three engine starts a side; at 97.5 % it is not, and its
    # utilisation stays below vanilla's: C4 undecided, not refuted
    code = [
        _cell(m, "code", "vanilla", gpu_util_mean_lo=90.0, gpu_util_mean_hi=94.0),
        _cell(m, "code", "trident", gpu_util_mean_lo=70.0, gpu_util_mean_hi=75.0),
    ]
    a, b = [930.3, 941.8, 953.4], [987.8, 1000.0, 1012.3]
    p, lo, hi = stats.speedup_ci(a, b)  # Welch's, each cell's own spread
    assert stats.verdict(p, lo, hi) == "slower" and stats.speedup_ci(a, b, 0.975)[2] > 0.97
    slow = sp | {"workload": "code", "speedup": p, "speedup_lo": lo, "speedup_hi": hi, "verdict": "slower"}
    slow |= {"baseline": "vanilla", "band": stats.BAND}
    rows = _runs(m, "code", "trident", a) + _runs(m, "code", "vanilla", b)
    rows = [r | {"gpu_util_mean": u} for r, u in zip(rows, [72.0, 73.0, 74.0, 92.0, 93.0, 94.0], strict=True)]
    c4 = _by_id(claims.decide(study, cells + code, [sp, slow], rows))["C4"]
    assert c4["verdict"] == "undecided" and "family-wise (2 cells, each interval at 97.50 %): no cell" in c4["evidence"]
    # no utilisation anywhere: said so, not "no GPU"
    bare = sp | {"gpu_util_mean": None, "baseline_gpu_util_mean": None}
    assert "GPU utilisation not measured" in _by_id(claims.decide(study, cells, [bare], []))["C4"]["evidence"]


def test_committed_runs_decide_for_the_right_reason():
    """On the committed tables: C4 quotes the utilisation the H200 cells measured, C6 reads 32B and up only
    (the code-greedy R_full of random weights as context), random-weight runs say so, n = 1 is stated."""

    def load(run: str) -> dict[str, dict]:
        return _by_id(json.loads((ROOT / "results" / run / "tables" / "claims.json").read_text()))

    smol = load("h200-smollm2")
    assert "vanilla 17.4–36.2 %" in smol["C4"]["evidence"] and smol["C4"]["verdict"].startswith("undecided")
    assert "GPU utilisation not measured" not in smol["C4"]["evidence"]
    assert smol["C5"]["verdict"] == "refuted" and "over-predicts 6 of 6" in smol["C5"]["evidence"]
    assert smol["C6"]["verdict"] == claims.NOT_COVERED and "models < 32B not deciding" in smol["C6"]["evidence"]
    shapes = load("h200-shapes")
    assert "vanilla 38.6–99.3 %" in shapes["C4"]["evidence"] and "random weights" in shapes["C4"]["evidence"]
    assert "random weights" in shapes["C1"]["evidence"] and "random weights" in shapes["C5"]["evidence"]
    assert shapes["C6"]["cells"] == ["qwen2.5-32b-instruct/code-t1/ngram", "qwen2.5-32b-instruct/code-t1/suffix"]
    assert shapes["C6"]["verdict"] == claims.TECHNICAL  # passes on one engine decide nothing
    # R at zero acceptance (code-t1: drafts all rejected) bounds R from below only
    assert (
        "qwen2.5-32b-instruct/code-t1/ngram 1.29 (technical replicates) (zero acceptance: a lower bound on R): "
        "undecided" in shapes["C6"]["evidence"]
    ), shapes["C6"]["evidence"]
    # h200-reference: C2 refuted (ratio interval below 1.5), C5 decided on ngram alone (both forms refuted)
    ref = load("h200-reference")
    assert ref["C2"]["verdict"] == "refuted" and "ratio 1.09 [1.00, 1.17] against 1.5" in ref["C2"]["evidence"]
    assert ref["C5"]["verdict"] == "refuted" and ref["C5"]["evidence"].startswith("ngram drafter: linear over")
    assert load("h200-suffix-depth")["C5"]["verdict"] == claims.NOT_COVERED
    c9 = load("h200-smollm2-concurrency")["C9"]
    # family-wise: code/suffix's interval at b = 1 (each cell's own spread) still lies below 1 at 99.17 %
    assert c9["verdict"] == "refuted" and "code/suffix at b = 1 [0.332, 0.732] slower" in c9["evidence"]
    for run in ("h200-smollm2", "h200-shapes", "h200x2-shapes", "h200-fp8-shapes"):
        for c in load(run).values():
            assert c["rule"] and c["evidence"], (run, c["id"])
    assert "n = 1 measured" in (ROOT / "results/h200-smollm2/tables/readme.md").read_text()


def test_a_cpu_run_decides_no_claim_and_answers_its_own_question():
    study = build_study(yaml.safe_load((ROOT / "config/smoke.yaml").read_text()))
    m = "smollm2-135m-instruct"
    keys = [(w, c) for w in ("code", "chat") for c in ("vanilla", "ngram")]
    crow = [_cell(m, w, c, repeats=3, n=3, output_tok_s_cv=0.03) for w, c in keys]
    # about 3 % between starts in every cell: pooled over 4 cells x 3 starts (df 8), well inside the line
    steady = [
        r for i, (w, c) in enumerate(keys) for r in _runs(m, w, c, [100.0 * (i + 1) * f for f in (0.97, 1.0, 1.03)])
    ]
    sp = [_sp(0.135, "ngram", "ngram", "faster", 1.8, model=m)]
    decided = _by_id(claims.decide(study, crow, sp, steady))
    for cid in (f"C{i}" for i in range(1, 9)):
        assert decided[cid]["verdict"] == claims.NOT_ON_CPU, cid
    assert "would say refuted" in decided["C1"]["evidence"]  # the rule's answer is shown, not taken
    cpu = decided["CPU"]
    assert cpu["verdict"] == "confirmed" and "12 of 12 planned measurements ok" in cpu["evidence"]
    assert "pooled over 4 cells: 3.0% [2.0%, 5.7%] (df = 8" in cpu["evidence"], cpu["evidence"]
    # one noisy cell (a start 25 % off): the pooled interval (8.2 % [5.5, 15.7]) reaches past the line, not wholly
    noisy = [*steady[:-1], steady[-1] | {"output_tok_s": steady[-1]["output_tok_s"] * 1.25}]
    assert _by_id(claims.decide(study, crow, sp, noisy))["CPU"]["verdict"] == "undecided"
    # every cell's starts 30 % apart: the whole interval above the line
    wild = [r for i, (w, c) in enumerate(keys) for r in _runs(m, w, c, [100.0 * (i + 1) * f for f in (0.7, 1.0, 1.3)])]
    cpu = _by_id(claims.decide(study, crow, sp, wild))["CPU"]
    assert cpu["verdict"] == "refuted", cpu["evidence"]
    assert claims.CPU_CV_MAX == 0.15 and "at or below 15%" in cpu["rule"]
    short = [*crow[:-1], crow[-1] | {"n": 2, "output_tok_s_cv": None}]
    assert _by_id(claims.decide(study, short, sp, steady[:-1]))["CPU"]["verdict"] == "refuted"
    # no cell with two starts: nothing to decide the repeats' agreement from
    assert _by_id(claims.decide(study, crow, sp, []))["CPU"]["verdict"] == "undecided"
    # a run whose cells are all at a concurrency b (code@b1, chat@b1) has none at the article's point, which C1-C8 use;
    # the entry counts every cell of the run, so it never confirms "0 of 0 planned measurements"
    at_b = [c | {"workload": c["workload"] + "@b1"} for c in crow]
    cpu = _by_id(claims.decide(study, [], [], steady, every_cell=at_b))["CPU"]
    assert cpu["verdict"] == "confirmed" and "12 of 12 planned measurements ok" in cpu["evidence"]
    cpu = _by_id(claims.decide(study, [], [], steady[:-1], every_cell=[*at_b[:-1], at_b[-1] | {"n": 2}]))["CPU"]
    assert cpu["verdict"] == "refuted" and "11 of 12 planned measurements ok" in cpu["evidence"]


def _size_rows(small_ngram: float, large_ngram: float, spread: float = 0.02) -> list[dict]:
    """Engine starts of code x (vanilla, ngram) on the CPU demo's two models: vanilla at 60 (SmolLM2) and 50
    (Gemma) tok/s, ngram `small_ngram` and `large_ngram` times that, every cell's 4 starts `spread` apart, the
    drafter's step time its tok/s at T = 1.5 tokens a step."""
    rows = []
    for model, base, gain in (("smollm2-135m-instruct", 60.0, small_ngram), ("gemma3-270m", 50.0, large_ngram)):
        for step, tok in (("vanilla", base), ("ngram", base * gain)):
            vals = [tok * (1 + spread * f) for f in (-1.5, -0.5, 0.5, 1.5)]
            t = 1.0 if step == "vanilla" else 1.5
            for r in _runs(model, "code", step, vals):
                rows.append(r | {"step_time_ms": 1000.0 * t / r["output_tok_s"], "_start": f"{model}-{r['_start']}"})
    return rows


def test_a_cpu_run_asks_the_size_scaling_of_its_own_two_models():
    """CPU-size and CPU-R: the larger model's speedup and R over the smaller's, decided from the four cells'
    engine starts; one model size says so; a ratio near 1 stays undecided and states the estimate it needed."""
    study = build_study(yaml.safe_load((ROOT / "config/smoke.yaml").read_text()))
    small, large = "smollm2-135m-instruct", "gemma3-270m"

    def decide(small_gain: float, large_gain: float) -> dict[str, dict]:
        sp = [
            _sp(0.135, "ngram", "ngram", "faster", small_gain, model=small, baseline="vanilla"),
            _sp(0.268, "ngram", "ngram", "faster", large_gain, model=large, baseline="vanilla"),
        ]
        return _by_id(claims.decide(study, [], sp, _size_rows(small_gain, large_gain)))

    # the CPU's own finding: the larger model gains less (1.47 against 1.8), and its R is larger
    got = decide(1.8, 1.47)
    assert got["CPU-size"]["verdict"] == "refuted", got["CPU-size"]["evidence"]
    assert "code/ngram gemma3-270m over smollm2-135m-instruct: speedup 0.817" in got["CPU-size"]["evidence"]
    assert got["CPU-R"]["verdict"] == "refuted", got["CPU-R"]["evidence"]
    # the article's direction: the larger gains more, its R smaller
    got = decide(1.3, 1.8)
    assert got["CPU-size"]["verdict"] == "confirmed" and got["CPU-R"]["verdict"] == "confirmed"
    # a ratio of 1.02: inside the band's reach either way, undecided with the estimate a decision needed
    got = decide(1.5, 1.53)
    assert got["CPU-size"]["verdict"] == "undecided"
    assert "power: the widest interval reaches a factor" in got["CPU-size"]["evidence"]
    # one model size: nothing to compare
    one = [_sp(0.135, "ngram", "ngram", "faster", 1.8, model=small, baseline="vanilla")]
    got = _by_id(claims.decide(study, [], one, _size_rows(1.8, 1.47)))
    assert got["CPU-size"]["verdict"] == claims.NOT_COVERED and "1 size" not in got["CPU-size"]["evidence"]


def _k_cell(model: str, workload: str, step: str, method: str, k: float, k_lo: float, k_hi: float) -> dict:
    return _cell(model, workload, step, method=method, K_median=k, K_lo=k_lo, K_hi=k_hi)


def test_c2_is_refuted_when_the_ratio_interval_lies_below_its_threshold():
    """h200-reference's code cells: suffix K 3.76 [3.62, 3.92] vs ngram 3.47 [3.34, 3.61] bound the ratio to
    [1.00, 1.17], wholly below the rule's 1.5: refuted, not undecided. A ratio interval across 1.5 is undecided, one
    at or above it confirms."""
    study = _study()
    m = "smollm2-135m-instruct"

    def c2(suffix: tuple[float, float, float], ngram: tuple[float, float, float]) -> dict:
        cells = [_k_cell(m, "code", "suffix", "suffix", *suffix), _k_cell(m, "code", "ngram", "ngram", *ngram)]
        return _by_id(claims.decide(study, cells, [], []))["C2"]

    got = c2((3.76, 3.62, 3.92), (3.47, 3.34, 3.61))
    assert got["verdict"] == "refuted", got["evidence"]
    assert "ratio 1.08 [1.00, 1.17] against 1.5: refuted" in got["evidence"], got["evidence"]
    assert c2((5.0, 4.6, 5.4), (3.47, 3.34, 3.61))["verdict"] == "undecided"  # [1.27, 1.62]
    assert c2((6.0, 5.8, 6.2), (3.47, 3.34, 3.61))["verdict"] == "confirmed"  # [1.61, 1.86]
    assert c2((6.0, None, None), (3.47, 3.34, 3.61))["verdict"] == "undecided (no per-prompt data)"


def _k_spec(model: str, workload: str, step: str, method: str, pos: list[int], k_half: float = 0.05) -> dict:
    k = 1 + sum(pos) / 10000
    row = _k_cell(model, workload, step, method, k, k - k_half, k + k_half)
    return row | {"drafts": 10000, "draft_tokens": 70000, "accepted_per_pos": pos}


#: positions accepted as the linear form predicts (K = 1 + 0.5 * 7 = 4.5; Leviathan's i.i.d. form says ~2.0)
LINEAR = [5000, 3750, 3000, 2500, 2100, 1900, 1750]
#: positively correlated positions: K ~ 3.9, linear (4.5) over-predicts, Leviathan (~2.0) under-predicts
CORRELATED = [5000, 4800, 4600, 4400, 4200, 4000, 3800]


def test_c5_is_decided_on_the_ngram_drafter_counted_once():
    """h200-reference: on the ngram cells the linear form over-predicts every one and Leviathan's under-predicts
    every one (both refuted: C5 refuted); the suffix drafter's cells, where the linear form fits, decide nothing,
    and suffix and trident (one drafter) are stated once."""
    study = _study()
    m = "smollm2-135m-instruct"
    ngram = [_k_spec(m, w, "ngram", "ngram", CORRELATED) for w in ("code", "chat")]
    suffix = [_k_spec(m, w, step, "suffix", LINEAR) for w in ("code", "chat") for step in ("suffix", "trident")]
    c5 = _by_id(claims.decide(study, ngram + suffix, [], []))["C5"]
    assert c5["verdict"] == "refuted", c5["evidence"]
    assert c5["cells"] == [f"{m}/chat/ngram", f"{m}/code/ngram"]
    assert "ngram drafter: linear over-predicts 2 of 2" in c5["evidence"], c5["evidence"]
    assert "other drafters, not deciding: suffix drafter, 2 cell(s)" in c5["evidence"], c5["evidence"]
    # no ngram cells: not covered, whatever the suffix drafter's cells say
    c5 = _by_id(claims.decide(study, suffix, [], []))["C5"]
    assert c5["verdict"] == claims.NOT_COVERED and "no cells of the ngram drafter" in c5["evidence"], c5


def test_c5_a_form_missing_every_cell_in_both_directions_does_not_stand():
    """h200-suffix-depth: the linear form over-predicted one cell and under-predicted the other, and C5 said
    `confirmed`; a form that fits no cell does not stand, whichever side it misses on."""
    study = _study()
    m = "smollm2-135m-instruct"
    over = _k_spec(m, "code", "ngram", "ngram", CORRELATED)  # linear 4.5 vs K 3.9: over
    # K 6.5 measured with p1 = 0.5 and 7-token drafts: linear (4.5) and Leviathan (~2.0) under-predict
    under = _k_spec(m, "chat", "ngram", "ngram", LINEAR) | {"K_median": 6.5, "K_lo": 6.45, "K_hi": 6.55}
    c5 = _by_id(claims.decide(study, [over, under], [], []))["C5"]
    assert "linear over-predicts 1, under-predicts 1 of 2" in c5["evidence"], c5["evidence"]
    assert c5["verdict"] == "refuted", c5["evidence"]


def test_c6_zero_acceptance_may_refute_but_never_confirm():
    """A 70B ngram cell that made no drafts (no verify step): its R 1.30 [1.27, 1.36] lies inside the band but
    only bounds the article's R from below, so C6 is undecided, not confirmed; one above the band refutes."""
    study = _study(params_b=70.0)
    m = "smollm2-135m-instruct"
    r = _sp(70.0, "ngram", "ngram", "slower", 0.9, model=m, R_decode=1.30, R_decode_lo=1.27, R_decode_hi=1.36)
    none_made = _cell(m, "code", "ngram", method="ngram", drafts=0, accepted=0)
    c6 = _by_id(claims.decide(study, [none_made], [r], []))["C6"]
    assert c6["verdict"] == "undecided", c6["evidence"]
    assert "(zero acceptance: a lower bound on R): bound only" in c6["evidence"], c6["evidence"]
    made = none_made | {"drafts": 1000, "accepted": 3000}
    assert _by_id(claims.decide(study, [made], [r | {"K": 4.0}], []))["C6"]["verdict"] == "confirmed"
    above = r | {"R_decode": 1.6, "R_decode_lo": 1.5, "R_decode_hi": 1.7}
    assert _by_id(claims.decide(study, [none_made], [above], []))["C6"]["verdict"] == "refuted"
    below = r | {"R_decode": 1.1, "R_decode_lo": 1.05, "R_decode_hi": 1.15}  # R0 under the band: says nothing
    assert _by_id(claims.decide(study, [none_made], [below], []))["C6"]["verdict"] == "undecided"
    assert _by_id(claims.decide(study, [made], [below | {"K": 4.0}], []))["C6"]["verdict"] == "refuted"


def test_c7_says_it_cannot_separate_answer_length():
    study = _study()
    m = "smollm2-135m-instruct"
    cells = [
        _k_cell(m, "chat", "ngram", "ngram", 5.23, 5.07, 5.39) | {"output_tokens_mean": 565.0},
        _k_cell(m, "sonnet", "ngram", "ngram", 4.28, 4.14, 4.41) | {"output_tokens_mean": 251.0},
    ]
    c7 = _by_id(claims.decide(study, cells, [], []))["C7"]
    assert c7["verdict"] == "confirmed"
    assert "cannot separate" in c7["evidence"] and "answers' length" in c7["evidence"], c7["evidence"]
    assert f"mean answer tokens: {m}/ngram chat 565, sonnet 251" in c7["evidence"], c7["evidence"]
    assert "answers' length" in c7["rule"]
