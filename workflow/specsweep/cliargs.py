"""Each subcommand's arguments as a typed record: a frozen dataclass whose fields are the subcommand's options
(argparse's `dest` names, with the types argparse gives them), built from the parsed Namespace by `of`, so a
command reads `args.out` from a record that mypy checks, not from an untyped Namespace. A test holds every
subparser's options equal to its record's fields.

Paths stay the strings argparse gives (no `type=Path`): each command converts them where it did before.
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import TypeVar


@dataclass(frozen=True)
class Args:
    """A subcommand's arguments."""

    @classmethod
    def of(cls: type[A], ns: argparse.Namespace) -> A:
        """The record of the parsed arguments (argparse's bookkeeping, `command` and `func`, left out)."""
        return cls(**{f.name: getattr(ns, f.name) for f in fields(cls)})


A = TypeVar("A", bound=Args)


def takes(record: type[A]) -> Callable[[Callable[[A], int]], Callable[[argparse.Namespace], int]]:
    """A command taking `record`, called with the parsed Namespace (argparse's `func`); `record` is kept on the
    wrapper (`.record`) for the test that holds the parser and the records together."""

    def wrap(func: Callable[[A], int]) -> Callable[[argparse.Namespace], int]:
        @functools.wraps(func)
        def run(ns: argparse.Namespace) -> int:
            return func(record.of(ns))

        run.record = record  # type: ignore[attr-defined]
        return run

    return wrap


@dataclass(frozen=True)
class StudyArgs(Args):
    """What every subcommand that reads a study config takes: the config and its --set overrides."""

    config: str
    set: list[str] | None


@dataclass(frozen=True)
class CellsArgs(StudyArgs):
    results: str


@dataclass(frozen=True)
class CheckLadderArgs(StudyArgs):
    pass


@dataclass(frozen=True)
class AdviceReplayArgs(StudyArgs):
    name: str
    tokenizer: str
    out: str


@dataclass(frozen=True)
class CorpusArgs(StudyArgs):
    out: str


@dataclass(frozen=True)
class WorkloadArgs(StudyArgs):
    name: str
    corpus: str
    out: str


@dataclass(frozen=True)
class BuildModelArgs(Args):
    out: str
    build: str
    gguf: str | None
    dtype: str


@dataclass(frozen=True)
class FetchModelArgs(StudyArgs):
    name: str
    out: str
    verify_sha256: bool


@dataclass(frozen=True)
class ModelRecordArgs(Args):
    model_dir: str


@dataclass(frozen=True)
class BuildTokenizerArgs(Args):
    out: str
    build: str
    gguf: str | None


@dataclass(frozen=True)
class DummyModelArgs(Args):
    architecture: str
    tokenizer_from: str
    out: str
    architectures: str | None


@dataclass(frozen=True)
class RunCellArgs(StudyArgs):
    workload_file: str
    out: str
    model_path: str | None
    log: str | None
    no_reuse: bool
    watch_pid: int | None


@dataclass(frozen=True)
class RestoreArgs(StudyArgs):
    path: str
    force: bool


@dataclass(frozen=True)
class EngineHostArgs(StudyArgs):
    model: str
    ladder_step: str
    repeat: int
    key: str
    model_path: str | None
    token: str | None


@dataclass(frozen=True)
class PreflightCellArgs(StudyArgs):
    workload_file: str
    out: str
    model_path: str | None
    log: str | None
    watch_pid: int | None


@dataclass(frozen=True)
class PreflightReportArgs(StudyArgs):
    results: str


@dataclass(frozen=True)
class CodeHashArgs(Args):
    root: str | None


@dataclass(frozen=True)
class EnginesArgs(Args):
    stop: bool
    config: str | None  # ignored (for symmetry with the other subcommands)


@dataclass(frozen=True)
class HarnessArgs(StudyArgs):
    cell: str
    workload_file: str
    out: str
    model_path: str | None


@dataclass(frozen=True)
class FidelityArgs(StudyArgs):
    cell: str
    workload_file: str
    out: str
    model_path: str | None
    runs: int


@dataclass(frozen=True)
class TablesArgs(StudyArgs):
    results: str
    out: str
    allow_mismatch: bool
    allow_stale: bool


@dataclass(frozen=True)
class StatusArgs(StudyArgs):
    results: str
    json: bool


@dataclass(frozen=True)
class FiguresArgs(StudyArgs):
    tables: str
    out: str


@dataclass(frozen=True)
class ReplayArgs(Args):
    traffic: str | None
    cell: str | None
    tokenizer: str | None
    out: str
    method: str | None
    num_speculative_tokens: int | None
    prompt_lookup_min: int | None
    prompt_lookup_max: int | None
    suffix_max_tree_depth: int | None
    suffix_max_spec_factor: float | None
    suffix_min_token_prob: float | None
    suffix_max_cached_requests: int | None
    max_model_len: int | None
    schedule: str
    concurrency: int | None
    token_budget: int | None
    seed: int


@dataclass(frozen=True)
class AdviseArgs(Args):
    replay: list[str]
    tables: str
    model: str
    workload: str | None
    step: list[str] | None
    configs: str | None
    out: str
    figure: str | None


@dataclass(frozen=True)
class ValidateArgs(Args):
    run: str
    results: str
    tables: str | None
    configs: str | None
    heldout_from: list[str] | None
    all_at: int | None
    cross_model: bool
    out: str | None


@dataclass(frozen=True)
class PlanArgs(Args):
    tables: str
    effect: float
    power: float
    json: bool
