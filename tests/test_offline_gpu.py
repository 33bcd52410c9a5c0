"""offline-gpu/device-run.sh: a run started with --start outlives the call that started it, --wait packs what
exists and reports Snakemake's exit status once it has ended, --stop interrupts it; the run works in a copy of the
tree of its own, so what a mirror does to the checkout between calls cannot delete its cells. Shown with real
Snakemake on a workflow of timed jobs, in a copy of the script; the call that starts the run is its own process
group, killed as soon as it returns, as a time-limited machine ends what a call leaves behind. The scripts trust no
state another local user could have made or written: a planted run folder, a pid that is not the run's own, a
RUN that is not a name, a site env or stash not private to the user are refused in one line, nothing run,
signalled or removed."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from conftest import ROOT

SCRIPT = ROOT / "offline-gpu" / "device-run.sh"
RUN = "t"
SNAKEFILE = f"""
rule prepare:
    output: touch("prepared.flag")

rule cell:
    output: "results/{RUN}/cells/m/w/s/r{{n}}.json"
    shell: "sleep {{wildcards.n}}; echo '{{{{}}}}' > {{output}}"
"""


@pytest.fixture
def work(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    w = tmp_path / "work"
    (w / "offline-gpu").mkdir(parents=True)
    for name in ("device-run.sh", "private.sh"):
        (w / "offline-gpu" / name).write_text((SCRIPT.parent / name).read_text())
    (w / "Snakefile").write_text(SNAKEFILE)
    (tmp_path / "env.sh").write_text("# vLLM would be put on PYTHONPATH here\n")
    (tmp_path / "out").mkdir()
    env = os.environ | {
        "PATH": f"{Path(os.path.abspath(sys.executable)).parent}:{os.environ['PATH']}",
        "SPECSWEEP_SITE_ENV": str(tmp_path / "env.sh"),
        "SPECSWEEP_DETACHED_DIR": str(tmp_path / "state"),
        "OUT": str(tmp_path / "out"),
        "STASH": str(tmp_path / "stash"),
    }
    return w, env


def _call(work: Path, env: dict[str, str], *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """One call on the machine: its own process group, and whatever is left in that group is killed after it."""
    p = subprocess.Popen(
        ["bash", "offline-gpu/device-run.sh", *args],
        cwd=work,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    out, _ = p.communicate(timeout=timeout)
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    return subprocess.CompletedProcess(p.args, p.returncode, out, None)


def _cells(env: dict[str, str]) -> list[str]:
    """The cells in the started run's own tree."""
    tree = Path(env["SPECSWEEP_DETACHED_DIR"]) / RUN / "tree"
    return sorted(p.name for p in (tree / "results" / RUN / "cells").rglob("r*.json"))


def _packed(env: dict[str, str]) -> list[str]:
    with tarfile.open(Path(env["OUT"]) / "results.tar.gz") as tar:
        return sorted(Path(n).name for n in tar.getnames() if n.endswith(".json"))


def test_a_started_run_outlives_its_call_and_wait_reports_its_end(work):
    w, env = work
    targets = [f"results/{RUN}/cells/m/w/s/r{n}.json" for n in (1, 6)]  # long enough to be running at --start
    t0 = time.monotonic()
    start = _call(w, env, "--start", "300", RUN, *targets, "--cores", "1")
    assert start.returncode == 0, start.stdout
    assert "started Snakemake for t" in start.stdout and time.monotonic() - t0 < 60
    tree = Path(env["SPECSWEEP_DETACHED_DIR"]) / RUN / "tree"
    assert (tree / "prepared.flag").is_file()  # `snakemake prepare` ran first, in the call, in the run's tree
    for d, marker in ((tree.parents[1], ".specsweep-detached"), (tree.parent, ".specsweep-run")):
        assert os.stat(d).st_mode & 0o777 == 0o700 and (d / marker).is_file()  # private and marked
    # the call is over and its process group killed; the run goes on
    early = _call(w, env, "--wait", "0", RUN)
    assert early.returncode == 0 and "still running" in early.stdout, early.stdout
    assert _packed(env) == _cells(env)  # what exists so far is packed
    again = _call(w, env, "--start", "300", RUN, *targets, "--cores", "1")
    assert again.returncode == 1 and "is still running" in again.stdout
    end = _call(w, env, "--wait", "120", RUN)
    assert end.returncode == 0 and "snakemake exit 0" in end.stdout, end.stdout
    assert _cells(env) == ["r1.json", "r6.json"] == _packed(env)


def test_a_mirror_of_the_checkout_between_calls_deletes_nothing_of_a_started_run(work):
    """A machine that mirrors the sending tree into the checkout before each call deletes there what the sender
    lacks: the started run's results, in a tree of its own, stay; a later --start of the run keeps them and
    measures only what is missing."""
    w, env = work
    start = _call(w, env, "--start", "300", RUN, f"results/{RUN}/cells/m/w/s/r1.json", "--cores", "1")
    assert start.returncode == 0, start.stdout
    shutil.rmtree(w / "results", ignore_errors=True)  # the mirror, while the run measures
    end = _call(w, env, "--wait", "120", RUN)
    assert "snakemake exit 0" in end.stdout and _packed(env) == ["r1.json"], end.stdout
    shutil.rmtree(w / "results", ignore_errors=True)
    (w / "results" / RUN / "cells" / "m" / "w" / "s").mkdir(parents=True)
    (w / "results" / RUN / "cells" / "m" / "w" / "s" / "r0.json").write_text("{}\n")  # a cell the sender has
    targets = [f"results/{RUN}/cells/m/w/s/r{n}.json" for n in (0, 1, 2)]
    again = _call(w, env, "--start", "300", RUN, *targets, "--cores", "1")
    assert again.returncode == 0 and "kept from the last started run of t: 2 cells in all" in again.stdout
    end = _call(w, env, "--wait", "120", RUN)
    assert "snakemake exit 0" in end.stdout and _packed(env) == ["r0.json", "r1.json", "r2.json"], end.stdout
    log = (Path(env["SPECSWEEP_DETACHED_DIR"]) / RUN / "snakemake.log").read_text()
    assert "1 of 1 steps (100%) done" in log  # only r2 was made


def test_stop_interrupts_a_started_run_and_says_how_it_ended(work):
    w, env = work
    start = _call(w, env, "--start", "300", RUN, f"results/{RUN}/cells/m/w/s/r30.json", "--cores", "1")
    assert start.returncode == 0, start.stdout
    time.sleep(3)
    stop = _call(w, env, "--stop", RUN)
    assert "snakemake exit" in stop.stdout and stop.returncode != 0, stop.stdout
    assert _cells(env) == []  # no half-written cell
    pid = int((Path(env["SPECSWEEP_DETACHED_DIR"]) / RUN / "pid").read_text())
    assert subprocess.run(["pgrep", "-s", str(pid)], capture_output=True).returncode == 1  # nothing left of it


def test_wait_without_a_started_run_says_so(work):
    w, env = work
    r = _call(w, env, "--wait", "1", RUN)
    assert r.returncode == 1 and r.stdout.strip() == "no started run of t here (start one with --start)"


CARRY = ROOT / "offline-gpu" / "carry.sh"


def _carry(cwd: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(CARRY), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60)


@pytest.fixture
def checkout(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A git checkout with a 200 kB tracked tree and an ignored .device/, and files to carry beside it."""
    co = tmp_path / "co"
    co.mkdir()
    subprocess.run(["git", "init", "-q", str(co)], check=True)
    (co / ".gitignore").write_text(".device/\n")
    (co / "tracked.bin").write_bytes(os.urandom(200_000))
    subprocess.run(["git", "-C", str(co), "add", "."], check=True)
    stage = tmp_path / "stage"
    (stage / "wheels").mkdir(parents=True)
    (stage / "wheels" / "a.whl").write_bytes(os.urandom(2_500_000))
    (stage / "model.gguf").write_bytes(os.urandom(1_700_000))
    env = os.environ | {"STASH": str(tmp_path / "stash"), "CARRY_LIMIT_MB": "3", "CARRY_MARGIN_MB": "1"}
    return co, env


def test_carry_packs_parts_that_fit_beside_the_tree_and_unpack_to_the_same_files(checkout, tmp_path):
    co, env = checkout
    stage = tmp_path / "stage"
    r = _carry(co, env, "pack", ".device/c", str(stage / "wheels"), str(stage / "model.gguf"))
    assert r.returncode == 0, r.stderr
    parts = sorted((co / ".device" / "c").glob("part.*"))
    tree = (co / "tracked.bin").stat().st_size + (co / ".gitignore").stat().st_size
    assert len(parts) == 3 and all(p.stat().st_size <= 3_000_000 - 1_000_000 - tree for p in parts), parts
    assert "3 part(s)" in r.stdout
    # one call per part, each on the machine: stash it; the last call unpacks
    for p in parts:
        s = _carry(co, env, "stash", str(p.relative_to(co)))
        assert s.returncode == 0, s.stderr
    u = _carry(co, env, "unpack", ".device/c/carry.sha256")
    assert u.returncode == 0 and "unpacked 3 part(s)" in u.stdout, u.stderr
    out = tmp_path / "stash"
    assert (out / "wheels" / "a.whl").read_bytes() == (stage / "wheels" / "a.whl").read_bytes()
    assert (out / "model.gguf").read_bytes() == (stage / "model.gguf").read_bytes()
    assert not (out / "parts").exists()


def test_carry_names_a_missing_or_damaged_part_and_a_tree_too_large(checkout, tmp_path):
    co, env = checkout
    stage = tmp_path / "stage"
    assert _carry(co, env, "pack", ".device/c", str(stage / "wheels")).returncode == 0
    parts = sorted((co / ".device" / "c").glob("part.*"))
    assert len(parts) == 2
    _carry(co, env, "stash", str(parts[0]))
    u = _carry(co, env, "unpack", ".device/c/carry.sha256")
    assert u.returncode == 1 and "1 of 2 parts stashed" in u.stderr and "missing: part.001" in u.stderr, u.stderr
    bad = tmp_path / "part.001"
    bad.write_bytes(b"x" * parts[1].stat().st_size)
    _carry(co, env, "stash", str(bad))
    u = _carry(co, env, "unpack", ".device/c/carry.sha256")
    assert u.returncode == 1 and "do not match" in u.stderr, u.stderr
    assert not (tmp_path / "stash" / "wheels").exists() and not (tmp_path / "stash" / "carry.tar").exists()
    # a folder of parts git does not ignore would travel whole with every call
    r = _carry(co, env, "pack", "parts", str(stage / "wheels"))
    assert r.returncode == 1 and "parts is not ignored by git" in r.stderr, r.stderr
    assert not (co / "parts").exists()
    r = _carry(co, env | {"CARRY_LIMIT_MB": "1"}, "pack", ".device/c", str(stage / "wheels"))
    assert r.returncode == 1 and "leaves less than 1 MB" in r.stderr, r.stderr


def test_carry_counts_only_the_files_that_travel_when_tracked_ones_were_deleted(checkout, tmp_path):
    # a tree made smaller for the carrying calls (tracked files deleted from the working tree) gets larger parts
    co, env = checkout
    stage = tmp_path / "stage"
    (co / "tracked.bin").unlink()
    r = _carry(co, env, "pack", ".device/c", str(stage / "wheels"), str(stage / "model.gguf"))
    assert r.returncode == 0, r.stderr
    parts = sorted((co / ".device" / "c").glob("part.*"))
    assert len(parts) == 3 and max(p.stat().st_size for p in parts) > 3_000_000 - 1_000_000 - 200_000, parts
    assert f"tree {(co / '.gitignore').stat().st_size} bytes" in r.stdout, r.stdout


def test_carry_unpack_with_nothing_stashed_names_every_missing_part(checkout, tmp_path):
    """A machine gone cold has no stash at all: unpack says which parts are missing, as for a partial stash."""
    co, env = checkout
    assert _carry(co, env, "pack", ".device/c", str(tmp_path / "stage" / "wheels")).returncode == 0
    assert not (tmp_path / "stash").exists()
    u = _carry(co, env, "unpack", ".device/c/carry.sha256")
    assert u.returncode == 1 and u.stderr.strip() == (
        f"carry.sh: 0 of 2 parts stashed in {tmp_path / 'stash'}/parts; missing: part.000 part.001 (the machine "
        "may have gone cold: stash them all again)"
    ), u.stderr


# ======================================================= state another local user made first, or can write

OTHER_UID = 65534  # nobody: "another local user", made owner with os.chown (the tests run as root)
PWNED = "print-planted"


def _plant_run(state: Path, marker: Path) -> None:
    """A started run's folder as another user would plant it: a tree whose `python3 -m specsweep.cli` writes
    `marker`, a finished status (so --wait ends at once and stops the engines with that Python) and a pid."""
    pkg = state / RUN / "tree" / "workflow" / "specsweep"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "cli.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    (state / RUN / "rc").write_text("0\n")


def _victim() -> subprocess.Popen:
    """A process leading a session of its own: what a planted pid would name."""
    return subprocess.Popen(["sleep", "120"], start_new_session=True)


def _chown_tree(path: Path, uid: int) -> None:
    for p in [path, *path.rglob("*")]:
        os.chown(p, uid, uid, follow_symlinks=False)


@pytest.mark.parametrize(
    "how", ["other user", "open to all", "symbolic link", "no marker", "run: other user", "run: link"]
)
def test_a_planted_state_folder_runs_nothing_and_signals_nothing(work, tmp_path, how):
    w, env = work
    state, marker = Path(env["SPECSWEEP_DETACHED_DIR"]), tmp_path / PWNED
    planted = tmp_path / "planted" if how in ("symbolic link", "run: link") else state
    _plant_run(planted, marker)
    if how.startswith("run: "):
        state.mkdir(mode=0o700, exist_ok=True)
        (state / ".specsweep-detached").write_text("")  # the started runs' folder is in order
    if how == "symbolic link":
        state.symlink_to(planted)
    elif how == "run: link":
        (state / RUN).symlink_to(planted / RUN)
    elif how == "other user":
        (state / ".specsweep-detached").write_text("")
        _chown_tree(state, OTHER_UID)
    elif how == "run: other user":
        (state / RUN / ".specsweep-run").write_text("")
        _chown_tree(state / RUN, OTHER_UID)
    elif how == "open to all":
        (state / ".specsweep-detached").write_text("")
        os.chmod(state, 0o777)
    victim = _victim()
    try:
        (planted / RUN / "pid").write_text(f"{victim.pid}\n")
        for args in (["--wait", "1", RUN], ["--stop", RUN], ["--start", "5", RUN, "--cores", "1"]):
            r = _call(w, env, *args)
            lines = r.stdout.strip().splitlines()
            assert r.returncode == 1 and len(lines) == 1 and lines[0].startswith("device-run.sh: "), r.stdout
            assert str(state) in lines[0], r.stdout
            assert not marker.exists() and victim.poll() is None, (args, r.stdout)
        assert (planted / RUN / "tree" / "workflow" / "specsweep" / "cli.py").is_file()  # nothing deleted there
    finally:
        victim.kill()
        victim.wait()


def test_stop_signals_only_the_started_run_s_own_process(work, tmp_path):
    """A pid in a run's own private folder that is not its Snakemake (a pid since reused): nothing signalled."""
    w, env = work
    state = Path(env["SPECSWEEP_DETACHED_DIR"])
    (state / RUN).mkdir(parents=True, mode=0o700)
    os.chmod(state, 0o700)
    (state / ".specsweep-detached").write_text("")
    (state / RUN / ".specsweep-run").write_text("")
    (state / RUN / "token").write_text("0" * 32 + "\n")
    victim = _victim()
    try:
        (state / RUN / "pid").write_text(f"{victim.pid}\n")
        r = _call(w, env, "--stop", RUN)
        assert (
            f"pid {victim.pid} of t is not its Snakemake (ended, or another process now): nothing signalled" in r.stdout
        )
        time.sleep(0.5)
        assert victim.poll() is None, r.stdout
    finally:
        victim.kill()
        victim.wait()


@pytest.mark.parametrize("run", ["../victim", "..", "a/b", ".kept-t", "", "-x", "t\nu"])
def test_a_run_that_is_not_a_name_is_refused_and_nothing_outside_touched(work, tmp_path, run):
    w, env = work
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("mine")
    r = _call(w, env, "--start", "5", run, "--cores", "1")
    assert r.returncode == 1 and len(r.stdout.strip().splitlines()) == 1, r.stdout
    assert r.stdout.startswith("device-run.sh: RUN ") and "not a run name" in r.stdout, r.stdout
    assert (victim / "keep.txt").read_text() == "mine" and not Path(env["SPECSWEEP_DETACHED_DIR"]).exists()


@pytest.mark.parametrize("how", ["other user", "folder open to all"])
def test_a_site_env_another_user_can_write_is_not_sourced(work, tmp_path, how):
    w, env = work
    site, marker = tmp_path / "site", tmp_path / PWNED
    site.mkdir()
    (site / "env.sh").write_text(f"echo ran > {marker}\n")
    if how == "other user":
        _chown_tree(site, OTHER_UID)
    else:
        os.chmod(site, 0o777)
    r = _call(w, env | {"SPECSWEEP_SITE_ENV": str(site / "env.sh")}, "--wait", "1", RUN)
    assert r.returncode == 1 and r.stdout.startswith("device-run.sh: ") and "no code is loaded" in r.stdout, r.stdout
    assert not marker.exists()


def test_the_default_state_folder_is_the_user_s_own(work, tmp_path):
    """Without SPECSWEEP_DETACHED_DIR the started runs' folder is ~/.cache/specsweep-detached, checked as any."""
    w, env = work
    env = {k: v for k, v in env.items() if k != "SPECSWEEP_DETACHED_DIR"} | {"HOME": str(tmp_path / "home")}
    root = tmp_path / "home" / ".cache" / "specsweep-detached"
    assert _call(w, env, "--wait", "1", RUN).stdout.strip() == "no started run of t here (start one with --start)"
    assert not root.exists()  # --wait creates nothing
    root.mkdir(parents=True)
    os.chmod(root, 0o777)
    r = _call(w, env, "--stop", RUN)
    assert r.returncode == 1 and r.stdout.startswith(f"device-run.sh: {root}: is writable by other users"), r.stdout


@pytest.mark.parametrize("how", ["other user", "no marker"])
def test_carry_refuses_a_stash_it_did_not_make(checkout, tmp_path, how):
    """A stash another user made (parts planted) or a folder of other files (its parts/ would be removed after
    unpacking): refused, nothing there unpacked or removed."""
    co, env = checkout
    stage = tmp_path / "stage"
    assert _carry(co, env, "pack", ".device/c", str(stage / "model.gguf")).returncode == 0
    stash = tmp_path / "stash"
    (stash / "parts").mkdir(parents=True)
    for p in (co / ".device" / "c").glob("part.*"):
        shutil.copy(p, stash / "parts")
    if how == "other user":
        (stash / ".specsweep-stash").write_text("")
        _chown_tree(stash, OTHER_UID)
    for args in (["stash", str(next((co / ".device" / "c").glob("part.*")))], ["unpack", ".device/c/carry.sha256"]):
        r = _carry(co, env, *args)
        assert r.returncode == 1 and r.stderr.startswith(f"carry.sh: {stash}: "), r.stderr
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert (stash / "parts").is_dir() and not (stash / "model.gguf").exists()


def test_install_refuses_a_site_another_user_can_write(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    os.chmod(site, 0o777)
    (tmp_path / "wheels").mkdir()
    r = subprocess.run(
        ["bash", str(ROOT / "offline-gpu" / "device-install-workflow.sh"), str(tmp_path / "wheels")],
        env=os.environ | {"SITE": str(site)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 1 and r.stderr.strip() == (
        f"device-install-workflow.sh: {site}: is writable by other users (mode 777): no code is loaded from it; set SITE"
    ), r.stderr
