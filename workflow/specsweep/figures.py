"""Draw the specsweep figures from a run's ``cells.parquet`` and ``speedup.parquet``: :func:`render_all`
(and :func:`fig5_layout`, figure 5's label geometry for the tests). The figures' list and the view of the tables
they draw from (shared with the captions) are :mod:`specsweep.view`; label placement is
:mod:`specsweep.labels`. Every figure is written as PNG (dpi 120) and SVG, plus a ``manifest.json`` naming the
cells each figure used and those it needed but lacked.

Repeats: every bar or marker is a cell's median over its repeats (the tok/s bars of figures 1 and 3: its
geometric mean over engine starts, the statistic their speedup labels are ratios of), with a whisker for its
95 % interval over engine starts (the tables' ``*_lo``/``*_hi``; K's over prompts); every footer states the n
its cells have (and the repeats planned where that differs), and a cell measured fewer times than planned is
labelled with its own n.  A cell with fewer than 2 engine starts (one pass, or passes on one engine) has no
interval, and so no whisker.

Missing data: a figure is never silently drawn from a subset.  What exists is drawn, a needed cell without a
measurement gets an ``n/a`` marker where its bar would be, and every such cell is listed in a red box on the
figure and in the manifest.  A figure (or panel) with nothing to draw is left out, never drawn empty, and the
manifest's ``left_out`` names it with the reason (figures 5 and 8, a model-size axis, with one model among
them); so is a figure about acceptance, K or speedup whose models
have random weights (config ``weights: dummy``: they measure step time, R and memory, never acceptance):
:func:`specsweep.view.left_out_by_config` says which from the config alone (the Snakemake rules list only the
others). A figure that draws cells of a model with random weights says so in its title (and its caption).

Determinism: no pyplot (a Figure on an Agg canvas), explicit rcParams, fixed sizes and fonts, fixed order,
SVG hash salt, no dates in the metadata: two renders of the same tables are byte-identical.
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

from . import escape, stats
from .claims import R_BAND
from .escape import MPL_RC
from .labels import agg_renderer, dodge_1d, place_labels
from .latency import NAMES as LATENCY_NAMES
from .latency import TARGET_RULE, b_text, target_text, targets_of
from .paths import FIGURES_MANIFEST
from .view import (
    CONCURRENCY_FIGURE,
    FIGURES,
    HEADLINE_STEP,
    K_ALPHA_WORKLOADS,
    LADDER,
    ONE_MODEL,
    ONE_POINT,
    SERVE_FIGURE,
    SPEC_METHODS,
    WHISKER_CI,
    WORKLOADS,
    Cell,
    KRef,
    RLine,
    Tables,
    Val,
    cell_dict,
    concurrency_curves,
    crossovers,
    distinct_text,
    drawn_figures,
    dummy_models,
    left_out_by_config,
    left_out_reason,
    load_k_ref,
    load_r_runs,
    num,
    ordered,
    r_at_scale,
    r_lines,
    r_points,
    random_weights_note,
    serve_curves,
    serve_limits,
    short_model,
    size_stats,
)

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

#: What other modules take from here; the view's loaders are here too for the figures command (cli.py).
__all__ = [
    "DPI",
    "render_all",
    "fig5_layout",
    "dummy_models",
    "left_out_by_config",
    "load_k_ref",
    "load_r_runs",
]


class LeftOut(Exception):
    """A figure with nothing meaningful to draw: not rendered; the manifest names it with this reason."""


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
    **MPL_RC,
}


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
            "cells": [cell_dict(c) for c in self.used],
            "missing": [{**cell_dict(c), "status": s} for c, s in self.missing],
            "partial": [{**cell_dict(c), "n": n} for c, n in self.partial],
            "notes": list(self.notes),
        }


def _planned(data: Tables, cells: Iterable[Cell]) -> list[Cell]:
    """The cells of a size figure that the run planned: a model measured with fewer ladder steps than another
    (the CPU demo's second size: vanilla and ngram only) lacks the others by design, not as missing cells."""
    return [cell for cell in cells if data.status(cell) != "absent"]


def _grid(models: Sequence[str], workloads: Sequence[str], steps: Sequence[str]) -> list[Cell]:
    return [(m, w, c) for m in models for w in workloads for c in steps]


# ------------------------------------------------------------------ drawing helpers


def _missing_text(missing: Sequence[tuple[Cell, str]]) -> str:
    shown = [f"{short_model(m)}/{w}/{c}" for (m, w, c), _ in missing[:MAX_MISSING_SHOWN]]
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
    """Save PNG and SVG deterministically, every text inert (escape.inert_figure)."""
    escape.inert_figure(fig)
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


#: Figures 1 and 3: their bars are the statistic their labels' speedups are ratios of.
GEO_BARS = "geometric mean over engine starts (median below 2 starts)"

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
        point: str = "median",
        whisker: str = WHISKER_CI,
        **layout: float,
    ) -> Iterator[list[Axes]]:
        """Create a figure (title, footer of ``data``, default the run's tables; missing box), yield its axes
        (``nrows`` x ``ncols``, row by row), save it on exit. A figure none of whose needed cells was measured is
        left out (:class:`LeftOut`), never drawn empty. ``point``: what its bars and markers are (the footer
        says). A figure that draws cells of a model with random weights says so in its title."""
        if not needs.used:
            raise LeftOut(f"no measured cell among the {len(needs.needed)} it needs in run {self.data.run}")
        footer = (data or self.data).footer(needs.needed, point, whisker)
        title += random_weights_note(c[0] for c in needs.used if c[0] in self.data.dummy)
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

    def color(self, step: str) -> str:
        return COLORS["baseline"] if step == self.data.baseline else COLORS.get(step, "#333333")


def _baseline_vs_headline(ctx: _Ctx) -> tuple[list[str], tuple[str, str], _Needs]:
    """The headline model's workloads, the two steps compared, and the cells that needs (figures 1 and 6)."""
    workloads = ctx.data.workloads(ctx.model, canonical_all=False)
    step = ctx.data.headline_step
    series = (ctx.data.baseline, step)
    # a headline step the run does not plan leaves the figures out by config (view.left_out_by_config); one it
    # plans but did not measure is drawn, its cells named missing, as the workflow waits for the figure
    return workloads, series, _Needs.of(ctx.data, _grid([ctx.model], workloads, series))


def _throughput_bars(
    ctx: _Ctx,
    ax: Axes,
    groups: Sequence[str],
    series: Sequence[str],
    values: Mapping[tuple[str, str], Val | None],
    labels: Mapping[tuple[str, str], tuple[str, str]],
    step_of: Callable[[str, str], str],
    xlabel: str,
) -> None:
    """Output tokens/s bars (figures 1 and 3), each coloured by its ladder step (`step_of(group, series)`)."""
    _bars(
        ax,
        groups,
        series,
        values,
        color=lambda g, sr: ctx.color(step_of(g, sr)),
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
    step = data.headline_step
    title = f"{model}: {data.baseline} vs {step}, output throughput per workload"
    with ctx.figure("fig1_headline", needs, (9.0, 4.8), 1, title, top_extra_in=0.25, point=GEO_BARS) as (ax,):
        if ctx.headline_absent(needs, [ax]):
            return needs
        values = {(w, c): data.geo((model, w, c), "output_tok_s") for w in workloads for c in series}
        labels = {(w, step): _gain_label(data, (model, w, step)) for w in workloads}
        _throughput_bars(ctx, ax, workloads, series, values, labels, lambda _, c: c, "workload")
        needs.notes.append(
            f"labels: speedup of {step} over {data.baseline} as % with its 95 % "
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
    with ctx.figure("fig3_sonnet_ladder", needs, (7.5, 4.8), 1, title, point=GEO_BARS) as (ax,):
        if ctx.headline_absent(needs, [ax]):
            return needs
        values = {(c, workload): data.geo((model, workload, c), "output_tok_s") for c in ladder}
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


def _fig5_model_size(ctx: _Ctx) -> _Needs:
    from matplotlib.ticker import FuncFormatter, NullFormatter
    from matplotlib.transforms import Bbox, blended_transform_factory

    data = ctx.data
    models, known, methods, common, stat = size_stats(data)
    needs = _Needs.of(
        data, _planned(data, [(m, w, c) for m in models for w in common for c in (data.baseline, *methods)])
    )
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
        if len(known) < 2:
            raise LeftOut(f"{ONE_MODEL}: {', '.join(known)} in run {data.run}")
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
        xs = dodge_1d([(f"{meth}|{m}", math.log(known[m])) for meth, m in order], sep)
        styles = {"trident": "o", "ngram": "s", "suffix": "^"}
        obstacles = []
        renderer = agg_renderer(_figure(ax))
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
            anchors.append((f"{short_model(m)} ({known[m]:g}B)", sum(ax_) / len(ax_), sum(ay) / len(ay), near))
        ctx.labels["fig5_model_size"] = place_labels(_figure(ax), ax, anchors, obstacles)
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


def _display(ax: Axes, x: float, y: float) -> tuple[float, float]:
    """A data point in display pixels."""
    px, py = ax.transData.transform((x, y))
    return float(px), float(py)


def _fig6_gpu_util(ctx: _Ctx) -> _Needs:
    data, model = ctx.data, ctx.model
    workloads, series, needs = _baseline_vs_headline(ctx)
    title = f"{model}: GPU utilisation, throughput and wall time, {data.baseline} vs {data.headline_step}"
    panels = [
        ("gpu_util_mean", "GPU utilisation (mean %)", "GPU utilisation"),
        ("output_tok_s", "output tokens/s", "output throughput"),
        ("gen_wall_s", "generation wall time (s)", "wall time"),
    ]
    unmeasured = [c for c in needs.used if data.val(c, "gpu_util_mean") is None]
    if needs.used and len(unmeasured) == len(needs.used):  # a panel without data is left out, not drawn empty
        device = distinct_text(data.rows_of(needs.used), "device_name")
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
        steps = ordered([c for (_, _, c), _, _ in preds], LADDER)
        forms = (("K_linear", "o", "linear"), ("K_leviathan", "^", "Leviathan"))
        lo_v, hi_v = 1.0, 2.0
        for cfg in steps:
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
            *[Line2D([], [], color=ctx.color(c), marker="s", linestyle="none", markersize=6, label=c) for c in steps],
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
                pos, val, lo, hi = [], [], [], []
                for i, acc, reached in stats.continuation(row["drafts"], row["accepted_per_pos"]):
                    if reached < MIN_REACHED:
                        break
                    pos.append(i)
                    val.append(acc / reached)
                    a, b = stats.wilson(acc, reached)
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
            "i-1, counts summed over repeats (a draft shorter than i counts as not accepted at i); "
            "a curve ends at the last position where any token was accepted (stats.continuation); "
            "Wilson interval treats positions as independent trials"
        )
    return needs


def line_label(line: RLine) -> str:
    cfg, w, q = line
    return f"{cfg} · {w}" + (f" · {q} weights" if q else "")


def _run_conditions(d: Tables, models: Iterable[str]) -> str:
    """What a run's sized models ran on: device, vLLM, TP, GPUs, mean prompt tokens (from its cells table)."""
    wanted = set(models)
    rows = [r for (m, _, _), r in sorted(d.cells.items()) if m in wanted and r.get("n")]
    tps = sorted({int(r["tp"]) for r in rows if r.get("tp") is not None})
    tokens = sorted({round(float(r["input_tokens_mean"])) for r in rows if num(r.get("input_tokens_mean"))})
    quant = sorted({str(r["quantization"]) for r in rows if r.get("quantization")})
    return (
        f"{distinct_text(rows, 'device_name')}, vLLM {distinct_text(rows, 'vllm_version')}, "
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


def _clip_marker() -> Any:
    """CLIP_MARKER's marker, its path made with mathtext on: the figures' text is drawn with mathtext off
    (STYLE, escape.MPL_RC), so that a data string with ``$`` in it is drawn as itself."""
    import matplotlib
    from matplotlib.markers import MarkerStyle

    with matplotlib.rc_context({"text.parse_math": True}):
        return MarkerStyle(CLIP_MARKER)


def _fig8_r_at_scale(ctx: _Ctx) -> _Needs:
    """R against model size on a log y axis that keeps the article's band (1.25-1.40) readable: the axis ends
    a little above the largest median, and a whisker beyond it is clipped at the edge with an arrow and its
    bound written beside it. No prediction panel: speedup is T / R, and no validated model of T exists yet."""
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter, NullLocator

    data = ctx.data
    models, _, _, _ = r_at_scale(data)
    steps, workloads, every = r_points(data, ctx.r_runs)
    series = r_lines(every)
    needs = _Needs.of(
        data, _planned(data, [(m, w, c) for m in models for w in workloads for c in (data.baseline, *steps)])
    )
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
    drawn_models = sorted({p.model for p in points})
    if len(drawn_models) < 2:
        raise LeftOut(f"{ONE_MODEL}: {', '.join(drawn_models)} (runs {', '.join(sorted({p.run for p in points}))})")
    # the legend goes below the axes: room for its rows, two a row
    rows = -(-(2 + len(series) + (len(drawn_runs) if len(drawn_runs) > 1 else 0)) // 2)
    legend_in = 0.18 * rows
    size = (8.5, 6.0 + legend_in)
    with ctx.figure("fig8_r_at_scale", needs, size, 1, title, top_extra_in=0.1, bottom_in=0.55 + legend_in) as (ax,):
        lo, hi = R_BAND
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
                    ax.plot([x], [top], marker=_clip_marker(), color=colour, markersize=9, clip_on=False, zorder=5)
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
                    marker=_clip_marker(),
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


def _fewer(labels: dict[float, tuple[float, set[int]]], x: float, y: float, n: int) -> None:
    """Note a point at ``x`` measured with fewer repeats than planned: one ``n=…`` label per x, above the
    highest such point there (drawn by :func:`_n_labels`)."""
    top, ns = labels.get(x, (y, set()))
    labels[x] = (max(top, y), ns | {n})


def _n_labels(ax: Axes, labels: dict[float, tuple[float, set[int]]]) -> None:
    for x, (y, ns) in sorted(labels.items()):
        text = "n=" + "/".join(str(n) for n in sorted(ns))
        ax.annotate(text, (x, y), xytext=(0, 4), textcoords="offset points", fontsize=7, ha="center")


#: Figures 9 and 10: the legend below the last row of axes, two columns.
LEGEND_BELOW: dict[str, Any] = {
    "loc": "upper left",
    "bbox_to_anchor": (0.0, -0.16),
    "ncols": 2,
    "fontsize": 7,
    "frameon": False,
    "handlelength": 4.0,  # long enough to show each workload's dash pattern
}


def _fig9_concurrency(ctx: _Ctx) -> _Needs:
    data = ctx.data.concurrency()
    curves = concurrency_curves(data)
    cross = crossovers(data)
    models = [m for m in data.models() if any(k[0] == m for k in curves)]
    needs = _Needs.of(data, [c for pts in curves.values() for _, c in pts])
    workloads = ordered({k[1] for k in curves}, WORKLOADS)
    steps = ordered({k[2] for k in curves}, (data.baseline, *LADDER))
    drafters = [c for c in steps if c != data.baseline]
    styles = ("-", "--", ":", "-.")
    legend_rows = -(-(len(drafters) * len(workloads) + 1) // 2)
    legend_in = 0.18 * max(legend_rows, -(-len(steps) * len(workloads) // 2))
    rows = max(len(models), 1)
    size = (11.0, 0.9 + 3.6 * rows + legend_in)
    # a run with serve-mode steps may have a second baseline (serve.baseline): each speedup is over its own
    bases = sorted({str(r["baseline"]) for r in data.speedup.values() if r.get("baseline")} | {data.baseline})
    over = data.baseline if len(bases) == 1 else f"{' or '.join(bases)} (each step's own mode)"
    title = f"Speedup over {over} at the same concurrency b, and time per output token, against b"
    with ctx.figure(
        CONCURRENCY_FIGURE, needs, size, 2, title, data=data, nrows=rows, bottom_in=0.55 + legend_in
    ) as axes:
        if not models:
            for a in axes:
                _message(a, f"no cell at a concurrency in run {data.run}", color=MISSING_COLOR)
            return needs
        bs = [b for pts in curves.values() for b, _ in pts]
        for i, model in enumerate(models):
            ax, bx = axes[2 * i], axes[2 * i + 1]
            ax.axhline(1.0, color="black", linewidth=0.8)
            labels_a: dict[float, tuple[float, set[int]]] = {}
            labels_b: dict[float, tuple[float, set[int]]] = {}
            for w in workloads:
                style = styles[workloads.index(w) % len(styles)]
                for cfg in steps:
                    pts = curves.get((model, w, cfg), [])
                    colour = ctx.color(cfg)
                    tpot = [(b, 1000 * t) for b, c in pts if (r := data.row(c)) and (t := num(r.get("tpot_s_median")))]
                    if tpot:
                        bx.plot(*zip(*tpot, strict=True), style, color=colour, marker="o", markersize=3.5,
                                label=f"{cfg} · {w}")  # fmt: skip
                        fewer = {b: data.n(c) for b, c in pts if 0 < data.n(c) < data.repeats}
                        for b, t in tpot:
                            if b in fewer:
                                _fewer(labels_b, b, t, fewer[b])
                    if cfg == data.baseline:
                        continue
                    sp = [(b, v) for b, c in pts if (v := data.spd(c, "speedup")) is not None]
                    if not sp:
                        continue
                    ax.plot([b for b, _ in sp], [v.point for _, v in sp], style, color=colour, marker="o",
                            markersize=3.5, label=f"{cfg} · {w}")  # fmt: skip
                    for b, v in sp:
                        _whisker(ax, b, v, color=colour)
                        if 0 < v.n < data.repeats:  # the fewer of the drafter's and the baseline's repeats
                            _fewer(labels_a, b, v.top, v.n)
                    x = cross.get((model, w, cfg))
                    if x is None or x["b_star"] is None:  # b* only where it crosses once, its interval closed
                        continue
                    star, lo, hi = x["b_star"], x["b_star_lo"], x["b_star_hi"]
                    span = [lo if lo is not None else star, hi if hi is not None else star]
                    ax.plot(span, [1.0, 1.0], "-", color=colour, linewidth=4, alpha=0.35, solid_capstyle="butt")
                    ax.plot([star], [1.0], "X", color=colour, markersize=8, markeredgecolor="black", zorder=5)
            _n_labels(ax, labels_a)
            _n_labels(bx, labels_b)
            for a in (ax, bx):
                _b_axis(a, bs)
            ax.set_ylabel(f"speedup over {data.baseline if len(bases) == 1 else 'its baseline'} (same b)")
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
        last_a.legend(handles, labels, **LEGEND_BELOW)
        if axes[1].lines:
            last_b.legend(*axes[1].get_legend_handles_labels(), **LEGEND_BELOW)
        for key, x in cross.items():
            needs.notes.append(
                f"{'/'.join(key)}: b* {x['b_star']} [{x['b_star_lo']}, {x['b_star_hi']}], n = {x['n']}: {x['note']}"
            )
        needs.notes.append(
            "a) each speedup pairs a drafter's cells with the baseline's at the same b; b* interpolated on log b "
            "between the last b with speedup > 1 and the next with speedup < 1, drawn only where the speedup "
            "crosses 1 once with both ends of its interval inside the measured b; band: where the interval's lower "
            "and upper bounds fall through 1 (pointwise intervals, so its coverage is approximate)"
        )
        needs.notes.append("b) TPOT: median over requests per repeat, median over repeats (no interval)")
    return needs


#: Colours for serve-mode steps that neither their name nor their method gives one (COLORS), in ladder order.
EXTRA_COLORS = ("#d62728", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#9467bd")
#: Figure 10 draws a latency target as a line where it is at most this many times the highest point (median,
#: p90, p99) of the panel; a target further up is written on the panel instead, so the points keep the axis.
TARGET_REACH = 2.0
#: Figure 10's panels: the latencies drawn against output throughput.
SERVE_PANELS = ("tpot", "e2el")


def _serve_colors(data: Tables, steps: Sequence[str]) -> dict[str, str]:
    """A colour per serve-mode step: grey for a baseline, else its name's, else its method's if no other step
    has it, else the next of EXTRA_COLORS."""
    rows = list(data.serve.values())
    bases = {str(r["baseline"]) for r in rows if r.get("baseline")} | {data.baseline}
    method = {str(r["config"]): str(r.get("method") or "") for r in rows}
    out: dict[str, str] = {}
    extra = iter(EXTRA_COLORS * (1 + len(steps) // len(EXTRA_COLORS)))
    for step in steps:
        if step in bases:
            out[step] = COLORS["baseline"]
        elif step in COLORS and COLORS[step] not in out.values():
            out[step] = COLORS[step]
        elif method.get(step) in COLORS and COLORS[method[step]] not in out.values():
            out[step] = COLORS[method[step]]
        else:
            out[step] = next(extra)
    return out


def _serve_points(
    pts: Sequence[tuple[int | None, Cell, dict[str, Any]]], metric: str
) -> list[tuple[float, float, float | None, float | None, int | None]]:
    """A curve's points for one latency: (output tok/s, median, p90, p99, b), those with both a throughput and
    a median."""
    out = []
    for b, _, r in pts:
        x, y = num(r.get("output_tok_s")), num(r.get(f"{metric}_ms_median"))
        if x is not None and y is not None:
            out.append((x, y, num(r.get(f"{metric}_ms_p90")), num(r.get(f"{metric}_ms_p99")), b))
    return out


def _fig10_serve_latency(ctx: _Ctx) -> _Needs:
    data = ctx.data.served()
    curves = serve_curves(data)
    limit = serve_limits(data)
    needs = _Needs.of(data, list(data.serve))
    if needs.used and all(len(pts) < 2 for pts in curves.values()):
        shown = sorted({b_text(b) for pts in curves.values() for b, _, _ in pts})
        raise LeftOut(ONE_POINT.format(points=", ".join(shown)))
    models = [m for m in data.models() if any(k[0] == m for k in curves)] or sorted({k[0] for k in curves})
    workloads = ordered({k[1] for k in curves}, WORKLOADS)
    steps = ordered({k[2] for k in curves}, (data.baseline, *LADDER))
    colors = _serve_colors(data, steps)
    styles = ("-", "--", ":", "-.")
    targets = targets_of(next(iter(data.serve.values()))) if data.serve else {}
    rates = sorted({float(x) for r in data.serve.values() if (x := num(r.get("request_rate"))) is not None})
    legend_rows = -(-(len(steps) * len(workloads) + 1) // 2)
    legend_in = 0.18 * legend_rows
    rows = max(len(models), 1)
    size = (11.0, 0.9 + 3.6 * rows + legend_in)
    arrivals = f"arrivals at {', '.join(f'{r:g}' for r in rates)} requests/s" if rates else "all requests at once"
    title = (
        "Latency against output throughput through vLLM's server, one point per concurrency b "
        f"(max requests in flight; {arrivals})"
    )
    with ctx.figure(
        SERVE_FIGURE,
        needs,
        size,
        2,
        title,
        data=data,
        nrows=rows,
        point="median over requests",
        whisker="up to the p99 over requests, tick at the p90",
        bottom_in=0.55 + legend_in,
    ) as axes:
        for i, model in enumerate(models):
            for j, metric in enumerate(SERVE_PANELS):
                ax = axes[2 * i + j]
                name = LATENCY_NAMES[metric]
                drawn: list[tuple[float, float, float | None, float | None, int | None]] = []
                for w in workloads:
                    style = styles[workloads.index(w) % len(styles)]
                    for step in steps:
                        pts = _serve_points(curves.get((model, w, step), []), metric)
                        drawn += pts
                        if not pts:
                            continue
                        colour = colors[step]
                        xs, ys = [p[0] for p in pts], [p[1] for p in pts]
                        ax.plot(xs, ys, style, color=colour, marker="o", markersize=3.5, label=f"{step} · {w}")
                        for x, y, p90, p99, b in pts:
                            if p99 is not None and p99 > y:
                                ax.errorbar(
                                    [x], [y], yerr=[[0.0], [p99 - y]], fmt="none", **(WHISKER | {"color": colour})
                                )
                            if p90 is not None:
                                ax.plot([x], [p90], "_", color=colour, markersize=7)
                            ax.annotate(
                                "all" if b is None else f"b={b}", (x, y), xytext=(4, -9), textcoords="offset points",
                                fontsize=6, color=colour,
                            )  # fmt: skip
                target = targets.get(metric)
                top = max((v for p in drawn for v in p[1:4] if v is not None), default=0.0)
                if target is not None and target <= TARGET_REACH * top:
                    ax.axhline(target, color=MISSING_COLOR, linestyle="--", linewidth=1.0)
                    ax.annotate(
                        f"target {name} ≤ {target:g} ms", (0.01, target), xycoords=("axes fraction", "data"),
                        xytext=(0, 3), textcoords="offset points", fontsize=7, color=MISSING_COLOR,
                    )  # fmt: skip
                elif target is not None and top > 0:  # far above every point: said, not drawn (the axis keeps them)
                    ax.annotate(
                        f"target {name} ≤ {target:g} ms: above every point, off the axis", (0.01, 0.97),
                        xycoords="axes fraction", va="top", fontsize=7, color=MISSING_COLOR,
                        bbox={"facecolor": "white", "edgecolor": "none", "pad": 1.0},
                    )  # fmt: skip
                ax.set_ylim(bottom=0)
                ax.set_xlim(left=0)
                ax.grid(True, axis="both")
                ax.set_xlabel("output throughput, tok/s (median over repeats)")
                ax.set_ylabel(f"{name}, ms (median over requests)")
                where = f"target {name} ≤ {target:g} ms" if target is not None else "no target set for it"
                ax.set_title(
                    f"{'ab'[j]}) {model}: {name}, whisker to p99, tick at p90; {where}", loc="left", fontsize=8
                )
                if not ax.lines:
                    _message(ax, f"no {name} measured", color=NOISE_COLOR)
        axes[-2].legend(*axes[0].get_legend_handles_labels(), **LEGEND_BELOW)
        for key, lim in limit.items():
            needs.notes.append(f"{'/'.join(key)}: {target_text(lim.targets)}: {lim.note}")
        needs.notes.append(
            f"a) TPOT, b) E2EL: marker = median over requests (per repeat; the median over repeats), whisker up to "
            "the p99 and tick at the p90 over requests (their spread, not an uncertainty); x = output tokens per "
            f"second; dashed = the config's target (serve.goodput); {TARGET_RULE}"
        )
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
    "fig10_serve_latency": _fig10_serve_latency,
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
    unchecked: Sequence[str] = (),
    headline_step: str = HEADLINE_STEP,
) -> dict:
    """Render every figure of :data:`FIGURES` the run gets (:func:`drawn_figures`: figure 9 only with a
    concurrency axis, figure 10 only with serve-mode cells) as PNG + SVG, and ``manifest.json``, into
    ``out_dir``; a figure left out is named in the manifest's ``left_out`` with the reason.

    Only rows whose ``run`` column equals ``run`` are used.  Returns the manifest:
    ``{"run", "headline_model", "baseline", "repeats", "tables_manifest_sha256", "figures": {stem: {"files",
    "cells", "missing", "partial", "notes"}}}`` where ``cells`` are the cells a figure used (at least one measurement),
    ``missing`` the needed cells without any (status ``failed``/``missing``, or ``absent`` when the tables
    have no row for them at all) and ``partial`` the used cells with fewer repeats than the run's n; and
    ``left_out`` ``{stem: reason}``: the figures not drawn, those of ``left_out`` (:func:`left_out_by_config`)
    and those with nothing to draw. ``dummy``: the run's models with random weights (:func:`dummy_models`).
    ``unchecked``: what could not be checked about the tables (tables.unchecked_tables), kept in the manifest.
    ``headline_step``: the step figures 1 and 6 set beside the baseline (config `headline_step`).
    """
    tables_dir, out_dir = Path(tables_dir), Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    data = Tables.load(tables_dir, run)
    data.dummy = frozenset(dummy)
    data.headline_step = headline_step
    ctx = _Ctx(data=data, model=headline_model, out_dir=out_dir, k_ref=k_ref, r_runs=list(r_runs))
    figures: dict[str, Any] = {}
    drawn = drawn_figures(data.concurrency_axis, data.serves)
    skipped: dict[str, str] = {stem: left_out_reason(run, stem) for stem in FIGURES if stem not in drawn}
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
        "kind": "figures",  # with the run: what `specsweep figures` may replace (jsonio.check_replaceable)
        "run": run,
        "headline_model": headline_model,
        "baseline": data.baseline,
        "headline_step": headline_step,
        "repeats": data.repeats,
        # the tables set drawn from (the sha256 of its MANIFEST.json): `specsweep status` names figures whose
        # tables have changed since (new tables beside old figures after a kill between the two steps)
        "tables_manifest_sha256": manifest_sha256(tables_dir),
        "figures": figures,
        "left_out": {stem: skipped[stem] for stem in FIGURES if stem in skipped},
        **({"unchecked": list(unchecked)} if unchecked else {}),
    }
    text = json.dumps(manifest, sort_keys=True, indent=2, ensure_ascii=False) + "\n"
    _atomic_write(out_dir / FIGURES_MANIFEST, lambda fh: fh.write(text.encode("utf-8")))
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
        renderer = agg_renderer(fig)
        labels = []
        for ann in ctx.labels.get("fig5_model_size", []):
            ann.update_positions(renderer)
            bb = Text.get_window_extent(ann, renderer)
            labels.append((ann.get_text(), (bb.x0, bb.y0, bb.x1, bb.y1)))
    return {"labels": labels, "markers": list(ctx.markers.get("fig5_model_size", []))}
