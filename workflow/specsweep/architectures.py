"""Model architectures without weights: `weights: dummy` model entries.

An architecture is `config/architectures/<name>/config.json`, written from a published model's dimensions
(see config/architectures/README.md for the sources). Its vocab_size is SmolLM2's (49152), because the
tokenizer that ships here is SmolLM2-135M-Instruct's; the real vocabulary is kept in
`specsweep_real_vocab_size`. A dummy model folder is that config.json plus SmolLM2's tokenizer files, and
vLLM loads it with `load_format="dummy"` (random weights of the real shape, nothing downloaded).

Dummy weights say nothing about acceptance (K, alpha): they measure shapes, memory and step times only.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

from .errors import SpecsweepError
from .jsonio import check_replaceable, read_json

ARCH_ROOT = Path(__file__).resolve().parents[2] / "config" / "architectures"
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
REQUIRED_KEYS = (
    "architectures",
    "model_type",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "vocab_size",
    "max_position_embeddings",
)
# Files copied from the tokenizer source when present; the first group must be there.
TOKENIZER_REQUIRED = ("tokenizer_config.json", "tokenizer.json")
TOKENIZER_OPTIONAL = (
    "special_tokens_map.json",
    "added_tokens.json",
    "chat_template.jinja",
    "chat_template.json",
    "generation_config.json",
)
PROVENANCE_NAME = "specsweep-model.json"
# The tokenizer files again, in a folder without the architecture's config.json: transformers picks a
# tokenizer class from config.json's model_type for some types (qwen2 -> Qwen2Tokenizer, phi3, ...), which
# splits text unlike the source tokenizer (the code workload: 504 tokens a prompt against SmolLM2's 480).
# Engines of dummy models load their tokenizer from here (engine.engine_kwargs).
TOKENIZER_SUBDIR = "tokenizer"
DUMMY = "dummy"


def _file_sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def known_architectures(root: Path | None = None) -> list[str]:
    root = Path(root) if root else ARCH_ROOT
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if (p / "config.json").is_file())


def architecture_path(name: str, root: Path | None = None) -> Path:
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise SpecsweepError(f"architecture {name!r}: not a valid name (letters, digits, '.', '_', '-')")
    return (Path(root) if root else ARCH_ROOT) / name / "config.json"


def load_architecture(name: str, root: Path | None = None) -> dict[str, Any]:
    """The architecture's config.json as a dict; a missing, broken or incomplete file is a one-line error."""
    path = architecture_path(name, root)
    if not path.is_file():
        known = ", ".join(known_architectures(root)) or "none"
        raise SpecsweepError(f"architecture '{name}': {path} not found (known: {known})")
    cfg = read_json(path, f"architecture '{name}':")
    if not isinstance(cfg, dict):
        raise SpecsweepError(f"architecture '{name}': {path} is not a JSON object")
    missing = [k for k in REQUIRED_KEYS if k not in cfg]
    if missing:
        raise SpecsweepError(f"architecture '{name}': {path} lacks {', '.join(missing)}")
    if not (isinstance(cfg["architectures"], list) and cfg["architectures"]):
        raise SpecsweepError(f"architecture '{name}': {path}: architectures must be a non-empty list")
    return cfg


def is_dummy(spec: Any) -> bool:
    return getattr(spec, "weights", "real") == DUMMY


def tokenizer_path(spec: Any, model: str) -> str:
    """Where a model entry's tokenizer loads from: a dummy folder's tokenizer/ (see TOKENIZER_SUBDIR), any
    other model's own folder or id."""
    return str(Path(model) / TOKENIZER_SUBDIR) if is_dummy(spec) else model


def engine_overrides(spec: Any) -> dict[str, Any]:
    """Extra vllm.LLM arguments a model entry implies: random weights of the real shape for dummy entries."""
    return {"load_format": DUMMY} if is_dummy(spec) else {}


# ------------------------------------------------------------------------------------- shape arithmetic


def _kv_heads(cfg: dict[str, Any]) -> int:
    return int(cfg.get("num_key_value_heads") or cfg["num_attention_heads"])


def _intermediate(cfg: dict[str, Any]) -> int:
    return int(cfg["ffn_dim"] if cfg["model_type"] == "opt" else cfg["intermediate_size"])


def head_dim(cfg: dict[str, Any]) -> int:
    return int(cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"])


def param_count(cfg: dict[str, Any], vocab_size: int | None = None) -> int:
    """Parameters of the architecture (embeddings, attention with GQA, MLP, norms, biases, LM head).

    vocab_size overrides the config's (pass the real vocabulary to compare with the published size)."""
    mt = cfg["model_type"]
    h, n_layers = int(cfg["hidden_size"]), int(cfg["num_hidden_layers"])
    heads, kv, hd = int(cfg["num_attention_heads"]), _kv_heads(cfg), head_dim(cfg)
    inter = _intermediate(cfg)
    vocab = int(vocab_size if vocab_size is not None else cfg["vocab_size"])
    tied = bool(cfg.get("tie_word_embeddings", True))
    q, k = heads * hd, kv * hd
    if mt in ("llama", "qwen2", "phi3", "mistral"):
        attn = h * q + 2 * h * k + q * h
        if mt == "qwen2" or cfg.get("attention_bias"):
            attn += q + 2 * k + (h if cfg.get("attention_bias") else 0)
        mlp = 3 * h * inter + (2 * inter + h if cfg.get("mlp_bias") else 0)
        per_layer = attn + mlp + 2 * h  # two RMSNorm weights
        body = vocab * h + n_layers * per_layer + h  # embeddings, layers, final norm
    elif mt == "starcoder2":
        bias = bool(cfg.get("use_bias", True))
        attn = h * q + 2 * h * k + q * h + ((q + 2 * k + h) if bias else 0)
        mlp = 2 * h * inter + ((inter + h) if bias else 0)
        per_layer = attn + mlp + 2 * 2 * h  # two LayerNorms (weight and bias)
        body = vocab * h + n_layers * per_layer + 2 * h
    elif mt == "opt":
        proj = int(cfg.get("word_embed_proj_dim") or h)
        bias = bool(cfg.get("enable_bias", True))
        attn = 4 * h * h + (4 * h if bias else 0)
        mlp = 2 * h * inter + ((inter + h) if bias else 0)
        per_layer = attn + mlp + 2 * 2 * h
        positions = (int(cfg["max_position_embeddings"]) + 2) * h  # OPT's learned positions are offset by 2
        project = 2 * proj * h if proj != h else 0
        final_ln = 2 * h if cfg.get("do_layer_norm_before", True) and not cfg.get("_remove_final_layer_norm") else 0
        body = vocab * proj + positions + project + n_layers * per_layer + final_ln
        h = proj  # the LM head maps word_embed_proj_dim -> vocab
    else:
        raise SpecsweepError(
            f"architecture model_type '{mt}': no parameter formula (known: llama, qwen2, phi3, "
            "mistral, starcoder2, opt)"
        )
    return body + (0 if tied else vocab * h)


def tp_problems(cfg: dict[str, Any], tp: int) -> list[str]:
    """Why tensor parallelism of size tp cannot shard this architecture (empty: it can).

    vLLM needs the attention heads divisible by tp; KV heads are split (kv % tp == 0 when tp < kv) or
    replicated (tp % kv == 0 when tp >= kv; vLLM's QKVParallelLinear asserts both through `divide`, after its
    config check, which only looks at the attention heads, has passed); the MLP's intermediate size is split
    evenly."""
    heads, kv, inter = int(cfg["num_attention_heads"]), _kv_heads(cfg), _intermediate(cfg)
    out = []
    if heads % tp:
        out.append(f"num_attention_heads {heads} is not divisible by tp {tp}")
    if kv % tp and tp % kv:
        out.append(f"num_key_value_heads {kv} neither divides nor is divisible by tp {tp}")
    if inter % tp:
        out.append(f"intermediate size {inter} is not divisible by tp {tp}")
    return out


# ------------------------------------------------------------------------------------ the model folder


def _tokenizer_vocab_size(tokenizer_json: Path) -> int:
    """Highest token id + 1 of a tokenizers-library tokenizer.json (base vocabulary and added tokens)."""
    doc = read_json(tokenizer_json, "tokenizer file")
    ids = [int(t["id"]) for t in doc.get("added_tokens") or []]
    vocab = (doc.get("model") or {}).get("vocab")
    if isinstance(vocab, dict):
        ids.extend(int(i) for i in vocab.values())
    elif isinstance(vocab, list):  # unigram: [[piece, score], ...]
        ids.append(len(vocab) - 1)
    return max(ids) + 1 if ids else 0


def dummy_model_dir(arch_name: str, tokenizer_src: Path, out: Path, root: Path | None = None) -> Path:
    """Write out/ = the architecture's config.json + the tokenizer files of tokenizer_src, as one atomic rename.

    No weight file is written: vLLM fills the weights at random (load_format="dummy")."""
    cfg_path = architecture_path(arch_name, root)
    cfg = load_architecture(arch_name, root)
    src, out = Path(tokenizer_src), Path(out)
    if not src.is_dir():
        raise SpecsweepError(f"tokenizer source {src}: does not exist or is not a directory")
    missing = [f for f in TOKENIZER_REQUIRED if not (src / f).is_file()]
    if missing:
        raise SpecsweepError(f"tokenizer source {src}: lacks {', '.join(missing)}")
    tok_vocab = _tokenizer_vocab_size(src / "tokenizer.json")
    if tok_vocab > int(cfg["vocab_size"]):
        raise SpecsweepError(
            f"architecture '{arch_name}': vocab_size {cfg['vocab_size']} is smaller than the tokenizer's "
            f"{tok_vocab} tokens ({src})"
        )
    files = [f for f in TOKENIZER_REQUIRED + TOKENIZER_OPTIONAL if (src / f).is_file()]
    check_replaceable(out, "model")  # a mistyped --out is refused, never swapped out and removed
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    old = None
    try:
        shutil.copyfile(cfg_path, tmp / "config.json")
        (tmp / TOKENIZER_SUBDIR).mkdir()
        for f in files:
            shutil.copyfile(src / f, tmp / f)
            shutil.copyfile(src / f, tmp / TOKENIZER_SUBDIR / f)
        provenance = {
            "weights": DUMMY,
            "architecture": arch_name,
            "architecture_config_sha256": _file_sha256(cfg_path),
            "shape_of": cfg.get("specsweep_shape_of"),
            "real_vocab_size": cfg.get("specsweep_real_vocab_size"),
            "tokenizer_from": str(src),
            "tokenizer_files": {f: _file_sha256(src / f) for f in files},
            "tokenizer_subdir": TOKENIZER_SUBDIR,
            "note": "no weight files: vLLM loads this folder with load_format='dummy' (random weights)",
        }
        (tmp / PROVENANCE_NAME).write_text(json.dumps(provenance, indent=2, sort_keys=True) + "\n")
        for p in [*tmp.iterdir(), *(tmp / TOKENIZER_SUBDIR).iterdir()]:
            os.chmod(p, 0o755 if p.is_dir() else 0o644)
        os.chmod(tmp, 0o755)
        if out.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old.", dir=out.parent))
            os.replace(out, old / out.name)
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    return out
