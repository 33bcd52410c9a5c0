"""All measurements of a run -> tables (Parquet, CSV, Markdown), GPU-time accounting and the claims table.

    measurements.parquet  one row per expected (cell, repeat): ok / failed / missing
    cells.parquet         one row per cell: n (measurements), n_starts (engine starts) and replication, median
                          and CV over its repeats, the 95 % interval over engine starts (stats.cell_ci; K and
                          alpha: over prompts, stats.prompt_bootstrap, where the cells hold per-request data)
    speedup.parquet       each non-baseline cell against the baseline cell of its model, workload and
                          concurrency: speedup (ratio of geometric means over engine starts) with its interval
                          (stats.speedup_ci; R and T: stats.ratio_ci; an exact ratio, the same
                          on every start, has none and says so in *_same_starts), the band and the verdict
                          (stats.VERDICT_RULE), the geometric means it divides, K, alpha, R,
                          R over decode steps, T (tokens-per-step ratio), per-request output tok/s (median and
                          p10 over requests) of both sides and its speedup, and the engine settings of both sides
    crossover.parquet     per (model, workload, drafter) measured at several concurrencies: the b* where its
                          speedup falls through 1, with its interval (see crossover.py); empty without that axis
    serve.parquet         runs with serve-mode steps only: per serve cell, vLLM's benchmark client's latencies
                          (TTFT, TPOT, ITL, E2EL: median, p90, p99 over requests), goodput under the config's
                          targets and whether the cell meets them (latency.py); served_vs_offline.parquet: a
                          served drafter's speedup beside the offline one at the same b; serve.md: both, and
                          where each step stops meeting the target (also the end of summary.md)
    gpu_time.json         seconds spent importing, starting engines, warming up, generating; generating_share
    claims.md             the article's claims decided by these tables (see claims.py)

A cell is named by its model, workload and ladder step; the step's column is `config`, as in the cell files
(their `config` key), the name both had before the code called it a step, kept so that every table and cell
already written reads the same.

Like with like: a cell is only compared with a baseline cell measured under the same conditions (vLLM and
torch version, device, driver, dtype, sampling, dataset, engine settings other than the ladder's own levers);
the repeats of one cell must agree on those and on the settings vLLM chose. Staleness: a measurement whose
settings differ from what the current config says for its cell is refused by name, with the differing keys.
Either check can be overridden (--allow-mismatch, --allow-stale); the override is recorded in the metadata.

The unit of replication is the engine start: the passes of one engine start are reduced to one value
(stats.per_start) before an interval is taken, so passes on one engine (`engine_per_repeat: false`) give a cell
n_starts = 1, replication "passes on one engine", no interval and the verdict `undecided (technical replicates)`.

Concurrency: a cell measured at a concurrency b (workload `code@b8`, settings.workload.concurrency) has b in
its `concurrency` column (null: all prompts submitted at once, the article's point), and is compared with the
baseline at the same b, never across b. Its per-request latency (TTFT, TPOT: medians and p90 over requests)
and decode-only throughput come from the cell's `latency` block; null for cells that lack one.

The package, by job: `schema` (the column schemas), `conditions` (like with like, staleness), `load` (the
measurement rows), `rows` (the cell and speedup rows), `serving` (the serve-mode tables), `accounting`
(gpu_time), `markdown` (summary.md),
`fileset` (the files, their manifest and the checked reader `read_parquet`); this module builds a set from them
and keeps every name importable as `specsweep.tables.<name>`.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any, cast

import pyarrow.csv as pacsv

from .. import crossover, stats
from ..config import Study
from ..escape import md_code
from .accounting import DECIDED, gpu_time, host_cpu_line
from .conditions import _levers, comparable, differing, same_cell_conditions, stale_keys
from .fileset import (
    MANIFEST,
    REPLICATION_META,
    SERVE_FILES,
    UNCHECKED_META,
    _parquet_bytes,
    check_tables_run,
    checked_bytes,
    manifest_files,
    manifest_sha256,
    read_parquet,
    read_run_table,
    replication_of,
    set_aside_damaged,
    set_run,
    table_files,
    unchecked_tables,
    write_set,
)
from .load import (
    STEP_KEYS,
    _b,
    archive_unchecked,
    cell_identity,
    concurrency_of,
    edited_since_archived,
    failure_error,
    load_measurements,
)
from .markdown import _ci, _fmt, _replication, summary_markdown
from .rows import _label, _one, cell_rows, compare_cells, prompt_interval, speedup_rows
from .schema import (
    CELL_COLUMNS,
    CELL_ID_COLUMNS,
    CONCURRENCY_COLUMNS,
    CROSSOVER_COLUMNS,
    LATENCY_METRICS,
    MEASUREMENT_COLUMNS,
    SERVE_COLUMNS,
    SERVED_OFFLINE_COLUMNS,
    SPEEDUP_COLUMNS,
    STAT_METRICS,
    STEP_SETTING_COLUMNS,
    B,
    CellRow,
    Docs,
    F,
    I,
    MeasurementRow,
    Mismatch,
    S,
    ServedOfflineRow,
    ServeRow,
    SpeedupRow,
    Stale,
    _table,
)
from .serving import serve_markdown, serve_rows, served_vs_offline_rows

__all__ = [
    "CellRow",
    "Docs",
    "MeasurementRow",
    "Mismatch",
    "ServeRow",
    "ServedOfflineRow",
    "SpeedupRow",
    "Stale",
    "B",
    "CELL_COLUMNS",
    "CELL_ID_COLUMNS",
    "CONCURRENCY_COLUMNS",
    "CROSSOVER_COLUMNS",
    "DECIDED",
    "LATENCY_METRICS",
    "MANIFEST",
    "MEASUREMENT_COLUMNS",
    "REPLICATION_META",
    "SERVED_OFFLINE_COLUMNS",
    "SERVE_COLUMNS",
    "SERVE_FILES",
    "SPEEDUP_COLUMNS",
    "STAT_METRICS",
    "STEP_KEYS",
    "STEP_SETTING_COLUMNS",
    "UNCHECKED_META",
    "F",
    "I",
    "S",
    "_b",
    "_ci",
    "_fmt",
    "_label",
    "_levers",
    "_one",
    "_parquet_bytes",
    "_replication",
    "_table",
    "archive_unchecked",
    "build_tables",
    "cell_identity",
    "cell_rows",
    "check_tables_run",
    "checked_bytes",
    "comparable",
    "compare_cells",
    "concurrency_of",
    "differing",
    "edited_since_archived",
    "failure_error",
    "gpu_time",
    "host_cpu_line",
    "load_measurements",
    "manifest_files",
    "manifest_sha256",
    "prompt_interval",
    "read_parquet",
    "read_run_table",
    "replication_of",
    "same_cell_conditions",
    "serve_markdown",
    "serve_rows",
    "served_vs_offline_rows",
    "set_aside_damaged",
    "set_run",
    "speedup_rows",
    "stale_keys",
    "summary_markdown",
    "table_files",
    "unchecked_tables",
    "write_set",
]


def build_tables(
    study: Study, results: Path, out: Path, allow_mismatch: bool = False, allow_stale: bool = False
) -> dict[str, Any]:
    from .. import claims
    from ..jsonio import check_replaceable

    check_replaceable(Path(out), "tables", study.run)  # before the work; write_set checks again
    rows, docs, stale = load_measurements(study, Path(results), allow_stale)
    unchecked = archive_unchecked(Path(results), study.run, len(docs))
    mismatches: list[Mismatch] = []
    crow = cell_rows(study, rows, docs, allow_mismatch, mismatches)
    sp = speedup_rows(study, rows, crow, docs, allow_mismatch, mismatches)
    xrows = crossover.crossover_rows(sp)
    gt = gpu_time(study, rows, docs, sp)
    meta = {
        "specsweep.run": study.run,
        "specsweep.repeats": str(study.repeats),
        "specsweep.baseline": study.baseline,
        **({} if study.replication == stats.ENGINE_STARTS else {REPLICATION_META: "false"}),
        "specsweep.allow_mismatch": json.dumps(allow_mismatch),
        "specsweep.mismatches": json.dumps(mismatches, sort_keys=True),
        "specsweep.allow_stale": json.dumps(allow_stale),
        "specsweep.stale": json.dumps(stale, sort_keys=True),
        **({UNCHECKED_META: json.dumps(unchecked)} if unchecked else {}),
    }
    out = Path(out)
    m_table = _table(rows, MEASUREMENT_COLUMNS, meta)
    c_table = _table(crow, CELL_COLUMNS, meta)
    s_table = _table(sp, SPEEDUP_COLUMNS, meta)
    # C1-C8 are the article's, about its point (all prompts at once): decided by the cells there; C9 (below b*
    # the drafter pays, above it costs) by the crossovers, for runs with a concurrency axis only
    # (claims reads the rows as plain dicts)
    m_rows = cast("list[dict[str, Any]]", rows)
    c_rows, s_rows = cast("list[dict[str, Any]]", crow), cast("list[dict[str, Any]]", sp)
    at_point = [c for c in c_rows if c["concurrency"] is None], [s for s in s_rows if s["concurrency"] is None]
    decided = claims.decide(study, *at_point, m_rows, every_cell=c_rows) + (
        [claims.decide_c9(study, xrows, s_rows, m_rows)] if xrows else []
    )
    readme = claims.readme_sentence(study, c_rows, s_rows, decided)
    if xrows:
        readme += " " + crossover.sentence(xrows, study.baseline)
    # a run with serve-mode steps: its serve tables, and their section at the end of the summary
    srows = serve_rows(study, crow, sp, docs) if study.serves else []
    vrows = served_vs_offline_rows(study, crow, sp, docs) if study.serves else []
    serve_md = serve_markdown(study, srows, vrows) if study.serves else []
    csv_buf = io.BytesIO()
    pacsv.write_csv(c_table.drop_columns(["accepted_per_pos"]), csv_buf)
    files = {
        "measurements.parquet": _parquet_bytes(m_table),
        "cells.parquet": _parquet_bytes(c_table),
        "speedup.parquet": _parquet_bytes(s_table),
        "crossover.parquet": _parquet_bytes(_table(xrows, CROSSOVER_COLUMNS, meta)),
        "cells.csv": csv_buf.getvalue(),
        "summary.md": summary_markdown(study, crow, sp, gt, xrows, host_cpu_line(docs), serve_md).encode(),
        "gpu_time.json": (json.dumps(gt, indent=2, sort_keys=True) + "\n").encode(),
        "claims.md": claims.markdown(study, decided).encode(),
        "claims.json": (json.dumps(decided, indent=2, sort_keys=True, allow_nan=False) + "\n").encode(),
        "readme.md": (readme + "\n").encode(),
    }
    if study.serves:
        files |= {
            "serve.parquet": _parquet_bytes(_table(srows, SERVE_COLUMNS, meta)),
            "served_vs_offline.parquet": _parquet_bytes(_table(vrows, SERVED_OFFLINE_COLUMNS, meta)),
            "serve.md": ("\n".join([f"# specsweep run {md_code(study.run)}: serving", "", *serve_md]) + "\n").encode(),
        }
    write_set(out, files, "tables", study.run)
    return {
        "cells": len(crow),
        "ok": sum(r["status"] == "ok" for r in crow),
        "mismatches": mismatches,
        "stale": stale,
        "unchecked": unchecked,
    }
