"""Statistics over repeats: median, a seeded bootstrap 95 % interval, the coefficient of variation, the
interval of a ratio of medians and the verdict it gives. Deterministic: the same values give the same numbers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

N_BOOT = 4000
SEED = 20261130
LEVEL = 0.95


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


def _percentiles(boot: np.ndarray) -> tuple[float, float]:
    lo, hi = np.quantile(boot, [(1 - LEVEL) / 2, 1 - (1 - LEVEL) / 2], method="linear")
    return float(lo), float(hi)


def bootstrap_ci(values: Sequence[float | None], seed: int = SEED) -> tuple[float | None, float | None]:
    """95 % percentile-bootstrap interval of the median over repeats; (None, None) for n < 2."""
    arr = _clean(values)
    if arr.size < 2:
        return None, None
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, arr.size, size=(N_BOOT, arr.size))
    return _percentiles(np.median(arr[idx], axis=1))


def ratio_ci(
    num: Sequence[float | None], den: Sequence[float | None], seed: int = SEED
) -> tuple[float | None, float | None, float | None]:
    """Ratio of medians (num / den) and its 95 % bootstrap interval, resampling both sides independently
    (their repeats ran on different engines, so they are not paired). Interval None when either n < 2."""
    a, b = _clean(num), _clean(den)
    if not a.size or not b.size or np.median(b) == 0:
        return None, None, None
    point = float(np.median(a) / np.median(b))
    if a.size < 2 or b.size < 2:
        return point, None, None
    rng = np.random.default_rng(seed)
    ma = np.median(a[rng.integers(0, a.size, size=(N_BOOT, a.size))], axis=1)
    mb = np.median(b[rng.integers(0, b.size, size=(N_BOOT, b.size))], axis=1)
    lo, hi = _percentiles(ma / mb)
    return point, lo, hi


def verdict(point: float | None, lo: float | None, hi: float | None) -> str:
    """faster / slower when the whole interval is on one side of 1; within noise when it straddles 1;
    undecided (n < 2) when there is no interval."""
    if point is None:
        return "missing"
    if lo is None or hi is None:
        return "undecided (n<2)"
    if lo > 1.0:
        return "faster"
    if hi < 1.0:
        return "slower"
    return "within noise"


def geomean(values: Sequence[float | None]) -> float | None:
    arr = _clean(values)
    arr = arr[arr > 0]
    return float(math.exp(np.log(arr).mean())) if arr.size else None
