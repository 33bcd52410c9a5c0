"""The committed H200 reference run re-renders byte-identical tables and figures here, without a GPU."""

from __future__ import annotations

from pathlib import Path

from conftest import ROOT
from specsweep.captions import write_captions
from specsweep.config import load_study
from specsweep.figures import render_all
from specsweep.tables import build_tables


def test_h200_reference_rerenders_byte_identical(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    study = load_study("config/h200.yaml")
    summary = build_tables(study, Path("results"), tmp_path / "tables")
    # part 1 of the H200 run: repeat 1 of vanilla and ngram on all six workloads (12 measurements)
    assert summary["cells"] == 30 and summary["mismatches"] == [] and summary["stale"] == []
    for f in (ROOT / "results/h200-smollm2/tables").iterdir():
        assert (tmp_path / "tables" / f.name).read_bytes() == f.read_bytes(), f.name
    render_all(tmp_path / "tables", tmp_path / "figs", study.raw["headline_model"], study.run)
    write_captions(tmp_path / "tables", study.raw["headline_model"], tmp_path / "figs" / "captions")
    committed = sorted(
        p.relative_to(ROOT / "figures/h200-smollm2") for p in (ROOT / "figures/h200-smollm2").rglob("*") if p.is_file()
    )
    assert len(committed) == 14 + 1 + 7
    for rel in committed:
        assert (tmp_path / "figs" / rel).read_bytes() == (ROOT / "figures/h200-smollm2" / rel).read_bytes(), rel
