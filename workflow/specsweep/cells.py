"""Cell JSON: the schema, loading with one-line errors, and the flat row the tables are made of."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from .errors import SpecsweepError
from .jsonio import read_json

SCHEMA_PATH = Path(__file__).resolve().parent.parent / "schemas" / "cell.schema.yaml"
UNITS = {"time": "s", "throughput": "tok/s", "memory": "MiB", "utilisation": "%", "step_time": "ms"}


@lru_cache(maxsize=1)
def _validator() -> jsonschema.Draft202012Validator:
    with open(SCHEMA_PATH, encoding="utf-8") as fh:
        return jsonschema.Draft202012Validator(yaml.safe_load(fh))


def validate(doc: Any, where: str) -> None:
    errors = sorted(_validator().iter_errors(doc), key=lambda e: len(list(e.absolute_path)))
    if errors:
        err = errors[0]
        path = ".".join(str(p) for p in err.absolute_path) or "(top level)"
        raise SpecsweepError(f"cell {where}: {path}: {err.message}")


def load(path: Path, expect: tuple[str, str, str, str] | None = None) -> dict[str, Any]:
    """Load and validate a cell; with expect=(run, model, workload, config) it must also be that cell."""
    doc = read_json(Path(path), "cell")
    validate(doc, str(path))
    if expect is not None:
        got = (doc["run"], doc["model"], doc["workload"], doc["config"])
        if got != expect:
            raise SpecsweepError(
                f"cell {path}: holds {'/'.join(got[1:])} of run {got[0]}, but its path says "
                f"{'/'.join(expect[1:])} of run {expect[0]}"
            )
    return doc
