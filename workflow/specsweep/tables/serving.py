"""The serve-mode tables of a run with serve-mode steps: serve.parquet (each serve cell's latencies, goodput and
whether it meets the config's latency targets), served_vs_offline.parquet (a drafter's speedup through vLLM's
server beside its offline speedup at the same model, workload and b) and serve.md, which is also the serve
section of summary.md. Runs without serve-mode steps get none of them (their tables are as they were)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any, cast

from .. import latency
from ..config import Study
from ..escape import md_text
from .conditions import differing
from .load import _b
from .markdown import _ci, _fmt
from .schema import (
    SERVE_COLUMNS,
    SERVED_OFFLINE_COLUMNS,
    CellRow,
    Docs,
    ServedOfflineRow,
    ServeRow,
    SpeedupRow,
)

#: The conditions a served cell and an offline cell differ in by design (tables.conditions.comparable's keys):
#: everything else must be equal for the two to be set side by side.
MODE_KEYS = frozenset({"mode", "serve", "harness"})
NO_OFFLINE = "no offline cells at this b"


def _median(values: Sequence[Any]) -> float | None:
    vals = [float(v) for v in values if v is not None]
    return float(statistics.median(vals)) if vals else None


def _docs(docs: Docs, model: str, workload: str, step: str, b: int | None) -> list[dict[str, Any]]:
    """The cell documents of a cell's measured repeats, in repeat order."""
    return [d for (m, w, c, bk, _), d in sorted(docs.items()) if (m, w, c, bk) == (model, workload, step, _b(b))]


def serve_rows(study: Study, crow: list[CellRow], sp: list[SpeedupRow], docs: Docs) -> list[ServeRow]:
    """One row per serve-mode cell (its repeats' client summaries, `serve` in the cell document)."""
    spk = {(s["model"], s["workload"], s["config"], s["concurrency"]): s for s in sp}
    out: list[ServeRow] = []
    for c in crow:
        step = c["config"]
        if study.mode(step) != "serve":
            continue
        b = c["concurrency"]
        settings = study.cell_settings(study.cell(c["model"], c["workload"], step))["serve"]
        srv = [d["serve"] for d in _docs(docs, c["model"], c["workload"], step, b)]
        row: dict[str, Any] = dict.fromkeys((n for n, _ in SERVE_COLUMNS), None)
        row |= {k: c[k] for k in ("run", "model", "workload", "config", "method", "concurrency", "status", "n")}
        row |= {
            "baseline": study.baseline_of(step),
            "request_rate": settings["request_rate"],
            "n_starts": c.get("n_starts"),
            "output_tok_s": c.get("output_tok_s_median"),
            "request_throughput": _median([s["request_throughput"] for s in srv]),
            "request_goodput": _median([s["request_goodput"] for s in srv]),
            "goodput_share": _median(
                [s["request_goodput"] / s["request_throughput"] for s in srv if s["request_goodput"] is not None]
            ),
        }
        row |= {f"target_{m}_ms": settings["goodput_ms"].get(f"{m}_ms") for m in latency.TARGETS}
        for m in latency.LATENCIES:
            for q in latency.QUANTILES:
                row[f"{m}_ms_{q}"] = _median([s[f"{m}_ms"][q] for s in srv])
        row["meets_target"] = latency.meets(row)
        s = spk.get((c["model"], c["workload"], step, b))
        if s is not None:
            row |= {k: s.get(k) for k in ("speedup", "speedup_lo", "speedup_hi")}
            row["verdict"] = s.get("verdict") if s.get("speedup") is not None else None
        out.append(cast(ServeRow, row))
    return out


def served_vs_offline_rows(
    study: Study, crow: list[CellRow], sp: list[SpeedupRow], docs: Docs
) -> list[ServedOfflineRow]:
    """Each serve-mode drafter cell's speedup beside its offline twin's (config.Study.offline_twin) at the same
    (model, workload, b), where the run measured both and their cells agree in every condition but the mode;
    otherwise the row says so (`status`, `note`) and compares nothing."""
    spk = {(s["model"], s["workload"], s["config"], s["concurrency"]): s for s in sp}
    cells = {(c["model"], c["workload"], c["config"], c["concurrency"]): c for c in crow}
    out: list[ServedOfflineRow] = []
    for c in crow:
        step = c["config"]
        if study.mode(step) != "serve" or step in study.baselines:
            continue
        m, w, b = c["model"], c["workload"], c["concurrency"]
        twin = study.offline_twin(step)
        base, twin_base = study.baseline_of(step), (study.baseline_of(twin) if twin else None)
        row: dict[str, Any] = dict.fromkeys((n for n, _ in SERVED_OFFLINE_COLUMNS), None)
        row |= {"run": study.run, "model": m, "workload": w, "concurrency": b, "config": step, "baseline": base}
        row |= {"offline_config": twin, "offline_baseline": twin_base, "served_n_starts": c.get("n_starts")}
        row["served_output_tok_s"] = c.get("output_tok_s_median")
        s = spk.get((m, w, step, b))
        if s is not None and s.get("speedup") is not None:
            row |= {f"served_{k}": s.get(k) for k in ("speedup", "speedup_lo", "speedup_hi", "verdict")}
        o = spk.get((m, w, twin, b)) if twin else None
        oc = cells.get((m, w, twin, b)) if twin else None
        if oc is not None:
            row |= {"offline_output_tok_s": oc.get("output_tok_s_median"), "offline_n_starts": oc.get("n_starts")}
        if o is not None and o.get("speedup") is not None:
            row |= {f"offline_{k}": o.get(k) for k in ("speedup", "speedup_lo", "speedup_hi", "verdict")}
        row["status"], row["note"] = _status(study, docs, row, c, oc)
        if row["status"] == "compared":
            row["speedup_ratio"] = row["served_speedup"] / row["offline_speedup"]
        out.append(cast(ServedOfflineRow, row))
    return out


def _status(
    study: Study, docs: Docs, row: dict[str, Any], served: CellRow, offline: CellRow | None
) -> tuple[str, str | None]:
    m, w, b, step, twin = row["model"], row["workload"], row["concurrency"], row["config"], row["offline_config"]
    at = latency.b_text(b)
    if twin is None:
        return NO_OFFLINE, f"the run has no offline step with the ladder settings of {step}"
    if row["offline_speedup"] is None:
        what = "not measured" if offline is None or not offline.get("n") else "no speedup over its baseline"
        return NO_OFFLINE, f"{twin} {at}: {what}"
    if row["served_speedup"] is None:
        return "no served speedup", f"{step} {at}: no speedup over {row['baseline']} ({served['status']})"
    diff: list[str] = []
    for a, o in ((step, twin), (row["baseline"], row["offline_baseline"])):
        sd, od = _docs(docs, m, w, a, b), _docs(docs, m, w, o, b)
        diff += [k for k in differing(sd[0], od[0]) if k not in MODE_KEYS and k not in diff]
    if diff:
        return "not comparable", f"served and offline cells measured under different {', '.join(diff)}"
    return "compared", None


def _lat(r: ServeRow, m: str) -> str:
    vals = [r.get(f"{m}_ms_{q}") for q in latency.QUANTILES]
    return " / ".join(_fmt(v, 1) for v in vals) if any(v is not None for v in vals) else "–"


def _speedup(v: ServedOfflineRow, side: str) -> str:
    """A side's speedup with its interval and verdict, or –."""
    got = cast("dict[str, Any]", v)
    if got.get(f"{side}_speedup") is None:
        return "–"
    point = _ci(got[f"{side}_speedup"], got.get(f"{side}_speedup_lo"), got.get(f"{side}_speedup_hi"), 3)
    return f"{point} {got.get(f'{side}_verdict') or ''}".strip()


def serve_markdown(study: Study, srows: list[ServeRow], vrows: list[ServedOfflineRow]) -> list[str]:
    """The serve section: the serve cells' latencies and goodput, where each step stops meeting the latency
    target, and the served speedups beside the offline ones (serve.md, and the end of summary.md)."""
    rates = sorted({float(x) for r in srows if (x := r.get("request_rate")) is not None})
    rate = f"{', '.join(f'{x:g}' for x in rates)} requests/s (seeded Poisson arrivals)" if rates else "all at once"
    targets = latency.target_text(latency.targets_of(srows[0])) if srows else latency.NO_TARGET
    lines = [
        "## Serving",
        "",
        "Serve-mode cells, measured through vLLM's OpenAI-compatible server by vLLM's benchmark client "
        f"(vllm.benchmarks.serve) at b requests in flight at most, arriving at {rate}. Latencies in ms over "
        "requests (median / p90 / p99 per repeat, then the median over repeats; no interval); goodput: the "
        f"requests per second that meet every target ({targets}), and their share of all requests. Targets: "
        f"{latency.TARGET_RULE}. Speedup: over {', '.join(sorted({r['baseline'] for r in srows}))} at the same b.",
        "",
        "| model | workload | config | b | n | tok/s | TTFT ms | TPOT ms | ITL ms | E2EL ms | goodput req/s (share) "
        "| meets target | speedup | verdict |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---|",
    ]
    for r in srows:
        share = r.get("goodput_share")
        goodput = _fmt(r.get("request_goodput")) + (f" ({100 * share:.0f} %)" if share is not None else "")
        meets = {True: "yes", False: "no", None: "–"}[r.get("meets_target")]
        lines.append(
            f"| {md_text(r['model'])} | {md_text(r['workload'])} | {md_text(r['config'])} | "
            f"{_fmt(r['concurrency'])} | {_fmt(r.get('n_starts'))} | {_fmt(r.get('output_tok_s'), 1)} | "
            + " | ".join(_lat(r, m) for m in latency.LATENCIES)
            + f" | {goodput} | {meets} | {_ci(r.get('speedup'), r.get('speedup_lo'), r.get('speedup_hi'), 3)} | "
            f"{r.get('verdict') or '–'} |"
        )
    lines += [
        "",
        "### Latency target",
        "",
        "Where each step stops meeting the target, over its measured b in order (all prompts at once last).",
        "",
        "| model | workload | config | target | measured | where it meets the target |",
        "|---|---|---|---|---|---|",
    ]
    for lim in latency.limits(cast("list[dict[str, Any]]", srows)):
        shown = ", ".join(f"{latency.b_text(b)} {'met' if ok else 'missed'}" for b, ok in lim.points) or "–"
        lines.append(
            f"| {md_text(lim.model)} | {md_text(lim.workload)} | {md_text(lim.step)} | "
            f"{latency.target_text(lim.targets)} | {shown} | {lim.note} |"
        )
    lines += [
        "",
        "### Served against offline",
        "",
        "Each serve-mode drafter's speedup over the serve baseline beside the speedup of the offline step with the "
        "same ladder settings over the offline baseline, at the same model, workload and b, where the run measured "
        "both under the same conditions but the mode (tables/conditions.py); the ratio served / offline has no "
        "interval.",
        "",
        "| model | workload | b | config | offline config | served speedup | offline speedup | served / offline "
        "| status |",
        "|---|---|---:|---|---|---:|---:|---:|---|",
    ]
    for v in vrows:
        status = v["status"] + (f": {md_text(v['note'])}" if v.get("note") else "")
        lines.append(
            f"| {md_text(v['model'])} | {md_text(v['workload'])} | {_fmt(v['concurrency'])} | "
            f"{md_text(v['config'])} | {md_text(v.get('offline_config') or '–')} | "
            f"{_speedup(v, 'served')} | {_speedup(v, 'offline')} | {_fmt(v.get('speedup_ratio'), 3)} | {status} |"
        )
    if not vrows:
        lines.append("| – | – | – | – | – | – | – | – | no serve-mode drafter cell |")
    return lines
