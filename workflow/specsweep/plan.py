"""How many engine starts a run needs: the smallest n at which the verdict rule calls a true speedup of
1 + `effect` `faster` with probability `target`, given the between-start noise a run measured.

Per model of a run's tables (measurements.parquet, read through the checked reader): the between-start spread
of log tok/s pooled over the model's cells (stats.cell_series and stats.model_spreads, one value per engine
start, each cell about its own mean: a typical cell's noise; the verdict rule's interval takes each cell's own
spread, stats.VERDICT_RULE), the cells it pools over, and
the n the run used (the engine starts most of its cells had). The power at n is verdictsim's: simulated
studies with that many cells and n engine starts a cell in n interleaved rounds, noise sigma = the measured
spread, judged by the rule the tables use (verdictsim.CHOSEN; tests/test_stats.py holds them equal), under each
scenario the rule was chosen on (verdictsim.DECISION: independent starts; as measured, with the committed runs'
scatter between cells, round effects and slow first round). The plan is the smallest n whose power reaches the
target in every one of them.

    specsweep plan --tables results/h200-concurrency-boot2/tables [--effect 0.10] [--power 0.80] [--json]

How long a pass runs (:func:`pass_spread`): over the committed runs, the between-start spread of baseline and
drafter cells by the length of their timed pass, the evidence behind the GPU profiles' `min_pass_seconds`
(config.GPU_MIN_PASS_SECONDS; docs/design.md, "How long a pass at b runs").
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from statistics import NormalDist
from typing import Any

from . import stats, verdictsim
from .errors import SpecsweepError
from .escape import md_text

#: The largest n the plan searches (beyond it: `more than N_MAX`).
N_MAX = 200
#: The defaults of `specsweep plan`: a true +10 % called `faster` in 80 % of studies (the design's target).
EFFECT = verdictsim.POWER_AT - 1.0
TARGET = 0.80


@dataclass(frozen=True)
class ModelNoise:
    """What a run measured of one model's between-start noise."""

    model: str
    cells: int  # cells with 2 or more engine starts: those the verdict rule pools over
    sd: float | None  # the pooled between-start sd of log tok/s (None: no cell with 2 starts that differ)
    df: int  # its degrees of freedom
    n_used: int  # the engine starts most of the model's cells had
    replication: str  # stats.ENGINE_STARTS, or stats.ONE_ENGINE where the repeats are passes on one engine


@dataclass(frozen=True)
class ModelPlan:
    noise: ModelNoise
    #: per decision scenario: the power at the n the run used (None: below 2 starts or no spread)
    power_used: dict[str, float | None]
    #: per decision scenario: the smallest n reaching the target (None: more than N_MAX, or nothing to plan)
    n_needed: dict[str, int | None]

    @property
    def n(self) -> int | None:
        """The plan: the smallest n that reaches the target in every decision scenario (None: none up to
        N_MAX, or nothing to plan)."""
        got = list(self.n_needed.values())
        return None if not got or any(v is None for v in got) else max(v for v in got if v is not None)


def measured(tables: Path) -> list[ModelNoise]:
    """Each model's between-start noise in a run's tables, pooled over its cells (a typical cell's)."""
    from .tables import read_run_table

    rows = [
        r | {"_start": r["engine_key"]}  # one engine key per engine start (repeats on one engine share it)
        for r in read_run_table(Path(tables), "measurements.parquet").to_pylist()
        if r["status"] == "ok" and r["output_tok_s"]
    ]
    series = stats.cell_series(rows, "output_tok_s")
    measurements = Counter((r["model"], r["workload"], r["config"], r.get("concurrency")) for r in rows)
    out = []
    for model, pooled in sorted(stats.model_spreads(series).items()):
        cells = {k: v for k, v in series.items() if k[0] == model}
        starts = Counter(len(v) for v in cells.values())
        one_engine = all(len(v) == 1 for v in cells.values()) and any(measurements[k] > 1 for k in cells)
        out.append(
            ModelNoise(
                model=model,
                cells=sum(1 for v in cells.values() if len(v) >= 2),
                sd=pooled[0] if pooled else None,
                df=pooled[1] if pooled else 0,
                n_used=max(starts, key=lambda n: (starts[n], n)),
                replication=stats.ONE_ENGINE if one_engine else stats.ENGINE_STARTS,
            )
        )
    return out


@lru_cache(maxsize=4096)
def power_at(
    sd: float, n: int, cells: int, scenario: str, effect: float = EFFECT, shape: tuple[int, int] | None = None
) -> float:
    """The share of simulated studies (verdictsim.SIMS) in which the verdict rule calls a true 1 + effect
    `faster`: `cells` cells of one model (shape (1, cells), or `shape` = (workloads, steps) as the design's
    table takes), n engine starts each in n rounds, noise sd, under the decision scenario named."""
    sc = next(s for s in verdictsim.DECISION if s.name == scenario)
    logs = verdictsim.simulate(sc, sd, n, shape=shape or (1, max(cells, 2)))
    return verdictsim.power(verdictsim.RULES[verdictsim.CHOSEN], logs, 1.0 + effect)


def _start(sd: float, effect: float, target: float) -> int:
    """A first guess of the smallest n from the normal approximation of the rule's interval (t ~ 2, the
    target's normal quantile), for the search to walk from."""
    z = NormalDist().inv_cdf(target)
    gap = math.log1p(effect) - math.log1p(stats.BAND)
    return max(2, min(N_MAX, math.ceil(2.0 * (sd * (2.0 + z) / gap) ** 2)))


def smallest_n(sd: float, cells: int, scenario: str, effect: float = EFFECT, target: float = TARGET) -> int | None:
    """The smallest n in [2, N_MAX] whose simulated power reaches `target` where n - 1 does not (n = 2: reaches
    it): from the normal approximation's guess, steps of a quarter down or up bracket it, and bisection finds
    it; None when N_MAX does not reach it."""

    def reach(n: int) -> bool:
        return power_at(sd, n, cells, scenario, effect) >= target

    lo = hi = _start(sd, effect, target)
    if reach(hi):
        while reach(lo):
            if lo == 2:
                return 2
            hi, lo = lo, max(2, min(lo - 1, int(lo / 1.25)))
    else:
        while not reach(hi):
            if hi >= N_MAX:
                return None
            lo, hi = hi, min(N_MAX, max(hi + 1, math.ceil(hi * 1.25)))
    while hi - lo > 1:  # lo does not reach the target, hi does
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if reach(mid) else (mid, hi)
    return hi


def plan(tables: Path, effect: float = EFFECT, target: float = TARGET) -> list[ModelPlan]:
    """The plan of every model of a run's tables (see the module doc)."""
    if not effect > stats.BAND:
        raise SpecsweepError(
            f"plan --effect {effect:g}: a true speedup within the band (1 + {stats.BAND:g}) is never to be called "
            "`faster`; give an effect above the band"
        )
    out = []
    for noise in measured(tables):
        names = [s.name for s in verdictsim.DECISION]
        if noise.replication != stats.ENGINE_STARTS or noise.sd is None or noise.cells < 2:
            out.append(ModelPlan(noise, dict.fromkeys(names), dict.fromkeys(names)))
            continue
        used = {
            s: (power_at(noise.sd, noise.n_used, noise.cells, s, effect) if noise.n_used >= 2 else None) for s in names
        }
        needed = {s: smallest_n(noise.sd, noise.cells, s, effect, target) for s in names}
        out.append(ModelPlan(noise, used, needed))
    return out


def pct(v: float | None) -> str:
    """A power in per cent, – where there is none."""
    return "–" if v is None else f"{100 * v:.0f} %"


def _n(v: int | None, p: ModelPlan) -> str:
    return f"more than {N_MAX}" if v is None and p.noise.sd is not None else "–" if v is None else str(v)


def why_none(p: ModelPlan) -> str:
    """Why a model has no plan, or ''."""
    if p.noise.replication != stats.ENGINE_STARTS:
        return f"its repeats are {stats.ONE_ENGINE}: technical replicates decide no verdict at any n"
    if p.noise.sd is None or p.noise.cells < 2:
        return "no between-start spread measured (fewer than 2 cells with 2 engine starts)"
    return ""


def markdown(plans: Sequence[ModelPlan], tables: Path, effect: float = EFFECT, target: float = TARGET) -> str:
    names = [s.name for s in verdictsim.DECISION]
    lines = [
        f"Engine starts for a true {1 + effect:.2f}x to be called `faster` in {100 * target:.0f} % of studies "
        f"(`specsweep plan --tables {tables} --effect {effect:g} --power {target:g}`): per model, the between-start "
        "sd of log tok/s pooled over its cells (a typical cell's), and the power of the verdict rule "
        f"(`{verdictsim.CHOSEN}`) in {verdictsim.SIMS:,} simulated studies of the model's cells per n "
        f"(specsweep.verdictsim), {' and '.join(names)}.",
        "",
        f"| model | cells | between-start sd (df) | n used | power at n used ({' / '.join(names)}) | "
        f"smallest n ({' / '.join(names)}) | n to plan |",
        "|---|---:|---:|---:|---|---|---:|",
    ]
    for p in plans:
        m = p.noise
        sd = "–" if m.sd is None else f"{100 * m.sd:.1f} % ({m.df})"
        why = why_none(p)
        lines.append(
            f"| {md_text(m.model)} | {m.cells} | {sd} | {m.n_used} | "
            + (
                f"{why} | – | – |"
                if why
                else f"{' / '.join(pct(p.power_used[s]) for s in names)} | "
                f"{' / '.join(_n(p.n_needed[s], p) for s in names)} | {_n(p.n, p)} |"
            )
        )
    return "\n".join(lines) + "\n"


def as_json(plans: Sequence[ModelPlan], effect: float = EFFECT, target: float = TARGET) -> dict[str, Any]:
    return {
        "effect": effect,
        "target": target,
        "rule": verdictsim.CHOSEN,
        "sims": verdictsim.SIMS,
        "n_max": N_MAX,
        "models": [asdict(p.noise) | {"power_used": p.power_used, "n_needed": p.n_needed, "n": p.n} for p in plans],
    }


BASELINE, DRAFTER = "baseline", "drafter"
#: A group's slope is fitted only over passes at least this many times apart (longest over shortest).
SLOPE_SPAN = 1.5


@dataclass(frozen=True)
class PassCell:
    """One cell of a committed run whose repeats are separate engine starts (2 or more)."""

    run: str
    model: str
    workload: str  # the base workload (`code` for `code@b8`)
    arm: str  # BASELINE (the run's baseline step) or DRAFTER (a speculative step); other steps are left out
    pass_s: float  # the median timed pass over its engine starts, seconds
    sd_log: float  # the between-start sd of log tok/s
    sd_s: float  # the between-start sd of the timed pass, seconds
    device: str  # the card (or host) the cell ran on, as its measurements name it: spreads pool like with like


def pass_cells(results: Path) -> list[PassCell]:
    """The baseline and drafter cells of every committed run (results/*/tables) measured on 2 or more engine
    starts, each with its pass length and between-start spreads."""
    import numpy as np

    from .crossover import base_workload
    from .tables import read_parquet

    out = []
    for path in sorted(Path(results).glob("*/tables/measurements.parquet")):
        if not (path.parent.parent / "README.md").is_file():  # committed runs have a page; `make demo`'s has none
            continue
        table = read_parquet(path.parent, path.name)
        baseline = (table.schema.metadata or {}).get(b"specsweep.baseline", b"vanilla").decode()
        cells: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
        for r in table.to_pylist():
            if r["status"] == "ok" and r["output_tok_s"] and r["gen_wall_s"]:
                cells.setdefault((r["model"], r["workload"], r["config"], r["method"]), []).append(r)
        for (model, workload, step, method), rows in sorted(cells.items(), key=str):
            arm = BASELINE if step == baseline else DRAFTER if method not in (None, "none") else None
            if arm is None or len(rows) < 2 or len({r["engine_key"] for r in rows}) != len(rows):
                continue  # a control step, one start, or passes on one engine
            wall = np.array([float(r["gen_wall_s"]) for r in rows])
            tok = np.log([float(r["output_tok_s"]) for r in rows])
            device = str(rows[0].get("device_name") or "unknown")
            out.append(
                PassCell(path.parent.parent.name, model, base_workload(workload), arm, float(np.median(wall)),
                         float(tok.std(ddof=1)), float(wall.std(ddof=1)), device)
            )  # fmt: skip
    return out


@dataclass(frozen=True)
class PassSpread:
    """The cells of one model, workload, arm and device over the committed runs: their passes (shortest, longest), the
    between-start sd of log tok/s and of the pass in seconds (median, lowest, highest), and `slope`, the
    least-squares slope of log sd of the pass (seconds) on log pass length: near 0 the spread is a fixed number
    of seconds, which a longer pass divides; near 1 it grows with the pass, which a longer pass does not cure
    (None below 3 cells or passes less than SLOPE_SPAN apart)."""

    model: str
    workload: str
    arm: str
    device: str
    runs: tuple[str, ...]
    cells: int
    pass_s: tuple[float, float]
    sd_log: tuple[float, float, float]
    sd_s: tuple[float, float, float]
    slope: float | None


def pass_spread(results: Path) -> list[PassSpread]:
    """pass_cells grouped by model, workload, arm and device (see PassSpread): one card's passes are not pooled
    with another's."""
    import numpy as np

    groups: dict[tuple[str, str, str, str], list[PassCell]] = {}
    for c in pass_cells(results):
        groups.setdefault((c.model, c.workload, c.arm, c.device), []).append(c)
    out = []
    for (model, workload, arm, device), cells in sorted(groups.items()):
        length = np.array([c.pass_s for c in cells])
        sd_s = np.array([c.sd_s for c in cells])
        sd_log = np.array([c.sd_log for c in cells])
        fit = len(cells) >= 3 and length.max() >= SLOPE_SPAN * length.min() and bool((sd_s > 0).all())
        slope = float(np.polyfit(np.log(length), np.log(sd_s), 1)[0]) if fit else None

        def spread(x: np.ndarray) -> tuple[float, float, float]:
            return float(np.median(x)), float(x.min()), float(x.max())

        out.append(
            PassSpread(model, workload, arm, device, tuple(sorted({c.run for c in cells})), len(cells),
                       (float(length.min()), float(length.max())), spread(sd_log), spread(sd_s), slope)
        )  # fmt: skip
    return out
