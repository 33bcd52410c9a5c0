"""The results layout, defined once. Everything else (the rules, the CLI, the tables) derives from here.

results/{run}/cells/{model}/{workload}/{config}/r{repeat}.json      one measurement (a cell's repeat)
results/{run}/failures/{model}/{workload}/{config}/r{repeat}.json   its failure record, when it failed
results/{run}/archive/{model}/{workload}/{config}/r{repeat}/{sha}.json   every measurement ever finished
results/{run}/preflight/{model}/{workload}/{config}.json            a cell's preflight verdict

A workload measured at a concurrency b (config `workloads.<name>.concurrency`) is its own cell, named
`{workload}@b{b}` in every path above (results/{run}/cells/{model}/code@b8/ngram/r1.json); the workload at
its default point (all prompts submitted at once) keeps the plain name, so its paths never change.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from .errors import SpecsweepError

#: The Snakemake output pattern of one measurement (wildcards run, model, workload, config, repeat).
MEASUREMENT = "results/{run}/cells/{model}/{workload}/{config}/r{repeat}.json"
_NAME = r"[A-Za-z0-9][A-Za-z0-9._-]*"
#: The suffix of a workload measured at concurrency b: `@b{b}` ('@' is never part of a config name).
_AT = r"@b[1-9][0-9]{0,6}"
_WORKLOAD = rf"{_NAME}(?:{_AT})?"
_RE = re.compile(
    rf"(?:^|/)(?P<run>{_NAME})/cells/(?P<model>{_NAME})/(?P<workload>{_WORKLOAD})/(?P<config>{_NAME})/"
    r"r(?P<repeat>[1-9][0-9]{0,3})\.json$"
)


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
    """One measurement: a cell (model, workload, config) and its repeat number (1-based)."""

    run: str
    model: str
    workload: str
    config: str
    repeat: int

    @property
    def cell(self) -> str:
        return f"{self.model}/{self.workload}/{self.config}"

    @property
    def label(self) -> str:
        return f"{self.cell}/r{self.repeat}"


def measurement(root: Path | str, key: Key) -> Path:
    return Path(root) / key.run / "cells" / key.model / key.workload / key.config / f"r{key.repeat}.json"


def failure(root: Path | str, key: Key) -> Path:
    return Path(root) / key.run / "failures" / key.model / key.workload / key.config / f"r{key.repeat}.json"


def archive_dir(root: Path | str, key: Key) -> Path:
    return Path(root) / key.run / "archive" / key.model / key.workload / key.config / f"r{key.repeat}"


_PREFLIGHT_RE = re.compile(
    rf"(?:^|/)(?P<run>{_NAME})/preflight/(?P<model>{_NAME})/(?P<workload>{_WORKLOAD})/(?P<config>{_NAME})\.json$"
)


def preflight(root: Path | str, run: str, model: str, workload: str, config: str) -> Path:
    return Path(root) / run / "preflight" / model / workload / f"{config}.json"


def parse_preflight(path: Path | str) -> tuple[Path, str, str, str, str]:
    """results/{run}/preflight/{model}/{workload}/{config}.json -> (results root, run, model, workload, config)."""
    text = Path(path).as_posix()
    m = _PREFLIGHT_RE.search(text)
    if not m:
        raise SpecsweepError(
            f"preflight path {path}: expected .../{{run}}/preflight/{{model}}/{{workload}}/{{config}}.json"
        )
    return Path(text[: m.start("run")] or "."), m["run"], m["model"], m["workload"], m["config"]


def parse(path: Path | str) -> tuple[Path, Key]:
    """results/{run}/cells/{model}/{workload}/{config}/r{n}.json -> (results root, Key)."""
    text = Path(path).as_posix()
    m = _RE.search(text)
    if not m:
        raise SpecsweepError(
            f"cell path {path}: expected .../{{run}}/cells/{{model}}/{{workload}}/{{config}}/r{{repeat}}.json"
        )
    root = Path(text[: m.start("run")] or ".")
    return root, Key(m["run"], m["model"], m["workload"], m["config"], int(m["repeat"]))
