"""Checks of a SLURM run made while Snakemake parses the workflow, before any job is planned or submitted.

A GPU job without a partition goes wherever the cluster's default partition is, which on most sites has no
GPUs: snakemake-executor-plugin-slurm then falls back to that default without a word, and the dry run plans
every job as if all were well. The executor and the resources are what Snakemake parsed from its command line
and profiles (profiles/slurm sets them).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from types import FrameType
from typing import Any

from .errors import SpecsweepError

#: The rules whose jobs hold GPUs (their `gpu` resource is a cell's TP): each needs a GPU partition.
GPU_RULES = ("measure", "fidelity_cell", "preflight_cell")
#: The executors that submit jobs to SLURM (slurm-jobstep runs inside a job already submitted).
SLURM_EXECUTORS = frozenset({"slurm"})


def _given(resource: Any) -> bool:
    """A resource value names something: a non-empty string or any other value (a callable from a rule)."""
    value = getattr(resource, "raw", resource)  # a snakemake.resources.Resource, or the plain value
    if value is None:
        return False
    return bool(value.strip()) if isinstance(value, str) else True


def _given_path(value: Any) -> bool:
    """A path was given (an argument left unset reads as dataclasses.MISSING, which is truthy)."""
    return isinstance(value, (str, os.PathLike)) and bool(str(value))


def check_partition(
    executor: str | None,
    default_resources: Mapping[str, Any] | None,
    set_resources: Mapping[str, Mapping[str, Any]] | None,
    partition_config: Any = None,
) -> None:
    """Under the SLURM executor, every GPU rule gets a partition: `slurm_partition` in default-resources, or in
    set-resources for each GPU rule, or a partition file the plugin picks from (--slurm-partition-config or
    $SNAKEMAKE_SLURM_PARTITIONS).
    Anything else is one line naming the key to set."""
    if executor not in SLURM_EXECUTORS or _given_path(partition_config) or os.environ.get("SNAKEMAKE_SLURM_PARTITIONS"):
        return
    default = (default_resources or {}).get("slurm_partition")
    if _given(default):
        return
    missing = [r for r in GPU_RULES if not _given(((set_resources or {}).get(r) or {}).get("slurm_partition"))]
    if missing:
        empty = "is empty" if getattr(default, "raw", default) is not None else "is not set"
        raise SpecsweepError(
            f"SLURM executor: default-resources slurm_partition {empty}, so the GPU jobs ({', '.join(missing)}) "
            "would go to the cluster's default partition; set slurm_partition under default-resources in "
            "profiles/slurm/config.v8+.yaml (or --default-resources slurm_partition=NAME)"
        )


def snakemake_args() -> Any | None:
    """The arguments Snakemake's command line parsed (profiles included), read from the frame of
    snakemake.cli.args_to_api that is parsing this workflow; None under the Python API, which has no such
    frame. The executor is chosen on that command line and is not on the workflow object while it parses."""
    frame: FrameType | None = sys._getframe()
    while frame is not None:
        if frame.f_code.co_name == "args_to_api" and frame.f_globals.get("__name__") == "snakemake.cli":
            return frame.f_locals.get("args")
        frame = frame.f_back
    return None


def check_snakemake_run() -> None:
    """check_partition() for the Snakemake run parsing this workflow (nothing when not started from the CLI)."""
    args = snakemake_args()
    if args is not None:
        check_partition(
            getattr(args, "executor", None),
            getattr(args, "default_resources", None),
            getattr(args, "set_resources", None),
            getattr(args, "slurm_partition_config", None),
        )
