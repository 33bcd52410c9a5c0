"""GPU slots: concurrent cells never share a GPU id (the allocator itself; no GPU is needed to test it)."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import time
from pathlib import Path

import pytest

from specsweep.errors import SpecsweepError
from specsweep.slots import GpuSlots


def _worker(slot_dir: str, count: int, hold_s: float, out: str) -> None:
    os.environ["SPECSWEEP_GPU_IDS"] = "0,1,2,3,4,5,6,7"
    with GpuSlots(count, Path(slot_dir), poll_s=0.01) as s:
        start = time.monotonic()
        time.sleep(hold_s)
        end = time.monotonic()
        ids = list(s.ids)
    Path(out).write_text(json.dumps({"ids": ids, "start": start, "end": end}))


def test_concurrent_cells_get_disjoint_gpus(tmp_path):
    ctx = mp.get_context("spawn")
    sizes = [1, 1, 2, 4, 1, 8, 2, 1, 1, 2, 4, 1]  # TP sizes of 12 cells started at once on an 8-GPU node
    procs = []
    for i, n in enumerate(sizes):
        p = ctx.Process(target=_worker, args=(str(tmp_path / "slots"), n, 0.3, str(tmp_path / f"r{i}.json")))
        p.start()
        procs.append(p)
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    runs = [json.loads((tmp_path / f"r{i}.json").read_text()) for i in range(len(sizes))]
    for r, n in zip(runs, sizes, strict=False):
        assert len(r["ids"]) == n == len(set(r["ids"]))
    overlaps = 0
    for i, a in enumerate(runs):
        for b in runs[i + 1 :]:
            if a["start"] < b["end"] and b["start"] < a["end"]:  # ran at the same time
                overlaps += 1
                assert not set(a["ids"]) & set(b["ids"]), (a, b)
    assert overlaps > 0  # the test did exercise concurrency


def test_slot_is_freed_when_its_holder_is_killed(tmp_path, monkeypatch):
    ctx = mp.get_context("spawn")
    p = ctx.Process(target=_worker, args=(str(tmp_path / "slots"), 8, 60, str(tmp_path / "r.json")))
    p.start()
    monkeypatch.setenv("SPECSWEEP_GPU_IDS", "0,1,2,3,4,5,6,7")
    waiter = GpuSlots(1, tmp_path / "slots", timeout_s=0.5, poll_s=0.01)
    time.sleep(3)  # the holder has all 8
    with pytest.raises(SpecsweepError, match="no 1 free GPU"):
        waiter.acquire()
    p.kill()  # SIGKILL: no cleanup code runs
    p.join()
    with GpuSlots(1, tmp_path / "slots", timeout_s=5, poll_s=0.01) as s:
        assert s.ids == ["0"]


def test_cell_larger_than_node(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECSWEEP_GPU_IDS", "0,1")
    with pytest.raises(SpecsweepError, match=r"a cell needs 4 GPU\(s\), this node has 2"):
        GpuSlots(4, tmp_path).acquire()
