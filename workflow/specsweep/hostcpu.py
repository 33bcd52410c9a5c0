"""What else ran on the engine's CPUs during a timed pass, read from Linux's /proc.

A pass on a host whose CPUs another process shares runs slower for reasons that are not the engine's: on a
2-core machine one busy process beside vLLM's CPU backend (one OpenMP thread per core, joined at every step)
can halve a pass. The meter reads, at the start and the end of the pass, the busy time of the CPUs this
process may run on (/proc/stat's per-CPU lines: everything but idle and iowait) and the CPU time of every
process of the engine host's session (the host leads a session of its own; vLLM's engine-core and worker
processes inherit it), so that

    other_cores = (busy time of those CPUs - the session's CPU time) / wall time

is the number of cores that something else kept busy, on average, while the engine measured; `steal_cores`
is the hypervisor's share that /proc/stat reports (0 where it reports none). Both are averages over the pass:
a short burst is diluted, a competitor for the whole pass is not. Nothing here changes what is measured.
Where /proc is missing (not Linux) the summary is None, never a made-up number.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

PROC = Path("/proc")
#: the share of a core that counts as "something else ran beside the engine" (tables flag such passes)
CONTENDED_CORES = 0.25
METHOD = "/proc/stat busy time of the engine's CPUs minus the CPU time of the engine host's session, over the pass"


def _clock_ticks() -> int:
    try:
        return int(os.sysconf("SC_CLK_TCK"))
    except (ValueError, OSError, AttributeError):
        return 100


def cpu_times(cpus: set[int], proc: Path = PROC) -> tuple[int, int] | None:
    """(busy, steal) clock ticks summed over `cpus`, from /proc/stat; None where it cannot be read."""
    try:
        lines = (proc / "stat").read_text().splitlines()
    except OSError:
        return None
    busy = steal = 0
    seen = 0
    for line in lines:
        head, _, rest = line.partition(" ")
        if not head.startswith("cpu") or head == "cpu":
            continue
        try:
            n = int(head[3:])
            f = [int(x) for x in rest.split()]
        except ValueError:
            continue
        if n not in cpus or len(f) < 4:
            continue
        seen += 1
        # user nice system idle iowait irq softirq steal ...: busy is all but idle and iowait; steal is time
        # the hypervisor gave another guest, reported separately (and not counted as busy)
        st = f[7] if len(f) > 7 else 0
        busy += sum(f[:8]) - f[3] - (f[4] if len(f) > 4 else 0) - st
        steal += st
    return (busy, steal) if seen else None


def session_ticks(sid: int, proc: Path = PROC) -> dict[int, int]:
    """pid -> utime + stime (clock ticks) of every process of session `sid` (its threads included)."""
    out: dict[int, int] = {}
    for entry in proc.iterdir() if proc.is_dir() else ():
        if not entry.name.isdigit():
            continue
        try:
            raw = (entry / "stat").read_text()
        except OSError:
            continue  # gone meanwhile
        # the command name (field 2) may hold spaces and parentheses: the fields after it follow the last ')'
        f = raw[raw.rfind(")") + 2 :].split()
        try:
            if int(f[3]) == sid:  # f[0] is field 3 (state): session is field 6, utime 14, stime 15
                out[int(entry.name)] = int(f[11]) + int(f[12])
        except (IndexError, ValueError):
            continue
    return out


class HostCpuMeter:
    """Context manager around a timed pass: `summary()` says how busy the engine's CPUs were, by whom."""

    def __init__(self, proc: Path = PROC) -> None:
        self.proc = proc
        self.tick = _clock_ticks()
        try:
            self.cpus = set(os.sched_getaffinity(0))
            self.sid = os.getsid(0)
        except (AttributeError, OSError):
            self.cpus, self.sid = set(), -1
        self._t0 = self._t1 = 0.0
        self._a: tuple[int, int] | None = None
        self._b: tuple[int, int] | None = None
        self._s0: dict[int, int] = {}
        self._s1: dict[int, int] = {}

    def __enter__(self) -> HostCpuMeter:
        self._s0 = session_ticks(self.sid, self.proc) if self.cpus else {}
        self._a = cpu_times(self.cpus, self.proc) if self.cpus else None
        self._t0 = time.monotonic()
        return self

    def __exit__(self, *exc: object) -> None:
        self._t1 = time.monotonic()
        self._b = cpu_times(self.cpus, self.proc) if self.cpus else None
        self._s1 = session_ticks(self.sid, self.proc) if self.cpus else {}

    def summary(self) -> dict[str, Any] | None:
        wall = self._t1 - self._t0
        if self._a is None or self._b is None or not self._s1 or wall <= 0:
            return None
        busy = (self._b[0] - self._a[0]) / self.tick
        steal = (self._b[1] - self._a[1]) / self.tick
        # a process of the session that started during the pass counts from 0; one that ended is lost (its
        # time then shows as `other`, so the estimate errs towards flagging, never towards hiding)
        own = sum(t - self._s0.get(pid, 0) for pid, t in self._s1.items()) / self.tick
        return {
            "cpus": len(self.cpus),
            "wall_s": round(wall, 3),
            "busy_cores": round(busy / wall, 3),
            "own_cores": round(own / wall, 3),
            "other_cores": round(max(0.0, busy - own) / wall, 3),
            "steal_cores": round(steal / wall, 3),
            "method": METHOD,
        }
