"""Fidelity check: the same prompts, engine and sampling through vLLM's own offline throughput harness
(``vllm.benchmarks.throughput.run_vllm``, what ``vllm bench throughput`` runs), for comparison with a cell
measured by specsweep's runner with the same sampling (vLLM's harness samples at temperature 1.0 with
ignore_eos, so the cell to compare is run with ``sampling: {temperature: 1.0, ignore_eos: true}``)."""

from __future__ import annotations

import inspect
import os
from pathlib import Path
from typing import Any

from . import provenance, slots, workloads
from .config import Cell, Study
from .engine import cell_env, encode_prompts, engine_kwargs, resolve_model, uses_chat
from .errors import SpecsweepError
from .jsonio import atomic_write_json


def run_harness(study: Study, cell: Cell, workload_path: Path, out: Path, model_path: str | None) -> dict[str, Any]:
    os.environ.update(cell_env(study, cell))
    wl = workloads.load(workload_path)
    if wl["name"] != cell.workload:
        raise SpecsweepError(f"workload file {workload_path}: holds workload '{wl['name']}', not '{cell.workload}'")
    model = resolve_model(study, cell, model_path)
    kwargs = engine_kwargs(study, cell, model)
    gpu_slots = slots.claim_for_cell(study.models[cell.model].tp, study.device)
    spec = study.models[cell.model]

    from transformers import AutoTokenizer
    from vllm.benchmarks.datasets import SampleRequest
    from vllm.benchmarks.throughput import run_vllm
    from vllm.engine.arg_utils import EngineArgs

    tok = AutoTokenizer.from_pretrained(model, trust_remote_code=spec.trust_remote_code)
    use_chat = uses_chat(spec, tok)

    def requests(items: list[dict[str, Any]]) -> list[Any]:
        ids = encode_prompts(tok, items, use_chat)
        return [SampleRequest(prompt={"prompt_token_ids": i}, prompt_len=len(i), expected_output_len=it["max_tokens"])
                for i, it in zip(ids, items)]

    timed, warm = requests(wl["prompts"]), requests(wl["warmup"])
    extra = {"warmup_requests": warm} if "warmup_requests" in inspect.signature(run_vllm).parameters else {}
    started = provenance.utc_now()
    elapsed, outputs = run_vllm(timed, 1, EngineArgs(**kwargs), False, **extra)
    output_tokens = sum(len(o.outputs[0].token_ids) for o in outputs)
    input_tokens = sum(r.prompt_len for r in timed)
    doc = {
        "format": "specsweep-harness/1",
        "harness": "vllm.benchmarks.throughput.run_vllm",
        "harness_warmup": bool(extra),
        "run": study.run, "model": cell.model, "workload": cell.workload, "config": cell.config,
        "prompts": len(timed),
        "elapsed_s": elapsed,
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "output_tok_s": output_tokens / elapsed,
        "total_tok_s": (input_tokens + output_tokens) / elapsed,
        "engine_kwargs": {k: v for k, v in kwargs.items() if k not in ("model", "tokenizer")},
        "gpu_slots": gpu_slots,
        "versions": provenance.versions(),
        "started": started,
        "finished": provenance.utc_now(),
    }
    atomic_write_json(Path(out), doc)
    return doc
