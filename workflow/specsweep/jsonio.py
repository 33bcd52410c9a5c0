"""Canonical JSON, hashing and atomic writes: nothing half-written is ever left at an output path."""

from __future__ import annotations

import glob
import hashlib
import json
import math
import os
import re
import socket
import stat
import tempfile
import time
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


class JsonRefused(Exception):
    """JSON that parses but is not data this pipeline accepts (duplicate key, NaN, Infinity)."""


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise JsonRefused(f"duplicate key {key[:60]!r} in one object")
        out[key] = value
    return out


def _constant(name: str) -> Any:
    raise JsonRefused(f"{name} is not a number JSON allows")


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise JsonRefused(f"{text[:40]} is too large a number (it overflows to infinity)")
    return value


def loads_strict(text: str) -> Any:
    """json.loads that raises JsonRefused for a duplicate key, NaN, Infinity or a float overflowing to inf."""
    return json.loads(text, object_pairs_hook=_pairs, parse_constant=_constant, parse_float=_float)


def parse_json(text: str, where: str) -> Any:
    """Strict JSON: no duplicate keys, no NaN or Infinity; every refusal is one line starting with `where`."""
    try:
        return loads_strict(text)
    except JsonRefused as exc:
        raise SpecsweepError(f"{where}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise SpecsweepError(
            f"{where}: not valid JSON (truncated or corrupt?): {exc.msg} at line {exc.lineno}"
        ) from None
    except (ValueError, RecursionError) as exc:  # a 5000-digit integer, nesting deeper than Python's stack
        raise SpecsweepError(f"{where}: not valid JSON ({type(exc).__name__}: {exc})") from None


#: The largest JSON or text file a command reads whole (a cell, a replay report, a traffic file): far above any
#: this pipeline writes, far below what fills the memory of the machine reading it.
MAX_READ_BYTES = 256 << 20


def open_bounded(path: Path, what: str, max_bytes: int = MAX_READ_BYTES) -> Any:
    """A binary file object of ``path`` when it is a regular file of at most ``max_bytes`` (a device such as
    /dev/zero, a FIFO or a folder is refused before anything is read); every refusal one line naming it."""
    path = Path(path)
    try:  # non-blocking: opening a FIFO to read would wait for a writer
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise SpecsweepError(f"{what} {path}: file not found") from None
    except OSError as exc:
        raise SpecsweepError(f"{what} {path}: cannot be read ({exc.strerror or type(exc).__name__})") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise SpecsweepError(f"{what} {path}: not a regular file (a device, pipe or folder)")
    if st.st_size > max_bytes:
        os.close(fd)
        raise SpecsweepError(f"{what} {path}: {st.st_size} bytes, more than the {max_bytes} this reads")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def read_text_bounded(path: Path, what: str, max_bytes: int = MAX_READ_BYTES) -> str:
    """The UTF-8 text of a regular file of at most ``max_bytes`` without NUL bytes (binary content); every
    refusal one line naming the file."""
    with open_bounded(path, what, max_bytes) as fh:
        data = fh.read(max_bytes + 1)
    if len(data) > max_bytes:  # grew while being read
        raise SpecsweepError(f"{what} {path}: more than the {max_bytes} bytes this reads")
    nul = data.find(b"\0")
    if nul >= 0:
        raise SpecsweepError(f"{what} {path}: binary content (a NUL byte at offset {nul}), not text")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecsweepError(f"{what} {path}: not UTF-8 text (at byte {exc.start})") from None


def read_json(path: Path, what: str = "JSON file", max_bytes: int = MAX_READ_BYTES) -> Any:
    """Read a JSON file; a missing, empty, truncated, non-JSON file, a duplicated key, NaN or Infinity, a
    file that is not a regular file or larger than ``max_bytes`` is a one-line SpecsweepError."""
    text = read_text_bounded(Path(path), what, max_bytes)
    if not text.strip():
        raise SpecsweepError(f"{what} {path}: file is empty")
    return parse_json(text, f"{what} {path}")


#: A staging folder of a process that died (kill -9) is removed by the next write of the same set once it is
#: this old, when its name does not say which process made it (folders made before names carried the pid).
UNNAMED_STAGING_AGE_S = 3600.0


def _owner_tag() -> str:
    """`{host}-{pid}` of this process, as staging folder names carry it (the host without '-')."""
    host = re.sub(r"[^A-Za-z0-9.]", "_", socket.gethostname()) or "_"
    return f"{host}-{os.getpid()}"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def clean_staging(final: Path) -> list[Path]:
    """Remove the staging (`.{name}.new-*`) and swapped-out (`.{name}.old-*`, while `final` exists) folders
    beside `final` that a killed write left: only this user's real folders (no symlinks) whose process, named
    in the folder name (`{host}-{pid}`), is on this host and has ended. A live one of a concurrent write, one
    of another host and one whose pid is running again are kept. Returns the folders removed."""
    import shutil

    final = Path(final)
    tag = re.compile(r"(?P<host>[A-Za-z0-9._]+)-(?P<pid>[0-9]+)(?:-[A-Za-z0-9_]*)?")
    host = _owner_tag().rsplit("-", 1)[0]
    removed = []
    for kind in ("new", "old"):
        prefix = f".{final.name}.{kind}-"
        if kind == "old" and not final.exists():
            continue  # recover_dir() puts the newest back
        for p in sorted(final.parent.glob(f"{glob.escape(prefix)}*")):
            try:
                st = p.lstat()
            except OSError:
                continue
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
                continue
            m = tag.fullmatch(p.name[len(prefix) :])
            if m:
                stale = m["host"] == host and int(m["pid"]) != os.getpid() and not _pid_alive(int(m["pid"]))
            else:  # made before names carried their process
                stale = time.time() - st.st_mtime > UNNAMED_STAGING_AGE_S
            if stale:
                shutil.rmtree(p, ignore_errors=True)
                removed.append(p)
    return removed


#: The manifest a set of files (tables, validation) carries: {"kind", "run", "files": {name: sha256}}.
SET_MANIFEST = "MANIFEST.json"
#: The file that says what specsweep wrote into a folder, for the folders whose manifest is not SET_MANIFEST:
#: figures (their manifest.json: "kind", "run"), a built or dummy model and a built tokenizer (their
#: provenance file names the kind; a model folder belongs to no run).
_OWN_FILES = {"manifest.json": "figures", "specsweep-model.json": "model", "specsweep-tokenizer.json": "tokenizer"}
_SHA256 = re.compile(r"[0-9a-f]{64}")


def set_identity(folder: Path) -> tuple[str, str | None] | None:
    """(kind, run) of a folder specsweep wrote, as its manifest names them; None for any other folder (or a
    manifest that cannot be read). Sets written before manifests named their kind are recognised by their
    shape: a MANIFEST.json of file hashes (tables when it lists cells.parquet, validation when it lists
    validation.md; run unknown) and a figures manifest.json with "run" and "figures"."""
    folder = Path(folder)
    for name, kind in ((SET_MANIFEST, None), *_OWN_FILES.items()):
        path = folder / name
        if not path.is_file() or path.is_symlink():
            continue
        try:
            doc = loads_strict(path.read_text(encoding="utf-8"))
        except (OSError, ValueError, JsonRefused, RecursionError):
            return None
        if not isinstance(doc, dict):
            return None
        if kind in ("model", "tokenizer"):
            return kind, None
        got, run = doc.get("kind"), doc.get("run")
        if isinstance(got, str) and (run is None or isinstance(run, str)):
            return got, run
        if kind == "figures" and isinstance(run, str) and "figures" in doc:
            return "figures", run
        if kind is None and doc and all(isinstance(v, str) and _SHA256.fullmatch(v) for v in doc.values()):
            legacy = "tables" if "cells.parquet" in doc else "validation" if "validation.md" in doc else None
            return (legacy, None) if legacy else None
        return None
    return None


def _holds_files(folder: Path) -> bool:
    """Whether anything but folders lies below `folder` (links are not followed, and count as something)."""
    for root, dirs, files in os.walk(folder):
        if files or any(os.path.islink(os.path.join(root, d)) for d in dirs):
            return True
    return False


def check_replaceable(out: Path, kind: str, run: str | None = None) -> None:
    """Refuse, in one line naming it, to replace the folder `out` unless it does not exist, holds no file, or is
    specsweep's own `kind` output of `run` (set_identity; a set whose manifest does not name its run, or a
    `run` of None, matches any run). Every command that swaps a folder in place calls this first, so a
    mistyped --out (`results/smoke`, `.`, `figures`) is never removed."""
    out = Path(out)
    if out.is_symlink():
        raise SpecsweepError(f"output folder {out}: a symbolic link; not replaced (give the folder itself)")
    if not out.exists():
        return
    if not out.is_dir():
        raise SpecsweepError(f"output folder {out}: exists and is not a folder; not replaced")
    if not _holds_files(out):  # empty, or only the empty folders Snakemake makes for a rule's outputs
        return
    got = set_identity(out)
    if got is not None and got[0] == kind and (run is None or got[1] in (None, run)):
        return
    if got is None:
        what = f"no manifest in it says it is specsweep's {kind}"
    elif got[0] != kind:
        what = f"it holds specsweep's {got[0]}, not {kind}"
    else:
        what = f"it holds the {kind} of run '{got[1]}', not of run '{run}'"
    raise SpecsweepError(
        f"output folder {out}: exists and {what}; nothing replaced (remove it yourself, or give another --out)"
    )


def staging_dir(final: Path, kind: str, run: str | None) -> Path:
    """A fresh sibling folder to write a set of files into before swap_dir() puts it in place; refused first
    when `final` is a folder the set may not replace (check_replaceable); the staging folders that killed
    writes left beside it are removed first (clean_staging)."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    recover_dir(final)
    check_replaceable(final, kind, run)
    clean_staging(final)
    return Path(tempfile.mkdtemp(prefix=f".{final.name}.new-{_owner_tag()}-", dir=final.parent))


def recover_dir(final: Path) -> None:
    """After a kill between the two renames of swap_dir(): put the previous set back."""
    final = Path(final)
    if not final.exists():
        old = sorted(final.parent.glob(f".{final.name}.old-*"))
        if old:
            os.replace(old[-1], final)


def swap_dir(staged: Path, final: Path) -> None:
    """Replace the folder `final` by `staged` as a whole: a reader sees all old files or all new ones, never a
    mix (a kill between the two renames leaves the old set beside it, which recover_dir() restores)."""
    import shutil

    staged, final = Path(staged), Path(final)
    for p in staged.rglob("*"):
        if p.is_file():
            with open(p, "rb") as fh:
                os.fsync(fh.fileno())
    old = None
    if final.exists():
        old = final.parent / f".{final.name}.old-{_owner_tag()}"
        os.replace(final, old)
    os.replace(staged, final)
    os.chmod(final, 0o755)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
