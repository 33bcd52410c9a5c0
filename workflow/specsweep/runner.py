"""One cell: build vllm.LLM with the cell's engine, warm up, time generation over the workload, and write
the schema-checked cell JSON atomically. A failure leaves no JSON at the cell path, only a failure record."""

from __future__ import annotations

import hashlib
import os
import platform
import socket
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import cells, metrics, provenance, slots, workloads
from .architectures import engine_overrides, is_dummy
from .config import Cell, ModelSpec, Study
from .errors import SpecsweepError
from .jsonio import atomic_write_json, sha256_obj
from .telemetry import GpuSampler

FORMAT = "specsweep-cell/1"


def resolve_model(study: Study, cell: Cell, model_path: str | None) -> str:
    """The model argument for vLLM: a checked local directory, or the Hugging Face id."""
    spec = study.models[cell.model]
    if is_dummy(spec) and model_path is None:
        raise SpecsweepError(f"model {spec.name}: weights: dummy needs --model-path (built by the dummy_model rule)")
    source = model_path or spec.hf_id
    if source is None:
        raise SpecsweepError(f"model {spec.name}: built by '{spec.build}' but no --model-path was given")
    p = Path(source)
    looks_local = model_path is not None or source.startswith((".", "/", "~")) or p.exists()
    if looks_local:
        p = p.expanduser()
        if not p.is_dir():
            raise SpecsweepError(f"model path {p}: does not exist or is not a directory")
        if not (p / "config.json").is_file():
            raise SpecsweepError(f"model path {p}: has no config.json")
        return str(p)
    return source


def engine_kwargs(study: Study, cell: Cell, model: str) -> dict[str, Any]:
    settings = study.cell_settings(cell)
    eng, step, spec = settings["engine"], settings["ladder"], study.models[cell.model]
    kw: dict[str, Any] = {
        "model": model,
        "tokenizer": model,
        "tensor_parallel_size": spec.tp,
        "trust_remote_code": spec.trust_remote_code,
        "gpu_memory_utilization": step["gpu_memory_utilization"],
        "disable_log_stats": False,  # get_metrics() needs the stat loggers
    }
    for key in ("dtype", "max_model_len", "max_num_seqs", "max_num_batched_tokens", "kv_cache_dtype", "seed",
                "enforce_eager", "distributed_executor_backend", "kv_cache_memory_bytes"):
        if eng.get(key) is not None:
            kw[key] = eng[key]
    if step["speculative"]:
        kw["speculative_config"] = dict(step["speculative"])
    if step["compilation"]:
        kw["compilation_config"] = dict(step["compilation"])
    kw.update(engine_overrides(spec))  # weights: dummy -> load_format="dummy"
    return kw


def token_hash(ids: list[int]) -> str:
    return hashlib.sha256(",".join(map(str, ids)).encode()).hexdigest()[:16]


def encode_prompts(tokenizer: Any, items: list[dict[str, Any]], use_chat: bool) -> list[list[int]]:
    out = []
    for item in items:
        if use_chat:
            ids = tokenizer.apply_chat_template(
                [{"role": "user", "content": item["text"]}], tokenize=True, add_generation_prompt=True
            )
            if isinstance(ids, dict) or hasattr(ids, "keys"):  # BatchEncoding in newer transformers
                ids = ids["input_ids"]
        else:
            ids = tokenizer(item["text"])["input_ids"]
        out.append(list(ids))
    return out


def effective_settings(llm: Any) -> dict[str, Any]:
    """What vLLM actually chose, read back from its resolved config."""
    vc = llm.llm_engine.vllm_config
    spec = vc.speculative_config
    use_v2 = getattr(vc, "use_v2_model_runner", None)
    return {
        "cudagraph_mode": str(getattr(vc.compilation_config.cudagraph_mode, "name", vc.compilation_config.cudagraph_mode)),
        "compilation_mode": str(getattr(vc.compilation_config.mode, "name", vc.compilation_config.mode)),
        "enforce_eager": bool(vc.model_config.enforce_eager),
        "async_scheduling": bool(getattr(vc.scheduler_config, "async_scheduling", False)),
        "model_runner": None if use_v2 is None else ("v2" if use_v2 else "v1"),
        "dtype": str(vc.model_config.dtype).replace("torch.", ""),
        "kv_cache_dtype": str(vc.cache_config.cache_dtype),
        "speculative_method": getattr(spec, "method", None) if spec else None,
        "num_speculative_tokens": getattr(spec, "num_speculative_tokens", None) if spec else None,
    }


def vanilla_match(out_path: Path, cell: Cell, hashes: list[str]) -> dict[str, Any] | None:
    """Compare greedy outputs with the vanilla cell of the same model and workload, when it exists."""
    if cell.config == "vanilla":
        return None
    ref_path = out_path.parent / "vanilla.json"
    if not ref_path.is_file():
        return None
    try:
        ref = cells.load(ref_path)
    except SpecsweepError:
        return None
    return compare_outputs(ref["outputs"]["token_sha256"], hashes)


def compare_outputs(ref: list[str], hashes: list[str]) -> dict[str, Any]:
    n = min(len(ref), len(hashes))
    return {"compared": n, "matching": sum(1 for a, b in zip(ref, hashes) if a == b)}


def failure_path(out_path: Path) -> Path:
    """results/{run}/cells/m/w/c.json -> results/{run}/failures/m/w/c.json"""
    parts = list(out_path.parts)
    idx = len(parts) - 1 - parts[::-1].index("cells")
    parts[idx] = "failures"
    return Path(*parts)


def run_cell(study: Study, cell: Cell, workload_path: Path, out_path: Path, model_path: str | None = None,
             log_path: str | None = None) -> dict[str, Any]:
    out_path = Path(out_path)
    fail_path = failure_path(out_path)
    started = provenance.utc_now()
    try:
        doc = _measure(study, cell, Path(workload_path), out_path, model_path, started)
    except BaseException as exc:  # record the failure as data, then let the job fail
        out_path.unlink(missing_ok=True)
        atomic_write_json(fail_path, {
            "format": "specsweep-failure/1",
            "run": study.run, "model": cell.model, "workload": cell.workload, "config": cell.config,
            "error_type": type(exc).__name__,
            "message": " ".join(str(exc).split())[:2000],
            "traceback_tail": traceback.format_exc().strip().splitlines()[-5:],
            "log": log_path, "host": socket.gethostname(), "started": started, "failed": provenance.utc_now(),
        })
        raise
    cells.validate(doc, str(out_path))
    atomic_write_json(out_path, doc)
    fail_path.unlink(missing_ok=True)
    return doc


@dataclass
class Prepared:
    """What a cell needs before vLLM is imported (shared by the runner and the fidelity harness)."""

    workload: dict[str, Any]
    model: str
    kwargs: dict[str, Any]
    gpu_slots: dict[str, object]


def prepare(study: Study, cell: Cell, workload_path: Path, model_path: str | None) -> Prepared:
    """Set the cell's environment, load and check its workload, resolve its model, claim its GPUs."""
    for key, value in study.raw["env"].items():
        os.environ[key] = value
    wl = workloads.load(workload_path)
    if wl["name"] != cell.workload:
        raise SpecsweepError(f"workload file {workload_path}: holds workload '{wl['name']}', not '{cell.workload}'")
    model = resolve_model(study, cell, model_path)
    kwargs = engine_kwargs(study, cell, model)
    gpu_slots = slots.claim_for_cell(study.models[cell.model].tp, study.device)
    return Prepared(wl, model, kwargs, gpu_slots)


def uses_chat(spec: ModelSpec, tokenizer: Any) -> bool:
    """Prompts go through the chat template when the model entry allows it and the tokenizer has one."""
    return bool(spec.chat_template and getattr(tokenizer, "chat_template", None))


def _measure(study: Study, cell: Cell, workload_path: Path, out_path: Path, model_path: str | None,
             started: str) -> dict[str, Any]:
    prep = prepare(study, cell, workload_path, model_path)
    wl, model, kwargs, gpu_slots = prep.workload, prep.model, prep.kwargs, prep.gpu_slots
    spec = study.models[cell.model]

    from vllm import LLM, SamplingParams  # imported late: env above must be in place first
    from vllm.inputs import TokensPrompt

    t0 = time.perf_counter()
    llm = LLM(**kwargs)
    engine_start_s = time.perf_counter() - t0

    tokenizer = llm.get_tokenizer()
    use_chat = uses_chat(spec, tokenizer)
    sampling = study.sampling

    def params(items: list[dict[str, Any]]) -> list[Any]:
        return [SamplingParams(temperature=sampling["temperature"], top_p=sampling["top_p"],
                               ignore_eos=sampling["ignore_eos"], max_tokens=it["max_tokens"])
                for it in items]  # no per-request seed: the engine's seed makes runs repeatable

    timed_ids = encode_prompts(tokenizer, wl["prompts"], use_chat)
    warm_ids = encode_prompts(tokenizer, wl["warmup"], use_chat)

    t1 = time.perf_counter()
    if warm_ids:
        llm.generate([TokensPrompt(prompt_token_ids=i) for i in warm_ids], params(wl["warmup"]), use_tqdm=False)
    warmup_s = time.perf_counter() - t1

    before = metrics.snapshot(llm.get_metrics())
    with GpuSampler(spec.tp) as sampler:
        t2 = time.perf_counter()
        outs = llm.generate([TokensPrompt(prompt_token_ids=i) for i in timed_ids], params(wl["prompts"]),
                            use_tqdm=False)
        gen_wall_s = time.perf_counter() - t2
    d = metrics.delta(before, metrics.snapshot(llm.get_metrics()))

    out_ids = [list(o.outputs[0].token_ids) for o in outs]
    hashes = [token_hash(ids) for ids in out_ids]
    finish: dict[str, int] = {}
    for o in outs:
        reason = str(o.outputs[0].finish_reason)
        finish[reason] = finish.get(reason, 0) + 1
    input_tokens = sum(len(i) for i in timed_ids)
    output_tokens = sum(len(i) for i in out_ids)
    steps = d["steps"]
    effective = effective_settings(llm)
    settings = study.cell_settings(cell)
    device = provenance.device_info(spec.tp)
    gpu = sampler.summary()
    doc: dict[str, Any] = {
        "format": FORMAT,
        "status": "ok",
        "run": study.run,
        "model": cell.model,
        "workload": cell.workload,
        "config": cell.config,
        "group": study.cell_groups.get(cell),
        "units": dict(cells.UNITS),
        "settings": settings,
        "config_sha256": sha256_obj(settings),
        "model_info": {
            "source": model if not Path(model).is_dir() else str(Path(model).resolve()),
            "params_b": spec.params_b,
            "tp": spec.tp,
            "trust_remote_code": spec.trust_remote_code,
            "prompt_format": "chat" if use_chat else "raw",
            "note": None if use_chat else "model has no chat template (or chat_template: false): raw prompts",
        },
        "dataset": {
            "workload_file": str(workload_path),
            "content_sha256": wl["content_sha256"],
            "corpus_sha256": wl["corpus_sha256"],
            "seed": wl["seed"],
            "prompts": len(timed_ids),
            "warmup_prompts": len(warm_ids),
        },
        "effective": effective,
        "timing": {"engine_start_s": engine_start_s, "warmup_s": warmup_s, "gen_wall_s": gen_wall_s},
        "tokens": {
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "output_tok_s": output_tokens / gen_wall_s,
            "total_tok_s": (input_tokens + output_tokens) / gen_wall_s,
        },
        "steps": {
            "engine_steps": steps,
            "tokens_per_step": output_tokens / steps if steps else None,
            "step_time_ms": 1000.0 * gen_wall_s / steps if steps else None,
            "scheduled_tokens": d["step_tokens"],
            "preemptions": d["counters"]["vllm:num_preemptions"],
        },
        "spec": metrics.spec_summary(d) if settings["ladder"]["speculative"] else None,
        "outputs": {
            "token_sha256": hashes,
            "finish_reasons": dict(sorted(finish.items())),
            "first_output": outs[0].outputs[0].text[:300],
        },
        "vanilla_match": vanilla_match(out_path, cell, hashes),
        "gpu": gpu,
        "provenance": {
            "versions": provenance.versions(),
            "device": device | {"driver": gpu["driver"] if gpu else (sampler.driver if sampler.available else None)},
            "host": socket.gethostname(),
            "platform": platform.platform(),
            "harness": "specsweep.runner (vllm.LLM.generate, offline)",
            "gpu_slots": gpu_slots,
            "git": provenance.git_state(),
            "started": started,
            "finished": provenance.utc_now(),
        },
    }
    return doc
