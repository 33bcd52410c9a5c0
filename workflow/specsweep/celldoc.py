"""The fields every cell document holds, whatever measured it: the in-process engine (runner.build_doc) or vLLM's
server driven by its benchmark client (serve.build_doc). Each builder adds what only its way of measuring knows.
"""

from __future__ import annotations

import platform
import socket
from pathlib import Path
from typing import Any

from . import cells, provenance
from .config import Cell, Study
from .engine import EngineBase
from .jsonio import sha256_obj

FORMAT = "specsweep-cell/2"


def header(study: Study, cell: Cell, repeat: int, engine: EngineBase, use_chat: bool) -> dict[str, Any]:
    """The cell's name, its settings (and their hash) and the model it ran: the document's first fields."""
    spec = study.models[cell.model]
    settings = study.cell_settings(cell)
    return {
        "format": FORMAT,
        "status": "ok",
        "run": study.run,
        "model": cell.model,
        "workload": cell.workload,
        "config": cell.step,
        "repeat": repeat,
        "group": study.cell_groups.get(cell),
        "units": dict(cells.UNITS),
        "settings": settings,
        "config_sha256": sha256_obj(settings),
        "model_info": {
            "source": engine.model,
            "params_b": spec.params_b,
            "tp": spec.tp,
            "trust_remote_code": spec.trust_remote_code,
            "prompt_format": "chat" if use_chat else "raw",
            "note": None if use_chat else "model has no chat template (or chat_template: false): raw prompts",
            "weights": spec.weights,
            "revision": (engine.model_record or {}).get("revision"),
            "manifest_sha256": (engine.model_record or {}).get("manifest_sha256"),
            # the drafter's weights beside the target's (None: a drafter without a model of its own)
            "draft": engine.draft_record,
        },
    }


def dataset(
    workload_path: Path, wl: dict[str, Any], prompts: int, warm_count: int, input_tokens: int, output_tokens: int
) -> dict[str, Any]:
    """The workload file the pass ran, its hashes and the timed pass's prompts and mean token counts."""
    return {
        "workload_file": str(workload_path),
        "content_sha256": wl["content_sha256"],
        "corpus_sha256": wl["corpus_sha256"],
        "seed": wl["seed"],
        "prompts": prompts,
        "warmup_prompts": warm_count,
        "input_tokens_mean": input_tokens / prompts,
        "output_tokens_mean": output_tokens / prompts,
    }


def pass_fields(
    engine: EngineBase,
    raw: dict[str, Any],
    pid: int,
    wall_s: float,
    input_tokens: int,
    output_tokens: int,
    prefill_probe_s: float | None,
) -> dict[str, Any]:
    """The engine that measured the pass (`pid`: its process), where the time went, and the tokens over the
    timed pass's `wall_s`: the document's `engine`, `timing` and `tokens`."""
    first = raw["position"] == 1
    return {
        "engine": {
            "key": engine.key,
            "pid": pid,
            "position": raw["position"],
            "import_s": engine.import_s if first else 0.0,
            "engine_start_s": engine.engine_start_s,
            "engine_start_paid": first,
            "memory_after_start": engine.memory_after_start,
            "resets": raw["resets"],
            "identity_sha256": sha256_obj(engine.identity),
        }
        | ({"engine_warmup": raw["engine_warmup"]} if raw.get("engine_warmup") else {}),
        "timing": {
            "engine_start_s": engine.engine_start_s if first else 0.0,
            "warmup_s": raw["warmup_s"],
            "gen_wall_s": wall_s,
            "reset_s": raw["resets"]["reset_s"],
            "prefill_probe_s": prefill_probe_s,
        },
        "tokens": {
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "output_tok_s": output_tokens / wall_s,
            "total_tok_s": (input_tokens + output_tokens) / wall_s,
        },
    }


def provenance_block(tp: int, engine: EngineBase, raw: dict[str, Any], harness: str) -> dict[str, Any]:
    """Where and with what it was measured (`started` is filled in by the cell job)."""
    gpu = raw["gpu"]
    return {
        "versions": provenance.versions(),
        "device": provenance.device_info(tp) | {"driver": gpu["driver"] if gpu else raw["driver"]},
        "host": socket.gethostname(),
        "cpu": provenance.host_cpu(),
        "machine": provenance.machine(raw["gpu_uuids"]),
        "platform": platform.platform(),
        "harness": harness,
        "gpu_slots": engine.gpu_slots,
        "git": provenance.git_state(),
        "code": provenance.code_state(),
        "started": None,
        "finished": provenance.utc_now(),
    }
