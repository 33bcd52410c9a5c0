"""Config: schema defaults, the paper matrix (156 cells), and one-line errors naming the culprit."""

from __future__ import annotations

import copy

import pytest

from conftest import DELETE, set_key
from specsweep.config import Cell, build_study, check_gpu_budget
from specsweep.errors import SpecsweepError


def test_paper_matrix_is_156_cells(paper_cfg):
    study = build_study(paper_cfg)
    assert len(study.cells) == 156
    groups = [study.cell_groups[c] for c in study.cells]
    assert groups.count("large") == 96 and groups.count("small") == 60
    assert len(set(study.cells)) == 156
    assert {m.tp for m in study.models.values()} == {1, 4, 8}
    assert study.models["llama-3.3-70b-instruct"].tp == 8 and study.models["qwen2.5-32b-instruct"].tp == 4
    # models without a chat template are marked so (raw prompts)
    assert not study.models["opt-125m"].chat_template and not study.models["starcoder2-3b"].chat_template


def test_ladder_matches_the_article(paper_cfg):
    study = build_study(paper_cfg)
    lad = study.ladder
    assert lad["vanilla"].speculative is None and lad["vanilla"].gpu_memory_utilization == 0.90
    assert lad["ngram"].speculative == {
        "method": "ngram",
        "num_speculative_tokens": 7,
        "prompt_lookup_min": 2,
        "prompt_lookup_max": 5,
    }
    assert lad["suffix"].speculative == {"method": "suffix", "num_speculative_tokens": 32}
    assert lad["suffix"].gpu_memory_utilization == 0.80 and lad["suffix"].compilation is None
    assert lad["trident"].compilation == {"cudagraph_mode": "PIECEWISE"}
    assert study.engine["kv_cache_dtype"] == "fp8" and study.engine["max_model_len"] == 16384


def test_schema_fills_defaults(smoke_cfg):
    del smoke_cfg["warmup_prompts"]
    del smoke_cfg["sampling"]
    study = build_study(smoke_cfg)
    assert study.raw["warmup_prompts"] == 8
    assert study.raw["sampling"] == {"temperature": 0.0, "top_p": 1.0, "ignore_eos": False}
    assert study.models["smollm2-135m-instruct"].trust_remote_code is False


_set = set_key


_DELETE = DELETE

BAD = [
    ("groups.large.models", ["phi-3-medium-4k-instruct", "gpt-5"], "groups.large.models: unknown model 'gpt-5'"),
    ("groups.small.workloads", ["sonnet", "poetry"], "groups.small.workloads: unknown workload 'poetry'"),
    ("groups.small.steps", ["vanilla", "eagle"], "groups.small.steps: unknown ladder step 'eagle'"),
    ("groups.small.steps", ["vanilla", "vanilla"], "groups.small.steps: 'vanilla' listed twice"),
    ("models.1.name", "opt-125m", "duplicate model name 'opt-125m'"),
    ("models.6.tp", 3, "(qwen2.5-32b-instruct).tp: 3 is not a power of two"),
    ("ladder.suffix.gpu_memory_utilization", 1.5, "ladder.suffix.gpu_memory_utilization: must be in (0, 1]"),
    ("ladder.vanilla.gpu_memory_utilization", 0, "ladder.vanilla.gpu_memory_utilization: must be in (0, 1]"),
    (
        "ladder.ngram.speculative.num_speculative_tokens",
        0,
        "ladder.ngram.speculative.num_speculative_tokens: must be in [1, 1024], got 0",
    ),
    ("ladder.ngram.speculative.prompt_lookup_min", 6, "prompt_lookup_min (6) > prompt_lookup_max (5)"),
    # any method passes the config (vLLM's own SpeculativeConfig judges it, tests/test_speculative.py); a name
    # that could be no method's is refused here
    ("ladder.suffix.speculative.method", "no such", "ladder.suffix.speculative.method: 'no such' does not match"),
    (
        "ladder.ngram.speculative.suffix_decoding_max_tree_depth",
        64,
        "ladder.ngram.speculative.suffix_decoding_max_tree_depth: suffix_decoding_* apply to method suffix only",
    ),
    (
        "ladder.suffix.speculative.suffix_decoding_max_tree_depth",
        0,
        "ladder.suffix.speculative.suffix_decoding_max_tree_depth: must be in [1, 4096], got 0",
    ),
    (
        "ladder.suffix.speculative.suffix_decoding_min_token_prob",
        1.5,
        "ladder.suffix.speculative.suffix_decoding_min_token_prob: must be in [0, 1], got 1.5",
    ),
    ("workloads.code.num_prompts", -4, "workloads.code.num_prompts: must be in [1, 100000], got -4"),
    ("workloads.sonnet.max_tokens", 0, "workloads.sonnet.max_tokens: must be in [1, 1048576], got 0"),
    (
        "workloads.mix-ch.parts",
        {"code": 0.7, "sonnet": 0.2, "chat": 0.2},
        "workloads.mix-ch.parts: shares sum to 1.1, not 1",
    ),
    ("workloads.mix-sh.parts", {"sonnet": 0.7, "haiku": 0.3}, "workloads.mix-sh.parts.haiku: unknown workload 'haiku'"),
    ("headline_model", "gpt-5", "headline_model: unknown model 'gpt-5'"),
    ("engine.max_num_seqs", "many", "engine.max_num_seqs: 'many' is not of type 'integer'"),
    ("engine.speculative", {}, "engine: Additional properties are not allowed ('speculative' was unexpected)"),
    ("run", "a b;rm -rf /", "run: 'a b;rm -rf /' does not match"),
    (
        "ladder.trident.compilation.cudagraph_mode",
        "SOMETIMES",
        "ladder.trident.compilation.cudagraph_mode: 'SOMETIMES' is not one of",
    ),
    ("corpus", _DELETE, "'corpus' is a required property"),
    # concurrency: b requests in flight, each a positive integer that fits the engine and the workload
    ("workloads.code.concurrency", [1, 0], "workloads.code.concurrency[1]: must be in [1, 1000000], got 0"),
    ("workloads.code.concurrency", [-4], "workloads.code.concurrency[0]: must be in [1, 1000000], got -4"),
    ("workloads.code.concurrency", [1, 2.5], "workloads.code.concurrency[1]: must be an integer, got 2.5"),
    ("workloads.code.concurrency", ["8"], "workloads.code.concurrency[0]: '8' is not of type 'integer'"),
    ("workloads.code.concurrency", 8, "workloads.code.concurrency: 8 is not of type 'array'"),
    ("workloads.code.concurrency", [4, 4], "workloads.code.concurrency: [4, 4] has non-unique elements"),
    (
        "workloads.code.concurrency",
        [1, 300],
        "workloads.code.concurrency[1]: 300 requests in flight need at least 300 prompts, "
        "the workload has num_prompts 256",
    ),
    (
        "workloads.code.num_prompts",
        512,
        "workloads.code.concurrency[1]: 300 requests in flight exceed engine.max_num_seqs 256",
        {"workloads.code.concurrency": [1, 300]},
    ),
]


@pytest.mark.parametrize("case", BAD, ids=[b[0] + "=" + str(b[1])[:20] for b in BAD])
def test_bad_config_names_the_key(paper_cfg, case):
    key, value, message = case[:3]
    cfg = paper_cfg
    for other, v in (case[3] if len(case) > 3 else {}).items():  # a key set first, to make `key` a bad one
        cfg = _set(cfg, other, v)
    with pytest.raises(SpecsweepError) as err:
        build_study(_set(cfg, key, value))
    text = str(err.value)
    assert message in text
    assert "\n" not in text


def test_tp_above_granted_gpus(paper_cfg):
    study = build_study(paper_cfg)
    check_gpu_budget(study, 8)
    with pytest.raises(SpecsweepError, match=r"\(llama-3.3-70b-instruct\).tp: 8 exceeds the 4 GPU"):
        check_gpu_budget(study, 4)


def test_cell_listed_by_two_groups(paper_cfg):
    cfg = copy.deepcopy(paper_cfg)
    cfg["groups"]["extra"] = {"models": ["opt-125m"], "workloads": ["code"], "configs": ["ngram"]}
    with pytest.raises(SpecsweepError, match="groups.extra: cell opt-125m/code/ngram is also in group small"):
        build_study(cfg)


def test_group_steps_under_their_former_name_configs(paper_cfg):
    """A group names its ladder steps `steps`; `configs`, the former name, still reads; both is one error."""
    old = copy.deepcopy(paper_cfg)
    for g in old["groups"].values():
        g["configs"] = g.pop("steps")
    assert build_study(old).cells == build_study(copy.deepcopy(paper_cfg)).cells
    both = copy.deepcopy(paper_cfg)
    both["groups"]["small"]["configs"] = ["vanilla"]
    with pytest.raises(SpecsweepError, match=r"^config: groups.small: both steps and configs \(the former name"):
        build_study(both)


def test_concurrency_adds_cells_and_keeps_the_default_ones(paper_cfg):
    """`concurrency` adds the cells {workload}@b{b} beside the workload's own (all prompts at once), whose
    paths and settings hashes do not change; one engine (model, ladder step, repeat) serves every b."""
    from specsweep import paths
    from specsweep.engine import engine_identity
    from specsweep.jsonio import sha256_obj

    before = build_study(copy.deepcopy(paper_cfg))
    study = build_study(_set(paper_cfg, "workloads.code.concurrency", [1, 16, 256]))
    assert len(study.cells) == 156 + 3 * len([c for c in before.cells if c.workload == "code"])
    for cell in before.cells:
        assert sha256_obj(study.cell_settings(cell)) == sha256_obj(before.cell_settings(cell))
        assert "concurrency" not in study.cell_settings(cell)["workload"]
    at = study.cell("opt-125m", "code@b16", "ngram")
    assert (at.base_workload, at.concurrency) == ("code", 16)
    assert study.cell_settings(at)["workload"] == before.cell_settings(Cell("opt-125m", "code", "ngram"))[
        "workload"
    ] | {"concurrency": 16}
    assert study.cell_groups[at] == study.cell_groups[Cell("opt-125m", "code", "ngram")]
    # the engine's identity leaves b out: the article-point cell and every b share one engine
    ident = {engine_identity(study, study.cell("opt-125m", w, "ngram"), "m", 1)["kwargs"]["model"] for w in ["code"]}
    assert ident == {"m"}
    assert (
        len(
            {
                sha256_obj(engine_identity(study, study.cell("opt-125m", w, "ngram"), "m", 1))
                for w in ("code", "code@b1", "code@b16", "code@b256", "sonnet")
            }
        )
        == 1
    )
    # paths: the default cell's is unchanged, b's has its own, and both parse back
    key = paths.Key(study.run, "opt-125m", "code@b16", "ngram", 2)
    path = paths.measurement("results", key)
    assert path.as_posix() == f"results/{study.run}/cells/opt-125m/code@b16/ngram/r2.json"
    assert paths.parse(path)[1] == key
    assert paths.split_workload("code@b16") == ("code", 16) and paths.split_workload("code") == ("code", None)
    # the schedule keeps every b of an engine adjacent to its workload's own cell
    order = [c.workload for c, r in study.schedule() if (c.model, c.step, r) == ("opt-125m", "ngram", 1)]
    assert order[order.index("code") : order.index("code") + 4] == ["code", "code@b1", "code@b16", "code@b256"]


def test_a_group_can_take_one_concurrency_of_a_workload_alone(smoke_cfg):
    """`code@b1` in a group's workloads takes the cells of code at b = 1 only (not code's own, all prompts at
    once); the b must be one the workload lists, and a cell in two groups is still refused."""
    cfg = _set(smoke_cfg, "workloads.code.concurrency", [1, 4])
    cfg["groups"] = {"g": {"models": ["smollm2-135m-instruct"], "workloads": ["code@b1"], "steps": ["vanilla"]}}
    study = build_study(copy.deepcopy(cfg))
    assert [c.key for c in study.cells] == ["smollm2-135m-instruct/code@b1/vanilla"]
    cfg["groups"]["g"]["workloads"] = ["code@b4", "code@b1"]
    assert [c.workload for c in build_study(copy.deepcopy(cfg)).cells] == ["code@b4", "code@b1"]
    cfg["groups"]["g"]["workloads"] = ["code"]  # the workload itself: its own cell and every b
    assert [c.workload for c in build_study(copy.deepcopy(cfg)).cells] == ["code", "code@b1", "code@b4"]
    cfg["groups"]["g"]["workloads"] = ["code@b2"]
    with pytest.raises(SpecsweepError) as e:
        build_study(copy.deepcopy(cfg))
    assert str(e.value) == (
        "config: groups.g.workloads: 'code@b2': b = 2 is not in workloads.code.concurrency (listed: 1, 4)"
    )
    cfg["groups"]["g"]["workloads"] = ["sonnet@b1"]
    with pytest.raises(
        SpecsweepError, match=r"'sonnet@b1': b = 1 is not in workloads.sonnet.concurrency \(listed: none\)"
    ):
        build_study(copy.deepcopy(cfg))
    cfg["groups"] = {
        "g": {"models": ["smollm2-135m-instruct"], "workloads": ["code"], "steps": ["vanilla"]},
        "h": {"models": ["smollm2-135m-instruct"], "workloads": ["code@b4"], "steps": ["vanilla"]},
    }
    with pytest.raises(SpecsweepError, match="cell smollm2-135m-instruct/code@b4/vanilla is also in group g"):
        build_study(copy.deepcopy(cfg))
    # `code@all`: the cell of all prompts at once without code's b; beside `code@b4` in another group, no clash
    cfg["groups"]["g"]["workloads"] = ["code@all"]
    assert [c.key for c in build_study(copy.deepcopy(cfg)).cells] == [
        "smollm2-135m-instruct/code/vanilla",
        "smollm2-135m-instruct/code@b4/vanilla",
    ]
    cfg["groups"]["g"]["workloads"] = ["cod@all"]
    with pytest.raises(SpecsweepError, match=r"groups.g.workloads: unknown workload 'cod@all'"):
        build_study(copy.deepcopy(cfg))


def test_suffix_cache_after_warmup_is_hashed_only_where_it_changes_a_measurement(paper_cfg):
    """`suffix_cache_after_warmup`: `empty` (the default) is part of the suffix cells' settings only; `keep`
    (how runs were measured before the key existed) adds nothing, so those runs' settings hashes stay; any other
    value is refused by name."""
    from specsweep.jsonio import sha256_obj

    empty = build_study(copy.deepcopy(paper_cfg))
    keep = build_study(_set(paper_cfg, "suffix_cache_after_warmup", "keep"))
    for cell in empty.cells:
        method = empty.ladder[cell.step].method
        got = empty.cell_settings(cell).get("suffix_cache_after_warmup")
        assert got == ("empty" if method == "suffix" else None), cell
        assert "suffix_cache_after_warmup" not in keep.cell_settings(cell)
        same = sha256_obj(empty.cell_settings(cell)) == sha256_obj(keep.cell_settings(cell))
        assert same == (method != "suffix"), cell
    with pytest.raises(SpecsweepError, match="suffix_cache_after_warmup"):
        build_study(_set(paper_cfg, "suffix_cache_after_warmup", "drop"))


def test_engine_warmup_is_hashed_and_keyed_only_when_on(paper_cfg):
    """`engine_warmup_prompts`: 0 (the default) adds nothing to a cell's settings or its engine's key, so the
    committed runs' hashes and keys stay; on, every offline cell's settings and engine key carry it, and no
    served cell's (vLLM's benchmark client warms the server)."""
    from specsweep.engine import engine_identity, engine_key
    from specsweep.jsonio import sha256_obj

    off = build_study(copy.deepcopy(paper_cfg))
    on = build_study(_set(paper_cfg, "engine_warmup_prompts", 2))
    assert off.raw["engine_warmup_prompts"] == 0
    for cell in off.cells[:12]:
        assert "engine_warmup_prompts" not in off.cell_settings(cell)
        assert on.cell_settings(cell)["engine_warmup_prompts"] == 2
        assert sha256_obj(off.cell_settings(cell)) != sha256_obj(on.cell_settings(cell))
        assert "engine_warmup_prompts" not in engine_identity(off, cell, "m", 1)
        assert engine_key(engine_identity(off, cell, "m", 1)) != engine_key(engine_identity(on, cell, "m", 1))
    served = build_study(_set(_set(paper_cfg, "engine_warmup_prompts", 2), "mode", "serve"))
    assert all("engine_warmup_prompts" not in served.cell_settings(c) for c in served.cells[:12])
