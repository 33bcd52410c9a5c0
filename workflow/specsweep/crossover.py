"""The concurrency b* at which a drafter stops paying: where its speedup over the baseline, measured at several
concurrencies b (each against the baseline at the same b), crosses 1.

Method. Each measured b gives a speedup with its 95 % interval (``stats.ratio_ci``) and verdict
(``stats.verdict``). The curves speedup(b), lo(b) and hi(b) are joined linearly in log b between the
measured concurrencies, and:

- ``b_star``: where speedup(b) falls through 1, between the last b whose speedup is > 1 and the next
  b whose speedup is < 1 (log-linear interpolation between the two), given only where the speedup crosses 1
  once and both ends of its interval are closed: a measured b below where the drafter measurably pays and one
  above where it measurably costs. A curve that crosses 1 more than once, or once with an open end, has no
  b*: its note lists each crossing as the two measured b it lies between;
- ``b_star_lo``: where the lower bound lo(b) first falls through 1: below it the drafter measurably pays;
  ``b_star_hi``: where the upper bound hi(b) falls through 1 for the last time: above it the drafter
  measurably costs. Since lo <= speedup <= hi at every b, b_star_lo <= b_star <= b_star_hi.

Limits. The interval is built from pointwise 95 % intervals, not a simultaneous band over b, so its
coverage is approximate; interpolation assumes the speedup is linear in log b between measured points, so
b* is only as fine as the b grid; an end outside the measured range is left open (None): the lower end
when lo(b) <= 1 already at the smallest b, the upper end when hi(b) >= 1 still at the largest b. The table
stores four significant figures; every text shows b* and its interval with the figures the interval
supports (:func:`shown`).

Notes say which case a curve is: ``pays at every measured b`` (every verdict faster: b* above the largest
b, b_star_lo = that b), ``costs at every measured b`` (every verdict slower: b* below the smallest b, if
anywhere, b_star_hi = that b; at b = 1 already: no b*), ``crosses 1 between ...`` (b* found), ``crosses 1
once, ... with no b*`` (an end of its interval open), ``crosses 1 N times, ...`` (no single b*), ``rises
through 1 ...`` (the other way: costs at low b, pays at high b) or ``undecided (...)``.

Why the speedup changes with b. At every b the speedup is T / R (T: tokens per step over the baseline's, R: step
time over the baseline's; ratios of geometric means over engine starts, so the identity holds exactly), hence
from the smallest measured b to the largest the change of log speedup is the change of log T less the change
of log R (:class:`Split`): ``dlog_T`` is the part of the drafts (how many tokens a step yields, K's effect
through the batch), ``-dlog_R`` the part of the step's cost.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: crossover.parquet's columns (names and arrow type names), in order.
CROSSOVER_COLUMNS: tuple[tuple[str, str], ...] = (
    ("model", "string"),
    ("workload", "string"),
    ("step", "string"),
    ("b_star", "float64"),
    ("b_star_lo", "float64"),
    ("b_star_hi", "float64"),
    ("n", "int64"),
    ("note", "string"),
    ("b_first", "int64"),
    ("b_last", "int64"),
    ("dlog_speedup", "float64"),
    ("dlog_T", "float64"),
    ("dlog_R", "float64"),
)
#: The identity speedup = T / R at one b, within this in log (the tables' ratios agree to rounding).
IDENTITY_TOL = 1e-9


@dataclass(frozen=True)
class Point:
    """A drafter's speedup at one concurrency b over the baseline at the same b; n: the fewer engine starts
    of the two sides."""

    b: int
    speedup: float
    lo: float | None
    hi: float | None
    verdict: str
    n: int
    T: float | None = None  # tokens per step over the baseline's at b
    R: float | None = None  # step time over the baseline's at b


@dataclass(frozen=True)
class Split:
    """How a drafter's speedup changed from its smallest measured b (`b_first`) to its largest (`b_last`), split
    exactly: dlog_speedup = dlog_T - dlog_R, each the change of the log of that ratio (speedup = T / R at every
    b). dlog_T is the tokens-per-step part, -dlog_R the step-time part."""

    b_first: int
    b_last: int
    dlog_speedup: float
    dlog_T: float
    dlog_R: float

    def text(self) -> str:
        """`b = 1 → 256: ×0.31 = T ×0.36 / R ×1.15 (T 88 %, R 12 % of the change in log)`: the shares where T and
        R moved the speedup the same way and it changed by 1 % or more (below that they divide by almost
        nothing); where they pulled opposite ways, each by 1 % or more, `(T and R pull opposite ways)`."""

        def f(d: float) -> str:
            return f"×{math.exp(d):.3g}"

        out = f"b = {self.b_first} → {self.b_last}: {f(self.dlog_speedup)} = T {f(self.dlog_T)} / R {f(self.dlog_R)}"
        t_part, r_part = self.dlog_T, -self.dlog_R  # each one's part of dlog_speedup
        if t_part * r_part < 0 and min(abs(t_part), abs(r_part)) >= math.log(1.01):
            out += " (T and R pull opposite ways)"
        elif abs(self.dlog_speedup) >= math.log(1.01):
            t_share = t_part / self.dlog_speedup
            out += f" (T {100 * t_share:.0f} %, R {100 * (1 - t_share):.0f} % of the change in log)"
        return out


def split(points: Iterable[Point]) -> Split | None:
    """The Split of a curve between its smallest and largest b with a speedup, T and R; None with fewer than
    two such b, or where T / R is not the speedup at either end (within IDENTITY_TOL in log)."""
    pts = sorted((p.b, p.speedup, p.T, p.R) for p in points if p.T and p.R and p.speedup > 0)
    if len(pts) < 2:
        return None
    logs = [(b, math.log(sp), math.log(t), math.log(r)) for b, sp, t, r in (pts[0], pts[-1])]
    if any(abs(sp - (t - r)) > IDENTITY_TOL for _, sp, t, r in logs):
        return None
    (b0, s0, t0, r0), (b1, s1, t1, r1) = logs
    return Split(b0, b1, s1 - s0, t1 - t0, r1 - r0)


@dataclass(frozen=True)
class Crossover:
    b_star: float | None
    b_star_lo: float | None
    b_star_hi: float | None
    n: int
    note: str


def _falls(xs: Sequence[float], ys: Sequence[float], last: bool = False) -> float | None:
    """x where the piecewise-linear curve (xs, ys) first (or last) falls from above 1 to 1 or below."""
    hits = []
    for (x0, y0), (x1, y1) in zip(zip(xs, ys, strict=True), zip(xs[1:], ys[1:], strict=True), strict=False):
        if y0 > 1.0 >= y1:
            hits.append(x0 + (y0 - 1.0) / (y0 - y1) * (x1 - x0))
    if not hits:
        return None
    return hits[-1] if last else hits[0]


def _rises(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """x where the piecewise-linear curve first rises from below 1 to 1 or above."""
    for (x0, y0), (x1, y1) in zip(zip(xs, ys, strict=True), zip(xs[1:], ys[1:], strict=True), strict=False):
        if y0 < 1.0 <= y1:
            return x0 + (1.0 - y0) / (y1 - y0) * (x1 - x0)
    return None


def _b(x: float | None) -> float | None:
    """A log b back to b, rounded to 4 significant digits (finer than any b grid; stable bytes)."""
    return None if x is None else float(f"{math.exp(x):.4g}")


def _fmt(b: float | None) -> str:
    return "open" if b is None else f"{b:g}"


def sig_digits(lo: float | None, hi: float | None) -> int:
    """The significant figures b* and its interval [lo, hi] deserve: one where the interval spans a factor of
    ten or more, two where it spans about 1.1-10x, three where it is about 2 % wide (half the interval's width
    in log10 sets the last digit); four (the table's stored precision) where there is no interval to go by."""
    if lo is None or hi is None or lo <= 0 or hi <= lo:
        return 4
    half = math.log10(hi / lo) / 2
    return max(1, min(4, round(1 - math.log10(half))))


def _round(v: float, digits: int, how: Any = round) -> float:
    """v to `digits` significant figures, by `how` (round, math.floor or math.ceil)."""
    if v <= 0:
        return v
    step = 10.0 ** (math.floor(math.log10(v)) - digits + 1)
    return float(f"{how(v / step) * step:.{digits}g}") if how is round else how(v / step) * step


def _num(v: float, digits: int) -> str:
    """v to `digits` significant figures, without an exponent below a million."""
    text = f"{v:#.{digits}g}"  # '#': keep the trailing zeros that are significant (32.0 at three figures)
    if "e" in text and abs(v) < 1e6:
        text = f"{float(text):.0f}"
    return text.rstrip(".")


def shown(b_star: float | None, lo: float | None, hi: float | None) -> str:
    """`B [LO, HI]` with significant figures that match the interval (sig_digits): b* rounded, the interval's
    ends rounded outward (LO down, HI up) so the shown interval holds the computed one; `open` for an end
    past the measured b."""
    d = sig_digits(lo, hi)

    def end(v: float | None, how: Any) -> str:
        return "open" if v is None else _num(_round(v, d, how), d)

    star = "–" if b_star is None else _num(_round(b_star, d), d)
    return f"{star} [{end(lo, math.floor)}, {end(hi, math.ceil)}]"


def crossover(points: Iterable[Point]) -> Crossover:
    """b* of one (model, workload, drafter) from its speedup at each measured concurrency (see the module doc).
    Points without a speedup are ignored; b must be distinct positive integers. b* is given only where the
    speedup crosses 1 once, falling, with its interval closed inside the measured b (a measured b below where
    the drafter measurably pays and one above where it measurably costs); otherwise the note lists each
    crossing as the two measured b it lies between."""
    pts = sorted(points, key=lambda p: p.b)
    bs = [p.b for p in pts]
    if len(set(bs)) != len(bs) or any(b < 1 for b in bs):
        raise ValueError(f"crossover: concurrencies must be distinct and >= 1, got {bs}")
    if not pts:
        return Crossover(None, None, None, 0, "undecided (no concurrency measured)")
    n = min(p.n for p in pts)
    xs = [math.log(p.b) for p in pts]
    sp = [p.speedup for p in pts]
    verdicts = [p.verdict for p in pts]
    span = f"b = {bs[0]}, one concurrency" if len(bs) == 1 else f"b = {bs[0]}–{bs[-1]}, {len(bs)} concurrencies"
    if all(v.startswith("faster") for v in verdicts):
        return Crossover(None, float(bs[-1]), None, n, f"pays at every measured b ({span}): b* above {bs[-1]}")
    if all(v.startswith("slower") for v in verdicts):
        where = "even one request at a time: no b*" if bs[0] == 1 else f"b* below {bs[0]}, if any"
        note = f"costs at every measured b ({span}): {where}"
        return Crossover(None, None, float(bs[0]), n, note)
    crossings = [
        ("falls" if sp[k] > 1.0 else "rises", bs[k], bs[k + 1])
        for k in range(len(sp) - 1)
        if (sp[k] > 1.0) != (sp[k + 1] > 1.0)
    ]
    if not crossings:
        side = "above" if sp[0] > 1.0 else "at or below"
        return Crossover(
            None, None, None, n, f"undecided (speedup {side} 1 at every measured b, not every interval; {span})"
        )
    between = ", ".join(f"{d} between b = {a} and b = {b}" for d, a, b in crossings)
    if len(crossings) > 1:
        return Crossover(None, None, None, n, f"crosses 1 {len(crossings)} times, {between} ({span}): no single b*")
    if crossings[0][0] == "rises":
        _, a, b = crossings[0]
        return Crossover(
            None, None, None, n, f"rises through 1 between b = {a} and b = {b}: costs below, pays above ({span})"
        )
    star = _falls(xs, sp)
    with_iv = all(p.lo is not None and p.hi is not None for p in pts)
    lo_x = hi_x = None
    if with_iv:
        lo = [float(p.lo) for p in pts if p.lo is not None]
        hi = [float(p.hi) for p in pts if p.hi is not None]
        lo_x = xs[-1] if all(v > 1.0 for v in lo) else (_falls(xs, lo) if lo[0] > 1.0 else None)
        hi_x = xs[0] if all(v < 1.0 for v in hi) else _falls(xs, hi, last=True)
        if hi_x is not None and hi[-1] >= 1.0:  # hi falls through 1 but rises again: no b above which it costs
            hi_x = None
    b_lo, b_hi = _b(lo_x), _b(hi_x)
    _, a, b = crossings[0]
    if b_lo is None or b_hi is None:
        why = (
            "no interval (n < 2 at some b)"
            if not with_iv
            else f"its interval [{_fmt(b_lo)}, {_fmt(b_hi)}] is open: no measured b where it "
            + ("measurably pays below and none where it measurably costs above" if b_lo is None and b_hi is None
               else "measurably pays below" if b_lo is None else "measurably costs above")
        )  # fmt: skip
        return Crossover(
            None, b_lo, b_hi, n, f"crosses 1 once, between b = {a} and b = {b}, with no b*: {why} ({span})"
        )
    return Crossover(
        _b(star),
        b_lo,
        b_hi,
        n,
        f"crosses 1 between b = {a} and b = {b} ({span}); interval {shown(_b(star), b_lo, b_hi).split(' ', 1)[1]}",
    )


def base_workload(workload: str) -> str:
    """The config's workload of a cell's workload name: `code` for `code@b8` (`code` measured at b = 8)."""
    from .paths import split_workload

    return split_workload(workload)[0]


def crossover_rows(speedup_rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """crossover.parquet's rows from speedup.parquet's: one per (model, workload, drafter step) measured at a
    concurrency (rows whose ``concurrency`` is null, the all-at-once point, are not on the b axis): b* with its
    interval and note (:func:`crossover`), and the change from the smallest b to the largest split into T and R
    (:func:`split`; null where there is none)."""
    curves: dict[tuple[str, str, str], list[Point]] = {}
    for s in speedup_rows:
        if s.get("concurrency") is None:
            continue
        key = (s["model"], base_workload(s["workload"]), s["config"])
        pts = curves.setdefault(key, [])
        if s.get("speedup") is None or s.get("status") not in ("ok", "partial"):
            continue
        n = min(int(s.get("n") or 0), int(s.get("n_baseline") or 0))
        b, sp, lo, hi = int(s["concurrency"]), float(s["speedup"]), s.get("speedup_lo"), s.get("speedup_hi")
        pts.append(Point(b, sp, lo, hi, str(s["verdict"]), n, s.get("T"), s.get("R")))
    out = []
    for (model, workload, step), pts in sorted(curves.items()):
        c = crossover(pts)
        parts = split(pts)
        out.append(
            {
                "model": model,
                "workload": workload,
                "step": step,
                "b_star": c.b_star,
                "b_star_lo": c.b_star_lo,
                "b_star_hi": c.b_star_hi,
                "n": c.n,
                "note": c.note,
                "b_first": parts.b_first if parts else None,
                "b_last": parts.b_last if parts else None,
                "dlog_speedup": parts.dlog_speedup if parts else None,
                "dlog_T": parts.dlog_T if parts else None,
                "dlog_R": parts.dlog_R if parts else None,
            }
        )
    return out


def split_of(x: Mapping[str, Any]) -> Split | None:
    """A crossover row's Split (None where the row has none)."""
    if x.get("dlog_speedup") is None:
        return None
    return Split(int(x["b_first"]), int(x["b_last"]), x["dlog_speedup"], x["dlog_T"], x["dlog_R"])


def describe(x: dict[str, Any]) -> str:
    """A crossover row in a few words: `b* = B [LO, HI]` (significant figures that match the interval) where the
    curve crosses 1 once with its interval closed, else the case (the crossings as intervals of b, pays or costs
    at every measured b, undecided)."""
    if x["b_star"] is not None:
        return f"b* = {shown(x['b_star'], x['b_star_lo'], x['b_star_hi'])}"
    return str(x["note"]).split(" (")[0].split(":")[0]


def sentence(xrows: Sequence[dict[str, Any]], baseline: str) -> str:
    """The README's sentence about a run's crossovers: b* with its interval where there is one, otherwise
    the case (pays or costs at every measured b, undecided)."""
    parts = [f"{x['model']}/{x['workload']}/{x['step']} {describe(x)}" for x in xrows]
    return (
        f"Against {baseline} at the same concurrency b, the speedup falls through 1 at b* (interpolated on "
        f"log b; [where the 95 % interval's bounds do]; given only where it crosses once with both ends inside the "
        f"measured b, otherwise the crossings as the measured b they lie between): {'; '.join(parts)}."
    )
