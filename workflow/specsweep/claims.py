"""The seed article's claims, decided by a run's tables (never typed by hand).

Each claim gets `confirmed`, `refuted`, `undecided` (the intervals are too wide, n < 2 engine starts, technical
replicates, or no per-prompt data for K; the reason in parentheses when every comparison shares it) or
`not covered by this run` (the cells that decide it were not measured), with the numbers and the cells.
Speedup verdicts follow stats.VERDICT_RULE.

C1  models <= 7B regress with any drafter             every speculative cell of such a model: verdict slower
C2  suffix K >> ngram K on code                         suffix K interval (over prompts) above ngram's, ratio >= 1.5
C3  PIECEWISE beats FULL with suffix on chat            trident (PIECEWISE) over suffix-full (FULL): faster
C4  GPU utilisation falls while throughput rises       trident vs baseline: faster, and lower GPU utilisation
C5  the linear form predicts K better than Leviathan's  mean |error| of each against measured K (see below)
C6  R within 1.25-1.40, independent of the workload     R over decode steps, every interval inside the band
C7  chat K > sonnet K                                   per method, chat's K interval (over prompts) above sonnet's
C8  models >= 14B are net-positive                      every trident cell of such a model: verdict faster
C9  below b* the drafter pays, above it costs           per drafter and workload measured at several concurrencies
                                                        b: its speedup falls through 1 at b* (crossover.py), the
                                                        interval's ends inside the measured b (decide_c9); runs
                                                        with a concurrency axis only

Cells of `weights: dummy` models (random weights) enter C6 only: they measure step time, not acceptance.

C5's predictions use the acceptance at draft position 1, p1 = accepted at position 1 / drafts (not the
pooled alpha, from which K = 1 + alpha * mean draft length holds by construction), and the mean draft
length g: linear K = 1 + p1 * g; Leviathan (i.i.d. acceptance) K = (1 - p1^(g+1)) / (1 - p1).
"""

from __future__ import annotations

from typing import Any

from . import stats
from .config import Study

LABELS = {
    "C1": "models <= 7B regress with any drafter",
    "C2": "suffix K >> ngram K on code",
    "C3": "PIECEWISE beats FULL with suffix on chat",
    "C4": "GPU utilisation falls while throughput rises (trident vs baseline)",
    "C5": "linear K model fits better than Leviathan's closed form",
    "C6": "R within 1.25-1.40 and independent of workload",
    "C7": "chat K > sonnet K",
    "C8": "models >= 14B are net-positive with trident",
}
NOT_COVERED = "not covered by this run"
R_BAND = (1.25, 1.40)


def _claim(cid: str, verdict: str, evidence: str, cells: list[str]) -> dict[str, Any]:
    return {"id": cid, "claim": LABELS[cid], "verdict": verdict, "evidence": evidence, "cells": sorted(cells)}


def _f(v: Any, d: int = 2) -> str:
    return "–" if v is None else f"{v:.{d}f}"


def _iv(p: Any, lo: Any, hi: Any, d: int = 2, none: str = " (n<2)") -> str:
    """'p [lo, hi]', or p and `none` (why there is no interval) when there is none."""
    if p is None:
        return "–"
    return f"{p:.{d}f}" + (f" [{lo:.{d}f}, {hi:.{d}f}]" if lo is not None else none)


#: Why a K has no interval: K's interval is over prompts, from the cells' per-request data.
NO_PROMPTS = " (no per-prompt data)"


def _all_verdicts(rows: list[dict[str, Any]], want: str) -> str:
    verdicts = [r["verdict"] for r in rows]
    if not verdicts:
        return NOT_COVERED
    if all(v == want for v in verdicts):
        return "confirmed"
    other = "faster" if want == "slower" else "slower"
    if any(v == other for v in verdicts):
        return "refuted"
    return "undecided"


def _speedup_claim(cid: str, sp: list[dict[str, Any]], keep: Any, want: str) -> dict[str, Any]:
    rows = [s for s in sp if s["status"] in ("ok", "partial") and s["speedup"] is not None and keep(s)]
    ev = "; ".join(
        f"{s['model']}/{s['workload']}/{s['config']} {_iv(s['speedup'], s['speedup_lo'], s['speedup_hi'], 3, '')}"
        f" {s['verdict']}"
        for s in rows
    )
    return _claim(
        cid,
        _all_verdicts(rows, want),
        ev or "no such cells",
        [f"{s['model']}/{s['workload']}/{s['config']}" for s in rows],
    )


def _above(a: dict[str, Any], b: dict[str, Any], m: str) -> str:
    """confirmed when a's interval of m lies above b's, refuted when below, else undecided (read for K, whose
    interval is over prompts: without per-prompt data, `undecided (no per-prompt data)`)."""
    alo, ahi, blo, bhi = a[f"{m}_lo"], a[f"{m}_hi"], b[f"{m}_lo"], b[f"{m}_hi"]
    if None in (alo, ahi, blo, bhi):
        return "undecided" + NO_PROMPTS
    if alo > bhi:
        return "confirmed"
    if ahi < blo:
        return "refuted"
    return "undecided"


def _combine(verdicts: list[str]) -> str:
    if not verdicts:
        return NOT_COVERED
    if all(v == "confirmed" for v in verdicts):
        return "confirmed"
    if any(v == "refuted" for v in verdicts):
        return "refuted"
    return verdicts[0] if len(set(verdicts)) == 1 else "undecided"  # an undecided reason all of them share


def k_predictions(c: dict[str, Any]) -> dict[str, Any] | None:
    """Measured K and the two predictions from position-1 acceptance (see the module doc)."""
    drafts, dtok, pos = c.get("drafts"), c.get("draft_tokens"), c.get("accepted_per_pos")
    if not drafts or not dtok or not pos or c.get("K_median") is None:
        return None
    p1 = pos[0] / drafts
    g = dtok / drafts
    lin = 1 + p1 * g
    lev = (1 - p1 ** (g + 1)) / (1 - p1) if p1 < 1 else g + 1
    cond = [pos[i] / pos[i - 1] if i and pos[i - 1] else (pos[0] / drafts if i == 0 else None) for i in range(len(pos))]
    return {
        "K": c["K_median"],
        "p1": p1,
        "mean_draft": g,
        "K_linear": lin,
        "K_leviathan": lev,
        "err_linear": lin - c["K_median"],
        "err_leviathan": lev - c["K_median"],
        "conditional_acceptance": cond,
    }


def decide(
    study: Study, crow: list[dict[str, Any]], sp: list[dict[str, Any]], rows: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    out = []
    # Random (dummy) weights measure step times, never acceptance: only C6 (R) reads their cells; the claims
    # about K, acceptance and speedup read real-weight cells only.
    dummy = {m for m, spec in study.models.items() if spec.weights == "dummy"}
    r_sp = [s for s in sp if s["method"] != "none"]
    spec_sp = [s for s in r_sp if s["model"] not in dummy]
    out.append(_speedup_claim("C1", spec_sp, lambda s: s["model_params_b"] <= 7.0, "slower"))

    cells = {(c["model"], c["workload"], c["config"]): c for c in crow if c["n"] and c["model"] not in dummy}
    steps = study.ladder

    def step_of(method: str, mode: str | None = None) -> list[str]:
        return [
            n
            for n, st in steps.items()
            if st.method == method and (mode is None or (st.compilation or {}).get("cudagraph_mode") == mode)
        ]

    # C2
    verdicts, ev, used = [], [], []
    for (m, w, cfg), c in cells.items():
        if w != "code" or cfg not in step_of("suffix", None) or (steps[cfg].compilation or {}):
            continue
        for ng in step_of("ngram"):
            n = cells.get((m, w, ng))
            if n is None or n["K_median"] is None or c["K_median"] is None:
                continue
            v = _above(c, n, "K")
            if v == "confirmed" and c["K_median"] / n["K_median"] < 1.5:
                v = "undecided"
            verdicts.append(v)
            used += [f"{m}/{w}/{cfg}", f"{m}/{w}/{ng}"]
            ev.append(
                f"{m}: suffix K {_iv(c['K_median'], c['K_lo'], c['K_hi'], none=NO_PROMPTS)} vs ngram K "
                f"{_iv(n['K_median'], n['K_lo'], n['K_hi'], none=NO_PROMPTS)}"
            )
    out.append(_claim("C2", _combine(verdicts), "; ".join(ev) or "no code cells with both drafters", used))

    # C3
    verdicts, ev, used = [], [], []
    for pw in step_of("suffix", "PIECEWISE"):
        for full in step_of("suffix", "FULL"):
            for (m, w, cfg), c in cells.items():
                f = cells.get((m, w, full))
                if cfg != pw or w != "chat" or f is None:
                    continue
                if "NONE" in (c["cudagraph_mode_effective"], f["cudagraph_mode_effective"]):
                    ev.append(f"{m}: no CUDA graphs on this device (effective mode NONE)")
                    continue
                a = [
                    r["output_tok_s"]
                    for r in rows
                    if r["status"] == "ok" and (r["model"], r["workload"], r["config"]) == (m, w, pw)
                ]
                b = [
                    r["output_tok_s"]
                    for r in rows
                    if r["status"] == "ok" and (r["model"], r["workload"], r["config"]) == (m, w, full)
                ]
                p, lo, hi = stats.ratio_ci(a, b)
                v = stats.verdict(p, lo, hi)
                verdicts.append({"faster": "confirmed", "slower": "refuted"}.get(v, "undecided"))
                used += [f"{m}/{w}/{pw}", f"{m}/{w}/{full}"]
                ev.append(f"{m}: {pw}/{full} tok/s ratio {_iv(p, lo, hi, 3)}")
    out.append(
        _claim(
            "C3",
            _combine(verdicts),
            "; ".join(ev) or "no chat cells of a suffix step with cudagraph_mode PIECEWISE and one with FULL",
            used,
        )
    )

    # C4
    verdicts, ev, used = [], [], []
    for s in spec_sp:
        if s["config"] not in step_of("suffix", "PIECEWISE") or s["speedup"] is None:
            continue
        if s["gpu_util_mean"] is None or s["baseline_gpu_util_mean"] is None:
            continue
        falls = s["gpu_util_mean"] < s["baseline_gpu_util_mean"]
        v = (
            "confirmed"
            if s["verdict"] == "faster" and falls
            else ("refuted" if s["verdict"] == "slower" or not falls else "undecided")
        )
        verdicts.append(v)
        used.append(f"{s['model']}/{s['workload']}/{s['config']}")
        ev.append(
            f"{s['model']}/{s['workload']}: util {_f(s['baseline_gpu_util_mean'], 0)} -> "
            f"{_f(s['gpu_util_mean'], 0)} %, speedup {_iv(s['speedup'], s['speedup_lo'], s['speedup_hi'], 3)}"
        )
    out.append(_claim("C4", _combine(verdicts), "; ".join(ev) or "GPU utilisation not measured (no GPU)", used))

    # C5
    preds = [(k, pred) for k, c in cells.items() if (pred := k_predictions(c)) is not None]
    if preds:
        lin = sum(abs(p["err_linear"]) for _, p in preds) / len(preds)
        lev = sum(abs(p["err_leviathan"]) for _, p in preds) / len(preds)
        v = "confirmed" if lin < lev else "refuted"
        ev5 = f"mean |K error| over {len(preds)} cells: linear {lin:.2f}, Leviathan {lev:.2f}"
        out.append(_claim("C5", v, ev5, ["/".join(k) for k, _ in preds]))
    else:
        out.append(_claim("C5", NOT_COVERED, "no speculative cells", []))

    # C6
    verdicts, ev, used = [], [], []
    which = "R over decode steps"
    for s in r_sp:
        if s["R_decode"] is not None:
            r, lo, hi = s["R_decode"], s["R_decode_lo"], s["R_decode_hi"]
        elif s["R"] is not None:  # no prefill probe in this run: R over all steps
            r, lo, hi, which = s["R"], s["R_lo"], s["R_hi"], "R over all steps (no prefill probe)"
        else:
            continue
        if lo is None:
            verdicts.append("undecided")
        elif lo >= R_BAND[0] and hi <= R_BAND[1]:
            verdicts.append("confirmed")
        elif hi < R_BAND[0] or lo > R_BAND[1]:
            verdicts.append("refuted")
        else:
            verdicts.append("undecided")
        used.append(f"{s['model']}/{s['workload']}/{s['config']}")
        why = " (technical replicates)" if s.get("replication") == "passes on one engine" else " (n<2)"
        ev.append(f"{s['model']}/{s['workload']}/{s['config']} {_iv(r, lo, hi, none=why)}")
    out.append(_claim("C6", _combine(verdicts), f"{which}: " + "; ".join(ev) if ev else "no R measured", used))

    # C7
    verdicts, ev, used = [], [], []
    for (m, w, cfg), c in cells.items():
        son = cells.get((m, "sonnet", cfg))
        if w != "chat" or son is None or c["K_median"] is None or son["K_median"] is None:
            continue
        verdicts.append(_above(c, son, "K"))
        used += [f"{m}/chat/{cfg}", f"{m}/sonnet/{cfg}"]
        ev.append(
            f"{m}/{cfg}: chat K {_iv(c['K_median'], c['K_lo'], c['K_hi'], none=NO_PROMPTS)} vs sonnet "
            f"{_iv(son['K_median'], son['K_lo'], son['K_hi'], none=NO_PROMPTS)}"
        )
    out.append(_claim("C7", _combine(verdicts), "; ".join(ev) or "no chat and sonnet cells", used))

    out.append(
        _speedup_claim(
            "C8",
            spec_sp,
            lambda s: s["model_params_b"] >= 14.0 and s["config"] in step_of("suffix", "PIECEWISE"),
            "faster",
        )
    )
    return out


def markdown(study: Study, decided: list[dict[str, Any]]) -> str:
    lines = [
        f"# The article's claims, decided by run `{study.run}`",
        "",
        f"Generated from the run's tables ({study.repeats} repeat(s) per cell"
        + ("" if study.engine_per_repeat else ", passes on one engine: technical replicates, no interval")
        + "; medians, 95 % intervals over engine starts, K's over prompts); not edited by hand. See "
        "`workflow/specsweep/claims.py` for each rule.",
        "",
        f"Verdicts: {stats.VERDICT_RULE}",
        "",
        "| claim | verdict | evidence |",
        "|---|---|---|",
    ]
    for c in decided:
        lines.append(f"| {c['id']} {c['claim']} | **{c['verdict']}** | {c['evidence']} |")
    return "\n".join(lines) + "\n"


def readme_sentence(
    study: Study, crow: list[dict[str, Any]], sp: list[dict[str, Any]], decided: list[dict[str, Any]]
) -> str:
    """The README's sentence about a run, generated from its tables (a test checks the README holds it)."""
    n = sum(c["n"] for c in crow)
    counts: dict[str, int] = {}
    for s in sp:
        if s["speedup"] is not None:
            counts[s["verdict"]] = counts.get(s["verdict"], 0) + 1
    order = ("faster", "slower", "equivalent", "undecided")
    parts = [f"{counts[v]} {v}" for v in sorted(counts, key=lambda v: (order.index(v.split(" ")[0]), v))]
    claims = ", ".join(f"{c['id']} {c['verdict']}" for c in decided)
    dummy = [m for m, spec in study.models.items() if spec.weights == "dummy"]
    weights = (
        " (random weights, `weights: dummy`: step times and R, not acceptance or a usable speedup)"
        if dummy and len(dummy) == len(study.models)
        else ""
    )
    repeats = f"{study.repeats} repeats per cell planned" + (
        ", each its own engine start" if study.engine_per_repeat else ", passes on one engine: technical replicates"
    )
    bands = sorted({s["band"] for s in sp if s.get("band") is not None and s["speedup"] is not None})
    band = "/".join(f"{100 * b:.1f}" for b in bands) or f"{100 * stats.BAND:.1f}"
    return (
        f"Run `{study.run}`: {n} of {len(crow) * study.repeats} measurements ({repeats}){weights}; against "
        f"{study.baseline}, the measured cells were {', '.join(parts) or 'none'} (band ±{band} %); claims: "
        f"{claims}. Verdicts: {stats.VERDICT_RULE}"
    )


# ------------------------------------------------------------------------------------------------ C9

C9_LABEL = "below b* the drafter pays, above it costs (speedup against concurrency b)"


def _c9_curve(x: dict[str, Any]) -> str:
    """One (model, workload, drafter) curve's verdict on C9, from its crossover row (see crossover.py)."""
    note = x["note"]
    if note.startswith("crosses"):  # measurably pays below the interval and costs above it: both ends closed
        return "confirmed" if x["b_star_lo"] is not None and x["b_star_hi"] is not None else "undecided"
    if note.startswith("rises through 1"):  # costs at low b, pays at high b
        return "refuted"
    if note.startswith("costs at every measured b") and x["b_star_hi"] == 1.0:  # costs even one request at a time
        return "refuted"
    return "undecided"  # pays everywhere measured (b* above), costs from some b > 1 on, or intervals too wide


def decide_c9(study: Study, xrows: list[dict[str, Any]]) -> dict[str, Any]:
    """C9 from crossover.parquet's rows: confirmed when every real-weight curve falls through 1 with both ends
    of b*'s interval inside the measured b (it measurably pays below, costs above); refuted when one costs at
    b = 1 or rises through 1 instead. Cells of `weights: dummy` models are left out, as in C1 and C8 (their
    acceptance is not a real model's); their crossovers are in the table."""
    dummy = {m for m, spec in study.models.items() if spec.weights == "dummy"}
    rows = [x for x in xrows if x["model"] not in dummy]
    verdicts = [_c9_curve(x) for x in rows]
    ev = "; ".join(
        f"{x['model']}/{x['workload']}/{x['step']}: "
        + (
            f"b* {_f(x['b_star'], 1)} [{_f(x['b_star_lo'], 1)}, {_f(x['b_star_hi'], 1)}]"
            if x["note"].startswith("crosses")
            else x["note"]
        )
        for x in rows
    )
    if not rows:
        ev = "only random-weight (weights: dummy) models measured at a concurrency" if xrows else "no concurrency axis"
    return {
        "id": "C9",
        "claim": C9_LABEL,
        "verdict": _combine(verdicts),
        "evidence": ev,
        "cells": sorted(f"{x['model']}/{x['workload']}/{x['step']}" for x in rows),
    }
