"""Render the specsweep figures from a run's ``cells.parquet`` and ``speedup.parquet``.

Public: :data:`FIGURES` (the one list of figures: the Snakemake rules, the captions and the report derive
from it), :func:`render_all`, :func:`fig5_layout`.  Every figure is written as PNG (dpi 120) and SVG,
plus a ``manifest.json`` naming the cells each figure used and those it needed but lacked.

Repeats: every bar or marker is a cell's median over its repeats, with a whisker for its 95 % interval over
engine starts (the tables' ``*_lo``/``*_hi``; K's over prompts); every footer states the n its cells have (and
the repeats planned where that differs), and a cell measured fewer times than planned is labelled with its own
n.  A cell with fewer than 2 engine starts (one pass, or passes on one engine) has no interval, and so no
whisker.

Missing data: a figure is never silently drawn from a subset.  What exists is drawn, a needed cell without a
measurement gets an ``n/a`` marker where its bar would be, and every such cell is listed in a red box on the
figure and in the manifest.  A figure (or panel) with nothing to draw is left out, never drawn empty, and the
manifest's ``left_out`` names it with the reason; so is a figure about acceptance, K or speedup whose models
have random weights (config ``weights: dummy``: they measure step time, R and memory, never acceptance):
:func:`left_out_by_config` says which from the config alone (the Snakemake rules list only the others).

Determinism: no pyplot (a Figure on an Agg canvas), explicit rcParams, fixed sizes and fonts, fixed order,
SVG hash salt, no dates in the metadata: two renders of the same tables are byte-identical.

Importing this module is cheap (no matplotlib, no pyarrow): ``workflow/rules/common.smk`` imports
:data:`FIGURES` when Snakemake parses the workflow.
"""

from __future__ import annotations

import io
import json
import math
import textwrap
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, cast

from . import stats

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.axes import Axes
    from matplotlib.backends.backend_agg import FigureCanvasAgg, RendererAgg
    from matplotlib.figure import Figure

__all__ = [
    "FIGURES",
    "drawn_figures",
    "render_all",
    "fig5_layout",
    "WORKLOADS",
    "left_out_by_config",
    "planned_figures",
]

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
)
#: Drawn only for a run with a concurrency axis (a workload measured at concurrencies b); left out of the
#: others' figures and named in their manifest's ``left_out``.
CONCURRENCY_FIGURE = "fig9_concurrency"


def drawn_figures(concurrency_axis: bool) -> tuple[str, ...]:
    """The figures a run gets, in report order: all of :data:`FIGURES`, figure 9 only with a concurrency axis."""
    return tuple(f for f in FIGURES if concurrency_axis or f != CONCURRENCY_FIGURE)


def left_out_reason(run: str) -> str:
    return f"no concurrency axis: no workload of run {run} is measured at a concurrency (workloads.<name>.concurrency)"


class LeftOut(Exception):
    """A figure with nothing meaningful to draw: not rendered; the manifest names it with this reason."""


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
HEADLINE_CONFIG = "trident"
SPEC_METHODS: tuple[str, ...] = ("ngram", "suffix")
K_ALPHA_WORKLOADS: tuple[str, ...] = ("sonnet", "chat", "code")
SIZE_METHODS: tuple[str, ...] = ("trident", "ngram")
CONTROLS_GROUP = "controls"
#: The article's R for Llama-3.3-70B at TP 8 (figure 8's band).
ARTICLE_R_BAND: tuple[float, float] = (1.25, 1.40)

DPI = 120
MAX_MISSING_SHOWN = 6
#: Figure 7b: a draft position is drawn only where at least this many drafts reached it.
MIN_REACHED = 20

COLORS: dict[str, str] = {
    "baseline": "#7f7f7f",
    "ngram": "#1f77b4",
    "suffix": "#2ca02c",
    "trident": "#ff7f0e",
    "R": "#9467bd",
    "K": "#17becf",
    "T": "#bcbd22",
}
VERDICT_COLORS: dict[str, str] = {"faster": "#1a7f37", "slower": "#c00000"}
NOISE_COLOR = "#555555"
MISSING_COLOR = "#c00000"
WHISKER: dict[str, Any] = {"color": "#222222", "linewidth": 0.9, "capsize": 2.5, "capthick": 0.9}

STYLE: dict[str, Any] = {
    "font.family": "sans-serif",
    "font.sans-serif": ["DejaVu Sans"],
    "font.size": 9,
    "axes.titlesize": 9,
    "axes.labelsize": 9,
    "xtick.labelsize": 8,
    "ytick.labelsize": 8,
    "legend.fontsize": 8,
    "figure.titlesize": 11,
    "axes.grid": True,
    "axes.grid.axis": "y",
    "axes.axisbelow": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "svg.hashsalt": "specsweep",
    "svg.fonttype": "path",
    "path.simplify": False,
    "figure.dpi": DPI,
    "savefig.dpi": DPI,
    "savefig.bbox": None,
    "savefig.facecolor": "white",
    "figure.facecolor": "white",
}

Cell = tuple[str, str, str]  # (model, workload, config); a workload at concurrency b is named `code@b8`
Row = dict[str, Any]


# --------------------------------------------------------------------------- data


def _order(values: Iterable[str], canonical: Sequence[str]) -> list[str]:
    """Distinct values, canonical ones first in canonical order, others sorted after."""
    distinct = set(values)
    head = [v for v in canonical if v in distinct]
    return head + sorted(distinct - set(canonical))


def _num(value: Any) -> float | None:
    """Float or None (nulls and NaN both become None)."""
    if value is None:
        return None
    out = float(value)
    return None if math.isnan(out) else out


def _short(model: str) -> str:
    """Display name of a model (last path component of an HF id, without a trailing -instruct)."""
    name = model.rsplit("/", 1)[-1]
    return name[: -len("-instruct")] if name.endswith("-instruct") else name


def _cell_dict(cell: Cell) -> dict[str, str]:
    return {"model": cell[0], "workload": cell[1], "config": cell[2]}


def _index(rows: list[Row], name: str) -> dict[Cell, Row]:
    """Rows keyed by (model, workload, config); duplicates are a producer bug."""
    out: dict[Cell, Row] = {}
    for row in rows:
        key = (row["model"], row["workload"], row["config"])
        if key in out:
            raise ValueError(f"{name}: duplicate row for {'/'.join(key)}")
        out[key] = row
    return out


def _distinct(rows: Iterable[Row], column: str) -> str:
    values = sorted({str(r[column]) for r in rows if r.get(column) not in (None, "")})
    return " / ".join(values) if values else "unknown"


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
    engine_per_repeat: bool = True
    at_b: tuple[dict[Cell, Row], dict[Cell, Row]] = field(default_factory=lambda: ({}, {}))
    #: models with random weights (config `weights: dummy`): their cells measure step time, never acceptance
    dummy: frozenset[str] = frozenset()

    @classmethod
    def load(cls, tables_dir: Path, run: str) -> Tables:
        from .tables import read_parquet

        tables_dir = Path(tables_dir)
        ctab = read_parquet(tables_dir, "cells.parquet")
        stab = read_parquet(tables_dir, "speedup.parquet")
        meta = {k.decode(): v.decode() for k, v in (ctab.schema.metadata or {}).items()}
        crows = [r for r in ctab.to_pylist() if r.get("run") == run]
        srows = [r for r in stab.to_pylist() if r.get("run") == run]
        baseline = meta.get("specsweep.baseline") or next((r["baseline"] for r in srows if r.get("baseline")), None)
        if not baseline:
            raise ValueError(f"{tables_dir}: no baseline named (metadata specsweep.baseline, column baseline)")
        repeats = int(meta.get("specsweep.repeats") or max((r.get("repeats") or 1 for r in crows), default=1))

        def point(rows: list[Row], at: bool) -> list[Row]:  # tables from before the axis have no such column
            return [r for r in rows if (r.get("concurrency") is not None) == at]

        return cls(
            run=run,
            baseline=baseline,
            repeats=repeats,
            cells=_index(point(crows, False), "cells.parquet"),
            speedup=_index(point(srows, False), "speedup.parquet"),
            engine_per_repeat=meta.get("specsweep.engine_per_repeat", "true") != "false",
            at_b=(_index(point(crows, True), "cells.parquet"), _index(point(srows, True), "speedup.parquet")),
        )

    @property
    def concurrency_axis(self) -> bool:
        return bool(self.at_b[0])

    def concurrency(self) -> Tables:
        """The cells measured at a concurrency b, as tables of their own (their rows carry `concurrency`)."""
        return Tables(self.run, self.baseline, self.repeats, self.at_b[0], self.at_b[1], self.engine_per_repeat)

    # --- structure

    def model_sizes(self) -> dict[str, float | None]:
        """model_params_b of each model of the run (None if unknown or not positive)."""
        sizes: dict[str, float | None] = {}
        for (model, _, _), row in sorted(self.cells.items()):
            if sizes.get(model) is None:
                size = _num(row.get("model_params_b"))
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
        return _order([*present, *(WORKLOADS if canonical_all else ())], WORKLOADS)

    def ladder(self, model: str, workload: str) -> list[str]:
        """The baseline and the paper's ladder steps, then any other non-control step of this model/workload."""
        present = [
            c
            for (m, w, c), row in self.cells.items()
            if (m, w) == (model, workload) and row.get("group") != CONTROLS_GROUP
        ]
        return _order([*present, self.baseline, *LADDER], (self.baseline, *LADDER))

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
        point = _num(row.get(f"{metric}_median"))
        if point is None:
            return None
        return Val(point, _num(row.get(f"{metric}_lo")), _num(row.get(f"{metric}_hi")), int(row["n"]))

    def spd_row(self, cell: Cell) -> Row | None:
        row = self.speedup.get(cell)
        return row if row is not None and row.get("status") in ("ok", "partial") else None

    def spd(self, cell: Cell, column: str) -> Val | None:
        """A speedup.parquet column (speedup, K, R, R_decode, T, ...) with its interval where it has one."""
        row = self.spd_row(cell)
        point = _num(row.get(column)) if row is not None else None
        if row is None or point is None:
            return None
        return Val(
            point,
            _num(row.get(f"{column}_lo")),
            _num(row.get(f"{column}_hi")),
            min(int(row.get("n") or 0), int(row.get("n_baseline") or 0)),
        )

    def verdict(self, cell: Cell) -> str | None:
        row = self.spd_row(cell)
        return None if row is None or row.get("speedup") is None else str(row.get("verdict"))

    def rows_of(self, cells: Iterable[Cell]) -> list[Row]:
        return [self.cells[c] for c in cells if c in self.cells]

    def footer(self, cells: Iterable[Cell]) -> str:
        """Footer: run, n, what a whisker is, device and vLLM (of ``cells``; of the run if none has a row)."""
        cells = list(cells)
        rows = [r for r in self.rows_of(cells) if r.get("n")] or [r for r in self.cells.values() if r.get("n")]
        return (
            f"run: {self.run} · {self.n_text(cells)} · bar/marker = median, whisker = 95 % interval (engine starts)"
            f" · device: {_distinct(rows, 'device_name')} · vLLM {_distinct(rows, 'vllm_version')}"
        )

    def n_text(self, cells: Iterable[Cell]) -> str:
        """The n actually used by ``cells`` (of the run if none was measured), against the repeats planned:
        'n = 3 repeats per cell', 'n = 1 repeat per cell (3 planned)', 'n = 1–3 repeats per cell (3
        planned; ...)'; passes on one engine are named technical replicates."""
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
        if not self.engine_per_repeat:
            text += ", passes on one engine (technical replicates)"
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

    ref_tables = Path(tables_dir).resolve().parent.parent / run / "tables"
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
    weights, and those whose workload or ladder step the config lacks. In FIGURES order."""
    dummy = dummy_models(study)
    headline = study.raw["headline_model"]
    workloads = {c.workload for c in study.cells if c.model == headline}
    out: dict[str, str] = {}
    for stem, what in NEEDS_REAL_WEIGHTS.items():
        if stem in HEADLINE_FIGURES and headline in dummy:
            out[stem] = f"{what}: the headline model {headline} has {RANDOM_WEIGHTS}"
        elif stem not in HEADLINE_FIGURES and dummy and dummy >= set(study.models):
            out[stem] = f"{what}: every model of the run has {RANDOM_WEIGHTS}"
    if headline not in study.models:
        for stem in HEADLINE_FIGURES:
            out.setdefault(stem, f"the headline model {headline} is not a model of the run")
    for stem, need in (("fig2_r_vs_k_code", "code"), ("fig3_sonnet_ladder", "sonnet")):
        if need not in workloads:
            out.setdefault(stem, f"no '{need}' workload for the headline model")
    if not workloads & set(K_ALPHA_WORKLOADS):
        out.setdefault("fig4_k_alpha", f"none of the workloads {', '.join(K_ALPHA_WORKLOADS)} for the headline model")
    if not any(st.method in SPEC_METHODS for st in study.ladder.values()):
        out.setdefault("fig8_r_at_scale", f"no ladder step with method {' or '.join(SPEC_METHODS)}")
    return {stem: out[stem] for stem in FIGURES if stem in out}


def planned_figures(study: Any) -> list[str]:
    """The figures a run draws when all its cells are measured: those its axes give (:func:`drawn_figures`:
    figure 9 only with a concurrency axis) less :func:`left_out_by_config`."""
    left = left_out_by_config(study)
    return [stem for stem in drawn_figures(bool(getattr(study, "concurrency", None))) if stem not in left]


def dummy_models(study: Any) -> frozenset[str]:
    """The run's models with random weights (config `weights: dummy`)."""
    return frozenset(m for m, spec in study.models.items() if spec.weights == "dummy")


@dataclass
class _Needs:
    """Cells a figure needs: used (at least one measurement), missing (none), partial (fewer than n)."""

    needed: list[Cell] = field(default_factory=list)
    used: list[Cell] = field(default_factory=list)
    missing: list[tuple[Cell, str]] = field(default_factory=list)
    partial: list[tuple[Cell, int]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, data: Tables, cells: Iterable[Cell]) -> _Needs:
        needs = cls()
        needs.needed = list(dict.fromkeys(cells))  # dedupe, keep order
        for cell in needs.needed:
            n = data.n(cell)
            if n:
                needs.used.append(cell)
                if n < data.repeats:
                    needs.partial.append((cell, n))
            else:
                needs.missing.append((cell, data.status(cell)))
        return needs

    def manifest(self, stem: str) -> dict[str, Any]:
        return {
            "files": [f"{stem}.png", f"{stem}.svg"],
            "cells": [_cell_dict(c) for c in self.used],
            "missing": [{**_cell_dict(c), "status": s} for c, s in self.missing],
            "partial": [{**_cell_dict(c), "n": n} for c, n in self.partial],
            "notes": list(self.notes),
        }


def _grid(models: Sequence[str], workloads: Sequence[str], configs: Sequence[str]) -> list[Cell]:
    return [(m, w, c) for m in models for w in workloads for c in configs]


# ------------------------------------------------------------------ drawing helpers


def _missing_text(missing: Sequence[tuple[Cell, str]]) -> str:
    shown = [f"{_short(m)}/{w}/{c}" for (m, w, c), _ in missing[:MAX_MISSING_SHOWN]]
    text = "missing cells: " + ", ".join(shown)
    if len(missing) > MAX_MISSING_SHOWN:
        text += f", +{len(missing) - MAX_MISSING_SHOWN} more (manifest.json lists all)"
    return text


def _new_figure(
    size: tuple[float, float],
    ncols: int,
    title: str,
    needs: _Needs,
    footer: str,
    *,
    bottom_in: float = 0.55,
    top_extra_in: float = 0.0,
    nrows: int = 1,
) -> tuple[Figure, list[Axes]]:
    """Figure with ``ncols`` axes, a wrapped title, a footer and (if needed) a red missing-cells box.

    Margins are computed in inches so that the title band, the missing box and the footer never overlap the
    axes; ``bottom_in`` is the room left for x tick labels, ``top_extra_in`` room above the axes (legends).
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    width, height = size
    fig = Figure(figsize=size)
    FigureCanvasAgg(fig)
    title_lines = textwrap.wrap(title, width=int(width * 10.5), break_on_hyphens=False)
    fig.suptitle("\n".join(title_lines), y=1 - 0.1 / height, va="top", fontweight="bold")
    top_in = 0.15 + 0.22 * len(title_lines)
    if needs.missing:
        lines = textwrap.wrap(_missing_text(needs.missing), width=int(width * 14), break_on_hyphens=False)
        fig.text(
            0.5,
            1 - (top_in + 0.08) / height,
            "\n".join(lines),
            ha="center",
            va="top",
            fontsize=8,
            color=MISSING_COLOR,
            bbox={"boxstyle": "round,pad=0.3", "facecolor": "#fff0f0", "edgecolor": MISSING_COLOR},
        )
        top_in += 0.2 + 0.15 * len(lines)
    foot_lines = textwrap.wrap(footer, width=int(width * 17), break_on_hyphens=False)
    fig.text(0.01, 0.06 / height, "\n".join(foot_lines), ha="left", va="bottom", fontsize=7, color="#444444")
    fig.subplots_adjust(
        left=0.75 / width,
        right=1 - 0.2 / width,
        top=1 - (top_in + 0.35 + top_extra_in) / height,
        bottom=(bottom_in + 0.3 + 0.13 * len(foot_lines)) / height,
        wspace=0.3 if ncols > 1 else 0.2,
        hspace=0.45,
    )
    axes = [fig.add_subplot(nrows, ncols, i + 1) for i in range(nrows * ncols)]
    return fig, axes


def _message(ax: Axes, text: str, *, color: str = "#555555") -> None:
    """Centred message on an otherwise empty axes."""
    ax.set_xticks([])
    ax.set_yticks([])
    ax.grid(False)
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, fontsize=9, color=color, wrap=True)


def _whisker(ax: Axes, x: float, v: Val, **kw: Any) -> None:
    if v.lo is not None and v.hi is not None:  # v.has_interval
        ax.errorbar([x], [v.point], yerr=[[v.point - v.lo], [v.hi - v.point]], fmt="none", **(WHISKER | kw))


def _bars(
    ax: Axes,
    groups: Sequence[str],
    series: Sequence[str],
    values: Mapping[tuple[str, str], Val | None],
    *,
    color: Callable[[str, str], str],
    ylabel: str,
    repeats: int,
    labels: Mapping[tuple[str, str], tuple[str, str]] | None = None,
    inside: Mapping[tuple[str, str], str] | None = None,
    rotate: bool = False,
    headroom: float = 1.22,
    legend: bool = True,
) -> dict[tuple[str, str], float]:
    """Grouped bar chart with interval whiskers: one group per ``groups`` entry, one bar per ``series`` entry.

    ``values`` maps (group, series) to a Val; None draws a red ``n/a`` marker.  ``labels`` annotates a bar
    above its whisker with (text, colour); ``inside`` writes a text inside the bar's foot.  A bar whose n is
    below ``repeats`` gets ``n=…`` in its label.  Returns each drawn bar's x position.
    """
    from matplotlib.patches import Patch

    width = 0.8 / len(series)
    labels = labels or {}
    inside = inside or {}
    xs: dict[tuple[str, str], float] = {}
    for j, name in enumerate(series):
        offset = (j - (len(series) - 1) / 2) * width
        for i, group in enumerate(groups):
            x = i + offset
            value = values.get((group, name))
            if value is None:
                ax.text(x, 0, "n/a", ha="center", va="bottom", fontsize=7, color=MISSING_COLOR, rotation=90)
                continue
            xs[(group, name)] = x
            ax.bar(x, value.point, width * 0.92, color=color(group, name))
            _whisker(ax, x, value)
            text, colour = labels.get((group, name), ("", "black"))
            if 0 < value.n < repeats:
                text = f"{text}\nn={value.n}" if text else f"n={value.n}"
            if text:
                ax.annotate(
                    text,
                    (x, value.top),
                    xytext=(0, 2),
                    textcoords="offset points",
                    ha="center",
                    va="bottom",
                    fontsize=7,
                    color=colour,
                    linespacing=1.0,
                )
            if inside.get((group, name)):
                ax.annotate(
                    inside[(group, name)],
                    (x, 0),
                    xytext=(0, 3),
                    textcoords="offset points",
                    ha="center",
                    va="bottom",
                    fontsize=7,
                    color="white",
                    fontweight="bold",
                )
    ax.set_xticks(range(len(groups)))
    if rotate:
        ax.set_xticklabels(groups, rotation=30, ha="right", rotation_mode="anchor")
    else:
        ax.set_xticklabels(groups)
    ax.set_xlim(-0.6, len(groups) - 0.4)
    top = max((v.top for v in values.values() if v is not None), default=0.0) * headroom
    ax.set_ylim(0, top if top > 0 else 1.0)
    ax.set_ylabel(ylabel)
    if legend and len(series) > 1:
        # Proxy patches so that every series is listed even when all its bars are missing;
        # labelled artists drawn before (e.g. reference markers) come first.
        handles = ax.get_legend_handles_labels()[0]
        handles += [Patch(facecolor=color(groups[0], name), label=name) for name in series]
        ax.legend(
            handles=handles,
            loc="lower left",
            bbox_to_anchor=(0.0, 1.0),
            ncols=len(handles),
            frameon=False,
            borderaxespad=0.2,
        )
    return xs


def _atomic_write(path: Path, write: Callable[[BinaryIO], object]) -> None:
    """Render via ``write(fileobj)`` into memory, then write the bytes atomically (temp file + rename)."""
    from .jsonio import atomic_write_bytes

    buf = io.BytesIO()
    write(buf)
    atomic_write_bytes(path, buf.getvalue())


def _save(fig: Figure, out_dir: Path, stem: str) -> None:
    """Save PNG and SVG deterministically."""
    _atomic_write(
        out_dir / f"{stem}.png", lambda fh: fig.savefig(fh, format="png", dpi=DPI, metadata={"Software": None})
    )
    _atomic_write(
        out_dir / f"{stem}.svg", lambda fh: fig.savefig(fh, format="svg", metadata={"Date": None, "Creator": None})
    )


def _pct(v: float) -> str:
    return f"{100 * (v - 1):+.1f}"


def _gain_label(data: Tables, cell: Cell) -> tuple[str, str]:
    """'+12.3 %' over '[+5.1, +20.3]', coloured by the verdict of the speedup interval."""
    sp = data.spd(cell, "speedup")
    if sp is None:
        return "", "black"
    text = f"{_pct(sp.point)} %"
    if sp.lo is not None and sp.hi is not None:  # sp.has_interval
        text += f"\n[{_pct(sp.lo)}, {_pct(sp.hi)}]"
    return text, _verdict_color(data.verdict(cell))


def _verdict_color(verdict: str | None) -> str:
    """Green for a verdict starting with faster, red for slower, grey for anything else."""
    return next((c for v, c in VERDICT_COLORS.items() if (verdict or "").startswith(v)), NOISE_COLOR)


VERDICT_KEY = "label: % change vs {b} [95 % interval]; green faster, red slower, grey equivalent or undecided"


# ------------------------------------------------------------------------ figures


@dataclass
class _Ctx:
    """What every figure function gets: the tables, the headline model, the output dir."""

    data: Tables
    model: str
    out_dir: Path | None
    keep: dict[str, Figure] = field(default_factory=dict)  # figures not saved (out_dir None)
    labels: dict[str, list[Any]] = field(default_factory=dict)  # placed label artists per figure
    markers: dict[str, list[tuple[str, float, float]]] = field(default_factory=dict)  # display positions
    k_ref: KRef | None = None  # figure 8's prediction: K measured on a real model in another run
    r_runs: list[Tables] = field(default_factory=list)  # figure 8: other runs whose R is drawn beside this run's

    @contextmanager
    def figure(
        self,
        stem: str,
        needs: _Needs,
        size: tuple[float, float],
        ncols: int,
        title: str,
        data: Tables | None = None,
        nrows: int = 1,
        **layout: float,
    ) -> Iterator[list[Axes]]:
        """Create a figure (title, footer of ``data``, default the run's tables; missing box), yield its axes
        (``nrows`` x ``ncols``, row by row), save it on exit. A figure none of whose needed cells was measured is
        left out (:class:`LeftOut`), never drawn empty."""
        if not needs.used:
            raise LeftOut(f"no measured cell among the {len(needs.needed)} it needs in run {self.data.run}")
        footer = (data or self.data).footer(needs.needed)
        fig, axes = _new_figure(size, ncols, title, needs, footer, nrows=nrows, **layout)
        yield axes
        if self.out_dir is not None:
            _save(fig, self.out_dir, stem)
        else:
            self.keep[stem] = fig

    def headline_absent(self, needs: _Needs, axes: Sequence[Axes]) -> bool:
        """If the headline model has no rows, the figure is left out (:class:`LeftOut`)."""
        if self.data.has_model(self.model):
            return False
        raise LeftOut(f"model {self.model!r} has no rows in run {self.data.run!r}")

    def color(self, config: str) -> str:
        return COLORS["baseline"] if config == self.data.baseline else COLORS.get(config, "#333333")


def _baseline_vs_headline(ctx: _Ctx) -> tuple[list[str], tuple[str, str], _Needs]:
    """The headline model's workloads, the two configs compared, and the cells that needs (figures 1 and 6)."""
    workloads = ctx.data.workloads(ctx.model, canonical_all=True)
    series = (ctx.data.baseline, HEADLINE_CONFIG)
    return workloads, series, _Needs.of(ctx.data, _grid([ctx.model], workloads, series))


def _throughput_bars(
    ctx: _Ctx,
    ax: Axes,
    groups: Sequence[str],
    series: Sequence[str],
    values: Mapping[tuple[str, str], Val | None],
    labels: Mapping[tuple[str, str], tuple[str, str]],
    config_of: Callable[[str, str], str],
    xlabel: str,
) -> None:
    """Output tokens/s bars (figures 1 and 3), each coloured by its ladder step (`config_of(group, series)`)."""
    _bars(
        ax,
        groups,
        series,
        values,
        color=lambda g, sr: ctx.color(config_of(g, sr)),
        labels=labels,
        ylabel="output tokens/s",
        repeats=ctx.data.repeats,
        headroom=1.3,
    )
    ax.set_xlabel(xlabel)
    ax.set_title(VERDICT_KEY.format(b=ctx.data.baseline), loc="right", fontsize=7, color="#444444")


def _fig1_headline(ctx: _Ctx) -> _Needs:
    data, model = ctx.data, ctx.model
    workloads, series, needs = _baseline_vs_headline(ctx)
    title = f"{model}: {data.baseline} vs {HEADLINE_CONFIG}, output throughput per workload"
    with ctx.figure("fig1_headline", needs, (9.0, 4.8), 1, title, top_extra_in=0.25) as (ax,):
        if ctx.headline_absent(needs, [ax]):
            return needs
        values = {(w, c): data.val((model, w, c), "output_tok_s") for w in workloads for c in series}
        labels = {(w, HEADLINE_CONFIG): _gain_label(data, (model, w, HEADLINE_CONFIG)) for w in workloads}
        _throughput_bars(ctx, ax, workloads, series, values, labels, lambda _, c: c, "workload")
        needs.notes.append(
            f"labels: speedup of {HEADLINE_CONFIG} over {data.baseline} as % with its 95 % "
            "interval (speedup.parquet speedup/_lo/_hi), coloured by verdict"
        )
    return needs


def _fig2_r_vs_k(ctx: _Ctx) -> _Needs:
    data, model, workload = ctx.data, ctx.model, "code"
    methods = [c for c in data.ladder(model, workload) if c != data.baseline]
    needs = _Needs.of(data, _grid([model], [workload], (data.baseline, *methods)))
    title = f"{model}: step-time ratio R, accepted length K and tokens-per-step ratio T on '{workload}'"
    with ctx.figure("fig2_r_vs_k_code", needs, (8.0, 5.0), 1, title, top_extra_in=0.2) as (ax,):
        if ctx.headline_absent(needs, [ax]):
            return needs
        values: dict[tuple[str, str], Val | None] = {}
        for method in methods:
            key = (model, workload, method)
            for q in ("R", "K", "T"):  # K is the cell's own (it needs no baseline)
                values[(method, q)] = data.val(key, "K") if q == "K" else data.spd(key, q)
        labels = {key: (f"{v.point:.2f}", "black") for key, v in values.items() if v is not None}
        _bars(
            ax,
            methods,
            ("R", "K", "T"),
            values,
            color=lambda _, q: COLORS[q],
            labels=labels,
            ylabel=f"ratio (vs {data.baseline}) or tokens per step",
            repeats=data.repeats,
            headroom=1.55,
        )
        ax.axhline(1.0, color="black", linewidth=0.6)
        for i, method in enumerate(methods):
            cell = (model, workload, method)
            top = max((v.top for (m, _), v in values.items() if m == method and v is not None), default=0.0)
            sp = data.spd(cell, "speedup")
            if sp is None:
                text, colour = "speedup n/a", MISSING_COLOR
            else:
                verdict = data.verdict(cell) or "–"
                iv = f" [{sp.lo:.2f}, {sp.hi:.2f}]" if sp.has_interval else ""
                text, colour = f"{verdict}\nspeedup {sp.point:.2f}{iv}", _verdict_color(verdict)
            ax.annotate(
                text,
                (i, top),
                xytext=(0, 22),
                textcoords="offset points",
                ha="center",
                va="bottom",
                fontsize=8,
                fontweight="bold",
                color=colour,
                linespacing=1.1,
            )
        ax.set_xlabel(
            "ladder step   (R: step time vs baseline · K: 1 + accepted/drafts · T: tokens per step vs baseline)"
        )
        needs.notes.append(
            "R, T, speedup and verdict from speedup.parquet, K from cells.parquet, each with its 95 % "
            "interval; "
            "speedup = T / R exactly (ratios of geometric means); K is the per-request proxy for T"
        )
    return needs


def _fig3_sonnet_ladder(ctx: _Ctx) -> _Needs:
    data, model, workload = ctx.data, ctx.model, "sonnet"
    ladder = data.ladder(model, workload)
    needs = _Needs.of(data, _grid([model], [workload], ladder))
    title = f"{model}: '{workload}' ladder ({' → '.join(ladder)}), output throughput"
    with ctx.figure("fig3_sonnet_ladder", needs, (7.5, 4.8), 1, title) as (ax,):
        if ctx.headline_absent(needs, [ax]):
            return needs
        values = {(c, workload): data.val((model, workload, c), "output_tok_s") for c in ladder}
        labels = {(c, workload): _gain_label(data, (model, workload, c)) for c in ladder}
        if values[(data.baseline, workload)] is not None:
            labels[(data.baseline, workload)] = ("baseline", "black")
        _throughput_bars(ctx, ax, ladder, (workload,), values, labels, lambda c, _: c, "ladder step")
        needs.notes.append("labels: speedup vs the baseline as % with its 95 % interval, coloured by verdict")
    return needs


def _fig4_k_alpha(ctx: _Ctx) -> _Needs:
    from matplotlib.lines import Line2D

    data, model = ctx.data, ctx.model
    needs = _Needs.of(data, _grid([model], K_ALPHA_WORKLOADS, (data.baseline, *SPEC_METHODS)))
    title = f"{model}: mean accepted length K (with each cell's own R and T) and acceptance rate α"
    with ctx.figure("fig4_k_alpha", needs, (12.0, 5.0), 2, title, top_extra_in=0.35) as (ax_k, ax_a):
        if ctx.headline_absent(needs, [ax_k, ax_a]):
            return needs
        kvals = {(w, m): data.val((model, w, m), "K") for w in K_ALPHA_WORKLOADS for m in SPEC_METHODS}
        inside = {key: f"{v.point:.2f}" for key, v in kvals.items() if v is not None}
        xs = _bars(
            ax_k,
            K_ALPHA_WORKLOADS,
            SPEC_METHODS,
            kvals,
            color=lambda _, m: COLORS[m],
            ylabel="K = 1 + accepted / drafts (tokens per verify step)",
            repeats=data.repeats,
            inside=inside,
            legend=False,
        )
        bar_w_pts = 0.8 / len(SPEC_METHODS) * 0.92
        tops = [v.top for v in kvals.values() if v is not None]
        for (w, m), x in sorted(xs.items()):
            cell = (model, w, m)
            for q, marker, colour, dx in (("R", "_", "#c00000", -0.07), ("T", "D", "black", 0.07)):
                v = data.spd(cell, q)
                if v is None:
                    continue
                tops.append(v.top)
                ax_k.plot(
                    [x + dx * bar_w_pts],
                    [v.point],
                    marker=marker,
                    color=colour,
                    linestyle="none",
                    markersize=11 if marker == "_" else 4.5,
                    markeredgewidth=2.2 if marker == "_" else 0.8,
                    zorder=4,
                )
                _whisker(ax_k, x + dx * bar_w_pts, v, color=colour, zorder=4)
        ax_k.set_ylim(0, max(tops, default=1.0) * 1.18 or 1.0)
        handles = [
            *[Line2D([], [], color=COLORS[m], linewidth=8, label=m) for m in SPEC_METHODS],
            Line2D(
                [],
                [],
                color="#c00000",
                marker="_",
                markersize=11,
                markeredgewidth=2.2,
                linestyle="none",
                label="R of the cell (step time vs baseline)",
            ),
            Line2D(
                [],
                [],
                color="black",
                marker="D",
                markersize=4.5,
                linestyle="none",
                label="T of the cell (speedup = T / R)",
            ),
        ]
        ax_k.legend(
            handles=handles, loc="lower left", bbox_to_anchor=(0.0, 1.0), ncols=2, frameon=False, borderaxespad=0.2
        )
        ax_k.set_xlabel("workload")
        ax_k.set_title("a) K", loc="right")
        avals = {(w, m): data.val((model, w, m), "alpha") for w in K_ALPHA_WORKLOADS for m in SPEC_METHODS}
        labels = {key: (f"{v.point:.2f}", "black") for key, v in avals.items() if v is not None}
        _bars(
            ax_a,
            K_ALPHA_WORKLOADS,
            SPEC_METHODS,
            avals,
            color=lambda _, m: COLORS[m],
            labels=labels,
            ylabel="α = accepted / draft tokens",
            repeats=data.repeats,
        )
        ax_a.set_xlabel("workload")
        ax_a.set_title("b) α", loc="right")
        needs.notes.append(
            "K, alpha from cells.parquet; R (red bar) and T (black diamond) of each cell from "
            "speedup.parquet, each with its 95 % interval. K above R is not a speedup: "
            "the speedup is T / R"
        )
    return needs


def _dodge(points: list[tuple[str, float]], sep: float) -> dict[str, float]:
    """1-D dodge: keys with log-positions ``points`` (sorted) moved apart to at least ``sep``, each cluster
    kept centred on its own mean.  Deterministic."""
    clusters: list[list[tuple[str, float]]] = []
    for key, x in points:
        if clusters:
            last = clusters[-1]
            centre = sum(p for _, p in last) / len(last)
            left = centre - sep * (len(last) - 1) / 2
            if left + sep * len(last) - x < sep - 1e-12 and x - (left + sep * (len(last) - 1)) < sep:
                last.append((key, x))
                continue
        clusters.append([(key, x)])
    # merge clusters that still overlap after spreading
    merged = True
    while merged:
        merged = False
        for i in range(len(clusters) - 1):
            a, b = clusters[i], clusters[i + 1]
            ca, cb = sum(p for _, p in a) / len(a), sum(p for _, p in b) / len(b)
            if (cb - sep * (len(b) - 1) / 2) - (ca + sep * (len(a) - 1) / 2) < sep:
                clusters[i : i + 2] = [a + b]
                merged = True
                break
    out: dict[str, float] = {}
    for cl in clusters:
        centre = sum(p for _, p in cl) / len(cl)
        for k, (key, _) in enumerate(cl):
            out[key] = centre + sep * (k - (len(cl) - 1) / 2)
    return out


LEADER_MIN = 8.0  # pt: a label further than this from its point gets a leader line


def _gap(bb: Any, px: float, py: float) -> float:
    """Distance from the point (px, py) to the box bb (0 inside)."""
    return math.hypot(max(bb.x0 - px, 0, px - bb.x1), max(bb.y0 - py, 0, py - bb.y1))


def _box_hits(box: tuple[float, float, float, float], arr: Any) -> int:
    """How many of the boxes ``arr`` (N x 4: x0, y0, x1, y1) the box (x0, y0, x1, y1) overlaps."""
    if not len(arr):
        return 0
    return int(((arr[:, 0] < box[2]) & (box[0] < arr[:, 2]) & (arr[:, 1] < box[3]) & (box[1] < arr[:, 3])).sum())


def _seg_hits(p: tuple[float, float], q: tuple[float, float], arr: Any) -> int:
    """How many of the boxes ``arr`` (N x 4) the segment p-q passes through (sampled at 33 points)."""
    import numpy as np

    if not len(arr):
        return 0
    t = np.linspace(0.0, 1.0, 33)[:, None]
    x, y = p[0] + (q[0] - p[0]) * t, p[1] + (q[1] - p[1]) * t
    inside = (arr[None, :, 0] <= x) & (x <= arr[None, :, 2]) & (arr[None, :, 1] <= y) & (y <= arr[None, :, 3])
    return int(inside.any(axis=0).sum())


def _seg_seg(
    p1: tuple[float, float], p2: tuple[float, float], q1: tuple[float, float], q2: tuple[float, float]
) -> bool:
    """Whether two segments cross (proper intersection)."""

    def orient(a: tuple[float, float], b: tuple[float, float], c: tuple[float, float]) -> float:
        return (b[0] - a[0]) * (c[1] - a[1]) - (b[1] - a[1]) * (c[0] - a[0])

    return (orient(p1, p2, q1) * orient(p1, p2, q2) < 0) and (orient(q1, q2, p1) * orient(q1, q2, p2) < 0)


def _leader_start(bb: Any, px: float, py: float) -> tuple[float, float]:
    """Where a leader from box bb towards (px, py) leaves the box (its edge on the line from the centre)."""
    cx, cy = (bb.x0 + bb.x1) / 2, (bb.y0 + bb.y1) / 2
    dx, dy = px - cx, py - cy
    t = min((bb.width / 2) / abs(dx) if dx else math.inf, (bb.height / 2) / abs(dy) if dy else math.inf, 1.0)
    return cx + dx * t, cy + dy * t


def _plan_labels(
    items: list[tuple[float, float, float, float, Any]], order: list[int], obstacles: list[Any], ax_box: Any, s: float
) -> tuple[float, dict[int, Any]]:
    """Greedy placement of label boxes in ``order``; items are (px, py, w, h, near) in display pixels.
    Returns (cost, {item index: box}); cost counts collisions heavily, then the leaders' length."""
    import numpy as np
    from matplotlib.transforms import Bbox

    pad = 2.0 * s
    obs = np.array([[o.x0, o.y0, o.x1, o.y1] for o in obstacles], dtype=float).reshape(-1, 4)
    boxes: dict[int, Any] = {}
    placed = np.zeros((0, 4))
    leaders: list[tuple[tuple[float, float], tuple[float, float]]] = []
    lead_pts = np.zeros((0, 4))  # sampled leader points as tiny boxes
    cost = 0.0
    for idx in order:
        px, py, w, h, near = items[idx]
        others = (
            obs[~((obs[:, 0] < near.x1) & (near.x0 < obs[:, 2]) & (obs[:, 1] < near.y1) & (near.y0 < obs[:, 3]))]
            if len(obs)
            else obs
        )
        best = None
        g: float
        for g in (3, 8, 16, 28, 44, 64, 90):
            g *= s
            cands = (
                (near.x1 + g, py - h / 2),
                (near.x0 - g - w, py - h / 2),  # right, left
                (px - w / 2, near.y1 + g),
                (px - w / 2, near.y0 - g - h),  # above, below
                (near.x1 + g, near.y1 + g - h / 2),
                (near.x1 + g, near.y0 - g - h / 2),  # right, up/down
                (near.x0 - g - w, near.y1 + g - h / 2),
                (near.x0 - g - w, near.y0 - g - h / 2),
                (px, near.y1 + g),
                (px - w, near.y1 + g),
                (px, near.y0 - g - h),
                (px - w, near.y0 - g - h),
            )
            for i, (x0, y0) in enumerate(cands):
                inside = x0 >= ax_box.x0 and x0 + w <= ax_box.x1 and y0 >= ax_box.y0 and y0 + h <= ax_box.y1
                grown = (x0 - pad, y0 - pad, x0 + w + pad, y0 + h + pad)
                hits = _box_hits(grown, obs) + _box_hits(grown, placed) + _box_hits(grown, lead_pts)
                if best is not None and (not inside, hits) > best[0][:2]:
                    continue
                bb = Bbox.from_bounds(x0, y0, w, h)
                length = 0.0
                if _gap(bb, px, py) > LEADER_MIN * s:
                    start = _leader_start(bb, px, py)
                    length = math.hypot(start[0] - px, start[1] - py)
                    grown_placed = placed + np.array([-pad, -pad, pad, pad]) if len(placed) else placed
                    hits += _seg_hits(start, (px, py), grown_placed) + _seg_hits(start, (px, py), others)
                    hits += sum(_seg_seg(start, (px, py), p, q) for p, q in leaders)
                score = (not inside, hits, g, i)
                if best is None or score < best[0]:
                    best = (score, bb, length)
            assert best is not None  # set by the first candidate
            if best[0][:2] == (False, 0):
                break
        assert best is not None
        (outside, hits, _, _), bb, length = best
        boxes[idx] = bb
        placed = np.vstack([placed, [bb.x0, bb.y0, bb.x1, bb.y1]])
        cost += 1e6 * outside + 1e4 * hits + length
        if length:
            start = _leader_start(bb, px, py)
            leaders.append((start, (px, py)))
            t = np.linspace(0.0, 1.0, 16)[1:-1, None]
            xs, ys = start[0] + (px - start[0]) * t, start[1] + (py - start[1]) * t
            lead_pts = np.vstack([lead_pts, np.hstack([xs - 1, ys - 1, xs + 1, ys + 1])])
    return cost, boxes


def _place_labels(
    fig: Figure, ax: Axes, anchors: list[tuple[str, float, float, Any]], obstacles: list[Any], fontsize: float = 7.0
) -> list[Any]:
    """Place one label per anchor (text, x, y in data coords, display Bbox of what it names) beside that box,
    nearest first, where it overlaps no other label, leader or obstacle (display Bboxes) and stays inside the
    axes; a label set away from its point gets a leader line, and leaders do not cross.  A few fixed orders of
    placement are tried and the cheapest layout kept: deterministic (pure geometry)."""
    from matplotlib.text import Text

    renderer = _renderer(fig)
    ax_box = ax.get_window_extent(renderer)
    s = fig.dpi / 72
    items = []
    for text, x, y, near in anchors:
        px, py = ax.transData.transform((x, y))
        probe = ax.annotate(
            text, (x, y), xytext=(0, 0), textcoords="offset points", ha="left", va="bottom", fontsize=fontsize
        )
        probe.update_positions(renderer)
        tb = Text.get_window_extent(probe, renderer)
        probe.remove()
        items.append((float(px), float(py), tb.width, tb.height, near))
    n = len(items)
    orders = [
        list(range(n)),
        list(reversed(range(n))),
        sorted(range(n), key=lambda i: (-items[i][1], i)),
        sorted(range(n), key=lambda i: (items[i][1], i)),
    ]
    best = min(
        (_plan_labels(items, o, obstacles, ax_box, s) + (k,) for k, o in enumerate(orders)), key=lambda r: (r[0], r[2])
    )
    boxes = best[1]
    placed = []
    for idx, (text, x, y, _) in enumerate(anchors):
        px, py = items[idx][0], items[idx][1]
        bb = boxes[idx]
        leader = (
            {"arrowstyle": "-", "color": "#888888", "linewidth": 0.6, "shrinkA": 0, "shrinkB": 2}
            if _gap(bb, px, py) > LEADER_MIN * s
            else None
        )
        placed.append(
            ax.annotate(
                text,
                (x, y),
                xytext=((bb.x0 - px) / s, (bb.y0 - py) / s),
                textcoords="offset points",
                ha="left",
                va="bottom",
                fontsize=fontsize,
                zorder=6,
                arrowprops=leader,
                bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.85, "pad": 0.5},
            )
        )
    return placed


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


def _fig5_model_size(ctx: _Ctx) -> _Needs:
    from matplotlib.ticker import FuncFormatter, NullFormatter
    from matplotlib.transforms import Bbox, blended_transform_factory

    data = ctx.data
    models, known, methods, common, stat = size_stats(data)
    needs = _Needs.of(data, [(m, w, c) for m in models for w in common for c in (data.baseline, *methods)])
    title = (
        f"Speedup vs model size: geometric mean over the same {len(common)} workloads for every model "
        f"({', '.join(common) or 'none'})"
    )
    with ctx.figure("fig5_model_size", needs, (9.5, 5.6), 1, title, top_extra_in=0.2) as (ax,):
        unsized = [m for m in models if m not in known]
        if unsized:
            needs.notes.append("not plotted (model_params_b null): " + ", ".join(unsized))
        if not known or not common:
            raise LeftOut(f"no model with a known size and a workload common to all models in run {data.run}")
        lo_x = min(*known.values(), 7.0) / 2.5
        hi_x = max(*known.values(), 14.0) * 2.5
        ax.set_xscale("log")
        ax.set_xlim(lo_x, hi_x)
        ax_w_in = ax.get_position().width * fig_width(ax)
        sep = 10.0 / 72 / ax_w_in * (math.log(hi_x) - math.log(lo_x))  # 10 pt between markers
        for (meth, m), (g, glo, ghi, cnt) in stat.items():
            needs.notes.append(
                f"{meth} {m}: geometric mean speedup over {cnt} of {len(common)} workloads = "
                f"{g:.4f}" + (f" [{glo:.4f}, {ghi:.4f}]" if glo is not None else "")
            )
        order = sorted(((meth, m) for (meth, m) in stat), key=lambda k: (known[k[1]], methods.index(k[0])))
        xs = _dodge([(f"{meth}|{m}", math.log(known[m])) for meth, m in order], sep)
        styles = {"trident": "o", "ngram": "s", "suffix": "^"}
        obstacles = []
        renderer = _renderer(_figure(ax))
        for meth in methods:
            pts = [(math.exp(xs[f"{meth}|{m}"]), *stat[(meth, m)]) for (mm, m) in order if mm == meth]
            if not pts:
                continue
            full = [p for p in pts if p[4] == len(common)]
            part = [p for p in pts if p[4] < len(common)]
            for group, face in ((full, COLORS.get(meth, "#333333")), (part, "white")):
                if not group:
                    continue
                x = [p[0] for p in group]
                y = [p[1] for p in group]
                err = [
                    [p[1] - p[2] if p[2] is not None else 0.0 for p in group],
                    [p[3] - p[1] if p[3] is not None else 0.0 for p in group],
                ]
                ax.errorbar(
                    x,
                    y,
                    yerr=err,
                    fmt=styles.get(meth, "o"),
                    color=COLORS.get(meth, "#333333"),
                    markerfacecolor=face,
                    capsize=3,
                    markersize=6,
                    elinewidth=1.0,
                    label=meth if face != "white" else f"{meth} (incomplete: fewer workloads)",
                    zorder=3,
                )
        # one model's markers joined (a dumbbell), so dodged neighbours (70B, 72B) stay told apart
        for m in known:
            keys = [(meth, m) for meth in methods if (meth, m) in stat]
            if len(keys) > 1:
                ax.plot(
                    [math.exp(xs[f"{k[0]}|{m}"]) for k in keys],
                    [stat[k][0] for k in keys],
                    color="#999999",
                    linewidth=1.0,
                    zorder=2,
                )
        if not stat:
            ax.text(
                0.5,
                0.5,
                f"no model has a speedup on {', '.join(common)} yet",
                transform=ax.transAxes,
                ha="center",
                va="center",
                fontsize=9,
                color=MISSING_COLOR,
            )
        # axes limits fixed before measuring anything in display space
        ax.axhline(1.0, color="black", linewidth=0.8, zorder=1)
        ymin, ymax = ax.get_ylim()
        ymin, ymax = min(ymin, 0.9), max(ymax, 1.1)
        ax.set_ylim(ymin, ymax + 0.18 * (ymax - ymin))
        split = math.sqrt(7.0 * 14.0)
        ax.axvline(split, color="#555555", linestyle="--", linewidth=1.0)
        split_text = ax.text(
            split,
            0.98,
            "≤7B | ≥14B",
            transform=blended_transform_factory(ax.transData, ax.transAxes),
            ha="center",
            va="top",
            fontsize=8,
            color="#555555",
            bbox={"facecolor": "white", "edgecolor": "none", "pad": 1},
        )
        # true sizes as a rug on the x axis
        rug = blended_transform_factory(ax.transData, ax.transAxes)
        for size in known.values():
            ax.plot([size, size], [0.0, 0.025], color="black", linewidth=1.0, transform=rug, clip_on=False)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.grid(True, axis="both", alpha=0.3)
        ax.set_xlabel(
            "model parameters (billions, log scale; ticks at the bottom: true sizes, markers dodged "
            "apart where sizes are close)"
        )
        ax.set_ylabel(f"speedup (output tok/s vs {data.baseline}), geometric mean")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="lower left", bbox_to_anchor=(0.0, 1.0), ncols=4, frameon=False, borderaxespad=0.2)
        # obstacles for the labels: markers, whiskers, the split text
        r = 4.0 * ax.figure.dpi / 72
        for (meth, m), (g, glo, ghi, _) in stat.items():
            px, py = ax.transData.transform((math.exp(xs[f"{meth}|{m}"]), g))
            obstacles.append(Bbox.from_extents(px - r, py - r, px + r, py + r))
            if glo is not None and ghi is not None:  # both or neither
                _, plo = ax.transData.transform((1.0, glo))
                _, phi = ax.transData.transform((1.0, ghi))
                cap = 3.5 * ax.figure.dpi / 72  # the whisker's caps are 3 pt either side
                obstacles.append(Bbox.from_extents(px - cap, plo - 1, px + cap, phi + 1))
        obstacles.append(split_text.get_window_extent(renderer))
        _, y1 = ax.transData.transform((1.0, 1.0))
        obstacles.append(Bbox.from_extents(ax.bbox.x0, y1 - 1, ax.bbox.x1, y1 + 1))
        for m in known:  # the dumbbells
            ends = [
                ax.transData.transform((math.exp(xs[f"{meth}|{m}"]), stat[(meth, m)][0]))
                for meth in methods
                if (meth, m) in stat
            ]
            for (xa, ya), (xb, yb) in pairwise(ends):
                for k in range(1, 8):
                    px, py = xa + (xb - xa) * k / 8, ya + (yb - ya) * k / 8
                    obstacles.append(Bbox.from_extents(px - 1.5, py - 1.5, px + 1.5, py + 1.5))
        anchors = []
        for m in known:
            keys = [(meth, m) for meth in methods if (meth, m) in stat]
            if not keys:
                continue
            ax_ = [math.exp(xs[f"{k[0]}|{m}"]) for k in keys]
            ay = [stat[k][0] for k in keys]
            disp = [ax.transData.transform((xx, yy)) for xx, yy in zip(ax_, ay, strict=True)]
            near = Bbox.from_extents(
                min(d[0] for d in disp) - r,
                min(d[1] for d in disp) - r,
                max(d[0] for d in disp) + r,
                max(d[1] for d in disp) + r,
            )
            anchors.append((f"{_short(m)} ({known[m]:g}B)", sum(ax_) / len(ax_), sum(ay) / len(ay), near))
        ctx.labels["fig5_model_size"] = _place_labels(_figure(ax), ax, anchors, obstacles)
        ctx.markers["fig5_model_size"] = [
            (f"{meth} {m}", *_display(ax, math.exp(xs[f"{meth}|{m}"]), stat[(meth, m)][0])) for meth, m in order
        ]
        needs.notes.append(
            f"geometric mean (stats.geomean) over the common workloads {common}; whiskers: "
            "geometric means of the per-workload 95 % intervals (conservative: assumes the "
            "workloads' errors move together); hollow marker: some of those workloads lack a "
            "speedup"
        )
    return needs


def fig_width(ax: Axes) -> float:
    return float(_figure(ax).get_size_inches()[0])


def _figure(ax: Axes) -> Figure:
    """The figure an axes is on (every axes here is on a top-level Figure, never a SubFigure)."""
    return cast("Figure", ax.figure)


def _renderer(fig: Figure) -> RendererAgg:
    """The renderer of a figure (every figure here is drawn on FigureCanvasAgg)."""
    return cast("FigureCanvasAgg", fig.canvas).get_renderer()


def _display(ax: Axes, x: float, y: float) -> tuple[float, float]:
    """A data point in display pixels."""
    px, py = ax.transData.transform((x, y))
    return float(px), float(py)


def _fig6_gpu_util(ctx: _Ctx) -> _Needs:
    data, model = ctx.data, ctx.model
    workloads, series, needs = _baseline_vs_headline(ctx)
    title = f"{model}: GPU utilisation, throughput and wall time, {data.baseline} vs {HEADLINE_CONFIG}"
    panels = [
        ("gpu_util_mean", "GPU utilisation (mean %)", "GPU utilisation"),
        ("output_tok_s", "output tokens/s", "output throughput"),
        ("gen_wall_s", "generation wall time (s)", "wall time"),
    ]
    unmeasured = [c for c in needs.used if data.val(c, "gpu_util_mean") is None]
    if needs.used and len(unmeasured) == len(needs.used):  # a panel without data is left out, not drawn empty
        device = _distinct(data.rows_of(needs.used), "device_name")
        panels = panels[1:]
        needs.notes.append(f"panel 'GPU utilisation' left out: gpu_util_mean null in every measured cell ({device})")
    elif unmeasured:
        needs.notes.append("gpu_util_mean null for: " + ", ".join("/".join(c) for c in unmeasured))
    size = (5.0 * len(panels), 5.0)
    with ctx.figure("fig6_gpu_util", needs, size, len(panels), title, bottom_in=0.7, top_extra_in=0.2) as axes:
        if ctx.headline_absent(needs, axes):
            return needs
        for i, (ax, (column, ylabel, panel_title)) in enumerate(zip(axes, panels, strict=True)):
            ax.set_title(f"{'abc'[i]}) {panel_title}", loc="right")
            values = {(w, c): data.val((model, w, c), column) for w in workloads for c in series}
            _bars(
                ax,
                workloads,
                series,
                values,
                color=lambda _, c: ctx.color(c),
                ylabel=ylabel,
                repeats=data.repeats,
                rotate=True,
            )
    return needs


def _fig7_k_predicted(ctx: _Ctx) -> _Needs:
    from matplotlib.lines import Line2D

    from .claims import k_predictions

    data, model = ctx.data, ctx.model
    sizes = data.model_sizes()
    spec = [
        c
        for c, row in sorted(data.cells.items(), key=lambda kv: (sizes.get(kv[0][0]) or 0.0, kv[0]))
        if row.get("method") not in (None, "none") and c[0] not in data.dummy  # random weights: no acceptance
    ]
    needs = _Needs.of(data, spec)
    title = (
        "Measured K against K predicted from the acceptance at draft position 1, p1, and the mean draft "
        "length g: linear 1 + p1·g, Leviathan (1 − p1^(g+1)) / (1 − p1)"
    )
    with ctx.figure("fig7_k_predicted", needs, (12.0, 5.6), 2, title, top_extra_in=0.35) as (ax_p, ax_c):
        preds = []
        for cell in needs.used:
            row = data.row(cell)
            p = k_predictions(row) if row is not None else None
            if p is None:
                needs.notes.append(f"{'/'.join(cell)}: no per-position counts, not predicted")
                continue
            preds.append((cell, p, data.val(cell, "K")))
        if not preds:
            raise LeftOut("no speculative cell with per-position acceptance counts: nothing to predict K from")
        configs = _order([c for (_, _, c), _, _ in preds], LADDER)
        forms = (("K_linear", "o", "linear"), ("K_leviathan", "^", "Leviathan"))
        lo_v, hi_v = 1.0, 2.0
        for cfg in configs:
            mine = [(cell, p, k) for cell, p, k in preds if cell[2] == cfg]
            for key, marker, _ in forms:
                xs = [p["K"] for _, p, _ in mine]
                ys = [p[key] for _, p, _ in mine]
                err = [
                    [(p["K"] - k.lo) if k is not None and k.has_interval else 0.0 for _, p, k in mine],
                    [(k.hi - p["K"]) if k is not None and k.has_interval else 0.0 for _, p, k in mine],
                ]
                face = ctx.color(cfg) if key == "K_linear" else "none"
                yerr = [  # from p1's Wilson interval (claims.k_predictions)
                    [p[key] - p[f"{key}_lo"] for _, p, _ in mine],
                    [p[f"{key}_hi"] - p[key] for _, p, _ in mine],
                ]
                ax_p.errorbar(
                    xs,
                    ys,
                    xerr=err,
                    yerr=yerr,
                    fmt=marker,
                    markersize=4.5,
                    color=ctx.color(cfg),
                    markerfacecolor=face,
                    markeredgewidth=0.9,
                    elinewidth=0.6,
                    capsize=0,
                    alpha=0.85,
                    zorder=3,
                )
                lo_v, hi_v = min(lo_v, *xs, *ys), max(hi_v, *xs, *ys)
            for _cell, p, k in mine:  # a cell measured fewer times than the run's n says so
                if k is not None and 0 < k.n < data.repeats:
                    ax_p.annotate(
                        f"n={k.n}",
                        (p["K"], p["K_linear"]),
                        xytext=(4, 2),
                        textcoords="offset points",
                        fontsize=6,
                        color="#444444",
                    )
        span = hi_v - lo_v
        lim = (max(0.0, lo_v - 0.05 * span), hi_v + 0.08 * span)
        ax_p.plot(lim, lim, color="black", linestyle="--", linewidth=0.9, zorder=2)
        ax_p.set_xlim(lim)
        ax_p.set_ylim(lim)
        ax_p.set_aspect("equal", adjustable="box")
        ax_p.grid(True, axis="both", alpha=0.3)
        ax_p.set_xlabel("measured K (median over repeats; whisker: 95 % interval)")
        ax_p.set_ylabel("predicted K")
        err_text = ""
        if preds:
            lin = sum(abs(p["err_linear"]) for _, p, _ in preds) / len(preds)
            lev = sum(abs(p["err_leviathan"]) for _, p, _ in preds) / len(preds)
            err_text = f"mean |error| over {len(preds)} cells: linear {lin:.2f}, Leviathan {lev:.2f}"
            needs.notes.append(err_text)
        ax_p.set_title(f"a) {err_text or 'no speculative cell with per-position counts'}", loc="left", fontsize=8)
        handles = [
            *[Line2D([], [], color=ctx.color(c), marker="s", linestyle="none", markersize=6, label=c) for c in configs],
            *[
                Line2D(
                    [],
                    [],
                    color="#333333",
                    marker=mk,
                    markerfacecolor="#333333" if k == "K_linear" else "none",
                    linestyle="none",
                    markersize=5,
                    label=lab,
                )
                for k, mk, lab in forms
            ],
            Line2D([], [], color="black", linestyle="--", linewidth=0.9, label="y = x"),
        ]
        ax_p.set_anchor("W")
        ax_p.legend(
            handles=handles,
            loc="upper left",
            bbox_to_anchor=(1.02, 1.0),
            frameon=False,
            fontsize=7,
            title="step / prediction",
            title_fontsize=7,
            alignment="left",
        )

        # b) conditional acceptance per draft position, headline model
        styles = {"sonnet": "-", "chat": "--", "code": ":"}
        markers = {"sonnet": "o", "chat": "s", "code": "^"}
        drawn = 0
        max_pos = 1
        for w in K_ALPHA_WORKLOADS:
            for cfg in SPEC_METHODS:
                cell = (model, w, cfg)
                row = data.row(cell)
                if row is None or not row.get("drafts") or not row.get("accepted_per_pos"):
                    continue
                counts = [float(row["drafts"]), *map(float, row["accepted_per_pos"])]
                pos, val, lo, hi = [], [], [], []
                for i in range(1, len(counts)):
                    if counts[i - 1] < MIN_REACHED:
                        break
                    pos.append(i)
                    val.append(counts[i] / counts[i - 1])
                    a, b = stats.wilson(counts[i], counts[i - 1])
                    lo.append(a)
                    hi.append(b)
                if not pos:
                    continue
                drawn += 1
                max_pos = max(max_pos, pos[-1])
                ax_c.plot(
                    pos,
                    val,
                    color=ctx.color(cfg),
                    linestyle=styles.get(w, "-"),
                    marker=markers.get(w, "o"),
                    markersize=3.5,
                    linewidth=1.2,
                    label=f"{cfg} · {w}",
                )
                ax_c.fill_between(pos, lo, hi, color=ctx.color(cfg), alpha=0.12, linewidth=0)
        if drawn:
            from matplotlib.ticker import MaxNLocator

            ax_c.set_xlim(0.5, max_pos + 0.5)
            ax_c.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax_c.set_ylim(0, 1.05)
            ax_c.legend(loc="best", ncols=2, frameon=True, framealpha=0.9, fontsize=7)
            ax_c.set_xlabel(f"draft position i (drawn while ≥ {MIN_REACHED} drafts reach it)")
            ax_c.set_ylabel("P(accept i | accepted i−1)")
            ax_c.grid(True, axis="both", alpha=0.3)
        elif not data.has_model(model):
            _message(ax_c, f"no rows for model {model} in run {data.run}", color=MISSING_COLOR)
        else:
            _message(ax_c, f"no per-position counts for {model}", color=MISSING_COLOR)
        ax_c.set_title(
            f"b) {model}: conditional acceptance per draft position (band: Wilson 95 %)", loc="left", fontsize=8
        )
        needs.notes.append(
            "a) every speculative cell of the run; p1 = accepted at position 1 / drafts, "
            "g = draft tokens / drafts (claims.k_predictions). b) accepted at i / accepted at "
            "i-1, counts summed over repeats; Wilson interval treats positions as independent "
            "trials"
        )
    return needs


def r_at_scale(data: Tables) -> tuple[list[str], dict[str, float], list[str], list[str]]:
    """Figure 8's axes: the sized models (smallest first), their sizes, the speculative ladder steps among
    ngram and suffix, and the workloads common to every sized model whose name starts with 'code' (all
    common ones if none does)."""
    sizes = data.model_sizes()
    models = [m for m in data.models() if sizes[m] is not None]
    configs = [c for c in SPEC_METHODS if any(cc == c for (_, _, cc) in data.cells)]
    per_model = [set(data.workloads(m, canonical_all=False)) for m in models]
    common = sorted(set.intersection(*per_model)) if per_model else []
    code = [w for w in common if w.startswith("code")]
    return models, {m: cast(float, sizes[m]) for m in models}, configs, code or common


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
    configs = [c for c in SPEC_METHODS if any(cc == c for d in runs for (_, _, cc) in d.cells)]
    sized = []  # (run, model, its size, its weights' quantization)
    for d in runs:
        models, sizes, _, _ = r_at_scale(d)
        sized += [(d, m, sizes[m], d.quantization(m)) for m in models]
    out = []
    for cfg in configs:
        for w in workloads:
            for d, m, size, q in sized:
                if (v := r_value(d, (m, w, cfg))) is not None:
                    out.append(((cfg, w, q), RPoint(size, m, d.run, v, q)))
    return configs, workloads, out


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
    configs, workloads, points = r_points(data, others)
    return configs, workloads, r_lines(points)


def line_label(line: RLine) -> str:
    cfg, w, q = line
    return f"{cfg} · {w}" + (f" · {q} weights" if q else "")


def _run_conditions(d: Tables, models: Iterable[str]) -> str:
    """What a run's sized models ran on: device, vLLM, TP, GPUs, mean prompt tokens (from its cells table)."""
    wanted = set(models)
    rows = [r for (m, _, _), r in sorted(d.cells.items()) if m in wanted and r.get("n")]
    tps = sorted({int(r["tp"]) for r in rows if r.get("tp") is not None})
    tokens = sorted({round(float(r["input_tokens_mean"])) for r in rows if _num(r.get("input_tokens_mean"))})
    quant = sorted({str(r["quantization"]) for r in rows if r.get("quantization")})
    return (
        f"{_distinct(rows, 'device_name')}, vLLM {_distinct(rows, 'vllm_version')}, "
        f"TP {'/'.join(map(str, tps)) or '?'}, mean prompt {'/'.join(map(str, tokens)) or '?'} tokens"
        + (f", weights quantized to {'/'.join(quant)} on load" if quant else "")
    )


def _size_axis(ax: Axes) -> None:
    """A log axis of model sizes labelled in plain billions (0.5, 1, 2, 5, ...)."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

    ax.set_xscale("log")
    ax.xaxis.set_major_locator(FixedLocator([0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100]))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("model parameters (billions, log)")


#: Figure 8's y ticks (log axis): the article's band edges among round values.
R_TICKS: tuple[float, ...] = (0.5, 0.8, 1.0, 1.25, 1.4, 1.6, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 15.0, 20.0)
#: Figure 8's y axis ends this far above the largest median; a whisker beyond it is clipped and labelled.
R_HEADROOM = 1.3
#: Figure 8's marker of a clipped whisker (an arrow, unlike every run's marker).
CLIP_MARKER = r"$\uparrow$"


def _fig8_r_at_scale(ctx: _Ctx) -> _Needs:
    """R against model size on a log y axis that keeps the article's band (1.25-1.40) readable: the axis ends
    a little above the largest median, and a whisker beyond it is clipped at the edge with an arrow and its
    bound written beside it. No prediction panel: speedup is T / R, and no validated model of T exists yet."""
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter, NullLocator

    data = ctx.data
    models, _, _, _ = r_at_scale(data)
    configs, workloads, every = r_points(data, ctx.r_runs)
    series = r_lines(every)
    needs = _Needs.of(data, [(m, w, c) for m in models for w in workloads for c in (data.baseline, *configs)])
    title = (
        "R at scale: step time of each drafter over the baseline's, against model size "
        f"({', '.join(workloads) or 'no workload'})"
    )
    styles = ("-", "--", ":", "-.")
    run_markers = {d.run: "os^Dv"[i % 5] for i, d in enumerate([data, *ctx.r_runs])}
    points = [p for pts in series.values() for p in pts]
    drawn_runs = [d for d in (data, *ctx.r_runs) if any(p.run == d.run for p in points)]
    single = sorted(f"{p.model}/{w}/{c} (run {p.run})" for (c, w, _), p in every if p.r.n < 2)
    single_note = f"left out, R from a single repeat (n = 1): {', '.join(single)}"
    if not points:
        raise LeftOut(
            f"R only from single repeats (n = 1) in run {data.run}: {', '.join(single)}"
            if single
            else f"no sized model with an ngram or suffix step in run {data.run}"
        )
    # the legend goes below the axes: room for its rows, two a row
    rows = -(-(2 + len(series) + (len(drawn_runs) if len(drawn_runs) > 1 else 0)) // 2)
    legend_in = 0.18 * rows
    size = (8.5, 6.0 + legend_in)
    with ctx.figure("fig8_r_at_scale", needs, size, 1, title, top_extra_in=0.1, bottom_in=0.55 + legend_in) as (ax,):
        lo, hi = ARTICLE_R_BAND
        top = max(max(p.r.point for p in points) * R_HEADROOM, hi * 1.15)
        bottom = min(min(min(p.r.point, p.r.lo if p.r.lo is not None else p.r.point) for p in points) / 1.08, 0.95)
        ax.set_yscale("log")
        ax.set_ylim(bottom, top)
        ax.axhspan(lo, hi, color="#d9d9d9", zorder=0, label=f"article: R {lo:.2f}–{hi:.2f} (70B, TP 8)")
        ax.axhline(1.0, color="black", linewidth=0.6)
        clipped: list[str] = []
        at_top: dict[float, int] = {}  # clipped whiskers per size so far: their labels stack downwards
        for i, (line, pts) in enumerate(series.items()):
            cfg, w, q = line
            colour = COLORS.get(cfg, "#333333")
            face = "none" if q else colour  # quantized weights: open markers, a thinner line
            dodge = 1.0 + 0.035 * (i - (len(series) - 1) / 2)  # lines side by side: whiskers apart
            xs = [p.size * dodge for p in pts]
            ax.plot(
                xs,
                [p.r.point for p in pts],
                styles[workloads.index(w) % len(styles)],
                color=colour,
                linewidth=0.9 if q else 1.3,
                label=line_label(line),
            )
            for x, p in zip(xs, pts, strict=True):
                ax.plot([x], [p.r.point], run_markers[p.run], color=colour, markersize=5, mfc=face)
                if not p.r.has_interval:
                    continue
                r_hi = cast(float, p.r.hi)
                _whisker(ax, x, Val(p.r.point, p.r.lo, min(r_hi, top), p.r.n), color=colour)
                if r_hi > top:  # clipped: an arrow at the edge and the bound beside it
                    k = at_top.get(p.size, 0)
                    at_top[p.size] = k + 1
                    ax.plot([x], [top], marker=CLIP_MARKER, color=colour, markersize=9, clip_on=False, zorder=5)
                    ax.annotate(
                        f"{r_hi:.1f}",
                        (x, top),
                        xytext=(5, -3 - 10 * k),
                        textcoords="offset points",
                        ha="left",
                        va="top",
                        fontsize=7,
                        color=colour,
                    )
                    clipped.append(f"{p.model}/{w}/{cfg} (run {p.run}): upper bound {r_hi:.2f}")
        if len(drawn_runs) > 1:
            for d in drawn_runs:
                ax.plot([], [], run_markers[d.run], color="#555555", linestyle="none", label=f"run {d.run}")
        handles = ax.get_legend_handles_labels()[0]
        if clipped:
            handles.append(
                Line2D(
                    [],
                    [],
                    marker=CLIP_MARKER,
                    markersize=9,
                    color="#555555",
                    linestyle="none",
                    label="↑ n.n: whisker beyond the axis, its upper bound",
                )
            )
        sizes = [p.size for p in points]
        _size_axis(ax)
        ax.set_xlim(min(sizes) / 1.6, max(sizes) * 1.6)
        ax.yaxis.set_major_locator(FixedLocator([t for t in R_TICKS if bottom <= t <= top]))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_minor_locator(NullLocator())
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.set_ylabel(f"R = step time / {data.baseline} step time (log)")
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(0.0, -0.12), ncols=2, fontsize=7, frameon=False)
        ax.set_title("R with 95 % intervals", loc="left", fontsize=8)
        needs.notes.append(
            "R over decode steps where the prefill probe ran (R_decode), else over all steps; weights: see "
            "the run's cells (dummy weights measure step cost only, never acceptance); log y axis, lines "
            "dodged sideways so that their whiskers stay apart"
        )
        if clipped:
            needs.notes.append("whiskers clipped at the top of the axis: " + "; ".join(clipped))
        if single:
            needs.notes.append(single_note)
        if len(drawn_runs) > 1:
            for d in drawn_runs:
                mine = sorted({p.model for p in points if p.run == d.run})
                needs.notes.append(
                    f"marker {run_markers[d.run]!r}: run {d.run} ({', '.join(mine)}; {d.n_text(d.cells)}; "
                    f"{_run_conditions(d, mine)})"
                )
            needs.notes.append(
                "each R pairs a drafter's cells with the baseline's of the same run and machine; the runs differ "
                "in what the line above each lists"
            )
    return needs


# ------------------------------------------------------------------------ figure 9: concurrency

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


def _b_axis(ax: Axes, bs: Sequence[int]) -> None:
    """A log axis of concurrencies, ticked at the measured b in plain integers."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

    ax.set_xscale("log")
    ax.xaxis.set_major_locator(FixedLocator(sorted(set(bs))))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlim(min(bs) / 1.5, max(bs) * 1.5)
    ax.set_xlabel("concurrency b (requests in flight, log)")
    ax.grid(True, axis="both", which="major")


def _fig9_concurrency(ctx: _Ctx) -> _Needs:
    data = ctx.data.concurrency()
    curves = concurrency_curves(data)
    cross = crossovers(data)
    models = [m for m in data.models() if any(k[0] == m for k in curves)]
    needs = _Needs.of(data, [c for pts in curves.values() for _, c in pts])
    workloads = _order({k[1] for k in curves}, WORKLOADS)
    steps = _order({k[2] for k in curves}, (data.baseline, *LADDER))
    drafters = [c for c in steps if c != data.baseline]
    styles = ("-", "--", ":", "-.")
    legend_rows = -(-(len(drafters) * len(workloads) + 1) // 2)
    legend_in = 0.18 * max(legend_rows, -(-len(steps) * len(workloads) // 2))
    rows = max(len(models), 1)
    size = (11.0, 0.9 + 3.6 * rows + legend_in)
    title = f"Speedup over {data.baseline} at the same concurrency b, and time per output token, against b"
    with ctx.figure(
        CONCURRENCY_FIGURE, needs, size, 2, title, data=data, nrows=rows, bottom_in=0.55 + legend_in
    ) as axes:
        if not models:
            for a in axes:
                _message(a, f"no cell at a concurrency in run {data.run}", color=MISSING_COLOR)
            return needs
        bs = [b for pts in curves.values() for b, _ in pts]
        below: dict[str, Any] = {
            "loc": "upper left",
            "bbox_to_anchor": (0.0, -0.16),
            "ncols": 2,
            "fontsize": 7,
            "frameon": False,
        }
        for i, model in enumerate(models):
            ax, bx = axes[2 * i], axes[2 * i + 1]
            ax.axhline(1.0, color="black", linewidth=0.8)
            for w in workloads:
                style = styles[workloads.index(w) % len(styles)]
                for cfg in steps:
                    pts = curves.get((model, w, cfg), [])
                    colour = ctx.color(cfg)
                    tpot = [(b, 1000 * t) for b, c in pts if (r := data.row(c)) and (t := _num(r.get("tpot_s_median")))]
                    if tpot:
                        bx.plot(*zip(*tpot, strict=True), style, color=colour, marker="o", markersize=3.5,
                                label=f"{cfg} · {w}")  # fmt: skip
                    if cfg == data.baseline:
                        continue
                    sp = [(b, v) for b, c in pts if (v := data.spd(c, "speedup")) is not None]
                    if not sp:
                        continue
                    ax.plot([b for b, _ in sp], [v.point for _, v in sp], style, color=colour, marker="o",
                            markersize=3.5, label=f"{cfg} · {w}")  # fmt: skip
                    for b, v in sp:
                        _whisker(ax, b, v, color=colour)
                    x = cross.get((model, w, cfg))
                    if x is None or not str(x["note"]).startswith("crosses"):
                        continue
                    star, lo, hi = x["b_star"], x["b_star_lo"], x["b_star_hi"]
                    span = [lo if lo is not None else star, hi if hi is not None else star]
                    ax.plot(span, [1.0, 1.0], "-", color=colour, linewidth=4, alpha=0.35, solid_capstyle="butt")
                    ax.plot([star], [1.0], "X", color=colour, markersize=8, markeredgecolor="black", zorder=5)
            for a in (ax, bx):
                _b_axis(a, bs)
            ax.set_ylabel(f"speedup over {data.baseline} (same b)")
            ax.set_title(f"a) {model}: speedup, 95 % intervals; X = b*, band = its interval", loc="left", fontsize=8)
            bx.set_ylabel("TPOT, ms (median over requests)")
            bx.set_title(f"b) {model}: time per output token", loc="left", fontsize=8)
            if not bx.lines:
                _message(bx, "no per-request latency in these cells", color=NOISE_COLOR)
        last_a, last_b = axes[-2], axes[-1]
        handles, labels = axes[0].get_legend_handles_labels()
        from matplotlib.lines import Line2D

        handles.append(Line2D([], [], marker="X", color="#555555", markeredgecolor="black", linestyle="none"))
        labels.append("b*: speedup falls through 1 (log-b interpolation)")
        last_a.legend(handles, labels, **below)
        if axes[1].lines:
            last_b.legend(*axes[1].get_legend_handles_labels(), **below)
        for key, x in cross.items():
            needs.notes.append(
                f"{'/'.join(key)}: b* {x['b_star']} [{x['b_star_lo']}, {x['b_star_hi']}], n = {x['n']}: {x['note']}"
            )
        needs.notes.append(
            "a) each speedup pairs a drafter's cells with the baseline's at the same b; b* interpolated on log b "
            "between the last b with speedup > 1 and the next with speedup < 1; band: where the interval's lower "
            "and upper bounds fall through 1 (pointwise intervals, so its coverage is approximate)"
        )
        needs.notes.append("b) TPOT: median over requests per repeat, median over repeats (no interval)")
    return needs


_DRAW: dict[str, Callable[[_Ctx], _Needs]] = {
    "fig1_headline": _fig1_headline,
    "fig2_r_vs_k_code": _fig2_r_vs_k,
    "fig3_sonnet_ladder": _fig3_sonnet_ladder,
    "fig4_k_alpha": _fig4_k_alpha,
    "fig5_model_size": _fig5_model_size,
    "fig6_gpu_util": _fig6_gpu_util,
    "fig7_k_predicted": _fig7_k_predicted,
    "fig8_r_at_scale": _fig8_r_at_scale,
    "fig9_concurrency": _fig9_concurrency,
}
assert tuple(_DRAW) == FIGURES, "every figure in FIGURES needs a drawing function, in the same order"


@contextmanager
def _style() -> Iterator[None]:
    import matplotlib
    import matplotlib.style

    with matplotlib.style.context("default"), matplotlib.rc_context(cast(Any, STYLE)):
        yield


def render_all(
    tables_dir: Path,
    out_dir: Path,
    headline_model: str,
    run: str,
    k_ref: KRef | None = None,
    r_runs: Sequence[Tables] = (),
    *,
    dummy: Iterable[str] = (),
    left_out: Mapping[str, str] | None = None,
) -> dict:
    """Render every figure of :data:`FIGURES` the run gets (:func:`drawn_figures`: figure 9 only with a
    concurrency axis) as PNG + SVG, and ``manifest.json``, into ``out_dir``; a figure left out is named in the
    manifest's ``left_out`` with the reason.

    Only rows whose ``run`` column equals ``run`` are used.  Returns the manifest:
    ``{"run", "headline_model", "baseline", "repeats", "tables_manifest_sha256", "figures": {stem: {"files",
    "cells", "missing", "partial", "notes"}}}`` where ``cells`` are the cells a figure used (at least one measurement),
    ``missing`` the needed cells without any (status ``failed``/``missing``, or ``absent`` when the tables
    have no row for them at all) and ``partial`` the used cells with fewer repeats than the run's n; and
    ``left_out`` ``{stem: reason}``: the figures not drawn, those of ``left_out`` (:func:`left_out_by_config`)
    and those with nothing to draw. ``dummy``: the run's models with random weights (:func:`dummy_models`).
    """
    tables_dir, out_dir = Path(tables_dir), Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    data = Tables.load(tables_dir, run)
    data.dummy = frozenset(dummy)
    ctx = _Ctx(data=data, model=headline_model, out_dir=out_dir, k_ref=k_ref, r_runs=list(r_runs))
    figures: dict[str, Any] = {}
    drawn = drawn_figures(data.concurrency_axis)
    skipped: dict[str, str] = {stem: left_out_reason(run) for stem in FIGURES if stem not in drawn}
    with _style():
        for stem in drawn:
            if left_out and stem in left_out:
                skipped[stem] = left_out[stem]
                continue
            try:
                figures[stem] = _DRAW[stem](ctx).manifest(stem)
            except LeftOut as why:
                skipped[stem] = str(why)
    from .tables import manifest_sha256

    manifest = {
        "run": run,
        "headline_model": headline_model,
        "baseline": data.baseline,
        "repeats": data.repeats,
        # the tables set drawn from (the sha256 of its MANIFEST.json): `specsweep status` names figures whose
        # tables have changed since (new tables beside old figures after a kill between the two steps)
        "tables_manifest_sha256": manifest_sha256(tables_dir),
        "figures": figures,
        "left_out": {stem: skipped[stem] for stem in FIGURES if stem in skipped},
    }
    text = json.dumps(manifest, sort_keys=True, indent=2, ensure_ascii=False) + "\n"
    _atomic_write(out_dir / "manifest.json", lambda fh: fh.write(text.encode("utf-8")))
    return manifest


def fig5_layout(tables_dir: Path, run: str) -> dict[str, list]:
    """Figure 5 as drawn, in display pixels (dpi 120): ``labels`` [(text, (x0, y0, x1, y1))] (text only, no
    leader) and ``markers`` [("method model", x, y)] (marker centres), for checking that nothing overlaps."""
    from matplotlib.text import Text

    data = Tables.load(Path(tables_dir), run)
    ctx = _Ctx(data=data, model="", out_dir=None)
    with _style():
        _fig5_model_size(ctx)
        fig = ctx.keep["fig5_model_size"]
        renderer = _renderer(fig)
        labels = []
        for ann in ctx.labels.get("fig5_model_size", []):
            ann.update_positions(renderer)
            bb = Text.get_window_extent(ann, renderer)
            labels.append((ann.get_text(), (bb.x0, bb.y0, bb.x1, bb.y1)))
    return {"labels": labels, "markers": list(ctx.markers.get("fig5_model_size", []))}
