"""`snakemake --report`: the eight figures with their captions and the table, rendered by headless Chromium."""

from __future__ import annotations

import base64
import json
import re
import shutil
import struct
import subprocess

import pytest

from conftest import snakemake

pytestmark = pytest.mark.slow  # every test here starts Snakemake or vLLM, or needs the real model

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def _chromium(tmp_path, url: str, *extra: str) -> str:
    assert CHROMIUM, "Debian's chromium package is needed (.ci/run installs it)"
    proc = subprocess.run(
        [CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=5000", *extra, url],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return proc.stdout


def test_report_holds_rendered_figures_and_captions(tiny_run, tmp_path):
    work = tiny_run["work"]
    snakemake(work, "--configfile", str(tiny_run["config"]), "--report", str(tmp_path / "report.html"))
    html = (tmp_path / "report.html").read_text()
    entries = {}
    # what the figures' manifest says was drawn: the tiny run has one model (no size axis, figure 5) and no
    # concurrency axis (no figure 9)
    drawn = json.loads((work / "figures" / "tiny" / "manifest.json").read_text())["figures"]
    assert "fig9_concurrency" not in html and "fig5_model_size" not in drawn
    for name in drawn:
        m = re.search(rf'"figures/tiny/{name}\.png": (\{{.*?"data_uri": "(data:image/png[^"]+)"\}})', html)
        assert m, f"{name} is not in the report"
        entries[name] = m.group(2)
    assert "Gain per workload" in html and "K = " in html  # captions with the numbers
    assert "GPU utilisation was not measured on this run" in html
    assert "cells.csv" in html and "claims.md" in html

    # the report itself loads in the browser and lists the figure category
    dom = _chromium(tmp_path, (tmp_path / "report.html").as_uri(), "--dump-dom")
    assert "Figures" in dom and "Tables" in dom

    # each embedded figure decodes and renders in the browser at its true size
    page = tmp_path / "figs.html"
    imgs = "".join(f'<img id="{n}" src="{uri}">' for n, uri in entries.items())
    page.write_text(
        "<html><body>" + imgs + "<script>window.onload = () => { document.body.setAttribute("
        "'data-sizes', JSON.stringify([...document.images].map(i => [i.id, i.naturalWidth, "
        "i.naturalHeight]))); };</script></body></html>"
    )
    dom = _chromium(tmp_path, page.as_uri(), "--dump-dom")
    sizes = json.loads(re.search(r"data-sizes=\"([^\"]+)\"", dom).group(1).replace("&quot;", '"'))
    assert len(sizes) == len(drawn) == len(entries) >= 6
    for name, width, height in sizes:
        png = base64.b64decode(entries[name].split("base64,", 1)[1])
        true_w, true_h = struct.unpack(">II", png[16:24])
        assert (width, height) == (true_w, true_h) and width > 300, name
