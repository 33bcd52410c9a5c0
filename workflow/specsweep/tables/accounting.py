"""Where the engine-holding time of a run went (gpu_time.json) and what else kept the engines' CPUs busy."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from .. import hostcpu
from ..config import Study
from ..escape import md_text
from .schema import Docs

#: The verdicts that decide (stats.verdict): a speedup row with one of these is a decided cell.
DECIDED = ("faster", "slower", "equivalent")


def gpu_time(
    study: Study, rows: Sequence[Mapping[str, Any]], docs: Docs, sp: Sequence[Mapping[str, Any]] | None = None
) -> dict[str, Any]:
    """Where the engine-holding time of a run went. An engine's span runs from its host's spawn to the end of
    the last cell job it served (gaps between jobs included); the total is the sum of the spans. With the
    speedup rows `sp`: the cells they decide (a verdict in DECIDED) and the engine-holding seconds per decided
    cell (the run's total over them; null where none is decided)."""
    engines: dict[tuple[str, float], dict[str, Any]] = {}
    for d in docs.values():
        e = d["engine"]
        k = (e["key"], float(e["spawned_at"]))
        rec = engines.setdefault(
            k, {"start": float(e["spawned_at"]), "end": 0.0, "import_s": 0.0, "engine_start_s": 0.0, "cells": 0}
        )
        rec["end"] = max(rec["end"], float(d["job"]["finished_at"]))
        rec["cells"] += 1
        rec["import_s"] = max(rec["import_s"], e["import_s"])
        rec["engine_start_s"] = max(rec["engine_start_s"], e["engine_start_s"] if e["engine_start_paid"] else 0.0)
    ok = [r for r in rows if r["status"] == "ok"]
    total = sum(max(0.0, e["end"] - e["start"]) for e in engines.values())
    gen = sum(r["gen_wall_s"] for r in ok)
    doc = {
        "run": study.run,
        "measurements": len(ok),
        "engine_starts": len(engines),
        "cells_per_engine": (len(ok) / len(engines)) if engines else None,
        "importing_s": sum(e["import_s"] for e in engines.values()),
        "engine_start_s": sum(e["engine_start_s"] for e in engines.values()),
        "warmup_s": sum(r["warmup_s"] for r in ok),
        "reset_s": sum(r["reset_s"] for r in ok),
        "prefill_probe_s": sum(r["prefill_probe_s"] or 0.0 for r in ok),
        "generating_s": gen,
        "job_wall_s": sum(r["job_wall_s"] for r in ok),
        "total_s": total,
        "generating_share": (gen / total) if total else None,
        "method": "total_s = sum over engine instances of (last served cell job's end - host spawn); "
        "generating_s = sum of the timed passes",
    }
    if sp is not None:
        decided = sum(1 for r in sp if (r.get("verdict") or "").split(" ")[0] in DECIDED)
        doc |= {
            "decided_cells": decided,
            "gpu_s_per_decided_cell": (total / decided) if decided else None,
            "method": doc["method"] + "; gpu_s_per_decided_cell = total_s / the drafter cells whose verdict is "
            "faster, slower or equivalent",
        }
    return {k: (round(v, 3) if isinstance(v, float) else v) for k, v in doc.items()}


def host_cpu_line(docs: dict) -> str:
    """One sentence on what else kept the engines' CPUs busy during the timed passes (each cell's `host_cpu`,
    specsweep.hostcpu), naming every pass with at least CONTENDED_CORES of a core beside the engine; "" where
    no cell has the block (cells written before it existed)."""
    seen = sorted(
        ((k, d["host_cpu"]) for k, d in docs.items() if isinstance(d.get("host_cpu"), dict)), key=lambda kv: kv[0]
    )
    if not seen:
        return ""

    def label(k: tuple) -> str:
        model, workload, step, _, r = k  # a cell at concurrency b is named `code@b8` already
        return md_text(f"{model}/{workload}/{step} r{r}")

    other = [h["other_cores"] for _, h in seen]
    worst_k, worst = max(seen, key=lambda kv: (kv[1]["other_cores"], kv[0]))
    hit = [(k, h) for k, h in seen if h["other_cores"] >= hostcpu.CONTENDED_CORES]
    cpus = sorted({h["cpus"] for _, h in seen})
    text = (
        f"Host CPU during the timed passes (each cell's `host_cpu`): other processes kept a median of "
        f"{statistics.median(other):.2f} and at most {worst['other_cores']:.2f} of the engine's "
        f"{'/'.join(str(c) for c in cpus)} CPU(s) busy (largest: {label(worst_k)}); "
        f"{len(hit)} of {len(seen)} passes had >= {hostcpu.CONTENDED_CORES:g} core beside the engine"
    )
    if hit:
        text += ": " + ", ".join(f"{label(k)} ({h['other_cores']:.2f})" for k, h in hit[:8])
        text += f" and {len(hit) - 8} more" if len(hit) > 8 else ""
    return text + f"; the hypervisor stole at most {max(h['steal_cores'] for _, h in seen):.2f} core(s)."
