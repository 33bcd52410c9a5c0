"""Serve-mode cells against the config's latency targets (`serve.goodput`: ttft_ms, tpot_ms, e2el_ms): whether
each cell meets them, and the concurrency b at which a ladder step stops meeting them. Pure functions over the
rows of serve.parquet (tables.serving): the tables, figure 10 and its caption state the same finding from them.

A cell meets the target by :data:`TARGET_RULE`: per repeat, vLLM's benchmark client gives each latency's
median over requests; the cell's value is the median of those over repeats (no interval: the whiskers of figure
10 are the p90 and p99 over requests, not an uncertainty). The operating points of a (model, workload, step)
are its cells in order of b, the cell with all prompts at once (no b) last.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: The latencies vLLM's benchmark client reports (ms over requests), in the tables' order: time to first token,
#: time per output token after the first, inter-token latency, end-to-end latency.
LATENCIES: tuple[str, ...] = ("ttft", "tpot", "itl", "e2el")
#: Their quantiles over requests that serve.parquet keeps (per repeat, then the median over repeats).
QUANTILES: tuple[str, ...] = ("median", "p90", "p99")
#: The latencies a goodput target may bound (the config's serve.goodput keys, less their `_ms`).
TARGETS: tuple[str, ...] = ("ttft", "tpot", "e2el")
NAMES = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2el": "E2EL"}
TARGET_RULE = (
    "a cell meets the latency target when, for every target the config sets (serve.goodput), its median over "
    "requests (the median over repeats) is at or below it"
)
NO_TARGET = "no latency target (serve.goodput)"


def targets_of(row: Mapping[str, Any]) -> dict[str, float]:
    """The latency targets (ms) a serve row was measured under, by latency name; {} when the config set none."""
    return {m: float(v) for m in TARGETS if (v := row.get(f"target_{m}_ms")) is not None}


def target_text(targets: Mapping[str, float]) -> str:
    """'TPOT ≤ 50 ms, E2EL ≤ 2000 ms', or that there is none."""
    if not targets:
        return NO_TARGET
    return ", ".join(f"{NAMES[m]} ≤ {targets[m]:g} ms" for m in TARGETS if m in targets)


def meets(row: Mapping[str, Any]) -> bool | None:
    """Whether a serve row meets its targets (:data:`TARGET_RULE`); None without a target or a measured median."""
    targets = targets_of(row)
    medians = {m: row.get(f"{m}_ms_median") for m in targets}
    if not targets or any(v is None for v in medians.values()):
        return None
    return all(float(medians[m]) <= t for m, t in targets.items())  # type: ignore[arg-type]


def b_text(b: int | None) -> str:
    return "all at once" if b is None else f"b = {b}"


def order_key(b: int | None) -> tuple[bool, int]:
    """Operating points by b, the cell with all prompts at once (no b) last."""
    return (b is None, b or 0)


@dataclass(frozen=True)
class Limit:
    """Where one (model, workload, step) meets its latency target: each measured operating point in order of b
    with whether it meets it, the last b met before the first miss and that first miss (None where there is
    none), and the note the tables, figure and caption state."""

    model: str
    workload: str
    step: str
    targets: dict[str, float]
    points: tuple[tuple[int | None, bool], ...]
    last_met: int | None
    first_miss: int | None
    note: str


def _note(points: Sequence[tuple[int | None, bool]], targets: Mapping[str, float]) -> str:
    if not targets:
        return NO_TARGET
    if not points:
        return "no cell measured"
    met = [b for b, ok in points if ok]
    missed = [b for b, ok in points if not ok]
    if not missed:
        return "meets the target at every measured b"
    if not met:
        return "misses the target at every measured b"
    first = next(i for i, (_, ok) in enumerate(points) if not ok)
    if all(not ok for _, ok in points[first:]):
        return f"meets the target up to {b_text(points[first - 1][0])}, misses it from {b_text(points[first][0])} on"
    return (
        f"meets the target at {', '.join(b_text(b) for b in met)}, misses it at "
        f"{', '.join(b_text(b) for b in missed)} (not monotone in b)"
    )


def limit(
    model: str, workload: str, step: str, targets: Mapping[str, float], rows: Iterable[Mapping[str, Any]]
) -> Limit:
    """The :class:`Limit` of one (model, workload, step) from its serve rows (any order)."""
    pts = sorted(
        ((r.get("concurrency"), ok) for r in rows if (ok := meets(r)) is not None), key=lambda p: order_key(p[0])
    )
    first = next((i for i, (_, ok) in enumerate(pts) if not ok), None)
    return Limit(
        model,
        workload,
        step,
        dict(targets),
        tuple(pts),
        pts[first - 1][0] if first else None,
        pts[first][0] if first is not None else None,
        _note(pts, targets),
    )


def limits(rows: Iterable[Mapping[str, Any]]) -> list[Limit]:
    """Every (model, workload, step) of serve rows (the workload without its `@b`), by model, workload, step."""
    from .crossover import base_workload

    groups: dict[tuple[str, str, str], list[Mapping[str, Any]]] = {}
    for r in rows:
        groups.setdefault((str(r["model"]), base_workload(str(r["workload"])), str(r["config"])), []).append(r)
    out = []
    for key, group in sorted(groups.items()):
        measured = [r for r in group if r.get("n")]
        out.append(limit(*key, targets_of(group[0]), measured))
    return out
