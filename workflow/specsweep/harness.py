"""Fidelity check: the same prompts and engine through vLLM's own offline throughput harness
(``vllm.benchmarks.throughput.run_vllm``, what ``vllm bench throughput`` runs) and through specsweep's
engine, `runs` times each in interleaved order (ABBA...), each pass on a fresh engine (cold prefix cache):
medians, their ratio and its Welch interval (stats.ratio_ci) -> results/{run}/fidelity/{model}/{workload}/{step}.json.

vLLM's harness generates exactly expected_output_len tokens (ignore_eos) and samples with its own
defaults; the config compared with it should set ``sampling: {ignore_eos: true}`` (greedy: temperature 0
is passed through where run_vllm accepts sampling settings, else its default is recorded)."""

from __future__ import annotations

import inspect
import os
from pathlib import Path
from typing import Any

from . import provenance, slots, workloads
from .config import Cell, Study
from .engine import cell_env, encode_prompts, engine_kwargs, request_max_tokens, resolve_model, uses_chat
from .errors import SpecsweepError
from .jsonio import atomic_write_json


def run_harness(study: Study, cell: Cell, workload_path: Path, out: Path, model_path: str | None) -> dict[str, Any]:
    os.environ.update(cell_env(study, cell))
    if cell.concurrency is not None:
        raise SpecsweepError(f"cell {cell.key}: vLLM's run_vllm submits all prompts at once; it has no concurrency")
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

    tok = AutoTokenizer.from_pretrained(kwargs["tokenizer"], trust_remote_code=spec.trust_remote_code)
    use_chat = uses_chat(spec, tok)

    def requests(items: list[dict[str, Any]]) -> list[Any]:
        ids = encode_prompts(tok, items, use_chat)
        lengths = request_max_tokens(tok, items, ids, kwargs.get("max_model_len"))
        return [
            SampleRequest(prompt={"prompt_token_ids": i}, prompt_len=len(i), expected_output_len=m)
            for i, m in zip(ids, lengths, strict=True)
        ]

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
        "run": study.run,
        "model": cell.model,
        "workload": cell.workload,
        "config": cell.step,
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


def _specsweep_pass(study: Study, cell: Cell, workload_path: Path, model: str) -> dict[str, Any]:
    """One timed pass by specsweep's own engine path on a fresh engine, then the engine is shut down."""
    import gc

    from .engine import Engine

    eng = Engine(study, cell, model, 1)
    eng.start()
    raw = eng.measure(cell, workload_path)
    out_tokens = sum(len(o.outputs[0].token_ids) for o in raw["outs"])
    res = {
        "side": "specsweep",
        "elapsed_s": raw["gen_wall_s"],
        "output_tokens": out_tokens,
        "output_tok_s": out_tokens / raw["gen_wall_s"],
        "engine_start_s": eng.engine_start_s,
    }
    _shutdown(eng.llm)
    del eng, raw
    gc.collect()
    return res


def _shutdown(llm: Any) -> None:
    import gc

    try:
        llm.llm_engine.engine_core.shutdown()
    except Exception:
        pass
    del llm
    gc.collect()
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    except Exception:
        pass


def run_fidelity(
    study: Study, cell: Cell, workload_path: Path, out: Path, model_path: str | None, runs: int = 3
) -> dict[str, Any]:
    """specsweep vs vLLM's run_vllm on one cell, `runs` fresh-engine passes each, interleaved."""
    from . import stats

    os.environ.update(cell_env(study, cell))
    model = resolve_model(study, cell, model_path)
    order = []
    for i in range(runs):
        order += ["specsweep", "harness"] if i % 2 == 0 else ["harness", "specsweep"]
    passes: list[dict[str, Any]] = []
    for side in order:
        if side == "specsweep":
            res = _specsweep_pass(study, cell, workload_path, model)
        else:
            doc = run_harness(study, cell, workload_path, out.with_suffix(f".harness{len(passes)}.json"), model_path)
            res = {
                "side": "harness",
                "elapsed_s": doc["elapsed_s"],
                "output_tokens": doc["output_tokens"],
                "output_tok_s": doc["output_tok_s"],
            }
        res["order"] = len(passes) + 1
        passes.append(res)
        print(f"fidelity pass {res['order']} {side}: {res['output_tok_s']:.1f} tok/s", flush=True)
    a = [p["output_tok_s"] for p in passes if p["side"] == "specsweep"]
    b = [p["output_tok_s"] for p in passes if p["side"] == "harness"]
    ratio, lo, hi = stats.ratio_ci(a, b)
    goal = [1.0 - stats.FIDELITY_BAND, 1.0 + stats.FIDELITY_BAND]
    doc = {
        "format": "specsweep-fidelity/1",
        "run": study.run,
        "cell": cell.key,
        "model_weights": study.models[cell.model].weights,
        "runs_each": runs,
        "order": order,
        "passes": passes,
        "specsweep_median_tok_s": stats.median(a),
        "harness_median_tok_s": stats.median(b),
        "ratio_of_medians": ratio,
        "ratio_lo": lo,
        "ratio_hi": hi,
        "specsweep_cv": stats.cv(a),
        "harness_cv": stats.cv(b),
        "goal": goal,
        "within_goal": None if ratio is None else bool(goal[0] <= ratio <= goal[1]),
        "sampling": study.sampling,
        "workload_file": str(workload_path),
        "versions": provenance.versions(),
        "finished": provenance.utc_now(),
    }
    atomic_write_json(Path(out), doc)
    for p in Path(out).parent.glob(Path(out).stem + ".harness*.json"):
        p.unlink()
    return doc
