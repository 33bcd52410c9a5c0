"""The crossover b* on constructed speedup curves (a pure function: no measurement here)."""

from __future__ import annotations

import dataclasses
import math

import pytest

from specsweep import stats
from specsweep.crossover import CROSSOVER_COLUMNS, Point, crossover, crossover_rows


def _curve(bs, sp, width=0.1, verdicts=None, n=3):
    """Points with a +-width relative interval; the verdict from stats.verdict unless given."""
    out = []
    for i, (b, s) in enumerate(zip(bs, sp, strict=True)):
        lo, hi = (s * (1 - width), s * (1 + width)) if width is not None else (None, None)
        v = verdicts[i] if verdicts else stats.verdict(s, lo, hi)
        out.append(Point(b, s, lo, hi, v, n))
    return out


def _log_cross(b0, s0, b1, s1, y=1.0):
    x = math.log(b0) + (s0 - y) / (s0 - s1) * (math.log(b1) - math.log(b0))
    return math.exp(x)


def test_falling_curve_interpolates_on_log_b_with_an_interval():
    bs, sp = [1, 4, 16, 64], [2.0, 1.5, 1.2, 0.8]
    c = crossover(_curve(bs, sp))
    # between 16 (1.2) and 64 (0.8), halfway on log b: the geometric mean 32, not the arithmetic 40
    assert c.b_star == pytest.approx(32.0)
    assert c.b_star_lo == pytest.approx(_log_cross(16, 1.08, 64, 0.72), rel=1e-3)
    assert c.b_star_hi == pytest.approx(_log_cross(16, 1.32, 64, 0.88), rel=1e-3)
    assert c.b_star_lo < c.b_star < c.b_star_hi
    assert c.n == 3
    assert c.note.startswith("crosses 1 between b = 16 and b = 64")


def test_log_interpolation_differs_from_linear():
    c = crossover(_curve([1, 100], [2.0, 0.5], width=0.01))
    assert c.b_star == pytest.approx(100 ** (2 / 3), rel=1e-3)  # 21.5; linear in b would say 67


def test_interval_ends_in_other_segments_than_the_point():
    # lo falls through 1 between 4 and 16, the point between 16 and 64, hi between 64 and 256
    bs, sp = [4, 16, 64, 256], [1.5, 1.1, 0.95, 0.7]
    c = crossover(_curve(bs, sp, width=0.2))
    assert 4 < c.b_star_lo < 16 < c.b_star < 64 < c.b_star_hi < 256


def test_pays_at_every_measured_b():
    c = crossover(_curve([1, 8, 64], [3.0, 2.0, 1.3]))
    assert c.note.startswith("pays at every measured b")
    assert c.b_star is None and c.b_star_hi is None and c.b_star_lo == 64.0


def test_one_concurrency_names_its_b_alone():
    """The CPU demo measures b = 1 only: the note names that b, not a range of one."""
    c = crossover(_curve([1], [1.5]))
    assert c.note == "pays at every measured b (b = 1, one concurrency): b* above 1"
    assert "concurrencies" in crossover(_curve([1, 8, 64], [3.0, 2.0, 1.3])).note


def test_costs_at_every_measured_b():
    c = crossover(_curve([1, 8, 64], [0.7, 0.6, 0.5]))
    assert c.note.startswith("costs at every measured b")
    assert c.b_star is None and c.b_star_lo is None and c.b_star_hi == 1.0


def test_above_one_everywhere_but_not_every_interval_is_undecided():
    c = crossover(_curve([1, 8, 64], [2.0, 1.5, 1.02]))
    assert not stats.verdict(1.02, 1.02 * 0.9, 1.02 * 1.1).startswith("faster")
    assert c.note.startswith("undecided") and c.b_star is None


def test_upper_end_open_when_the_upper_bound_never_falls_below_one():
    """No measured b where the drafter measurably costs: no b*, the crossing named by its measured b."""
    c = crossover(_curve([1, 8, 64], [1.6, 1.3, 0.95], width=0.2))
    assert c.b_star is None and c.b_star_lo is not None and c.b_star_hi is None
    assert c.note.startswith("crosses 1 once, between b = 8 and b = 64, with no b*") and "open]" in c.note


def test_lower_end_open_when_the_lower_bound_is_at_or_below_one_at_the_smallest_b():
    c = crossover(_curve([1, 8, 64], [1.05, 0.8, 0.6], width=0.2))
    assert c.b_star is None and c.b_star_lo is None and c.b_star_hi is not None
    assert "[open, " in c.note and "between b = 1 and b = 8" in c.note


def test_no_interval_with_a_single_repeat():
    c = crossover(_curve([1, 8, 64], [1.6, 1.2, 0.8], width=None, n=1))
    assert c.b_star is None and c.b_star_lo is None and c.b_star_hi is None
    assert "between b = 8 and b = 64, with no b*: no interval" in c.note and c.n == 1


def test_curve_crossing_more_than_once_lists_its_crossings_and_gives_no_b_star():
    """The curve of h200-smollm2-concurrency's chat/ngram: it falls, rises and falls again; one b* (the first fall,
    3.525 there) would say more than the data: each crossing is named by the measured b it lies between."""
    c = crossover(_curve([1, 4, 16, 64, 256], [1.5, 0.8, 1.3, 0.7, 0.6]))
    assert c.b_star is None and c.b_star_lo is None and c.b_star_hi is None
    assert c.note == (
        "crosses 1 3 times, falls between b = 1 and b = 4, rises between b = 4 and b = 16, falls between b = 16 and "
        "b = 64 (b = 1–256, 5 concurrencies): no single b*"
    )
    from specsweep.crossover import describe

    assert describe({"b_star": None, "note": c.note}).startswith("crosses 1 3 times, falls between b = 1 and b = 4")


def test_rising_curve_is_not_a_crossover_from_paying_to_costing():
    c = crossover(_curve([1, 8, 64], [0.6, 0.9, 1.4]))
    assert c.note.startswith("rises through 1 between b = 8 and b = 64") and c.b_star is None


def test_b_star_shown_with_the_figures_its_interval_supports():
    """3.525 [2.401, 225.4] (a factor 94 wide) says one figure; a 10 % wide interval two; a 2 % wide one three.
    The interval's ends round outward, so the shown interval holds the computed one."""
    from specsweep.crossover import shown, sig_digits

    assert shown(3.525, 2.401, 225.4) == "4 [2, 300]"
    assert shown(32.0, 21.8, 43.9) == "32 [21, 44]"
    assert shown(32.04, 30.51, 33.52) == "32.0 [30.5, 33.6]"
    assert shown(11.81, None, None) == "11.81 [open, open]" and sig_digits(None, 5.0) == 4
    # the table and the README sentence use it
    c = crossover(_curve([1, 4, 16, 64], [2.0, 1.5, 1.2, 0.8]))
    assert c.note.endswith("interval [21, 44]"), c.note


def test_no_points_and_bad_concurrencies():
    assert crossover([]).note.startswith("undecided")
    with pytest.raises(ValueError, match="distinct"):
        crossover(_curve([4, 4], [1.2, 0.9]))


def test_rows_pair_per_drafter_from_per_repeat_values():
    """Speedups from per-repeat tok/s at each b through stats.ratio_ci and stats.verdict, as the tables make
    them; the all-at-once row (concurrency null) and another drafter stay off this curve."""
    rows = []
    base = {1: 100.0, 8: 500.0, 64: 2000.0}
    gain = {1: 1.8, 8: 1.25, 64: 0.8}
    for b in (1, 8, 64):
        mine = [base[b] * gain[b] * f for f in (0.99, 1.0, 1.01)]
        theirs = [base[b] * f for f in (1.0, 0.995, 1.005)]
        sp, lo, hi = stats.ratio_ci(mine, theirs)
        rows.append(
            {"model": "m", "workload": f"code@b{b}", "config": "ngram", "concurrency": b, "status": "ok", "n": 3,
             "n_baseline": 3, "speedup": sp, "speedup_lo": lo, "speedup_hi": hi, "verdict": stats.verdict(sp, lo, hi)}
        )  # fmt: skip
    rows.append(dict(rows[0], workload="code", concurrency=None, speedup=0.5))
    rows.append(dict(rows[0], config="suffix", speedup=None, status="missing"))
    out = crossover_rows(rows)
    assert [(r["model"], r["workload"], r["step"]) for r in out] == [("m", "code", "ngram"), ("m", "code", "suffix")]
    assert set(out[0]) == {name for name, _ in CROSSOVER_COLUMNS}
    assert 8 < out[0]["b_star"] < 64 and out[0]["n"] == 3
    assert out[1]["b_star"] is None and out[1]["n"] == 0 and out[1]["note"].startswith("undecided")


def _xrow(model, workload, step, points):
    c = crossover(points)
    return {"model": model, "workload": workload, "step": step, "b_star": c.b_star, "b_star_lo": c.b_star_lo,
            "b_star_hi": c.b_star_hi, "n": c.n, "note": c.note}  # fmt: skip


def test_claim_c9_from_constructed_crossovers():
    import yaml

    from conftest import ROOT
    from specsweep import claims
    from specsweep.config import build_study

    gpu = yaml.safe_load((ROOT / "config/smoke.yaml").read_text()) | {"device": "gpu"}
    study = build_study(gpu)
    model = next(iter(study.models))
    closed = _xrow(model, "code", "ngram", _curve([1, 4, 16, 64], [2.0, 1.5, 1.2, 0.8]))
    open_hi = _xrow(model, "chat", "ngram", _curve([1, 8, 64], [1.6, 1.3, 0.95], width=0.2))
    pays = _xrow(model, "chat", "suffix", _curve([1, 8, 64], [3.0, 2.0, 1.3]))
    costs_at_1 = _xrow(model, "sonnet", "ngram", _curve([1, 8, 64], [0.7, 0.6, 0.5]))
    costs_from_8 = _xrow(model, "sonnet", "suffix", _curve([8, 64], [0.7, 0.5]))
    assert claims.decide_c9(study, [closed])["verdict"] == "confirmed"
    assert claims.decide_c9(study, [closed, open_hi])["verdict"] == "undecided"
    assert claims.decide_c9(study, [closed, pays])["verdict"] == "undecided"
    assert claims.decide_c9(study, [closed, costs_from_8])["verdict"] == "undecided"
    assert claims.decide_c9(study, [costs_at_1])["verdict"] == "refuted"  # one curve: no correction
    c9 = claims.decide_c9(study, [closed, costs_at_1])  # two curves, no engine starts to take b = 1 again from
    assert c9["id"] == "C9" and c9["verdict"] == "undecided", c9["evidence"]
    assert f"{model}/code/ngram: b* = 32 [21, 44]" in c9["evidence"] and "even one request at a time" in c9["evidence"]
    assert claims.decide_c9(study, [])["verdict"] == claims.NOT_COVERED
    # random-weight models never decide it (their acceptance is not a real model's)
    dummy = build_study(yaml.safe_load((ROOT / "config/smoke.yaml").read_text()) | {"device": "gpu"})
    dummy.models[model] = dataclasses.replace(dummy.models[model], weights="dummy")
    assert claims.decide_c9(dummy, [closed])["verdict"] == claims.NOT_COVERED
    # a CPU run decides no claim, C9 included: the rule's answer is shown, not taken
    cpu = claims.decide_c9(build_study(yaml.safe_load((ROOT / "config/smoke.yaml").read_text())), [closed])
    assert cpu["verdict"] == claims.NOT_ON_CPU and cpu["evidence"].startswith("the rule alone would say confirmed;")


def test_readme_sentence_names_b_star_or_the_case():
    from specsweep.crossover import sentence

    rows = [
        _xrow("m", "code", "ngram", _curve([1, 4, 16, 64], [2.0, 1.5, 1.2, 0.8])),
        _xrow("m", "chat", "ngram", _curve([1, 8, 64], [3.0, 2.0, 1.3])),
    ]
    text = sentence(rows, "vanilla")
    assert "m/code/ngram b* = 32 [" in text and "m/chat/ngram pays at every measured b" in text
    assert text.startswith("Against vanilla at the same concurrency b") and text.endswith(".")


def test_claim_c9_refutes_at_the_family_wise_level():
    """A curve that costs at b = 1 refutes C9 only where its speedup at b = 1 is still `slower` with its interval at
    1 - 0.05 / m (m curves): h200-smollm2-concurrency's sonnet/suffix was `slower` at 95 % from three engine starts
    a side under Welch's interval, and refuted C9 alone among six curves; a cell `slower` at 95 % refutes only where its
    interval at 99.17 % (the tables' rule, each cell's own spread) still lies below the band."""
    import yaml

    from conftest import ROOT
    from specsweep import claims
    from specsweep.config import build_study

    study = build_study(yaml.safe_load((ROOT / "config/smoke.yaml").read_text()) | {"device": "gpu"})
    model = next(iter(study.models))
    sp, rows = [], []
    # b = 1: 3 starts a side, 9 % slower with 2.5 % noise (each cell's own spread, as the tables' rule takes it):
    # slower at 95 %, not at 99.17 %
    sides = {1: ([887.25, 910.0, 932.75], [1025.0, 1000.0, 975.0]), 8: ([682.5, 700.0, 717.5], [975.0, 1000.0, 1025.0])}
    for b, (mine, theirs) in sides.items():
        p, lo, hi = stats.speedup_ci(mine, theirs)
        w = f"sonnet@b{b}"
        sp.append({"model": model, "workload": w, "config": "suffix", "baseline": "vanilla", "concurrency": b,
                   "status": "ok", "n": 3, "n_baseline": 3, "speedup": p, "speedup_lo": lo, "speedup_hi": hi,
                   "band": stats.BAND, "verdict": stats.verdict(p, lo, hi)})  # fmt: skip
        for cfg, vals in (("suffix", mine), ("vanilla", theirs)):
            rows += [{"model": model, "workload": w, "config": cfg, "concurrency": b, "status": "ok",
                      "output_tok_s": v, "_start": f"{w}-{cfg}-{i}"} for i, v in enumerate(vals)]  # fmt: skip
    assert [s["verdict"] for s in sp] == ["slower", "slower"]
    costs = _xrow(model, "sonnet", "suffix", [Point(s["concurrency"], s["speedup"], s["speedup_lo"],
                                                    s["speedup_hi"], s["verdict"], 3) for s in sp])  # fmt: skip
    others = [_xrow(model, w, "ngram", _curve([1, 8], [0.98, 0.9])) for w in ("code", "chat", "mix", "x", "y")]
    assert claims.decide_c9(study, [costs])["verdict"] == "refuted"
    c9 = claims.decide_c9(study, [costs, *others], sp, rows)
    assert c9["verdict"] == "undecided", c9["evidence"]
    assert "family-wise (6 cells, each interval at 99.17 %): no cell refutes" in c9["evidence"], c9["evidence"]
    # a b = 1 far slower still refutes at that level
    far = {1: ([600.0, 602.0, 598.0], [1000.0, 1001.0, 999.0]), 8: sides[8]}
    sp2, rows2 = [], []
    for b, (mine, theirs) in far.items():
        p, lo, hi = stats.speedup_ci(mine, theirs)
        w = f"sonnet@b{b}"
        sp2.append(sp[0 if b == 1 else 1] | {"speedup": p, "speedup_lo": lo, "speedup_hi": hi})
        for cfg, vals in (("suffix", mine), ("vanilla", theirs)):
            rows2 += [{"model": model, "workload": w, "config": cfg, "concurrency": b, "status": "ok",
                       "output_tok_s": v, "_start": f"{w}-{cfg}-{i}"} for i, v in enumerate(vals)]  # fmt: skip
    assert claims.decide_c9(study, [costs, *others], sp2, rows2)["verdict"] == "refuted"


def test_change_over_b_splits_exactly_into_t_and_r():
    """From the smallest b to the largest, the change of log speedup is the change of log T less that of log R
    (speedup = T / R at every b); the text gives the factors and each one's share of the change in log; a curve
    whose speedup is not T / R at an end, or with one b, has no split."""
    from specsweep.crossover import split

    pts = [
        Point(b, t / r, None, None, "undecided", 3, t, r) for b, t, r in ((1, 4.0, 1.25), (8, 3.0, 1.5), (64, 2.0, 2.5))
    ]
    s = split(reversed(pts))
    assert (s.b_first, s.b_last) == (1, 64)
    assert s.dlog_speedup == pytest.approx(math.log(0.8 / 3.2))
    assert s.dlog_T == pytest.approx(math.log(0.5)) and s.dlog_R == pytest.approx(math.log(2.0))
    assert s.dlog_speedup == pytest.approx(s.dlog_T - s.dlog_R, abs=1e-12)
    assert s.text() == "b = 1 → 64: ×0.25 = T ×0.5 / R ×2 (T 50 %, R 50 % of the change in log)"
    flat = split([Point(1, 2.0, None, None, "faster", 3, 2.0, 1.0), Point(8, 2.01, None, None, "faster", 3, 2.01, 1.0)])
    assert flat.text() == "b = 1 → 8: ×1 = T ×1 / R ×1"  # a change below 1 %: no shares
    both_fall = split(
        [Point(1, 2.0, None, None, "faster", 3, 2.0, 1.0), Point(8, 0.8, None, None, "slower", 3, 1.0, 1.25)]
    )
    assert both_fall.text() == "b = 1 → 8: ×0.4 = T ×0.5 / R ×1.25 (T 76 %, R 24 % of the change in log)"
    apart = split(
        [Point(1, 2.0, None, None, "faster", 3, 2.0, 1.0), Point(8, 1.6, None, None, "faster", 3, 1.0, 0.625)]
    )
    assert apart.text() == "b = 1 → 8: ×0.8 = T ×0.5 / R ×0.625 (T and R pull opposite ways)"
    assert split(pts[:1]) is None
    assert split([dataclasses.replace(pts[0], speedup=3.0), pts[2]]) is None  # not T / R
    assert split([dataclasses.replace(pts[0], T=None), pts[2]]) is None


def test_committed_concurrency_run_splits_its_change_over_b():
    """h200-concurrency-boot2: each crossover row's split is read off the speedup rows at its smallest and largest
    b (the identity exact to rounding), and the summary's crossover table shows it."""
    import pyarrow.parquet as pq

    from conftest import ROOT
    from specsweep.crossover import base_workload, split_of

    tables = ROOT / "results" / "h200-concurrency-boot2" / "tables"
    sp = [r for r in pq.read_table(tables / "speedup.parquet").to_pylist() if r["concurrency"] and r["speedup"]]
    rows = pq.read_table(tables / "crossover.parquet").to_pylist()
    assert rows
    summary = (tables / "summary.md").read_text()
    for x in rows:
        curve = {
            r["concurrency"]: r
            for r in sp
            if (r["model"], base_workload(r["workload"]), r["config"]) == (x["model"], x["workload"], x["step"])
        }
        first, last = curve[min(curve)], curve[max(curve)]
        assert (x["b_first"], x["b_last"]) == (min(curve), max(curve))
        assert x["dlog_T"] == pytest.approx(math.log(last["T"] / first["T"]), rel=1e-12)
        assert x["dlog_R"] == pytest.approx(math.log(last["R"] / first["R"]), rel=1e-12)
        assert x["dlog_speedup"] == pytest.approx(math.log(last["speedup"] / first["speedup"]), rel=1e-12)
        assert x["dlog_speedup"] == pytest.approx(x["dlog_T"] - x["dlog_R"], abs=1e-9)
        assert f"| {x['note']} | {split_of(x).text()} |" in summary
