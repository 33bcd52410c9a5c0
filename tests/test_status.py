"""`specsweep status`: a run's progress from its cells, on the committed H200 cells and on a
copy of them with one measurement made stale and one failed."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT
from specsweep.jsonio import atomic_write_json, read_json, sha256_obj

CELLS = ROOT / "results" / "h200-smollm2" / "cells"
STALE = "smollm2-135m-instruct/code/ngram/r1"
FAILED = "smollm2-135m-instruct/code/suffix/r1"


def status(*args: str, cwd=ROOT) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "specsweep.cli",
            "status",
            "--config",
            str(ROOT / "results" / "h200-smollm2" / "config.yaml"),
            *args,
        ],
        cwd=cwd,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    return proc


def test_status_of_the_committed_h200_run():
    doc = json.loads(status("--json").stdout)
    assert (doc["measurements"], doc["cells"], doc["repeats"]) == (90, 30, 3)
    assert {k: doc[k] for k in ("done", "failed", "stale", "left")} == {"done": 12, "failed": 0, "stale": 0, "left": 78}
    # the GPU time spent is the tables' engine-holding time; to go is the mean job time x what is not done
    gt = read_json(ROOT / "results" / "h200-smollm2" / "tables" / "gpu_time.json", "gpu_time")
    assert doc["gpu_time_spent_s"] == gt["total_s"] and doc["engine_starts"] == gt["engine_starts"] == 2
    assert doc["mean_job_s"] == pytest.approx(gt["job_wall_s"] / 12, abs=1e-3)
    assert doc["to_go_s"] == pytest.approx(78 * gt["job_wall_s"] / 12, rel=1e-4)
    steps = {s["config"]: s for s in doc["steps"]}
    assert list(steps) == ["vanilla", "ngram", "suffix", "trident", "vanilla-sync", "suffix-full"]  # ladder order
    assert steps["vanilla"]["done"] == steps["ngram"]["done"] == 6 and steps["vanilla"]["left"] == 12
    assert steps["suffix"]["left"] == 18 and steps["suffix-full"]["left"] == 9

    text = status().stdout
    assert "run h200-smollm2: 90 measurements (30 cells x 3 repeats)" in text
    assert "done 12, failed 0, stale 0, left 78" in text
    assert f"GPU time spent 7.6 min ({gt['total_s']:.1f} s engine-holding over 2 engine start(s))" in text
    assert "to go: 78 measurements (left, failed and stale), about 49.3 min" in text


@pytest.fixture
def copy_with_stale_and_failed(tmp_path):
    """The committed cells in a copy: one ngram measurement re-hashed with another max_num_seqs (a valid cell,
    measured with other settings than the config gives now) and a failure record for a suffix measurement."""
    cells = tmp_path / "results" / "h200-smollm2" / "cells"
    shutil.copytree(CELLS, cells)
    path = cells / f"{STALE}.json"
    doc = json.loads(path.read_text())
    doc["settings"]["engine"]["max_num_seqs"] = 128
    doc["config_sha256"] = sha256_obj(doc["settings"])
    atomic_write_json(path, doc)
    model, workload, config, repeat = FAILED.split("/")
    atomic_write_json(
        tmp_path / "results" / "h200-smollm2" / "failures" / model / workload / config / f"{repeat}.json",
        {
            "format": "specsweep-failure/1",
            "run": "h200-smollm2",
            "model": model,
            "workload": workload,
            "config": config,
            "repeat": 1,
            "error_type": "RuntimeError",
            "message": "engine start failed: CUDA out of memory",
        },
    )
    return tmp_path


def test_status_counts_stale_and_failed(copy_with_stale_and_failed):
    work = copy_with_stale_and_failed
    doc = json.loads(status("--results", str(work / "results"), "--json").stdout)
    assert {k: doc[k] for k in ("done", "failed", "stale", "left")} == {"done": 11, "failed": 1, "stale": 1, "left": 77}
    assert doc["stale_measurements"] == [{"measurement": STALE, "differing": ["engine.max_num_seqs"]}]
    assert doc["failed_measurements"] == [
        {"measurement": FAILED, "error": "RuntimeError: engine start failed: CUDA out of memory"}
    ]
    steps = {s["config"]: s for s in doc["steps"]}
    assert (steps["ngram"]["done"], steps["ngram"]["stale"]) == (5, 1)
    assert (steps["suffix"]["failed"], steps["suffix"]["left"]) == (1, 17)
    # the stale measurement's engine time was spent all the same; to go counts left, failed and stale
    assert doc["to_go_s"] == pytest.approx(79 * doc["mean_job_s"], rel=1e-3)

    text = status("--results", str(work / "results"), cwd=work).stdout
    assert "done 11, failed 1, stale 1, left 77" in text
    assert f"  {STALE}: engine.max_num_seqs" in text
    assert f"  {FAILED}: RuntimeError: engine start failed: CUDA out of memory" in text
    assert "rerun one with `snakemake <its path> --force`" in text


def test_status_of_a_run_not_started(tmp_path):
    (tmp_path / "results").mkdir()  # a results folder without this run (a missing folder is an error: test_errors)
    text = status("--results", str(tmp_path / "results")).stdout
    assert "done 0, failed 0, stale 0, left 90" in text
    assert "to go: 90 measurements, time unknown (nothing measured yet)" in text
