"""Progress of a run a person can follow: ``specsweep status --config C [--results results] [--json]``.

For every measurement the config expects (cell x repeat) it says which are

    done     measured with the settings the config gives now
    failed   no measurement, a failure record under results/{run}/failures/
    stale    measured, but its config_sha256 is not the hash of what the config now gives for its cell (the
             tables refuse it; rerun it with --force, or build the tables with --allow-stale)
    left     neither measured nor failed

and the time: GPU time spent is the engine-holding time of the tables' ``gpu_time.json`` (each engine instance
from its host's spawn to the end of the last cell job it served, summed), and the time to go is the mean job
time so far (of the same model where it has measurements, else of the run) times the measurements not done
(left, failed and stale). Nothing is written; the cells are read exactly as the tables read them.

It also checks the outputs: every file of the tables (results/{run}/tables) against its MANIFEST.json, and
that the figures (figures/{run}, beside the results folder) were drawn from those tables (their manifest.json
records the sha256 of the tables' MANIFEST.json): new tables beside old figures are named. What could not be
checked is named too (`could not check`): cells without the run's archive, tables without their MANIFEST.json,
and what the tables record they could not check.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any, cast

from . import paths
from .config import Study
from .escape import term_text

STATES = ("done", "failed", "stale", "left")


def outputs(study: Study, results: Path) -> dict[str, Any]:
    """The tables' and figures' state: {"tables": path, "tables_problem": one line or None, "unchecked": lines
    (what could not be checked about the tables: tables.unchecked_tables), "figures": path, "figures_state":
    current | other tables | not drawn | unknown | no tables, "figures_problem": one line or None}."""
    from .errors import SpecsweepError
    from .jsonio import read_json
    from .tables import checked_bytes, manifest_files, manifest_sha256, unchecked_tables

    tables = paths.tables_dir(study.run, results)
    figures = paths.figures_dir(study.run, Path(results).parent)
    doc: dict[str, Any] = {"tables": str(tables), "tables_problem": None, "unchecked": [], "figures": str(figures)}
    have = manifest_sha256(tables)
    try:
        for name in sorted(manifest_files(tables)):
            checked_bytes(tables, name)
        if (tables / "cells.parquet").is_file():
            doc["unchecked"] = unchecked_tables(tables)
    except SpecsweepError as exc:
        doc["tables_problem"] = str(exc)
    state, problem = "current", None
    if not (figures / paths.FIGURES_MANIFEST).is_file():
        state = "not drawn"
        if figures.is_dir() and any(figures.glob("*.png")):
            doc["unchecked"].append(
                f"figures {figures}: no {paths.FIGURES_MANIFEST}, so which tables they were drawn from could not be "
                "checked (draw them again: snakemake, or specsweep figures)"
            )
    elif have is None:
        state = "no tables"
    else:
        try:
            drawn = read_json(figures / paths.FIGURES_MANIFEST, "figures manifest").get("tables_manifest_sha256")
        except (SpecsweepError, AttributeError):
            drawn = None
        if drawn is None:
            state = "unknown"
            doc["unchecked"].append(
                f"figures {figures}: their {paths.FIGURES_MANIFEST} names no tables they were drawn from, so whether "
                f"they show what {tables} holds now could not be checked (draw them again: snakemake, or specsweep "
                "figures)"
            )
        elif drawn != have:
            state = "other tables"
            problem = (
                f"figures {figures}: drawn from other tables than {tables} holds now (a run stopped between the "
                "tables and the figures?); draw them again: snakemake, or specsweep figures"
            )
    return doc | {"figures_state": state, "figures_problem": problem}


def progress(study: Study, results: Path) -> dict[str, Any]:
    """The run's progress as a JSON-able document."""
    from .tables import archive_unchecked, gpu_time, load_measurements

    rows, docs, stale = load_measurements(study, Path(results), allow_stale=True)
    out = outputs(study, Path(results))
    out["unchecked"] = archive_unchecked(Path(results), study.run, len(docs)) + out["unchecked"]
    stale_by_label = {s["cell"]: s["keys"] for s in stale}
    per_step: dict[tuple[str, str], dict[str, int]] = defaultdict(lambda: dict.fromkeys(STATES, 0))
    failed, stale_list = [], []
    wall_by_model: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        label = f"{r['model']}/{r['workload']}/{r['config']}/r{r['repeat']}"
        if r["status"] == "ok":
            wall_by_model[r["model"]].append(cast(float, r["job_wall_s"]))  # an ok row has its wall time
            state = "stale" if label in stale_by_label else "done"
            if state == "stale":
                stale_list.append({"measurement": label, "differing": stale_by_label[label]})
        elif r["status"] == "failed":
            state = "failed"
            failed.append({"measurement": label, "error": r["error"]})
        else:
            state = "left"
        per_step[(r["model"], r["config"])][state] += 1
    counts = {s: sum(c[s] for c in per_step.values()) for s in STATES}
    spent = gpu_time(study, rows, docs)
    all_walls = [w for ws in wall_by_model.values() for w in ws]
    run_mean = sum(all_walls) / len(all_walls) if all_walls else None
    to_go_s: float | None = 0.0
    for (model, _), c in per_step.items():
        todo = c["left"] + c["failed"] + c["stale"]
        if not todo:
            continue
        walls = wall_by_model.get(model)
        mean = sum(walls) / len(walls) if walls else run_mean
        to_go_s = None if mean is None or to_go_s is None else to_go_s + todo * mean
    return {
        "run": study.run,
        "measurements": len(rows),
        "cells": len(study.cells),
        "repeats": study.repeats,
        **counts,
        "gpu_time_spent_s": spent["total_s"],
        "engine_starts": spent["engine_starts"],
        "mean_job_s": round(run_mean, 3) if run_mean is not None else None,
        "to_go_s": round(to_go_s, 3) if to_go_s is not None else None,
        "steps": [
            {"model": m, "config": c, **per_step[(m, c)]}
            for m in study.models
            for c in study.ladder
            if (m, c) in per_step
        ],
        "failed_measurements": failed,
        "stale_measurements": stale_list,
        "outputs": out,
    }


def _dur(seconds: float | None) -> str:
    if seconds is None:
        return "unknown"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def render(doc: dict[str, Any], limit: int = 10) -> str:
    """The progress as text for a terminal."""
    todo = doc["left"] + doc["failed"] + doc["stale"]
    lines = [
        f"run {doc['run']}: {doc['measurements']} measurements ({doc['cells']} cells x {doc['repeats']} repeats)",
        f"  done {doc['done']}, failed {doc['failed']}, stale {doc['stale']}, left {doc['left']}",
        f"  GPU time spent {_dur(doc['gpu_time_spent_s'])} ({doc['gpu_time_spent_s']:.1f} s engine-holding over "
        f"{doc['engine_starts']} engine start(s))",
    ]
    if not todo:
        lines.append("  nothing to go")
    elif doc["to_go_s"] is None:
        lines.append(f"  to go: {todo} measurements, time unknown (nothing measured yet)")
    else:
        lines.append(
            f"  to go: {todo} measurements (left, failed and stale), about {_dur(doc['to_go_s'])} "
            f"at the mean job time so far ({doc['mean_job_s']:.1f} s over the run, per model where known)"
        )
    width = max([len("model")] + [len(s["model"]) for s in doc["steps"]])
    cwidth = max([len("step")] + [len(s["config"]) for s in doc["steps"]])
    lines += ["", f"{'model':<{width}}  {'step':<{cwidth}}  " + "  ".join(f"{s:>6}" for s in STATES)]
    for s in doc["steps"]:
        lines.append(f"{s['model']:<{width}}  {s['config']:<{cwidth}}  " + "  ".join(f"{s[k]:>6}" for k in STATES))
    for title, key, what in (("failed", "failed_measurements", "error"), ("stale", "stale_measurements", "differing")):
        items = doc[key]
        if items:
            lines += ["", f"{title}:"]
            for item in items[:limit]:
                detail = item[what] if isinstance(item[what], str) else ", ".join(item[what][:6])
                lines.append(f"  {term_text(item['measurement'])}: {term_text(detail)}")
            if len(items) > limit:
                lines.append(f"  ... and {len(items) - limit} more")
    out = doc["outputs"]
    problems = [p for p in (out["tables_problem"], out["figures_problem"]) if p]
    if problems:
        lines += ["", "outputs:"] + [f"  {term_text(p)}" for p in problems]
    if out["unchecked"]:
        lines += ["", "could not check:"] + [f"  {term_text(u)}" for u in out["unchecked"]]
    if doc["stale"]:
        lines += [
            "",
            "Snakemake leaves stale measurements as they are under --rerun-triggers mtime (the profiles' "
            "setting): rerun one with `snakemake <its path> --force`, or build the tables with --allow-stale",
        ]
    return "\n".join(lines)


def main(study: Study, results: Path, as_json: bool = False) -> int:
    doc = progress(study, results)
    print(json.dumps(doc, indent=2, sort_keys=True) if as_json else render(doc))
    return 0
