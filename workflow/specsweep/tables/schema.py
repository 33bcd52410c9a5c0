"""The tables' column schemas (name, Arrow type), in the order the files have them, and a table built from
rows by its schema."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, TypedDict

import pyarrow as pa

from .. import crossover, latency

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
    ("output_tok_s_gm", F),
    ("request_tok_s_median", F),
    ("request_tok_s_p10", F),
    ("prompts", I),
    ("K_prompts", I),
    ("K_same_prompts", I),
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
    ("K_same_prompts", I),
    ("R_same_starts", I),
    ("R_decode_same_starts", I),
    ("T_same_starts", I),
    ("output_tok_s", F),
    ("baseline_output_tok_s", F),
    ("request_tok_s_median", F),
    ("baseline_request_tok_s_median", F),
    ("request_tok_s_p10", F),
    ("baseline_request_tok_s_p10", F),
    ("request_speedup", F),
    ("request_speedup_p10", F),
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
#: serve.parquet (runs with serve-mode steps only): one row per serve-mode cell, vLLM's benchmark client's view of
#: it: output and request throughput, each latency's median, p90 and p99 over requests (per repeat; here the
#: median over repeats), goodput under the config's targets (serve.goodput, each target a column), whether the
#: cell meets them (latency.TARGET_RULE), and the speedup over the serve baseline at the same b.
SERVE_COLUMNS: list[tuple[str, pa.DataType]] = [
    ("run", S),
    ("model", S),
    ("workload", S),
    ("config", S),
    ("method", S),
    ("baseline", S),
    ("concurrency", I),
    ("request_rate", F),
    ("status", S),
    ("n", I),
    ("n_starts", I),
    ("output_tok_s", F),
    ("request_throughput", F),
    *[(f"{m}_ms_{q}", F) for m in latency.LATENCIES for q in latency.QUANTILES],
    *[(f"target_{m}_ms", F) for m in latency.TARGETS],
    ("request_goodput", F),
    ("goodput_share", F),
    ("meets_target", B),
    ("speedup", F),
    ("speedup_lo", F),
    ("speedup_hi", F),
    ("verdict", S),
]
#: served_vs_offline.parquet (runs with serve-mode steps only): each serve-mode drafter cell's speedup over the
#: serve baseline beside the speedup of the offline step with the same ladder settings over the offline baseline,
#: at the same (model, workload, b), where both were measured under the same conditions (tables.conditions, less
#: the mode itself); `status` says when there is nothing to compare and `note` why.
SERVED_OFFLINE_COLUMNS: list[tuple[str, pa.DataType]] = [
    ("run", S),
    ("model", S),
    ("workload", S),
    ("concurrency", I),
    ("config", S),
    ("baseline", S),
    ("offline_config", S),
    ("offline_baseline", S),
    ("status", S),
    ("note", S),
    ("served_speedup", F),
    ("served_speedup_lo", F),
    ("served_speedup_hi", F),
    ("served_verdict", S),
    ("offline_speedup", F),
    ("offline_speedup_lo", F),
    ("offline_speedup_hi", F),
    ("offline_verdict", S),
    ("speedup_ratio", F),
    ("served_output_tok_s", F),
    ("offline_output_tok_s", F),
    ("served_n_starts", I),
    ("offline_n_starts", I),
]


def _table(rows: Sequence[Mapping[str, Any]], columns: list[tuple[str, pa.DataType]], meta: dict[str, str]) -> pa.Table:
    from ..frames import pandas_metadata  # pd.read_parquet gives each column its meant type

    fields = [pa.field(n, t) for n, t in columns]
    schema = pa.schema(fields, metadata={**meta, "pandas": pandas_metadata(pa.schema(fields))})
    return pa.Table.from_pylist([{n: r.get(n) for n, _ in columns} for r in rows], schema=schema)


# ------------------------------------------------------------------ the rows, typed (what the code puts in them)


class Mismatch(TypedDict):
    """A cell compared across other measurement conditions (tables' metadata specsweep.mismatches): between its
    repeats or with its baseline cell, and the differing fields."""

    cell: str
    between: Literal["repeats", "baseline"]
    fields: list[str]


class Stale(TypedDict):
    """A measurement made with other settings than the config now gives (specsweep.stale): the cell repeat's
    label and the differing setting keys (dotted)."""

    cell: str
    keys: list[str]


#: A run's cell documents by (model, workload, step, b, repeat), b the concurrency (0: all prompts at once).
Docs = dict[tuple[str, str, str, int, int], dict[str, Any]]


class MeasurementRow(TypedDict, total=False):
    """A row of measurements.parquet (MEASUREMENT_COLUMNS): one expected (cell, repeat), ok, failed or
    missing; its `_` keys are not columns."""

    run: str
    model: str
    model_params_b: float
    tp: int
    quantization: str | None
    workload: str
    config: str
    method: str
    group: str | None
    repeat: int
    status: str
    error: str | None
    prompts: int | None
    input_tokens: int | None
    output_tokens: int | None
    input_tokens_mean: float | None
    output_tokens_mean: float | None
    engine_key: str | None
    engine_position: int | None
    import_s: float | None
    engine_start_s: float | None
    warmup_s: float | None
    reset_s: float | None
    gen_wall_s: float | None
    prefill_probe_s: float | None
    job_wall_s: float | None
    output_tok_s: float | None
    total_tok_s: float | None
    engine_steps: int | None
    tokens_per_step: float | None
    step_time_ms: float | None
    prefill_steps: int | None
    decode_steps: int | None
    decode_step_time_ms: float | None
    prefill_share: float | None
    drafts: int | None
    draft_tokens: int | None
    accepted: int | None
    K: float | None
    alpha: float | None
    accepted_per_pos: list[int] | None
    gpu_memory_utilization: float | None
    cudagraph_mode_requested: str | None
    cudagraph_mode_effective: str | None
    async_scheduling: bool | None
    model_runner: str | None
    gpu_util_mean: float | None
    gpu_mem_max_mib: float | None
    device_name: str | None
    device_count: int | None
    vllm_version: str | None
    prompt_format: str | None
    prompts_match_baseline: int | None
    dataset_sha256: str | None
    config_sha256: str | None
    cell_path: str
    concurrency: int | None
    ttft_s_median: float | None
    ttft_s_p90: float | None
    tpot_s_median: float | None
    tpot_s_p90: float | None
    decode_tok_s: float | None
    mean_running: float | None
    max_running: int | None
    # not columns: the engine start the pass ran on (the unit of replication) and its occupancy
    _start: str
    _occupancy: float | None
    _occupancy_min: float | None
    _occupancy_recorded: bool


class CellRow(TypedDict, total=False):
    """A row of cells.parquet (CELL_COLUMNS): one cell, its statistics over repeats; its `_` keys are not
    columns."""

    run: str
    model: str
    model_params_b: float
    tp: int
    quantization: str | None
    workload: str
    config: str
    method: str
    group: str | None
    status: str
    n: int
    n_starts: int | None
    replication: str | None
    repeats: int
    error: str | None
    output_tok_s_median: float | None
    output_tok_s_lo: float | None
    output_tok_s_hi: float | None
    output_tok_s_cv: float | None
    K_median: float | None
    K_lo: float | None
    K_hi: float | None
    K_cv: float | None
    alpha_median: float | None
    alpha_lo: float | None
    alpha_hi: float | None
    alpha_cv: float | None
    step_time_ms_median: float | None
    step_time_ms_lo: float | None
    step_time_ms_hi: float | None
    step_time_ms_cv: float | None
    decode_step_time_ms_median: float | None
    decode_step_time_ms_lo: float | None
    decode_step_time_ms_hi: float | None
    decode_step_time_ms_cv: float | None
    tokens_per_step_median: float | None
    tokens_per_step_lo: float | None
    tokens_per_step_hi: float | None
    tokens_per_step_cv: float | None
    gpu_util_mean_median: float | None
    gpu_util_mean_lo: float | None
    gpu_util_mean_hi: float | None
    gpu_util_mean_cv: float | None
    gen_wall_s_median: float | None
    gen_wall_s_lo: float | None
    gen_wall_s_hi: float | None
    gen_wall_s_cv: float | None
    prefill_share_median: float | None
    prefill_share_lo: float | None
    prefill_share_hi: float | None
    prefill_share_cv: float | None
    output_tok_s_gm: float | None
    request_tok_s_median: float | None
    request_tok_s_p10: float | None
    prompts: int | None
    K_prompts: int | None
    K_same_prompts: int | None
    input_tokens_mean: float | None
    output_tokens_mean: float | None
    drafts: int | None
    draft_tokens: int | None
    accepted: int | None
    accepted_per_pos: list[int] | None
    gpu_memory_utilization: float | None
    cudagraph_mode_requested: str | None
    cudagraph_mode_effective: str | None
    async_scheduling: bool | None
    model_runner: str | None
    device_name: str | None
    vllm_version: str | None
    prompts_match_baseline_min: int | None
    concurrency: int | None
    ttft_s_median: float | None
    ttft_s_p90: float | None
    tpot_s_median: float | None
    tpot_s_p90: float | None
    decode_tok_s: float | None
    # not columns: a cell at b, its passes' lowest occupancy (the summary shows it)
    _occupancy: float | None
    _occupancy_recorded: bool
    _occupancy_low: bool


class SpeedupRow(TypedDict, total=False):
    """A row of speedup.parquet (SPEEDUP_COLUMNS): one non-baseline cell against its baseline cell."""

    run: str
    model: str
    model_params_b: float
    workload: str
    config: str
    method: str
    baseline: str
    status: str
    n: int
    n_baseline: int | None
    n_starts: int | None
    n_starts_baseline: int | None
    replication: str | None
    speedup: float | None
    speedup_lo: float | None
    speedup_hi: float | None
    band: float | None
    verdict: str | None
    gain_pct: float | None
    K: float | None
    K_lo: float | None
    K_hi: float | None
    alpha: float | None
    R: float | None
    R_lo: float | None
    R_hi: float | None
    R_decode: float | None
    R_decode_lo: float | None
    R_decode_hi: float | None
    T: float | None
    T_lo: float | None
    T_hi: float | None
    K_same_prompts: int | None
    R_same_starts: int | None
    R_decode_same_starts: int | None
    T_same_starts: int | None
    output_tok_s: float | None
    baseline_output_tok_s: float | None
    request_tok_s_median: float | None
    baseline_request_tok_s_median: float | None
    request_tok_s_p10: float | None
    baseline_request_tok_s_p10: float | None
    request_speedup: float | None
    request_speedup_p10: float | None
    tokens_per_step: float | None
    baseline_tokens_per_step: float | None
    gen_wall_s: float | None
    baseline_gen_wall_s: float | None
    gpu_util_mean: float | None
    baseline_gpu_util_mean: float | None
    async_scheduling: bool | None
    baseline_async_scheduling: bool | None
    model_runner: str | None
    baseline_model_runner: str | None
    cudagraph_mode_effective: str | None
    baseline_cudagraph_mode_effective: str | None
    prompts: int | None
    prompts_match_baseline: int | None
    concurrency: int | None
    ttft_s_median: float | None
    ttft_s_p90: float | None
    tpot_s_median: float | None
    tpot_s_p90: float | None
    decode_tok_s: float | None


class ServeRow(TypedDict, total=False):
    """A row of serve.parquet (SERVE_COLUMNS): one serve-mode cell, its latencies in ms over requests."""

    run: str
    model: str
    workload: str
    config: str
    method: str
    baseline: str
    concurrency: int | None
    request_rate: float | None
    status: str
    n: int
    n_starts: int | None
    output_tok_s: float | None
    request_throughput: float | None
    ttft_ms_median: float | None
    ttft_ms_p90: float | None
    ttft_ms_p99: float | None
    tpot_ms_median: float | None
    tpot_ms_p90: float | None
    tpot_ms_p99: float | None
    itl_ms_median: float | None
    itl_ms_p90: float | None
    itl_ms_p99: float | None
    e2el_ms_median: float | None
    e2el_ms_p90: float | None
    e2el_ms_p99: float | None
    target_ttft_ms: float | None
    target_tpot_ms: float | None
    target_e2el_ms: float | None
    request_goodput: float | None
    goodput_share: float | None
    meets_target: bool | None
    speedup: float | None
    speedup_lo: float | None
    speedup_hi: float | None
    verdict: str | None


class ServedOfflineRow(TypedDict, total=False):
    """A row of served_vs_offline.parquet (SERVED_OFFLINE_COLUMNS): a serve-mode drafter cell's speedup beside
    the offline one at the same (model, workload, b)."""

    run: str
    model: str
    workload: str
    concurrency: int | None
    config: str
    baseline: str
    offline_config: str | None
    offline_baseline: str | None
    status: str
    note: str | None
    served_speedup: float | None
    served_speedup_lo: float | None
    served_speedup_hi: float | None
    served_verdict: str | None
    offline_speedup: float | None
    offline_speedup_lo: float | None
    offline_speedup_hi: float | None
    offline_verdict: str | None
    speedup_ratio: float | None
    served_output_tok_s: float | None
    offline_output_tok_s: float | None
    served_n_starts: int | None
    offline_n_starts: int | None
