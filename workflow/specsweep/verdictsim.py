"""Which verdict rule: coverage, wrong decided verdicts and power of candidate rules over simulated studies.

A study is one model with `WORKLOADS` workloads, each measured with the baseline and `STEPS` other ladder steps,
every cell on n engine starts in n interleaved rounds (round r holds repeat r of every cell). The compared cell is
one step of workload 0 against that workload's baseline, its true speedup `truth`. Log throughput of cell c in
round r is its mean + the round's effect (shared by every cell of the round) + the start's own noise:

* noise: normal, standard deviation sigma per cell, scattered between cells by a factor exp(tau * z) (tau = 0
  gives one sigma for all; `MEASURED` is what the committed runs show, `measured_noise` measures it);
* round effects: normal with sd `round_sd` x sigma, round 1 lower by `first` x sigma (a slow first round), and a
  linear drift of `drift` (a fraction, first round to last).

Every rule gives a 95 % interval of the speedup and a verdict against its band b (`faster` when the interval lies
above 1 + b, `slower` below 1 - b, `equivalent` inside, else `undecided`). A decided verdict is wrong when the
truth contradicts what it claims under its own band: `faster` with truth <= 1 + b, `slower` with truth >= 1 - b,
`equivalent` with truth outside [1 - b, 1 + b]. Per setting (scenario, sigma, n) the table reports coverage of
the interval (lowest over the truths), the rate of wrong decided verdicts (highest over the truths `TRUTHS`,
band edges included) and power (a true 1.10x called `faster`).

Deterministic (seeded; the same normals for every rule and truth of a setting) and vectorised: the table of
docs/design.md is `python -m specsweep.verdictsim` (a few seconds).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from . import stats

SEED = 20261204
SIMS = 4000
WORKLOADS = 4
STEPS = 3
#: true speedups the wrong-verdict rate is taken over (the band edges of the rules are among them)
TRUTHS = (1.0, 1.03, 1.04, 1.05, 1.10, 1.20)
POWER_AT = 1.10
NOISES = (0.01, 0.02, 0.03, 0.04, 0.05)
NS = (3, 4, 5)
#: the selection criterion: at most this rate of wrong decided verdicts, at least this coverage
MAX_WRONG = 0.025
MIN_COVERAGE = 0.95
#: Monte Carlo tolerance on both (about two binomial standard errors at SIMS studies)
TOLERANCE = 0.005


@dataclass(frozen=True)
class Scenario:
    name: str
    tau: float = 0.0  # scatter of log sigma between cells
    round_sd: float = 0.0  # round effect, in units of sigma
    first: float = 0.0  # round 1 lower by this many sigma
    drift: float = 0.0  # linear drift, first round to last (a fraction)


#: measured on the committed runs whose repeats are engine starts (`measured_noise`, rounded): the scatter of a
#: cell's between-start sd beyond what 2 degrees of freedom give (0.2 on h200-reference to 1.4 on h200-concurrency;
#: 0.7 taken), round effects about half a start's sd, round 1 about half a sd low
MEASURED = Scenario("as measured", tau=0.7, round_sd=0.5, first=0.5)
SCENARIOS = (
    Scenario("independent starts"),
    MEASURED,
    Scenario("as measured + 10 % drift", tau=0.7, round_sd=0.5, first=0.5, drift=0.10),
)


@lru_cache(maxsize=1)
def _t_table() -> tuple[np.ndarray, np.ndarray]:
    df = np.geomspace(1.0, 1e4, 600)
    return np.log(df), np.array([stats.t_quantile(0.5 + stats.LEVEL / 2, float(d)) for d in df])


def t975(df: np.ndarray) -> np.ndarray:
    """stats.t_quantile(0.975, df) for an array of real df (interpolated in log df; within 1e-5 of it)."""
    x, y = _t_table()
    return np.interp(np.log(np.clip(df, 1.0, 1e4)), x, y)


Interval = tuple[np.ndarray, np.ndarray, np.ndarray]  # lo, hi (log scale), band


def _ss(x: np.ndarray) -> np.ndarray:
    return ((x - x.mean(axis=-1, keepdims=True)) ** 2).sum(axis=-1)


def welch(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Difference of mean logs, its Welch standard error and df (a, b: (..., n) log values)."""
    n = a.shape[-1]
    va, vb = a.var(axis=-1, ddof=1) / n, b.var(axis=-1, ddof=1) / n
    se2 = va + vb
    with np.errstate(invalid="ignore", divide="ignore"):
        df = np.where(se2 > 0, se2**2 / ((va**2 + vb**2) / (n - 1)), n - 1)
    return a.mean(axis=-1) - b.mean(axis=-1), np.sqrt(se2), df


def rule_today(logs: np.ndarray) -> Interval:
    """Welch's interval; band: 3 %, or the pooled sd of the baseline's starts over the model's workloads."""
    d, se, df = welch(logs[:, 0, 1], logs[:, 0, 0])
    n = logs.shape[-1]
    band = np.maximum(stats.BAND, np.sqrt(_ss(logs[:, :, 0]).sum(axis=1) / (logs.shape[1] * (n - 1))))
    h = t975(df) * se
    return d - h, d + h, band


def rule_welch_fixed(band: float) -> Callable[[np.ndarray], Interval]:
    def rule(logs: np.ndarray) -> Interval:
        d, se, df = welch(logs[:, 0, 1], logs[:, 0, 0])
        h = t975(df) * se
        return d - h, d + h, np.full(d.shape, band)

    return rule


def rule_pooled(band: float, over: str) -> Callable[[np.ndarray], Interval]:
    """Fixed band; standard error from the pooled between-start sd over the model's cells (`model`) or over
    the compared workload's cells (`workload`), its degrees of freedom."""

    def rule(logs: np.ndarray) -> Interval:
        n = logs.shape[-1]
        cells = logs if over == "model" else logs[:, :1]
        k = cells.shape[1] * cells.shape[2]
        sp = np.sqrt(_ss(cells).sum(axis=(1, 2)) / (k * (n - 1)))
        d = logs[:, 0, 1].mean(axis=-1) - logs[:, 0, 0].mean(axis=-1)
        h = float(t975(np.array([k * (n - 1)]))[0]) * sp * math.sqrt(2.0 / n)
        return d - h, d + h, np.full(d.shape, band)

    return rule


def rule_paired(band: float) -> Callable[[np.ndarray], Interval]:
    """Per-round log differences (step r over baseline r), t-interval on n - 1 df."""

    def rule(logs: np.ndarray) -> Interval:
        x = logs[:, 0, 1] - logs[:, 0, 0]
        n = x.shape[-1]
        h = float(t975(np.array([n - 1.0]))[0]) * x.std(axis=-1, ddof=1) / math.sqrt(n)
        return x.mean(axis=-1) - h, x.mean(axis=-1) + h, np.full(h.shape, band)

    return rule


def rule_paired_pooled(band: float) -> Callable[[np.ndarray], Interval]:
    """Per-round log differences of every step of the compared workload over its baseline; the compared step's
    mean difference, its standard error from the differences' sd pooled over those steps (STEPS x (n - 1) df)."""

    def rule(logs: np.ndarray) -> Interval:
        x = logs[:, 0, 1:] - logs[:, 0, :1]
        n = x.shape[-1]
        k = x.shape[1]
        sp = np.sqrt(_ss(x).sum(axis=1) / (k * (n - 1)))
        h = float(t975(np.array([k * (n - 1.0)]))[0]) * sp / math.sqrt(n)
        d = x[:, 0].mean(axis=-1)
        return d - h, d + h, np.full(h.shape, band)

    return rule


RULES: dict[str, Callable[[np.ndarray], Interval]] = {
    "measured band, Welch (the rule before)": rule_today,
    "3 % band, Welch": rule_welch_fixed(0.03),
    "5 % band, Welch": rule_welch_fixed(0.05),
    "3 % band, SE pooled over the model": rule_pooled(0.03, "model"),
    "5 % band, SE pooled over the model": rule_pooled(0.05, "model"),
    "3 % band, SE pooled over the workload": rule_pooled(0.03, "workload"),
    "3 % band, paired by round": rule_paired(0.03),
    "3 % band, paired by round, SE pooled over the workload": rule_paired_pooled(0.03),
}


def simulate(
    scenario: Scenario,
    sigma: float,
    n: int,
    sims: int = SIMS,
    seed: int = SEED,
    shape: tuple[int, int] = (WORKLOADS, 1 + STEPS),
) -> np.ndarray:
    """Log throughput, shape (sims, *shape, n): `shape` is (workloads, ladder steps with the baseline first),
    every cell's mean 0 (the truth is added to the compared cell, step 1 of workload 0, by `evaluate`). The
    design's table takes WORKLOADS x (1 + STEPS); specsweep.plan a run's own number of cells."""
    if n < 2 or shape[1] < 2 or shape[0] < 1:
        raise ValueError(f"simulate: needs n >= 2 and a baseline and another step, got n={n}, shape={shape}")
    rng = np.random.default_rng([seed, round(1000 * sigma), n, SCENARIOS.index(scenario)])
    cells = (sims, *shape)
    # sigma is the root mean square of the cells' sd, the round effect's share included
    sd = (
        sigma
        * math.sqrt(1.0 - scenario.round_sd**2)
        * np.exp(scenario.tau * rng.standard_normal(cells) - scenario.tau**2)
    )
    logs = sd[..., None] * rng.standard_normal((*cells, n))
    rounds = scenario.round_sd * sigma * rng.standard_normal((sims, n))
    rounds[:, 0] -= scenario.first * sigma
    rounds += scenario.drift * (np.arange(n) / (n - 1) - 0.5)
    return logs + rounds[:, None, None, :]


@dataclass(frozen=True)
class Result:
    coverage: float
    wrong: float
    power: float

    def meets(self) -> bool:
        return self.coverage >= MIN_COVERAGE - TOLERANCE and self.wrong <= MAX_WRONG + TOLERANCE


def _interval(rule: Callable[[np.ndarray], Interval], logs: np.ndarray, theta: float) -> Interval:
    """The rule's interval (log scale) and band on the studies `logs` with the compared cell's true log speedup
    theta added."""
    shifted = logs.copy()
    shifted[:, 0, 1] += theta
    return rule(shifted)


def power(rule: Callable[[np.ndarray], Interval], logs: np.ndarray, truth: float = POWER_AT) -> float:
    """The share of the studies `logs` in which the rule calls a true speedup `truth` `faster` (its interval
    wholly above 1 + its band); `evaluate`'s power at truth POWER_AT."""
    lo, _, band = _interval(rule, logs, math.log(truth))
    return float((lo > np.log1p(band)).mean())


def evaluate(rule: Callable[[np.ndarray], Interval], logs: np.ndarray, truths: Sequence[float] = TRUTHS) -> Result:
    coverage, wrong, pw = 1.0, 0.0, math.nan
    for truth in (*truths, POWER_AT):
        theta = math.log(truth)
        lo, hi, band = _interval(rule, logs, theta)
        up, down = np.log1p(band), np.log1p(-band)
        faster, slower = lo > up, hi < down
        equivalent = (lo >= down) & (hi <= up)
        bad = (faster & (theta <= up)) | (slower & (theta >= down)) | (equivalent & ((theta < down) | (theta > up)))
        coverage = min(coverage, float(((lo <= theta) & (theta <= hi)).mean()))
        wrong = max(wrong, float(bad.mean()))
        if truth == POWER_AT:
            pw = float(faster.mean())
    return Result(coverage, wrong, pw)


def table(
    scenarios: Sequence[Scenario] = SCENARIOS, noises: Sequence[float] = NOISES, ns: Sequence[int] = NS
) -> dict[tuple[str, str, float, int], Result]:
    out = {}
    for sc in scenarios:
        for sigma in noises:
            for n in ns:
                logs = simulate(sc, sigma, n)
                for name, rule in RULES.items():
                    out[(sc.name, name, sigma, n)] = evaluate(rule, logs)
    return out


def markdown(results: dict[tuple[str, str, float, int], Result]) -> str:
    scen = list(dict.fromkeys(k[0] for k in results))
    noises = sorted({k[2] for k in results})
    ns = sorted({k[3] for k in results})
    head = " | ".join(f"{100 * s:.0f} % n={n}" for s in noises for n in ns)
    lines = []
    for sc in scen:
        lines += [
            "",
            f"*{sc}* — power (a true {POWER_AT:.2f}x called `faster`) / coverage / wrong decided verdicts, in %; "
            "a cell in bold misses the criterion",
            "",
            f"| rule | {head} |",
            "|---|" + "---|" * (len(noises) * len(ns)),
        ]
        for name in RULES:
            cells = []
            for s in noises:
                for n in ns:
                    r = results[(sc, name, s, n)]
                    txt = f"{100 * r.power:.0f} / {100 * r.coverage:.1f} / {100 * r.wrong:.1f}"
                    cells.append(txt if r.meets() else f"**{txt}**")
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines[1:]) + "\n"


#: The decision: the rule with the highest power (a true 1.10x at 3 % noise, n = 3 to 5) among those meeting the
#: criterion in every setting of the decision scenarios (independent starts, as measured) whose spread also holds
#: coverage for every arm of the committed runs (`arm_coverage`: a rule pooling a spread over the model's cells
#: does not). stats.VERDICT_RULE is this rule (tests/test_stats.py checks both).
CHOSEN = "3 % band, Welch"
DECISION = SCENARIOS[:2]
#: what each rule of RULES pools its between-start spread over (GROUPINGS), where it pools one
POOLS = {
    "3 % band, SE pooled over the model": "the model",
    "5 % band, SE pooled over the model": "the model",
    "3 % band, SE pooled over the workload": "the workload",
    "3 % band, paired by round, SE pooled over the workload": "the workload",
}


def choose(results: dict[tuple[str, str, float, int], Result], arms: Sequence[ArmResult] | None = None) -> str:
    """The rule CHOSEN names, from the table: meets the criterion in every setting of DECISION, pools no spread
    over a group that `arms` (arm_coverage's rows) shows undercovering an arm, and has the highest summed power
    at 3 % noise over the n's and decision scenarios."""
    names = {d.name for d in DECISION}
    failing = {a.grouping for a in arms or () if not a.meets()}
    ok = [
        rule
        for rule in RULES
        if all(r.meets() for (sc, name, _, _), r in results.items() if name == rule and sc in names)
        and POOLS.get(rule) not in failing
    ]
    if not ok:
        raise ValueError("verdictsim: no rule meets the criterion")

    def summed(rule: str) -> float:
        return sum(r.power for (sc, name, s, _), r in results.items() if name == rule and sc in names and s == 0.03)

    return max(ok, key=summed)


# ------------------------------------------------------------------- coverage per arm, at the runs' spreads

#: Where a verdict's between-start spread may be pooled: the cells (keyed model, workload, config, b) that share
#: one, given the run's baseline steps. `the cell` pools nothing: Welch's interval, each side its own spread.
GROUPINGS: dict[str, Callable[[tuple[object, ...], frozenset[object]], tuple[object, ...]]] = {
    "the model": lambda k, base: (k[0],),
    "the model's arm (baseline or drafter)": lambda k, base: (k[0], k[2] in base),
    "the workload": lambda k, base: (k[0], k[1]),
    "the ladder step": lambda k, base: (k[0], k[2]),
    "the ladder step at its b": lambda k, base: (k[0], k[2], k[3]),
    "the cell": lambda k, base: tuple(k),
}
#: each grouping's rule in RULES (the cell's: Welch's interval)
GROUPING_RULE = {
    "the model": "3 % band, SE pooled over the model",
    "the workload": "3 % band, SE pooled over the workload",
    "the cell": "3 % band, Welch",
}
#: the criterion per arm: the noisiest comparison of every committed run covered at least this often
ARM_MIN_COVERAGE = 0.93
ARM_SEED = 20261206


@dataclass(frozen=True)
class ArmResult:
    run: str
    grouping: str
    comparisons: int
    coverage: float  # the lowest over the run's comparisons
    worst: str  # the comparison that has it
    median_coverage: float
    power: float  # median over the comparisons: a true 1.10x called `faster`

    def meets(self) -> bool:
        return self.coverage >= ARM_MIN_COVERAGE


Key = tuple[object, ...]


def _arm_runs(
    results_dir: Path, runs: Collection[str] | None = None
) -> list[tuple[str, dict[Key, float], dict[Key, int], list[tuple[Key, Key]], frozenset[object]]]:
    """Per run measured on engine starts (`runs`: only those): each cell's between-start sd of log tok/s and
    its starts (cells of 2 or more), the comparisons its speedup table decides on (cell, its baseline cell),
    and its baseline steps."""
    from .tables import read_parquet

    out: list[tuple[str, dict[Key, float], dict[Key, int], list[tuple[Key, Key]], frozenset[object]]] = []
    for path in sorted(results_dir.glob("*/tables/measurements.parquet")):
        if runs is not None and path.parent.parent.name not in runs:
            continue
        rows = [
            r | {"_start": r["engine_key"]}
            for r in read_parquet(path.parent, path.name).to_pylist()
            if r["status"] == "ok" and r["output_tok_s"]
        ]
        series = {k: v for k, v in stats.cell_series(rows, "output_tok_s").items() if len(v) >= 2}
        sp = read_parquet(path.parent, "speedup.parquet").to_pylist()
        pairs: list[tuple[Key, Key]] = [
            (
                (s["model"], s["workload"], s["config"], s["concurrency"]),
                (s["model"], s["workload"], s["baseline"], s["concurrency"]),
            )
            for s in sp
            if s["replication"] == stats.ENGINE_STARTS
        ]
        pairs = [(a, b) for a, b in pairs if a in series and b in series]
        if not pairs:
            continue
        sd = {k: float(np.log(v).std(ddof=1)) for k, v in series.items()}
        n = {k: len(v) for k, v in series.items()}
        out.append((path.parent.parent.name, sd, n, pairs, frozenset(s["baseline"] for s in sp)))
    return out


def arm_coverage(results_dir: Path, sims: int = SIMS, runs: Collection[str] | None = None) -> list[ArmResult]:
    """Each grouping's coverage and power at the committed runs' own per-cell spreads: every cell of a run
    simulated with its measured between-start sd of log tok/s and its number of starts (normal, independent
    starts), the spread pooled over the grouping's cells (each about its own mean, on the pooled degrees of
    freedom; two sides from different groups: Welch-Satterthwaite on the two pooled variances), a 95 % t
    interval per comparison the run's speedup table decides. Per run and grouping: the lowest coverage over the
    comparisons (the noisiest comparison's), the median, and the median power (a true 1.10x called `faster`
    against the 3 % band)."""
    out: list[ArmResult] = []
    up = math.log1p(stats.BAND)
    for run, sd, n, pairs, base in _arm_runs(results_dir, runs):
        rng = np.random.default_rng([ARM_SEED, len(pairs), len(sd)])
        keys = sorted(sd, key=str)
        draws = {k: sd[k] * rng.standard_normal((sims, n[k])) for k in keys}
        ss = {k: _ss(x) for k, x in draws.items()}
        mean = {k: x.mean(axis=-1) for k, x in draws.items()}
        for name, group in GROUPINGS.items():
            gss: dict[Key, np.ndarray] = {}
            gdf: dict[Key, int] = {}
            for k in keys:
                g = group(k, base)
                gss[g] = gss.get(g, 0.0) + ss[k]
                gdf[g] = gdf.get(g, 0) + n[k] - 1
            cov, pw = [], []
            for a, b in pairs:
                ga, gb = group(a, base), group(b, base)
                va, vb = gss[ga] / gdf[ga] / n[a], gss[gb] / gdf[gb] / n[b]
                if ga == gb:
                    df = np.full(sims, float(gdf[ga]))
                else:
                    with np.errstate(invalid="ignore", divide="ignore"):
                        df = np.where(va + vb > 0, (va + vb) ** 2 / (va**2 / gdf[ga] + vb**2 / gdf[gb]), 1.0)
                h = t975(df) * np.sqrt(va + vb)
                d = mean[a] - mean[b]
                cov.append(float((np.abs(d) <= h).mean()))
                pw.append(float((d + math.log(POWER_AT) - h > up).mean()))
            i = int(np.argmin(cov))
            worst = "/".join(str(x) for x in pairs[i][0][1:3])
            out.append(ArmResult(run, name, len(pairs), cov[i], worst, float(np.median(cov)), float(np.median(pw))))
    return out


def arm_markdown(arms: Sequence[ArmResult]) -> str:
    """The per-arm table of docs/design.md: per committed run, each grouping's lowest coverage (the noisiest
    comparison's, named), its median coverage and its median power; a cell in bold misses ARM_MIN_COVERAGE."""
    names = list(GROUPINGS)
    runs = list(dict.fromkeys(a.run for a in arms))
    by = {(a.run, a.grouping): a for a in arms}
    lines = [
        "| run | comparisons | " + " | ".join(f"pooled over {g}" for g in names) + " |",
        "|---|---:|" + "---|" * len(names),
    ]
    for run in runs:
        cells = []
        for g in names:
            a = by[(run, g)]
            txt = f"{100 * a.coverage:.1f} ({a.worst}) / {100 * a.median_coverage:.1f} / {100 * a.power:.0f}"
            cells.append(txt if a.meets() else f"**{txt}**")
        lines.append(f"| {run} | {by[(run, names[0])].comparisons} | " + " | ".join(cells) + " |")
    chosen = [g for g in names if all(by[(r, g)].meets() for r in runs)]
    lines += [
        "",
        f"Holds {100 * ARM_MIN_COVERAGE:.0f} % for the noisiest comparison of every run: "
        + (", ".join(chosen) if chosen else "none")
        + ".",
    ]
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Noise:
    run: str
    model: str
    cells: int
    sd: float
    tau: float
    rounds: tuple[float, ...]


def measured_noise(results_dir: Path) -> list[Noise]:
    """What the scenarios take from the committed runs: per run whose cells are measured on engine starts
    (tables/measurements.parquet), per model: cells with 3 or more starts, their pooled between-start sd of log
    tok/s (the simulation's noise, sigma), tau (the scatter of a cell's log sd beyond what its starts' degrees of
    freedom give), and the rounds' mean deviation from their cells' means (round effects; round 1 first) in
    units of that sd."""
    from .tables import read_parquet

    out: list[Noise] = []
    for path in sorted(results_dir.glob("*/tables/measurements.parquet")):
        rows = [
            r | {"_start": r["engine_key"]}  # one engine key per engine start
            for r in read_parquet(path.parent, path.name).to_pylist()
            if r["status"] == "ok" and r["output_tok_s"]
        ]
        by_model: dict[str, dict[tuple[object, ...], dict[int, list[float]]]] = {}
        for r in rows:
            cell = by_model.setdefault(r["model"], {}).setdefault(
                (r["workload"], r["config"], r.get("concurrency")), {}
            )
            cell.setdefault(int(r["repeat"]), []).append(math.log(float(r["output_tok_s"])))
        series = stats.cell_series(rows, "output_tok_s")
        for model, cells in sorted(by_model.items()):
            starts = [v for k, v in series.items() if k[0] == model and len(v) >= 3]
            if len(starts) < 4:
                continue  # passes on one engine, or too few cells to say
            sds = np.array([np.log(v).std(ddof=1) for v in starts])
            sds = sds[sds > 0]
            n = min(len(v) for v in starts)
            # var(log s) of a normal sample on n - 1 df: trigamma((n - 1) / 2) / 4 (trigamma(1) = pi^2 / 6)
            iid = (math.pi**2 / 6 if n == 3 else 1.0 / (n - 2)) / 4
            tau = math.sqrt(max(0.0, float(np.log(sds).var(ddof=1)) - iid))
            med = (stats.pooled_spread(starts) or (0.0, 0))[0]
            rounds: dict[int, list[float]] = {}
            for reps in cells.values():
                if len(reps) < 3:
                    continue
                means = {k: float(np.mean(v)) for k, v in reps.items()}
                centre = float(np.mean(list(means.values())))
                for k, m in means.items():
                    rounds.setdefault(k, []).append(m - centre)
            dev = [float(np.mean(rounds[k])) / med for k in sorted(rounds)]
            out.append(Noise(path.parent.parent.name, model, len(starts), med, tau, tuple(dev)))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="write the Markdown table here (default: stdout)")
    ap.add_argument("--results", type=Path, default=Path("results"), help="the committed runs (measured noise)")
    args = ap.parse_args(argv)
    res = table()
    noise = measured_noise(args.results)
    arms = arm_coverage(args.results)
    md = (
        "Measured on the committed runs (cells of 3+ engine starts): run, model, cells, pooled between-start sd of "
        "log tok/s (the noise of the tables below), tau, rounds' mean deviation in units of that sd (round 1 first)\n\n"
        "| run | model | cells | sd | tau | rounds |\n|---|---|---|---|---|---|\n"
        + "".join(
            f"| {m.run} | {m.model} | {m.cells} | {100 * m.sd:.1f} % | {m.tau:.2f} | "
            + ", ".join(f"{d:+.2f}" for d in m.rounds)
            + " |\n"
            for m in noise
        )
        + "\n"
        + markdown(res)
        + f"\nChosen (highest power at 3 % noise among the rules that meet the criterion in every setting of "
        f"{' and '.join(d.name for d in DECISION)}, pooling no spread over a group that undercovers an arm of a "
        f"committed run): {choose(res, arms)}.\n"
    )
    if args.out:
        args.out.write_text(md)
    else:
        print(md, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
