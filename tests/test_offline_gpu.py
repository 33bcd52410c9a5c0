"""offline-gpu/device-run.sh: a run started with --start outlives the call that started it, --wait packs what
exists and reports Snakemake's exit status once it has ended, --stop interrupts it; the run works in a copy of the
tree of its own, so what a mirror does to the checkout between calls cannot delete its cells. Shown with real
Snakemake on a workflow of timed jobs, in a copy of the script; the call that starts the run is its own process
group, killed as soon as it returns, as a time-limited machine ends what a call leaves behind."""

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
    (w / "offline-gpu" / "device-run.sh").write_text(SCRIPT.read_text())
    (w / "Snakefile").write_text(SNAKEFILE)
    (tmp_path / "env.sh").write_text("# vLLM would be put on PYTHONPATH here\n")
    (tmp_path / "out").mkdir()
    env = os.environ | {
        "PATH": f"{Path(os.path.abspath(sys.executable)).parent}:{os.environ['PATH']}",
        "SPECSWEEP_SITE_ENV": str(tmp_path / "env.sh"),
        "SPECSWEEP_DETACHED_DIR": str(tmp_path / "state"),
        "OUT": str(tmp_path / "out"),
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
    targets = [f"results/{RUN}/cells/m/w/s/r{n}.json" for n in (1, 3)]
    t0 = time.monotonic()
    start = _call(w, env, "--start", "300", RUN, *targets, "--cores", "1")
    assert start.returncode == 0, start.stdout
    assert "started Snakemake for t" in start.stdout and time.monotonic() - t0 < 60
    tree = Path(env["SPECSWEEP_DETACHED_DIR"]) / RUN / "tree"
    assert (tree / "prepared.flag").is_file()  # `snakemake prepare` ran first, in the call, in the run's tree
    # the call is over and its process group killed; the run goes on
    early = _call(w, env, "--wait", "0", RUN)
    assert early.returncode == 0 and "still running" in early.stdout, early.stdout
    assert _packed(env) == _cells(env)  # what exists so far is packed
    again = _call(w, env, "--start", "300", RUN, *targets, "--cores", "1")
    assert again.returncode == 1 and "is still running" in again.stdout
    end = _call(w, env, "--wait", "120", RUN)
    assert end.returncode == 0 and "snakemake exit 0" in end.stdout, end.stdout
    assert _cells(env) == ["r1.json", "r3.json"] == _packed(env)


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
