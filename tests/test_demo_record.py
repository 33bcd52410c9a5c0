"""workflow/scripts/demo-record.py refuses what is not a CPU demo run, numbers that cannot be a run's and fields
that would forge a column or a row, each in one line, and docs/demo-runs.csv is left as it was."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
import yaml

from conftest import ROOT

SCRIPT = ROOT / "workflow" / "scripts" / "demo-record.py"
CSV = ROOT / "docs" / "demo-runs.csv"
GOOD = ["--demo", "article", "--commit", "abc1234", "--wall-s", "700", "--snakemake-s", "600", "--date", "2026-12-06"]


def _record(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, check=False)


def _demo_tables(tmp_path, device="cpu", run="smoke"):
    """A copy of committed tables under a run folder whose config.yaml names `run` and `device`."""
    tables = tmp_path / run / "tables"
    shutil.copytree(ROOT / "results" / "h200-smollm2" / "tables", tables)
    (tables.parent / "config.yaml").write_text(yaml.safe_dump({"run": run, "device": device}))
    return tables


@pytest.mark.parametrize(
    "case,args,line",
    [
        (
            "h200",
            ["--tables", str(ROOT / "results" / "h200-smollm2" / "tables")],
            f"--tables {ROOT / 'results' / 'h200-smollm2' / 'tables'}: run 'h200-smollm2' on device gpu, not a CPU "
            "demo run (run smoke, device cpu: make demo)",
        ),
        ("wall", ["--wall-s", "-5"], "--wall-s -5: not a positive number of seconds"),
        ("date", ["--date", "not-a-date"], "--date not-a-date: not an ISO date (YYYY-MM-DD)"),
        (
            "newline",
            ["--host", "2-core\nforged,row"],
            "--host '2-core\\nforged,row': empty, or holds a comma or a control character",
        ),  # fmt: skip
        ("comma", ["--commit", "abc,def"], "--commit 'abc,def': empty, or holds a comma or a control character"),
    ],
)
def test_demo_record_refuses_in_one_line_and_writes_nothing(tmp_path, case, args, line):
    before = CSV.read_bytes()
    tables = ["--tables", str(_demo_tables(tmp_path))] if case != "h200" else []
    proc = _record(*tables, *GOOD, *args)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == f"demo-record: error: {line}\n"
    assert CSV.read_bytes() == before


@pytest.mark.parametrize("kind", ["gpu", None])
def test_a_run_folder_without_its_config_is_judged_by_its_cells(tmp_path, kind):
    """A fresh `make demo` keeps no config.yaml in its run folder: the cells beside the tables say what ran. A
    cell measured on a GPU, or no cells at all, is refused in one line."""
    before = CSV.read_bytes()
    tables = _demo_tables(tmp_path)
    (tables.parent / "config.yaml").unlink()
    if kind:
        cell = tables.parent / "cells" / "m" / "code" / "vanilla" / "r1.json"
        cell.parent.mkdir(parents=True)
        cell.write_text(json.dumps({"run": "smoke", "provenance": {"device": {"kind": kind}}}))
        line = f"--tables {tables}: run 'smoke' on device gpu, not a CPU demo run (run smoke, device cpu: make demo)"
    else:
        line = f"--tables {tables}: neither a config.yaml nor cells beside it, so it is not known to be a CPU demo run"
    proc = _record("--tables", str(tables), *GOOD)
    assert (proc.returncode, proc.stdout, proc.stderr) == (2, "", f"demo-record: error: {line}\n")
    assert CSV.read_bytes() == before


def test_a_truncated_claims_json_is_one_line(tmp_path):
    before = CSV.read_bytes()
    tables = _demo_tables(tmp_path)
    claims = tables / "claims.json"
    claims.write_bytes(claims.read_bytes()[:100])
    proc = _record("--tables", str(tables), *GOOD)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith(f"demo-record: error: tables {claims}: ")
    assert CSV.read_bytes() == before
