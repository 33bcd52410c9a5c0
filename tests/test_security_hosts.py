"""The engine hosts cannot be turned against the person running specsweep: the engine folder is private and
specsweep's own (a planted record gets no process signalled, another user's, a symlinked or an unmarked
folder is refused and nothing in it deleted), a config cannot preload code into the engines, bad knobs and
socket paths are refused before any engine starts, the workflow's end stops only its own run's hosts, and
Ctrl-C during an engine start ends the starting host."""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml

from conftest import ROOT
from specsweep import corpus, enginehost, workloads
from specsweep.config import build_study
from specsweep.errors import SpecsweepError

MODEL = "smollm2-135m-instruct"
RUN = "sec"


def _cli(*args: str, env: dict[str, str] | None = None, timeout: int = 120) -> subprocess.CompletedProcess:
    full = dict(os.environ, PYTHONPATH=str(ROOT / "workflow")) | (env or {})
    return subprocess.run(
        [sys.executable, "-m", "specsweep.cli", *args], capture_output=True, text=True, env=full, timeout=timeout
    )


def _stand_in(key: str, token: str) -> subprocess.Popen:
    """A process whose command line is an engine host's (engine-host --key K --token T): what a host record
    is checked against. It measures nothing; it stands for the process a record names."""
    code = "import time; time.sleep(120)"
    return subprocess.Popen([sys.executable, "-c", code, "engine-host", "--key", key, "--token", token])


def _plant(d: Path, key: str, pid: int, token: str, run: str = RUN, run_id: int | None = None) -> Path:
    rec = {
        "format": enginehost.RECORD_FORMAT,
        "key": key,
        "pid": pid,
        "token": token,
        "spawned_at": 0.0,
        "log": None,
        "run": run,
        "run_id": run_id,
    }
    path = d / f"{key}.json"
    path.write_text(json.dumps(rec))
    return path


def _gone(proc: subprocess.Popen, within_s: float = 15.0) -> bool:
    try:
        proc.wait(within_s)
    except subprocess.TimeoutExpired:
        return False
    return True


@pytest.fixture
def eng(tmp_path, monkeypatch) -> Path:
    d = tmp_path / "eng"
    monkeypatch.setenv("SPECSWEEP_ENGINE_DIR", str(d))
    return d


# ============================================================================ a planted record signals nothing


@pytest.mark.parametrize("proven", [False, True], ids=["planted-token", "host-token"])
def test_a_record_signals_only_the_host_its_token_proves(eng, proven):
    """`specsweep engines --stop` (the workflow's end runs the same code) ends the process a host record
    names only when that process carries the record's random token; a record naming any other pid (planted,
    or left behind and its pid reused) gets nothing signalled."""
    enginehost.engine_dir()
    key, token = "0123456789abcdef", secrets.token_hex(16)
    victim = _stand_in(key, token if proven else secrets.token_hex(16))
    try:
        _plant(eng, key, victim.pid, token)
        proc = _cli("engines", "--stop", env={"SPECSWEEP_ENGINE_START_TIMEOUT_S": "2"})
        assert proc.returncode == 0, proc.stderr
        if proven:
            assert _gone(victim) and proc.stdout.strip() == f"stopped 1 engine host(s): {key}"
            assert not (eng / f"{key}.json").exists()
        else:
            assert not _gone(victim, 3.0), "a process the record does not prove was signalled"
            assert proc.stdout.strip() == "stopped 0 engine host(s)"
    finally:
        victim.kill()
        victim.wait()


# ============================================================================ the folder is private and ours


def test_an_engine_folder_of_another_user_is_refused(eng):
    eng.mkdir(mode=0o700)
    os.chown(eng, 65534, 65534)
    with pytest.raises(SpecsweepError) as err:
        enginehost.engine_dir()
    assert str(err.value) == (
        f"engine folder {eng}: belongs to uid 65534, not to you (uid {os.getuid()}); set SPECSWEEP_ENGINE_DIR to "
        "a folder of yours"
    )


def test_a_symlinked_engine_folder_is_refused(eng, tmp_path):
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    (real / enginehost.MARKER).write_text(enginehost.MARKER_TEXT)
    eng.symlink_to(real, target_is_directory=True)
    with pytest.raises(SpecsweepError) as err:
        enginehost.engine_dir()
    assert str(err.value) == (
        f"engine folder {eng}: is a symbolic link (never followed); remove it or set SPECSWEEP_ENGINE_DIR"
    )


def test_an_engine_folder_open_to_others_is_refused(eng):
    enginehost.engine_dir()
    eng.chmod(0o755)
    with pytest.raises(SpecsweepError) as err:
        enginehost.engine_dir()
    assert str(err.value) == f"engine folder {eng}: is open to other users (mode 0755); chmod 700 it, or remove it"


def test_the_default_engine_folder_is_made_private_and_marked(tmp_path, monkeypatch):
    short = Path(tempfile.mkdtemp(prefix="sse", dir="/tmp"))  # tmp_path is too long for a socket path
    try:
        monkeypatch.delenv("SPECSWEEP_ENGINE_DIR", raising=False)
        monkeypatch.setenv("TMPDIR", str(short))
        monkeypatch.setattr(tempfile, "tempdir", None)
        d = enginehost.engine_dir(tmp_path / "work")
        assert d.parent == short and d.name.startswith(f"specsweep-engines-{os.getuid()}-")
        assert oct(os.lstat(d).st_mode & 0o777) == oct(0o700)
        assert (d / enginehost.MARKER).read_text() == enginehost.MARKER_TEXT
        # the default folder an older specsweep made (0700, only host files) is adopted; with any other file
        # in it, refused
        (d / enginehost.MARKER).unlink()
        (d / "0123456789abcdef.json").write_text('{"pid": 1}')
        assert enginehost.engine_dir(tmp_path / "work") == d and (d / enginehost.MARKER).is_file()
        (d / enginehost.MARKER).unlink()
        (d / "r1.json").write_text("{}")
        with pytest.raises(SpecsweepError, match="holds 2 file"):
            enginehost.engine_dir(tmp_path / "work")
    finally:
        shutil.rmtree(short)


def test_a_cells_folder_as_engine_folder_deletes_nothing(tmp_path):
    """SPECSWEEP_ENGINE_DIR pointed at a folder of results (here a cells folder, and a file named like a
    host record): `engines --stop` refuses it in one line and every file stays."""
    cells = tmp_path / "results" / RUN / "cells" / MODEL / "code" / "vanilla"
    cells.mkdir(parents=True)
    files = {cells / "r1.json": '{"format": "specsweep-cell/2"}', cells / "0123456789abcdef.json": '{"pid": 1}'}
    for path, text in files.items():
        path.write_text(text)
    (cells / "MANIFEST.json").write_text("{}")
    files[cells / "MANIFEST.json"] = "{}"
    before = sorted(os.listdir(cells))
    for args in (("engines", "--stop"), ("engines",)):
        proc = _cli(*args, env={"SPECSWEEP_ENGINE_DIR": str(cells)})
        assert proc.returncode == 2
        assert proc.stderr.strip() == (
            f"specsweep: error: engine folder {cells}: holds 3 file(s) but not specsweep's marker "
            f"{enginehost.MARKER}: not an engine folder (nothing there is touched); set SPECSWEEP_ENGINE_DIR to "
            "an empty folder"
        )
    assert sorted(os.listdir(cells)) == before
    assert all(path.read_text() == text for path, text in files.items())


def test_nothing_but_host_records_and_sockets_is_deleted(eng):
    """In the engine folder itself, pruning the records of hosts that are gone removes those records and
    sockets only: a file named like a record that is not one, logs and failure memos stay."""
    d = enginehost.engine_dir()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    _plant(d, "00000000000000aa", dead.pid, secrets.token_hex(16))
    keep = {d / "00000000000000bb.json": '{"pid": 1}', d / "00000000000000aa.log": "log", d / "notes.txt": "x"}
    for path, text in keep.items():
        path.write_text(text)
    assert enginehost.live_hosts(d) == {}
    assert not (d / "00000000000000aa.json").exists()
    assert all(path.read_text() == text for path, text in keep.items())


# ============================================================================ a config cannot preload code


@pytest.mark.parametrize(
    "name,value",
    [("LD_PRELOAD", "/tmp/evil.so"), ("PYTHONPATH", "/tmp/evil"), ("PATH", "/tmp/evil:/usr/bin")],
)
def test_config_env_refuses_what_chooses_code(smoke_cfg, name, value):
    cfg = smoke_cfg | {"env": dict(smoke_cfg["env"]) | {name: value}}
    with pytest.raises(SpecsweepError) as err:
        build_study(cfg)
    assert str(err.value).startswith(f"config: env.{name}: may not be set in the config: it takes only the engine")


def test_config_env_refuses_an_allowed_family_member_that_loads_code(smoke_cfg):
    cfg = smoke_cfg | {"env": {"VLLM_LOGGING_CONFIG_PATH": "/tmp/log.json"}}
    with pytest.raises(SpecsweepError) as err:
        build_study(cfg)
    assert str(err.value) == (
        "config: env.VLLM_LOGGING_CONFIG_PATH: may not be set in the config: it names code to load (a library, a "
        "program or a logging config); export it in the shell if you mean it"
    )


@pytest.mark.parametrize(
    "name,why",
    [
        # a model folder, a cache of compiled code, tuned kernels, a topology file: the cell records the name only
        ("VLLM_MODEL_REDIRECT_PATH", "it names a file, folder or URL"),
        ("VLLM_CACHE_ROOT", "it names a file, folder or URL"),
        ("VLLM_TUNED_CONFIG_FOLDER", "it names a file, folder or URL"),
        ("PYTORCH_KERNEL_CACHE_PATH", "it names a file, folder or URL"),
        ("NCCL_TOPO_FILE", "it names a file, folder or URL"),
        # another vLLM switch, not among those a cell's record accounts for
        ("VLLM_USE_MODELSCOPE", "it is none of the switches whose effect a cell records"),
        ("VLLM_TEST_FORCE_LOAD_FORMAT", "it is none of the switches whose effect a cell records"),
        # NCCL's family is allowed by name too: NCCL_NET picks a network plugin, code the cell does not record
        ("NCCL_NET", "it is none of the switches whose effect a cell records"),
        ("TORCH_NCCL_DUMP_ON_TIMEOUT", "it is none of the switches whose effect a cell records"),
    ],
)
@pytest.mark.parametrize("where", ["env", "ladder.vanilla.env"])
def test_config_env_refuses_what_the_cell_does_not_record(smoke_cfg, name, why, where):
    """VLLM_MODEL_REDIRECT_PATH makes vLLM load another folder while the cell records the first one's manifest
    hash: refused by name, as is every variable whose effect the cell's record does not hold."""
    cfg = smoke_cfg | {"env": dict(smoke_cfg["env"])}
    cfg["ladder"] = {k: dict(v) for k, v in smoke_cfg["ladder"].items()}
    if where == "env":
        cfg["env"][name] = "/elsewhere"
    else:
        cfg["ladder"]["vanilla"]["env"] = {name: "/elsewhere"}
    with pytest.raises(SpecsweepError) as err:
        build_study(cfg)
    msg = str(err.value)
    assert msg.startswith(f"config: {where}.{name}: may not be set in the config: {why}") and "\n" not in msg, msg


def test_config_env_accepts_the_switches_a_cell_records(smoke_cfg):
    """An allowed switch still passes, and the cell's settings (hashed into its config_sha256) hold its value."""
    cfg = smoke_cfg | {"env": dict(smoke_cfg["env"]) | {"VLLM_USE_V2_MODEL_RUNNER": "0", "NCCL_P2P_DISABLE": "1"}}
    study = build_study(cfg)
    cell = next(iter(study.cell_groups))
    recorded = study.cell_settings(cell)["env"]
    assert {"VLLM_USE_V2_MODEL_RUNNER": "0", "NCCL_P2P_DISABLE": "1"}.items() <= recorded.items()


def test_config_readme_lists_every_allowed_env_name():
    from specsweep.preflight_checks import ENV_NAMES

    text = (ROOT / "config" / "README.md").read_text()
    section = text[text.index("### What `env` may set") : text.index("### The engine hosts' environment")]
    rows = [line.split("|")[1] for line in section.splitlines() if line.startswith("| `")]  # the table's first column
    listed = set(re.findall(r"`([A-Z][A-Z0-9_]*\*?)`", "".join(rows)))
    assert listed == set(ENV_NAMES)  # the NCCL families by name too: no whole family is allowed


def test_every_committed_config_passes_the_env_allowlist():
    from specsweep.config import load_study

    paths = sorted(ROOT.glob("config/*.yaml")) + sorted(ROOT.glob("results/*/config.yaml"))
    paths += sorted(ROOT.glob(".test/config/*.yaml"))
    assert len(paths) >= 20
    for path in paths:
        assert load_study(path).raw["env"] is not None, path


# ============================================================================ refused before any engine starts


@pytest.fixture
def cell_job(tmp_path, sonnet, smoke_cfg) -> dict:
    """A config, a workload file and a model folder enough for `run-cell` to get as far as the engine."""
    cfg = smoke_cfg | {"run": RUN, "sonnet_path": str(sonnet)}
    cfg["groups"] = {"g": {"models": [MODEL], "workloads": ["code"], "configs": ["vanilla"]}}
    study = build_study(cfg)
    cfg_path = tmp_path / "sec.yaml"
    cfg_path.write_text(yaml.safe_dump(cfg))
    sha = study.raw["corpus"]["sha256"]
    doc = workloads.build(study.workloads, "code", corpus.load_lines(sonnet, sha), 0, study.raw["warmup_prompts"], sha)
    wl = tmp_path / "code.json"
    workloads.write(doc, wl)
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    out = tmp_path / "results" / RUN / "cells" / MODEL / "code" / "vanilla" / "r1.json"
    args = ["run-cell", "--config", str(cfg_path), "--workload-file", str(wl), "--out", str(out)]
    failure = tmp_path / "results" / RUN / "failures" / MODEL / "code" / "vanilla" / "r1.json"
    return {"args": [*args, "--model-path", str(model)], "out": out, "failure": failure}


@pytest.mark.parametrize("name", ["SPECSWEEP_ENGINE_IDLE_S", "SPECSWEEP_ENGINE_START_TIMEOUT_S"])
@pytest.mark.parametrize("value", ["soon", "-1", "0", "nan", "inf"])
def test_engine_knobs_are_checked_before_any_start(cell_job, eng, name, value):
    proc = _cli(*cell_job["args"], env={name: value})
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"specsweep: error: {name}={value}: must be a positive number of seconds"
    assert not eng.exists() or not list(eng.glob("*.json"))  # no host was spawned
    assert not cell_job["out"].exists()


def test_a_long_tmpdir_is_refused_before_any_start(cell_job, tmp_path):
    long_tmp = tmp_path / ("t" * 100)
    long_tmp.mkdir()
    env = {"TMPDIR": str(long_tmp), "SPECSWEEP_ENGINE_DIR": ""}
    proc = _cli(*cell_job["args"], env=env)
    assert proc.returncode == 2
    line = proc.stderr.strip()
    assert line.startswith(f"specsweep: error: engine folder {long_tmp}/specsweep-engines-") and "\n" not in line
    assert line.endswith("over the 107 a Unix socket allows; set TMPDIR (or SPECSWEEP_ENGINE_DIR) to a shorter folder")
    assert os.listdir(long_tmp) == []  # nothing made, nothing spawned


def test_a_long_engine_dir_is_refused(tmp_path, monkeypatch):
    d = tmp_path / ("e" * 110)
    monkeypatch.setenv("SPECSWEEP_ENGINE_DIR", str(d))
    with pytest.raises(SpecsweepError) as err:
        enginehost.engine_dir()
    assert str(err.value).endswith("a Unix socket allows; set SPECSWEEP_ENGINE_DIR to a shorter folder")
    assert not d.exists()


# ============================================================================ a run's end stops only its hosts


def test_the_end_of_a_run_stops_only_that_runs_hosts(eng):
    """The workflow's onsuccess/onerror stop the hosts their own Snakemake spawned, and the hosts of their run
    that no live scheduler owns (a killed run's, a SLURM job's); a host of another run, or one of the same
    run that another live Snakemake owns, is neither stopped nor waited for (as `snakemake figures` did)."""
    d = enginehost.engine_dir()
    me, other_scheduler = os.getpid(), subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    # a scheduler that is gone: a pid above the kernel's largest (PID_MAX_LIMIT, 2**22), never alive; the pid of
    # a process that just exited can be taken again (by a thread too) on a busy machine, and then looks alive
    dead_scheduler = 2**22 + 1
    assert not enginehost._pid_alive(dead_scheduler)
    hosts = {
        "000000000000000a": (RUN, me),  # spawned by this run: stopped
        "000000000000000b": (RUN, dead_scheduler),  # this run's, its scheduler gone: stopped
        "000000000000000c": ("other", me),  # another run's: left
        "000000000000000d": ("other", None),  # another run's, by hand: left
        "000000000000000e": (RUN, other_scheduler.pid),  # owned by another live Snakemake: left
    }
    procs = {}
    try:
        for key, (run, run_id) in hosts.items():
            token = secrets.token_hex(16)
            procs[key] = _stand_in(key, token)
            _plant(d, key, procs[key].pid, token, run, run_id)
        stopped = enginehost.stop_all(d, run_id=me, run=RUN)
        assert stopped == ["000000000000000a", "000000000000000b"]
        assert [k for k, p in procs.items() if _gone(p, 0.5)] == stopped
        assert sorted(enginehost.live_hosts(d)) == ["000000000000000c", "000000000000000d", "000000000000000e"]
    finally:
        for p in [*procs.values(), other_scheduler]:
            p.kill()
            p.wait()


# ============================================================================ Ctrl-C during an engine start


@pytest.mark.slow
def test_ctrl_c_during_an_engine_start_ends_the_starting_host(cell_job, eng, smollm2):
    """SIGINT to a cell job while its engine host starts vLLM: the job ends that host (by its pid, before it
    has a socket), removes its record and writes a failure record that says what happened."""
    args = [a if a != cell_job["args"][-1] else str(smollm2) for a in cell_job["args"]]
    env = dict(os.environ, PYTHONPATH=str(ROOT / "workflow"), VLLM_ENABLE_V1_MULTIPROCESSING="0")
    job = subprocess.Popen(
        [sys.executable, "-m", "specsweep.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        # a job started from a background shell inherits SIGINT ignored, and Python then never raises
        # KeyboardInterrupt: give the job the default handling a terminal's Ctrl-C meets
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        deadline = time.monotonic() + 120
        rec = None
        while time.monotonic() < deadline and rec is None:
            recs = list(eng.glob("*.json")) if eng.exists() else []
            rec = json.loads(recs[0].read_text()) if recs else None
            time.sleep(0.2)
        assert rec is not None, "no engine host was spawned"
        host_pid = rec["pid"]
        time.sleep(5)  # the host is importing vLLM / loading the model: no socket yet
        assert enginehost.is_host(rec) and not list(eng.glob("*.sock"))
        job.send_signal(signal.SIGINT)
        _, err = job.communicate(timeout=60)
    finally:
        job.kill()
    assert job.returncode == 130
    assert err.decode().strip().splitlines()[-1] == (
        f"specsweep: interrupted: engine {rec['key']}: interrupted during the engine start; its host "
        f"(pid {host_pid}) was ended"
    )
    assert not enginehost._pid_alive(host_pid)
    assert not list(eng.glob("*.json")) and not list(eng.glob("*.sock"))
    failure = json.loads(cell_job["failure"].read_text())
    assert failure["error_type"] == "KeyboardInterrupt"
    assert failure["message"].startswith(f"engine {rec['key']}: interrupted during the engine start")
    assert not cell_job["out"].exists()
