"""Serve mode's configuration and server command line (fast; the real server runs in tests/test_serve_run.py)."""

from __future__ import annotations

import copy
import json

import pytest

from conftest import set_key
from specsweep import serve
from specsweep.config import build_study
from specsweep.engine import engine_identity, engine_key, engine_kwargs
from specsweep.errors import SpecsweepError
from specsweep.jsonio import sha256_obj

MODEL = "/models/smollm2"  # engine_kwargs only names it


def test_serve_mode_hashes_its_settings_and_leaves_offline_cells_alone(smoke_cfg):
    """A serve-mode step's cells hash their mode and the client's drive; the offline steps of the same config
    keep the settings (and hash, and engine key) they had before serve mode existed."""
    offline = build_study(copy.deepcopy(smoke_cfg))
    cfg = set_key(smoke_cfg, "ladder.ngram.mode", "serve")
    cfg = set_key(cfg, "ladder.vanilla-serve", {"gpu_memory_utilization": 0.9, "mode": "serve"})
    cfg["serve"] = {"baseline": "vanilla-serve", "request_rate": 2.5, "goodput": {"tpot_ms": 50}}
    cfg["groups"]["serve"] = {
        "models": ["smollm2-135m-instruct"],
        "workloads": ["code@b4"],
        "configs": ["vanilla-serve"],
    }
    study = build_study(cfg)
    ngram, vanilla = (
        study.cell("smollm2-135m-instruct", "code@b4", "ngram"),
        study.cell("smollm2-135m-instruct", "code@b4", "vanilla"),
    )
    s = study.cell_settings(ngram)
    assert s["mode"] == "serve" and s["serve"] == {"request_rate": 2.5, "goodput_ms": {"tpot_ms": 50}}
    assert "mode" not in study.cell_settings(vanilla)
    assert sha256_obj(study.cell_settings(vanilla)) == sha256_obj(offline.cell_settings(vanilla))
    assert engine_key(engine_identity(study, vanilla, MODEL, 1)) == engine_key(
        engine_identity(offline, vanilla, MODEL, 1)
    )
    assert engine_identity(study, ngram, MODEL, 1)["mode"] == "serve"
    # like with like: the serve step against the serve vanilla, the offline steps against `baseline`
    assert study.baseline_of("ngram") == "vanilla-serve" and study.baseline_of("suffix") == "vanilla"
    assert study.baselines == {"vanilla", "vanilla-serve"}


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ({"ladder.ngram.mode": "serve"}, "ladder.ngram: mode serve, but its baseline 'vanilla' is mode offline"),
        ({"mode": "serve", "ladder.vanilla.mode": "offline"}, "ladder.ngram: mode serve, but its baseline 'vanilla'"),
        ({"serve": {"baseline": "nope"}}, "serve.baseline: unknown ladder step 'nope'"),
        ({"serve": {"baseline": "vanilla-sync"}}, "serve.baseline: 'vanilla-sync' is an offline step"),
        ({"mode": "serve", "serve": {"baseline": "ngram"}}, "serve.baseline: 'ngram' is speculative"),
        ({"serve": {"request_rate": 0}}, "serve.request_rate"),
        ({"ladder.ngram.mode": "online"}, "ladder.ngram.mode"),
        ({"engine_warmup_prompts": -1}, "engine_warmup_prompts"),
    ],
)
def test_a_serve_step_is_compared_only_with_a_baseline_of_its_mode(smoke_cfg, edit, message):
    cfg = smoke_cfg
    for key, value in edit.items():
        cfg = set_key(cfg, key, value)
    with pytest.raises(SpecsweepError, match="^config: ") as err:
        build_study(cfg)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_run_in_serve_mode_needs_no_second_baseline(smoke_cfg):
    study = build_study(set_key(smoke_cfg, "mode", "serve"))
    assert {study.mode(s) for s in study.ladder} == {"serve"} and study.baselines == {"vanilla"}


def test_server_argv_is_the_engine_kwargs_on_loopback(smoke_cfg):
    """The server gets the in-process engine's arguments as flags (the speculative config as JSON, a false
    boolean as --no-x), and listens on 127.0.0.1 only."""
    study = build_study(set_key(smoke_cfg, "mode", "serve"))
    cell = study.cell("smollm2-135m-instruct", "code@b4", "ngram")
    kwargs = engine_kwargs(study, cell, MODEL)
    argv = serve.server_argv(kwargs, 8123)
    assert argv[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    flags = dict(zip(argv[3::2], argv[4::2], strict=False))
    assert argv[argv.index("--host") + 1] == "127.0.0.1" and argv[argv.index("--port") + 1] == "8123"
    assert argv.count("--host") == 1 and "0.0.0.0" not in argv
    spec = json.loads(argv[argv.index("--speculative-config") + 1])
    assert spec == study.ladder["ngram"].speculative
    assert "--no-trust-remote-code" in argv and "--disable-log-stats" not in argv
    assert argv[argv.index("--max-num-seqs") + 1] == str(kwargs["max_num_seqs"])
    assert flags  # every value flag is followed by its value
