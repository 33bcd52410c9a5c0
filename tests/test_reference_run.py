"""The committed H200 reference run re-renders byte-identical tables and figures here, without a GPU."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import ROOT
from specsweep.captions import write_captions
from specsweep.config import load_study
from specsweep.figures import FIGURES, load_k_ref, load_r_runs, render_all
from specsweep.tables import build_tables

#: committed runs: config, cells in the tables, what the run holds
RUNS = {
    # part 1 of the H200 run: repeat 1 of vanilla and ngram on all six workloads (12 measurements)
    "h200-smollm2": ("config/h200.yaml", 30),
    # R at scale: four Qwen2.5 shapes x 2 workloads x 3 ladder steps (issue 11)
    "h200-shapes": ("config/h200-shapes.yaml", 24),
    # R at scale on two GPUs: the 70B and 72B shapes at TP 2 (72B not yet measured); figure 8 adds h200-shapes
    "h200x2-shapes": ("config/h200x2-shapes.yaml", 12),
}


@pytest.mark.parametrize("run", sorted(RUNS))
def test_reference_run_rerenders_byte_identical(run, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    config, n_cells = RUNS[run]
    study = load_study(config)
    assert study.run == run
    summary = build_tables(study, Path("results"), tmp_path / "tables")
    assert summary["cells"] == n_cells and summary["mismatches"] == [] and summary["stale"] == []
    for f in (ROOT / "results" / run / "tables").iterdir():
        assert (tmp_path / "tables" / f.name).read_bytes() == f.read_bytes(), f.name
    k_ref = load_k_ref(study.raw, ROOT / "results" / run / "tables")
    r_runs = load_r_runs(study.raw, ROOT / "results" / run / "tables")
    render_all(tmp_path / "tables", tmp_path / "figs", study.raw["headline_model"], study.run, k_ref, r_runs)
    write_captions(tmp_path / "tables", study.raw["headline_model"], tmp_path / "figs" / "captions", r_runs=r_runs)
    committed = sorted(
        p.relative_to(ROOT / "figures" / run) for p in (ROOT / "figures" / run).rglob("*") if p.is_file()
    )
    assert len(committed) == 3 * len(FIGURES) + 1  # png + svg + caption per figure, the manifest
    for rel in committed:
        assert (tmp_path / "figs" / rel).read_bytes() == (ROOT / "figures" / run / rel).read_bytes(), rel


def test_figure_8_draws_r_of_both_shape_runs(tmp_path):
    """h200x2-shapes' figure 8 reads h200-shapes' R too (config r_at_scale_runs): every size once, each R
    from the run that measured it, and its notes name each run's conditions (TP, prompt tokens)."""
    from specsweep.errors import SpecsweepError
    from specsweep.figures import Tables, r_series

    study = load_study(ROOT / "config" / "h200x2-shapes.yaml")
    tables = ROOT / "results" / "h200x2-shapes" / "tables"
    others = load_r_runs(study.raw, tables)
    assert [d.run for d in others] == ["h200-shapes"]
    configs, workloads, series = r_series(Tables.load(tables, study.run), others)
    assert configs == ["ngram", "suffix"] and set(workloads) == {"code-t1", "code-greedy"}
    for pts in series.values():
        assert [(p.size, p.run) for p in pts] == [
            (0.5, "h200-shapes"),
            (1.5, "h200-shapes"),
            (7.0, "h200-shapes"),
            (32.0, "h200-shapes"),
            (70.0, "h200x2-shapes"),
        ]
    # a run named twice (here: itself as the other run) gives each model once
    _, _, again = r_series(others[0], others)
    assert all(len(pts) == 4 for pts in again.values())
    notes = json.loads((ROOT / "figures" / "h200x2-shapes" / "manifest.json").read_text())["figures"]
    notes = notes["fig8_r_at_scale"]["notes"]
    assert any("run h200x2-shapes" in n and "TP 2" in n for n in notes)
    assert any("run h200-shapes" in n and "TP 1" in n for n in notes)
    # a named run without tables is a one-line error naming it
    with pytest.raises(SpecsweepError, match="r_at_scale_runs: run 'nope' has no tables"):
        load_r_runs({"r_at_scale_runs": ["nope"]}, tables)
