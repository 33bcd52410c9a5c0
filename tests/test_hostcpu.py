"""specsweep.hostcpu: what else kept the engine's CPUs busy during a timed pass, read from /proc."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import jsonschema
import pytest
import yaml

from conftest import ROOT
from specsweep import hostcpu, tables

BUSY = "import time\nt = time.monotonic()\nwhile time.monotonic() - t < 30: pass\n"
linux = pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux /proc")


def _busy(new_session: bool) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, "-c", BUSY], start_new_session=new_session)
    time.sleep(0.3)  # running before the meter starts
    return p


def _measure(seconds: float = 1.5) -> dict:
    with hostcpu.HostCpuMeter() as m:
        time.sleep(seconds)
    s = m.summary()
    assert s is not None
    return s


def _ticks(pid: int) -> int:
    """utime + stime of one process, in clock ticks (/proc/<pid>/stat fields 14 and 15)."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def _measure_beside_busy(new_session: bool) -> tuple[dict, float]:
    """_measure while a busy loop spins, in a session of its own or in this process's; with the cores the spinner
    itself got over the pass (on a shared host, as CI's is, that is whatever the scheduler gave it)."""
    p = _busy(new_session=new_session)
    try:
        t0, w0 = _ticks(p.pid), time.monotonic()
        s = _measure()
        got = (_ticks(p.pid) - t0) / os.sysconf("SC_CLK_TCK") / (time.monotonic() - w0)
        return s, got
    finally:
        p.kill()
        p.wait()


@linux
def test_a_busy_process_of_another_session_counts_as_other():
    """A competitor outside the engine's session (what a stray process or another user's job is) shows as
    other_cores; this process only sleeps, so it adds nothing of its own."""
    s, got = _measure_beside_busy(new_session=True)
    assert got > 0.05, got  # the spinner ran
    assert s["other_cores"] >= got - 0.05, (s, got)  # all of it shows as other (ticks round to 10 ms)
    assert s["busy_cores"] >= s["other_cores"] and s["cpus"] == len(os.sched_getaffinity(0))
    assert s["wall_s"] == pytest.approx(1.5, abs=0.3)


@linux
def test_a_busy_child_of_the_engines_session_counts_as_its_own():
    """vLLM's engine-core and worker processes inherit the host's session: their CPU time is the engine's."""
    s, got = _measure_beside_busy(new_session=False)
    assert got > 0.05, got
    assert s["own_cores"] >= got - 0.05, (s, got)


def test_proc_parsing(tmp_path):
    """/proc/stat's per-CPU lines (busy = all but idle, iowait and steal) and /proc/<pid>/stat's session and
    utime + stime, with a command name holding spaces and parentheses."""
    (tmp_path / "stat").write_text(
        "cpu  900 0 90 9000 10 0 0 5 0 0\ncpu0 100 1 10 1000 7 2 3 4 0 0\ncpu1 200 0 20 2000 0 0 0 6 0 0\nintr 12345\n"
    )
    assert hostcpu.cpu_times({0}, tmp_path) == (100 + 1 + 10 + 2 + 3, 4)
    assert hostcpu.cpu_times({0, 1}, tmp_path) == (116 + 220, 10)
    assert hostcpu.cpu_times({7}, tmp_path) is None  # no such CPU: no number
    for pid, name, sid, ut, st in ((11, "python3", 11, 50, 7), (12, "a (b) c", 11, 5, 1), (13, "x", 99, 80, 80)):
        (tmp_path / str(pid)).mkdir()
        fields = ["S", "1", str(sid), str(sid), "0", "-1", "0", "0", "0", "0", "0", str(ut), str(st), "0"]
        (tmp_path / str(pid) / "stat").write_text(f"{pid} ({name}) " + " ".join(fields) + "\n")
    (tmp_path / "self").mkdir()
    assert hostcpu.session_ticks(11, tmp_path) == {11: 57, 12: 6}
    assert hostcpu.session_ticks(5, tmp_path) == {}


def _doc(other: float, steal: float = 0.0) -> dict:
    return {
        "host_cpu": {
            "cpus": 2,
            "wall_s": 10.0,
            "busy_cores": 1.9 + other,
            "own_cores": 1.9,
            "other_cores": other,
            "steal_cores": steal,
            "method": hostcpu.METHOD,
        }
    }


def test_host_cpu_line_names_contended_passes():
    docs = {
        ("m", "chat@b1", "ngram", 1, 1): _doc(0.02),
        ("m", "chat@b1", "ngram", 1, 2): _doc(0.97),
        ("m", "code", "vanilla", 0, 1): _doc(0.01, steal=0.1),
        ("m", "code", "vanilla", 0, 2): {"host_cpu": None},
    }
    line = tables.host_cpu_line(docs)
    assert line.startswith("Host CPU during the timed passes")
    assert "median of 0.02 and at most 0.97 of the engine's 2 CPU(s)" in line
    assert "(largest: m/chat@b1/ngram r2)" in line
    assert "1 of 3 passes had >= 0.25 core beside the engine: m/chat@b1/ngram r2 (0.97)" in line
    assert line.endswith("the hypervisor stole at most 0.10 core(s).")
    # cells written before the block existed: no sentence at all (committed runs' summaries stay as they were)
    assert tables.host_cpu_line({("m", "code", "vanilla", 0, 1): {"gpu": None}}) == ""


def test_cell_schema_takes_the_block_and_refuses_a_malformed_one():
    schema = yaml.safe_load((ROOT / "workflow/schemas/cell.schema.yaml").read_text())
    sub = schema["properties"]["host_cpu"] | {"$defs": schema["$defs"]}
    jsonschema.validate(_doc(0.3)["host_cpu"], sub)
    jsonschema.validate(None, sub)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(_doc(0.3)["host_cpu"] | {"other_cores": -1}, sub)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"cpus": 2}, sub)


@linux
def test_host_cpu_names_the_isa_of_vllms_kernels():
    """provenance.host_cpu: the CPU a cell records. Its ISA is the one vLLM's kernel library is chosen by, checked
    here against the kernel's own flags in /proc/cpuinfo (independent of torch's probes), and its model name,
    cores and memory against lscpu's sources."""
    from specsweep import provenance

    cpu = provenance.host_cpu()
    info = open("/proc/cpuinfo").read()
    flags = set(next(ln for ln in info.splitlines() if ln.startswith("flags")).split(":", 1)[1].split())
    if "avx512f" in flags:
        want = ("avx512_bf16", "vllm._C") if "avx512_bf16" in flags else ("avx512", "vllm._C_AVX512")
    else:
        want = ("avx2", "vllm._C_AVX2")
    assert (cpu["isa"], cpu["kernels"]) == want
    assert cpu["amx"] == ("amx_tile" in flags)
    assert cpu["model"] == provenance.cpu_name() and f": {cpu['model']}\n" in info
    assert cpu["cores"] == len(os.sched_getaffinity(0)) and cpu["cores_online"] == os.cpu_count()
    kib = int(next(ln for ln in open("/proc/meminfo") if ln.startswith("MemTotal:")).split()[1])
    assert cpu["memory_gib"] == round(kib / 2**20, 1) > 0
    schema = yaml.safe_load((ROOT / "workflow" / "schemas" / "cell.schema.yaml").read_text())
    jsonschema.validate(cpu, schema["properties"]["provenance"]["properties"]["cpu"])
