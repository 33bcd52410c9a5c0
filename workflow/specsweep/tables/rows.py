"""The statistics rows: a cell row per cell (medians, intervals and CVs over its repeats) and a speedup row
per non-baseline cell against the baseline cell of its model, workload and concurrency."""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping
from typing import Any, cast

import numpy as np

from .. import inflight, stats
from ..config import Study
from ..errors import SpecsweepError
from .conditions import differing, same_cell_conditions
from .load import _b, concurrency_of
from .schema import (
    CELL_COLUMNS,
    CELL_ID_COLUMNS,
    LATENCY_METRICS,
    SPEEDUP_COLUMNS,
    STAT_METRICS,
    CellRow,
    Docs,
    MeasurementRow,
    Mismatch,
    SpeedupRow,
)

#: The columns a speedup row takes from its cell row as they are.
ID_KEYS = ("run", "model", "model_params_b", "workload", "config", "method", "concurrency")


def _label(model: str, workload: str, step: str, b: int | None) -> str:
    """A cell's name in messages: model/workload/step, and its concurrency where it has one."""
    return f"{model}/{workload}/{step}" + ("" if b is None else f" at concurrency {b}")


def _one(values: list[Any]) -> Any:
    """The value all repeats agree on (None when they disagree or there is none)."""
    vals = {json.dumps(v, sort_keys=True) for v in values}
    return values[0] if len(vals) == 1 else None


def cell_rows(
    study: Study, rows: list[MeasurementRow], docs: Docs, allow_mismatch: bool, mismatches: list[Mismatch]
) -> list[CellRow]:
    out: list[CellRow] = []
    plain = cast("list[dict[str, Any]]", rows)  # read by metric name below
    for cell in study.cells:
        b = concurrency_of(study, cell)
        key = (cell.model, cell.workload, cell.step, b)
        mine = [r for r in plain if (r["model"], r["workload"], r["config"], r["concurrency"]) == key]
        ok = [r for r in mine if r["status"] == "ok"]
        first = mine[0]
        row: dict[str, Any] = dict.fromkeys((n for n, _ in CELL_COLUMNS), None)
        row |= {k: first[k] for k, _ in CELL_ID_COLUMNS} | {"concurrency": b}
        failed = [r for r in mine if r["status"] == "failed"]
        row |= {
            "n": len(ok),
            "repeats": study.repeats,
            "status": "ok" if len(ok) == study.repeats else ("partial" if ok else ("failed" if failed else "missing")),
            "error": failed[0]["error"] if failed else None,
        }
        if ok:
            repeat_docs = [docs[(*key[:3], _b(b), r["repeat"])] for r in ok]
            conds = [same_cell_conditions(d) for d in repeat_docs]
            diff = sorted(k for k in conds[0] if any(c[k] != conds[0][k] for c in conds[1:]))
            if diff:
                mismatches.append({"cell": _label(*key), "between": "repeats", "fields": diff})
                if not allow_mismatch:
                    raise SpecsweepError(
                        f"cell {_label(*key)}: its repeats were measured under different {', '.join(diff)} "
                        f"(rerun them, or pass --allow-mismatch)"
                    )
            starts = [r["_start"] for r in ok]
            row["n_starts"] = len(set(starts))
            row["replication"] = stats.ONE_ENGINE if row["n_starts"] == 1 < len(ok) else stats.ENGINE_STARTS
            for m in STAT_METRICS:
                vals = [r[m] for r in ok]
                lo, hi = stats.cell_ci(stats.per_start(vals, starts))
                if lo is not None and lo == hi:  # the same on every start (its CV 0): exact, no zero-width interval
                    lo = hi = None
                row |= {f"{m}_median": stats.median(vals), f"{m}_lo": lo, f"{m}_hi": hi, f"{m}_cv": stats.cv(vals)}
            row["output_tok_s_gm"] = stats.geomean(stats.per_start([r["output_tok_s"] for r in ok], starts))
            reqs = [d.get("requests") for d in repeat_docs]
            pools = {_pool_prompts(d) for d in repeat_docs}
            if len(pools) > 1:
                raise SpecsweepError(f"cell {cell.key}: its repeats ran over prompt pools of {sorted(map(str, pools))}")
            row |= prompt_interval(row["K_median"], row["alpha_median"], reqs, cell.key, pools.pop())
            row |= request_speed(reqs)
            for k in ("drafts", "draft_tokens", "accepted"):
                vals = [r[k] for r in ok]
                row[k] = sum(vals) if all(v is not None for v in vals) else None
            pos = [r["accepted_per_pos"] for r in ok if r["accepted_per_pos"] is not None]
            if pos:
                n = max(len(p) for p in pos)
                row["accepted_per_pos"] = [sum(p[i] if i < len(p) else 0 for p in pos) for i in range(n)]
            for k in (
                "prompts",
                "gpu_memory_utilization",
                "cudagraph_mode_requested",
                "cudagraph_mode_effective",
                "async_scheduling",
                "model_runner",
                "device_name",
                "vllm_version",
            ):
                row[k] = _one([r[k] for r in ok])
            row["input_tokens_mean"] = stats.median([r["input_tokens_mean"] for r in ok])
            row["output_tokens_mean"] = stats.median([r["output_tokens_mean"] for r in ok])
            matches = [got for r in ok if (got := r.get("prompts_match_baseline")) is not None]
            row["prompts_match_baseline_min"] = min(matches) if matches else None
            for m in LATENCY_METRICS:  # per repeat a median (or p90) over requests; here its median over repeats
                vals = [v for r in ok if (v := r[m]) is not None]
                row[m] = float(statistics.median(vals)) if vals else None
            row |= _occupancy_of(ok) if b is not None else {}
        out.append(cast(CellRow, row))
    return out


def _occupancy_of(ok: list[dict[str, Any]]) -> dict[str, Any]:
    """A cell at b: the lowest occupancy (mean requests in flight over b) of its passes, and whether each pass
    recorded one (not columns: the summary shows them, inflight.MIN_OCCUPANCY flags a cell below it)."""
    shares = [r["_occupancy"] for r in ok if r.get("_occupancy") is not None]
    recorded = all(r.get("_occupancy_recorded") for r in ok)
    return {
        "_occupancy": min(shares) if recorded and shares else None,
        "_occupancy_recorded": recorded,
        "_occupancy_low": recorded and bool(shares) and min(shares) < inflight.MIN_OCCUPANCY,
    }


def request_tok_s(requests: Mapping[str, Any] | None) -> list[float] | None:
    """One pass's per-request output tok/s from its cell JSON's `requests` block: a request's output tokens
    over its time from arrival to its last token, ttft_s + (output_tokens - 1) x tpot_s (a request of one token:
    its ttft). None when the pass holds no per-request latencies (cells from before they were recorded); a
    request without them is left out."""
    if not requests or "ttft_s" not in requests or "tpot_s" not in requests:
        return None
    out = []
    for o, ttft, tpot in zip(requests["output_tokens"], requests["ttft_s"], requests["tpot_s"], strict=True):
        if o is None or o < 1 or ttft is None or (o > 1 and tpot is None):
            continue
        wall = ttft + (o - 1) * (tpot or 0.0)
        if wall > 0:
            out.append(o / wall)
    return out or None


def request_speed(requests: list[dict[str, Any] | None]) -> dict[str, Any]:
    """A cell's per-request output tok/s: per pass the median and the 10th percentile over its requests
    (request_tok_s), each the median over the cell's passes; None where a pass lacks per-request latencies."""
    per = [request_tok_s(r) for r in requests]
    if not per or any(p is None for p in per):
        return {"request_tok_s_median": None, "request_tok_s_p10": None}
    med = [float(np.quantile(p, 0.5)) for p in per if p]
    p10 = [float(np.quantile(p, 0.1)) for p in per if p]
    return {"request_tok_s_median": stats.median(med), "request_tok_s_p10": stats.median(p10)}


def _pool_prompts(doc: dict[str, Any]) -> int | None:
    """The prompts of the pool a cell's pass at b cycled over (dataset.pool.prompts, engine.pool_record, checked
    by cells.load); None for a cell of all prompts at once."""
    pool = doc["dataset"].get("pool")
    return None if pool is None else int(pool["prompts"])


def prompt_interval(
    k: float | None,
    alpha: float | None,
    requests: list[dict[str, Any] | None],
    cell: str,
    pool: int | None = None,
) -> dict[str, Any]:
    """K's and alpha's 95 % interval over prompts, from the repeats' per-request data (the cell JSON's
    `requests`: output_tokens, gen_steps), and the number of prompts resampled. The cluster bootstrap
    (stats.prompt_bootstrap) gives the interval of tokens per decode step; its relative width on the accepted
    part (per-request tokens per decode step - 1) is carried onto K - 1 and alpha, which vLLM's counters give
    (K = 1 + alpha * mean draft length). `pool`: the prompts a pass at b cycled over, its repeats perhaps over
    different numbers of cycles (stats.prompt_bootstrap). No interval (None, K_prompts None) when a repeat lacks
    per-request data, never a zero-width one."""
    out: dict[str, Any] = {
        "K_lo": None,
        "K_hi": None,
        "alpha_lo": None,
        "alpha_hi": None,
        "K_prompts": None,
        "K_same_prompts": None,
    }
    if k is None or not requests or any(r is None for r in requests):
        return out
    try:
        got = stats.prompt_bootstrap(
            [r["output_tokens"] for r in requests if r is not None],
            [r["gen_steps"] for r in requests if r is not None],
            pool=pool,
        )
    except (KeyError, TypeError) as e:
        raise SpecsweepError(f"cell {cell}: its requests block lacks output_tokens or gen_steps ({e})") from e
    except SpecsweepError as e:
        raise SpecsweepError(f"cell {cell}: {e}") from e
    if got is None:
        return out
    point, lo, hi, prompts = got
    if lo == hi or point <= 1.0 or k == 1.0:  # no accepted part to carry a width onto
        # K = 1 (vLLM's counters: no draft token accepted on any prompt) or every prompt alike: exact, never a
        # zero-width interval
        exact = lo == hi or k == 1.0
        return out | {"K_prompts": prompts, "K_same_prompts": prompts if exact else None}
    f_lo, f_hi = (lo - 1.0) / (point - 1.0), (hi - 1.0) / (point - 1.0)
    out |= {"K_lo": 1.0 + (k - 1.0) * f_lo, "K_hi": 1.0 + (k - 1.0) * f_hi, "K_prompts": prompts}
    if alpha is not None:
        out |= {"alpha_lo": alpha * f_lo, "alpha_hi": alpha * f_hi}
    return out


def speedup_rows(
    study: Study,
    rows: list[MeasurementRow],
    crow: list[CellRow],
    docs: Docs,
    allow_mismatch: bool,
    mismatches: list[Mismatch],
) -> list[SpeedupRow]:
    by_cell = {(c["model"], c["workload"], c["config"], c["concurrency"]): c for c in crow}

    by_metric: dict[str, dict[tuple[Any, ...], list[float]]] = {}

    def series(model: str, workload: str, step: str, b: int | None, metric: str) -> list[float]:
        """The cell's values of metric, one per engine start (stats.cell_series)."""
        if metric not in by_metric:
            by_metric[metric] = stats.cell_series(rows, metric)
        return by_metric[metric].get((model, workload, step, b), [])

    # VERDICT_RULE's interval: Welch's, each cell's own between-start spread (the band is fixed: stats.BAND)
    out: list[SpeedupRow] = []
    for c in crow:
        if c["config"] in study.baselines:
            continue
        # like with like: the baseline of the step's own mode (offline or serve) at the same concurrency
        baseline = study.baseline_of(c["config"])
        b = c["concurrency"]
        base = by_cell.get((c["model"], c["workload"], baseline, b))
        row: dict[str, Any] = dict.fromkeys((n for n, _ in SPEEDUP_COLUMNS), None)
        row |= {k: cast("dict[str, Any]", c)[k] for k in ID_KEYS}
        row |= {"baseline": baseline, "n": c["n"], "n_baseline": base["n"] if base else 0, "status": "missing"}
        row |= {"n_starts": c["n_starts"], "n_starts_baseline": base["n_starts"] if base else None}
        if base is None or not c["n"] or not base["n"]:
            out.append(cast(SpeedupRow, row))
            continue
        mk, wk, ck = c["model"], c["workload"], c["config"]
        spec_docs = [d for (m, w, cc, bk, _), d in sorted(docs.items()) if (m, w, cc, bk) == (mk, wk, ck, _b(b))]
        base_docs = [d for (m, w, cc, bk, _), d in sorted(docs.items()) if (m, w, cc, bk) == (mk, wk, baseline, _b(b))]
        diff = differing(spec_docs[0], base_docs[0])
        if diff:
            mismatches.append({"cell": _label(mk, wk, ck, b), "between": "baseline", "fields": diff})
            if not allow_mismatch:
                raise SpecsweepError(
                    f"cell {_label(mk, wk, ck, b)}: not comparable with its baseline cell ({baseline}), "
                    f"measured under different {', '.join(diff)} (rerun one of them, or pass --allow-mismatch)"
                )
        metrics = ("output_tok_s", "step_time_ms", "decode_step_time_ms", "tokens_per_step")
        technical = stats.ONE_ENGINE in (c["replication"], base["replication"])
        row |= {
            "status": "ok" if c["status"] == "ok" and base["status"] == "ok" else "partial",
            "replication": stats.ONE_ENGINE if technical else stats.ENGINE_STARTS,
        }
        row |= compare_cells(
            c,
            base,
            {m: series(mk, wk, ck, b, m) for m in metrics},
            {m: series(mk, wk, baseline, b, m) for m in metrics},
            technical=technical,
        )
        row |= {m: cast("dict[str, Any]", c)[m] for m in LATENCY_METRICS}
        out.append(cast(SpeedupRow, row))
    return out


def compare_cells(
    c: Mapping[str, Any],
    base: Mapping[str, Any],
    mine: dict[str, list[Any]],
    theirs: dict[str, list[Any]],
    technical: bool = False,
) -> dict[str, Any]:
    """The speedup row's numbers of cell row `c` against its baseline row `base`, from the values of
    output_tok_s, step_time_ms, decode_step_time_ms and tokens_per_step on each side, one per engine start:
    the ratios of geometric means over engine starts with their intervals: tok/s's under VERDICT_RULE
    (stats.speedup_ci), the others Welch's (stats.ratio_ci), a ratio whose every start agrees on both sides
    exact (no interval; `*_same_starts` says in how many starts); the verdict at the fixed band stats.BAND
    (`technical`: a side's repeats are passes on one engine, so no verdict); the geometric means the speedup
    divides (output_tok_s, baseline_output_tok_s), the per-request output tok/s of both sides with their ratio,
    and the settings of both sides."""

    def ratio(metric: str) -> tuple[float | None, float | None, float | None]:
        point, lo, hi = stats.ratio_ci(mine[metric], theirs[metric])
        if stats.same_on_every_start(mine[metric], theirs[metric]) or (lo is not None and lo == hi):
            lo = hi = None  # the same on every start of both sides: exact (its *_same_starts), no interval
        if point is not None:  # the ratio of geometric means over engine starts: the centre of its interval
            return point, lo, hi
        a, b = c.get(f"{metric}_median"), base.get(f"{metric}_median")
        return (a / b if a is not None and b else None), lo, hi

    sp, lo, hi = stats.speedup_ci(mine["output_tok_s"], theirs["output_tok_s"])
    if sp is None:
        sp = ratio("output_tok_s")[0]
    band = stats.BAND
    r_, r_lo, r_hi = ratio("step_time_ms")
    rd, rd_lo, rd_hi = ratio("decode_step_time_ms")
    t, t_lo, t_hi = ratio("tokens_per_step")
    out = {
        "speedup": sp,
        "speedup_lo": lo,
        "speedup_hi": hi,
        "band": band,
        "verdict": stats.verdict(sp, lo, hi, band=band, technical=technical),
        "gain_pct": 100.0 * (sp - 1.0) if sp is not None else None,
        "K": c["K_median"],
        "K_lo": c["K_lo"],
        "K_hi": c["K_hi"],
        "alpha": c["alpha_median"],
        "R": r_,
        "R_lo": r_lo,
        "R_hi": r_hi,
        "R_decode": rd,
        "R_decode_lo": rd_lo,
        "R_decode_hi": rd_hi,
        "T": t,
        "T_lo": t_lo,
        "T_hi": t_hi,
        "K_same_prompts": c.get("K_same_prompts"),
        "R_same_starts": stats.same_on_every_start(mine["step_time_ms"], theirs["step_time_ms"]),
        "R_decode_same_starts": stats.same_on_every_start(mine["decode_step_time_ms"], theirs["decode_step_time_ms"]),
        "T_same_starts": stats.same_on_every_start(mine["tokens_per_step"], theirs["tokens_per_step"]),
        "prompts": c["prompts"],
        "prompts_match_baseline": c["prompts_match_baseline_min"],
    }
    req, base_req = c.get("request_tok_s_median"), base.get("request_tok_s_median")
    req10, base10 = c.get("request_tok_s_p10"), base.get("request_tok_s_p10")
    out |= {
        "request_tok_s_median": req,
        "baseline_request_tok_s_median": base_req,
        "request_tok_s_p10": req10,
        "baseline_request_tok_s_p10": base10,
        "request_speedup": req / base_req if req is not None and base_req else None,
        "request_speedup_p10": req10 / base10 if req10 is not None and base10 else None,
    }
    for name, col in (
        ("output_tok_s", "output_tok_s_gm"),  # the geometric means over engine starts the speedup divides
        ("tokens_per_step", "tokens_per_step_median"),
        ("gen_wall_s", "gen_wall_s_median"),
        ("gpu_util_mean", "gpu_util_mean_median"),
        ("async_scheduling", "async_scheduling"),
        ("model_runner", "model_runner"),
        ("cudagraph_mode_effective", "cudagraph_mode_effective"),
    ):
        out[name], out[f"baseline_{name}"] = c.get(col), base.get(col)
    return out
