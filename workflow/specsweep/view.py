"""The in-memory view of a run's tables, shared by the figures (:mod:`specsweep.figures`) and their captions
(:mod:`specsweep.captions`): which figures there are and which a run gets (:data:`FIGURES`,
:func:`planned_figures`, :func:`left_out_by_config`), both tables of one run indexed by cell (:class:`Tables`,
each value a :class:`Val`: median over repeats, 95 % interval, n), and the numbers a figure and its caption
both state (:func:`size_stats` for figure 5, :func:`r_series` for figure 8, :func:`concurrency_curves` and
:func:`crossovers` for figure 9). Nothing here draws.

Importing this module is cheap (no matplotlib, no pyarrow): ``workflow/rules/common.smk`` imports
:func:`planned_figures` when Snakemake parses the workflow.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from . import paths, stats
from .config import HEADLINE_STEP, SPEC_METHODS
from .latency import Limit, b_text, limits, order_key

#: The figures, in report order: file stems of ``figures/{run}/{stem}.png|.svg`` and of the captions.
FIGURES: tuple[str, ...] = (
    "fig1_headline",
    "fig2_r_vs_k_code",
    "fig3_sonnet_ladder",
    "fig4_k_alpha",
    "fig5_model_size",
    "fig6_gpu_util",
    "fig7_k_predicted",
    "fig8_r_at_scale",
    "fig9_concurrency",
    "fig10_serve_latency",
)
#: Drawn only for a run with a concurrency axis (a workload measured at concurrencies b); left out of the
#: others' figures and named in their manifest's ``left_out``.
CONCURRENCY_FIGURE = "fig9_concurrency"
#: Drawn only for a run with serve-mode steps (config `mode: serve`); left out of the others' figures, named.
SERVE_FIGURE = "fig10_serve_latency"
#: Draws R of every sized model of a run (and of the runs in ``r_at_scale_runs``), not the headline model's alone.
R_AT_SCALE_FIGURE = "fig8_r_at_scale"


def drawn_figures(concurrency_axis: bool, serves: bool = False) -> tuple[str, ...]:
    """The figures a run gets, in report order: all of :data:`FIGURES`, figure 9 only with a concurrency axis,
    figure 10 only with serve-mode cells."""
    return tuple(f for f in FIGURES if (concurrency_axis or f != CONCURRENCY_FIGURE) and (serves or f != SERVE_FIGURE))


def left_out_reason(run: str, stem: str = CONCURRENCY_FIGURE) -> str:
    """Why a run does not get figure 9 or 10 (:func:`drawn_figures`)."""
    if stem == SERVE_FIGURE:
        return f"no serve-mode cell: no ladder step of run {run} is measured through vLLM's server (mode: serve)"
    return f"no concurrency axis: no workload of run {run} is measured at a concurrency (workloads.<name>.concurrency)"


#: Figure 10 draws latency against throughput along b: one operating point per step is no curve.
ONE_POINT = (
    "one operating point per ladder step ({points}): a latency-throughput curve needs two; serve.md lists its latencies"
)


AT_B = "concurrencies b only: figure 9"
#: Figures 5 and 8 draw against model size: with one model there is no axis to draw along.
ONE_MODEL = "one model only: nothing to draw against model size"


def random_weights_note(models: Iterable[str]) -> str:
    """What a figure's title (or a caption, a README row) adds when it draws cells of models with random weights
    (config `weights: dummy`): ' (random weights: MODEL, ...)'; '' when it draws none."""
    names = sorted(set(models))
    return f" (random weights: {', '.join(names)})" if names else ""


RANDOM_WEIGHTS = "random weights (`weights: dummy`), which measure step time, never acceptance"
#: What each figure shows that random weights cannot measure (figure 8, R, is what they can).
NEEDS_REAL_WEIGHTS: dict[str, str] = {
    "fig1_headline": "speedup per workload",
    "fig2_r_vs_k_code": "K and T (acceptance) beside R",
    "fig3_sonnet_ladder": "speedups along the ladder",
    "fig4_k_alpha": "K and α (acceptance)",
    "fig5_model_size": "speedup against model size",
    "fig6_gpu_util": "trident's utilisation and throughput, which follow its acceptance",
    "fig7_k_predicted": "K predicted from acceptance",
}
#: The figures that draw the headline model only.
HEADLINE_FIGURES: tuple[str, ...] = (
    "fig1_headline",
    "fig2_r_vs_k_code",
    "fig3_sonnet_ladder",
    "fig4_k_alpha",
    "fig6_gpu_util",
)

WORKLOADS: tuple[str, ...] = ("sonnet", "chat", "code", "mix-balanced", "mix-ch", "mix-sh")
#: The paper's ladder steps after the baseline (the baseline's name comes from the tables).
LADDER: tuple[str, ...] = ("ngram", "suffix", "trident")
K_ALPHA_WORKLOADS: tuple[str, ...] = ("sonnet", "chat", "code")
SIZE_METHODS: tuple[str, ...] = ("trident", "ngram")
CONTROLS_GROUP = "controls"

Cell = tuple[str, str, str]  # (model, workload, ladder step); a workload at concurrency b is named `code@b8`
Row = dict[str, Any]


# --------------------------------------------------------------------------- the tables


def ordered(values: Iterable[str], canonical: Sequence[str]) -> list[str]:
    """Distinct values, canonical ones first in canonical order, others sorted after."""
    distinct = set(values)
    head = [v for v in canonical if v in distinct]
    return head + sorted(distinct - set(canonical))


def num(value: Any) -> float | None:
    """Float or None (nulls and NaN both become None)."""
    if value is None:
        return None
    out = float(value)
    return None if math.isnan(out) else out


def short_model(model: str) -> str:
    """Display name of a model (last path component of an HF id, without a trailing -instruct)."""
    name = model.rsplit("/", 1)[-1]
    return name[: -len("-instruct")] if name.endswith("-instruct") else name


def cell_dict(cell: Cell) -> dict[str, str]:
    return {"model": cell[0], "workload": cell[1], "config": cell[2]}


def _index(rows: list[Row], name: str) -> dict[Cell, Row]:
    """Rows keyed by (model, workload, ladder step: the tables' `config` column); duplicates are a producer bug."""
    out: dict[Cell, Row] = {}
    for row in rows:
        key = (row["model"], row["workload"], row["config"])
        if key in out:
            raise ValueError(f"{name}: duplicate row for {'/'.join(key)}")
        out[key] = row
    return out


def distinct_text(rows: Iterable[Row], column: str) -> str:
    values = sorted({str(r[column]) for r in rows if r.get(column) not in (None, "")})
    return " / ".join(values) if values else "unknown"


#: What a figure's whiskers are unless it says otherwise (figure 10's are quantiles over requests).
WHISKER_CI = "95 % interval (engine starts)"


@dataclass(frozen=True)
class Val:
    """A median over repeats with its 95 % interval (None for n < 2) and n."""

    point: float
    lo: float | None = None
    hi: float | None = None
    n: int = 0

    @property
    def top(self) -> float:
        return max(self.point, self.hi) if self.hi is not None else self.point

    @property
    def has_interval(self) -> bool:
        return self.lo is not None and self.hi is not None


@dataclass
class Tables:
    """Both tables of one run, indexed by cell, with the run's baseline name and repeats. ``cells`` and
    ``speedup`` hold the cells at the article's point (all prompts at once: figures 1-8); ``at_b`` holds
    those measured at a concurrency b (figure 9, :meth:`concurrency`)."""

    run: str
    baseline: str
    repeats: int
    cells: dict[Cell, Row]
    speedup: dict[Cell, Row]
    #: what the run's repeats are (config.Study.replication): stats.ENGINE_STARTS or stats.ONE_ENGINE
    replication: str = stats.ENGINE_STARTS
    at_b: tuple[dict[Cell, Row], dict[Cell, Row]] = field(default_factory=lambda: ({}, {}))
    #: models with random weights (config `weights: dummy`): their cells measure step time, never acceptance
    dummy: frozenset[str] = frozenset()
    #: the ladder step figures 1 and 6 and their captions compare with the baseline (config `headline_step`)
    headline_step: str = HEADLINE_STEP
    #: serve.parquet's rows (serve-mode cells, at every b; none for a run without serve-mode steps): figure 10
    serve: dict[Cell, Row] = field(default_factory=dict)

    @classmethod
    def load(cls, tables_dir: Path, run: str) -> Tables:
        from .tables import check_tables_run, read_parquet, replication_of

        tables_dir = Path(tables_dir)
        ctab = read_parquet(tables_dir, "cells.parquet")
        stab = read_parquet(tables_dir, "speedup.parquet")
        for table in (ctab, stab):  # another run's tables would draw nothing under this run's name
            check_tables_run(tables_dir, table, run)
        meta = {k.decode(): v.decode() for k, v in (ctab.schema.metadata or {}).items()}
        crows = [r for r in ctab.to_pylist() if r.get("run") == run]
        srows = [r for r in stab.to_pylist() if r.get("run") == run]
        baseline = meta.get("specsweep.baseline") or next((r["baseline"] for r in srows if r.get("baseline")), None)
        if not baseline:
            raise ValueError(f"{tables_dir}: no baseline named (metadata specsweep.baseline, column baseline)")
        repeats = int(meta.get("specsweep.repeats") or max((r.get("repeats") or 1 for r in crows), default=1))

        def point(rows: list[Row], at: bool) -> list[Row]:  # tables from before the axis have no such column
            return [r for r in rows if (r.get("concurrency") is not None) == at]

        serve: list[Row] = []
        if (tables_dir / "serve.parquet").is_file():  # a run with serve-mode steps (tables.SERVE_FILES)
            vtab = read_parquet(tables_dir, "serve.parquet")
            check_tables_run(tables_dir, vtab, run)
            serve = [r for r in vtab.to_pylist() if r.get("run") == run]

        return cls(
            run=run,
            baseline=baseline,
            repeats=repeats,
            cells=_index(point(crows, False), "cells.parquet"),
            speedup=_index(point(srows, False), "speedup.parquet"),
            replication=replication_of(meta),
            at_b=(_index(point(crows, True), "cells.parquet"), _index(point(srows, True), "speedup.parquet")),
            serve=_index(serve, "serve.parquet"),
        )

    @property
    def concurrency_axis(self) -> bool:
        return bool(self.at_b[0])

    def concurrency(self) -> Tables:
        """The cells measured at a concurrency b, as tables of their own (their rows carry `concurrency`)."""
        return Tables(
            self.run, self.baseline, self.repeats, self.at_b[0], self.at_b[1], self.replication, dummy=self.dummy
        )

    @property
    def serves(self) -> bool:
        return bool(self.serve)

    def served(self) -> Tables:
        """The serve-mode cells, at every b, as tables of their own (figure 10): their cells.parquet and
        speedup.parquet rows, and their serve.parquet rows."""
        cells, spd = {**self.cells, **self.at_b[0]}, {**self.speedup, **self.at_b[1]}
        return Tables(
            self.run,
            self.baseline,
            self.repeats,
            {k: cells[k] for k in self.serve if k in cells},
            {k: spd[k] for k in self.serve if k in spd},
            self.replication,
            dummy=self.dummy,
            serve=self.serve,
        )

    # --- structure

    def model_sizes(self) -> dict[str, float | None]:
        """model_params_b of each model of the run (None if unknown or not positive)."""
        sizes: dict[str, float | None] = {}
        for (model, _, _), row in sorted(self.cells.items()):
            if sizes.get(model) is None:
                size = num(row.get("model_params_b"))
                sizes[model] = size if size is not None and size > 0 else None
        return sizes

    def quantization(self, model: str) -> str | None:
        """The model's weight quantization (config models[].quantization; None: as stored, or unknown)."""
        for (m, _, _), row in sorted(self.cells.items()):
            if m == model and row.get("quantization"):
                return str(row["quantization"])
        return None

    def models(self) -> list[str]:
        """Models of the run, smallest first (unknown sizes last, ties by name)."""
        sizes = self.model_sizes()
        return sorted(sizes, key=lambda m: (sizes[m] is None, sizes[m] or 0.0, m))

    def has_model(self, model: str) -> bool:
        return any(key[0] == model for key in self.cells)

    def workloads(self, model: str, canonical_all: bool) -> list[str]:
        """Workloads of ``model``; with ``canonical_all`` the six canonical ones are always included."""
        present = [w for (m, w, _) in self.cells if m == model]
        return ordered([*present, *(WORKLOADS if canonical_all else ())], WORKLOADS)

    def ladder(self, model: str, workload: str) -> list[str]:
        """The baseline and the paper's ladder steps the tables have a row of for this model (on any workload: one
        without a row here is drawn as missing), then any other non-control step of this model/workload."""
        present = [
            c
            for (m, w, c), row in self.cells.items()
            if (m, w) == (model, workload) and row.get("group") != CONTROLS_GROUP
        ]
        rowed = {c for (m, _, c) in self.cells if m == model}
        paper = [c for c in LADDER if c in rowed]
        return ordered([*present, self.baseline, *paper], (self.baseline, *LADDER))

    # --- values

    def status(self, cell: Cell) -> str:
        row = self.cells.get(cell)
        return "absent" if row is None else str(row.get("status") or "missing")

    def n(self, cell: Cell) -> int:
        row = self.cells.get(cell)
        return int(row.get("n") or 0) if row is not None else 0

    def row(self, cell: Cell) -> Row | None:
        """The cells.parquet row of a cell with at least one measurement."""
        return self.cells.get(cell) if self.n(cell) else None

    def val(self, cell: Cell, metric: str) -> Val | None:
        """A cell's median of ``metric`` over its repeats, with interval (cells.parquet)."""
        row = self.row(cell)
        if row is None:
            return None
        point = num(row.get(f"{metric}_median"))
        if point is None:
            return None
        return Val(point, num(row.get(f"{metric}_lo")), num(row.get(f"{metric}_hi")), int(row["n"]))

    def geo(self, cell: Cell, metric: str) -> Val | None:
        """A cell's geometric mean of ``metric`` over its engine starts, with its 95 % interval: the statistic
        the speedups are ratios of (stats.ratio_ci). The interval (stats.cell_ci) is taken on the log scale,
        symmetric about the log of the geometric mean, so the geometric mean is sqrt(lo * hi); below 2 engine
        starts there is no interval and the value is the median over the repeats (what the speedup falls back
        to there)."""
        v = self.val(cell, metric)
        if v is None or not v.has_interval or not (v.lo or 0) > 0:
            return v
        return Val(math.sqrt(cast(float, v.lo) * cast(float, v.hi)), v.lo, v.hi, v.n)

    def spd_row(self, cell: Cell) -> Row | None:
        row = self.speedup.get(cell)
        return row if row is not None and row.get("status") in ("ok", "partial") else None

    def spd(self, cell: Cell, column: str) -> Val | None:
        """A speedup.parquet column (speedup, K, R, R_decode, T, ...) with its interval where it has one."""
        row = self.spd_row(cell)
        point = num(row.get(column)) if row is not None else None
        if row is None or point is None:
            return None
        return Val(
            point,
            num(row.get(f"{column}_lo")),
            num(row.get(f"{column}_hi")),
            min(int(row.get("n") or 0), int(row.get("n_baseline") or 0)),
        )

    def verdict(self, cell: Cell) -> str | None:
        row = self.spd_row(cell)
        return None if row is None or row.get("speedup") is None else str(row.get("verdict"))

    def rows_of(self, cells: Iterable[Cell]) -> list[Row]:
        return [self.cells[c] for c in cells if c in self.cells]

    def footer(self, cells: Iterable[Cell], point: str = "median", whisker: str = WHISKER_CI) -> str:
        """Footer: run, n, what a bar and a whisker are (``point``: the bars' statistic, ``whisker``: the
        whiskers'), device and vLLM (of ``cells``; of the run if none has a row), and which models have random
        weights."""
        cells = list(cells)
        rows = [r for r in self.rows_of(cells) if r.get("n")] or [r for r in self.cells.values() if r.get("n")]
        return (
            f"run: {self.run} · {self.n_text(cells)} · bar/marker = {point}, whisker = {whisker}"
            f" · device: {distinct_text(rows, 'device_name')} · vLLM {distinct_text(rows, 'vllm_version')}"
        )

    def n_text(self, cells: Iterable[Cell], with_replication: bool = True) -> str:
        """The n actually used by ``cells`` (of the run if none was measured), against the repeats planned:
        'n = 3 repeats per cell', 'n = 1 repeat per cell (3 planned)', 'n = 1–3 repeats per cell (3
        planned; ...)'; passes on one engine are named technical replicates (unless ``with_replication`` is
        false: the caller says the replication itself)."""
        cells = list(cells)
        ns = sorted({self.n(c) for c in cells if self.n(c)}) or sorted({self.n(c) for c in self.cells if self.n(c)})
        if not ns:
            text = f"n = 0 ({self.repeats} planned)"
        else:
            span = f"{ns[0]}" if len(ns) == 1 else f"{ns[0]}–{ns[-1]}"
            text = f"n = {span} repeat{'s' if ns[-1] != 1 else ''} per cell"
            if ns != [self.repeats]:
                fewer = sum(1 for c in cells if 0 < self.n(c) < self.repeats)
                text += f" ({self.repeats} planned" + (
                    f"; {fewer} cell{'s' if fewer != 1 else ''} with fewer, labelled n=…)" if len(ns) > 1 else ")"
                )
        if with_replication and self.replication != stats.ENGINE_STARTS:
            text += f", {stats.REPEATS_ARE[self.replication]}"
        return text


@dataclass(frozen=True)
class KRef:
    """K measured on a real model (another run's cells.parquet): figure 8 predicts speedup = K / R with it."""

    run: str
    model: str
    workload: str
    k: dict[str, Val]  # ladder step -> K (median over repeats, interval)

    @classmethod
    def load(cls, tables_dir: Path, run: str, model: str, workload: str) -> KRef:
        data = Tables.load(tables_dir, run)
        k = {
            c: v for (m, w, c) in sorted(data.cells) if (m, w) == (model, workload) and (v := data.val((m, w, c), "K"))
        }
        return cls(run, model, workload, k)


def _run_tables(key: str, run: str, tables_dir: Path) -> Path:
    """Another run's tables folder, beside ``tables_dir`` (results/{run}/tables); the config key that named it
    is in the error when it has none."""
    from .errors import SpecsweepError

    ref_tables = paths.tables_dir(run, Path(tables_dir).resolve().parent.parent)
    if not (ref_tables / "cells.parquet").is_file():
        raise SpecsweepError(f"{key}: run '{run}' has no tables at {ref_tables}")
    return ref_tables


def load_k_ref(raw: dict[str, Any], tables_dir: Path) -> KRef | None:
    """The config's predict_k_from, read from the named run's tables beside ``tables_dir`` (results/{run}/tables)."""
    ref = raw.get("predict_k_from")
    if not ref:
        return None
    ref_tables = _run_tables("predict_k_from", ref["run"], tables_dir)
    return KRef.load(ref_tables, ref["run"], ref["model"], ref["workload"])


def load_r_runs(raw: dict[str, Any], tables_dir: Path) -> list[Tables]:
    """The config's r_at_scale_runs: other runs' tables beside ``tables_dir`` (results/{run}/tables), whose R
    figure 8 plots beside this run's."""
    return [
        Tables.load(_run_tables("r_at_scale_runs", run, tables_dir), run) for run in raw.get("r_at_scale_runs") or []
    ]


def left_out_by_config(study: Any) -> dict[str, str]:
    """The figures a run leaves out whatever its cells say, with the reason, from its config (a
    :class:`specsweep.config.Study`): those about acceptance, K or speedup when the models they draw have random
    weights, those whose workload or ladder step the config lacks, and figure 8 when all its R would come from
    single repeats. In FIGURES order."""
    dummy = dummy_models(study)
    headline = study.raw["headline_model"]
    # figures 1-8 draw the cells of all prompts at once (the article's point), never those at a concurrency b
    point = [c for c in study.cells if c.concurrency is None]
    workloads = {c.workload for c in point if c.model == headline}
    out: dict[str, str] = {}
    if not point:
        for stem in FIGURES:
            if stem not in (CONCURRENCY_FIGURE, SERVE_FIGURE):  # those two draw the cells at b
                out[stem] = f"no cell with all prompts at once, the point it draws (the run's cells are at {AT_B})"
    for stem, what in NEEDS_REAL_WEIGHTS.items():
        if stem in HEADLINE_FIGURES and headline in dummy:
            out[stem] = f"{what}: the headline model {headline} has {RANDOM_WEIGHTS}"
        elif stem not in HEADLINE_FIGURES and dummy and dummy >= set(study.models):
            out[stem] = f"{what}: every model of the run has {RANDOM_WEIGHTS}"
    if headline not in study.models:
        for stem in HEADLINE_FIGURES:
            out.setdefault(stem, f"the headline model {headline} is not a model of the run")
    elif not workloads:
        for stem in HEADLINE_FIGURES:
            out.setdefault(
                stem, f"no cell of the headline model {headline} with all prompts at once, the point it draws"
            )
    for stem, need in (("fig2_r_vs_k_code", "code"), ("fig3_sonnet_ladder", "sonnet")):
        if need not in workloads:
            out.setdefault(stem, f"no '{need}' workload for the headline model")
    head = study.headline_step
    planned_steps = {c.step for c in point if c.model == headline}
    if workloads and head not in planned_steps:
        why = "no ladder step" if head not in study.ladder else "not a step the headline model is measured with"
        for stem in ("fig1_headline", "fig6_gpu_util"):
            out.setdefault(
                stem, f"headline_step '{head}' is {why} (config headline_step; the article's: {HEADLINE_STEP})"
            )
    if not workloads & set(K_ALPHA_WORKLOADS):
        out.setdefault("fig4_k_alpha", f"none of the workloads {', '.join(K_ALPHA_WORKLOADS)} for the headline model")
    if not any(st.method in SPEC_METHODS for st in study.ladder.values()):
        out.setdefault(R_AT_SCALE_FIGURE, f"no ladder step with method {' or '.join(SPEC_METHODS)}")
    if study.repeats < 2 and not study.raw.get("r_at_scale_runs"):
        # figure 8 draws no R from a single repeat, and this run's R can come from nothing else
        out.setdefault(R_AT_SCALE_FIGURE, "R only from single repeats (the run has repeats: 1)")
    measured = [m for m in study.models if any(c.model == m for c in study.cells)]  # a model no group takes: none
    if len(measured) < 2:
        out.setdefault("fig5_model_size", f"{ONE_MODEL}: {', '.join(measured)}")
        if not study.raw.get("r_at_scale_runs"):  # figure 8 also draws other runs' models where the config names them
            out.setdefault(R_AT_SCALE_FIGURE, f"{ONE_MODEL}: {', '.join(measured)}")
    if getattr(study, "serves", False):
        points: dict[tuple[str, str, str], set[int | None]] = {}
        for c in study.cells:
            if study.mode(c.step) == "serve":
                points.setdefault((c.model, c.base_workload, c.step), set()).add(c.concurrency)
        if all(len(p) < 2 for p in points.values()):
            shown = sorted({b_text(b) for p in points.values() for b in p})
            out[SERVE_FIGURE] = ONE_POINT.format(points=", ".join(shown))
    return {stem: out[stem] for stem in FIGURES if stem in out}


def planned_figures(study: Any) -> list[str]:
    """The figures a run draws when all its cells are measured: those its axes give (:func:`drawn_figures`:
    figure 9 only with a concurrency axis, figure 10 only with serve-mode cells) less :func:`left_out_by_config`."""
    left = left_out_by_config(study)
    drawn = drawn_figures(bool(getattr(study, "concurrency", None)), bool(getattr(study, "serves", False)))
    return [stem for stem in drawn if stem not in left]


def dummy_models(study: Any) -> frozenset[str]:
    """The run's models with random weights (config `weights: dummy`)."""
    return frozenset(m for m, spec in study.models.items() if spec.weights == "dummy")


def size_stats(
    data: Tables,
) -> tuple[
    list[str],
    dict[str, float],
    list[str],
    list[str],
    dict[tuple[str, str], tuple[float, float | None, float | None, int]],
]:
    """Figure 5's numbers: models, their known sizes, the methods, the workloads common to every model, and
    per (method, model) the geometric mean speedup over those workloads (stats.geomean), the geometric means
    of the per-workload interval bounds (None unless every workload has an interval) and how many of the
    common workloads have a speedup."""
    models = [m for m in data.models() if m not in data.dummy]  # random weights: no speedup to speak of
    known = {m: size for m in models if (size := data.model_sizes()[m]) is not None}
    methods = [m for m in SIZE_METHODS if any(c == m for (_, _, c) in data.cells)] or list(SIZE_METHODS)
    per_model = [set(data.workloads(m, canonical_all=False)) for m in models]
    both = set.intersection(*per_model) if per_model else set()
    common = [w for w in WORKLOADS if w in both] + sorted(both - set(WORKLOADS))
    stat: dict[tuple[str, str], tuple[float, float | None, float | None, int]] = {}
    for meth in methods:
        for m in known:
            got = [v for w in common if (v := data.spd((m, w, meth), "speedup")) is not None]
            if not got:
                continue
            full = len(got) == len(common) and all(v.has_interval for v in got)
            stat[(meth, m)] = (
                cast(float, stats.geomean([v.point for v in got])),  # speedups are > 0: never None
                stats.geomean([v.lo for v in got]) if full else None,
                stats.geomean([v.hi for v in got]) if full else None,
                len(got),
            )
    return models, known, methods, common, stat


def r_at_scale(data: Tables) -> tuple[list[str], dict[str, float], list[str], list[str]]:
    """Figure 8's axes: the sized models (smallest first), their sizes, the speculative ladder steps among
    ngram and suffix, and the workloads common to every sized model whose name starts with 'code' (all
    common ones if none does)."""
    sizes = data.model_sizes()
    models = [m for m in data.models() if sizes[m] is not None]
    steps = [c for c in SPEC_METHODS if any(cc == c for (_, _, cc) in data.cells)]
    per_model = [set(data.workloads(m, canonical_all=False)) for m in models]
    common = sorted(set.intersection(*per_model)) if per_model else []
    code = [w for w in common if w.startswith("code")]
    return models, {m: cast(float, sizes[m]) for m in models}, steps, code or common


def r_value(data: Tables, cell: Cell) -> Val | None:
    """R over decode steps where the prefill probe ran, else over all steps."""
    return data.spd(cell, "R_decode") or data.spd(cell, "R")


@dataclass(frozen=True)
class RPoint:
    """One model's R for one ladder step and workload, from the run that measured it."""

    size: float
    model: str
    run: str
    r: Val
    quantization: str | None = None  # the weights' (config models[].quantization); None: as stored


#: A line of figure 8: (ladder step, workload, weight quantization or None).
RLine = tuple[str, str, str | None]


def r_points(data: Tables, others: Sequence[Tables] = ()) -> tuple[list[str], list[str], list[tuple[RLine, RPoint]]]:
    """Every R figure 8 could draw, over this run and ``others``: the ladder steps (ngram, suffix), the
    workloads (this run's, see :func:`r_at_scale`), and each sized model's R per (step, workload), whatever its
    n, with the line it belongs to (step, workload, weight quantization), by step, workload, run, model."""
    _, _, _, workloads = r_at_scale(data)
    runs = [data, *others]
    steps = [c for c in SPEC_METHODS if any(cc == c for d in runs for (_, _, cc) in d.cells)]
    sized = []  # (run, model, its size, its weights' quantization)
    for d in runs:
        models, sizes, _, _ = r_at_scale(d)
        sized += [(d, m, sizes[m], d.quantization(m)) for m in models]
    out = []
    for cfg in steps:
        for w in workloads:
            for d, m, size, q in sized:
                if (v := r_value(d, (m, w, cfg))) is not None:
                    out.append(((cfg, w, q), RPoint(size, m, d.run, v, q)))
    return steps, workloads, out


def r_lines(points: Iterable[tuple[RLine, RPoint]]) -> dict[RLine, list[RPoint]]:
    """Figure 8's lines from :func:`r_points`: per line the R of every sized model, smallest first, where R has
    n >= 2. Each R pairs cells of its own run (like with like); quantized weights (fp8, ...) make every step
    cheaper, so they are lines of their own, never joined to the sizes measured as stored. A model in two runs
    with the same quantization is taken from the first that has it. Lines as stored come first."""
    series: dict[RLine, list[RPoint]] = {}
    seen: set[tuple[RLine, str]] = set()
    for line, p in points:
        if (line, p.model) in seen or p.r.n < 2:  # no R from a single repeat
            continue
        seen.add((line, p.model))
        series.setdefault(line, []).append(p)
    for pts in series.values():
        pts.sort(key=lambda p: (p.size, p.model))
    return {k: series[k] for k in sorted(series, key=lambda k: (k[2] is not None, k[2] or "", k[0], k[1]))}


def r_series(data: Tables, others: Sequence[Tables] = ()) -> tuple[list[str], list[str], dict[RLine, list[RPoint]]]:
    """Figure 8's steps, workloads and lines (:func:`r_points`, then :func:`r_lines`)."""
    steps, workloads, points = r_points(data, others)
    return steps, workloads, r_lines(points)


# --------------------------------------------------------------------------- figure 9

#: Figure 9's curve key: (model, workload, ladder step); the workload is the config's (`code`), its cells at
#: each b are `code@b{b}`.
Curve = tuple[str, str, str]


def concurrency_curves(data: Tables) -> dict[Curve, list[tuple[int, Cell]]]:
    """Figure 9's lines over ``data.concurrency()``: (model, workload, step) -> [(b, cell)] in order of b."""
    from .crossover import base_workload

    out: dict[Curve, list[tuple[int, Cell]]] = {}
    for cell, row in sorted(data.cells.items()):
        b = int(row["concurrency"])
        out.setdefault((cell[0], base_workload(cell[1]), cell[2]), []).append((b, cell))
    return {k: sorted(v) for k, v in sorted(out.items())}


def crossovers(data: Tables) -> dict[Curve, Row]:
    """crossover.parquet's rows of ``data.concurrency()`` (recomputed from its speedup rows, the same pure
    function the tables use), keyed by (model, workload, step)."""
    from .crossover import crossover_rows

    return {(x["model"], x["workload"], x["step"]): x for x in crossover_rows(list(data.speedup.values()))}


# --------------------------------------------------------------------------- figure 10


def serve_curves(data: Tables) -> dict[Curve, list[tuple[int | None, Cell, Row]]]:
    """Figure 10's lines over ``data.serve``: (model, workload, step) -> [(b, cell, serve row)] of the measured
    cells with an output throughput, in order of b (all prompts at once, no b, last)."""
    from .crossover import base_workload

    out: dict[Curve, list[tuple[int | None, Cell, Row]]] = {}
    for cell, row in sorted(data.serve.items()):
        if row.get("n") and num(row.get("output_tok_s")) is not None:
            b = row.get("concurrency")
            out.setdefault((cell[0], base_workload(cell[1]), cell[2]), []).append((b, cell, row))
    return {k: sorted(v, key=lambda p: order_key(p[0])) for k, v in sorted(out.items())}


def serve_limits(data: Tables) -> dict[Curve, Limit]:
    """Where each (model, workload, step) of ``data.serve`` stops meeting the latency target (latency.limits,
    the function the tables use), keyed like :func:`serve_curves`."""
    return {(x.model, x.workload, x.step): x for x in limits(data.serve.values())}
