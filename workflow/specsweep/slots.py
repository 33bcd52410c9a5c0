"""GPU slots on one node. Snakemake counts `gpu` resources but assigns no device ids, so eight TP-1 cells
started together would all land on GPU 0. Each cell takes its own GPU ids here before vLLM starts: one lock
file per GPU, held with flock for the life of the cell process (the kernel drops the locks when the process
ends, also on kill -9, so no slot is ever leaked).

The lock folder is per node and per user, never relative to the working folder (two runs started from two
folders share it): /tmp/specsweep-gpu-slots-<uid>, or SPECSWEEP_SLOT_DIR (an absolute path). The node's GPU
ids come from SPECSWEEP_GPU_IDS (e.g. "0,1,2,3"; each id once), else from NVML, else none (CPU). A cell
needing more GPUs than the node has is refused at once; a wait for busy GPUs ends after
SPECSWEEP_SLOT_TIMEOUT_S seconds (default one hour) with one line naming the GPUs and their holders. A
scheduler that already confines the job (CUDA_VISIBLE_DEVICES set, as SLURM does) is left alone; a config
cannot set CUDA_VISIBLE_DEVICES (config.build_study refuses it), so it cannot switch the locking off.
"""

from __future__ import annotations

import fcntl
import math
import os
import re
import stat
import sys
import time
from pathlib import Path

from .errors import SpecsweepError

DEFAULT_TIMEOUT_S = 3600.0
#: A GPU index or an NVIDIA GPU-/MIG- UUID: also what names its lock file, so nothing else is allowed.
GPU_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,127}")


def slot_dir() -> Path:
    """The node's lock folder: SPECSWEEP_SLOT_DIR (absolute), else /tmp/specsweep-gpu-slots-<uid>."""
    env = os.environ.get("SPECSWEEP_SLOT_DIR")
    if env:
        path = Path(env)
        if not path.is_absolute():
            raise SpecsweepError(
                f"SPECSWEEP_SLOT_DIR={env[:200]}: must be an absolute path (the GPU lock folder is per node, "
                "not per working folder)"
            )
        return path
    return Path("/tmp") / f"specsweep-gpu-slots-{os.getuid()}"


def env_seconds(name: str, default: float) -> float:
    """A positive, finite number of seconds from environment variable `name` (default when unset or blank);
    anything else is one line naming the variable, before anything waits on it."""
    env = os.environ.get(name)
    if env is None or not env.strip():
        return default
    try:
        value = float(env)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise SpecsweepError(f"{name}={env[:60]}: must be a positive number of seconds")
    return value


def slot_timeout_s() -> float:
    """How long a cell waits for its GPUs: SPECSWEEP_SLOT_TIMEOUT_S seconds, default one hour."""
    return env_seconds("SPECSWEEP_SLOT_TIMEOUT_S", DEFAULT_TIMEOUT_S)


def node_gpu_ids() -> list[str]:
    env = os.environ.get("SPECSWEEP_GPU_IDS")
    if env is not None:
        ids = [x.strip() for x in env.split(",") if x.strip()]
        seen: set[str] = set()
        for gid in ids:
            if not GPU_ID.fullmatch(gid):
                raise SpecsweepError(f"SPECSWEEP_GPU_IDS={env[:100]}: {gid[:60]!r} is not a GPU index or UUID")
            if gid in seen:
                raise SpecsweepError(f"SPECSWEEP_GPU_IDS={env[:100]}: GPU {gid} is listed twice")
            seen.add(gid)
        return ids
    try:
        import pynvml

        pynvml.nvmlInit()
        return [str(i) for i in range(pynvml.nvmlDeviceGetCount())]
    except Exception:
        return []


def _prepare(folder: Path, default: bool) -> None:
    """Create the lock folder; the default one in /tmp must be a real folder owned by this user."""
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = os.lstat(folder)
    except OSError as exc:
        raise SpecsweepError(f"gpu slots: lock folder {folder}: cannot be created ({exc.strerror})") from None
    if not stat.S_ISDIR(st.st_mode):
        raise SpecsweepError(f"gpu slots: lock folder {folder}: is not a folder (a symbolic link or a file)")
    if default and st.st_uid != os.getuid():
        raise SpecsweepError(
            f"gpu slots: lock folder {folder}: belongs to uid {st.st_uid}, not to you (uid {os.getuid()}); "
            "set SPECSWEEP_SLOT_DIR"
        )


def _holder_label() -> str:
    """What this process writes into the lock files it holds: its pid and the cell (--out) or engine (--key)
    it serves."""
    argv = sys.argv
    opts = {argv[i]: argv[i + 1] for i in range(len(argv) - 1) if argv[i] in ("--out", "--key")}
    if "--out" in opts:
        what = opts["--out"]
    elif "--key" in opts:
        what = f"engine {opts['--key']}"
    else:
        what = Path(argv[0]).name if argv else ""
    return " ".join(f"{os.getpid()} {what}".split())[:200]


class GpuSlots:
    """Hold `count` GPU ids exclusively; `ids` is what CUDA_VISIBLE_DEVICES should be."""

    def __init__(
        self, count: int, slot_dir: Path | str | None = None, timeout_s: float | None = None, poll_s: float = 0.2
    ) -> None:
        self.count, self.poll_s = count, poll_s
        self._default_dir = slot_dir is None
        self.slot_dir = Path(slot_dir) if slot_dir is not None else None
        self.timeout_s = timeout_s
        self.ids: list[str] = []
        self._fds: list[int] = []

    def _lock_path(self, gid: str) -> Path:
        assert self.slot_dir is not None
        return self.slot_dir / f"gpu{gid}.lock"

    def acquire(self) -> list[str]:
        pool = node_gpu_ids()
        if self.count < 1:
            raise SpecsweepError(f"gpu slots: a cell needs at least one GPU, asked for {self.count}")
        if self.count > len(pool):
            raise SpecsweepError(f"gpu slots: a cell needs {self.count} GPU(s), this node has {len(pool)} ({pool})")
        if self.slot_dir is None:
            self.slot_dir = slot_dir()
        timeout = self.timeout_s if self.timeout_s is not None else slot_timeout_s()
        _prepare(self.slot_dir, self._default_dir)
        deadline = time.monotonic() + timeout
        while True:
            for gid in pool:
                if len(self._fds) == self.count:
                    break
                fd = self._open(gid)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    os.close(fd)
                    continue
                os.ftruncate(fd, 0)
                os.write(fd, f"{_holder_label()}\n".encode())
                self._fds.append(fd)
                self.ids.append(gid)
            if len(self._fds) == self.count:
                return self.ids
            self.release()  # all or nothing: never sit on part of a set while waiting (no deadlock)
            if time.monotonic() > deadline:
                raise SpecsweepError(
                    f"gpu slots: no {self.count} free GPU(s) among {','.join(pool)} after {timeout:g} s "
                    f"(SPECSWEEP_SLOT_TIMEOUT_S); held: {self.holders(pool) or 'none now'}; locks in {self.slot_dir}"
                )
            time.sleep(self.poll_s)

    def _open(self, gid: str) -> int:
        try:
            return os.open(self._lock_path(gid), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        except OSError as exc:
            raise SpecsweepError(
                f"gpu slots: lock file {self._lock_path(gid)}: cannot be opened ({exc.strerror})"
            ) from None

    def holders(self, pool: list[str]) -> str:
        """'gpu0 by pid 123 results/.../ngram.json, ...' for the GPUs of pool whose lock is held now."""
        out = []
        for gid in pool:
            fd = self._open(gid)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                try:
                    label = os.pread(fd, 200, 0).decode("utf-8", "replace").strip()
                except OSError:
                    label = ""
                out.append(f"gpu{gid} by pid {label}" if label else f"gpu{gid}")
            else:
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)
        return ", ".join(out)

    def release(self) -> None:
        for fd in self._fds:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
        self._fds, self.ids = [], []

    def __enter__(self) -> GpuSlots:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def claim_for_cell(tp: int, device: str) -> dict[str, object]:
    """Called by the runner before vLLM is imported; returns what it did, for the cell's provenance."""
    if device != "gpu":
        return {"policy": "none (cpu)", "ids": None}
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible:
        given = [x for x in visible.split(",") if x.strip()]
        if tp > len(given):
            raise SpecsweepError(
                f"gpu slots: a cell needs {tp} GPU(s), the scheduler's CUDA_VISIBLE_DEVICES={visible[:100]} "
                f"gives {len(given)}"
            )
        return {"policy": "scheduler (CUDA_VISIBLE_DEVICES was set)", "ids": visible}
    slots = GpuSlots(tp)
    ids = slots.acquire()
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(ids)
    _HELD.append(slots)  # held until the process exits
    return {"policy": "specsweep lock-file slots", "ids": ",".join(ids)}


_HELD: list[GpuSlots] = []
