"""GPU utilisation and memory sampled with NVML during generation; None where there is no NVML (CPU)."""

from __future__ import annotations

import os
import threading
import time
from typing import Any

MAX_TIMELINE = 300


def _visible_indices(n: int) -> list[int | str]:
    """The NVML handles a cell uses: the first n of CUDA_VISIBLE_DEVICES (ids or UUIDs), else 0..n-1."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env:
        ids: list[int | str] = [int(x) if x.strip().isdigit() else x.strip() for x in env.split(",") if x.strip()]
        return ids[:n]
    return list(range(n))


def memory_snapshot(num_devices: int) -> dict[str, Any] | None:
    """Memory used and total (MiB) of the cell's GPUs now, from NVML; None without NVML (CPU)."""
    return GpuSampler(num_devices).memory_now()


class GpuSampler:
    """Background thread sampling utilisation (%) and memory used (MiB) of the cell's GPUs."""

    def __init__(self, num_devices: int, interval_s: float = 0.1) -> None:
        self.interval_s = interval_s
        self.samples: list[tuple[float, float, float]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._handles: list[Any] = []
        self.driver: str | None = None
        self.names: list[str] = []
        self.uuids: list[str] = []
        try:
            import pynvml  # nvidia-ml-py

            pynvml.nvmlInit()
            self._nvml = pynvml
            for idx in _visible_indices(num_devices):
                if isinstance(idx, int):
                    h = pynvml.nvmlDeviceGetHandleByIndex(idx)
                else:
                    h = pynvml.nvmlDeviceGetHandleByUUID(idx)
                self._handles.append(h)
                name = pynvml.nvmlDeviceGetName(h)
                self.names.append(name.decode() if isinstance(name, bytes) else name)
                uuid = pynvml.nvmlDeviceGetUUID(h)
                self.uuids.append(uuid.decode() if isinstance(uuid, bytes) else uuid)
            drv = pynvml.nvmlSystemGetDriverVersion()
            self.driver = drv.decode() if isinstance(drv, bytes) else drv
        except Exception:  # no NVML library, no GPU: telemetry is absent, not faked
            self._handles = []

    @property
    def available(self) -> bool:
        return bool(self._handles)

    def _loop(self) -> None:
        t0 = time.perf_counter()
        while not self._stop.is_set():
            utils, mems = [], []
            for h in self._handles:
                utils.append(float(self._nvml.nvmlDeviceGetUtilizationRates(h).gpu))
                mems.append(self._nvml.nvmlDeviceGetMemoryInfo(h).used / 2**20)
            self.samples.append((time.perf_counter() - t0, sum(utils) / len(utils), sum(mems)))
            self._stop.wait(self.interval_s)

    def memory_now(self) -> dict[str, Any] | None:
        """One reading of the GPUs' memory (no sampling thread): used, total and free MiB per device."""
        if not self.available:
            return None
        infos = [self._nvml.nvmlDeviceGetMemoryInfo(h) for h in self._handles]
        used = [round(i.used / 2**20, 1) for i in infos]
        total = [round(i.total / 2**20, 1) for i in infos]
        return {
            "devices": self.names,
            "used_mib": used,
            "total_mib": total,
            "free_mib": [round(t - u, 1) for t, u in zip(total, used, strict=True)],
        }

    def __enter__(self) -> GpuSampler:
        if self.available:
            self._thread = threading.Thread(target=self._loop, name="nvml-sampler", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def summary(self) -> dict[str, Any] | None:
        if not self.available or not self.samples:
            return None
        utils = [s[1] for s in self.samples]
        mems = [s[2] for s in self.samples]
        step = max(1, -(-len(self.samples) // MAX_TIMELINE))
        return {
            "devices": self.names,
            "driver": self.driver,
            "interval_s": self.interval_s,
            "samples": len(self.samples),
            "util_mean": sum(utils) / len(utils),
            "util_max": max(utils),
            "mem_used_mean_mib": sum(mems) / len(mems),
            "mem_used_max_mib": max(mems),
            "timeline": [[round(t, 3), round(u, 1), round(m, 1)] for t, u, m in self.samples[::step]],
        }
