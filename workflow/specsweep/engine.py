"""The engine side of a measurement, shared by the engine host, the in-process runner and the fidelity harness:
vLLM's engine arguments for a cell, its identity (which cells may share one engine), the cache resets that
make a reused engine look fresh, and one timed pass over a workload.
"""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path
from typing import Any

from . import inflight, metrics, paths, slots, workloads
from .architectures import TOKENIZER_SUBDIR, engine_overrides, is_dummy, tokenizer_path
from .config import Cell, ModelSpec, Study
from .errors import SpecsweepError
from .hostcpu import HostCpuMeter
from .jsonio import sha256_obj
from .preflight_checks import check_speculative
from .telemetry import GpuSampler, memory_snapshot

#: Keys of the engine block that are specsweep's own, not vLLM's.
NOT_VLLM_KEYS: frozenset[str] = frozenset()
#: What every measurement on a reused engine resets before it starts, so it sees what a fresh engine would.
RESETS = ("prefix_cache", "suffix_cache")


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
        if is_dummy(spec) and not (p / TOKENIZER_SUBDIR).is_dir():
            raise SpecsweepError(
                f"model path {p}: a dummy-weights folder without {TOKENIZER_SUBDIR}/ (made by an older specsweep); "
                "remove it and rerun, Snakemake remakes it"
            )
        return str(p.resolve())
    return source


def model_folder(spec: ModelSpec) -> str:
    """Where a `models` entry's files are: resources/models/{name} for one fetched at a revision, built or of
    random weights (absolute, as the target's folder is given to vLLM), else the local folder its hf_id names."""
    if spec.revision or spec.build or is_dummy(spec) or spec.hf_id is None:
        return str(Path(paths.MODEL.format(model=spec.name)).resolve())
    return str(Path(spec.hf_id).expanduser())


def engine_kwargs(study: Study, cell: Cell, model: str) -> dict[str, Any]:
    """vLLM's LLM(...) arguments: every engine key the (validated) config sets, the ladder step's levers."""
    settings = study.cell_settings(cell)
    eng, step, spec = settings["engine"], settings["ladder"], study.models[cell.model]
    kw: dict[str, Any] = {
        "model": model,
        "tokenizer": tokenizer_path(spec, model),
        "tensor_parallel_size": spec.tp,
        "trust_remote_code": spec.trust_remote_code,
        "gpu_memory_utilization": step["gpu_memory_utilization"],
        "disable_log_stats": False,  # get_metrics() needs the stat loggers
    }
    for key, value in sorted(eng.items()):
        if key not in NOT_VLLM_KEYS and value is not None:
            kw[key] = value
    if step["speculative"]:
        kw["speculative_config"] = dict(step["speculative"])
        draft = study.draft_model(cell.step)
        if draft is not None:  # a `models` entry: its folder, made by fetch_model, build_model or dummy_model
            kw["speculative_config"]["model"] = model_folder(draft)
    if step["compilation"]:
        kw["compilation_config"] = dict(step["compilation"])
    kw.update(engine_overrides(spec))  # weights: dummy -> load_format="dummy"
    return kw


def cell_env(study: Study, cell: Cell) -> dict[str, str]:
    """The process environment of a cell: the study's env, then the ladder step's own."""
    return dict(study.raw["env"]) | dict(study.ladder[cell.step].env or {})


def engine_identity(study: Study, cell: Cell, model: str, repeat: int) -> dict[str, Any]:
    """What defines an engine: cells whose identity is equal may be measured by one engine instance."""
    identity = {
        "run": study.run,
        "model": cell.model,
        "config": cell.step,  # the ladder step, under the key the engine keys were first hashed with
        "repeat": study.engine_repeat(repeat),
        "kwargs": engine_kwargs(study, cell, model),
        "env": cell_env(study, cell),
    }
    if study.mode(cell.step) == "serve":  # vLLM's server (specsweep.serve); offline engines keep their keys
        identity["mode"] = "serve"
    identity |= study.engine_warmup_setting(cell)  # an engine warmed otherwise is another engine; off: keys unchanged
    return identity


def engine_key(identity: dict[str, Any]) -> str:
    return sha256_obj(identity)[:16]


def token_hash(ids: list[int]) -> str:
    return hashlib.sha256(",".join(map(str, ids)).encode()).hexdigest()[:16]


def encode_prompts(tokenizer: Any, items: list[dict[str, Any]], use_chat: bool) -> list[list[int]]:
    """The token ids the engine is given: a prompt as one user message through the chat template (a dataset's
    chat prompt as its own messages), or its text as it is when the model has no chat template."""
    out = []
    for item in items:
        if use_chat:
            messages = item.get("messages") or [{"role": "user", "content": item["text"]}]
            ids = tokenizer.apply_chat_template(messages, tokenize=True, add_generation_prompt=True)
            if isinstance(ids, dict) or hasattr(ids, "keys"):  # BatchEncoding in newer transformers
                ids = ids["input_ids"]
        else:
            ids = tokenizer(item["text"])["input_ids"]
        out.append(list(ids))
    return out


def request_max_tokens(
    tokenizer: Any, items: list[dict[str, Any]], ids: list[list[int]], max_model_len: int | None
) -> list[int]:
    """Each request's max_tokens as the engine runs it. A generated workload's prompts keep theirs (a prompt
    that does not fit is refused by the callers). A dataset's prompt (one with an `origin`, its file and line)
    takes its recorded response's length in tokens where that was left to count here (at most the workload's
    max_tokens), cut to what max_model_len leaves after the prompt; a prompt of max_model_len tokens or more
    is refused in one line naming its file and line."""
    out = []
    for item, prompt in zip(items, ids, strict=True):
        m = int(item["max_tokens"])
        if "origin" in item:
            if "response" in item:
                m = min(m, max(1, len(tokenizer(item["response"], add_special_tokens=False)["input_ids"])))
            if max_model_len is not None:
                if len(prompt) >= max_model_len:
                    raise SpecsweepError(
                        f"dataset {item['origin']}: the prompt is {len(prompt)} tokens, leaving no room under "
                        f"max_model_len {max_model_len}"
                    )
                m = min(m, max_model_len - len(prompt))
        out.append(m)
    return out


def uses_chat(spec: ModelSpec, tokenizer: Any) -> bool:
    """Prompts go through the chat template when the model entry allows it and the tokenizer has one."""
    return bool(spec.chat_template and getattr(tokenizer, "chat_template", None))


def effective_settings(llm: Any) -> dict[str, Any]:
    """What vLLM actually chose, read back from its resolved config."""
    vc = llm.llm_engine.vllm_config
    spec = vc.speculative_config
    use_v2 = getattr(vc, "use_v2_model_runner", None)
    mode = vc.compilation_config.cudagraph_mode
    return {
        "cudagraph_mode": str(getattr(mode, "name", mode)),
        "compilation_mode": str(getattr(vc.compilation_config.mode, "name", vc.compilation_config.mode)),
        "enforce_eager": bool(vc.model_config.enforce_eager),
        "async_scheduling": bool(getattr(vc.scheduler_config, "async_scheduling", False)),
        "model_runner": None if use_v2 is None else ("v2" if use_v2 else "v1"),
        "dtype": str(vc.model_config.dtype).replace("torch.", ""),
        "kv_cache_dtype": str(vc.cache_config.cache_dtype),
        "quantization": getattr(vc.model_config, "quantization", None),  # the weights' method; None: as loaded
        "speculative_method": getattr(spec, "method", None) if spec else None,
        "num_speculative_tokens": getattr(spec, "num_speculative_tokens", None) if spec else None,
        "tensor_parallel_size": int(vc.parallel_config.tensor_parallel_size),
        "max_model_len": int(vc.model_config.max_model_len),
        "num_gpu_blocks": getattr(vc.cache_config, "num_gpu_blocks", None),  # the KV cache, as the engine sized it
        "block_size": getattr(vc.cache_config, "block_size", None),
    }


def _evict_suffix_cache(worker: Any) -> int:
    """Runs on each worker: drop every cached response of the suffix decoder (the drafts' global memory)."""
    runner = getattr(worker, "model_runner", None)
    drafter = getattr(runner, "drafter", None)
    cache = getattr(drafter, "suffix_cache", None)
    if cache is None:
        return 0
    cached = list(cache.cached_requests)
    for req_id in cached:
        cache.evict_cached_response(req_id)
    return len(cached)


def _evict_suffix_requests(worker: Any, request_ids: list[str]) -> int:
    """Runs on each worker: drop the suffix decoder's cached responses of these requests (external ids)."""
    runner = getattr(worker, "model_runner", None)
    cache = getattr(getattr(runner, "drafter", None), "suffix_cache", None)
    if cache is None:
        return 0
    wanted = set(request_ids)
    drop = [r for r in list(cache.cached_requests) if inflight.external_id(str(r)) in wanted]
    for req_id in drop:
        cache.evict_cached_response(req_id)
    return len(drop)


def evict_suffix_responses(llm: Any) -> int:
    """Empty the suffix decoder's global response cache on every worker; the number of responses evicted."""
    return sum(int(n or 0) for n in llm.collective_rpc(_evict_suffix_cache))


def reset_caches(llm: Any, speculative_method: str | None) -> dict[str, Any]:
    """Make a reused engine look fresh: empty the prefix cache and the suffix decoder's response cache."""
    t0 = time.perf_counter()
    if llm.reset_prefix_cache() is False:
        raise SpecsweepError("engine: the prefix cache could not be reset (requests still running?)")
    evicted = 0
    if speculative_method == "suffix":
        evicted = evict_suffix_responses(llm)
    return {"done": list(RESETS), "suffix_responses_evicted": evicted, "reset_s": time.perf_counter() - t0}


#: The prefix-cache salt of an engine's own warm-up requests (config engine_warmup_prompts).
ENGINE_WARMUP_SALT = "specsweep-engine-warmup"
#: At most this many tokens per engine warm-up request: enough decode steps for the first drafts and
#: verifications (the n-gram proposer's first real batch), a fraction of a timed request's cost.
ENGINE_WARMUP_MAX_TOKENS = 16

#: The prefix-cache salt of a repeated prompt in cycle c >= 1 of a pass (vLLM hashes a request's cache_salt into
#: its first KV block's key, so no block of an earlier cycle, nor of another cycle, serves it).
CYCLE_SALT = "specsweep-cycle-{cycle}"


def pool_prompt(tokens_prompt: Any, ids: list[int], cycle: int) -> Any:
    """A pool prompt as request of cycle `cycle` of a pass: the first cycle as it is, a repeat with its cycle's
    cache salt, so the prefix cache cannot turn it into a cheaper request than its first run."""
    if cycle == 0:
        return tokens_prompt(prompt_token_ids=ids)
    return tokens_prompt(prompt_token_ids=ids, cache_salt=CYCLE_SALT.format(cycle=cycle))


def pool_record(pool: int, requests: int, min_s: float | None, min_tok: int | None) -> dict[str, Any]:
    """What a pass at b ran: whole cycles over the workload's prompt pool in file order (each prompt equally
    often, at every b), the repeats salted against the prefix cache, and the pass minimums it was sized by."""
    return {
        "prompts": pool,
        "cycles": requests // pool,
        "requests": requests,
        "order": "the workload's prompts in file order, cycled; request j is prompt j mod prompts",
        "repeat_salt": CYCLE_SALT if requests > pool else None,
        "min_pass_seconds": min_s,
        "min_pass_output_tokens": min_tok,
    }


class EngineBase:
    """What every engine of one (model, ladder step, repeat) holds, in process (Engine) or as vLLM's server
    (serve.ServeEngine): its identity and key, the cells it measured, its start's cost, its GPU slots and the
    model folder's record."""

    def __init__(self, study: Study, cell: Cell, model: str, repeat: int) -> None:
        self.study, self.model, self.repeat = study, model, repeat
        self.spec = study.models[cell.model]
        self.step = cell.step
        self.identity = engine_identity(study, cell, model, repeat)
        self.key = engine_key(self.identity)
        self.measured = 0
        self.import_s = 0.0
        self.engine_start_s = 0.0
        self.gpu_slots: dict[str, object] = {}
        self.llm: Any = None  # the in-process engine (vllm.LLM); none for a server
        self.model_record: dict[str, Any] | None = None
        self.draft_record: dict[str, Any] | None = None  # the drafter's `models` entry, recorded as the target's
        self.memory_after_start: dict[str, Any] | None = None

    def record_models(self) -> None:
        """Which weights exactly, of the target and of the drafter's `models` entry: revision and a hash of the
        file manifest (fetch.model_record), before the engine starts."""
        from .fetch import model_record

        if Path(self.model).is_dir():
            self.model_record = model_record(Path(self.model), expect_revision=self.spec.revision)
        draft = self.study.draft_model(self.step)
        if draft is not None:
            folder = Path(model_folder(draft))
            rec = model_record(folder, expect_revision=draft.revision) if folder.is_dir() else None
            self.draft_record = {
                "name": draft.name,
                "source": str(folder),
                "weights": draft.weights,
                "build": draft.build,
                "revision": (rec or {}).get("revision"),
                "manifest_sha256": (rec or {}).get("manifest_sha256"),
            }


class Engine(EngineBase):
    """One vLLM engine for one (model, ladder step, repeat); measures workloads one after another."""

    def start(self) -> None:
        for key, value in self.identity["env"].items():
            os.environ[key] = value
        if self.study.ladder[self.step].method == "suffix":
            # the suffix-cache reset runs a function on the workers (see reset_caches)
            os.environ["VLLM_ALLOW_INSECURE_SERIALIZATION"] = "1"
        self.record_models()
        self.gpu_slots = slots.claim_for_cell(self.spec.tp, self.study.device)
        t0 = time.perf_counter()
        from vllm import LLM  # imported late: the env above must be in place first

        self.import_s = time.perf_counter() - t0
        # vLLM's own check of the speculative block, before the engine start it would otherwise fail in
        check_speculative(self.study.ladder[self.step].speculative, f"config: ladder.{self.step}.speculative")
        t1 = time.perf_counter()
        self.llm = LLM(**self.identity["kwargs"])
        self.engine_start_s = time.perf_counter() - t1
        self.memory_after_start = memory_snapshot(self.spec.tp)

    def measure(self, cell: Cell, workload_path: Path) -> dict[str, Any]:
        """Reset, warm up, time one pass over the workload (all prompts at once, or b in flight for a cell at
        concurrency b: whole cycles over its prompts, repeats salted, until the pass's minimums are met),
        recording each engine step; then an untimed prefill probe. Returns raw data."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt
        from vllm.sampling_params import RequestOutputKind

        if cell.model != self.identity["model"] or cell.step != self.step:
            raise SpecsweepError(
                f"engine {self.key}: cannot measure {cell.key} (it serves {self.identity['model']}/*/{self.step})"
            )
        wl = workloads.load(workload_path)
        if wl["name"] != cell.base_workload:
            raise SpecsweepError(
                f"workload file {workload_path}: holds workload '{wl['name']}', not '{cell.base_workload}'"
            )
        llm, sampling = self.llm, self.study.cell_sampling(cell)
        b = cell.concurrency
        axis = self.study.cell_settings(cell)["workload"]  # config AXIS_KEYS: how a pass at b is sized
        if b is not None:  # the config check knows only a configured max_num_seqs; this is vLLM's own
            limit = int(llm.llm_engine.vllm_config.scheduler_config.max_num_seqs)
            if b > limit:
                raise SpecsweepError(
                    f"cell {cell.key}: {b} requests in flight exceed the engine's max_num_seqs {limit}"
                )
        self.measured += 1
        position = self.measured
        method = self.study.ladder[self.step].method
        tokenizer = llm.get_tokenizer()
        use_chat = uses_chat(self.spec, tokenizer)

        def params(lengths: list[int], max_tokens: int | None = None) -> list[Any]:
            return [
                SamplingParams(
                    temperature=sampling["temperature"],
                    top_p=sampling["top_p"],
                    ignore_eos=sampling["ignore_eos"],
                    max_tokens=max_tokens or m,
                    output_kind=RequestOutputKind.FINAL_ONLY,  # as LLM.generate sets it: one output per request
                )
                for m in lengths
            ]  # no per-request seed: the engine's seed makes runs repeatable

        pool_ids = encode_prompts(tokenizer, wl["prompts"], use_chat)
        timed_ids = pool_ids
        warm_ids = encode_prompts(tokenizer, wl["warmup"], use_chat)
        max_len = self.identity["kwargs"].get("max_model_len")
        timed_max = request_max_tokens(tokenizer, wl["prompts"], timed_ids, max_len)
        warm_max = request_max_tokens(tokenizer, wl["warmup"], warm_ids, max_len)
        longest = max(len(i) + m for i, m in zip(timed_ids, timed_max, strict=True))
        if max_len is not None and longest > max_len:
            raise SpecsweepError(
                f"workload {cell.workload}: a prompt plus its max_tokens is {longest} tokens, "
                f"over engine.max_model_len {max_len}"
            )

        engine_warmup = None
        n_engine_warm = self.study.engine_warmup_setting(cell).get("engine_warmup_prompts", 0)
        if position == 1 and n_engine_warm:
            # the engine's own warm-up, once, before its first cell: the first prompts of that cell's pool,
            # salted so that no block of theirs serves a timed request, then the reset below, as between cells
            warm = pool_ids[:n_engine_warm]
            warm_lim = [min(m, ENGINE_WARMUP_MAX_TOKENS) for m in timed_max[:n_engine_warm]]
            t0 = time.perf_counter()
            llm.generate(
                [TokensPrompt(prompt_token_ids=i, cache_salt=ENGINE_WARMUP_SALT) for i in warm],
                params(warm_lim),
                use_tqdm=False,
            )
            engine_warmup = {"prompts": len(warm), "seconds": time.perf_counter() - t0}
        resets = reset_caches(llm, None if method == "none" else method)

        t1 = time.perf_counter()
        if warm_ids:
            llm.generate([TokensPrompt(prompt_token_ids=i) for i in warm_ids], params(warm_max), use_tqdm=False)
        warmup_s = time.perf_counter() - t1
        if warm_ids and self.study.suffix_cache_setting(cell).get("suffix_cache_after_warmup") == "empty":
            # the warm-up's responses would stay in the global suffix cache and be drafted from in the timed
            # pass (a cell at b = 1 times 4 requests after 8 warm-up ones); evict them, so the cache holds only
            # the timed pass's own responses, as on a fresh engine and as `specsweep replay` assumes
            resets = resets | {"after_warmup": {"suffix_responses_evicted": evict_suffix_responses(llm)}}

        pool_params = params(timed_max)  # per pool prompt (request_max_tokens)

        def request(j: int) -> tuple[Any, Any]:
            """Request j of a pass at b: prompt j % P of the pool, in cycle j // P (salted, see pool_prompt)."""
            cycle, p = divmod(j, len(pool_ids))
            return pool_prompt(TokensPrompt, pool_ids[p], cycle), pool_params[p]

        min_s, min_tok = axis.get("min_pass_seconds"), axis.get("min_pass_output_tokens")
        size = len(pool_ids)
        repeats: dict[str, Any] = {"repeats": 0, "earlier_in_flight": 0, "evicted": 0, "evict_s": 0.0}

        def forget_earlier_runs(js: list[int], in_flight: set[int]) -> None:
            """Before repeats are added: the suffix decoder's response cache drops the earlier runs of their
            prompts (a repeat would otherwise be drafted from its own earlier answer); timed, recorded."""
            t = time.perf_counter()
            earlier = {j: range(j % size, j, size) for j in js}
            ids = [f"{inflight.REQUEST_PREFIX}{k}" for ks in earlier.values() for k in ks]
            repeats["repeats"] += len(js)
            repeats["earlier_in_flight"] += sum(1 for ks in earlier.values() if any(k in in_flight for k in ks))
            repeats["evicted"] += sum(int(n or 0) for n in llm.collective_rpc(_evict_suffix_requests, args=(ids,)))
            repeats["evict_s"] += time.perf_counter() - t

        before = metrics.snapshot(llm.get_metrics())
        steady: int | None = None
        with (
            GpuSampler(self.spec.tp) as sampler,
            inflight.StepObserver(llm.llm_engine.engine_core) as observer,
            HostCpuMeter() as host_cpu,
        ):

            def more() -> bool:
                """The pass has not yet met its minimum (min_pass_seconds, min_pass_output_tokens)."""
                if min_s is not None and time.perf_counter() - t2 < min_s:
                    return True
                return min_tok is not None and sum(sum(s.new_tokens.values()) for s in observer.steps) < min_tok

            t2 = time.perf_counter()
            if b is None:
                prompts = [TokensPrompt(prompt_token_ids=i) for i in timed_ids]
                outs = llm.generate(prompts, pool_params, use_tqdm=False)
            else:
                outs, _, steady = inflight.run_in_flight(
                    llm.llm_engine,
                    request,
                    len(pool_ids),
                    b,
                    min_requests=(axis.get("prompts_per_slot") or 0) * b,
                    more=more if min_s is not None or min_tok is not None else None,
                    after_step=lambda: len(observer.steps),
                    on_repeats=forget_earlier_runs if method == "suffix" else None,
                )
            gen_wall_s = time.perf_counter() - t2
        d = metrics.delta(before, metrics.snapshot(llm.get_metrics()))
        n = len(outs)
        pool: dict[str, Any] | None = None
        if b is not None:
            prompts = [request(j)[0] for j in range(n)]
            timed_ids = [pool_ids[j % len(pool_ids)] for j in range(n)]
            wl = {**wl, "prompts": [wl["prompts"][j % len(pool_ids)] for j in range(n)]}
            pool = pool_record(len(pool_ids), n, min_s, min_tok) | {
                "suffix_cache": repeats if method == "suffix" else None
            }
        request_ids = [str(o.request_id) for o in outs]
        finish_order = inflight.finish_order_from_steps(observer.steps, request_ids)

        # The prefill probe: the same prompts, one token each, on an empty prefix cache (after the timed pass,
        # so that pass is untouched). Its steps and seconds are the prefill part of the timed pass.
        prefill: dict[str, Any] = {"probe_s": None, "probe_steps": None, "method": None}
        if self.study.raw["prefill_probe"]:
            llm.reset_prefix_cache()
            before_p = metrics.snapshot(llm.get_metrics())
            t3 = time.perf_counter()
            llm.generate(prompts, params([1] * len(prompts)), use_tqdm=False)
            prefill = {
                "probe_s": time.perf_counter() - t3,
                "probe_steps": metrics.delta(before_p, metrics.snapshot(llm.get_metrics()))["steps"],
                "method": "max_tokens=1 probe on an empty prefix cache",
            }

        return {
            "workload": wl,
            "use_chat": use_chat,
            "timed_ids": timed_ids,
            "warm_count": len(warm_ids),
            "outs": outs,
            "delta": d,
            "prefill": prefill,
            "warmup_s": warmup_s,
            "gen_wall_s": gen_wall_s,
            "gpu": sampler.summary(),
            "host_cpu": host_cpu.summary(),
            "driver": sampler.driver if sampler.available else None,
            "gpu_uuids": sampler.uuids if sampler.available else None,
            "position": position,
            "engine_warmup": engine_warmup,
            "resets": resets,
            "effective": effective_settings(llm),
            "concurrency": inflight.concurrency_block(observer.steps, b, steady),
            "pool": pool,
            "gen_steps": inflight.gen_steps(observer.steps, request_ids),
            "finish_order": finish_order,
            "decode": inflight.decode_phase(observer.steps),
        }
