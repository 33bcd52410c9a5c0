"""Serve mode: a cell measured through vLLM's OpenAI-compatible server, driven by vLLM's own benchmark client.

The engine host of a serve-mode (model, ladder step, repeat) starts `python -m vllm.entrypoints.openai.api_server`
with the engine arguments the in-process path uses (engine.engine_kwargs, speculative config included), bound to
127.0.0.1 on a port it picks, and keeps it for the cells it measures; the host's lifecycle, locks and owner
checks (enginehost) are those of every engine. The server is the host's child in a process group of its own,
ended with the host on every path: the host's exit (normal, an exception, SIGINT or SIGTERM: `close`) and its
death by SIGKILL (the kernel sends the server SIGTERM when the host dies: PR_SET_PDEATHSIG, and vLLM's server
then ends its engine processes).

A cell is one run of `vllm.benchmarks.serve.benchmark` over the cell's prompts (token ids, as the in-process
path sends them) at `max_concurrency` b (none: all at once) and the config's `serve.request_rate` (seeded
Poisson arrivals; none: all at once). Acceptance and engine steps are the difference of the server's
`/metrics` counters before and after the timed pass (metrics.snapshot's shape, so K and alpha are computed as
for every cell).
"""

from __future__ import annotations

import asyncio
import ctypes
import hashlib
import json
import math
import os
import random
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from . import celldoc, enginehost, metrics, slots, workloads
from .architectures import tokenizer_path
from .config import Cell, Study
from .engine import EngineBase, encode_prompts, uses_chat
from .errors import SpecsweepError
from .hostcpu import HostCpuMeter
from .telemetry import GpuSampler

LOOPBACK = "127.0.0.1"
SERVER_MODULE = "vllm.entrypoints.openai.api_server"
#: How long `close` waits after SIGTERM before SIGKILL.
TERM_GRACE_S = 15.0
PERCENTILES = (50.0, 90.0, 99.0)
LATENCIES = ("ttft", "tpot", "itl", "e2el")
HARNESS = "specsweep.serve (vLLM OpenAI API server on loopback, vllm.benchmarks.serve client, streaming)"
PR_SET_PDEATHSIG = 1


class EngineDeadError(SpecsweepError):
    """vLLM's server is gone or stopped answering: the cell fails and the engine host ends (enginehost ends a
    host on an error of this name), so no later cell is sent to a dead server."""


def free_port() -> int:
    """A TCP port of 127.0.0.1 free now (the server binds it a moment later; a port taken meanwhile fails the
    start with the server's own message)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


def server_argv(kwargs: dict[str, Any], port: int) -> list[str]:
    """The server's command line: the engine arguments as its flags (`--no-x` for a false boolean, JSON for a
    map), loopback only."""
    argv = [sys.executable, "-m", SERVER_MODULE, "--host", LOOPBACK, "--port", str(port)]
    for key, value in kwargs.items():
        if value is None or key == "disable_log_stats":  # the server logs stats (its /metrics) by default
            continue
        flag = key.replace("_", "-")
        if isinstance(value, bool):
            argv.append(f"--{flag}" if value else f"--no-{flag}")
        elif isinstance(value, (dict, list)):
            argv += [f"--{flag}", json.dumps(value, sort_keys=True)]
        else:
            argv += [f"--{flag}", str(value)]
    return argv


def _child_setup() -> None:
    """In the server process before exec: a process group of its own (ended as one), and SIGTERM when its
    parent, the engine host, dies (also by SIGKILL)."""
    os.setsid()
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def parse_prometheus(text: str) -> dict[str, Any]:
    """The server's /metrics text as a metrics.snapshot: the counters specsweep reads, accepted tokens per
    draft position and the engine steps (vllm:iteration_tokens_total's count and sum), summed over labels."""
    snap: dict[str, Any] = {"counters": dict.fromkeys(metrics.COUNTERS, 0), "per_pos": [], "steps": 0}
    snap["step_tokens"] = 0.0
    for line in text.splitlines():
        if not line.startswith("vllm:"):
            continue
        name_labels, _, value = line.rpartition(" ")
        name, _, labels = name_labels.partition("{")
        try:
            v = float(value)
        except ValueError:
            continue
        if name == metrics.PER_POSITION + "_total":
            pos = labels.split('position="', 1)[1].split('"', 1)[0] if 'position="' in labels else None
            if pos is None or not pos.isdigit():
                continue
            i = int(pos)
            snap["per_pos"].extend([0] * (i + 1 - len(snap["per_pos"])))
            snap["per_pos"][i] += int(v)
        elif name.endswith("_total") and name.removesuffix("_total") in snap["counters"]:
            snap["counters"][name.removesuffix("_total")] += int(v)
        elif name == metrics.STEPS_HISTOGRAM + "_count":
            snap["steps"] += int(v)
        elif name == metrics.STEPS_HISTOGRAM + "_sum":
            snap["step_tokens"] += v
    return snap


def _get(url: str, timeout: float = 30.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return str(resp.read().decode())


def _post(url: str, timeout: float = 60.0) -> int:
    req = urllib.request.Request(url, method="POST", data=b"")
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return int(resp.status)


class ServeEngine(EngineBase):
    """vLLM's OpenAI-compatible server for one (model, ladder step, repeat): started by `start`, ended by
    `close`; measures cells with vLLM's benchmark client (the engine host's `engine` in serve mode)."""

    def __init__(self, study: Study, cell: Cell, model: str, repeat: int) -> None:
        super().__init__(study, cell, model, repeat)
        self.proc: subprocess.Popen[bytes] | None = None
        self.port: int | None = None

    @property
    def base_url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def start(self, timeout_s: float | None = None) -> None:
        """Start the server and wait until its /health answers (SPECSWEEP_ENGINE_START_TIMEOUT_S at most)."""
        timeout_s = enginehost.start_timeout_s() if timeout_s is None else timeout_s
        env = dict(os.environ) | dict(self.identity["env"])
        env["VLLM_SERVER_DEV_MODE"] = "1"  # its /reset_prefix_cache: a reused server looks fresh to each cell
        self.record_models()
        self.gpu_slots = slots.claim_for_cell(self.spec.tp, self.study.device)
        for key in ("CUDA_VISIBLE_DEVICES",):
            if key in os.environ:
                env[key] = os.environ[key]
        self.port = free_port()
        argv = server_argv(self.identity["kwargs"], self.port)
        print(f"serve: starting {' '.join(argv)}", flush=True)
        t0 = time.perf_counter()
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, env=env, close_fds=True, preexec_fn=_child_setup)
        deadline = time.monotonic() + timeout_s
        while True:
            code = self.proc.poll()
            if code is not None:
                _killpg(self.proc.pid, signal.SIGKILL)  # engine processes it may have left in its group
                self.proc = None
                raise SpecsweepError(f"serve: vLLM's server exited with code {code} before it was ready (see the log)")
            try:
                if _get(f"{self.base_url}/health", timeout=5) is not None:
                    break
            except (OSError, urllib.error.URLError):
                pass
            if time.monotonic() > deadline:
                self.close()
                raise SpecsweepError(f"serve: vLLM's server not ready after {timeout_s:g} s")
            time.sleep(0.5)
        self.engine_start_s = time.perf_counter() - t0

    def close(self) -> None:
        """End the server and its engine processes (its process group): SIGTERM, SIGKILL after a grace."""
        proc, self.proc = self.proc, None
        if proc is not None:
            enginehost.end_group(proc, TERM_GRACE_S, sweep=True)

    def _metrics(self) -> dict[str, Any]:
        """The server's /metrics as a metrics.snapshot."""
        try:
            return parse_prometheus(_get(f"{self.base_url}/metrics"))
        except OSError as exc:  # urllib's URLError is an OSError
            self._check_alive()
            raise EngineDeadError(f"serve: the server's /metrics did not answer ({exc})") from None

    def _check_alive(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            code = None if self.proc is None else self.proc.returncode
            raise EngineDeadError(f"serve: vLLM's server is gone (exit code {code})")

    def measure(self, cell: Cell, workload_path: Path) -> dict[str, Any]:
        """Reset the prefix cache, warm up (the workload's warm-up prompts, untimed), then time one benchmark
        run over the cell's prompts between two /metrics scrapes."""
        if cell.model != self.identity["model"] or cell.step != self.step:
            raise SpecsweepError(
                f"engine {self.key}: cannot measure {cell.key} (it serves {self.identity['model']}/*/{self.step})"
            )
        self._check_alive()
        wl = workloads.load(workload_path)
        if wl["name"] != cell.base_workload:
            raise SpecsweepError(
                f"workload file {workload_path}: holds workload '{wl['name']}', not '{cell.base_workload}'"
            )
        settings = self.study.cell_settings(cell)
        b = cell.concurrency
        per_slot = settings["workload"].get("prompts_per_slot")
        if b is not None and per_slot is not None:
            wl = {**wl, "prompts": wl["prompts"][: min(len(wl["prompts"]), per_slot * b)]}
        self.measured += 1
        t0 = time.perf_counter()
        try:
            status = _post(f"{self.base_url}/reset_prefix_cache")
        except OSError as exc:
            self._check_alive()
            raise EngineDeadError(f"serve: the server's /reset_prefix_cache did not answer ({exc})") from None
        resets = {"done": ["prefix_cache"], "suffix_responses_evicted": 0, "reset_s": time.perf_counter() - t0}
        if status != 200:
            raise SpecsweepError(f"serve: /reset_prefix_cache answered {status}")

        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(
            tokenizer_path(self.spec, self.model), trust_remote_code=self.spec.trust_remote_code
        )
        use_chat = uses_chat(self.spec, tokenizer)
        timed_ids = encode_prompts(tokenizer, wl["prompts"], use_chat)
        warm_ids = encode_prompts(tokenizer, wl["warmup"], use_chat)
        srv = settings.get("serve") or {}
        sampling = settings["sampling"]

        t1 = time.perf_counter()
        if warm_ids:
            self._bench(tokenizer, warm_ids, wl["warmup"], sampling, b, None, {})
        warmup_s = time.perf_counter() - t1
        self._check_alive()
        before = self._metrics()
        with GpuSampler(self.spec.tp) as sampler, HostCpuMeter() as host_cpu:
            result = self._bench(
                tokenizer, timed_ids, wl["prompts"], sampling, b, srv.get("request_rate"), srv.get("goodput_ms") or {}
            )
        after = self._metrics()
        failed = [e for e in result.get("errors") or [] if e]
        self._check_alive()
        if result.get("completed") != len(timed_ids):
            raise SpecsweepError(
                f"serve: {len(timed_ids) - int(result.get('completed') or 0)} of {len(timed_ids)} requests failed: "
                f"{' '.join(str(failed[0]).split())[:300] if failed else 'no error given'}"
            )
        return {
            "workload": wl,
            "use_chat": use_chat,
            "timed_ids": timed_ids,
            "warm_count": len(warm_ids),
            "result": result,
            "delta": metrics.delta(before, after),
            "warmup_s": warmup_s,
            "position": self.measured,
            "resets": resets,
            "gpu": sampler.summary(),
            "host_cpu": host_cpu.summary(),
            "driver": sampler.driver if sampler.available else None,
            "gpu_uuids": sampler.uuids if sampler.available else None,
        }

    def _bench(
        self,
        tokenizer: Any,
        ids: list[list[int]],
        items: list[dict[str, Any]],
        sampling: dict[str, Any],
        b: int | None,
        rate: float | None,
        goodput_ms: dict[str, float],
    ) -> dict[str, Any]:
        """One run of vLLM's benchmark client (its arrivals seeded as `vllm bench serve --seed` seeds them)."""
        import numpy as np
        from vllm.benchmarks.datasets import SampleRequest
        from vllm.benchmarks.serve import TaskType, benchmark

        requests = [
            SampleRequest(prompt=i, prompt_len=len(i), expected_output_len=int(it["max_tokens"]))
            for i, it in zip(ids, items, strict=True)
        ]
        random.seed(self.study.raw["seed"])
        np.random.seed(self.study.raw["seed"])
        goodput = {k.removesuffix("_ms"): float(v) for k, v in goodput_ms.items()}
        return asyncio.run(
            benchmark(
                task_type=TaskType.GENERATION,
                endpoint_type="openai",
                api_url=f"{self.base_url}/v1/completions",
                base_url=self.base_url,
                model_id=self.model,
                model_name=None,
                tokenizer=tokenizer,
                input_requests=requests,
                logprobs=None,
                request_rate=float(rate) if rate else math.inf,
                burstiness=1.0,
                disable_tqdm=True,
                num_warmups=0,
                profile=False,
                selected_percentile_metrics=list(LATENCIES),
                selected_percentiles=list(PERCENTILES),
                ignore_eos=bool(sampling.get("ignore_eos", False)),
                goodput_config_dict=goodput,
                max_concurrency=b,
                lora_modules=None,
                extra_headers=None,
                extra_body={"temperature": sampling["temperature"], "top_p": sampling["top_p"]},
                ready_check_timeout_sec=0,
            )
        )


def _killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _quantiles_ms(result: dict[str, Any], name: str) -> dict[str, float | None]:
    return {
        "mean": result.get(f"mean_{name}_ms"),
        "median": result.get(f"median_{name}_ms"),
        "p90": result.get(f"p90_{name}_ms"),
        "p99": result.get(f"p99_{name}_ms"),
    }


def _q(values: list[float | None], q: float) -> float | None:
    import numpy as np

    vals = [v for v in values if v is not None]
    return float(np.quantile(vals, q)) if vals else None


def build_doc(
    study: Study, cell: Cell, repeat: int, workload_path: Path, engine: ServeEngine, raw: dict[str, Any]
) -> dict[str, Any]:
    """The cell document of a serve-mode measurement: the fields of every cell (format specsweep-cell/2), the
    client's latencies in `latency` and `requests`, and the whole of the client's summary in `serve`."""
    spec = study.models[cell.model]
    wl, d, res = raw["workload"], raw["delta"], raw["result"]
    settings = study.cell_settings(cell)
    kwargs = engine.identity["kwargs"]
    out_lens = [int(n) for n in res["output_lens"]]
    ttft = [float(t) for t in res["ttfts"]]
    e2e = [float(t) for t in res["latencies"]]
    tpot = [(e - t) / (n - 1) if n > 1 else None for e, t, n in zip(e2e, ttft, out_lens, strict=True)]
    ends = [s + e for s, e in zip(res["start_times"], e2e, strict=True)]
    order = sorted(range(len(ends)), key=lambda i: (ends[i], i))
    rank = [0] * len(ends)
    for r, i in enumerate(order):
        rank[i] = r
    texts = [str(t) for t in res["generated_texts"]]
    input_tokens = sum(len(i) for i in raw["timed_ids"])
    output_tokens = sum(out_lens)
    wall = float(res["duration"])
    steps = int(d["steps"])
    if steps < 1:
        raise SpecsweepError("serve: the server's /metrics counted no engine step in the timed pass")
    b = cell.concurrency
    gpu = raw["gpu"]
    server_pid = engine.proc.pid if engine.proc is not None else os.getpid()
    srv = settings.get("serve") or {}
    return {
        **celldoc.header(study, cell, repeat, engine, raw["use_chat"]),
        "dataset": celldoc.dataset(
            workload_path, wl, len(raw["timed_ids"]), raw["warm_count"], input_tokens, output_tokens
        ),
        "effective": {  # what was asked for: the server's resolved config is not read back
            "cudagraph_mode": str((kwargs.get("compilation_config") or {}).get("cudagraph_mode", "default")),
            "enforce_eager": kwargs.get("enforce_eager"),
            "async_scheduling": kwargs.get("async_scheduling"),
            "dtype": str(kwargs.get("dtype", "auto")),
            "kv_cache_dtype": str(kwargs.get("kv_cache_dtype", "auto")),
            "quantization": kwargs.get("quantization"),
            "speculative_method": (kwargs.get("speculative_config") or {}).get("method"),
            "num_speculative_tokens": (kwargs.get("speculative_config") or {}).get("num_speculative_tokens"),
            "max_model_len": kwargs.get("max_model_len"),
            "source": "the server's arguments as requested (vLLM's resolved config is not read back in serve mode)",
        },
        # pid: the server's (the engine's process); the host's where it is gone
        **celldoc.pass_fields(engine, raw, server_pid, wall, input_tokens, output_tokens, None),
        "steps": {
            "engine_steps": steps,
            "tokens_per_step": output_tokens / steps,
            "step_time_ms": 1000.0 * wall / steps,
            "scheduled_tokens": d["step_tokens"],
            "preemptions": d["counters"]["vllm:num_preemptions"],
            "prefill_steps": None,
            "prefill_method": None,
            "decode_steps": None,
            "decode_step_time_ms": None,
            "decode_method": None,
            "decode_step_time_ms_timestamps": None,
            "decode_step_time_ms_probe": None,
            "decode_only_steps": None,
        },
        "requests": {
            "output_tokens": out_lens,
            "gen_steps": [None] * len(out_lens),
            "ttft_s": ttft,
            "tpot_s": tpot,
            "finish_order": rank,
        },
        "latency": {
            "ttft_s": {"median": _q(list(ttft), 0.5), "p90": _q(list(ttft), 0.9), "p99": _q(list(ttft), 0.99)},
            "tpot_s": {"median": _q(tpot, 0.5), "p90": _q(tpot, 0.9), "p99": _q(tpot, 0.99)},
            "decode_tok_s": None,
            "source": "vllm.benchmarks.serve, client side over streaming: TTFT from sending to the first chunk, "
            "TPOT = (end-to-end latency - TTFT) / (output tokens - 1)",
        },
        "concurrency": {
            "target": b,
            "mean_running": None,
            "max_running": None,
            "source": "serve mode: the server's batch is not read (the client's count: serve.max_concurrent_requests)",
        },
        "spec": metrics.spec_summary(d) if settings["ladder"]["speculative"] else None,
        "outputs": {
            # the client returns text, not token ids: hashes of the generated text (compared serve with serve)
            "token_sha256": [hashlib.sha256(t.encode()).hexdigest()[:16] for t in texts],
            "finish_reasons": {"not reported by the client": len(texts)},
            "first_output": texts[0][:300] if texts else "",
        },
        "serve": {
            "url": engine.base_url,
            "max_concurrency": b,
            "request_rate": srv.get("request_rate"),
            "arrivals": "all at once" if not srv.get("request_rate") else "Poisson (burstiness 1), seeded",
            "arrival_seed": study.raw["seed"],
            "duration_s": wall,
            "completed": int(res["completed"]),
            "failed": int(res.get("failed") or 0),
            "request_throughput": res["request_throughput"],
            "output_throughput": res["output_throughput"],
            "total_token_throughput": res["total_token_throughput"],
            "max_concurrent_requests": res.get("max_concurrent_requests"),
            "goodput_ms": dict(srv.get("goodput_ms") or {}),
            "request_goodput": res.get("request_goodput"),
            **{f"{m}_ms": _quantiles_ms(res, m) for m in LATENCIES},
            "client_spec_decode": {
                k: res[k]
                for k in (
                    "spec_decode_acceptance_rate",
                    "spec_decode_acceptance_length",
                    "spec_decode_num_drafts",
                    "spec_decode_draft_tokens",
                    "spec_decode_accepted_tokens",
                    "spec_decode_per_position_acceptance_rates",
                )
                if k in res
            },
            "source": "vllm.benchmarks.serve.benchmark (latencies in ms: mean, median, p90, p99 over requests)",
        },
        "gpu": gpu,
        "host_cpu": raw.get("host_cpu"),
        "provenance": celldoc.provenance_block(spec.tp, engine, raw, HARNESS),
    }
