"""GPU slots on one node. Snakemake counts `gpu` resources but assigns no device ids, so eight TP-1 cells
started together would all land on GPU 0. Each cell takes its own GPU ids here before vLLM starts: one lock
file per GPU, held with flock for the life of the cell process (the kernel drops the locks when the process
ends, also on kill -9, so no slot is ever leaked).

The lock folder is per node and per user, never relative to the working folder (two runs started from two
folders share it): /tmp/specsweep-gpu-slots-<uid> (made 0700; refused when it is not a real folder of this user's
that nobody else can write), or SPECSWEEP_SLOT_DIR (an absolute path). The node's GPU
ids come from SPECSWEEP_GPU_IDS (e.g. "0,1,2,3"; each id once), else from NVML, else none (CPU). A cell
needing more GPUs than the node has is refused at once; a wait for busy GPUs ends after
SPECSWEEP_SLOT_TIMEOUT_S seconds (default one hour) with one line naming the GPUs and their holders. A
scheduler that already confines the job (CUDA_VISIBLE_DEVICES set, as SLURM does) is left alone; a config
cannot set CUDA_VISIBLE_DEVICES (config.build_study refuses it), so it cannot switch the locking off.

Engine hosts (enginehost.py) are keyed by the slots they hold: `slot_pool` says which slots the hosts of one
engine folder share and how many they may hold at once (Snakemake's grant, `--resources gpu=N`, exported by
the workflow as SPECSWEEP_SLOT_LIMIT), `cpu_set` gives each slot a CPU set of its own, and a host takes the
node lock files of exactly the GPUs it was given (SPECSWEEP_HOST_SLOTS). On the CPU the slots are virtual:
SPECSWEEP_SLOTS of them (else one), at most as many held as granted, each with its share of the CPUs.
"""

from __future__ import annotations

import fcntl
import math
import os
import re
import stat
import sys
import time
from dataclasses import dataclass
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
    """Create the lock folder (0700); the default one in /tmp must be a real folder owned by this user and
    writable by nobody else (another user could plant lock files there and hold the GPUs)."""
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
    if default and stat.S_IMODE(st.st_mode) & 0o022:
        raise SpecsweepError(
            f"gpu slots: lock folder {folder}: is writable by other users (mode {stat.S_IMODE(st.st_mode):04o}); "
            "chmod 700 it, or remove it"
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
    """Hold `count` GPU ids exclusively (any free ones, or exactly those of `want`); `ids` is what
    CUDA_VISIBLE_DEVICES should be."""

    def __init__(
        self,
        count: int,
        slot_dir: Path | str | None = None,
        timeout_s: float | None = None,
        poll_s: float = 0.2,
        want: list[str] | None = None,
    ) -> None:
        self.count, self.poll_s, self.want = count, poll_s, want
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
        if self.want is not None:
            if missing := [g for g in self.want if g not in pool]:
                raise SpecsweepError(f"gpu slots: GPU {missing[0][:60]} is not one of this node's ({pool})")
            pool = list(self.want)
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
    """Called by the runner before vLLM is imported; returns what it did, for the cell's provenance. An engine
    host is given its slots (SPECSWEEP_HOST_SLOTS, by enginehost.ensure_host): it takes exactly those."""
    host = os.environ.get("SPECSWEEP_HOST_SLOTS") or ""
    if device != "gpu":
        done: dict[str, object] = {"policy": "none (cpu)", "ids": None}
        return done | ({"virtual_slots": host} if host else {})
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if host:
        ids = host.split(",")
        if len(ids) < tp:
            raise SpecsweepError(f"gpu slots: a cell needs {tp} GPU(s), its engine host was given {host[:100]}")
        if visible:  # the scheduler's GPUs, shared out by the engine folder's allocator
            os.environ["CUDA_VISIBLE_DEVICES"] = host
            return {"policy": "engine host slots of the scheduler's GPUs", "ids": host}
        held = GpuSlots(len(ids), want=ids)
        held.acquire()
        os.environ["CUDA_VISIBLE_DEVICES"] = host
        _HELD.append(held)  # held until the process exits
        return {"policy": "engine host slots (specsweep lock files)", "ids": host}
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


# ------------------------------------------------------------------------------------------------ pools


@dataclass(frozen=True)
class SlotPool:
    """The slots the engine hosts of one engine folder share: `ids` (GPU indices or UUIDs; "0".."n-1" when
    virtual), at most `limit` of them held at once, and `kind`: "gpu" (this node's GPUs, node lock files
    taken by each host), "scheduler" (the GPUs CUDA_VISIBLE_DEVICES gives the job) or "virtual" (CPU)."""

    ids: tuple[str, ...]
    limit: int
    kind: str

    def cpus(self, held: list[str] | tuple[str, ...], allowed: list[int] | None = None) -> list[int]:
        """The CPU set of a host holding `held`: the allowed CPUs (this process's affinity) cut into one
        contiguous part per slot of the pool, the parts of its slots together."""
        return cpu_set(list(self.ids), list(held), allowed)


def _positive_int(name: str) -> int | None:
    env = os.environ.get(name)
    if env is None or not env.strip():
        return None
    try:
        value = int(env)
    except ValueError:
        value = 0
    if value < 1:
        raise SpecsweepError(f"{name}={env[:60]}: must be a positive whole number")
    return value


def slot_limit() -> int | None:
    """The slots Snakemake grants (--resources gpu=N, exported by the workflow as SPECSWEEP_SLOT_LIMIT)."""
    return _positive_int("SPECSWEEP_SLOT_LIMIT")


def export_slot_limit(granted: int | None) -> None:
    """Called by the workflow: its jobs hold no more slots (engine hosts alive at once) than granted."""
    if granted is not None and granted >= 1:
        os.environ["SPECSWEEP_SLOT_LIMIT"] = str(granted)


def slot_pool(device: str) -> SlotPool:
    """The pool of this job's engine folder: on a GPU node the GPUs CUDA_VISIBLE_DEVICES gives (a scheduler
    confined the job) or else the node's (SPECSWEEP_GPU_IDS, NVML); on the CPU SPECSWEEP_SLOTS virtual slots,
    else one. At most as many held at once as Snakemake grants."""
    limit = slot_limit()
    if device != "gpu":
        # virtual slots only when asked for: a profile's `--resources gpu=8` (the default profile's, applied to
        # every run) must not keep eight CPU engines alive on a laptop
        n = _positive_int("SPECSWEEP_SLOTS") or 1
        return SlotPool(tuple(str(i) for i in range(n)), min(n, limit or n), "virtual")
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible:
        ids = tuple(x.strip() for x in visible.split(",") if x.strip())
        kind = "scheduler"
    else:
        ids, kind = tuple(node_gpu_ids()), "gpu"
    return SlotPool(ids, min(len(ids), limit or len(ids)), kind)


def cpu_set(pool: list[str], held: list[str], allowed: list[int] | None = None) -> list[int]:
    """The CPUs of the slots `held` of `pool`: the allowed CPUs (default: this process's affinity) in as many
    contiguous parts as the pool has slots (a part never empty: a slot beyond the CPUs shares one)."""
    cpus = sorted(os.sched_getaffinity(0) if allowed is None else allowed)
    n, p = len(cpus), len(pool)
    out: set[int] = set()
    for gid in held:
        i = pool.index(gid)
        out.update(cpus[i * n // p : (i + 1) * n // p] or [cpus[i % n]])
    return sorted(out)
