"""The advisor: should a drafter be on for this model and this traffic? From replays of the traffic (T, the
tokens an engine step yields against plain decoding, see replay.py) and the step-time ratio R measured for the
model's shape in a committed run, predict each drafter's speedup T / R with an interval, and recommend.

What the prediction assumes, and the report says:
- R of a drafter on this shape does not depend on the traffic beyond the spread measured across the run's
  workloads (R grows with the tokens verified per step, i.e. with how much the drafter proposes);
- the traffic runs as the replay scheduled it (all requests at once, or the concurrency given), with the
  engine settings of the measured run (token budget, max_num_seqs);
- T's interval is the relative bootstrap interval (over requests) of the tokens per request step, carried
  over to the whole schedule's T; R's is the measured one (its lowest and highest bound over workloads).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import yaml

from . import escape, paths
from .errors import SpecsweepError
from .escape import MPL_RC, md_code, md_text
from .jsonio import read_json, read_text_bounded
from .replay import check_report

ASSUMES = (
    "R (the drafter's step time over plain decoding) measured on this model shape and workload holds for this "
    "traffic (the default: R of the named workload at the same step and concurrency; where the run did not "
    "measure it there, R pooled over the run's workloads, as each row's source says: held out across boots, the "
    "pooled R lands within ±10 % in 6 of 48 GPU-bound points, the same workload's in 39); the traffic runs as "
    "the replay scheduled it; "
    "T's interval is the bootstrap interval over requests of the tokens per request step. R measured on one "
    "workload need not carry over to traffic of another shape (other prompt lengths, other acceptance): "
    "`specsweep validate` measures how far it does on a run's own workloads. R is one ladder step's (trident and "
    "suffix-full are not suffix: other engine settings, other step times). Across engine boots "
    "(`specsweep validate --heldout-from`), R of the same workload carried over on the GPU-bound 32B shape "
    "(random weights, b = 256: 8 of 8 predictions within ±10 %), but R does not carry across boots for a "
    "host-bound model: SmolLM2-135M on the H200, R from another boot, 2 of 6 predictions within ±10 % (errors "
    "-31 % to +47 %); there the step time follows the host (CPU, clocks, the boot), so measure R on the boot "
    "that serves the traffic."
)


#: The advisor's default R, as `specsweep validate --heldout-from` holds it out: R of the traffic's own
#: workload at the same ladder step and concurrency, from the fitted run; where the run did not measure that
#: workload there (or none is named), R pooled over its workloads at that point, said in the row's R_from.
#: Held out across engine boots, R of the same workload lands within ±10 % of the measured speedup in 39 of the
#: 48 GPU-bound points and R pooled over workloads in 6 (docs/replay.md#the-advisor-held-out).
DEFAULT_R = "same workload, else pooled over workloads"


def _configs_measuring(model: str, method: str, config_dir: Path) -> list[str]:
    """The study configs whose matrix holds this model with a ladder step of this method: those a user starts
    from (config_dir) and those of the committed runs beside it (results/{run}/config.yaml)."""
    found = []
    runs = sorted((Path(config_dir).parent / paths.RESULTS).glob("*/config.yaml"))
    for path in sorted(Path(config_dir).glob("*.yaml")) + runs:
        try:
            raw = yaml.safe_load(read_text_bounded(path, "config", 1 << 20))
        except (SpecsweepError, yaml.YAMLError):  # a file that is not a study config names nothing
            continue
        if not isinstance(raw, dict):
            continue
        models = {m.get("name") for m in raw.get("models") or [] if isinstance(m, dict)}
        methods = {
            (step.get("speculative") or {}).get("method")
            for step in (raw.get("ladder") or {}).values()
            if isinstance(step, dict)
        }
        if model in models and method in methods:
            found.append(str(path))
    return found


def _num(x: Any) -> float | None:
    """A table value as a number; None for null and NaN (a bound of n = 1)."""
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else float(x)


def ladder_step(table: list[dict[str, Any]], model: str, method: str, step: str | None) -> str | None:
    """The ladder step whose R stands for a drafter of `method`: `step` if given, else the only step of that
    method measured on the model, else the one named as the method (`suffix`, not `trident` or `suffix-full`:
    other engine settings, other step times); None when no step of it was measured."""
    steps = sorted({r["config"] for r in table if r["model"] == model and r["method"] == method})
    if step is not None:
        if step not in steps:
            raise SpecsweepError(
                f"advise: step {step} is not a measured {method} step of {model} "
                f"(measured: {', '.join(steps) or 'none'})"
            )
        return step
    if len(steps) <= 1:
        return steps[0] if steps else None
    if method in steps:
        return method
    raise SpecsweepError(
        f"advise: {model} has several {method} steps ({', '.join(steps)}): name the one whose R applies (--step)"
    )


def step_time_ratios(
    tables: Path, model: str, method: str, workload: str | None, config_dir: Path, step: str | None = None
) -> list[dict[str, Any]]:
    """R by concurrency for (model, method) from a run's speedup table, of one ladder step (`ladder_step`: R is
    a step's, never a median over steps of one method): one row per concurrency point (null: all prompts at
    once). DEFAULT_R: R of `workload` at that point (`code`: at every concurrency, `code@b16`: at one); where
    that workload was not measured at a point, or none is named, the fallback R_from says: R's median over the
    run's workloads at that point, its interval the lowest and highest bound."""
    path = Path(tables) / "speedup.parquet"
    if not path.is_file():
        raise SpecsweepError(f"advise: {path} not found (a run's tables folder)")
    from .tables import read_run_table

    table = read_run_table(Path(tables), "speedup.parquet").to_pylist()
    chosen = ladder_step(table, model, method, step)
    rows = [
        r
        for r in table
        if r["model"] == model and r["method"] == method and r["config"] == chosen and _num(r.get("R")) is not None
    ]
    for r in rows:  # R is a ratio of step times: positive and finite, its bounds around it
        lo, hi = _num(r.get("R_lo")), _num(r.get("R_hi"))
        if not (0 < r["R"] < math.inf) or any(x is not None and not 0 < x < math.inf for x in (lo, hi)):
            raise SpecsweepError(
                f"advise: {path}: {model}/{r['workload']}/{r.get('config')}: R {r['R']} [{lo}, {hi}] is not a "
                "positive finite ratio of step times"
            )
    if not rows:
        runs = _configs_measuring(model, method, config_dir)
        where = f"; configs that measure it: {', '.join(runs)}" if runs else "; no config measures it"
        raise SpecsweepError(f"advise: model {model}: no measured step times of {method} in {tables}{where}")
    mine = [r for r in rows if workload is not None and workload in (r["workload"], r["workload"].split("@")[0])]
    out = []
    points = sorted(
        {r.get("concurrency") for r in (mine if mine and workload and "@" in workload else rows)}, key=_order
    )
    for b in points:
        g = [r for r in mine if r.get("concurrency") == b]
        if g:  # DEFAULT_R: the workload's own R at this b
            source = f"same workload ({workload})"
        else:  # the stated fallback: R pooled over the workloads measured at this b
            g = [r for r in rows if r.get("concurrency") == b]
            source = (
                "pooled over workloads (no workload named)"
                if workload is None
                else f"pooled over workloads ({workload} not measured at this point)"
            )
        rs = sorted(r["R"] for r in g)
        mid = len(rs) // 2
        out.append(
            {
                "concurrency": b,
                "R": rs[mid] if len(rs) % 2 else (rs[mid - 1] + rs[mid]) / 2,
                # an R measured on one engine start has no interval: then neither has the prediction
                "R_lo": None if any(_num(r.get("R_lo")) is None for r in g) else min(r["R_lo"] for r in g),
                "R_hi": None if any(_num(r.get("R_hi")) is None for r in g) else max(r["R_hi"] for r in g),
                "R_from": source,
                "step": chosen,
                "workloads": sorted(r["workload"] for r in g),
                "n": min(int(r["n"]) for r in g),
            }
        )
    return out


def _order(b: int | None) -> float:
    return math.inf if b is None else b


def _t_interval(doc: dict[str, Any]) -> tuple[float, float, float]:
    """T from the replay's engine steps, with the relative interval of tokens per request step."""
    import numpy as np

    o = doc["overall"]
    if not o.get("T"):
        raise SpecsweepError(f"advise: replay {doc.get('source')} has no T (made before engine steps were counted)")
    toks = np.array([r["response_tokens"] for r in doc["per_request"]], dtype=np.float64)
    steps = np.array([r["steps"] for r in doc["per_request"]], dtype=np.float64)
    rng = np.random.default_rng(0)
    idx = rng.integers(0, len(toks), size=(2000, len(toks)))
    ratio = toks[idx].sum(1) / steps[idx].sum(1)
    point = toks.sum() / steps.sum()
    t = float(o["T"])
    return t, t * float(np.percentile(ratio, 2.5)) / point, t * float(np.percentile(ratio, 97.5)) / point


def _replay_for(docs: list[dict[str, Any]], b: int | None) -> dict[str, Any]:
    """The replay of a drafter to pair with a measured concurrency point: the one replayed at that
    concurrency, else (all prompts at once: b None) the one replayed with the most requests at once, else
    the nearest; the row names the concurrency its T comes from."""

    def width(doc: dict[str, Any]) -> int:
        c = doc.get("concurrency")
        return doc["overall"]["requests"] if c is None else min(int(c), doc["overall"]["requests"])

    if b is None:
        return max(docs, key=width)
    return min(docs, key=lambda d: (abs(width(d) - b), -width(d)))


def advise(
    replays: list[Path],
    tables: Path,
    model: str,
    workload: str | None = None,
    config_dir: Path | None = None,
    steps: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Predicted speedup per drafter and concurrency point, and the recommendation. A drafter may come with
    replays at several concurrencies (`specsweep replay --concurrency b`): T depends on b (how full the batch
    stays), so each measured point takes the replay nearest to it. R is one ladder step's (`steps`: method ->
    step, else `ladder_step`'s choice)."""
    config_dir = config_dir or Path(__file__).resolve().parents[2] / "config"
    by_method: dict[str, list[dict[str, Any]]] = {}
    for path in replays:
        doc = check_report(read_json(Path(path), "replay report"), f"advise: replay report {path}")
        by_method.setdefault(doc["drafter"]["method"], []).append(doc | {"_path": str(path)})
    rows = []
    for method, docs in by_method.items():
        for r in step_time_ratios(tables, model, method, workload, config_dir, (steps or {}).get(method)):
            doc = _replay_for(docs, r["concurrency"])
            t, t_lo, t_hi = _t_interval(doc)
            rows.append(
                {
                    "drafter": method,
                    "replay": doc["_path"],
                    "replay_concurrency": doc.get("concurrency"),
                    "K": doc["overall"]["K"],
                    "T": t,
                    "T_lo": t_lo,
                    "T_hi": t_hi,
                    **r,
                    "speedup": t / r["R"],
                    "speedup_lo": None if r["R_hi"] is None else t_lo / r["R_hi"],
                    "speedup_hi": None if r["R_lo"] is None else t_hi / r["R_lo"],
                }
            )
    return {"model": model, "tables": str(tables), "rows": rows, "recommendation": recommend(rows)}


def recommend(rows: list[dict[str, Any]]) -> list[str]:
    """Per concurrency point: the drafter with the highest predicted speedup whose interval lies above 1;
    'off' when every drafter's interval lies below 1; otherwise undecided."""
    lines = []
    points = sorted({r["concurrency"] for r in rows}, key=lambda b: math.inf if b is None else b)
    on_up_to: dict[str, Any] = {}
    for b in points:
        here = [r for r in rows if r["concurrency"] == b]
        label = "all prompts at once" if b is None else f"concurrency {b}"
        best = max(here, key=lambda r: r["speedup"])
        if any(r["speedup_lo"] is None for r in here):
            lines.append(f"{label}: undecided (R measured on one engine start: no interval)")
        elif best["speedup_lo"] > 1:
            lines.append(f"{label}: turn on {best['drafter']} (predicted {best['speedup']:.2f}x)")
            on_up_to[best["drafter"]] = b
        elif all(r["speedup_hi"] < 1 for r in here):
            lines.append(f"{label}: keep speculative decoding off (every drafter predicted slower)")
        else:
            lines.append(f"{label}: undecided (the intervals include 1)")
    numeric = [b for b in points if b is not None]
    for drafter, b in on_up_to.items():
        if b is not None and len(numeric) > 1:
            lines.append(f"keep {drafter} on up to concurrency {b} (the highest measured point where it pays)")
    if not numeric:
        lines.append("the run measured one load point (all prompts at once): no curve over concurrency")
    return lines


def markdown(adv: dict[str, Any]) -> str:
    def f(x: Any) -> str:
        return "n/a" if x is None else f"{x:.3f}"

    out = [
        f"# Should speculative decoding be on? {md_text(adv['model'])}",
        "",
        f"Step times from {md_code(adv['tables'])}; acceptance replayed from the traffic.",
        "",
        "| drafter | concurrency | replayed at | K (replayed) | T (replayed) | R (measured; step; from) | speedup "
        "| 95 % CI |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in adv["rows"]:
        b = "all at once" if r["concurrency"] is None else str(r["concurrency"])
        rb = "all at once" if r["replay_concurrency"] is None else str(r["replay_concurrency"])
        src = md_text(r.get("R_from") or "–")
        out.append(
            f"| {md_text(r['drafter'])} | {b} | {rb} | {f(r['K'])} | {f(r['T'])} [{f(r['T_lo'])}, {f(r['T_hi'])}] | "
            f"{f(r['R'])} [{f(r['R_lo'])}, {f(r['R_hi'])}] ({md_text(r['step'])}; {src}) | {f(r['speedup'])} | "
            f"[{f(r['speedup_lo'])}, {f(r['speedup_hi'])}] |"
        )
    out += ["", "## Recommendation", ""] + [f"- {md_text(line)}" for line in adv["recommendation"]]
    out += ["", "## What the prediction assumes", "", ASSUMES, ""]
    return "\n".join(out)


def figure(adv: dict[str, Any], path: Path) -> None:
    """Predicted speedup against concurrency, one line per drafter with its 95 % interval as a band, the 1.0
    line; the point of all prompts at once drawn at the right edge. PNG or SVG by the suffix, deterministic."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .jsonio import atomic_write_bytes

    path = Path(path)
    fmt = path.suffix.lstrip(".").lower()
    if fmt not in ("png", "svg"):
        raise SpecsweepError(f"advise --figure {path}: the file must end in .png or .svg")
    rows = adv["rows"]
    numeric = sorted({r["concurrency"] for r in rows if r["concurrency"] is not None})
    edge = (max(numeric) * 2) if numeric else 1
    rc: Any = {"svg.hashsalt": "specsweep", "svg.fonttype": "path", "font.size": 9, **MPL_RC}
    with plt.rc_context(rc):
        fig, ax = plt.subplots(figsize=(5.5, 3.4), dpi=150)
        for method in sorted({r["drafter"] for r in rows}):
            g = sorted(
                (r for r in rows if r["drafter"] == method),
                key=lambda r: edge if r["concurrency"] is None else r["concurrency"],
            )
            x = [edge if r["concurrency"] is None else r["concurrency"] for r in g]
            (line,) = ax.plot(x, [r["speedup"] for r in g], marker="o", label=method)
            lo = [math.nan if r["speedup_lo"] is None else r["speedup_lo"] for r in g]
            hi = [math.nan if r["speedup_hi"] is None else r["speedup_hi"] for r in g]
            ax.fill_between(x, lo, hi, alpha=0.2, color=line.get_color())
        ax.axhline(1.0, color="black", linewidth=0.8)
        if numeric:
            ax.set_xscale("log", base=2)
        ticks = numeric + ([edge] if any(r["concurrency"] is None for r in rows) else [])
        ax.set_xticks(ticks, [str(b) for b in numeric] + (["all"] if len(ticks) > len(numeric) else []))
        ax.set_xlabel("requests in flight (concurrency)")
        ax.set_ylabel("predicted speedup over vanilla")
        ax.set_title(f"{adv['model']}: predicted T / R, 95 % interval", fontsize=9)
        ax.legend(frameon=False)
        fig.tight_layout()
        escape.inert_figure(fig)
        buf = io.BytesIO()
        meta = {"Software": None} if fmt == "png" else {"Date": None, "Creator": None}
        fig.savefig(buf, format=fmt, metadata=meta)
        plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())
