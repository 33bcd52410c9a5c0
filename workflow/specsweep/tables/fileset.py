"""A tables set as files: their names, Parquet bytes, the MANIFEST.json that checks them, the checked reader,
the set written as a whole and damaged files set aside."""

from __future__ import annotations

import io
import json
import os
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from .. import stats
from ..errors import SpecsweepError
from ..jsonio import read_json

#: The tables of a run with serve-mode steps (tables.serving); other runs' sets are without them.
SERVE_FILES = ("serve.parquet", "served_vs_offline.parquet", "serve.md")


def table_files(serves: bool = False) -> tuple[str, ...]:
    """The files of a tables set; `serves`: the run has serve-mode steps (config.Study.serves)."""
    return (
        "measurements.parquet",
        "cells.parquet",
        "speedup.parquet",
        "crossover.parquet",
        "cells.csv",
        "summary.md",
        "gpu_time.json",
        "claims.md",
        "claims.json",
        "readme.md",
    ) + (SERVE_FILES if serves else ())


def _parquet_bytes(table: pa.Table) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="zstd", write_statistics=False)
    return buf.getvalue()


#: The tables' metadata key listing what could not be checked (a JSON list of lines; absent: nothing).
UNCHECKED_META = "specsweep.unchecked"


def unchecked_tables(tables_dir: Path) -> list[str]:
    """What could not be checked about a tables set: its files, when it has no MANIFEST.json, and what the
    tables themselves record they could not check (UNCHECKED_META of cells.parquet)."""
    tables_dir = Path(tables_dir)
    out = []
    if not (tables_dir / MANIFEST).is_file():
        out.append(
            f"tables {tables_dir}: no {MANIFEST}, so whether its files are the ones specsweep wrote could not be "
            "checked (rebuild them: snakemake, or specsweep tables)"
        )
    meta = read_parquet(tables_dir, "cells.parquet").schema.metadata or {}
    recorded = meta.get(UNCHECKED_META.encode())
    try:
        lines = json.loads(recorded) if recorded else []
    except ValueError:
        lines = None
    if not isinstance(lines, list) or not all(isinstance(x, str) for x in lines):
        raise SpecsweepError(f"tables {tables_dir / 'cells.parquet'}: metadata {UNCHECKED_META} is not a list of lines")
    return out + [f"tables {tables_dir}: {line}" for line in lines]


def table_run(table: pa.Table) -> str:
    """The run a table names (metadata specsweep.run); "" where it names none (a table written by hand)."""
    return ((table.schema.metadata or {}).get(b"specsweep.run") or b"").decode()


def check_tables_run(tables_dir: Path, table: pa.Table, run: str) -> None:
    """One line when a table of `tables_dir` names another run than `run` (metadata specsweep.run): figures
    or a validation drawn from it would be written under `run`'s name."""
    have = table_run(table)
    if have and have != run:
        raise SpecsweepError(
            f"tables {tables_dir}: the tables of run '{have}', not of run '{run}'; give run {run}'s tables "
            f"(results/{run}/tables)"
        )


def set_run(tables_dir: Path) -> str | None:
    """The run a tables set belongs to: the one its MANIFEST.json names, else the one cells.parquet names
    (metadata specsweep.run); None where neither does (tables written by hand)."""
    tables_dir = Path(tables_dir)
    if (tables_dir / MANIFEST).is_file():
        doc = read_json(tables_dir / MANIFEST, "tables manifest")
        if isinstance(doc, dict) and isinstance(doc.get("run"), str):
            return str(doc["run"])
    if (tables_dir / "cells.parquet").is_file():
        return table_run(read_parquet(tables_dir, "cells.parquet")) or None
    return None


def read_run_table(tables_dir: Path, name: str) -> pa.Table:
    """A table of a set (read_parquet) that must be of the set's own run (set_run): a measurements.parquet
    copied in from another run's tables is a one-line error naming the file and both runs, not a plan or an
    advice drawn from the wrong run."""
    table = read_parquet(tables_dir, name)
    run, have = set_run(tables_dir), table_run(table)
    if run and have and have != run:
        raise SpecsweepError(
            f"tables {Path(tables_dir) / name}: a table of run '{have}' in the tables of run '{run}' (copied in "
            "from another run?); rebuild the tables (snakemake, or specsweep tables)"
        )
    return table


MANIFEST = "MANIFEST.json"


def manifest_sha256(tables_dir: Path) -> str | None:
    """The sha256 of a tables set's MANIFEST.json (which holds every file's sha256): one hash naming the whole
    set, which the figures drawn from it record. None for a folder without one."""
    import hashlib

    path = Path(tables_dir) / MANIFEST
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None


def manifest_files(tables_dir: Path) -> dict[str, str]:
    """{file name: sha256} that a set's MANIFEST.json records ({} when it has none; a manifest written before
    they named their kind and run is that mapping alone)."""
    mpath = Path(tables_dir) / MANIFEST
    if not mpath.is_file():
        return {}
    doc = read_json(mpath, "tables manifest")
    files = doc.get("files") if isinstance(doc, dict) and "kind" in doc else doc
    if not isinstance(files, dict) or not all(isinstance(v, str) for v in files.values()):
        raise SpecsweepError(f"tables manifest {mpath}: not a mapping of file names to sha256; rebuild the tables")
    return files


def checked_bytes(tables_dir: Path, name: str) -> bytes:
    """A file of a tables set, read once and checked against the set's MANIFEST.json (when the folder has one:
    tables written by hand have none): a truncated or changed file is a one-line error naming it."""
    import hashlib

    path = Path(tables_dir) / name
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise SpecsweepError(
            f"tables {path}: file not found (build the tables: snakemake, or specsweep tables)"
        ) from None
    except OSError as exc:
        raise SpecsweepError(f"tables {path}: cannot be read ({exc})") from None
    mpath = path.parent / MANIFEST
    if mpath.is_file():
        want = manifest_files(Path(tables_dir)).get(name)
        if want is None:
            raise SpecsweepError(
                f"tables {path}: not listed in {mpath}; rebuild the tables (snakemake, or specsweep tables)"
            )
        if hashlib.sha256(data).hexdigest() != want:
            raise SpecsweepError(
                f"tables {path}: {len(data)} bytes whose sha256 is not the one {mpath} records (truncated or "
                "changed since the tables were written); rebuild the tables (snakemake, or specsweep tables)"
            )
    return data


#: The tables' metadata key of a run whose repeats are passes on one engine ("false"; absent: engine starts).
REPLICATION_META = "specsweep.engine_per_repeat"


def replication_of(meta: dict[str, str]) -> str:
    """A run's replication (config.Study.replication) from its tables' metadata."""
    return stats.ONE_ENGINE if meta.get(REPLICATION_META) == "false" else stats.ENGINE_STARTS


def read_parquet(tables_dir: Path, name: str) -> pa.Table:
    """A Parquet table of a tables set (checked_bytes), or a one-line error naming the file."""
    path = Path(tables_dir) / name
    data = checked_bytes(tables_dir, name)
    # parsed from a copy Arrow owns, not from the Python bytes: the read's worker threads drop their last
    # reference to its source after read_table returns, and dropping a Python object takes the GIL; a worker
    # doing that while the interpreter exits (an error just after a read) is ended by pthread_exit inside a C++
    # destructor, and the process aborts ("terminate called without an active exception", status 134)
    sink = pa.BufferOutputStream()
    sink.write(data)
    try:
        return pq.read_table(pa.BufferReader(sink.getvalue()))
    except (pa.ArrowException, OSError, ValueError) as exc:
        first = (str(exc).strip().splitlines() or [""])[0][:160]
        raise SpecsweepError(f"tables {path}: not a readable Parquet file ({type(exc).__name__}: {first})") from None


def set_aside_damaged(tables_dir: Path, names: Sequence[str]) -> list[tuple[Path, Path]]:
    """Move the files `names` of a tables set that are not what its MANIFEST.json records (truncated, changed),
    and a manifest that cannot be read, out of the set into `{tables}.damaged/` beside it (kept as evidence,
    stamped with the time). The workflow calls this before it plans: Snakemake rebuilds a job whose output is
    missing, so the rebuild a damaged table's error asks for ("rebuild the tables: snakemake") happens instead
    of "Nothing to be done". Returns (file, where it went) for each file moved."""
    import hashlib
    import time

    tables_dir = Path(tables_dir)
    mpath = tables_dir / MANIFEST
    if not mpath.is_file():
        return []  # nothing to check by; the manifest is an output of the tables job, so it is rebuilt
    try:
        listed = manifest_files(tables_dir)
    except SpecsweepError:
        damaged = [mpath]  # an unreadable manifest vouches for nothing
    else:
        damaged = [
            tables_dir / n
            for n in names
            if (tables_dir / n).is_file() and listed.get(n) != hashlib.sha256((tables_dir / n).read_bytes()).hexdigest()
        ]
    aside = tables_dir.parent / f"{tables_dir.name}.damaged"
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    moved = []
    for path in damaged:
        aside.mkdir(exist_ok=True)
        to = aside / f"{path.name}.{stamp}"
        os.replace(path, to)
        moved.append((path, to))
    return moved


def write_set(out: Path, files: dict[str, bytes], kind: str, run: str) -> None:
    """Write a set of files (the tables, the validation) as a whole: into a staging folder, then swapped in (all
    old or all new), with a MANIFEST.json naming the set's kind and run and every file's sha256. `out` is
    replaced only when it is a set of the same kind and run (jsonio.check_replaceable)."""
    import hashlib

    from ..jsonio import staging_dir, swap_dir

    out = Path(out)
    staged = staging_dir(out, kind, run)
    try:
        for name, data in files.items():
            (staged / name).write_bytes(data)
        hashes = {name: hashlib.sha256(data).hexdigest() for name, data in sorted(files.items())}
        manifest = {"kind": kind, "run": run, "files": hashes}
        (staged / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
        for p in staged.iterdir():
            os.chmod(p, 0o644)
        swap_dir(staged, out)
    except BaseException:
        import shutil

        shutil.rmtree(staged, ignore_errors=True)
        raise
