"""Inputs that must not turn the pipeline against the person running it: a cell whose strings are reST that
would inject into the Snakemake report, and a symlinked cells folder that `specsweep restore` would write
through. Both on copies of the committed H200 cells (real vLLM measurements)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, snakemake

RUN = "h200-smollm2"
CONFIG = ROOT / "results" / "h200-smollm2" / "config.yaml"
CELLS = ROOT / "results" / RUN / "cells"
MODEL = "smollm2-135m-instruct"


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """The CLI of this checkout, as a user runs it from the project folder."""
    env = dict(os.environ, PYTHONPATH=str(ROOT / "workflow"))
    return subprocess.run(
        [sys.executable, "-m", "specsweep.cli", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


def one_line_error(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("specsweep: error: "), proc.stderr
    return lines[0]


# ------------------------------------------------------------------------------------------ report injection


def _payload(secret: Path) -> str:
    return (
        "FULL\n\n"
        ".. raw:: html\n\n"
        "   <script>window.specsweepXss = 1</script>\n\n"
        ".. include:: /etc/hostname\n\n"
        f".. include:: {secret}\n"
    )


@pytest.mark.slow
def test_cell_strings_reach_the_report_as_text(tmp_path):
    """A cell whose effective.cudagraph_mode is reST carrying `.. raw:: html` (a <script>) and `.. include::`
    of /etc/hostname and of a local file: report.html shows the string as text, runs no script of it and holds
    neither file's content."""
    secret = tmp_path / "secret.txt"
    secret.write_text("specsweep-secret-7f3a9c21e4\n")
    work = tmp_path / "work"
    cells = work / "results" / RUN / "cells"
    shutil.copytree(CELLS, cells)
    edited = 0
    for path in sorted(cells.glob(f"{MODEL}/*/vanilla/r*.json")):  # the baseline: figure 1's caption names it
        doc = json.loads(path.read_text())
        doc["effective"]["cudagraph_mode"] = _payload(secret)
        path.write_text(json.dumps(doc, indent=2))
        edited += 1
    assert edited == 6
    snakemake(work, "figures", "--configfile", str(CONFIG), "--cores", "1")
    caption = (work / "figures" / RUN / "captions" / "fig1_headline.rst").read_text()
    assert "specsweepXss" in caption  # the cell's string reached the caption, as escaped text
    snakemake(work, "--configfile", str(CONFIG), "--report", str(tmp_path / "report.html"))
    html = (tmp_path / "report.html").read_text()

    m = re.search(rf'"figures/{RUN}/fig1_headline\.png": \{{.*?"caption": "(.*?)(?<!\\)"', html)
    assert m, "figure 1 is not in the report"
    shown = m.group(1)
    assert "window.specsweepXss = 1" in shown and "&lt;script&gt;" in shown  # shown as text
    assert ".. raw:: html" in shown and ".. include:: /etc/hostname" in shown
    assert "<script>window.specsweepXss" not in html  # never as markup, anywhere in the report
    assert "specsweep-secret-7f3a9c21e4" not in html
    hostname = Path("/etc/hostname").read_text().strip()
    if hostname:
        assert not re.search(rf">\s*{re.escape(hostname)}\s*<", shown), "the host's /etc/hostname is in the caption"


def test_report_docutils_settings_forbid_raw(tmp_path):
    """Snakemake renders the report's RST with docutils' defaults plus the config files DOCUTILSCONFIG names:
    the Snakefile names workflow/report/docutils.conf, which turns raw HTML off."""
    from docutils.core import publish_parts

    conf = ROOT / "workflow" / "report" / "docutils.conf"
    assert f"{{workflow.basedir}}/{conf.relative_to(ROOT)}" in (ROOT / "Snakefile").read_text()
    rst = ".. raw:: html\n\n   <script>window.specsweepXss = 1</script>\n"
    env = dict(os.environ, DOCUTILSCONFIG=str(conf))
    code = "import sys; from docutils.core import publish_parts; print(publish_parts(sys.stdin.read(), writer='html')['body'])"
    out = subprocess.run([sys.executable, "-c", code], input=rst, env=env, capture_output=True, text=True).stdout
    assert "<script>" not in out and "&lt;script&gt;" in out and "System Message" in out
    assert "<script>" in publish_parts(rst, writer="html")["body"]  # docutils' own default lets it through


@pytest.mark.parametrize("value", ["a\n\n.. include:: /etc/hostname", "x:: y", "`x <javascript:alert(1)>`_"])
def test_captions_escape_data(value):
    from specsweep.captions import check_rst, rst_text

    text = rst_text(value)
    assert "\n" not in text and check_rst("fig", "Caption " + text) == "Caption " + text
    from docutils.core import publish_parts

    body = publish_parts("Caption " + text, writer="html")["body"]
    assert re.sub(r"\s+", " ", value) in body.replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", '"')


# ------------------------------------------------------------------------------------------ restore


def test_restore_never_writes_through_a_symlinked_cells_folder(tmp_path):
    """results/{run}/cells linked to a folder outside the project: restore refuses in one line and writes
    nothing there."""
    project, outside = tmp_path / "project", tmp_path / "outside"
    outside.mkdir()
    cell = f"{MODEL}/code/vanilla/r1"
    arch = ROOT / "results" / RUN / "archive" / cell
    shutil.copytree(arch, project / "results" / RUN / "archive" / cell)
    (project / "results" / RUN / "cells").symlink_to(outside, target_is_directory=True)
    target = f"results/{RUN}/cells/{cell}.json"
    line = one_line_error(cli("restore", "--config", str(CONFIG), target, cwd=project))
    assert f"results/{RUN}/cells is a symbolic link to {outside}" in line and "outside the results folder" in line
    assert list(outside.rglob("*")) == []
    # the same folder, not linked: restored
    (project / "results" / RUN / "cells").unlink()
    proc = cli("restore", "--config", str(CONFIG), target, cwd=project)
    assert proc.returncode == 0, proc.stderr
    assert json.loads((project / target).read_text()) == json.loads((CELLS / f"{cell}.json").read_text())


CONC_RUN, CONC_CONFIG = "h200-smollm2-concurrency", ROOT / "results" / "h200-smollm2-concurrency" / "config.yaml"


def _archived(run: str, cell: str, repeat: int) -> dict:
    """The committed archived write of a cell repeat (one per repeat in the committed runs)."""
    (path,) = (ROOT / "results" / run / "archive" / cell / f"r{repeat}").glob("*.json")
    return json.loads(path.read_text())


def _plant(project: Path, run: str, cell: str, repeat: int, doc: dict, name: str | None = None) -> Path:
    """doc put in the archive folder of `cell` repeat `repeat`, under its content hash (or `name`)."""
    from specsweep.jsonio import atomic_write_json, sha256_obj

    path = project / "results" / run / "archive" / cell / f"r{repeat}" / (name or f"{sha256_obj(doc)[:16]}.json")
    atomic_write_json(path, doc)
    return path


def _later(doc: dict) -> dict:
    """The same measurement stamped as finished a day later (newer than any genuine write)."""
    doc = json.loads(json.dumps(doc))
    doc["provenance"]["finished"] = "2099" + doc["provenance"]["finished"][4:]
    return doc


def _other_b(doc: dict, b: int) -> dict:
    """A measurement at one concurrency renamed as if it were made at b (its settings left as they are)."""
    doc = json.loads(json.dumps(doc))
    doc["workload"] = doc["workload"].split("@")[0] + f"@b{b}"
    return doc


@pytest.mark.parametrize(
    "case",
    ["other repeat", "other concurrency", "not its hash"],
)
def test_restore_puts_back_only_the_cell_its_path_names(tmp_path, case):
    """restore takes the newest write in the repeat's archive folder; one that is not the cell the path names
    (another repeat, a measurement at another concurrency b renamed as this one, content edited under a
    name that is not its hash) is refused in one line naming it, and nothing is written at the
    path. The genuine archive restores byte for byte."""
    cell = f"{MODEL}/code@b4/ngram"
    target = f"results/{CONC_RUN}/cells/{cell}/r1.json"
    genuine = _archived(CONC_RUN, cell, 1)
    _plant(tmp_path, CONC_RUN, cell, 1, genuine)
    if case == "other repeat":
        planted = _plant(tmp_path, CONC_RUN, cell, 1, _later(_archived(CONC_RUN, cell, 2)))
        needle = f"cell {planted.relative_to(tmp_path)}: holds repeat 2, but its path says repeat 1"
    elif case == "other concurrency":
        b16 = _archived(CONC_RUN, f"{MODEL}/code@b16/ngram", 1)
        planted = _plant(tmp_path, CONC_RUN, cell, 1, _later(_other_b(b16, 4)))
        needle = f"cell {planted.relative_to(tmp_path)}: workload 'code@b4' names concurrency 4, but settings.workload.concurrency is 16"
    elif case == "not its hash":
        planted = _plant(tmp_path, CONC_RUN, cell, 1, _later(genuine), name="0123456789abcdef.json")
        needle = f"archived cell {planted.relative_to(tmp_path)}: its content hashes to "
    line = one_line_error(cli("restore", "--config", str(CONC_CONFIG), target, cwd=tmp_path))
    assert needle in line, line
    assert not (tmp_path / target).exists()
    planted.unlink()
    proc = cli("restore", "--config", str(CONC_CONFIG), target, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / target).read_text()) == genuine
