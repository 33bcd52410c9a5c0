"""Engine reuse: a small host process keeps one vLLM engine alive for the cells of one (model, ladder step,
repeat); each cell is still its own Snakemake job, which asks the host to measure it and writes the result.

Why this design (see README, "Engine reuse"): a cell stays one job with its own output path, so
`snakemake <path> --force` re-measures exactly that cell and a kill loses nothing but the cell in flight;
the engine start (import, weights, compile, graphs) is paid once per engine instead of once per cell, as
vLLM's own `vllm bench sweep` pays one server start per serve configuration for all its bench runs.

Protocol: one JSON line per request over a Unix socket in a private (0700) folder, one JSON line back.
Requests: ping, measure, stop. A host serves one request at a time and exits when told to, when it has
been idle for SPECSWEEP_ENGINE_IDLE_S seconds (default 300) or when its engine fails.

At most one engine lives per engine folder at a time: a cell whose engine is not running first stops the
others (their GPUs and memory are needed), then spawns its own. Cells that run one after another (the
default profile, ordered so that cells of one engine are adjacent) reuse it; cells run in parallel with
different engines stay correct but lose the reuse.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import socket
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

IDLE_S = float(os.environ.get("SPECSWEEP_ENGINE_IDLE_S", "300"))
START_TIMEOUT_S = float(os.environ.get("SPECSWEEP_ENGINE_START_TIMEOUT_S", "3600"))
MAX_LINE = 64 * 1024 * 1024


def engine_dir(workdir: Path | str | None = None) -> Path:
    """The folder of the sockets, locks and host records of one working folder (short: socket paths are
    limited to 107 bytes)."""
    override = os.environ.get("SPECSWEEP_ENGINE_DIR")
    if override:
        d = Path(override)
    else:
        import hashlib

        wd = str(Path(workdir or os.getcwd()).resolve())
        d = (
            Path(tempfile.gettempdir())
            / f"specsweep-engines-{os.getuid()}-{hashlib.sha256(wd.encode()).hexdigest()[:10]}"
        )
    d.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(d, 0o700)
    return d


def _sock(d: Path, key: str) -> Path:
    return d / f"{key}.sock"


def _record(d: Path, key: str) -> Path:
    return d / f"{key}.json"


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
        return _recv(conn)


def ping(sock_path: Path) -> dict[str, Any] | None:
    try:
        reply = request(sock_path, {"op": "ping"}, timeout=10)
    except (OSError, ConnectionError, ValueError):
        return None
    return reply if reply.get("ok") else None


# ------------------------------------------------------------------------------------------------ host


def serve(key: str, engine: Any, handle: Any, d: Path, idle_s: float = IDLE_S) -> None:
    """Listen on the engine's socket; `handle(msg) -> reply` measures. Runs in the host process."""
    path = _sock(d, key)
    path.unlink(missing_ok=True)
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(str(path))
    os.chmod(path, 0o600)
    srv.listen(8)
    srv.settimeout(idle_s)
    try:
        while True:
            try:
                conn, _ = srv.accept()
            except TimeoutError:
                print(f"engine {key}: idle for {idle_s:g} s, exiting", flush=True)
                return
            with conn:
                conn.settimeout(None)
                try:
                    msg = _recv(conn)
                except (ConnectionError, ValueError):
                    continue
                op = msg.get("op")
                if op == "ping":
                    reply = {"ok": True, "key": key, "pid": os.getpid(), "measured": engine.measured}
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
        path.unlink(missing_ok=True)


def _engine_dead(exc: BaseException) -> bool:
    return type(exc).__name__ in {"EngineDeadError", "EngineGenerateError", "OutOfMemoryError"}


def _try_send(conn: socket.socket, obj: Any) -> None:
    try:
        _send(conn, obj)
    except OSError:  # the cell job went away (killed): its cell is simply not written
        pass


# ------------------------------------------------------------------------------------------------ client


@contextmanager
def _manager_lock(d: Path) -> Iterator[None]:
    fd = os.open(d / "manager.lock", os.O_CREAT | os.O_RDWR, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def live_hosts(d: Path) -> dict[str, dict[str, Any]]:
    """key -> record of every host whose process is alive (busy or idle: a busy host does not answer a ping
    until its measurement ends, so liveness is its pid, not a ping); dead hosts' files are removed."""
    out = {}
    for rec_path in sorted(d.glob("*.json")):
        rec = _read_record(rec_path)
        if _pid_alive(rec.get("pid")):
            out[rec_path.stem] = rec
        else:
            rec_path.unlink(missing_ok=True)
            _sock(d, rec_path.stem).unlink(missing_ok=True)
    for sock_path in d.glob("*.sock"):
        if sock_path.stem not in out:
            sock_path.unlink(missing_ok=True)
    return out


def _read_record(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _pid_alive(pid: Any) -> TypeGuard[int]:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (exited, not yet reaped by its parent) is not alive
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def stop_host(d: Path, key: str, wait_s: float = START_TIMEOUT_S) -> None:
    """Ask a host to exit (it finishes the measurement in flight first) and wait for its process to end."""
    pid = _read_record(_record(d, key)).get("pid")
    try:
        request(_sock(d, key), {"op": "stop"}, timeout=wait_s)
    except (OSError, ConnectionError, ValueError):
        pass
    deadline = time.monotonic() + wait_s
    while _pid_alive(pid) and time.monotonic() < deadline:
        _reap(pid)
        time.sleep(0.1)
    if _pid_alive(pid):
        os.kill(pid, signal.SIGKILL)
    _sock(d, key).unlink(missing_ok=True)
    _record(d, key).unlink(missing_ok=True)


def _reap(pid: Any) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except (ChildProcessError, OSError, TypeError):
        pass


def stop_all(d: Path | None = None) -> list[str]:
    d = d or engine_dir()
    with _manager_lock(d):
        keys = sorted(live_hosts(d))
        for key in keys:
            stop_host(d, key)
    return keys


def _failed(d: Path, key: str) -> Path:
    return d / f"{key}.failed"


def ensure_host(key: str, argv: list[str], log_path: Path, d: Path, run_id: int | None = None) -> dict[str, Any]:
    """The running host for `key`, spawned (after stopping any other host) when there is none.
    Returns {"spawned": bool, "spawned_at": epoch, "pid": int}.

    An engine whose start failed is not started again by the same workflow run (`run_id`: the scheduler's
    pid): its other cells fail at once with the same message (a preflight of a cell that cannot start costs
    one start, not one per workload). A new run tries again."""
    with _manager_lock(d):
        memo = _failed(d, key)
        if run_id is not None and memo.is_file():
            try:
                rec = json.loads(memo.read_text())
            except (OSError, ValueError):
                rec = {}
            if rec.get("run_id") == run_id:
                again = "not retried in this run: "
                raise EngineStartError(again + str(rec.get("message")), again + str(rec.get("reason")))
        hosts = live_hosts(d)
        if key in hosts:
            rec = hosts[key]
            # a host still starting its engine (spawned by a job that was killed) has no socket yet: wait for it
            deadline = time.monotonic() + START_TIMEOUT_S
            while not _sock(d, key).exists() and time.monotonic() < deadline:
                if not _pid_alive(rec.get("pid")):
                    reason = _last_line(Path(rec.get("log") or d / "none"))
                    raise EngineStartError(
                        f"engine {key}: the engine host (pid {rec.get('pid')}) exited before it was ready: {reason}",
                        reason,
                    )
                time.sleep(0.2)
            return {"spawned": False, "spawned_at": rec.get("spawned_at"), "pid": rec["pid"]}
        for other in hosts:
            stop_host(d, other)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        spawned_at = time.time()
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                close_fds=True,
            )
        rec = {"key": key, "pid": proc.pid, "spawned_at": spawned_at, "log": str(log_path)}
        _record(d, key).write_text(json.dumps(rec))
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                _record(d, key).unlink(missing_ok=True)
                reason = _last_line(log_path)
                message = (
                    f"engine {key}: the engine host exited with code {proc.returncode} before it "
                    f"was ready: {reason} (log: {log_path})"
                )
                if run_id is not None:
                    memo.write_text(json.dumps({"run_id": run_id, "message": message, "reason": reason}))
                raise EngineStartError(message, reason)
            if _sock(d, key).exists() and ping(_sock(d, key)):
                return {"spawned": True, "spawned_at": spawned_at, "pid": proc.pid}
            time.sleep(0.2)
        stop_host(d, key)
        raise SpecsweepError(f"engine {key}: not ready after {START_TIMEOUT_S:g} s (log: {log_path})")


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
        raise SpecsweepError(f"{reply.get('error_type')}: {reply.get('message')}")
    return reply["doc"]


def host_argv(config: str, model: str, config_name: str, repeat: int, model_path: str | None, key: str) -> list[str]:
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
        config_name,
        "--repeat",
        str(repeat),
        "--key",
        key,
    ]
    if model_path:
        argv += ["--model-path", model_path]
    return argv
