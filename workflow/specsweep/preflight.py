"""Preflight: every cell of a config tried before any weight is downloaded.

`snakemake preflight --configfile config/preflight.yaml` runs each cell once (repeat 1) on the engine of
its (model, ladder step), with the config's own engine settings and whatever weights the config names
(`weights: dummy` in config/preflight.yaml: the architecture's shape, random values). Each cell job writes a
verdict, whatever happens, so one failing cell never stops the others:

results/{run}/preflight/{model}/{workload}/{step}.json  (the step under the key `config`, as in a cell)
    status  ok        the engine started and the cell generated
            failed    the first error, one line (vLLM's config checks, out of memory, graph capture, ...)
            refused   vLLM would refuse the engine, known without starting it (static_refusal): more GPUs
                      (its TP) than this machine has, a TP size that does not divide the attention heads,
                      or max_model_len beyond the model's positions
    and, when the engine started: its start time, effective CUDA-graph mode and TP, KV-cache blocks and
    tokens, the concurrency they hold at max_model_len, and the GPU memory used and free after the start.

`specsweep preflight-report` turns the verdicts into results/{run}/preflight/report.{md,parquet} and summary.json: one
row per cell, and per (model, ladder step) the verdict a user needs before downloading anything. An engine
whose start failed is started once per workflow run, not once per cell (enginehost.ensure_host).
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from pathlib import Path
from typing import Any

from . import paths, slots
from .architectures import is_dummy, load_architecture
from .config import Cell, Study
from .errors import EngineStartError, SpecsweepError
from .escape import md_code, md_text
from .jsonio import atomic_write_bytes, atomic_write_json, read_json
from .preflight_checks import check_model_dir

FORMAT = "specsweep-preflight/1"
#: report.parquet's columns and their kinds: f float, i integer, s string.
COLUMNS: tuple[tuple[str, str], ...] = (
    ("model", "s"),
    ("params_b", "f"),
    ("tp", "i"),
    ("config", "s"),
    ("workload", "s"),
    ("status", "s"),
    ("engine_start_s", "f"),
    ("cudagraph_mode", "s"),
    ("tensor_parallel_size", "i"),
    ("max_model_len", "i"),
    ("num_gpu_blocks", "i"),
    ("kv_tokens", "i"),
    ("max_concurrency", "f"),
    ("gpu_mem_total_gib", "f"),
    ("gpu_mem_used_gib", "f"),
    ("gpu_mem_free_gib", "f"),
    ("output_tok_s", "f"),
    ("error", "s"),
)
#: What an engine row (model, ladder step) takes from its cells: everything but the per-cell columns.
ENGINE_COLUMNS = tuple(c for c, _ in COLUMNS if c not in ("workload", "status", "error", "output_tok_s"))


#: The config.json keys from which vLLM derives a model's positions (derive_max_model_len_and_key in
#: vllm/transformers_utils/model_arch_config_convertor.py: the smallest present; `model_max_length` wins).
#: Refusing only above the largest of them never refuses what vLLM would accept.
POSITION_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "seq_length",
    "max_target_positions",
    "max_sequence_length",
    "max_seq_length",
    "seq_len",
    "model_max_length",
)


def model_config(study: Study, cell: Cell, model_path: str | None) -> dict[str, Any] | None:
    """The config.json the engine will read: the local model folder's (built or named by hf_id), else the
    architecture's (`weights: dummy`); None for a hub id, whose config is not here."""
    from .engine import resolve_model

    spec = study.models[cell.model]
    if model_path is None and is_dummy(spec) and spec.architecture:
        return dict(load_architecture(spec.architecture))
    source = resolve_model(study, cell, model_path)
    return check_model_dir(source) if Path(source).is_dir() else None


def static_facts(study: Study, cell: Cell, config: dict[str, Any] | None) -> dict[str, Any]:
    """What the model's config.json says before anything starts: positions against max_model_len."""
    engine = study.cell_settings(cell)["engine"]
    positions = (config or {}).get("max_position_embeddings")
    return {"max_position_embeddings": positions, "max_model_len_requested": engine.get("max_model_len")}


def _scales_positions(rope: Any) -> bool:
    """A RoPE entry (or one per layer type) that may change the positions vLLM derives: any factor, or a type
    other than the default."""
    if not isinstance(rope, dict):
        return False
    if all(isinstance(v, dict) for v in rope.values()) and rope:
        return any(_scales_positions(v) for v in rope.values())
    return "factor" in rope or rope.get("rope_type", rope.get("type", "default")) not in ("default", None)


def allow_long(env: dict[str, str]) -> bool:
    """VLLM_ALLOW_LONG_MAX_MODEL_LEN set for the engine (by the config, or exported where the workflow runs)."""
    value = env.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN", os.environ.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN", ""))
    return value.strip().lower() not in ("", "0", "false")


def static_refusal(study: Study, cell: Cell, config: dict[str, Any] | None, gpus: int | None) -> str | None:
    """Why vLLM would refuse this cell's engine, known from the config and the model's config.json alone, or
    None (then only a start tells). Only what vLLM itself checks, and only where the answer is certain: a
    config with RoPE scaling, or with VLLM_ALLOW_LONG_MAX_MODEL_LEN set, is left to vLLM."""
    tp = study.models[cell.model].tp
    if gpus is not None and tp > gpus:
        return f"needs {tp} GPUs (tp {tp}); this machine has {gpus}"
    if not config:
        return None
    heads = config.get("num_attention_heads", config.get("n_head"))
    if isinstance(heads, int) and heads > 0 and heads % tp:
        return f"tp {tp} does not divide the model's {heads} attention heads (vLLM refuses it at engine start)"
    settings = study.cell_settings(cell)
    max_len = settings["engine"].get("max_model_len")
    scaled = any(_scales_positions(config.get(k)) for k in ("rope_scaling", "rope_parameters"))
    if not isinstance(max_len, int) or scaled or allow_long(settings["env"]):
        return None
    known = {k: v for k in POSITION_KEYS if isinstance(v := config.get(k), int) and v > 0}
    if known and max_len > max(known.values()):
        names = ", ".join(f"{k} {v}" for k, v in known.items())
        return (
            f"engine.max_model_len {max_len} is more than the model's positions ({names} in its config.json);"
            " vLLM refuses it at engine start"
        )
    return None


def _gib(mib: list[float] | None) -> float | None:
    return None if not mib else round(sum(mib) / 1024, 2)


def from_doc(doc: dict[str, Any]) -> dict[str, Any]:
    """The engine facts of a measured cell."""
    eff, eng = doc["effective"], doc["engine"]
    blocks, block = eff.get("num_gpu_blocks"), eff.get("block_size")
    kv_tokens = blocks * block if isinstance(blocks, int) and isinstance(block, int) else None
    max_len = eff.get("max_model_len")
    mem = eng.get("memory_after_start") or {}
    return {
        "engine_key": eng["key"],
        "engine_start_s": round(eng["engine_start_s"], 1),
        "cudagraph_mode": eff["cudagraph_mode"],
        "tensor_parallel_size": eff.get("tensor_parallel_size"),
        "max_model_len": max_len,
        "num_gpu_blocks": blocks,
        "block_size": block,
        "kv_tokens": kv_tokens,
        "max_concurrency": round(kv_tokens / max_len, 2) if kv_tokens and max_len else None,
        "gpu_mem_total_gib": _gib(mem.get("total_mib")),
        "gpu_mem_used_gib": _gib(mem.get("used_mib")),
        "gpu_mem_free_gib": _gib(mem.get("free_mib")),
        "output_tok_s": round(doc["tokens"]["output_tok_s"], 1),
    }


def preflight_cell(
    study: Study,
    cell: Cell,
    root: Path,
    out: Path,
    workload_path: Path,
    model_path: str | None,
    config_path: str,
    log_path: str | None,
    watch_pid: int | None,
) -> dict[str, Any]:
    """Try one cell (repeat 1) and write its verdict; never raises for what the cell itself does wrong."""
    from .runner import run_cell

    spec = study.models[cell.model]
    record: dict[str, Any] = {
        "format": FORMAT,
        "run": study.run,
        "model": cell.model,
        "workload": cell.workload,
        "config": cell.step,
        "params_b": spec.params_b,
        "tp": spec.tp,
        "weights": spec.weights,
        "started_at": time.time(),
    }
    known: tuple[str, str] | None = None  # (status, error) known before anything starts
    try:
        config = model_config(study, cell, model_path)
    except SpecsweepError as exc:  # the model folder itself is wrong: the cell fails as its run would
        config, known = None, ("failed", str(exc))
    else:
        gpus = len(slots.node_gpu_ids()) if study.device == "gpu" else None
        if refusal := static_refusal(study, cell, config, gpus):
            known = ("refused", refusal)
    record["static"] = static_facts(study, cell, config)
    if known:
        record |= {"status": known[0], "error": known[1]}
    else:
        key = paths.Key(study.run, cell.model, cell.workload, cell.step, 1)
        try:
            doc = run_cell(study, key, root, workload_path, model_path, config_path, log_path, True, watch_pid)
            record |= {"status": "ok", "error": None} | from_doc(doc)
        except EngineStartError as exc:  # the host's own reason, not its key, exit code and log path
            record |= {"status": "failed", "error": exc.reason}
        except SpecsweepError as exc:
            record |= {"status": "failed", "error": str(exc)}
    record["finished_at"] = time.time()
    atomic_write_json(out, record)
    return record


def load_verdicts(study: Study, root: Path | str) -> list[dict[str, Any]]:
    rows = []
    for cell in study.cells:
        p = paths.preflight(root, study.run, cell.model, cell.workload, cell.step)
        if p.is_file():
            rec = read_json(p, "preflight verdict")
            if not isinstance(rec, dict) or rec.get("format") != FORMAT:
                raise SpecsweepError(f"preflight verdict {p}: not a {FORMAT} record")
        else:
            rec = {"model": cell.model, "workload": cell.workload, "config": cell.step, "status": "not run"}
            rec |= {"params_b": study.models[cell.model].params_b, "tp": study.models[cell.model].tp}
        rows.append(rec)
    return rows


def _fmt(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:g}"
    return md_text(v)  # a name, a setting vLLM reported or an error message: data in a table cell


def engine_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (model, ladder step): ok only when every workload ran; the first error otherwise."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    statuses: dict[tuple[str, str], set[str]] = {}
    for r in rows:
        k = (r["model"], r["config"])
        e = out.setdefault(k, {c: r.get(c) for c in ENGINE_COLUMNS} | {"workloads": 0, "ok": 0, "error": None})
        e["workloads"] += 1
        e["ok"] += r["status"] == "ok"
        statuses.setdefault(k, set()).add(r["status"])
        if r["status"] == "ok" and e.get("engine_start_s") is None:
            e |= {c: r.get(c) for c in ENGINE_COLUMNS}
        if r.get("error") and not e["error"]:
            e["error"] = r["error"]
    return [e | {"verdict": _engine_verdict(statuses[k])} for k, e in out.items()]


def _engine_verdict(statuses: set[str]) -> str:
    """ok, refused or not run when every cell says so; failed when any cell failed; else partial."""
    for same in ("ok", "refused", "not run"):
        if statuses == {same}:
            return same
    return "failed" if "failed" in statuses else "partial"


def report(study: Study, root: Path | str, out_dir: Path) -> dict[str, Any]:
    """results/{run}/preflight/report.{md,parquet} and summary.json from the verdicts (missing ones: `not run`)."""
    import pyarrow as pa

    from .tables import _parquet_bytes, _table

    kinds = {"f": pa.float64(), "i": pa.int64(), "s": pa.string()}
    rows = load_verdicts(study, root)
    table = _table(rows, [(c, kinds[k]) for c, k in COLUMNS], {"run": study.run})
    engines = engine_rows(rows)
    counts = dict(Counter(r["status"] for r in rows))
    verdicts = dict(Counter(e["verdict"] for e in engines))

    head = [
        "model",
        "tp",
        "config",
        "verdict",
        "workloads ok",
        "start s",
        "graph mode",
        "KV blocks",
        "KV tokens",
        "concurrency at max_model_len",
        "GPU GiB used / free",
        "first error",
    ]
    lines = [
        f"# Preflight of run {md_code(study.run)}",
        "",
        f"{len(rows)} cells on {len(engines)} engines (model, ladder step): "
        + ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
        + " cells; engines: "
        + ", ".join(f"{n} {s}" for s, n in sorted(verdicts.items()))
        + "."
        + (
            " Weights: dummy (random values of the real shape): a start that passes says nothing about"
            " throughput or acceptance."
            if any(m.weights == "dummy" for m in study.models.values())
            else ""
        ),
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for e in engines:
        mem = (
            f"{_fmt(e.get('gpu_mem_used_gib'))} / {_fmt(e.get('gpu_mem_free_gib'))}"
            if e.get("gpu_mem_used_gib") is not None
            else ""
        )
        cells_ = [
            e["model"],
            e["tp"],
            e["config"],
            e["verdict"],
            f"{e['ok']}/{e['workloads']}",
            e.get("engine_start_s"),
            e.get("cudagraph_mode"),
            e.get("num_gpu_blocks"),
            e.get("kv_tokens"),
            e.get("max_concurrency"),
            mem,
            e.get("error"),
        ]
        lines.append("| " + " | ".join(_fmt(c) for c in cells_) + " |")
    out_dir.mkdir(parents=True, exist_ok=True)
    md, parquet, summary_json = paths.PREFLIGHT_REPORT
    atomic_write_bytes(out_dir / md, ("\n".join(lines) + "\n").encode())
    atomic_write_bytes(out_dir / parquet, _parquet_bytes(table))
    summary = {"run": study.run, "cells": counts, "engines": verdicts}
    atomic_write_json(out_dir / summary_json, summary)
    return summary


def dumps(record: dict[str, Any]) -> str:
    return json.dumps({k: record.get(k) for k in ("model", "workload", "config", "status", "error")})
