"""GPU slots on one node. Snakemake counts `gpu` resources but assigns no device ids, so eight TP-1 cells
started together would all land on GPU 0. Each cell takes its own GPU ids here before vLLM starts: one lock
file per GPU under .snakemake/gpu-slots/, held with flock for the life of the cell process (the kernel
drops the locks when the process ends, also on kill -9, so no slot is ever leaked).

The node's GPU ids come from SPECSWEEP_GPU_IDS (e.g. "0,1,2,3"), else from NVML, else none (CPU). A
scheduler that already confines the job (CUDA_VISIBLE_DEVICES set, as SLURM does) is left alone.
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

from .errors import SpecsweepError

SLOT_DIR = Path(".snakemake") / "gpu-slots"


def node_gpu_ids() -> list[str]:
    env = os.environ.get("SPECSWEEP_GPU_IDS")
    if env is not None:
        return [x.strip() for x in env.split(",") if x.strip()]
    try:
        import pynvml

        pynvml.nvmlInit()
        return [str(i) for i in range(pynvml.nvmlDeviceGetCount())]
    except Exception:
        return []


class GpuSlots:
    """Hold `count` GPU ids exclusively; `ids` is what CUDA_VISIBLE_DEVICES should be."""

    def __init__(self, count: int, slot_dir: Path = SLOT_DIR, timeout_s: float = 7 * 24 * 3600,
                 poll_s: float = 0.2) -> None:
        self.count, self.slot_dir, self.timeout_s, self.poll_s = count, Path(slot_dir), timeout_s, poll_s
        self.ids: list[str] = []
        self._fds: list[int] = []

    def acquire(self) -> list[str]:
        pool = node_gpu_ids()
        if self.count > len(pool):
            raise SpecsweepError(f"gpu slots: a cell needs {self.count} GPU(s), this node has {len(pool)} ({pool})")
        self.slot_dir.mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + self.timeout_s
        while True:
            for gid in pool:
                if len(self._fds) == self.count:
                    break
                fd = os.open(self.slot_dir / f"gpu{gid}.lock", os.O_RDWR | os.O_CREAT, 0o644)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    os.close(fd)
                    continue
                os.ftruncate(fd, 0)
                os.write(fd, f"{os.getpid()}\n".encode())
                self._fds.append(fd)
                self.ids.append(gid)
            if len(self._fds) == self.count:
                return self.ids
            self.release()  # all or nothing: never sit on part of a set while waiting (no deadlock)
            if time.monotonic() > deadline:
                raise SpecsweepError(f"gpu slots: no {self.count} free GPU(s) in {self.timeout_s:.0f} s")
            time.sleep(self.poll_s)

    def release(self) -> None:
        for fd in self._fds:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
        self._fds, self.ids = [], []

    def __enter__(self) -> "GpuSlots":
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def claim_for_cell(tp: int, device: str) -> dict[str, object]:
    """Called by the runner before vLLM is imported; returns what it did, for the cell's provenance."""
    if device != "gpu":
        return {"policy": "none (cpu)", "ids": None}
    if os.environ.get("CUDA_VISIBLE_DEVICES"):
        return {"policy": "scheduler (CUDA_VISIBLE_DEVICES was set)", "ids": os.environ["CUDA_VISIBLE_DEVICES"]}
    slots = GpuSlots(tp)
    ids = slots.acquire()
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(ids)
    _HELD.append(slots)  # held until the process exits
    return {"policy": "specsweep lock-file slots", "ids": ",".join(ids)}


_HELD: list[GpuSlots] = []
