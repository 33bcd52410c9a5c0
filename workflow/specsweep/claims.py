"""The seed article's claims, decided by a run's tables (never typed by hand).

Each claim gets `confirmed`, `refuted`, `undecided (...)` (the intervals are too wide, n < 2, or the repeats
are technical replicates), `not covered by this run` (with the true reason: no such cells, or random
weights that say nothing about what the claim is about) or `not decidable on CPU`, with the rule that
decided it, its numbers and the cells. The rules (each claim's `rule` says the same in claims.md):

C1  models <= 7B regress with any drafter     every speculative cell of a real-weight model <= 7B: slower
C2  suffix K >> ngram K on code                 the K ratio's interval (from both K intervals) at or above 1.5;
                                                refuted when it lies below 1.5
C3  PIECEWISE beats FULL with suffix on chat    trident (PIECEWISE) over suffix-full (FULL) tok/s: faster
C4  GPU utilisation falls while throughput rises  measured utilisation (cells' gpu.util_mean) of a
                                                speculative cell below its baseline's, and faster
C5  the linear form predicts K better than Leviathan's  on the ngram drafter's cells (the article's claim
                                                names it): a form is refuted when it misses every cell, in one
                                                direction or both (see below); decided by which form survives;
                                                other drafters stated once each (suffix = trident = suffix-full)
C6  R within 1.25-1.40, independent of workload  R at >= 32B (the article's regime) per workload; random
                                                weights give R0 only (drafts all rejected: K <= 1.05); R at
                                                zero acceptance bounds R from below: refutes above the band,
                                                never confirms
C7  chat K > sonnet K                           per method, chat's K interval above sonnet's; says that it
                                                cannot separate the prompts from the answers' length
C8  models >= 14B are net-positive              every trident cell of such a model: faster
C9  below b* the drafter pays, above it costs   per drafter and workload measured at several concurrencies b:
                                                its speedup falls through 1 at b* (crossover.py), the interval's
                                                ends inside the measured b (decide_c9); runs with that axis only

K's intervals (C2, C7) are over prompts, from the cells' per-request data; cells without it give no K
interval and the comparison is `undecided (no per-prompt data)`.

Throughput verdicts are the tables' (`stats.verdict`: `faster` / `slower` / `equivalent` / `undecided` /
`missing`, tested with `startswith`). Where a run's repeats are passes on one engine (technical replicates,
`engine_per_repeat: false`) no claim that rests on a throughput or step-time interval is decided:
`undecided (technical replicates)`, with what the intervals say beside it. Claims that one cell of m can
refute (C1, C4, C6, C8) take that cell's intervals again at the Bonferroni level 1 - 0.05 / m (`Family`); a
claim every cell must confirm is an intersection-union test and needs no correction. A CPU run decides none of the
article's claims (a 135M model on a few CPU cores is not the article's regime: `not decidable on CPU`); it
answers its own question instead, entry `CPU`: does the pipeline work end to end (every planned measurement
ok) and do its own repeats agree (the between-start CV of tok/s, pooled over its cells, is at most CPU_CV_MAX
with 95 % confidence: stats.spread_ci), and the article's scaling with model size asked of the CPU's own cells,
entries `CPU-size` (a larger model's speedup over a smaller's, same drafter and workload) and `CPU-R` (its R
over the smaller's), wherever two real-weight sizes measured one drafter cell.

Cells of `weights: dummy` models (random weights) measure step time, never acceptance: they enter C6 (R0)
only; the other claims say "random weights" where only such cells exist.

C5's predictions use the acceptance at draft position 1, p1 = accepted at position 1 / drafts (not the
pooled alpha, from which K = 1 + alpha * mean draft length holds by construction), and the mean draft
length g: linear K = 1 + p1 * g; Leviathan (i.i.d. acceptance) K = (1 - p1^(g+1)) / (1 - p1). Each
prediction's interval comes from p1's Wilson 95 % interval (both forms rise with p1); a form misses a cell
high when its interval lies above the cell's measured K interval (its median when n < 2), low when below.
The conditional acceptance curve (accepted at i / accepted at i-1) says why: Leviathan assumes it flat at p1.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

from . import crossover, stats
from .config import Study
from .escape import md_cell

#: C6: the article's R for Llama-3.3-70B at TP 8 (also figure 8's band and its caption).
R_BAND: tuple[float, float] = (1.25, 1.40)

LABELS = {
    "C1": "models <= 7B regress with any drafter",
    "C2": "suffix K >> ngram K on code",
    "C3": "PIECEWISE beats FULL with suffix on chat",
    "C4": "GPU utilisation falls while throughput rises (speculative vs baseline)",
    "C5": "linear K model fits better than Leviathan's closed form",
    "C6": f"R within {R_BAND[0]:.2f}-{R_BAND[1]:.2f} and independent of workload",
    "C7": "chat K > sonnet K",
    "C8": "models >= 14B are net-positive with trident",
    "CPU": "the pipeline works end to end and its own repeats agree (the CPU profile's question)",
    "CPU-size": "a larger model gains more from a drafter (the article's scaling of speedup with size), on CPU",
    "CPU-R": "a larger model's R is smaller (the article's scaling of R with size), on CPU",
}
NOT_COVERED = "not covered by this run"
NOT_ON_CPU = "not decidable on CPU"
TECHNICAL = "undecided (technical replicates)"
#: C7: what a K difference between chat and sonnet cannot tell apart (the article puts chat's high K down to
#: its sonnet-like prompts and its lower throughput gain to its short answers; this run measures K, not why).
C7_CANNOT = (
    "cannot separate: K per draft mixes the prompts' text with the answers' length (a longer answer has more of "
    "its own tokens to match), and the two workloads differ in both"
)
#: C6: the article's regime (its R was measured for Llama-3.3-70B at TP 8); smaller models' R is larger.
R_MIN_PARAMS_B = 32.0
#: C6: a random-weight cell with K at most this measures R0 (all drafts rejected, or none made).
R0_MAX_K = 1.05
#: The CPU entry: a run's repeats agree when the between-start CV of tok/s, pooled over its cells, is at most
#: this (its whole 95 % interval at most this: confirmed; wholly above it: refuted). A tolerance for a shared CPU
#: host, not a measured constant: engine starts there spread 5-8 % (docs/design.md), and at the demo's 18 degrees
#: of freedom the interval's upper end is 1.48 times the estimate, so a 10 % line left a typical run undecided
#: about one time in three; starts 30 % apart still refute.
CPU_CV_MAX = 0.15
RANDOM_WEIGHTS = "random weights (`weights: dummy`): say nothing about acceptance, K or a usable speedup"
#: The verdict rule of the tables, quoted in claims.md.
VERDICT_RULE: str = stats.VERDICT_RULE

RULES = {
    "C1": "confirmed when every speculative cell of a real-weight model <= 7B is `slower`; refuted when any is "
    "`faster` or `equivalent` with its interval at the family-wise level (1 - 0.05 / m over the m cells); else "
    "undecided",
    "C2": "per model on code, the ratio of suffix's K to ngram's with the interval their K intervals bound it "
    "to (suffix's low end over ngram's high end, and the other way): confirmed when that interval lies at or above "
    "1.5, refuted when it lies below 1.5, else undecided; all models must agree",
    "C3": "trident (PIECEWISE) over suffix-full (FULL) on chat, tok/s ratio with its interval: `faster` "
    "confirms, `slower` or `equivalent` refutes, else undecided",
    "C4": "per speculative cell with GPU utilisation measured on both sides (trident's where it exists): "
    "confirmed when `faster` and its utilisation interval lies below the baseline's; refuted when `slower` / "
    "`equivalent` or its utilisation interval is not below, with its intervals at the family-wise level (1 - 0.05 "
    "/ m over the m cells); else undecided",
    "C5": "on the ngram drafter's cells (the drafter the article's claim is about; one cell per model and "
    "workload): a form is refuted when its prediction interval (from p1's Wilson 95 % interval) misses every cell "
    "(>= 2), in one direction or both; confirmed when the linear form stands and Leviathan's is refuted, refuted "
    "when the linear form is, else undecided; other drafters' fits are stated, each drafter once (suffix, trident "
    "and suffix-full share one), and decide nothing",
    "C6": f"R (decode steps where probed) per workload and drafter of every model >= {R_MIN_PARAMS_B:g}B; random "
    f"weights: R0 only (K <= {R0_MAX_K}); R at zero acceptance (no drafts made or accepted, K <= {R0_MAX_K}) is a "
    "lower bound on the article's R: it refutes from above the band but never confirms; confirmed when every "
    f"interval, none at zero acceptance, lies inside {R_BAND[0]:.2f}-{R_BAND[1]:.2f}, refuted when any lies wholly "
    "outside at the family-wise level (1 - 0.05 / m over the m cells), else undecided",
    "C7": "per model and method: confirmed when chat's K interval lies above sonnet's; refuted when below; "
    "else undecided; all must agree. It cannot separate the workload's prompts from its answers' length (the "
    "mean answer tokens of both are stated beside it)",
    "C8": "confirmed when every trident cell of a model >= 14B is `faster`; refuted when any is `slower` or "
    "`equivalent` with its interval at the family-wise level (1 - 0.05 / m over the m cells); else undecided",
    "CPU-size": "per drafter cell (workload, ladder step, all prompts at once) that two real-weight model sizes of "
    "the run share: the larger model's speedup over the smaller's, with the 95 % Welch interval of that ratio over "
    "the four cells' engine starts (stats.welch_log_contrast); confirmed when every interval lies above 1 + b, "
    "refuted when any lies below 1 - b at the family-wise level (1 - 0.05 / m over the m pairs), else undecided, "
    "with the ratio the widest interval needed to decide (b: the verdict band)",
    "CPU-R": "as CPU-size, on R (a cell's step time over its baseline's): the larger model's R over the smaller's; "
    "confirmed when every interval lies below 1 - b, refuted when any lies above 1 + b at the family-wise level, "
    "else undecided, with the ratio the widest interval needed to decide",
    "CPU": "confirmed when every planned measurement is ok and the 95 % interval of the between-start CV of "
    f"tok/s, pooled over all cells (chi-square on the pooled log variance), lies at or below {CPU_CV_MAX:.0%}; "
    "refuted when a measurement failed or is missing, or the interval lies wholly above it; else undecided",
}


def _claim(cid: str, verdict: str, evidence: str, cells: list[str]) -> dict[str, Any]:
    return {
        "id": cid,
        "claim": LABELS[cid],
        "verdict": verdict,
        "rule": RULES[cid],
        "evidence": evidence,
        "cells": sorted(set(cells)),
    }


def _f(v: Any, d: int = 2) -> str:
    return "–" if v is None else f"{v:.{d}f}"


def _iv(p: Any, lo: Any, hi: Any, d: int = 2, none: str = " (n<2)", same: int | None = None) -> str:
    """'p [lo, hi]', or p and `none` (why there is no interval) when there is none; an exact estimate (`same`:
    the prompts or engine starts that all gave it) or a zero-width interval is named as the same value in each
    (over prompts where `none` says it is K's, else over engine starts)."""
    if p is None:
        return "–"
    over = "prompts" if none == NO_PROMPTS else "starts"
    if same:
        return f"{p:.{d}f} (same in {same} {over})"
    if lo is None or hi is None:
        return f"{p:.{d}f}{none}"
    return f"{p:.{d}f}" + stats.interval_text(lo, hi, f".{d}f", over=over)


#: Why a K has no interval: K's interval is over prompts, from the cells' per-request data.
NO_PROMPTS = " (no per-prompt data)"


def _k_iv(c: dict[str, Any]) -> str:
    """A cell row's K with its interval over prompts (exact where every prompt gave it: K_same_prompts)."""
    return _iv(c["K_median"], c["K_lo"], c["K_hi"], none=NO_PROMPTS, same=c.get("K_same_prompts"))


def _name(r: dict[str, Any]) -> str:
    return f"{r['model']}/{r['workload']}/{r['config']}"


def _combine(verdicts: list[str]) -> str:
    if not verdicts:
        return NOT_COVERED
    if all(v == "confirmed" for v in verdicts):
        return "confirmed"
    if any(v == "refuted" for v in verdicts):
        return "refuted"
    return verdicts[0] if len(set(verdicts)) == 1 else "undecided"  # an undecided reason all of them share


def _speedup_claim(
    cid: str,
    sp: list[dict[str, Any]],
    dummy: set[str],
    tech: bool,
    keep: Callable[[dict[str, Any]], bool],
    want: str,
    fam: Family | None = None,
) -> dict[str, Any]:
    """Every kept row's verdict must be `want` (confirmed: an intersection-union test, each interval at 95 %);
    an opposite or `equivalent` verdict refutes only where it holds at the family-wise level (:class:`Family`)."""
    found = [s for s in sp if s["status"] in ("ok", "partial") and s["speedup"] is not None and keep(s)]
    rows = [s for s in found if s["model"] not in dummy]
    if not rows:
        why = f"only {RANDOM_WEIGHTS}" if found else "no such cells"
        return _claim(cid, NOT_COVERED, why, [_name(s) for s in found])
    ev = "; ".join(f"{_name(s)} {_iv(s['speedup'], s['speedup_lo'], s['speedup_hi'], 3)} {s['verdict']}" for s in rows)
    other = "faster" if want == "slower" else "slower"
    verdicts = [str(s["verdict"]) for s in rows]
    if all(v.startswith(want) for v in verdicts):
        verdict = "confirmed"
    elif any(v.startswith((other, "equivalent")) for v in verdicts):
        verdict, note = _family(rows, other, fam or Family([]))
        ev = f"{ev}; {note}" if note else ev
    else:
        verdict = "undecided"
    if tech or any("technical replicates" in v for v in verdicts):
        if verdict != "undecided":
            ev = f"the verdicts alone would say {verdict}; {ev}"
        verdict = TECHNICAL
    return _claim(cid, verdict, ev, [_name(s) for s in rows])


class Family:
    """Claims refuted by any one of m cells (C1, C4, C6, C8) have m chances for one interval to miss, so a
    refuting cell is taken again with its intervals at the Bonferroni level 1 - 0.05 / m, recomputed from the
    engine starts (`rows`: the tables' measurement rows, one engine start each `_start`), and refutes only where
    it still does. Confirming needs every cell (an intersection-union test at 95 %) and is not corrected."""

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self._rows = [r for r in rows if "_start" in r]
        self._series: dict[str, dict[tuple[Any, ...], list[float]]] = {}

    def starts(self, metric: str, model: str, workload: str, config: Any, concurrency: Any) -> list[float]:
        """A cell's values of `metric`, one per engine start ([] where none)."""
        if metric not in self._series:
            self._series[metric] = stats.cell_series(self._rows, metric)
        return self._series[metric].get((model, workload, config, concurrency), [])

    def ratio(self, s: dict[str, Any], metric: str, level: float) -> tuple[Any, Any]:
        """The `level` interval of speedup row `s`'s cell over its baseline in `metric`: tok/s's as the verdict
        rule takes it (stats.speedup_ci), the others Welch's."""
        key = (s["model"], s["workload"])
        num = self.starts(metric, *key, s["config"], s.get("concurrency"))
        den = self.starts(metric, *key, s.get("baseline"), s.get("concurrency"))
        if not num or not den:
            return None, None
        if metric == "output_tok_s":
            return stats.speedup_ci(num, den, level)[1:]
        return stats.welch_log_ci(num, den, level)

    def verdict(self, s: dict[str, Any], level: float) -> tuple[Any, Any, str | None]:
        """Speedup row `s`'s tok/s interval at `level` and its verdict under the row's own band (None where
        there are no engine starts to recompute from)."""
        lo, hi = self.ratio(s, "output_tok_s", level)
        if lo is None:
            return None, None, None
        return lo, hi, stats.verdict(s["speedup"], lo, hi, band=s.get("band") or stats.BAND)

    def cell(self, s: dict[str, Any], metric: str, level: float, config: Any) -> tuple[Any, Any]:
        """The `level` interval of `metric` of row `s`'s model and workload at ladder step `config`."""
        return stats.cell_ci(self.starts(metric, s["model"], s["workload"], config, s.get("concurrency")), level)

    @staticmethod
    def level(m: int) -> float:
        return 1.0 - (1.0 - stats.LEVEL) / m

    @staticmethod
    def over(m: int, checks: Callable[[float], Iterator[tuple[bool, str]]]) -> tuple[str, str]:
        """`refuted` when a refuting cell still refutes at the family-wise level, else `undecided`, with the
        sentence that says so ("" for one cell, where no correction applies). `checks(level)` yields, for each
        refuting cell taken again at `level`, whether it still refutes and its line of evidence."""
        if m == 1:
            return "refuted", ""
        held: list[str] = []
        lost: list[str] = []
        for refutes, line in checks(Family.level(m)):
            (held if refutes else lost).append(line)
        head = f"family-wise ({m} cells, each interval at {100 * Family.level(m):.2f} %)"
        if held:
            return "refuted", f"{head}: refuted by {'; '.join(held)}"
        return "undecided", f"{head}: no cell refutes ({'; '.join(lost)})"


def _family(rows: list[dict[str, Any]], other: str, fam: Family) -> tuple[str, str]:
    """C1, C8: each `other` or `equivalent` cell's speedup interval at the family-wise level, its verdict
    under the row's own band."""

    def checks(level: float) -> Iterator[tuple[bool, str]]:
        for s in rows:
            if not str(s["verdict"]).startswith((other, "equivalent")):
                continue
            lo, hi, v = fam.verdict(s, level)
            line = f"{_name(s)} " + (f"[{lo:.3f}, {hi:.3f}] {v}" if v else "no engine starts to recompute")
            yield bool(v and v.startswith((other, "equivalent"))), line

    return Family.over(len(rows), checks)


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


#: C2: "suffix K >> ngram K" read as a ratio of at least this (the article measured 1.7-3.7, 3.74 on code).
C2_RATIO = 1.5


def _c2_ratio(suffix: dict[str, Any], ngram: dict[str, Any]) -> tuple[str, str]:
    """C2 on one model: the ratio of suffix's K to ngram's with the interval the two K intervals bound it to
    (suffix's low end over ngram's high end, and the other way); confirmed when that interval lies at or above
    C2_RATIO, refuted when it lies below, else undecided. Returns the verdict and the ratio as text."""
    ratio = suffix["K_median"] / ngram["K_median"]
    ends = (suffix["K_lo"], suffix["K_hi"], ngram["K_lo"], ngram["K_hi"])
    if None in ends or not ngram["K_lo"]:
        return "undecided" + NO_PROMPTS, f"{ratio:.2f}"
    lo, hi = suffix["K_lo"] / ngram["K_hi"], suffix["K_hi"] / ngram["K_lo"]
    v = "confirmed" if lo >= C2_RATIO else "refuted" if hi < C2_RATIO else "undecided"
    return v, f"{ratio:.2f} [{lo:.2f}, {hi:.2f}] against {C2_RATIO:g}"


def _linear(p1: float, g: float) -> float:
    return 1 + p1 * g


def _leviathan(p1: float, g: float) -> float:
    return (1 - p1 ** (g + 1)) / (1 - p1) if p1 < 1 else g + 1


def k_predictions(c: dict[str, Any]) -> dict[str, Any] | None:
    """Measured K and the two predictions from position-1 acceptance, each with the interval p1's Wilson
    interval gives (see the module doc), and the conditional acceptance per draft position."""
    drafts, dtok, pos = c.get("drafts"), c.get("draft_tokens"), c.get("accepted_per_pos")
    if not drafts or not dtok or not pos or c.get("K_median") is None:
        return None
    p1 = pos[0] / drafts
    g = dtok / drafts
    p1_lo, p1_hi = stats.wilson(pos[0], drafts)
    lin, lev = _linear(p1, g), _leviathan(p1, g)
    cond: list[float | None] = [None] * len(pos)
    for i, k, n in stats.continuation(drafts, pos):
        cond[i - 1] = k / n
    return {
        "K": c["K_median"],
        "K_lo": c.get("K_lo"),
        "K_hi": c.get("K_hi"),
        "p1": p1,
        "p1_lo": p1_lo,
        "p1_hi": p1_hi,
        "mean_draft": g,
        "K_linear": lin,
        "K_linear_lo": _linear(p1_lo, g),
        "K_linear_hi": _linear(p1_hi, g),
        "K_leviathan": lev,
        "K_leviathan_lo": _leviathan(p1_lo, g),
        "K_leviathan_hi": _leviathan(p1_hi, g),
        "err_linear": lin - c["K_median"],
        "err_leviathan": lev - c["K_median"],
        "conditional_acceptance": cond,
    }


def miss(pred: dict[str, Any], form: str) -> str:
    """`over` when the form's prediction interval lies above the measured K (its interval, or its median at
    n < 2), `under` when below, else `fits`."""
    lo, hi = pred[f"K_{form}_lo"], pred[f"K_{form}_hi"]
    k_lo = pred["K_lo"] if pred["K_lo"] is not None else pred["K"]
    k_hi = pred["K_hi"] if pred["K_hi"] is not None else pred["K"]
    if lo > k_hi:
        return "over"
    if hi < k_lo:
        return "under"
    return "fits"


def form_verdict(preds: list[dict[str, Any]], form: str) -> tuple[bool, str]:
    """(refuted, text): refuted when every cell (at least two) is missed, in one direction or both (a form
    that fits no cell does not stand, whichever side it misses on)."""
    misses = [miss(p, form) for p in preds]
    errs = [p[f"K_{form}"] - p["K"] for p in preds]
    counts = {m: misses.count(m) for m in ("over", "under", "fits") if misses.count(m)}
    refuted = len(preds) >= 2 and "fits" not in counts
    text = (
        f"{form} "
        + ", ".join(f"{m}-predicts {n}" if m != "fits" else f"fits {n}" for m, n in counts.items())
        + f" of {len(preds)} (error {min(errs):+.2f} to {max(errs):+.2f})"
    )
    return refuted, text


def _rising(pred: dict[str, Any], c: dict[str, Any]) -> bool | None:
    """Conditional acceptance at position 2 above p1 with disjoint Wilson intervals (positive correlation
    between positions, which Leviathan's i.i.d. form ignores); None when position 2 was never reached."""
    pos = c["accepted_per_pos"]
    if len(pos) < 2 or not pos[0]:
        return None
    lo2, hi2 = stats.wilson(pos[1], pos[0])
    if lo2 > pred["p1_hi"]:
        return True
    if hi2 < pred["p1_lo"]:
        return False
    return None


def _sync_step(study: Study) -> str | None:
    """The control ladder step that is the baseline with async scheduling off (`vanilla-sync`), if any."""
    for name, st in study.ladder.items():
        if st.method == "none" and name != study.baseline and (st.engine or {}).get("async_scheduling") is False:
            return name
    return None


def decide(
    study: Study,
    crow: list[dict[str, Any]],
    sp: list[dict[str, Any]],
    rows: list[dict[str, Any]],
    every_cell: list[dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """C1-C8 from the cells `crow` and speedups `sp` (those of the article's point), and for a CPU run its own
    entry from `every_cell` (all the run's cells, those at a concurrency b too; default `crow`) and the
    measurements `rows`."""
    out = []
    dummy = {m for m, spec in study.models.items() if spec.weights == "dummy"}
    tech = study.technical_replicates
    r_sp = [s for s in sp if s["method"] != "none"]
    fam = Family(rows)
    out.append(_speedup_claim("C1", r_sp, dummy, tech, lambda s: s["model_params_b"] <= 7.0, "slower", fam))

    all_cells = {(c["model"], c["workload"], c["config"]): c for c in crow if c["n"]}
    cells = {k: c for k, c in all_cells.items() if k[0] not in dummy}
    steps = study.ladder

    def step_of(method: str, mode: str | None = None) -> list[str]:
        return [
            n
            for n, st in steps.items()
            if st.method == method and (mode is None or (st.compilation or {}).get("cudagraph_mode") == mode)
        ]

    def series(m: str, w: str, cfg: str, metric: str) -> list[Any]:
        """A cell's values at the article's point (all prompts at once), one per engine start."""
        return fam.starts(metric, m, w, cfg, None)

    def band_of(m: str) -> float:
        """The model's equivalence band, as the tables' verdicts use it (every speedup row of it has it)."""
        return next((float(s["band"]) for s in sp if s["model"] == m and s.get("band")), stats.BAND)

    def kind(workload: str) -> str | None:
        spec = study.workloads.get(workload)
        return spec.kind if spec is not None else None

    def only_dummy(keep: Callable[[tuple[str, str, str]], bool]) -> bool:
        return any(keep(k) for k in all_cells if k[0] in dummy) and not any(keep(k) for k in cells)

    # C2
    verdicts, ev, used = [], [], []
    for (m, w, cfg), c in cells.items():
        if w != "code" or cfg not in step_of("suffix", None) or (steps[cfg].compilation or {}):
            continue
        for ng in step_of("ngram"):
            n = cells.get((m, w, ng))
            if n is None or n["K_median"] is None or c["K_median"] is None:
                continue
            v, ratio = _c2_ratio(c, n)
            verdicts.append(v)
            used += [f"{m}/{w}/{cfg}", f"{m}/{w}/{ng}"]
            ev.append(f"{m}: suffix K {_k_iv(c)} vs ngram K {_k_iv(n)}, ratio {ratio}: {v}")
    none2 = RANDOM_WEIGHTS if only_dummy(lambda k: kind(k[1]) == "code") else "no code cells with both drafters"
    out.append(_claim("C2", _combine(verdicts), "; ".join(ev) or none2, used))

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
                p, lo, hi = stats.speedup_ci(series(m, w, pw, "output_tok_s"), series(m, w, full, "output_tok_s"))
                v = str(stats.verdict(p, lo, hi, band=band_of(m)))
                if tech:
                    d = TECHNICAL
                elif v.startswith("faster"):
                    d = "confirmed"
                elif v.startswith(("slower", "equivalent")):
                    d = "refuted"
                else:
                    d = "undecided"
                verdicts.append(d)
                used += [f"{m}/{w}/{pw}", f"{m}/{w}/{full}"]
                ev.append(f"{m}: {pw}/{full} tok/s ratio {_iv(p, lo, hi, 3)} {v}")
    none3 = (
        RANDOM_WEIGHTS
        if only_dummy(lambda k: kind(k[1]) == "chat")
        else "no chat cells of a suffix step with cudagraph_mode PIECEWISE and one with FULL"
    )
    c3 = TECHNICAL if verdicts and tech else _combine(verdicts)
    out.append(_claim("C3", c3, "; ".join(ev) or none3, used))

    out.append(_c4(study, all_cells, sp, dummy, tech, step_of("suffix", "PIECEWISE"), fam))
    out.append(_c5(cells, all_cells, dummy))
    out.append(_c6(study, r_sp, dummy, tech, fam, all_cells))

    # C7
    verdicts, ev, used, lengths = [], [], [], []
    for (m, w, cfg), c in cells.items():
        son = cells.get((m, "sonnet", cfg))
        if w != "chat" or son is None or c["K_median"] is None or son["K_median"] is None:
            continue
        verdicts.append(_above(c, son, "K"))
        used += [f"{m}/chat/{cfg}", f"{m}/sonnet/{cfg}"]
        ev.append(f"{m}/{cfg}: chat K {_k_iv(c)} vs sonnet {_k_iv(son)}: {verdicts[-1]}")
        lengths.append(
            f"{m}/{cfg} chat {_f(c.get('output_tokens_mean'), 0)}, sonnet {_f(son.get('output_tokens_mean'), 0)}"
        )
    none7 = RANDOM_WEIGHTS if only_dummy(lambda k: kind(k[1]) in ("chat", "sonnet")) else "no chat and sonnet cells"
    if ev:
        ev.append(f"{C7_CANNOT} (mean answer tokens: {'; '.join(lengths)})")
    out.append(_claim("C7", _combine(verdicts), "; ".join(ev) or none7, used))

    out.append(
        _speedup_claim(
            "C8",
            r_sp,
            dummy,
            tech,
            lambda s: s["model_params_b"] >= 14.0 and s["config"] in step_of("suffix", "PIECEWISE"),
            "faster",
            fam,
        )
    )
    if study.device == "cpu":
        for c in out:
            _not_on_cpu(c)
        out.append(_cpu(study, crow if every_cell is None else every_cell, rows))
        out += _cpu_sizes(study, r_sp, dummy, fam)
    return out


#: The size entries of a CPU run: (entry, metric per engine start, the direction the article's scaling says).
SIZE_ENTRIES: tuple[tuple[str, str, str, str], ...] = (
    ("CPU-size", "output_tok_s", "speedup", "above"),
    ("CPU-R", "step_time_ms", "R", "below"),
)


def _cpu_sizes(study: Study, sp: list[dict[str, Any]], dummy: set[str], fam: Family) -> list[dict[str, Any]]:
    """The CPU run's size entries (SIZE_ENTRIES, rules in RULES): each pair of real-weight model sizes that
    measured one drafter cell at the same workload (all prompts at once), the larger's speedup (or R) over the
    smaller's, from the four cells' engine starts."""
    sized = {
        m: float(spec.params_b) for m, spec in study.models.items() if m not in dummy and spec.params_b is not None
    }
    by_cell: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
    for r in sp:
        if r["model"] in sized and r["status"] in ("ok", "partial") and r["speedup"] is not None:
            by_cell.setdefault((r["workload"], r["config"]), {})[r["model"]] = r
    pairs = []
    for (workload, config), got in sorted(by_cell.items()):
        models = sorted(got, key=lambda m: (sized[m], m))
        pairs += [
            (workload, config, got[small], got[large])
            for i, small in enumerate(models)
            for large in models[i + 1 :]
            if sized[large] > sized[small]
        ]
    out = []
    for cid, metric, what, want in SIZE_ENTRIES:
        if not pairs:
            why = f"no drafter cell measured on two real-weight model sizes ({len(sized)} size(s) in the run)"
            out.append(_claim(cid, NOT_COVERED, why, []))
            continue
        m = len(pairs)
        ev, verdicts, used, halfs = [], [], [], []
        for workload, config, small, large in pairs:
            band = float(large.get("band") or stats.BAND)

            def starts(r: dict[str, Any], step: Any, metric: str = metric) -> list[float]:
                return fam.starts(metric, r["model"], r["workload"], step, r.get("concurrency"))

            groups = (
                [starts(large, config), starts(small, large.get("baseline"))],
                [starts(large, large.get("baseline")), starts(small, config)],
            )
            point, lo, hi = stats.welch_log_contrast(*groups)
            _, flo, fhi = stats.welch_log_contrast(*groups, level=1 - 0.05 / m)
            used += [_name(large), _name(small)]
            name = f"{workload}/{config} {large['model']} over {small['model']}"
            if point is None or lo is None or hi is None or flo is None or fhi is None:
                ev.append(f"{name}: fewer than 2 engine starts on a side, or all starts identical")
                verdicts.append("undecided")
                continue
            halfs.append((math.log(hi / lo) / 2, band))
            ev.append(f"{name}: {what} {_iv(point, lo, hi, 3)}")
            above, below = lo > 1 + band, hi < 1 - band
            wrong = fhi < 1 - band if want == "above" else flo > 1 + band
            if above if want == "above" else below:
                verdicts.append("confirmed")
            elif wrong:
                verdicts.append("refuted")
            else:
                verdicts.append("undecided")
        verdict = _combine(verdicts)
        if verdict not in ("confirmed", "refuted") and halfs:
            h, band = max(halfs)
            ev.append(
                f"power: the widest interval reaches a factor {math.exp(h):.3f} either side of its estimate, so "
                f"only an estimate above {(1 + band) * math.exp(h):.3f} or below {(1 - band) / math.exp(h):.3f} "
                "decides"
            )
        out.append(_claim(cid, verdict, "; ".join(ev), sorted(set(used))))
    return out


def _not_on_cpu(c: dict[str, Any]) -> dict[str, Any]:
    """A claim of a CPU run: the rule's answer shown in the evidence, the verdict `not decidable on CPU`."""
    c["evidence"] = (
        f"the rule alone would say {c['verdict']}; a CPU run (a small model on a few CPU cores) is not "
        f"the article's regime: {c['evidence']}"
    )
    c["verdict"] = NOT_ON_CPU
    return c


def _c4(
    study: Study,
    all_cells: dict[tuple[str, str, str], dict[str, Any]],
    sp: list[dict[str, Any]],
    dummy: set[str],
    tech: bool,
    trident: list[str],
    fam: Family,
) -> dict[str, Any]:
    measured = [
        s
        for s in sp
        if s["method"] != "none"
        and s["speedup"] is not None
        and s["gpu_util_mean"] is not None
        and s["baseline_gpu_util_mean"] is not None
    ]
    if not measured:
        return _claim("C4", NOT_COVERED, "GPU utilisation not measured (gpu.util_mean null in every cell)", [])
    real = [s for s in measured if s["model"] not in dummy]
    base_u = [s["baseline_gpu_util_mean"] for s in measured]
    spec_u = [s["gpu_util_mean"] for s in measured]
    util = (
        f"GPU utilisation measured (cells' gpu.util_mean, medians): {study.baseline} {min(base_u):.1f}–"
        f"{max(base_u):.1f} %, speculative {min(spec_u):.1f}–{max(spec_u):.1f} %"
    )
    if not real:
        return _claim("C4", NOT_COVERED, f"{util}; {RANDOM_WEIGHTS}", [_name(s) for s in measured])
    rows = [s for s in real if s["config"] in trident] or real
    verdicts, ev = [], []
    for s in rows:
        c = all_cells.get((s["model"], s["workload"], s["config"]), {})
        b = all_cells.get((s["model"], s["workload"], study.baseline), {})
        c_hi, b_lo = c.get("gpu_util_mean_hi"), b.get("gpu_util_mean_lo")
        c_lo, b_hi = c.get("gpu_util_mean_lo"), b.get("gpu_util_mean_hi")
        falls = c_hi < b_lo if c_hi is not None and b_lo is not None else None
        not_lower = c_lo is not None and b_hi is not None and c_lo >= b_hi
        v = str(s["verdict"])
        if v.startswith("faster") and falls:
            d = "confirmed"
        elif v.startswith(("slower", "equivalent")) or not_lower:
            d = "refuted"
        else:
            d = "undecided"
        verdicts.append(d)
        ev.append(
            f"{_name(s)}: util {_f(s['baseline_gpu_util_mean'], 1)} -> {_f(s['gpu_util_mean'], 1)} % "
            f"({'intervals apart' if falls else 'no interval, n<2' if falls is None else 'intervals overlap'}), "
            f"speedup {_iv(s['speedup'], s['speedup_lo'], s['speedup_hi'], 3)} {v}"
        )
    which = "" if rows[0]["config"] in trident else "no trident cells, every speculative step; "
    verdict = _combine(verdicts)
    if verdict == "refuted":
        verdict, note = _c4_family(study, rows, verdicts, fam)
        ev += [note] if note else []
    if tech and verdict in ("confirmed", "refuted"):
        verdict = TECHNICAL
    return _claim("C4", verdict, f"{which}{util}; " + "; ".join(ev), [_name(s) for s in rows])


def _c4_family(study: Study, rows: list[dict[str, Any]], verdicts: list[str], fam: Family) -> tuple[str, str]:
    """C4's refuting cells again at the family-wise level: the speedup's verdict (under the row's band) and
    the utilisation intervals of the cell and its baseline."""

    def checks(level: float) -> Iterator[tuple[bool, str]]:
        for s, d in zip(rows, verdicts, strict=True):
            if d != "refuted":
                continue
            lo, hi, v = fam.verdict(s, level)
            c_lo, _ = fam.cell(s, "gpu_util_mean", level, s["config"])
            _, b_hi = fam.cell(s, "gpu_util_mean", level, study.baseline)
            not_lower = c_lo is not None and b_hi is not None and c_lo >= b_hi
            if v is None:
                yield False, f"{_name(s)} no engine starts to recompute"
                continue
            line = f"{_name(s)} speedup [{lo:.3f}, {hi:.3f}] {v}" + (", util not below" if not_lower else "")
            yield v.startswith(("slower", "equivalent")) or not_lower, line

    return Family.over(len(rows), checks)


#: C5: the drafter the article's claim is about ("본 환경 ngram drafter의 실측은 linear 근사 ... 더 잘 맞는다").
C5_DRAFTER = "ngram"


def _one_per_drafter(
    preds: list[tuple[tuple[str, str, str], dict[str, Any], dict[str, Any]]],
) -> dict[str, list[tuple[tuple[str, str, str], dict[str, Any], dict[str, Any]]]]:
    """The predictions grouped by drafter (the cell's method), one cell per model, workload and drafter: ladder
    steps that share a drafter (suffix, trident and suffix-full are all the suffix drafter) count once, the
    first step measured."""
    out: dict[str, list[tuple[tuple[str, str, str], dict[str, Any], dict[str, Any]]]] = {}
    seen: set[tuple[str, str, str]] = set()
    for k, c, p in preds:
        method = str(c.get("method") or k[2])
        if (k[0], k[1], method) in seen:
            continue
        seen.add((k[0], k[1], method))
        out.setdefault(method, []).append((k, c, p))
    return out


def _c5(
    cells: dict[tuple[str, str, str], dict[str, Any]],
    all_cells: dict[tuple[str, str, str], dict[str, Any]],
    dummy: set[str],
) -> dict[str, Any]:
    preds = [(k, c, p) for k, c in cells.items() if (p := k_predictions(c)) is not None]
    if not preds:
        spec_dummy = any(k[0] in dummy and k_predictions(c) is not None for k, c in all_cells.items())
        return _claim("C5", NOT_COVERED, RANDOM_WEIGHTS if spec_dummy else "no speculative cells", [])
    by_drafter = _one_per_drafter(preds)
    others = []
    for method, group in sorted(by_drafter.items()):
        if method == C5_DRAFTER:
            continue
        gp = [p for _, _, p in group]
        texts = [form_verdict(gp, form) for form in ("linear", "leviathan")]
        others.append(
            f"{method} drafter, {len(gp)} cell(s) (one step per model and workload): "
            + "; ".join(f"{t}{' (would not stand)' if r else ''}" for r, t in texts)
        )
    context = f"; other drafters, not deciding: {'; '.join(others)}" if others else ""
    chosen = by_drafter.get(C5_DRAFTER, [])
    if not chosen:
        why = f"no cells of the {C5_DRAFTER} drafter, the one the article's claim is about"
        return _claim("C5", NOT_COVERED, why + context, [])
    ps = [p for _, _, p in chosen]
    lin_ref, lin_text = form_verdict(ps, "linear")
    lev_ref, lev_text = form_verdict(ps, "leviathan")
    rising = [_rising(p, c) for _, c, p in chosen]
    curve = (
        f"conditional acceptance at position 2 above p1 (Wilson intervals apart) in {rising.count(True)} of "
        f"{len(rising)} cells, below in {rising.count(False)}"
    )
    if lin_ref:
        v = "refuted"
    elif lev_ref:
        v = "confirmed"
    else:
        v = "undecided"
    mean_lin = sum(abs(p["err_linear"]) for p in ps) / len(ps)
    mean_lev = sum(abs(p["err_leviathan"]) for p in ps) / len(ps)
    ev = (
        f"{C5_DRAFTER} drafter: {lin_text}{' (refuted)' if lin_ref else ''}; {lev_text}"
        f"{' (refuted)' if lev_ref else ''}; {curve}; mean |K error| linear {mean_lin:.2f}, Leviathan "
        f"{mean_lev:.2f}{context}"
    )
    return _claim("C5", v, ev, ["/".join(k) for k, _, _ in chosen])


def _c6(
    study: Study,
    r_sp: list[dict[str, Any]],
    dummy: set[str],
    tech: bool,
    fam: Family,
    all_cells: dict[tuple[str, str, str], dict[str, Any]] | None = None,
) -> dict[str, Any]:
    sync = _sync_step(study)
    spec_cells = all_cells or {}
    verdicts, ev, used, context, small_split, small = [], [], [], [], [], 0
    rs: list[tuple[dict[str, Any], str, bool]] = []

    def split_of(s: dict[str, Any], metric: str) -> str:
        """R = (vanilla-sync over vanilla) x (the drafter over vanilla-sync), each a ratio of engine starts."""
        if sync is None:
            return ""
        m, w, cfg = s["model"], s["workload"], s["config"]
        a = stats.ratio_ci(fam.starts(metric, m, w, sync, None), fam.starts(metric, m, w, study.baseline, None))
        b = stats.ratio_ci(fam.starts(metric, m, w, cfg, None), fam.starts(metric, m, w, sync, None))
        if a[0] is None or b[0] is None:
            return ""
        return f" = async off {_iv(*a)} × drafting {_iv(*b)} ({sync})"

    for s in r_sp:
        decode = s["R_decode"] is not None
        if decode:
            r, lo, hi = s["R_decode"], s["R_decode_lo"], s["R_decode_hi"]
        elif s["R"] is not None:  # no prefill probe in this run: R over all steps
            r, lo, hi = s["R"], s["R_lo"], s["R_hi"]
        else:
            continue
        metric = "decode_step_time_ms" if decode else "step_time_ms"
        why = " (technical replicates)" if tech else " (n<2)"
        label = f"{_name(s)} {_iv(r, lo, hi, none=why)}{'' if decode else ' (all steps)'}"
        if s["model_params_b"] < R_MIN_PARAMS_B:
            small += 1
            split = split_of(s, metric)
            if split:  # where the control ran, the split is worth reading at any size
                small_split.append(f"{label}{split}")
            continue
        if s["model"] in dummy and s["K"] is not None and s["K"] > R0_MAX_K:
            # random weights accepting nearly every draft: R_full, with the control's split where it ran
            context.append(f"{label}{split_of(s, metric)} (K {s['K']:.2f})")
            continue
        zero = zero_acceptance(s, spec_cells.get((s["model"], s["workload"], s["config"])))
        if zero:
            label += " (zero acceptance: a lower bound on R)"
        if lo is None or hi is None:
            d = "undecided"
        elif lo > R_BAND[1]:
            d = "outside"
        elif zero:  # no verify step worth the name: R here bounds the article's R from below, never confirms it
            d = "bound only"
        elif lo >= R_BAND[0] and hi <= R_BAND[1]:
            d = "inside"
        elif hi < R_BAND[0]:
            d = "outside"
        else:
            d = "straddles"
        verdicts.append(d)
        rs.append((s, metric, zero))
        used.append(_name(s))
        split = split_of(s, metric)
        if split:
            used.append(f"{s['model']}/{s['workload']}/{sync}")
        ev.append(f"{label}{split}: {d}")
    rule_note = (
        f"R0 (random weights, K <= {R0_MAX_K}) and R of real weights, models >= {R_MIN_PARAMS_B:g}B"
        if dummy
        else f"models >= {R_MIN_PARAMS_B:g}B"
    )
    tail = []
    if context:
        tail.append("not deciding, random weights accepting nearly every draft (R_full): " + "; ".join(context))
    if small:
        tail.append(
            f"{small} R of models < {R_MIN_PARAMS_B:g}B not deciding (the article's R is for 70B)"
            + (", of which with the control: " + "; ".join(small_split) if small_split else "")
        )
    if not verdicts:
        why = f"no R of a model >= {R_MIN_PARAMS_B:g}B" + (" at zero acceptance" if context else "")
        return _claim("C6", NOT_COVERED, "; ".join([why, *tail]), [])
    if all(d == "inside" for d in verdicts):
        v = "confirmed"
    elif any(d == "outside" for d in verdicts):
        v, note = _c6_family(rs, verdicts, fam)
        if note:
            tail.insert(0, note)
    else:
        v = "undecided"
    if tech:  # passes on one engine: technical replicates decide nothing, whatever their intervals say
        if v in ("confirmed", "refuted"):
            tail.insert(0, f"the intervals alone would say {v}")
        v = TECHNICAL
    return _claim("C6", v, f"{rule_note}: " + "; ".join(ev) + "".join(f"; {t}" for t in tail), used)


def zero_acceptance(s: dict[str, Any], cell: dict[str, Any] | None) -> bool:
    """C6: a speculative row measured at (near) zero acceptance: no drafts made, none accepted, or K at most
    R0_MAX_K. Its R is that of drafting and verifying with nothing to show for it (R0), at most the article's R
    with accepted tokens, so it can refute the band from above but never confirm it."""
    if s.get("K") is not None and s["K"] <= R0_MAX_K:
        return True
    return cell is not None and (cell.get("drafts") == 0 or cell.get("accepted") == 0)


def _c6_family(rs: list[tuple[dict[str, Any], str, bool]], verdicts: list[str], fam: Family) -> tuple[str, str]:
    """C6's R intervals wholly outside the article's band (above it only, at zero acceptance), again at the
    family-wise level."""

    def checks(level: float) -> Iterator[tuple[bool, str]]:
        for (s, metric, zero), d in zip(rs, verdicts, strict=True):
            if d != "outside":
                continue
            lo, hi = fam.ratio(s, metric, level)
            if lo is None:
                yield False, f"{_name(s)} no engine starts to recompute"
                continue
            out = lo > R_BAND[1] or (hi < R_BAND[0] and not zero)
            yield out, f"{_name(s)} R [{lo:.2f}, {hi:.2f}] {'outside' if out else 'not outside'}"

    return Family.over(len(rs), checks)


def _cpu(study: Study, crow: list[dict[str, Any]], rows: list[dict[str, Any]]) -> dict[str, Any]:
    planned = sum(c.get("repeats") or study.repeats for c in crow)
    measured = sum(c["n"] for c in crow)
    short = [f"{_name(c)} ({c['n']}/{c['repeats']})" for c in crow if c["n"] < c["repeats"]]
    cvs = [(c["output_tok_s_cv"], _name(c)) for c in crow if c.get("output_tok_s_cv") is not None]
    ev = [f"{measured} of {planned} planned measurements ok" + (f"; short: {', '.join(short)}" if short else "")]
    # one value per engine start and cell (passes on one engine pooled first), every cell its own mean
    pooled, lo, hi, df = stats.spread_ci(list(stats.cell_series(rows, "output_tok_s").values()))
    if pooled is not None and lo is not None and hi is not None:
        ev.append(
            f"between-start CV of tok/s pooled over {len(cvs)} cells: {pooled:.1%} [{lo:.1%}, {hi:.1%}] "
            f"(df = {df}; per cell: median {sorted(v for v, _ in cvs)[len(cvs) // 2]:.1%}, largest "
            f"{max(cvs)[0]:.1%} ({max(cvs)[1]}))"
            if cvs
            else f"between-start CV of tok/s pooled over the cells: {pooled:.1%} [{lo:.1%}, {hi:.1%}] (df = {df})"
        )
    tech = study.technical_replicates
    if tech:
        ev.append(stats.REPEATS_ARE[study.replication])
    if short or (lo is not None and lo > CPU_CV_MAX):
        v = "refuted"
    elif hi is not None and hi <= CPU_CV_MAX and not tech:
        v = "confirmed"
    else:
        v = "undecided"
    return _claim("CPU", v, "; ".join(ev), [_name(c) for c in crow])


def markdown(study: Study, decided: list[dict[str, Any]]) -> str:
    lines = [
        f"# The article's claims, decided by run `{study.run}`",
        "",
        f"Generated from the run's tables ({study.repeats} repeat(s) per cell planned, "
        f"{stats.REPEATS_ARE[study.replication]}; "
        "medians, 95 % intervals over engine starts, K's over prompts); not edited by hand. See "
        "`workflow/specsweep/claims.py` for each rule.",
        "",
        f"Verdict rule of the tables: {VERDICT_RULE}",
        "",
        "| claim | verdict | rule | evidence |",
        "|---|---|---|---|",
    ]
    for c in decided:
        cells = (f"{c['id']} {c['claim']}", f"**{c['verdict']}**", c["rule"], c["evidence"])
        lines.append("| " + " | ".join(md_cell(x) for x in cells) + " |")
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
    what = "step times and R, not acceptance or a usable speedup"
    weights = (
        f" (random weights, `weights: dummy`: {what})"
        if dummy and len(dummy) == len(study.models)
        else f" (random weights, `weights: dummy`, for {', '.join(sorted(dummy))}: {what})"
        if dummy
        else ""
    )
    ns = sorted({c["n_starts"] or c["n"] for c in crow if c["n"]})
    used = f"n = {ns[0]}" if len(ns) == 1 else (f"n = {ns[0]}–{ns[-1]}" if ns else "n = 0")
    repeats = f"{study.repeats} repeats per cell planned, {used} measured, {stats.REPEATS_ARE[study.replication]}"
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
    if note.startswith("crosses"):  # once, measurably paying below the interval and costing above it: b* given
        return "confirmed" if x["b_star"] is not None else "undecided"
    if note.startswith("rises through 1"):  # costs at low b, pays at high b
        return "refuted"
    if note.startswith("costs at every measured b") and x["b_star_hi"] == 1.0:  # costs even one request at a time
        return "refuted"
    return "undecided"  # pays everywhere measured (b* above), costs from some b > 1 on, or intervals too wide


def decide_c9(
    study: Study,
    xrows: list[dict[str, Any]],
    sp: list[dict[str, Any]] | None = None,
    rows: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """C9 from crossover.parquet's rows: confirmed when every real-weight curve falls through 1 once with both
    ends of b*'s interval inside the measured b (it measurably pays below, costs above); refuted when one costs
    at b = 1 or rises through 1 instead, still so with its intervals at the family-wise level (1 - 0.05 / m over
    the m curves, recomputed from the engine starts `rows` of the speedup rows `sp` at each b); else undecided.
    Cells of `weights: dummy` models are left out, as in C1 and C8 (their acceptance is not a real model's);
    their crossovers are in the table."""
    dummy = {m for m, spec in study.models.items() if spec.weights == "dummy"}
    xs = [x for x in xrows if x["model"] not in dummy]
    verdicts = [_c9_curve(x) for x in xs]
    ev = "; ".join(
        f"{x['model']}/{x['workload']}/{x['step']}: "
        + (crossover.describe(x) if x["b_star"] is not None else x["note"])
        for x in xs
    )
    if not xs:
        ev = "only random-weight (weights: dummy) models measured at a concurrency" if xrows else "no concurrency axis"
    verdict = _combine(verdicts)
    if verdict == "refuted":
        verdict, note = _c9_family(xs, verdicts, sp or [], Family(rows or []))
        ev = f"{ev}; {note}" if note else ev
    c9 = {
        "id": "C9",
        "claim": C9_LABEL,
        "verdict": verdict,
        "rule": "per real-weight (model, workload, drafter) measured at several b: confirmed when every curve's "
        "speedup falls through 1 once with both ends of b*'s interval inside the measured b; refuted when one costs "
        "already at b = 1 or rises through 1, at the family-wise level (1 - 0.05 / m over the m curves); else "
        "undecided (crossover.py)",
        "evidence": ev,
        "cells": sorted(f"{x['model']}/{x['workload']}/{x['step']}" for x in xs),
    }
    # a CPU run decides no claim of the article's, C9 included (its crossovers stay in the table)
    return _not_on_cpu(c9) if study.device == "cpu" else c9


def _c9_family(xs: list[dict[str, Any]], verdicts: list[str], sp: list[dict[str, Any]], fam: Family) -> tuple[str, str]:
    """C9's refuting curves again at the family-wise level: a curve that costs at b = 1 still refutes where its
    speedup at b = 1 is `slower` there; one that rises through 1, where a `slower` b lies below a `faster` one."""

    def points(x: dict[str, Any]) -> list[dict[str, Any]]:
        key = (x["model"], x["workload"], x["step"])
        pts = [
            s
            for s in sp
            if s.get("concurrency") is not None
            and (s["model"], crossover.base_workload(s["workload"]), s["config"]) == key
            and s.get("speedup") is not None
        ]
        return sorted(pts, key=lambda s: int(s["concurrency"]))

    def checks(level: float) -> Iterator[tuple[bool, str]]:
        for x, d in zip(xs, verdicts, strict=True):
            if d != "refuted":
                continue
            name = f"{x['model']}/{x['workload']}/{x['step']}"
            got = [(s, *fam.verdict(s, level)) for s in points(x)]
            if not got or any(v is None for *_, v in got):
                yield False, f"{name} no engine starts to recompute"
                continue
            if x["note"].startswith("costs"):
                s, lo, hi, v = got[0]
                line = f"{name} at b = {s['concurrency']} [{lo:.3f}, {hi:.3f}] {v}"
                yield int(s["concurrency"]) == 1 and str(v).startswith("slower"), line
                continue
            vs = [str(v) for *_, v in got]
            rises = any(
                a.startswith("slower") and b.startswith("faster") for i, a in enumerate(vs) for b in vs[i + 1 :]
            )
            line = f"{name} " + ", ".join(f"b = {s['concurrency']} [{lo:.3f}, {hi:.3f}] {v}" for s, lo, hi, v in got)
            yield rises, line

    return Family.over(len(xs), checks)
