"""Render the six specsweep figures from ``cells.parquet`` and ``speedup.parquet``.

Public entry point: :func:`render_all`.  Every figure is written as PNG (dpi 120)
and SVG, plus a ``manifest.json`` describing which cells each figure used and
which it needed but could not use.  Rendering is byte-deterministic: Agg backend,
explicit rcParams, fixed figure sizes, fixed category order, no timestamps.

Missing-data rule: a figure is never silently drawn from a subset.  Whatever is
available is drawn, and every needed cell whose status is not ``ok`` is listed in
a red box on the figure and in the manifest.
"""

from __future__ import annotations

import io
import json
import math
import textwrap
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.style  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
from matplotlib.ticker import FuncFormatter  # noqa: E402
from matplotlib.transforms import blended_transform_factory  # noqa: E402

from .jsonio import atomic_write_bytes  # noqa: E402

__all__ = ["render_all", "WORKLOADS", "CONFIGS"]

WORKLOADS: tuple[str, ...] = ("sonnet", "chat", "code", "mix-balanced", "mix-ch", "mix-sh")
CONFIGS: tuple[str, ...] = ("vanilla", "ngram", "suffix", "trident")
SPEC_METHODS: tuple[str, ...] = ("ngram", "suffix")
K_ALPHA_WORKLOADS: tuple[str, ...] = ("sonnet", "chat", "code")

DPI = 120
MAX_MISSING_SHOWN = 6

COLORS: dict[str, str] = {
    "vanilla": "#7f7f7f",
    "ngram": "#1f77b4",
    "suffix": "#2ca02c",
    "trident": "#ff7f0e",
    "R": "#9467bd",
    "K": "#17becf",
    "T": "#bcbd22",
}
MISSING_COLOR = "#c00000"

STYLE: dict[str, Any] = {
    "font.family": "sans-serif",
    "font.sans-serif": ["DejaVu Sans"],
    "font.size": 9,
    "axes.titlesize": 10,
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

Cell = tuple[str, str, str]  # (model, workload, config)
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
    """Display name of a model (last path component of an HF id)."""
    return model.rsplit("/", 1)[-1]


def _cell_dict(cell: Cell) -> dict[str, str]:
    return {"model": cell[0], "workload": cell[1], "config": cell[2]}


def _read_rows(path: Path, run: str) -> list[Row]:
    """Rows of a parquet table belonging to ``run``."""
    return [r for r in pq.read_table(path).to_pylist() if r.get("run") == run]


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


@dataclass
class _Data:
    """Both tables of one run, indexed by cell."""

    run: str
    cells: dict[Cell, Row]
    speedup: dict[Cell, Row]

    @classmethod
    def load(cls, tables_dir: Path, run: str) -> _Data:
        cells = _index(_read_rows(tables_dir / "cells.parquet", run), "cells.parquet")
        speedup = _index(_read_rows(tables_dir / "speedup.parquet", run), "speedup.parquet")
        return cls(run=run, cells=cells, speedup=speedup)

    def model_sizes(self) -> dict[str, float | None]:
        """First positive model_params_b of each model of the run (None if unknown)."""
        sizes: dict[str, float | None] = {}
        for (model, _, _), row in sorted(self.cells.items()):
            if sizes.get(model) is None:
                size = _num(row.get("model_params_b"))
                sizes[model] = size if size is not None and size > 0 else None
        return sizes

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

    def status(self, cell: Cell) -> str:
        row = self.cells.get(cell)
        return "absent" if row is None else str(row.get("status") or "missing")

    def cell(self, cell: Cell, column: str) -> float | None:
        """Numeric value from cells.parquet, or None unless the cell is ok."""
        row = self.cells.get(cell)
        return _num(row.get(column)) if row is not None and row.get("status") == "ok" else None

    def spd(self, cell: Cell, column: str) -> float | None:
        """Numeric value from speedup.parquet, or None unless the pair is ok."""
        row = self.speedup.get(cell)
        return _num(row.get(column)) if row is not None and row.get("status") == "ok" else None

    def rows_of(self, cells: Iterable[Cell]) -> list[Row]:
        return [self.cells[c] for c in cells if c in self.cells]

    def footer(self, cells: Iterable[Cell]) -> str:
        """Footer line; device/version taken from ``cells`` (whole run if none has a row)."""
        rows = self.rows_of(cells) or list(self.cells.values())
        return (
            f"run: {self.run} · device: {_distinct(rows, 'device_name')}"
            f" · vLLM {_distinct(rows, 'vllm_version')}"
        )


@dataclass
class _Needs:
    """Cells a figure needs, split into used (ok) and missing (anything else)."""

    needed: list[Cell] = field(default_factory=list)
    used: list[Cell] = field(default_factory=list)
    missing: list[tuple[Cell, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, data: _Data, cells: Iterable[Cell]) -> _Needs:
        needs = cls()
        needs.needed = list(dict.fromkeys(cells))  # dedupe, keep order
        for cell in needs.needed:
            status = data.status(cell)
            if status == "ok":
                needs.used.append(cell)
            else:
                needs.missing.append((cell, status))
        return needs

    def manifest(self, stem: str) -> dict[str, Any]:
        return {
            "files": [f"{stem}.png", f"{stem}.svg"],
            "cells": [_cell_dict(c) for c in self.used],
            "missing": [{**_cell_dict(c), "status": s} for c, s in self.missing],
            "notes": list(self.notes),
        }


def _grid(models: Sequence[str], workloads: Sequence[str], configs: Sequence[str]) -> list[Cell]:
    return [(m, w, c) for m in models for w in workloads for c in configs]


# ------------------------------------------------------------------ drawing helpers


def _missing_text(missing: Sequence[tuple[Cell, str]]) -> str:
    shown = [f"{_short(m)}/{w}/{c}" for (m, w, c), _ in missing[:MAX_MISSING_SHOWN]]
    text = "missing cells: " + ", ".join(shown)
    if len(missing) > MAX_MISSING_SHOWN:
        text += f", +{len(missing) - MAX_MISSING_SHOWN} more"
    return text


def _new_figure(
    size: tuple[float, float],
    ncols: int,
    title: str,
    needs: _Needs,
    footer: str,
    *,
    bottom_in: float = 0.55,
) -> tuple[Figure, list[Axes]]:
    """Figure with ``ncols`` axes, a wrapped title, a footer and (if needed) a red missing-cells box.

    Margins are computed in inches so that the title band, the missing box and the
    footer never overlap the axes; ``bottom_in`` is the room left for x tick labels.
    """
    width, height = size
    fig = plt.figure(figsize=size)
    title_lines = textwrap.wrap(title, width=int(width * 10.5), break_on_hyphens=False)
    fig.suptitle("\n".join(title_lines), y=1 - 0.1 / height, va="top", fontweight="bold")
    top_in = 0.15 + 0.22 * len(title_lines)
    if needs.missing:
        lines = textwrap.wrap(
            _missing_text(needs.missing), width=int(width * 14), break_on_hyphens=False
        )
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
    fig.text(0.01, 0.06 / height, footer, ha="left", va="bottom", fontsize=7, color="#555555")
    fig.subplots_adjust(
        left=0.75 / width,
        right=1 - 0.2 / width,
        top=1 - (top_in + 0.35) / height,
        bottom=(bottom_in + 0.3) / height,
        wspace=0.3 if ncols > 1 else 0.2,
    )
    axes = [fig.add_subplot(1, ncols, i + 1) for i in range(ncols)]
    return fig, axes


def _message(ax: Axes, text: str, *, color: str = "#555555") -> None:
    """Centred message on an otherwise empty axes."""
    ax.set_xticks([])
    ax.set_yticks([])
    ax.grid(False)
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes,
            fontsize=9, color=color, wrap=True)


def _bars(
    ax: Axes,
    groups: Sequence[str],
    series: Sequence[str],
    values: Mapping[tuple[str, str], float | None],
    *,
    color: Callable[[str, str], str],
    ylabel: str,
    labels: Mapping[tuple[str, str], str] | None = None,
    rotate: bool = False,
    headroom: float = 1.22,
) -> None:
    """Grouped bar chart: one group per ``groups`` entry, one bar per ``series`` entry.

    ``values`` maps (group, series) to a height; None draws an ``n/a`` marker.
    ``labels`` optionally annotates bars above their top.  A legend is drawn when
    there is more than one series.
    """
    width = 0.8 / len(series)
    labels = labels or {}
    for j, name in enumerate(series):
        offset = (j - (len(series) - 1) / 2) * width
        for i, group in enumerate(groups):
            x = i + offset
            value = values.get((group, name))
            if value is None:
                ax.text(x, 0, "n/a", ha="center", va="bottom", fontsize=7,
                        color=MISSING_COLOR, rotation=90)
                continue
            ax.bar(x, value, width * 0.92, color=color(group, name))
            text = labels.get((group, name))
            if text:
                ax.annotate(text, (x, value), xytext=(0, 2), textcoords="offset points",
                            ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(groups)))
    if rotate:
        ax.set_xticklabels(groups, rotation=30, ha="right", rotation_mode="anchor")
    else:
        ax.set_xticklabels(groups)
    ax.set_xlim(-0.6, len(groups) - 0.4)
    top = max((v for v in values.values() if v is not None), default=0.0) * headroom
    ax.set_ylim(0, top if top > 0 else 1.0)
    ax.set_ylabel(ylabel)
    if len(series) > 1:
        # Proxy patches so that every series is listed even when all its bars are missing;
        # labelled artists drawn before (e.g. a reference line) come first.
        handles = ax.get_legend_handles_labels()[0]
        handles += [Patch(facecolor=color(groups[0], name), label=name) for name in series]
        ax.legend(handles=handles, loc="upper left", ncols=len(handles), frameon=False)


def _series_color(_: str, name: str) -> str:
    return COLORS.get(name, "#333333")


def _group_color(group: str, _: str) -> str:
    return COLORS.get(group, "#333333")


def _atomic_write(path: Path, write: Callable[[BinaryIO], object]) -> None:
    """Render via ``write(fileobj)`` into memory, then write the bytes atomically (temp file + rename)."""
    buf = io.BytesIO()
    write(buf)
    atomic_write_bytes(path, buf.getvalue())


def _save(fig: Figure, out_dir: Path, stem: str) -> None:
    """Save PNG and SVG deterministically, then close the figure."""
    try:
        _atomic_write(out_dir / f"{stem}.png", lambda fh: fig.savefig(
            fh, format="png", dpi=DPI, metadata={"Software": None}))
        _atomic_write(out_dir / f"{stem}.svg", lambda fh: fig.savefig(
            fh, format="svg", metadata={"Date": None, "Creator": None}))
    finally:
        plt.close(fig)


def _pct(value: float | None) -> str:
    return "" if value is None else f"{value:+.1f}%"


# ------------------------------------------------------------------------ figures


@dataclass
class _Ctx:
    """What every figure function gets: the data, the headline model, the output dir."""

    data: _Data
    model: str
    out_dir: Path

    @contextmanager
    def figure(
        self, stem: str, needs: _Needs, size: tuple[float, float], ncols: int, title: str,
        **layout: float,
    ) -> Iterator[list[Axes]]:
        """Create a figure (title, footer, missing box), yield its axes, save it on exit."""
        fig, axes = _new_figure(size, ncols, title, needs, self.data.footer(needs.needed), **layout)
        try:
            yield axes
        except BaseException:
            plt.close(fig)
            raise
        _save(fig, self.out_dir, stem)

    def headline_absent(self, needs: _Needs, axes: Sequence[Axes]) -> bool:
        """If the headline model has no rows, fill ``axes`` with a message and say so."""
        if self.data.has_model(self.model):
            return False
        needs.notes.append(f"model {self.model!r} has no rows in run {self.data.run!r}")
        for ax in axes:
            _message(ax, f"no rows for model {self.model} in run {self.data.run}", color=MISSING_COLOR)
        return True


def _vanilla_vs_trident(ctx: _Ctx) -> tuple[list[str], tuple[str, str], _Needs]:
    """The headline model's workloads, the two configs compared, and the cells that needs (figures 1 and 6)."""
    workloads = ctx.data.workloads(ctx.model, canonical_all=True)
    series = ("vanilla", "trident")
    return workloads, series, _Needs.of(ctx.data, _grid([ctx.model], workloads, series))


def _fig1_headline(ctx: _Ctx) -> _Needs:
    data, model = ctx.data, ctx.model
    workloads, series, needs = _vanilla_vs_trident(ctx)
    title = f"{model}: vanilla vs trident (suffix + PIECEWISE)"
    with ctx.figure("fig1_headline", needs, (9.0, 4.8), 1, title) as (ax,):
        if ctx.headline_absent(needs, [ax]):
            return needs
        values = {(w, c): data.cell((model, w, c), "output_tok_s") for w in workloads for c in series}
        labels = {(w, "trident"): _pct(data.spd((model, w, "trident"), "gain_pct")) for w in workloads}
        _bars(ax, workloads, series, values, color=_series_color, labels=labels,
              ylabel="output tokens/s")
        ax.set_xlabel("workload")
        needs.notes.append("labels: % output tok/s gain of trident over vanilla (speedup.parquet gain_pct)")
    return needs


def _verdict(speedup: float | None, t_ratio: float | None, r: float | None) -> tuple[str, str]:
    """Fig. 2 verdict: speedup = T / R (T = tokens-per-step ratio), so its sign is that of T - R."""
    if speedup is None or t_ratio is None or r is None:
        return "speedup n/a", MISSING_COLOR
    if speedup >= 1.0:
        return f"T > R: speedup +{100 * (speedup - 1):.1f}%", "#1a7f37"
    return f"T < R: regression -{100 * (1 - speedup):.1f}%", MISSING_COLOR


def _fig2_r_vs_k(ctx: _Ctx) -> _Needs:
    data, model, workload = ctx.data, ctx.model, "code"
    needs = _Needs.of(data, _grid([model], [workload], ("vanilla", *SPEC_METHODS)))
    title = f"{model}: step-time ratio R vs accepted length K on '{workload}'"
    with ctx.figure("fig2_r_vs_k_code", needs, (7.0, 4.6), 1, title) as (ax,):
        if ctx.headline_absent(needs, [ax]):
            return needs
        values: dict[tuple[str, str], float | None] = {}
        for method in SPEC_METHODS:
            key = (model, workload, method)
            tps, van_tps = data.spd(key, "tokens_per_step"), data.spd(key, "vanilla_tokens_per_step")
            values[(method, "R")] = data.spd(key, "R")
            values[(method, "K")] = data.cell(key, "K")
            values[(method, "T")] = tps / van_tps if tps is not None and van_tps else None
        labels = {key: f"{v:.2f}" for key, v in values.items() if v is not None}
        _bars(ax, SPEC_METHODS, ("R", "K", "T"), values, color=_series_color, labels=labels,
              ylabel="ratio vs vanilla", headroom=1.45)
        for i, method in enumerate(SPEC_METHODS):
            top = max((v for (m, _), v in values.items() if m == method and v is not None), default=0.0)
            text, colour = _verdict(data.spd((model, workload, method), "speedup"), values[(method, "T")],
                                    values[(method, "R")])
            ax.annotate(text, (i, top), xytext=(0, 16), textcoords="offset points",
                        ha="center", va="bottom", fontsize=8, fontweight="bold", color=colour)
        ax.set_xlabel("method  (R: spec/vanilla step time · K: 1 + accepted/drafts · T: tokens-per-step ratio)")
        needs.notes.append("R, T and speedup from speedup.parquet, K from cells.parquet. speedup = T / R exactly; "
                           "K is the article's per-request proxy for T, which batching can lower")
    return needs


def _fig3_sonnet_ladder(ctx: _Ctx) -> _Needs:
    data, model, workload = ctx.data, ctx.model, "sonnet"
    needs = _Needs.of(data, _grid([model], [workload], CONFIGS))
    title = f"{model}: '{workload}' ladder (vanilla → ngram → suffix → trident)"
    with ctx.figure("fig3_sonnet_ladder", needs, (7.0, 4.6), 1, title) as (ax,):
        if ctx.headline_absent(needs, [ax]):
            return needs
        values = {(c, workload): data.cell((model, workload, c), "output_tok_s") for c in CONFIGS}
        labels = {(c, workload): _pct(data.spd((model, workload, c), "gain_pct")) for c in CONFIGS}
        if values[("vanilla", workload)] is not None:
            labels[("vanilla", workload)] = "baseline"
        _bars(ax, CONFIGS, (workload,), values, color=_group_color, labels=labels,
              ylabel="output tokens/s")
        ax.set_xlabel("config")
        needs.notes.append("labels: % output tok/s vs vanilla (speedup.parquet gain_pct)")
    return needs


def _fig4_k_alpha(ctx: _Ctx) -> _Needs:
    data, model = ctx.data, ctx.model
    needs = _Needs.of(data, _grid([model], K_ALPHA_WORKLOADS, ("vanilla", *SPEC_METHODS)))
    title = f"{model}: mean accepted length K and acceptance rate α per workload"
    with ctx.figure("fig4_k_alpha", needs, (11.0, 4.6), 2, title) as (ax_k, ax_a):
        if ctx.headline_absent(needs, [ax_k, ax_a]):
            return needs
        spec_cells = _grid([model], K_ALPHA_WORKLOADS, SPEC_METHODS)
        r_values = [r for c in spec_cells if (r := data.spd(c, "R")) is not None]
        if r_values:
            mean_r = sum(r_values) / len(r_values)
            ax_k.axhline(mean_r, color="red", linestyle="--", linewidth=1.2, label=f"R ≈ {mean_r:.2f}")
            needs.notes.append(f"mean R over {len(r_values)} of {len(spec_cells)} spec cells: {mean_r:.4f}")
        else:
            needs.notes.append("mean R line omitted: no spec cell with an ok vanilla pair")
        panels = ((ax_k, "K", "K (tokens/step vs vanilla)", "a) K, with mean R"),
                  (ax_a, "alpha", "α (acceptance rate)", "b) α"))
        for ax, column, ylabel, panel_title in panels:
            values = {(w, m): data.cell((model, w, m), column)
                      for w in K_ALPHA_WORKLOADS for m in SPEC_METHODS}
            labels = {key: f"{v:.2f}" for key, v in values.items() if v is not None}
            _bars(ax, K_ALPHA_WORKLOADS, SPEC_METHODS, values, color=_series_color, labels=labels,
                  ylabel=ylabel)
            ax.set_xlabel("workload")
            ax.set_title(panel_title, loc="left")
        if r_values:
            ax_k.set_ylim(top=max(ax_k.get_ylim()[1], max(r_values) * 1.22))
    return needs


def _fig5_model_size(ctx: _Ctx) -> _Needs:
    data = ctx.data
    models = data.models()
    sizes = data.model_sizes()
    methods = ("trident", "ngram")
    workloads = {m: data.workloads(m, canonical_all=False) for m in models}
    needs = _Needs.of(data, [(m, w, c) for m in models for w in workloads[m]
                             for c in ("vanilla", *methods)])
    title = "Speedup vs model size (mean over workloads, error bars = min–max)"
    with ctx.figure("fig5_model_size", needs, (8.0, 5.0), 1, title) as (ax,):
        known = {m: size for m in models if (size := sizes[m]) is not None}
        plotted = list(known)
        unsized = [m for m in models if m not in known]
        if unsized:
            needs.notes.append("not plotted (model_params_b null): " + ", ".join(unsized))
        if not plotted:
            _message(ax, f"no models with a known size in run {data.run}", color=MISSING_COLOR)
            needs.notes.append(f"nothing plotted: no model with a known size in run {data.run!r}")
            return needs
        # (method, model) -> speedups over the model's workloads whose pair is ok
        speedups = {(meth, m): [s for w in workloads[m]
                                if (s := data.spd((m, w, meth), "speedup")) is not None]
                    for meth in methods for m in plotted}
        styles = {"trident": ("o", 1.08), "ngram": ("s", 1 / 1.08)}  # marker, x shift on log axis
        for method in methods:
            marker, shift = styles[method]
            xs: list[float] = []
            means: list[float] = []
            lo: list[float] = []
            hi: list[float] = []
            for m in plotted:
                vals = speedups[(method, m)]
                if not vals:
                    continue
                mean = sum(vals) / len(vals)
                xs.append(known[m] * shift)
                means.append(mean)
                lo.append(mean - min(vals))
                hi.append(max(vals) - mean)
                needs.notes.append(f"{method} {m}: mean speedup over {len(vals)} workloads = {mean:.4f}")
            if xs:
                ax.errorbar(xs, means, yerr=[lo, hi], fmt=marker, color=COLORS[method], capsize=3,
                            markersize=6, label=method)
        lo_x = min(*known.values(), 7.0) / 3.0
        hi_x = max(*known.values(), 14.0) * 3.0
        mid_log = (math.log(lo_x) + math.log(hi_x)) / 2
        for i, m in enumerate(plotted):
            vals = speedups[("trident", m)] or speedups[("ngram", m)]
            right = math.log(known[m]) > mid_log  # label towards the centre of the axes
            ax.annotate(_short(m), (known[m], sum(vals) / len(vals) if vals else 1.0),
                        xytext=(-12 if right else 12, 10 if i % 2 == 0 else -12),
                        textcoords="offset points", fontsize=7, ha="right" if right else "left",
                        va="center", bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8, "pad": 1})
        ax.set_xscale("log")
        ax.set_xlim(lo_x, hi_x)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.axhline(1.0, color="black", linewidth=0.8)
        split = math.sqrt(7.0 * 14.0)
        ax.axvline(split, color="#555555", linestyle="--", linewidth=1.0)
        ax.text(split, 0.98, "≤7B | ≥14B",
                transform=blended_transform_factory(ax.transData, ax.transAxes),
                ha="center", va="top", fontsize=8, color="#555555",
                bbox={"facecolor": "white", "edgecolor": "none", "pad": 1})
        ymin, ymax = ax.get_ylim()
        ymin, ymax = min(ymin, 0.9), max(ymax, 1.1)
        ax.set_ylim(ymin, ymax + 0.1 * (ymax - ymin))
        ax.grid(True, axis="both", alpha=0.3)
        ax.set_xlabel("model parameters (billions, log scale)")
        ax.set_ylabel("speedup (output tok/s vs vanilla)")
        ax.legend(loc="lower left", bbox_to_anchor=(0.0, 1.0), ncols=2, frameon=False)
    return needs


def _fig6_gpu_util(ctx: _Ctx) -> _Needs:
    data, model = ctx.data, ctx.model
    workloads, series, needs = _vanilla_vs_trident(ctx)
    title = f"{model}: GPU utilisation, throughput and wall time, vanilla vs trident"
    panels = (
        ("gpu_util_mean", "GPU utilisation (mean %)", "a) GPU utilisation"),
        ("output_tok_s", "output tokens/s", "b) output throughput"),
        ("gen_wall_s", "generation wall time (s)", "c) wall time"),
    )
    with ctx.figure("fig6_gpu_util", needs, (15.0, 4.8), 3, title, bottom_in=0.7) as axes:
        if ctx.headline_absent(needs, axes):
            return needs
        for ax, (column, ylabel, panel_title) in zip(axes, panels):
            ax.set_title(panel_title, loc="left")
            values = {(w, c): data.cell((model, w, c), column) for w in workloads for c in series}
            if column == "gpu_util_mean":
                unmeasured = [c for c in needs.used if data.cell(c, column) is None]
                if needs.used and len(unmeasured) == len(needs.used):
                    device = _distinct(data.rows_of(needs.used), "device_name")
                    _message(ax, f"GPU utilisation not measured on this run\n(device: {device})")
                    needs.notes.append(f"gpu_util_mean null for all ok cells (device: {device}); "
                                       "panel a shows a message instead of bars")
                    continue
                if unmeasured:
                    needs.notes.append("gpu_util_mean null for: "
                                       + ", ".join("/".join(c) for c in unmeasured))
            _bars(ax, workloads, series, values, color=_series_color, ylabel=ylabel, rotate=True)
    return needs


FIGURES: tuple[tuple[str, Callable[[_Ctx], _Needs]], ...] = (
    ("fig1_headline", _fig1_headline),
    ("fig2_r_vs_k_code", _fig2_r_vs_k),
    ("fig3_sonnet_ladder", _fig3_sonnet_ladder),
    ("fig4_k_alpha", _fig4_k_alpha),
    ("fig5_model_size", _fig5_model_size),
    ("fig6_gpu_util", _fig6_gpu_util),
)


def render_all(tables_dir: Path, out_dir: Path, headline_model: str, run: str) -> dict:
    """Render the six figures (PNG + SVG) and ``manifest.json`` into ``out_dir``.

    Only rows whose ``run`` column equals ``run`` are used.  Returns the manifest:
    ``{"run", "headline_model", "figures": {stem: {"files", "cells", "missing", "notes"}}}``
    where ``cells`` are the ok cells a figure used and ``missing`` the needed cells
    that are not ok (status ``failed``/``missing``, or ``absent`` when the tables
    have no row for them at all).
    """
    tables_dir, out_dir = Path(tables_dir), Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    data = _Data.load(tables_dir, run)
    ctx = _Ctx(data=data, model=headline_model, out_dir=out_dir)
    figures: dict[str, Any] = {}
    with matplotlib.style.context("default"), matplotlib.rc_context(STYLE):
        for stem, draw in FIGURES:
            figures[stem] = draw(ctx).manifest(stem)
    manifest = {"run": run, "headline_model": headline_model, "figures": figures}
    text = json.dumps(manifest, sort_keys=True, indent=2, ensure_ascii=False) + "\n"
    _atomic_write(out_dir / "manifest.json", lambda fh: fh.write(text.encode("utf-8")))
    return manifest
