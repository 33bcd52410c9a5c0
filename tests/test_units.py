"""Fast unit tests of the pure functions, on inputs with known answers (no vLLM, no Snakemake)."""

from __future__ import annotations

import os
from types import SimpleNamespace

import numpy as np
import pytest
import yaml

from conftest import ROOT
from specsweep import claims, metrics, paths, stats, tables
from specsweep.config import build_study
from specsweep.errors import SpecsweepError

# ------------------------------------------------------------------------------------------------ stats


def test_median_and_cv_known_answers():
    assert stats.median([3.0, 1.0, 2.0]) == 2.0
    assert stats.median([1.0, None, 3.0]) == 2.0  # None is not a value
    assert stats.median([]) is None
    assert stats.cv([10.0]) is None  # one value has no spread
    assert stats.cv([9.0, 11.0]) == pytest.approx(np.std([9, 11], ddof=1) / 10.0)


def test_interval_over_engine_starts():
    assert stats.cell_ci([5.0]) == (None, None)  # one engine start: no interval
    assert stats.cell_ci([4.0, 4.0, 4.0]) == (4.0, 4.0)  # no spread, no width
    lo, hi = stats.cell_ci([1.0, 2.0, 3.0, 4.0, 100.0])
    assert lo < 1.0 < stats.median([1.0, 2.0, 3.0, 4.0, 100.0]) < hi  # an outlier widens it past the smallest
    assert stats.cell_ci([1.0, 2.0, 3.0]) == stats.cell_ci([1.0, 2.0, 3.0])  # deterministic


def test_ratio_of_geometric_means_and_verdicts():
    same = [10.0, 11.0, 9.0]
    point, lo, hi = stats.ratio_ci(same, same)
    assert point == 1.0 and lo < 1.0 < hi
    assert stats.verdict(point, lo, hi) == "undecided"
    point, lo, hi = stats.ratio_ci([20.0, 21.0, 19.0], same)
    assert point == pytest.approx(stats.geomean([20.0, 21.0, 19.0]) / stats.geomean(same)) and lo > 1.0
    assert stats.verdict(point, lo, hi) == "faster"
    point, lo, hi = stats.ratio_ci([5.0, 5.5, 4.5], same)
    assert hi < 1.0 and stats.verdict(point, lo, hi) == "slower"
    assert stats.ratio_ci([2.0], [1.0]) == (2.0, None, None)
    assert stats.verdict(2.0, None, None) == "undecided (n<2)"
    assert stats.verdict(None, None, None) == "missing"
    assert stats.geomean([1.0, 4.0]) == pytest.approx(2.0)


# ------------------------------------------------------------------------------------------------ paths


def test_paths_round_trip_and_refusals():
    key = paths.Key("paper", "qwen2.5-7b-instruct", "mix-ch", "trident", 3)
    path = paths.measurement("results", key)
    assert str(path) == "results/paper/cells/qwen2.5-7b-instruct/mix-ch/trident/r3.json"
    assert paths.parse(path) == (paths.Path("results"), key)
    assert "failures" in str(paths.failure("results", key)) and "archive" in str(paths.archive_dir("results", key))
    for bad in ("results/paper/cells/m/w/c.json", "results/paper/cells/m/w/c/r0.json", "r1.json"):
        with pytest.raises(SpecsweepError, match="expected .../{run}/cells/"):
            paths.parse(bad)


# ------------------------------------------------------------------------------------------------ metrics


KINDS = {k: type(k, (SimpleNamespace,), {}) for k in ("Counter", "Vector", "Histogram")}  # vLLM's metric types


def _m(kind: str, name: str, **kw):
    return KINDS[kind](name=name, **kw)


def test_metric_deltas_k_and_alpha():
    def snap(drafts, dtok, acc, pos, steps):
        return metrics.snapshot(
            [
                _m("Counter", "vllm:spec_decode_num_drafts", value=drafts),
                _m("Counter", "vllm:spec_decode_num_draft_tokens", value=dtok),
                _m("Counter", "vllm:spec_decode_num_accepted_tokens", value=acc),
                _m("Vector", "vllm:spec_decode_num_accepted_tokens_per_pos", values=pos),
                _m("Histogram", "vllm:iteration_tokens_total", count=steps, sum=10.0 * steps),
            ]
        )

    d = metrics.delta(snap(10, 70, 20, [10, 6, 4], 5), snap(30, 210, 60, [30, 18, 12], 25))
    assert d["steps"] == 20 and d["per_pos"] == [20, 12, 8]
    s = metrics.spec_summary(d)
    assert s["drafts"] == 20 and s["accepted"] == 40 and s["draft_tokens"] == 140
    assert s["K"] == pytest.approx(1 + 40 / 20) and s["alpha"] == pytest.approx(40 / 140)


# ------------------------------------------------------------------------------------------------ studies
# (the claims' rules are tested in tests/test_claims.py)


def _study(**over):
    cfg = yaml.safe_load((ROOT / "config/smoke.yaml").read_text())
    cfg.update(over)
    return build_study(cfg)


def _requests(k_per_prompt: list[float], steps: int = 20) -> dict:
    """A cell JSON's `requests` block: prompt i has `steps` decode steps of k_per_prompt[i] tokens each."""
    return {
        "output_tokens": [1 + round(k * steps) for k in k_per_prompt],
        "gen_steps": [1 + steps for _ in k_per_prompt],
    }


def test_k_interval_over_prompts_from_requests():
    """K's interval comes from the cells' per-request data (a cluster bootstrap over prompts), carried onto the
    counters' K - 1 and alpha; cells without it get no interval, never a zero-width one."""
    ks = [1.0 + 0.5 * (i % 5) for i in range(30)]  # per prompt 1 to 3 tokens per decode step, mean 2
    got = tables.prompt_interval(2.2, 0.2, [_requests(ks), _requests(ks)], "m/code/ngram")
    point, lo, hi, prompts = stats.prompt_bootstrap(
        [_requests(ks)["output_tokens"]] * 2, [_requests(ks)["gen_steps"]] * 2
    )
    assert got["K_prompts"] == prompts == 30 and point == pytest.approx(2.0)
    assert got["K_lo"] == pytest.approx(1 + 1.2 * (lo - 1)) and got["K_hi"] == pytest.approx(1 + 1.2 * (hi - 1))
    assert got["alpha_lo"] == pytest.approx(0.2 * (lo - 1)) and got["K_lo"] < 2.2 < got["K_hi"]
    none = dict.fromkeys(("K_lo", "K_hi", "alpha_lo", "alpha_hi", "K_prompts", "K_same_prompts"))
    assert tables.prompt_interval(2.2, 0.2, [None, None], "m/code/ngram") == none  # committed cells: no requests
    assert tables.prompt_interval(2.2, 0.2, [_requests(ks), None], "m/code/ngram") == none
    with pytest.raises(SpecsweepError, match="cell m/code/ngram: requests: every repeat must list the same"):
        tables.prompt_interval(2.2, 0.2, [_requests(ks), _requests(ks[:-1])], "m/code/ngram")
    # C7 compares K intervals over prompts: undecided (no per-prompt data) without them (a GPU run: a CPU run
    # decides no claim)
    study = _study(device="gpu")
    cfg = next(n for n, st in study.ladder.items() if st.method == "ngram")
    row = {
        "model": "m",
        "config": cfg,
        "n": 3,
        "n_starts": 3,
        "repeats": 3,
        "K_median": 3.0,
        "K_lo": None,
        "K_hi": None,
    }
    crow = [row | {"workload": "chat"}, row | {"workload": "sonnet", "K_median": 2.0}]
    c7 = {c["id"]: c for c in claims.decide(study, crow, [], [])}["C7"]
    assert c7["verdict"] == "undecided (no per-prompt data)" and "no per-prompt data" in c7["evidence"]
    crow = [crow[0] | {"K_lo": 2.8, "K_hi": 3.2}, crow[1] | {"K_lo": 1.9, "K_hi": 2.1}]
    assert {c["id"]: c for c in claims.decide(study, crow, [], [])}["C7"]["verdict"] == "confirmed"


# ------------------------------------------------------------------------------------------------ tables


def test_stale_keys_and_levers():
    doc = {"settings": {"engine": {"max_num_seqs": 16, "seed": 0}, "sampling": {"temperature": 0.0}}}
    cur = {"engine": {"max_num_seqs": 4, "seed": 0}, "sampling": {"temperature": 0.0}, "env": {}}
    assert tables.stale_keys(doc, cur) == ["engine.max_num_seqs", "env"]
    step = {"settings": {"ladder": {"engine": {"async_scheduling": False}, "env": {"VLLM_USE_V2_MODEL_RUNNER": "0"}}}}
    assert tables._levers(step) == ({"async_scheduling"}, {"VLLM_USE_V2_MODEL_RUNNER"})


def _runs(keys: list) -> list:
    """The runs of equal consecutive keys, one key each."""
    return [k for i, k in enumerate(keys) if i == 0 or keys[i - 1] != k]


def test_schedule_keeps_engines_adjacent_and_interleaves():
    study = _study(repeats=2)
    order = study.schedule()
    assert len(order) == len(study.cells) * 2
    engines = _runs([(c.model, c.step, r) for c, r in order])
    assert len(engines) == len(set(engines)) == len(study.engine_order())  # each engine's cells one contiguous run
    assert engines == study.engine_order()
    first = {r: next(c.step for c, rr in order if rr == r) for r in (1, 2)}
    assert first[1] != first[2]


def test_schedule_rounds_are_a_seeded_latin_square():
    """Round r holds repeat r of every ladder step, before any step's repeat r + 1; a model's steps are a seeded
    permutation rotated by one place per round, so over as many rounds as steps each step takes each place of
    the round once. The seed changes the permutation, never the rounds; the same seed gives the same order."""
    cfg = yaml.safe_load((ROOT / "config/config.yaml").read_text())  # 9 models, 4 ladder steps
    study = build_study(dict(cfg, repeats=4))
    order = study.engine_order()
    models, steps = list(study.models), ["vanilla", "ngram", "suffix", "trident"]
    assert len(order) == len(set(order)) == len(models) * len(steps) * 4
    per_round = len(models) * len(steps)
    for r in range(1, 5):
        block = order[(r - 1) * per_round : r * per_round]
        assert {e[2] for e in block} == {r}  # rounds in order, none mixed
        assert [m for m, _, _ in block[:: len(steps)]] == models  # models in the config's order
    for model in models:
        rounds = [[s for m, s, rr in order if m == model and rr == r] for r in range(1, 5)]
        assert all(sorted(rnd) == sorted(steps) for rnd in rounds)
        assert all(rounds[r] == rounds[0][r:] + rounds[0][:r] for r in range(4))  # rotated one place per round
        for place in range(4):
            assert {rnd[place] for rnd in rounds} == set(steps)  # every step in every place once
    assert build_study(dict(cfg, repeats=4)).engine_order() == order  # deterministic (no hash randomisation)
    # the config as the jobs read it (keys sorted) gives the same order
    resorted = dict(cfg, repeats=4, ladder=dict(sorted(cfg["ladder"].items(), reverse=True)))
    assert build_study(resorted).engine_order() == order
    firsts = {tuple(build_study(dict(cfg, repeats=4, schedule_seed=seed)).engine_order()[:4]) for seed in range(8)}
    assert len(firsts) > 1  # the seed moves the order


def test_schedule_record_of_each_measurement():
    """Every measurement records its engine's place: the cells of one engine share it, places run 1..of."""
    study = _study(repeats=3)
    assert study.raw["schedule_seed"] == 0
    recs = [study.schedule_record(c, r) for c, r in study.schedule()]
    # 3 steps x 3 repeats of SmolLM2 and 2 x 3 of Gemma: 15 engines
    assert {(rec["seed"], rec["of"], rec["order"]) for rec in recs} == {(0, 15, "interleaved")}
    assert _runs([rec["position"] for rec in recs]) == list(range(1, 16))
    # the cheap mode: one engine per (model, step), its repeats passes on it, blocked
    demo = yaml.safe_load((ROOT / "config/smoke.yaml").read_text())["groups"]["demo"]  # SmolLM2's cells alone
    shared = _study(repeats=3, engine_per_repeat=False, groups={"demo": demo})
    recs = [shared.schedule_record(c, r) for c, r in shared.schedule()]
    assert {(rec["of"], rec["order"]) for rec in recs} == {(3, "blocked")}
    assert _runs([rec["position"] for rec in recs]) == [1, 2, 3]
    k = len(shared.cells) // 3  # the cells one engine (one of the three steps) measures, each repeat in turn
    assert (
        len(recs) == 3 * len(shared.cells) and [r for _, r in shared.schedule()[: 3 * k]] == [1] * k + [2] * k + [3] * k
    )


def test_shared_engine_repeats_and_per_workload_temperature():
    """engine_per_repeat: false puts every repeat of a (model, ladder step) on one engine, back to back; a
    workload's temperature overrides the study's for its cells only, and enters their settings hash."""
    from specsweep.engine import engine_identity, engine_key
    from specsweep.jsonio import sha256_obj

    study = build_study(yaml.safe_load((ROOT / "results/h200-shapes/config.yaml").read_text()))
    order = study.schedule()
    assert len(order) == len(study.cells) * study.repeats == 72
    keys = [engine_key(engine_identity(study, c, "/m", r)) for c, r in order]
    runs = [k for i, k in enumerate(keys) if i == 0 or keys[i - 1] != k]
    assert len(runs) == len(set(runs)) == 12  # 4 models x 3 ladder steps, each engine one contiguous run
    assert [r for c, r in order[:6]] == [1, 1, 2, 2, 3, 3]
    t1, greedy = (study.cell("qwen2.5-7b-instruct", w, "ngram") for w in ("code-t1", "code-greedy"))
    assert study.cell_sampling(t1)["temperature"] == 1.0 and study.cell_sampling(greedy)["temperature"] == 0.0
    assert study.cell_settings(greedy)["sampling"]["ignore_eos"] is True
    assert sha256_obj(study.cell_settings(t1)) != sha256_obj(study.cell_settings(greedy))
    # the default: one engine per repeat
    smoke = _study(repeats=2)
    c = smoke.cells[0]
    assert engine_key(engine_identity(smoke, c, "/m", 1)) != engine_key(engine_identity(smoke, c, "/m", 2))


def test_model_max_model_len_overrides_the_engine():
    cfg = yaml.safe_load((ROOT / "config/smoke.yaml").read_text())
    cfg["models"][0]["max_model_len"] = 2048
    study = build_study(cfg)
    assert study.cell_settings(study.cells[0])["engine"]["max_model_len"] == 2048
    cfg["models"][0]["max_model_len"] = 0
    with pytest.raises(SpecsweepError, match="max_model_len"):
        build_study(cfg)


def test_model_quantization_reaches_vllm_and_spares_earlier_cells():
    """models[].quantization goes to LLM(quantization=...) and into the engine's identity; a model without it
    keeps the settings (and so the config_sha256) its cells were measured with; a bad name is one line."""
    from specsweep.engine import engine_identity, engine_key, engine_kwargs

    cfg = yaml.safe_load((ROOT / "results/h200-shapes/config.yaml").read_text())
    plain = build_study(cfg)
    c = plain.cell("qwen2.5-32b-instruct", "code-t1", "ngram")
    assert "quantization" not in plain.cell_settings(c)["model"]
    assert "quantization" not in plain.cell_settings(c)["engine"]
    assert "quantization" not in engine_kwargs(plain, c, "/m")
    cfg["models"][2]["quantization"] = "fp8"
    fp8 = build_study(cfg)
    assert engine_kwargs(fp8, c, "/m")["quantization"] == "fp8"
    assert fp8.cell_settings(c)["model"]["quantization"] == "fp8"
    assert engine_key(engine_identity(fp8, c, "/m", 1)) != engine_key(engine_identity(plain, c, "/m", 1))
    cfg["models"][2]["quantization"] = "FP8; rm -rf"
    with pytest.raises(SpecsweepError, match="quantization"):
        build_study(cfg)


def test_suffix_drafter_settings_reach_vllm_and_the_replay():
    """A ladder step's suffix_decoding_* keys (vLLM's defaults cap a suffix draft at 12 tokens) go to
    LLM(speculative_config=...) as they are, are fields of the installed vLLM's SpeculativeConfig, change the
    cell's settings (so the step is another engine) and are what the replay of its cells drafts with."""
    import dataclasses

    from vllm.config import SpeculativeConfig

    from specsweep.engine import engine_identity, engine_key, engine_kwargs
    from specsweep.replay import Drafter

    cfg = yaml.safe_load((ROOT / "results/h200-reference/config.yaml").read_text())
    deep = {"suffix_decoding_max_tree_depth": 64, "suffix_decoding_max_spec_factor": 2.0}
    cfg["ladder"]["suffix-deep"] = {
        **cfg["ladder"]["suffix"],
        "speculative": {**cfg["ladder"]["suffix"]["speculative"], **deep},
    }
    cfg["groups"]["controls"]["steps"].append("suffix-deep")
    study = build_study(cfg)
    c, base = (
        study.cell("smollm2-135m-instruct", "code", "suffix-deep"),
        study.cell("smollm2-135m-instruct", "code", "suffix"),
    )
    kw = engine_kwargs(study, c, "/m")["speculative_config"]
    assert kw == {"method": "suffix", "num_speculative_tokens": 32, **deep}
    assert set(deep) <= {f.name for f in dataclasses.fields(SpeculativeConfig)}
    assert engine_key(engine_identity(study, c, "/m", 1)) != engine_key(engine_identity(study, base, "/m", 1))
    d = Drafter.from_speculative(study.cell_settings(c)["ladder"]["speculative"])
    assert (d.suffix_decoding_max_tree_depth, d.suffix_decoding_max_spec_factor) == (64, 2.0)
    assert (
        Drafter.from_speculative(study.cell_settings(base)["ladder"]["speculative"]).suffix_decoding_max_tree_depth
        == 24
    )


def test_code_hash_names_the_code_not_the_checkout(tmp_path):
    """provenance.code_state hashes the pipeline's files by path and content: a copy of the tree gives the same
    hash (no .git needed), an edit to one rule or module another, and `specsweep code-hash` prints it."""
    import shutil
    import subprocess
    import sys

    from specsweep import provenance

    copy = tmp_path / "copy"
    for pattern in provenance.CODE_GLOBS:
        for p in ROOT.glob(pattern):
            (copy / p.relative_to(ROOT)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(p, copy / p.relative_to(ROOT))
    here = provenance.code_state(ROOT)
    assert provenance.code_state(copy) == here and here["files"] > 30
    out = subprocess.run(
        [sys.executable, "-m", "specsweep.cli", "code-hash", "--root", str(copy)],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(ROOT / "workflow")},
    )
    assert out.stdout.strip() == here["sha256"]
    rule = copy / "workflow/rules/cells.smk"
    rule.write_text(rule.read_text() + "\n# an edit\n")
    assert provenance.code_state(copy)["sha256"] != here["sha256"]


def test_every_subcommand_reads_a_typed_record_of_exactly_its_options():
    """Each subcommand's function takes a frozen record (specsweep.cliargs) whose fields are exactly the
    subcommand's options, argparse's dest names: an option added to the parser without its field (or a field
    without its option) fails here, not as an AttributeError in the one command that reads it."""
    import argparse
    import dataclasses

    from specsweep import cli, cliargs

    p = cli.parser()
    (sub,) = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
    assert len(sub.choices) == 26
    for name, sp in sub.choices.items():
        record = sp.get_default("func").record
        assert issubclass(record, cliargs.Args) and record.__dataclass_params__.frozen, name
        assert {f.name for f in dataclasses.fields(record)} == {a.dest for a in sp._actions if a.dest != "help"}, name
    ns = p.parse_args(["tables", "--config", "c.yaml", "--out", "o", "--allow-stale"])
    args = ns.func.record.of(ns)
    assert args == cliargs.TablesArgs(
        config="c.yaml", set=None, results="results", out="o", allow_mismatch=False, allow_stale=True
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        args.out = "elsewhere"


@pytest.mark.parametrize(
    "row, columns",
    [
        (tables.MeasurementRow, tables.MEASUREMENT_COLUMNS),
        (tables.CellRow, tables.CELL_COLUMNS),
        (tables.SpeedupRow, tables.SPEEDUP_COLUMNS),
    ],
)
def test_typed_rows_are_their_tables_columns(row, columns):
    """The typed rows (tables.schema) name every column of their table in its order, each with the Python type of
    its Arrow type (the `_` keys after them are not columns): a column added to a schema without its typed key,
    or typed otherwise, fails here."""
    import typing

    import pyarrow as pa

    hints = typing.get_type_hints(row)
    assert [k for k in hints if not k.startswith("_")] == [n for n, _ in columns]
    arrow = {float: pa.float64(), int: pa.int64(), str: pa.string(), bool: pa.bool_(), list[int]: pa.list_(pa.int64())}
    for name, dtype in columns:
        (python,) = [t for t in typing.get_args(hints[name]) or (hints[name],) if t is not type(None)]
        assert arrow[python] == dtype, name
