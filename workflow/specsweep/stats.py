"""Statistics over engine starts: medians, 95 % intervals whose coverage holds at the n a run has, the interval
of a ratio, K's interval over prompts, and the verdict they give. Deterministic: the same values give the same
numbers.

The unit of replication is the engine start. Throughput, step time and the like vary between engine starts
(allocation, compilation, clocks) more than between passes on one engine, so passes on one engine are
technical replicates: averaged into their start's value, never counted as n.

Intervals of a cell's value (:func:`cell_ci`) and of a ratio of two cells (:func:`ratio_ci`) are t-intervals on
the log scale. Log throughput over engine starts is close to normal and its spread is multiplicative, so the
mean of the logs with a Student t quantile gives an interval for the cell's typical (geometric-mean) value whose
95 % coverage holds at n = 2, 3, 5 (tests/test_stats.py simulates it). The ratio's interval is Welch's on the
difference of the two sides' mean logs (the sides ran on different engines: unpaired, variances not assumed
equal). Why not the percentile bootstrap of the median it replaces: at n = 3 a resampled median can only be one
of the three values, so that interval is [min, max], which covers the true median about 75 % of the time. With
fewer than 2 engine starts there is no honest interval: None, and nothing is decided.

K and alpha are different: with the engine's own randomness fixed (greedy) every start gives the same K, yet K
depends on which prompts were drawn. Their interval (:func:`prompt_bootstrap`) resamples prompts (a cluster
bootstrap: a prompt with all its repeats is one draw) from the cells' per-request output tokens and generation
steps.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

import numpy as np

from .errors import SpecsweepError

N_BOOT = 4000
SEED = 20261130
LEVEL = 0.95
#: The equivalence band (a fraction), fixed before the data: a speedup within 1 -/+ BAND of 1 is of no practical
#: consequence. The verdict rule (VERDICT_RULE) takes it as it is; the measured spread goes into the interval.
BAND = 0.03
#: fidelity (harness.run_fidelity): specsweep's engine and vLLM's run_vllm agree when their ratio lies in 1 ± this
FIDELITY_BAND = 0.03
#: The fewest prompts with per-request data for which the prompt bootstrap gives an interval.
MIN_PROMPTS = 10

#: The tables' `replication` of a cell whose repeats ran on one engine (`engine_per_repeat: false`): technical
#: replicates, no interval; and of one whose repeats each had an engine start of their own. A run's replication
#: is config.Study.replication (of its tables: view.Tables.replication).
ONE_ENGINE = "passes on one engine"
ENGINE_STARTS = "engine starts"
#: A run's repeats in one phrase, by its replication: the summary, the claims, the README sentence, the figures
#: and the captions say it so.
REPEATS_ARE = {
    ENGINE_STARTS: "each repeat on its own engine start",
    ONE_ENGINE: f"the repeats are {ONE_ENGINE}, caches reset between them: technical replicates, not counted as n",
}

#: What VERDICT_RULE's interval takes its between-start spread from: each cell's own (docs/design.md, "Which
#: verdict rule"; verdictsim.arm_coverage). Pooling over a model's cells, its arms or its steps gave the
#: noisiest drafter comparisons of the committed runs 56-84 % coverage where each cell's own spread gives 93 %.
SPREAD_OF = "each cell's own"

VERDICT_RULE = (
    "A speedup is `faster` (`slower`) only when its whole 95 % interval lies above 1 + b (below 1 - b), "
    f"`equivalent` when it lies inside [1 - b, 1 + b], else `undecided`, with the band b fixed at {100 * BAND:.0f} %; "
    "the interval is Welch's t on the difference of the two cells' mean log throughput over engine starts, "
    "each side's standard error from that cell's own between-start spread (no spread pooled across cells: a "
    "drafter's starts spread several times as much as the baseline's, and pooled spreads undercover the noisiest "
    "cells); a cell with fewer than 2 engine starts (`undecided (n<2)`) or whose repeats are "
    f"{ONE_ENGINE} (`undecided (technical replicates)`) decides nothing. The rule was chosen over spreads pooled "
    "over the model, its arms and its ladder steps by its coverage at the committed runs' per-cell spreads "
    "(at least 93 % for the noisiest comparison), and over a band of the measured spread and pairing by round by "
    "its error and power in simulation (docs/design.md)."
)


def _clean(values: Sequence[float | None]) -> np.ndarray:
    arr = np.array([float(v) for v in values if v is not None], dtype=float)
    return arr[np.isfinite(arr)]


def median(values: Sequence[float | None]) -> float | None:
    arr = _clean(values)
    return float(np.median(arr)) if arr.size else None


def cv(values: Sequence[float | None]) -> float | None:
    """Sample standard deviation over mean (n >= 2), as a fraction."""
    arr = _clean(values)
    if arr.size < 2 or arr.mean() == 0:
        return None
    return float(arr.std(ddof=1) / abs(arr.mean()))


# ------------------------------------------------------------------------------------------ Student t


def _betacf(a: float, b: float, x: float) -> float:
    """The continued fraction of the regularized incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    lbeta = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(lbeta) * _betacf(a, b, x) / a
    return 1.0 - math.exp(lbeta) * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with df (real, > 0) degrees of freedom."""
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t > 0 else tail


@lru_cache(maxsize=4096)
def t_quantile(p: float, df: float) -> float:
    """The p quantile (0.5 < p < 1) of Student's t with df degrees of freedom (real df, as Welch's gives):
    Newton's method on t_cdf, bisection-guarded."""
    if not 0.5 < p < 1.0 or not df > 0:
        raise ValueError(f"t_quantile needs 0.5 < p < 1 and df > 0, got p={p}, df={df}")
    z = math.sqrt(2.0) * _erfinv(2.0 * p - 1.0)
    # Cornish-Fisher start: within a few per cent of the quantile from df = 2 on, so Newton takes few steps
    x = z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)
    c = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi)
    lo, hi = 0.0, math.inf
    for _ in range(200):
        f = t_cdf(x, df) - p
        if f > 0:
            hi = x
        else:
            lo = x
        step = f / (c * (1.0 + x * x / df) ** (-(df + 1) / 2))
        if abs(step) < 1e-12 * max(1.0, abs(x)):
            return x - step
        x = x - step if lo < x - step < hi else (0.5 * (lo + hi) if hi < math.inf else 2.0 * x)
    return x


# ------------------------------------------------------------------------------------------ chi-square


def _gammainc(a: float, x: float) -> float:
    """Regularized lower incomplete gamma P(a, x): its series below x = a + 1, else one minus the continued
    fraction of the upper (modified Lentz)."""
    if x <= 0.0:
        return 0.0
    log_front = -x + a * math.log(x) - math.lgamma(a)
    if x < a + 1.0:
        term = total = 1.0 / a
        ap = a
        for _ in range(1000):
            ap += 1.0
            term *= x / ap
            total += term
            if abs(term) < abs(total) * 1e-16:
                break
        return min(1.0, total * math.exp(log_front))
    tiny = 1e-300
    b = x + 1.0 - a
    c, d = 1.0 / tiny, 1.0 / b
    h = d
    for i in range(1, 1000):
        an = -i * (i - a)
        b += 2.0
        d = an * d + b
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = b + an / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-16:
            break
    return max(0.0, 1.0 - math.exp(log_front) * h)


def chi2_cdf(x: float, df: float) -> float:
    """P(X <= x) for chi-square with df (> 0) degrees of freedom."""
    return _gammainc(df / 2.0, x / 2.0)


@lru_cache(maxsize=1024)
def chi2_quantile(p: float, df: float) -> float:
    """The p quantile (0 < p < 1) of chi-square with df degrees of freedom (bisection on chi2_cdf)."""
    if not 0.0 < p < 1.0 or not df > 0:
        raise ValueError(f"chi2_quantile needs 0 < p < 1 and df > 0, got p={p}, df={df}")
    lo, hi = 0.0, max(1.0, df)
    while chi2_cdf(hi, df) < p:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if chi2_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12 * max(1.0, hi):
            break
    return 0.5 * (lo + hi)


def _erfinv(y: float) -> float:
    """Inverse error function (a start for t_quantile; refined by Newton on erf)."""
    a = 0.147
    ln = math.log(1.0 - y * y)
    s = 2.0 / (math.pi * a) + ln / 2.0
    x = math.copysign(math.sqrt(math.sqrt(s * s - ln / a) - s), y)
    for _ in range(3):
        x -= (math.erf(x) - y) / (2.0 / math.sqrt(math.pi) * math.exp(-x * x))
    return x


# ------------------------------------------------------------------------------------------ intervals


def _log_scale(arr: np.ndarray) -> bool:
    return bool(arr.size) and bool((arr > 0).all())


def start_value(values: Sequence[float | None]) -> float | None:
    """One engine start's value from its passes: their geometric mean (arithmetic where a value is <= 0)."""
    arr = _clean(values)
    if not arr.size:
        return None
    return float(math.exp(np.log(arr).mean())) if _log_scale(arr) else float(arr.mean())


def per_start(values: Sequence[float | None], starts: Sequence[object]) -> list[float]:
    """The values of passes grouped by their engine start (`starts`, one id per value), one value per start
    (:func:`start_value`), in order of first appearance."""
    if len(values) != len(starts):
        raise ValueError("per_start: one engine start id per value")
    groups: dict[object, list[float | None]] = {}
    for v, s in zip(values, starts, strict=True):
        groups.setdefault(s, []).append(v)
    out = [start_value(g) for g in groups.values()]
    return [v for v in out if v is not None]


def cell_series(rows: Sequence[Mapping[str, Any]], metric: str) -> dict[tuple[Any, ...], list[float]]:
    """Each cell's values of `metric` over the measurements (`rows`, the tables' per-measurement rows), one per
    engine start (:func:`per_start`), keyed (model, workload, config, concurrency); failed ones left out."""
    cells: dict[tuple[Any, ...], list[Mapping[str, Any]]] = {}
    for r in rows:
        if r["status"] == "ok":
            cells.setdefault((r["model"], r["workload"], r["config"], r.get("concurrency")), []).append(r)
    return {k: per_start([r[metric] for r in g], [r["_start"] for r in g]) for k, g in cells.items()}


def cell_ci(values: Sequence[float | None], level: float = LEVEL) -> tuple[float | None, float | None]:
    """t-interval (95 %, or `level`) of a cell's typical value over its engine starts (one value per start): on
    the log scale (the geometric mean's interval) when every value is > 0, on the raw scale otherwise; (None,
    None) for n < 2."""
    arr = _clean(values)
    n = arr.size
    if n < 2:
        return None, None
    log = _log_scale(arr)
    x = np.log(arr) if log else arr
    half = t_quantile(1 - (1 - level) / 2, n - 1) * float(x.std(ddof=1)) / math.sqrt(n)
    lo, hi = float(x.mean()) - half, float(x.mean()) + half
    return (math.exp(lo), math.exp(hi)) if log else (lo, hi)


#: The name this interval had while it was a bootstrap; callers may use either.
bootstrap_ci = cell_ci


def welch_log_contrast(
    plus: Sequence[Sequence[float | None]], minus: Sequence[Sequence[float | None]], level: float = LEVEL
) -> tuple[float | None, float | None, float | None]:
    """The product of the geometric means of `plus` over that of `minus` (each group one value per engine start,
    all > 0; e.g. one speedup over another: (a_spec, b_base) over (a_base, b_spec)) with its `level` Welch
    interval: the sum of the groups' mean logs (signed), its variance the sum of theirs over n, its degrees of
    freedom Welch-Satterthwaite's. (None, None, None) when a group has fewer than 2 starts or a value <= 0;
    the interval None when every group's starts agree exactly."""
    groups = [(1.0, _clean(g)) for g in plus] + [(-1.0, _clean(g)) for g in minus]
    if not groups or any(a.size < 2 or not _log_scale(a) for _, a in groups):
        return None, None, None
    est = sum(sign * float(np.log(a).mean()) for sign, a in groups)
    parts = [(float(np.log(a).var(ddof=1)) / a.size, a.size - 1) for _, a in groups]
    se2 = sum(v for v, _ in parts)
    if se2 == 0.0:
        return math.exp(est), None, None
    df = se2**2 / sum(v**2 / d for v, d in parts)
    half = t_quantile(1 - (1 - level) / 2, round(df, 9)) * math.sqrt(se2)
    return math.exp(est), math.exp(est - half), math.exp(est + half)


def welch_log_ci(
    num: Sequence[float | None], den: Sequence[float | None], level: float = LEVEL
) -> tuple[float | None, float | None]:
    """Welch interval (95 %, or `level`) of the ratio of geometric means num / den (one value per engine start on
    each side, all > 0): :func:`welch_log_contrast` of one group over the other; (None, None) when either side
    has n < 2 or a value <= 0, the ratio itself at both ends when every start of both sides agrees exactly."""
    point, lo, hi = welch_log_contrast([num], [den], level)
    if point is None:
        return None, None
    return (point, point) if lo is None else (lo, hi)


def ratio_ci(
    num: Sequence[float | None], den: Sequence[float | None], seed: int = SEED
) -> tuple[float | None, float | None, float | None]:
    """Ratio of geometric means (num / den) and the 95 % Welch interval of the ratio from the log-scale
    difference (:func:`welch_log_ci`); num and den hold one value per engine start. The point is the centre of
    that interval on the log scale, so it always lies inside it (a ratio of medians need not). Interval None
    when either n < 2. `seed` is unused (the interval is exact, not resampled) and kept for callers."""
    del seed
    a, b = _clean(num), _clean(den)
    if not a.size or not b.size or np.median(b) == 0:
        return None, None, None
    if _log_scale(a) and _log_scale(b):
        point = float(math.exp(np.log(a).mean() - np.log(b).mean()))
    else:
        point = float(np.median(a) / np.median(b))
    lo, hi = welch_log_ci(a.tolist(), b.tolist())
    return point, lo, hi


def _pooled(groups: Sequence[Sequence[float | None]]) -> tuple[float, int]:
    """The sum of squared deviations of log values from their group's mean, and its degrees of freedom."""
    ss, df = 0.0, 0
    for g in groups:
        arr = _clean(g)
        if arr.size < 2 or not _log_scale(arr):
            continue
        x = np.log(arr)
        ss += float(((x - x.mean()) ** 2).sum())
        df += arr.size - 1
    return ss, df


def spread(groups: Sequence[Sequence[float | None]]) -> float | None:
    """The between-engine spread: the pooled standard deviation of log values over engine starts, pooled over
    groups (cells, one value per start); None when no group has 2 starts."""
    ss, df = _pooled(groups)
    return math.sqrt(ss / df) if df else None


def spread_ci(
    groups: Sequence[Sequence[float | None]], level: float = LEVEL
) -> tuple[float | None, float | None, float | None, int]:
    """The between-engine spread (`spread`) with its `level` interval, and its degrees of freedom: the
    chi-square interval of a pooled variance, sqrt(SS / chi2_hi) .. sqrt(SS / chi2_lo) (the groups' log values
    normal with one standard deviation, each group its own mean). None when no group has 2 starts."""
    ss, df = _pooled(groups)
    if not df:
        return None, None, None, 0
    a = (1.0 - level) / 2.0
    return (
        math.sqrt(ss / df),
        math.sqrt(ss / chi2_quantile(1.0 - a, df)),
        math.sqrt(ss / chi2_quantile(a, df)),
        df,
    )


def pooled_spread(groups: Sequence[Sequence[float | None]]) -> tuple[float, int] | None:
    """A model's between-start spread (specsweep plan's and verdictsim's noise; VERDICT_RULE's interval takes
    each cell's own): the pooled standard deviation of log values over groups (cells, one value per engine
    start, each about its own mean) and its degrees of freedom; None when no group has 2 starts (or every
    group's starts are identical)."""
    ss, df = _pooled(groups)
    return (math.sqrt(ss / df), df) if df and ss > 0 else None


def model_spreads(series: Mapping[tuple[Any, ...], Sequence[float]]) -> dict[Any, tuple[float, int] | None]:
    """pooled_spread per model over every cell of it (`series`: :func:`cell_series`'s tok/s, keyed (model,
    workload, config, concurrency))."""
    by_model: dict[Any, list[Sequence[float]]] = {}
    for key, values in series.items():
        by_model.setdefault(key[0], []).append(values)
    return {m: pooled_spread(g) for m, g in by_model.items()}


def speedup_ci(
    num: Sequence[float | None], den: Sequence[float | None], level: float = LEVEL
) -> tuple[float | None, float | None, float | None]:
    """The speedup of VERDICT_RULE: the ratio of geometric means num / den (one value per engine start on each
    side) and its `level` interval, Welch's t on the difference of mean logs, each side's standard error from
    its own between-start spread (:func:`welch_log_ci`). Interval None when either side has fewer than 2
    starts or a value <= 0, or when every start of both sides gave the same value (an exact ratio, never a
    zero-width interval)."""
    a, b = _clean(num), _clean(den)
    if not a.size or not b.size:
        return None, None, None
    if not _log_scale(a) or not _log_scale(b):
        return (float(np.median(a) / np.median(b)) if np.median(b) else None), None, None
    diff = float(np.log(a).mean() - np.log(b).mean())
    lo, hi = welch_log_ci(a.tolist(), b.tolist(), level)
    if lo is None or hi is None or lo == hi:
        return math.exp(diff), None, None
    return math.exp(diff), lo, hi


def same_on_every_start(num: Sequence[float | None], den: Sequence[float | None] = ()) -> int | None:
    """How many engine starts gave one and the same value (on each side of a ratio: the fewer side's), where
    that is 2 or more: an exact estimate, shown as `x (same in n starts)`, not as a zero-width interval; None
    otherwise."""
    sides = [_clean(v) for v in (num, den) if len(v)]
    if not sides or any(s.size < 2 or bool((s != s[0]).any()) for s in sides):
        return None
    return min(s.size for s in sides)


def verdict(
    point: float | None, lo: float | None, hi: float | None, band: float = BAND, technical: bool = False
) -> str:
    """The verdict of a speedup interval under VERDICT_RULE: starts with faster, slower, equivalent, undecided
    or missing. `technical`: the repeats of one side are passes on one engine."""
    if point is None:
        return "missing"
    if technical:
        return "undecided (technical replicates)"
    if lo is None or hi is None:
        return "undecided (n<2)"
    if lo > 1.0 + band:
        return "faster"
    if hi < 1.0 - band:
        return "slower"
    if lo >= 1.0 - band and hi <= 1.0 + band:
        return "equivalent"
    return "undecided"


# ------------------------------------------------------------------------------------------ over prompts


def prompt_bootstrap(
    output_tokens: Sequence[Sequence[int]],
    gen_steps: Sequence[Sequence[int | None]],
    seed: int = SEED,
    boots: int = N_BOOT,
    pool: int | None = None,
) -> tuple[float, float, float, int] | None:
    """Tokens per decode step over a cell's requests, sum(output_tokens - 1) / sum(gen_steps - 1) (the first
    token's step is the prefill's; each later step gives 1 + the accepted draft tokens), and its 95 % percentile
    interval from a cluster bootstrap over prompts: each draw resamples prompts with replacement, a prompt
    bringing all its repeats. One list per repeat, in prompt order (the cell JSON's `requests`); a request with
    gen_steps null or < 1 is left out. `pool`: for a pass at b, the prompts of its pool, request j being prompt
    j % pool (engine.pool_record): each repeat lists whole cycles of it, and repeats may have run different
    numbers of cycles (a pass runs cycles until its minimum seconds are met); a prompt brings every request of
    it from every repeat. Returns (point, lo, hi, prompts), None with fewer than MIN_PROMPTS prompts or no
    decode step. `boots`: bootstrap draws."""
    if len(output_tokens) != len(gen_steps) or not output_tokens:
        raise SpecsweepError("requests: one output_tokens and one gen_steps list per repeat")
    if pool is not None and pool < 1:
        raise SpecsweepError(f"requests: a pool of {pool} prompts")
    n = pool if pool is not None else len(output_tokens[0])
    lengths = [(len(o), len(s)) for o, s in zip(output_tokens, gen_steps, strict=True)]

    def listed(m: int) -> bool:  # whole cycles of the pool, else the same prompts as the first repeat
        return m % n == 0 if pool is not None else m == n

    if any(lo != ls or not listed(lo) for lo, ls in lengths):
        cycles = f"whole cycles of its pool of {pool} prompts" if pool is not None else "the same prompts"
        raise SpecsweepError(
            f"requests: every repeat must list {cycles} (lengths {[lo for lo, _ in lengths]} output_tokens, "
            f"{[ls for _, ls in lengths]} gen_steps)"
        )
    tok, steps, seen = np.zeros(n), np.zeros(n), np.zeros(n, dtype=bool)
    for outs, gens in zip(output_tokens, gen_steps, strict=True):
        for j, (o, g) in enumerate(zip(outs, gens, strict=True)):
            if g is None or g < 1 or o is None or o < 1:
                continue
            i = j % n
            tok[i] += o - 1
            steps[i] += g - 1
            seen[i] = True
    tok, steps = tok[seen], steps[seen]
    k = int(seen.sum())
    if k < MIN_PROMPTS or steps.sum() <= 0:
        return None
    point = float(tok.sum() / steps.sum())
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, k, size=(boots, k))
    den = steps[idx].sum(axis=1)
    boot = tok[idx].sum(axis=1)[den > 0] / den[den > 0]
    lo, hi = np.quantile(boot, [(1 - LEVEL) / 2, 1 - (1 - LEVEL) / 2], method="linear")
    return point, float(lo), float(hi), k


def geomean(values: Sequence[float | None]) -> float | None:
    arr = _clean(values)
    arr = arr[arr > 0]
    return float(math.exp(np.log(arr).mean())) if arr.size else None


def continuation(drafts: float, accepted_per_pos: Sequence[float]) -> list[tuple[int, float, float]]:
    """The conditional acceptance per draft position from vLLM's counters: (i, accepted at i, accepted at
    i - 1), position 1's denominator the drafts, so accepted at i / accepted at i - 1 is the chance that an
    accepted run goes on to position i. A draft shorter than i counts as not accepted at i (the counters hold no
    drafts per position), so this is the continuation K is built from, not the verifier's acceptance of drafted
    tokens. It ends at the last position where any token was accepted: past it, "no draft was that long" and
    "every draft that long was rejected there" cannot be told apart (vLLM's suffix drafter never drafts more
    than max_spec_factor x the prefix match, and the two together are at most its tree depth: 12 tokens at the
    defaults, whatever num_speculative_tokens says)."""
    counts = [float(drafts), *map(float, accepted_per_pos)]
    last = max((i for i in range(1, len(counts)) if counts[i] > 0), default=0)
    return [(i, counts[i], counts[i - 1]) for i in range(1, last + 1) if counts[i - 1] > 0]


def wilson(k: float, n: float, z: float = 1.96) -> tuple[float, float]:
    """Wilson score 95 % interval of a proportion k / n."""
    p = k / n
    den = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return max(0.0, centre - half), min(1.0, centre + half)


def interval_text(lo: float, hi: float, spec: str = ".2f", n: int | None = None, over: str = "starts") -> str:
    """' [lo, hi]' formatted with `spec`; where lo == hi (every value equal: a zero-width interval, which says
    nothing about spread), ' (same in n starts)' instead (`n`: how many, the fewer side of a ratio, 'every'
    when not known; `over`: what the estimate is over, engine starts or, for K, prompts)."""
    if lo == hi:
        return f" (same in {n} {over})" if n else f" (same in every {over.rstrip('s')})"
    return f" [{format(lo, spec)}, {format(hi, spec)}]"
