"""The layout of the project's files, defined once: the Snakemake rules take their output, log and benchmark
patterns from here, and the package builds and parses the same paths from the same patterns.

results/{run}/cells/{model}/{workload}/{step}/r{repeat}.json      one measurement (a cell's repeat)
results/{run}/failures/{model}/{workload}/{step}/r{repeat}.json   its failure record, when it failed
results/{run}/archive/{model}/{workload}/{step}/r{repeat}/{sha}.json   every measurement ever finished
results/{run}/preflight/{model}/{workload}/{step}.json            a cell's preflight verdict
results/{run}/preflight/report.md, report.parquet, summary.json  the preflight report
results/{run}/fidelity/{model}/{workload}/{step}.json             a cell measured by vLLM's own harness too
results/{run}/workloads/{workload}.{whash}.json                   a workload file (whash: what it is made of)
results/{run}/tables/                                             the tables (specsweep.tables.table_files)
resources/sonnet.txt, resources/models/{model}                    the corpus, the model folders
figures/{run}/{figure}.png|.svg, captions/{figure}.rst, manifest.json   the figures
logs/..., benchmarks/...                                          each job's log and benchmark, the twin of
                                                                  its output's path (.log, .tsv)

A workload measured at a concurrency b (config `workloads.<name>.concurrency`) is its own cell, named
`{workload}@b{b}` in every path above (results/{run}/cells/{model}/code@b8/ngram/r1.json); the workload at
its default point (all prompts submitted at once) keeps the plain name, so its paths never change.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from .errors import SpecsweepError

#: The folders under the project root (the working directory of a Snakemake run).
RESOURCES = "resources"
RESULTS = "results"
FIGURES = "figures"
LOGS = "logs"
BENCHMARKS = "benchmarks"

# The stems of one job's files, relative to RESULTS, LOGS and BENCHMARKS, without extension: Snakemake
# patterns (their wildcards in braces), and str.format templates for the functions below.
#: one measurement: a cell's repeat
CELL = "{run}/cells/{model}/{workload}/{step}/r{repeat}"
#: the failure record of a cell's repeat
FAILURE = "{run}/failures/{model}/{workload}/{step}/r{repeat}"
#: the folder of every measurement of a cell's repeat ever finished
ARCHIVE = "{run}/archive/{model}/{workload}/{step}/r{repeat}"
#: a cell's preflight verdict
PREFLIGHT = "{run}/preflight/{model}/{workload}/{step}"
#: a cell measured by specsweep's engine and by vLLM's run_vllm (rule fidelity_cell)
FIDELITY = "{run}/fidelity/{model}/{workload}/{step}"
#: a workload file: whash is the hash of everything it is made from (rules/common.smk, workload_hash)
WORKLOAD = "{run}/workloads/{workload}.{whash}"
#: the preflight report's files, in results/{run}/preflight/
PREFLIGHT_REPORT = ("report.md", "report.parquet", "summary.json")
#: the figures folder's manifest and the folder of the captions the figures step writes
FIGURES_MANIFEST = "manifest.json"
CAPTIONS = "captions"


def result(stem: str) -> str:
    """The output path (a Snakemake pattern when `stem` has wildcards) of a stem: results/{stem}.json."""
    return f"{RESULTS}/{stem}.json"


def log(stem: str) -> str:
    """The log of the job that makes results/{stem}.json: logs/{stem}.log."""
    return f"{LOGS}/{stem}.log"


def benchmark(stem: str) -> str:
    """The benchmark of the job that makes results/{stem}.json: benchmarks/{stem}.tsv."""
    return f"{BENCHMARKS}/{stem}.tsv"


#: The corpus the workloads are made from.
CORPUS = f"{RESOURCES}/sonnet.txt"
#: A model folder built (a recipe, random weights) or fetched (a Hugging Face repo at its revision).
MODELS = f"{RESOURCES}/models"
MODEL = MODELS + "/{model}"
#: The stems (under LOGS and BENCHMARKS) of the jobs that build a model folder and fetch one.
BUILD_MODEL = "build_model/{model}"
FETCH_MODEL = "fetch_model/{model}"
#: The tokenizer of every model with random weights (SmolLM2-135M-Instruct's, without weights).
DUMMY_TOKENIZER = f"{RESOURCES}/tokenizers/smollm2-135m-instruct"

#: The Snakemake output pattern of one measurement (wildcards run, model, workload, step, repeat).
MEASUREMENT = result(CELL)


def run_dir(run: str, root: Path | str = RESULTS) -> Path:
    """results/{run}: everything a run measured and derived."""
    return Path(root) / run


def tables_dir(run: str, root: Path | str = RESULTS) -> Path:
    """results/{run}/tables."""
    return run_dir(run, root) / "tables"


def table_paths(run: str, names: Iterable[str], root: Path | str = RESULTS) -> list[str]:
    """results/{run}/tables/{name} for each table file name."""
    return [str(tables_dir(run, root) / name) for name in names]


def cells_dir(run: str, root: Path | str = RESULTS) -> Path:
    """results/{run}/cells."""
    return run_dir(run, root) / "cells"


def cell_files(cells: Path | str) -> list[Path]:
    """The measurement files of a cells folder ({model}/{workload}/{step}/r{n}.json), sorted; the stored token
    ids beside them (r{n}.tokens.json) left out."""
    return sorted(p for p in Path(cells).glob("*/*/*/r*.json") if not p.name.endswith(".tokens.json"))


def preflight_dir(run: str, root: Path | str = RESULTS) -> Path:
    """results/{run}/preflight: the verdicts and the report."""
    return run_dir(run, root) / "preflight"


def preflight_report(run: str, root: Path | str = RESULTS) -> list[str]:
    """The preflight report's files."""
    return [str(preflight_dir(run, root) / name) for name in PREFLIGHT_REPORT]


def workload_file(run: str, workload: str, whash: str, root: Path | str = RESULTS) -> Path:
    """results/{run}/workloads/{workload}.{whash}.json."""
    return Path(root) / f"{WORKLOAD.format(run=run, workload=workload, whash=whash)}.json"


def fidelity(root: Path | str, run: str, model: str, workload: str, step: str) -> Path:
    """results/{run}/fidelity/{model}/{workload}/{step}.json."""
    return Path(root) / f"{FIDELITY.format(run=run, model=model, workload=workload, step=step)}.json"


def figures_dir(run: str, root: Path | str = ".") -> Path:
    """figures/{run}, beside the results folder under the project root."""
    return Path(root) / FIGURES / run


def figure_files(run: str, stems: Iterable[str], root: Path | str = ".") -> list[str]:
    """What the figures step writes for the figures `stems`: each as PNG and SVG, each caption, the manifest."""
    d, stems = figures_dir(run, root), list(stems)
    return (
        [str(d / f"{stem}.{ext}") for stem in stems for ext in ("png", "svg")]
        + [str(d / CAPTIONS / f"{stem}.rst") for stem in stems]
        + [str(d / FIGURES_MANIFEST)]
    )


def run_log(run: str, name: str) -> str:
    """logs/{run}/{name}.log: the log of a run-wide job (tables, figures, the preflight report)."""
    return log(f"{run}/{name}")


def run_benchmark(run: str, name: str) -> str:
    """benchmarks/{run}/{name}.tsv."""
    return benchmark(f"{run}/{name}")


_NAME = r"[A-Za-z0-9][A-Za-z0-9._-]*"
#: The suffix of a workload measured at concurrency b: `@b{b}` ('@' is never part of a ladder step's name).
_AT = r"@b[1-9][0-9]{0,6}"
_WORKLOAD = rf"{_NAME}(?:{_AT})?"
#: What each wildcard of the stems above may match when a path is parsed back.
_WILDCARDS = {"run": _NAME, "model": _NAME, "workload": _WORKLOAD, "step": _NAME, "repeat": r"[1-9][0-9]{0,3}"}


def _regex(stem: str, ext: str) -> re.Pattern[str]:
    """A stem's path (under any results root) as a regular expression, one named group per wildcard."""
    parts = re.split(r"\{(\w+)\}", stem + ext)
    body = "".join(re.escape(p) if i % 2 == 0 else f"(?P<{p}>{_WILDCARDS[p]})" for i, p in enumerate(parts))
    return re.compile(rf"(?:^|/){body}$")


_RE = _regex(CELL, ".json")


_SPLIT = re.compile(rf"(?P<base>{_NAME})@b(?P<b>[1-9][0-9]{{0,6}})")


def at_concurrency(workload: str, b: int) -> str:
    """The cell name of `workload` measured with b requests in flight: `code@b8`."""
    return f"{workload}@b{b}"


def split_workload(name: str) -> tuple[str, int | None]:
    """A cell's workload name -> (the config's workload, its concurrency b or None for all prompts at once)."""
    m = _SPLIT.fullmatch(name)
    return (m["base"], int(m["b"])) if m else (name, None)


@dataclass(frozen=True, order=True)
class Key:
    """One measurement: a cell (model, workload, ladder step) and its repeat number (1-based)."""

    run: str
    model: str
    workload: str
    step: str
    repeat: int

    @property
    def cell(self) -> str:
        return f"{self.model}/{self.workload}/{self.step}"

    @property
    def label(self) -> str:
        return f"{self.cell}/r{self.repeat}"


def _fill(stem: str, key: Key) -> str:
    return stem.format(run=key.run, model=key.model, workload=key.workload, step=key.step, repeat=key.repeat)


def measurement(root: Path | str, key: Key) -> Path:
    return Path(root) / f"{_fill(CELL, key)}.json"


def failure(root: Path | str, key: Key) -> Path:
    return Path(root) / f"{_fill(FAILURE, key)}.json"


def archive_dir(root: Path | str, key: Key) -> Path:
    return Path(root) / _fill(ARCHIVE, key)


_PREFLIGHT_RE = _regex(PREFLIGHT, ".json")


def preflight(root: Path | str, run: str, model: str, workload: str, step: str) -> Path:
    return Path(root) / f"{PREFLIGHT.format(run=run, model=model, workload=workload, step=step)}.json"


def parse_preflight(path: Path | str) -> tuple[Path, str, str, str, str]:
    """results/{run}/preflight/{model}/{workload}/{step}.json -> (results root, run, model, workload, step)."""
    text = Path(path).as_posix()
    m = _PREFLIGHT_RE.search(text)
    if not m:
        raise SpecsweepError(f"preflight path {path}: expected .../{PREFLIGHT}.json")
    return Path(text[: m.start("run")] or "."), m["run"], m["model"], m["workload"], m["step"]


def parse(path: Path | str) -> tuple[Path, Key]:
    """results/{run}/cells/{model}/{workload}/{step}/r{n}.json -> (results root, Key)."""
    text = Path(path).as_posix()
    m = _RE.search(text)
    if not m:
        raise SpecsweepError(f"cell path {path}: expected .../{CELL}.json")
    root = Path(text[: m.start("run")] or ".")
    return root, Key(m["run"], m["model"], m["workload"], m["step"], int(m["repeat"]))


def check_no_link_out(root: Path | str, path: Path | str) -> None:
    """Refuse a path under the results root that a symbolic link leads out of it (a cells folder linked
    elsewhere): a write there would land outside the project. The results root itself may be a link (results
    kept on another disk); what lies below it may not point out of it."""
    root, path = Path(root), Path(path)
    anchor = root.resolve()
    here = root
    for part in path.relative_to(root).parts:
        here = here / part
        if here.is_symlink() and not here.resolve().is_relative_to(anchor):
            raise SpecsweepError(
                f"cell path {path}: {here} is a symbolic link to {here.resolve()}, outside the results folder "
                f"{root}; refusing to write through it"
            )
