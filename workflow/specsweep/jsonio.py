"""Canonical JSON, hashing and atomic writes: nothing half-written is ever left at an output path."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from .errors import SpecsweepError


def canonical(obj: Any) -> str:
    """The canonical JSON text of obj (sorted keys, no spaces): the input of every content hash."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def sha256_obj(obj: Any) -> str:
    return sha256_text(canonical(obj))


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write data to path through a temporary file in the same folder and an atomic rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_json(path: Path, obj: Any) -> None:
    text = json.dumps(obj, sort_keys=True, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
    atomic_write_bytes(Path(path), text.encode("utf-8"))


def read_json(path: Path, what: str = "JSON file") -> Any:
    """Read a JSON file; a missing, empty, truncated or non-JSON file is a one-line SpecsweepError."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecsweepError(f"{what} {path}: file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecsweepError(f"{what} {path}: cannot be read ({exc})") from None
    if not text.strip():
        raise SpecsweepError(f"{what} {path}: file is empty")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise SpecsweepError(
            f"{what} {path}: not valid JSON (truncated or corrupt?): {exc.msg} at line {exc.lineno}"
        ) from None
