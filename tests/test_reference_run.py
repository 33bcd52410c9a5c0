"""The committed H200 reference run re-renders byte-identical tables and figures here, without a GPU."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import ROOT
from specsweep.captions import write_captions
from specsweep.config import load_study
from specsweep.figures import FIGURES, load_k_ref, render_all
from specsweep.tables import build_tables

#: committed runs: config, cells in the tables, what the run holds
RUNS = {
    # part 1 of the H200 run: repeat 1 of vanilla and ngram on all six workloads (12 measurements)
    "h200-smollm2": ("config/h200.yaml", 30),
    # R at scale: four Qwen2.5 shapes x 2 workloads x 3 ladder steps (issue 11)
    "h200-shapes": ("config/h200-shapes.yaml", 24),
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
    render_all(tmp_path / "tables", tmp_path / "figs", study.raw["headline_model"], study.run, k_ref)
    write_captions(tmp_path / "tables", study.raw["headline_model"], tmp_path / "figs" / "captions")
    committed = sorted(
        p.relative_to(ROOT / "figures" / run) for p in (ROOT / "figures" / run).rglob("*") if p.is_file()
    )
    assert len(committed) == 3 * len(FIGURES) + 1  # png + svg + caption per figure, the manifest
    for rel in committed:
        assert (tmp_path / "figs" / rel).read_bytes() == (ROOT / "figures" / run / rel).read_bytes(), rel
