"""The tables' column schemas (name, Arrow type), in the order the files have them, and a table built from
rows by its schema."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from .. import crossover

F, I, S = pa.float64(), pa.int64(), pa.string()  # noqa: E741 (column-type shorthands)
B = pa.bool_()

#: What a cell's ladder step asked for and what vLLM chose, in the measurement and cell tables alike.
STEP_SETTING_COLUMNS: list[tuple[str, pa.DataType]] = [
    ("gpu_memory_utilization", F),
    ("cudagraph_mode_requested", S),
    ("cudagraph_mode_effective", S),
    ("async_scheduling", B),
    ("model_runner", S),
]

#: The columns that name a cell, its model and its ladder step: first in measurements and cells.
CELL_ID_COLUMNS: list[tuple[str, pa.DataType]] = [
    ("run", S),
    ("model", S),
    ("model_params_b", F),
    ("tp", I),
    ("quantization", S),
    ("workload", S),
    ("config", S),
    ("method", S),
    ("group", S),
]
#: A cell's concurrency b (null: all prompts at once) and per-request latency: last in measurements, cells
#: and speedup (the drafter's side there), so tables of runs without them keep their other columns as they were.
LATENCY_METRICS = ("ttft_s_median", "ttft_s_p90", "tpot_s_median", "tpot_s_p90", "decode_tok_s")
CONCURRENCY_COLUMNS: list[tuple[str, pa.DataType]] = [("concurrency", I), *[(m, F) for m in LATENCY_METRICS]]
MEASUREMENT_COLUMNS: list[tuple[str, pa.DataType]] = [
    *CELL_ID_COLUMNS,
    ("repeat", I),
    ("status", S),
    ("error", S),
    ("prompts", I),
    ("input_tokens", I),
    ("output_tokens", I),
    ("input_tokens_mean", F),
    ("output_tokens_mean", F),
    ("engine_key", S),
    ("engine_position", I),
    ("import_s", F),
    ("engine_start_s", F),
    ("warmup_s", F),
    ("reset_s", F),
    ("gen_wall_s", F),
    ("prefill_probe_s", F),
    ("job_wall_s", F),
    ("output_tok_s", F),
    ("total_tok_s", F),
    ("engine_steps", I),
    ("tokens_per_step", F),
    ("step_time_ms", F),
    ("prefill_steps", I),
    ("decode_steps", I),
    ("decode_step_time_ms", F),
    ("prefill_share", F),
    ("drafts", I),
    ("draft_tokens", I),
    ("accepted", I),
    ("K", F),
    ("alpha", F),
    ("accepted_per_pos", pa.list_(I)),
    *STEP_SETTING_COLUMNS,
    ("gpu_util_mean", F),
    ("gpu_mem_max_mib", F),
    ("device_name", S),
    ("device_count", I),
    ("vllm_version", S),
    ("prompt_format", S),
    ("prompts_match_baseline", I),
    ("dataset_sha256", S),
    ("config_sha256", S),
    ("cell_path", S),
    *CONCURRENCY_COLUMNS,
    ("mean_running", F),
    ("max_running", I),
]
#: Per-cell statistics over repeats: for each of these the median, the 95 % interval and the CV.
#: The interval is over engine starts; K's and alpha's are over prompts (see prompt_interval).
STAT_METRICS = (
    "output_tok_s",
    "K",
    "alpha",
    "step_time_ms",
    "decode_step_time_ms",
    "tokens_per_step",
    "gpu_util_mean",
    "gen_wall_s",
    "prefill_share",
)
CELL_COLUMNS: list[tuple[str, pa.DataType]] = [
    *CELL_ID_COLUMNS,
    ("status", S),
    ("n", I),
    ("n_starts", I),
    ("replication", S),
    ("repeats", I),
    ("error", S),
    *[(f"{m}_{suffix}", F) for m in STAT_METRICS for suffix in ("median", "lo", "hi", "cv")],
    ("prompts", I),
    ("K_prompts", I),
    ("input_tokens_mean", F),
    ("output_tokens_mean", F),
    ("drafts", I),
    ("draft_tokens", I),
    ("accepted", I),
    ("accepted_per_pos", pa.list_(I)),
    *STEP_SETTING_COLUMNS,
    ("device_name", S),
    ("vllm_version", S),
    ("prompts_match_baseline_min", I),
    *CONCURRENCY_COLUMNS,
]
SPEEDUP_COLUMNS: list[tuple[str, pa.DataType]] = [
    ("run", S),
    ("model", S),
    ("model_params_b", F),
    ("workload", S),
    ("config", S),
    ("method", S),
    ("baseline", S),
    ("status", S),
    ("n", I),
    ("n_baseline", I),
    ("n_starts", I),
    ("n_starts_baseline", I),
    ("replication", S),
    ("speedup", F),
    ("speedup_lo", F),
    ("speedup_hi", F),
    ("band", F),
    ("verdict", S),
    ("gain_pct", F),
    ("K", F),
    ("K_lo", F),
    ("K_hi", F),
    ("alpha", F),
    ("R", F),
    ("R_lo", F),
    ("R_hi", F),
    ("R_decode", F),
    ("R_decode_lo", F),
    ("R_decode_hi", F),
    ("T", F),
    ("T_lo", F),
    ("T_hi", F),
    ("output_tok_s", F),
    ("baseline_output_tok_s", F),
    ("tokens_per_step", F),
    ("baseline_tokens_per_step", F),
    ("gen_wall_s", F),
    ("baseline_gen_wall_s", F),
    ("gpu_util_mean", F),
    ("baseline_gpu_util_mean", F),
    ("async_scheduling", B),
    ("baseline_async_scheduling", B),
    ("model_runner", S),
    ("baseline_model_runner", S),
    ("cudagraph_mode_effective", S),
    ("baseline_cudagraph_mode_effective", S),
    ("prompts", I),
    ("prompts_match_baseline", I),
    *CONCURRENCY_COLUMNS,
]
CROSSOVER_COLUMNS: list[tuple[str, pa.DataType]] = [(n, pa.type_for_alias(t)) for n, t in crossover.CROSSOVER_COLUMNS]


def _table(rows: list[dict[str, Any]], columns: list[tuple[str, pa.DataType]], meta: dict[str, str]) -> pa.Table:
    from ..frames import pandas_metadata  # pd.read_parquet gives each column its meant type

    fields = [pa.field(n, t) for n, t in columns]
    schema = pa.schema(fields, metadata={**meta, "pandas": pandas_metadata(pa.schema(fields))})
    return pa.Table.from_pylist([{n: r.get(n) for n, _ in columns} for r in rows], schema=schema)
