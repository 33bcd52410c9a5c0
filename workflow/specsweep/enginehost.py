"""Engine reuse: a small host process keeps one vLLM engine alive for the cells of one (model, ladder step,
repeat); each cell is still its own Snakemake job, which asks the host to measure it and writes the result.

Why this design (see docs/design.md, "Engine reuse"): a cell stays one job with its own output path, so
`snakemake <path> --force` re-measures exactly that cell and a kill loses nothing but the cell in flight;
the engine start (import, weights, compile, graphs) is paid once per engine instead of once per cell, as
vLLM's own `vllm bench sweep` pays one server start per serve configuration for all its bench runs.

Protocol: one JSON line per request over a Unix socket in a private (0700) folder, one JSON line back.
Requests: ping, measure, stop. A host serves one request at a time and exits when told to, when it has
been idle for SPECSWEEP_ENGINE_IDLE_S seconds (default 300) or when its engine fails. A measure request
carries the cell's settings hash (all the cell records under `settings`, sampling included): a host whose
config gives that cell other settings (the config changed since it started) refuses, and the caller stops
it and starts one for the config as it is now, so a cell is never measured by a host started for another
study.

The folder (`engine_dir`) is private and specsweep's own: created 0700 and checked on every use (a real
folder, not a symbolic link, owned by this user, closed to others, empty or carrying specsweep's marker
file), so no other user can plant a host record or a socket in it. Nothing is ever deleted there but host
records and sockets, and a process is signalled only when it provably is a host of this folder: each host is
spawned with a random token that its record holds and that its command line (/proc/<pid>/cmdline, same
user) and its ping reply repeat.

Hosts are keyed by the slots they hold (GPUs; on the CPU, virtual slots: slots.slot_pool). A host records its
slots and is pinned to them (CUDA_VISIBLE_DEVICES, through the node's GPU lock files) and to a CPU set of its
own (os.sched_setaffinity: the allowed CPUs cut into one part per slot). A cell whose engine is not running
takes free slots, and when none are free (or the run already holds as many as Snakemake grants), stops idle
hosts of its run, the least recently used first, holding the slots it needs, and only those: a host in use
(a cell job holds a shared lock on its `<key>.use` file from the moment it picks the host until its reply, so
also while waiting for it) is never stopped; the cell waits for a slot instead. So `snakemake --cores N
--resources gpu=N` keeps up to N engines alive, each for its cells. Hosts are owned by the Snakemake process
whose jobs spawned them (`run_id`): the workflow's onsuccess/onerror stop only those, so `snakemake figures`
or a run of another config in the same folder never touches them.

Cells measure one at a time (a host holds the folder's `measure.lock` during its measurement) unless the
config's `side_by_side` is true; either way every measurement and engine start is journalled (append-only
`activity.jsonl`), and a cell records what ran beside it (`beside`: the other cells measured and engines
started during its timed pass). See docs/scheduling.md.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import secrets
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeGuard

from .errors import EngineStartError, SpecsweepError
from .slots import SlotPool, env_seconds, slot_timeout_s

DEFAULT_IDLE_S = 300.0
DEFAULT_START_TIMEOUT_S = 3600.0
MAX_LINE = 64 * 1024 * 1024
#: The longest path a Unix socket may have (sun_path is 108 bytes with its terminating NUL).
MAX_SOCKET_PATH = 107
#: The file that makes a folder specsweep's engine folder; a folder without it is used only when empty.
MARKER = ".specsweep-engine-folder"
MARKER_TEXT = "specsweep engine folder: engine host records and sockets (see specsweep/enginehost.py)\n"
RECORD_FORMAT = "specsweep-engine-host/1"
#: An engine key (engine.engine_key): what names a host's record, socket and failure memo.
KEY = re.compile(r"[0-9a-f]{16}")
TOKEN = re.compile(r"[0-9a-f]{32}")
MAX_RECORD_BYTES = 64 * 1024
#: How long a starting host (no socket yet) gets after SIGTERM before SIGKILL.
TERM_GRACE_S = 10.0
#: The folder's lock of measurements (one at a time unless side_by_side) and its journal of activity.
MEASURE_LOCK = "measure.lock"
ACTIVITY = "activity.jsonl"
#: How much of the journal's end is read for what ran beside a measurement.
MAX_ACTIVITY_READ = 1 << 20
#: How often a cell waiting for a slot (or for a stale host's other users) looks again.
SLOT_POLL_S = 0.5
#: What an error about the default engine folder tells to change.
DEFAULT_CULPRIT = "TMPDIR (or SPECSWEEP_ENGINE_DIR)"


class StaleHostError(SpecsweepError):
    """The host of an engine key was started for other settings of the cell asked for (its config changed
    since): the caller stops it and starts the right one."""


# ------------------------------------------------------------------------------------------------ knobs


def idle_s() -> float:
    """How long an idle host waits for a request before it exits: SPECSWEEP_ENGINE_IDLE_S, default 300 s."""
    return env_seconds("SPECSWEEP_ENGINE_IDLE_S", DEFAULT_IDLE_S)


def start_timeout_s() -> float:
    """How long a cell waits for its host's engine to start (and for a host to finish its measurement when
    told to stop): SPECSWEEP_ENGINE_START_TIMEOUT_S, default one hour."""
    return env_seconds("SPECSWEEP_ENGINE_START_TIMEOUT_S", DEFAULT_START_TIMEOUT_S)


def check_knobs() -> None:
    """Both knobs are finite positive numbers: checked before any engine starts (one line naming the
    variable; a bad value would otherwise end the host only once its engine has started)."""
    idle_s()
    start_timeout_s()


# ------------------------------------------------------------------------------------------------ folder


def _locate(workdir: Path | str | None) -> tuple[Path, str]:
    """The engine folder of a working folder and the variable that chose it (named in errors)."""
    override = os.environ.get("SPECSWEEP_ENGINE_DIR")
    if override:
        d = Path(override)
        if not d.is_absolute():
            raise SpecsweepError(f"SPECSWEEP_ENGINE_DIR={override[:200]}: must be an absolute path")
        return d, "SPECSWEEP_ENGINE_DIR"
    wd = str(Path(workdir or os.getcwd()).resolve())
    name = f"specsweep-engines-{os.getuid()}-{hashlib.sha256(wd.encode()).hexdigest()[:10]}"
    return Path(tempfile.gettempdir()) / name, DEFAULT_CULPRIT


def engine_dir(workdir: Path | str | None = None) -> Path:
    """The folder of the sockets, locks and host records of one working folder: SPECSWEEP_ENGINE_DIR (an
    absolute path), else <tmp>/specsweep-engines-<uid>-<hash of the working folder>. Created 0700 and checked
    on every call (see `_check_folder`); its socket paths must fit in 107 bytes (checked before any start)."""
    d, culprit = _locate(workdir)
    longest = len(os.fsencode(_sock(d, "0" * 16)))
    if longest > MAX_SOCKET_PATH:
        raise SpecsweepError(
            f"engine folder {str(d)[:200]}: its socket paths would be {longest} bytes, over the "
            f"{MAX_SOCKET_PATH} a Unix socket allows; set {culprit} to a shorter folder"
        )
    _check_folder(d, culprit, create=True)
    return d


def existing_engine_dir(workdir: Path | str | None = None) -> Path | None:
    """The engine folder if it exists (checked as in `engine_dir`), else None: for what only stops or lists
    hosts and must not create a folder (`snakemake figures`, `specsweep engines`)."""
    d, culprit = _locate(workdir)
    if not os.path.lexists(d):
        return None
    _check_folder(d, culprit, create=False)
    return d


def _check_folder(d: Path, culprit: str, create: bool) -> None:
    """A real folder (never a symbolic link), owned by this user, closed to others (0700) and specsweep's:
    empty (then marked) or carrying the marker. Anything else is refused in one line: a folder another user
    made first could hold planted records, and any other folder holds files that are not ours."""
    where = f"engine folder {str(d)[:200]}"
    if create:
        try:
            d.parent.mkdir(parents=True, exist_ok=True)
            os.mkdir(d, 0o700)
        except FileExistsError:
            pass
        except OSError as exc:
            raise SpecsweepError(f"{where}: cannot be created ({exc.strerror}); set {culprit}") from None
    try:
        st = os.lstat(d)
    except OSError as exc:
        raise SpecsweepError(f"{where}: cannot be read ({exc.strerror})") from None
    if stat.S_ISLNK(st.st_mode):
        raise SpecsweepError(f"{where}: is a symbolic link (never followed); remove it or set {culprit}")
    if not stat.S_ISDIR(st.st_mode):
        raise SpecsweepError(f"{where}: is not a folder; remove it or set {culprit}")
    if st.st_uid != os.getuid():
        raise SpecsweepError(
            f"{where}: belongs to uid {st.st_uid}, not to you (uid {os.getuid()}); set {culprit} to a folder of yours"
        )
    try:
        names = os.listdir(d)
    except OSError as exc:
        raise SpecsweepError(f"{where}: cannot be listed ({exc.strerror})") from None
    if MARKER not in names:
        # the default folder of an older specsweep (0700, this user's, only host files in it) is adopted
        older = culprit == DEFAULT_CULPRIT and not stat.S_IMODE(st.st_mode) & 0o077 and all(map(_ours, names))
        if names and not older:
            raise SpecsweepError(
                f"{where}: holds {len(names)} file(s) but not specsweep's marker {MARKER}: not an engine folder "
                f"(nothing there is touched); set {culprit} to an empty folder"
            )
        os.chmod(d, 0o700, follow_symlinks=False)
        _write_private(d / MARKER, MARKER_TEXT)
        st = os.lstat(d)
    else:
        try:
            mst = os.lstat(d / MARKER)
        except OSError as exc:
            raise SpecsweepError(f"{where}: its marker {MARKER} cannot be read ({exc.strerror})") from None
        if not stat.S_ISREG(mst.st_mode) or mst.st_uid != os.getuid():
            raise SpecsweepError(f"{where}: its marker {MARKER} is not a file of yours; set {culprit}")
    if stat.S_IMODE(st.st_mode) & 0o077:
        raise SpecsweepError(
            f"{where}: is open to other users (mode {stat.S_IMODE(st.st_mode):04o}); chmod 700 it, or remove it"
        )


def _ours(name: str) -> bool:
    """A name specsweep gives the files of an engine folder: the locks, the journal, a host's record, socket,
    use lock, failure memo or log."""
    stem, _, ext = name.partition(".")
    if name in ("manager.lock", MEASURE_LOCK, ACTIVITY):
        return True
    return bool(KEY.fullmatch(stem)) and ext in ("json", "sock", "failed", "log", "use")


def _write_private(path: Path, text: str) -> None:
    """Write a file of the engine folder (0600) through a temporary name and a rename; never through a
    symbolic link."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)
    os.replace(tmp, path)


def _read_private(path: Path, limit: int = MAX_RECORD_BYTES) -> str | None:
    """A regular file of this user in the engine folder (not followed through a link), or None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or st.st_size > limit:
            return None
        return os.read(fd, limit).decode("utf-8", "replace")
    finally:
        os.close(fd)


def _sock(d: Path, key: str) -> Path:
    return d / f"{key}.sock"


def _record(d: Path, key: str) -> Path:
    return d / f"{key}.json"


def _failed(d: Path, key: str) -> Path:
    return d / f"{key}.failed"


def _remove_host_files(d: Path, key: str) -> None:
    """Remove a host's record and socket, and nothing else: the record only when it is a host record, the
    socket only when it is a socket."""
    if not KEY.fullmatch(key):
        return
    if _read_record(_record(d, key)) is not None:
        _record(d, key).unlink(missing_ok=True)
    try:
        if stat.S_ISSOCK(os.lstat(_sock(d, key)).st_mode):
            _sock(d, key).unlink(missing_ok=True)
    except OSError:
        pass


# ------------------------------------------------------------------------------------------------ wire


def _send(conn: socket.socket, obj: Any) -> None:
    conn.sendall((json.dumps(obj, allow_nan=False) + "\n").encode())


def _recv(conn: socket.socket) -> Any:
    buf = bytearray()
    while not buf.endswith(b"\n"):
        chunk = conn.recv(1 << 20)
        if not chunk:
            raise ConnectionError("engine host closed the connection")
        buf += chunk
        if len(buf) > MAX_LINE:
            raise ConnectionError("engine host reply too large")
    return json.loads(buf)


def request(sock_path: Path, msg: dict[str, Any], timeout: float | None = None) -> dict[str, Any]:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(timeout)
        conn.connect(str(sock_path))
        _send(conn, msg)
        reply = _recv(conn)
    if not isinstance(reply, dict):
        raise ValueError("engine host reply is not a JSON object")
    return reply


def ping(sock_path: Path) -> dict[str, Any] | None:
    try:
        reply = request(sock_path, {"op": "ping"}, timeout=10)
    except (OSError, ConnectionError, ValueError):
        return None
    return reply if reply.get("ok") else None


# ------------------------------------------------------------------------------------------------ host


def serve(key: str, engine: Any, handle: Any, d: Path, token: str | None = None, idle: float | None = None) -> None:
    """Listen on the engine's socket; `handle(msg) -> reply` measures. Runs in the host process."""
    idle = idle_s() if idle is None else idle
    path = _sock(d, key)
    _remove_host_files_sock_only(path)
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(str(path))
    os.chmod(path, 0o600)
    srv.listen(8)
    srv.settimeout(idle)
    try:
        while True:
            try:
                conn, _ = srv.accept()
            except TimeoutError:
                print(f"engine {key}: idle for {idle:g} s, exiting", flush=True)
                return
            with conn:
                conn.settimeout(None)
                try:
                    msg = _recv(conn)
                except (ConnectionError, ValueError):
                    continue
                op = msg.get("op") if isinstance(msg, dict) else None
                if op == "ping":
                    reply = {"ok": True, "key": key, "pid": os.getpid(), "token": token, "measured": engine.measured}
                elif op == "stop":
                    _try_send(conn, {"ok": True, "stopping": True})
                    print(f"engine {key}: stop requested", flush=True)
                    return
                elif op == "measure":
                    try:
                        reply = {"ok": True, "doc": handle(msg)}
                    except BaseException as exc:  # the cell fails; the host goes on unless the engine is broken
                        reply = {
                            "ok": False,
                            "stale": isinstance(exc, StaleHostError),
                            "error_type": type(exc).__name__,
                            "message": " ".join(str(exc).split())[:2000],
                            "traceback_tail": traceback.format_exc().strip().splitlines()[-8:],
                        }
                        print(f"engine {key}: request failed: {reply['error_type']}: {reply['message']}", flush=True)
                        if not isinstance(exc, Exception) or _engine_dead(exc):
                            _try_send(conn, reply)
                            return
                else:
                    reply = {"ok": False, "error_type": "ValueError", "message": f"unknown op {op!r}"}
                _try_send(conn, reply)
    finally:
        srv.close()
        _remove_host_files_sock_only(path)


def _remove_host_files_sock_only(path: Path) -> None:
    try:
        if stat.S_ISSOCK(os.lstat(path).st_mode):
            path.unlink(missing_ok=True)
    except OSError:
        pass


def _engine_dead(exc: BaseException) -> bool:
    return type(exc).__name__ in {"EngineDeadError", "EngineGenerateError", "OutOfMemoryError"}


def _try_send(conn: socket.socket, obj: Any) -> None:
    try:
        _send(conn, obj)
    except OSError:  # the cell job went away (killed): its cell is simply not written
        pass


# ------------------------------------------------------------------------------------------------ client


@contextmanager
def _manager_lock(d: Path, wait_s: float | None = None) -> Iterator[bool]:
    """The folder's lock (spawns and stops one at a time). With `wait_s`, give up after that long and go on
    without it (yields False): stopping proven hosts needs no lock, and the workflow's end must not wait an
    engine start for it."""
    fd = os.open(d / "manager.lock", os.O_CREAT | os.O_RDWR | os.O_NOFOLLOW, 0o600)
    try:
        held = True
        if wait_s is None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        else:
            deadline = time.monotonic() + wait_s
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        held = False
                        break
                    time.sleep(0.1)
        yield held
    finally:
        os.close(fd)


def _read_record(path: Path) -> dict[str, Any] | None:
    """A host record (a JSON object of RECORD_FORMAT in a regular file of this user), or None."""
    text = _read_private(path)
    if text is None:
        return None
    try:
        rec = json.loads(text)
    except ValueError:
        return None
    return rec if isinstance(rec, dict) and rec.get("format") == RECORD_FORMAT else None


def _pid_alive(pid: Any) -> TypeGuard[int]:
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OverflowError:
        return False
    try:  # a zombie (exited, not yet reaped by its parent) is not alive
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def is_host(rec: dict[str, Any]) -> bool:
    """The record's process is alive, runs as this user and is the engine host the record names: its
    command line holds `engine-host`, the record's key and its random token (a record naming any other
    process, planted or left behind by a pid since reused, proves nothing and gets no signal)."""
    pid, token, key = rec.get("pid"), rec.get("token"), rec.get("key")
    if not (isinstance(token, str) and TOKEN.fullmatch(token) and isinstance(key, str) and KEY.fullmatch(key)):
        return False
    if not _pid_alive(pid):
        return False
    try:
        if os.stat(f"/proc/{pid}").st_uid != os.getuid():
            return False
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    pairs = set(zip(argv, argv[1:], strict=False))
    return b"engine-host" in argv and (b"--token", token.encode()) in pairs and (b"--key", key.encode()) in pairs


def live_hosts(d: Path, prune: bool = True) -> dict[str, dict[str, Any]]:
    """key -> record of every host of this folder whose process is alive and proven (busy or idle: a busy
    host does not answer a ping until its measurement ends, so liveness is its process, not a ping). With
    `prune`, the records and sockets of hosts that are gone are removed (only those: see _remove_host_files)."""
    out = {}
    try:
        names = sorted(os.listdir(d))
    except OSError:
        return {}
    for name in names:
        stem, dot, ext = name.partition(".")
        if not KEY.fullmatch(stem) or ext != "json":
            continue
        rec = _read_record(d / name)
        if rec is not None and rec.get("key") == stem and is_host(rec):
            out[stem] = rec
        elif prune and rec is not None:
            _remove_host_files(d, stem)
    if prune:
        for name in names:
            stem, _, ext = name.partition(".")
            if KEY.fullmatch(stem) and ext == "sock" and stem not in out:
                _remove_host_files_sock_only(d / name)
    return out


def _signal_group(pid: int, sig: int) -> None:
    """Signal a host and the processes it started (it leads its own session: spawned with
    start_new_session), or only the host if it does not lead a group."""
    try:
        if os.getpgid(pid) == pid:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def stop_host(d: Path, key: str, wait_s: float | None = None) -> None:
    """Ask a host to exit (it finishes the measurement in flight first) and wait for its process to end; a
    host still starting (no socket yet) is ended by signal. Only a proven host is ever signalled."""
    wait_s = start_timeout_s() if wait_s is None else wait_s
    rec = _read_record(_record(d, key))
    if rec is None or rec.get("key") != key or not is_host(rec):
        _remove_host_files(d, key)
        return
    pid = rec["pid"]
    asked = False
    if os.path.exists(_sock(d, key)):
        try:
            asked = bool(request(_sock(d, key), {"op": "stop"}, timeout=wait_s).get("ok"))
        except (OSError, ConnectionError, ValueError):
            pass
    if not asked:  # starting (no socket yet) or not answering: SIGTERM, then SIGKILL after a grace period
        _signal_group(pid, signal.SIGTERM)
        wait_s = min(wait_s, TERM_GRACE_S)
    deadline = time.monotonic() + wait_s
    while is_host(rec) and time.monotonic() < deadline:
        _reap(pid)
        time.sleep(0.1)
    if is_host(rec):
        _signal_group(pid, signal.SIGKILL)
        _reap(pid)
    _remove_host_files(d, key)


def _reap(pid: Any) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except (ChildProcessError, OSError, TypeError):
        pass


def stop_all(d: Path | None = None, run_id: int | None = None, run: str | None = None) -> list[str]:
    """Stop the hosts of this folder; with `run_id` and `run`, only those of that run which the scheduler of
    that pid spawned or which no live scheduler owns (a SLURM job's own Snakemake, a killed run): the
    workflow's end never stops, nor waits for, the hosts of another run."""
    d = d or engine_dir()
    hosts = live_hosts(d, prune=False)
    mine = sorted(k for k, r in hosts.items() if (run_id is None and run is None) or _yours(r, run, run_id))
    if not mine:
        return []
    with _manager_lock(d, wait_s=5.0):
        for key in mine:
            stop_host(d, key)
    return mine


def _yours(rec: dict[str, Any], run: str | None, run_id: int | None) -> bool:
    """A host a cell of `run` (scheduled by `run_id`) may stop or take over: one of the same run whose
    scheduler is this one, or gone (a killed run's host), or none (a cell run by hand)."""
    if rec.get("run") != run:
        return False
    owner = rec.get("run_id")
    return owner == run_id or owner is None or not _pid_alive(owner)


# ------------------------------------------------------------------------------------------------ slots


def _use_path(d: Path, key: str) -> Path:
    return d / f"{key}.use"


def _open_use(d: Path, key: str) -> int:
    return os.open(_use_path(d, key), os.O_CREAT | os.O_RDWR | os.O_NOFOLLOW, 0o600)


def _hold_use(d: Path, key: str) -> int:
    """Mark the host of `key` in use by this cell job (a shared lock, held until the job has its reply; the
    file's time says when it was last picked). Taken under the manager lock, so no one stops it in between."""
    fd = _open_use(d, key)
    fcntl.flock(fd, fcntl.LOCK_SH)
    os.utime(fd)
    return fd


def in_use(d: Path, key: str) -> bool:
    """A cell job has picked the host of `key` and not yet had its reply (measuring, or waiting for it)."""
    fd = _open_use(d, key)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def _last_used(d: Path, key: str) -> float:
    try:
        return os.lstat(_use_path(d, key)).st_mtime
    except OSError:
        return 0.0


def host_slots(rec: dict[str, Any], pool: SlotPool) -> list[str]:
    """The slots a host record holds (a record without them, from an older specsweep: the whole pool)."""
    held = rec.get("slots")
    if isinstance(held, list) and held and all(isinstance(x, str) for x in held):
        return held
    return list(pool.ids)


def plan_slots(
    hosts: dict[str, dict[str, Any]], pool: SlotPool, need: int, idle: list[str]
) -> tuple[list[str], list[str]] | None:
    """The slots for a new host needing `need` of them, and the hosts to stop first: none while enough are
    free within the pool's limit, else the fewest of `idle` (the idle hosts this cell may stop, least
    recently used first) in their order. None when even stopping them all would not free enough."""
    held = {slot: key for key, rec in hosts.items() for slot in host_slots(rec, pool) if slot in pool.ids}
    stop: list[str] = []
    for victim in [None, *idle]:
        if victim is not None:
            stop.append(victim)
        taken = {slot for slot, key in held.items() if key not in stop}
        free = [slot for slot in pool.ids if slot not in taken]
        if len(free) >= need and len(taken) + need <= pool.limit:
            return free[:need], stop
    return None


def _holders(hosts: dict[str, dict[str, Any]], pool: SlotPool) -> str:
    return "; ".join(f"engine {k} (pid {r.get('pid')}) holds {','.join(host_slots(r, pool))}" for k, r in hosts.items())


@contextmanager
def use_host(
    key: str,
    argv: list[str],
    log_path: Path,
    d: Path,
    pool: SlotPool,
    need: int = 1,
    run_id: int | None = None,
    run: str | None = None,
    replace: bool = False,
) -> Iterator[dict[str, Any]]:
    """The running host for `key` (spawned on free slots when there is none), marked in use by this job for
    the life of the block: no other job stops it meanwhile. Yields {"spawned", "spawned_at", "pid", "slots",
    "cpus"}. See ensure_host."""
    info, fd = ensure_host(key, argv, log_path, d, pool, need, run_id, run, replace)
    try:
        yield info
    finally:
        os.close(fd)


def ensure_host(
    key: str,
    argv: list[str],
    log_path: Path,
    d: Path,
    pool: SlotPool,
    need: int = 1,
    run_id: int | None = None,
    run: str | None = None,
    replace: bool = False,
) -> tuple[dict[str, Any], int]:
    """The running host for `key`, spawned when there is none on `need` slots of `pool` (stopping idle hosts
    of the same run that hold slots it needs, never one in use; waiting up to SPECSWEEP_SLOT_TIMEOUT_S for
    slots when every holder is in use), and the descriptor of this job's use lock on it (close it when done).

    An engine whose start failed is not started again by the same workflow run (`run_id`: the scheduler's
    pid): its other cells fail at once with the same message (a preflight of a cell that cannot start costs
    one start, not one per workload). A new run tries again. An interrupt (Ctrl-C) during the start ends the
    starting host before it propagates. `replace`: the running host of `key` refused a cell as started for
    other settings (StaleHostError): stop it (once no other job uses it) and spawn a new one."""
    check_knobs()
    timeout = start_timeout_s()
    if need > pool.limit:
        raise SpecsweepError(
            f"engine {key}: needs {need} slot(s), the engine hosts may hold {pool.limit} "
            f"({pool.kind}: {','.join(pool.ids) or 'none'}; --resources gpu=N grants them)"
        )
    wait_deadline = time.monotonic() + slot_timeout_s()
    proc: subprocess.Popen[bytes] | None = None
    while True:
        with _manager_lock(d):
            _check_memo(d, key, run_id)
            hosts = live_hosts(d)
            if replace and key in hosts and not in_use(d, key):
                stop_host(d, key)
                del hosts[key]
            replace = replace and key in hosts  # a stale host another job still uses: wait until it is idle
            if key in hosts and not replace:
                rec = hosts[key]
                if rec.get("run_id") != run_id and _yours(rec, run, run_id):  # take over a killed run's host
                    _write_private(_record(d, key), json.dumps(rec | {"run_id": run_id}))
                fd = _hold_use(d, key)
                break
            idle = [k for k in hosts if k != key and _yours(hosts[k], run, run_id) and not in_use(d, k)]
            plan = None if replace else plan_slots(hosts, pool, need, sorted(idle, key=lambda k: _last_used(d, k)))
            if plan is not None:
                chosen, stop = plan
                for other in stop:
                    stop_host(d, other)
                fd = _hold_use(d, key)
                try:  # launched under the lock; its engine starts outside it (other engines start meanwhile)
                    proc, rec = _launch(key, argv, log_path, d, pool, chosen, run_id, run)
                except BaseException:
                    os.close(fd)
                    raise
                break
        if time.monotonic() > wait_deadline:
            raise SpecsweepError(
                f"engine {key}: no {need} free slot(s) of {','.join(pool.ids)} (at most {pool.limit} held) after "
                f"{slot_timeout_s():g} s (SPECSWEEP_SLOT_TIMEOUT_S): {_holders(hosts, pool) or 'none held'}, in use"
            )
        time.sleep(SLOT_POLL_S)
    if proc is not None:
        try:
            return _await_ready(proc, rec, d, run_id, timeout), fd
        except BaseException:
            os.close(fd)
            raise
    # an existing host: one still starting its engine (spawned by another job) has no socket yet: wait for it
    try:
        deadline = time.monotonic() + timeout
        while not _sock(d, key).exists() and time.monotonic() < deadline:
            if not is_host(rec):
                reason = _last_line(Path(rec.get("log") or d / "none"))
                raise EngineStartError(
                    f"engine {key}: the engine host (pid {rec.get('pid')}) exited before it was ready: {reason}",
                    reason,
                )
            time.sleep(0.2)
    except BaseException:
        os.close(fd)
        raise
    info = {"spawned": False, "spawned_at": rec.get("spawned_at"), "pid": rec["pid"]}
    return info | {"slots": rec.get("slots"), "cpus": rec.get("cpus")}, fd


def _check_memo(d: Path, key: str, run_id: int | None) -> None:
    """An engine whose start failed in this run (`run_id`) is not started again: its message, at once."""
    if run_id is None:
        return
    text = _read_private(_failed(d, key))
    try:
        rec = json.loads(text) if text is not None else {}
    except ValueError:
        rec = {}
    if isinstance(rec, dict) and rec.get("run_id") == run_id:
        again = "not retried in this run: "
        raise EngineStartError(again + str(rec.get("message")), again + str(rec.get("reason")))


def _launch(
    key: str,
    argv: list[str],
    log_path: Path,
    d: Path,
    pool: SlotPool,
    chosen: list[str],
    run_id: int | None,
    run: str | None,
) -> tuple[subprocess.Popen[bytes], dict[str, Any]]:
    """Spawn the host of `key` on slots `chosen` (SPECSWEEP_HOST_SLOTS: it takes exactly those), pinned to
    their CPU set, and write its record."""
    cpus = pool.cpus(chosen)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    token = secrets.token_hex(16)
    spawned_at = time.time()
    env = _host_env() | {"SPECSWEEP_HOST_SLOTS": ",".join(chosen)}
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            [*argv, "--token", token],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
            env=env,
            preexec_fn=lambda: os.sched_setaffinity(0, cpus),
        )
    rec = {
        "format": RECORD_FORMAT,
        "key": key,
        "pid": proc.pid,
        "token": token,
        "spawned_at": spawned_at,
        "log": str(log_path),
        "run": run,
        "run_id": run_id,
        "slots": chosen,
        "slot_kind": pool.kind,
        "cpus": cpus,
    }
    try:
        _write_private(_record(d, key), json.dumps(rec))
    except BaseException:
        _end_child(proc)
        raise
    return proc, rec


def _await_ready(
    proc: subprocess.Popen[bytes], rec: dict[str, Any], d: Path, run_id: int | None, timeout: float
) -> dict[str, Any]:
    """Wait until the host spawned answers with its token; a host that exits first fails the cell (and is
    remembered for this run), an interrupt ends it."""
    key, log_path = rec["key"], Path(rec["log"])
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                _remove_host_files(d, key)
                reason = _last_line(log_path)
                message = (
                    f"engine {key}: the engine host exited with code {proc.returncode} before it "
                    f"was ready: {reason} (log: {log_path})"
                )
                if run_id is not None:
                    memo = {"run_id": run_id, "message": message, "reason": reason}
                    _write_private(_failed(d, key), json.dumps(memo))
                raise EngineStartError(message, reason)
            if _sock(d, key).exists():
                answer = ping(_sock(d, key))
                if answer and answer.get("token") == rec["token"]:
                    return {k: rec[k] for k in ("spawned_at", "pid", "slots", "cpus")} | {"spawned": True}
            time.sleep(0.2)
    except BaseException as exc:
        if proc.poll() is None:
            _end_child(proc)
            _remove_host_files(d, key)
            if isinstance(exc, KeyboardInterrupt):
                raise KeyboardInterrupt(
                    f"engine {key}: interrupted during the engine start; its host (pid {proc.pid}) was ended"
                ) from None
        raise
    _end_child(proc)
    _remove_host_files(d, key)
    raise SpecsweepError(
        f"engine {key}: not ready after {timeout:g} s (SPECSWEEP_ENGINE_START_TIMEOUT_S; log: {log_path})"
    )


def _host_env() -> dict[str, str]:
    """The host's environment: this one, with this very specsweep package first on the import path (the host
    must speak the protocol of the cell job that spawns it, not that of another installed copy)."""
    here = str(Path(__file__).resolve().parent.parent)
    path = os.environ.get("PYTHONPATH", "")
    return dict(os.environ, PYTHONPATH=os.pathsep.join([here, path]) if path else here)


def _end_child(proc: subprocess.Popen[bytes]) -> None:
    """End a host this process spawned (its own child: the pid cannot have been reused), and its processes."""
    end_group(proc, TERM_GRACE_S)


def end_group(proc: subprocess.Popen[bytes], grace_s: float, sweep: bool = False) -> None:
    """End a child of this process and the processes of its group (it leads one: start_new_session or setsid):
    SIGTERM, then SIGKILL after `grace_s`; with `sweep`, then SIGKILL what is left of its group (processes that
    outlived their leader). A second Ctrl-C does not cut this short."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        _signal_group(proc.pid, signal.SIGTERM)
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            _signal_group(proc.pid, signal.SIGKILL)
            proc.wait()
        if sweep:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _last_line(path: Path) -> str:
    try:
        lines = [ln.strip() for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "(no log)"
    for ln in reversed(lines):  # the host's own one-line error first (see runner.run_engine_host)
        if ln.startswith("specsweep: error:"):
            return ln.removeprefix("specsweep: error:").strip()[:400]
    for ln in reversed(lines):
        if "Error" in ln or "error" in ln:
            return ln[:300]
    return lines[-1][:300] if lines else "(empty log)"


def measure_via_host(key: str, msg: dict[str, Any], d: Path) -> dict[str, Any]:
    try:
        reply = request(_sock(d, key), msg)
    except (OSError, ConnectionError, ValueError) as exc:
        raise SpecsweepError(f"engine {key}: lost the engine host during the measurement ({exc})") from None
    if not reply.get("ok"):
        if reply.get("stale"):
            raise StaleHostError(str(reply.get("message")))
        raise SpecsweepError(f"{reply.get('error_type')}: {reply.get('message')}")
    return reply["doc"]


def host_argv(config: str, model: str, step: str, repeat: int, model_path: str | None, key: str) -> list[str]:
    argv = [
        sys.executable,
        "-m",
        "specsweep.cli",
        "engine-host",
        "--config",
        config,
        "--model",
        model,
        "--ladder-step",
        step,
        "--repeat",
        str(repeat),
        "--key",
        key,
    ]
    if model_path:
        argv += ["--model-path", model_path]
    return argv


# ------------------------------------------------------------------------------------------------ activity


class Activity:
    """One measurement or engine start of a host, journalled in the folder's activity.jsonl (a begin line,
    then an end line); a measurement holds the folder's measure lock unless it may run side by side.
    `end()` writes the end and returns what ran beside it: every other journalled activity of the folder
    that overlapped it (one still running counts up to now, while its process lives)."""

    def __init__(self, d: Path, kind: str, what: dict[str, Any], exclusive: bool = False) -> None:
        self.d, self.id = d, secrets.token_hex(8)
        self._lock: int | None = None
        if exclusive:
            self._lock = os.open(d / MEASURE_LOCK, os.O_CREAT | os.O_RDWR | os.O_NOFOLLOW, 0o600)
            fcntl.flock(self._lock, fcntl.LOCK_EX)
        self.t0 = time.time()
        _journal(d, {"id": self.id, "event": "begin", "t": self.t0, "kind": kind, "pid": os.getpid()} | what)

    def end(self) -> list[dict[str, Any]]:
        t1 = time.time()
        try:
            _journal(self.d, {"id": self.id, "event": "end", "t": t1})
            return beside(self.d, self.id, self.t0, t1)
        finally:
            if self._lock is not None:
                os.close(self._lock)
                self._lock = None


def _journal(d: Path, event: dict[str, Any]) -> None:
    """Append one line (a single write: lines of concurrent hosts never interleave)."""
    fd = os.open(d / ACTIVITY, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, (json.dumps(event, allow_nan=False) + "\n").encode())
    finally:
        os.close(fd)


def beside(d: Path, me: str, t0: float, t1: float) -> list[dict[str, Any]]:
    """The activities of the journal's end (its last MAX_ACTIVITY_READ bytes) other than `me` that overlapped
    [t0, t1]: kind (measure or engine start), run, cell, engine key, slots and seconds of overlap."""
    try:
        fd = os.open(d / ACTIVITY, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return []
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid():
            return []
        start = max(0, st.st_size - MAX_ACTIVITY_READ)
        text = os.pread(fd, MAX_ACTIVITY_READ, start).decode("utf-8", "replace")
    finally:
        os.close(fd)
    begins: dict[str, dict[str, Any]] = {}
    ends: dict[str, float] = {}
    for line in text.splitlines()[1 if start else 0 :]:
        try:
            ev = json.loads(line)
        except ValueError:
            continue
        if not isinstance(ev, dict) or not isinstance(ev.get("id"), str) or not isinstance(ev.get("t"), (int, float)):
            continue
        if ev.get("event") == "begin":
            begins[ev["id"]] = ev
        elif ev.get("event") == "end":
            ends[ev["id"]] = float(ev["t"])
    out = []
    for ident, ev in begins.items():
        if ident == me:
            continue
        end = ends.get(ident)
        if end is None:
            if not _pid_alive(ev.get("pid")):
                continue  # a host that died mid-activity: when it ended is unknown
            end = time.time()
        overlap = min(end, t1) - max(float(ev["t"]), t0)
        if overlap > 0:
            out.append(
                {
                    "kind": ev.get("kind"),
                    "run": ev.get("run"),
                    "cell": ev.get("cell"),
                    "engine": ev.get("key"),
                    "slots": ev.get("slots"),
                    "overlap_s": round(overlap, 3),
                }
            )
    return sorted(out, key=lambda b: (str(b["kind"]), str(b["cell"]), str(b["engine"])))
