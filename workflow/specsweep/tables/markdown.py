"""The run's summary.md: its cell table, GPU-holding time, occupancy, crossovers and the cells not complete."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .. import crossover, inflight, stats
from ..config import Study
from ..escape import md_code, md_text
from .rows import _label
from .schema import CellRow, SpeedupRow


def _fmt(v: Any, digits: int = 2) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def _ci(point: Any, lo: Any, hi: Any, digits: int = 2) -> str:
    if point is None:
        return "–"
    if lo is None:
        return _fmt(point, digits)
    shown = digits  # more digits where the interval's ends would print alike (a nonzero width shown as zero)
    while shown < digits + 3 and lo != hi and f"{lo:.{shown}f}" == f"{hi:.{shown}f}":
        shown += 1
    return f"{point:.{shown}f}" + stats.interval_text(lo, hi, f".{shown}f")


def _exact(point: Any, lo: Any, hi: Any, same: Any, digits: int = 2) -> str:
    """A ratio with its interval, or exact where every engine start of both sides gave the same value
    (`same`: in how many starts): `x (same in n starts)`, never a zero-width interval."""
    if point is not None and same:
        return f"{point:.{digits}f} (same in {same} starts)"
    return _ci(point, lo, hi, digits)


def _request(r: Mapping[str, Any]) -> str:
    """A cell's per-request output tok/s, `median / p10` over its requests, or that it holds none."""
    med, p10 = r.get("request_tok_s_median"), r.get("request_tok_s_p10")
    if not r.get("n"):
        return "–"
    if med is None:
        return "no per-request data"
    return f"{med:.1f} / {p10:.1f}"


def _replication(r: Mapping[str, Any]) -> str:
    """'engine starts', 'N passes on one engine' (technical replicates) or 'N passes on M engines' (each
    engine start's passes reduced to one value); – for an unmeasured cell."""
    n, starts = r.get("n"), r.get("n_starts")
    if not n:
        return "–"
    if n == starts:
        return stats.ENGINE_STARTS
    return f"{n} {stats.ONE_ENGINE}" if starts == 1 else f"{n} passes on {starts} engines"


def summary_markdown(
    study: Study,
    crow: list[CellRow],
    sp: list[SpeedupRow],
    gt: dict[str, Any],
    xrows: list[dict[str, Any]] | None = None,
    host: str = "",
    serve: Sequence[str] = (),
) -> str:
    """The run's summary. A run with a concurrency axis gets a `b` column (– for all prompts at once) and the
    crossovers, a run with serve-mode steps its serve section (`serve`: tables.serving.serve_markdown); other
    runs' summaries are as they were before either existed."""
    axis = any(r["concurrency"] is not None for r in crow)
    lines = [f"# specsweep run {md_code(study.run)}", ""]
    done = sum(1 for r in crow if r["status"] == "ok")
    n_meas = sum(r["n"] for r in crow)
    engines = stats.REPEATS_ARE[study.replication]
    lines.append(
        f"{done} of {len(crow)} cells complete ({n_meas} of {len(crow) * study.repeats} measurements, "
        f"{study.repeats} repeat(s) each, {engines}). n = engine starts. tok/s: the geometric mean over engine "
        "starts, the value the speedup divides (speedup = tok/s / the baseline's tok/s); other values medians over "
        "repeats; [95 % interval over engine starts: t on log values (stats.cell_ci), a speedup's as its verdict "
        "rule below, T's Welch t (stats.ratio_ci); none below 2 engine starts; `x (same in n starts)`: every start "
        "of both sides gave x]; K and α have no interval here (their interval, over prompts, is in cells.parquet "
        "where the cells hold per-request data); CV = coefficient of variation of tok/s over repeats. request "
        "tok/s: each request's output tokens over its time from arrival to its last token, median / 10th "
        "percentile over the requests of a pass (median over passes), and the speedup on the median: a batch "
        "whose speedup is set by its longest request has a request speedup unlike its own."
    )
    lines += ["", f"Verdicts: {stats.VERDICT_RULE}"]
    at_b = [r for r in crow if r["concurrency"] is not None and r.get("n")]
    occ = any(r.get("_occupancy_recorded") for r in at_b)  # an occupancy column only where a cell records one
    lines += [
        "",
        f"| model | workload | config | {'b | TPOT ms | ' if axis else ''}{'occupancy | ' if occ else ''}n | "
        "replication | tok/s | CV | speedup | verdict | request tok/s | request speedup | K | α | R | R decode | T | "
        "in/out tokens | match baseline |",
        f"|---|---|---|{'---:|---:|' if axis else ''}{'---:|' if occ else ''}---:|---|---:|---:|---:|---|"
        "---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    spk = {(s["model"], s["workload"], s["config"], s["concurrency"]): s for s in sp}
    low = {(r["model"], r["workload"], r["config"], r["concurrency"]) for r in at_b if r.get("_occupancy_low")}
    for r in crow:
        s = spk.get((r["model"], r["workload"], r["config"], r["concurrency"]), {})
        tpot = r.get("tpot_s_median")
        conc = f"{_fmt(r['concurrency'])} | {_fmt(1000 * tpot if tpot is not None else None, 1)} | " if axis else ""
        conc += f"{_occupancy_text(r)} | " if occ else ""
        verdict = s.get("verdict") or "–"
        if (
            s
            and {
                (r["model"], r["workload"], c, r["concurrency"])
                for c in (r["config"], s.get("baseline") or study.baseline)
            }
            & low
        ):
            verdict += f" (occupancy below {100 * inflight.MIN_OCCUPANCY:.0f} % of b)"
        match = (
            # prompts None: its repeats ran different numbers of their pool's cycles (a pass at b runs cycles until
            # its minimum seconds are met), so no one count of requests stands beside the matched ones
            f"{r['prompts_match_baseline_min']}/{r['prompts'] if r.get('prompts') is not None else '–'}"
            if r.get("prompts_match_baseline_min") is not None
            else "–"
        )
        cv = r.get("output_tok_s_cv")
        lines.append(
            f"| {md_text(r['model'])} | {md_text(r['workload'])} | {md_text(r['config'])} | "
            f"{conc}{_fmt(r.get('n_starts'))} | "
            f"{_replication(r)} | "
            f"{_ci(r.get('output_tok_s_gm'), r.get('output_tok_s_lo'), r.get('output_tok_s_hi'), 1)} | "
            f"{_fmt(100 * cv, 1) + ' %' if cv is not None else '–'} | "
            f"{_ci(s.get('speedup'), s.get('speedup_lo'), s.get('speedup_hi'), 3)} | {verdict} | "
            f"{_request(r)} | {_fmt(s.get('request_speedup'), 3)} | "
            f"{_fmt(r.get('K_median'))} | {_fmt(r.get('alpha_median'), 3)} | {_fmt(s.get('R'))} | "
            f"{_fmt(s.get('R_decode'))} | {_exact(s.get('T'), s.get('T_lo'), s.get('T_hi'), s.get('T_same_starts'))} | "
            f"{_fmt(r.get('input_tokens_mean'), 0)}/{_fmt(r.get('output_tokens_mean'), 0)} | {match} |"
        )
    lines += [
        "",
        f"GPU-holding time: {gt['total_s']:.1f} s over {gt['engine_starts']} engine start(s), "
        f"{gt['generating_s']:.1f} s generating (generating_share {_fmt(gt['generating_share'], 3)})."
        if gt.get("total_s")
        else "",
    ]
    if host:
        lines += ["", host]
    lines += _occupancy_lines(at_b, occ, low)
    if xrows:
        lines += [
            "",
            "## Crossover",
            "",
            "b* where each drafter's speedup over the baseline at the same concurrency falls through 1, "
            "interpolated on log b, with [the b where the interval's lower and upper bounds do], in the "
            "significant figures the interval supports; given only where the speedup crosses 1 once with both "
            "ends inside the measured b (otherwise the note names the measured b each crossing lies between). "
            "From the smallest measured b to the largest: the speedup's factor split exactly into its tokens per "
            "step and step time over the baseline's (speedup = T / R at every b), and each one's share of the "
            "change in log speedup.",
            "",
            "| model | workload | step | b* [interval] | n | note | smallest to largest b: speedup = T / R |",
            "|---|---|---|---|---:|---|---|",
        ]
        lines += [
            f"| {md_text(x['model'])} | {md_text(x['workload'])} | {md_text(x['step'])} | "
            f"{crossover.shown(x['b_star'], x['b_star_lo'], x['b_star_hi']) if x['b_star'] is not None else '–'} | "
            f"{x['n']} | {x['note']} | {_split_text(x)} |"
            for x in xrows
        ]
    if serve:
        lines += ["", *serve]
    for title, status in (("Failed cells", "failed"), ("Partial cells", "partial"), ("Missing cells", "missing")):
        group = [r for r in crow if r["status"] == status]
        if group:
            lines += ["", f"## {title}", ""]
            lines += [
                f"- {md_text(_label(r['model'], r['workload'], r['config'], r['concurrency']))} "
                f"({r['n']}/{r['repeats']})" + (f": {md_text(r['error'])}" if r["error"] else "")
                for r in group
            ]
    return "\n".join(lines) + "\n"


def _split_text(x: dict[str, Any]) -> str:
    """A crossover row's change from its smallest b to its largest, split into T and R; – where it has none."""
    parts = crossover.split_of(x)
    return parts.text() if parts else "–"


def _occupancy_text(r: CellRow) -> str:
    """A cell's occupancy in the summary: its lowest pass's mean requests in flight over b, flagged below
    inflight.MIN_OCCUPANCY; "not recorded" for a cell at b measured before it was recorded."""
    if r["concurrency"] is None or not r.get("n"):
        return "–"
    if not r.get("_occupancy_recorded"):
        return "not recorded"
    share = r.get("_occupancy")
    if share is None:
        return "–"
    return f"{100 * share:.0f} %" + (" (low)" if r.get("_occupancy_low") else "")


def _occupancy_lines(at_b: list[CellRow], occ: bool, low: set[tuple[Any, ...]]) -> list[str]:
    """The summary's note on occupancy: which cells at b held fewer than MIN_OCCUPANCY of b in flight, or that
    no cell recorded it."""
    least = f"{100 * inflight.MIN_OCCUPANCY:.0f} %"
    if not at_b:
        return []
    if not occ:
        return [
            "",
            "Occupancy not recorded: these cells at b were measured before the requests in flight over the whole "
            "timed pass were recorded, so a cell at b may have held fewer than b on average (one wave of "
            "requests, its tail draining).",
        ]
    out = [
        "",
        "Occupancy: the mean requests in flight over each cell's whole timed pass (vLLM's scheduler stats per "
        f"step), over b, its lowest pass; below {least} a cell's b is not the b it is labelled with, and the "
        "verdicts it enters carry a note.",
    ]
    if low:
        out += ["", f"Below {least} of b: " + ", ".join(_label(*k) for k in sorted(low, key=str)) + "."]
    return out
