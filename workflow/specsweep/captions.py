"""RST captions for the Snakemake report, one per figure of :data:`specsweep.view.FIGURES`, with the
numbers that matter read from a run's tables (medians over repeats with their 95 % intervals): nothing in a
caption is typed in, the ladder's settings included.

Every string a caption takes from the tables (names, methods, settings vLLM reported, the device) is data, not
markup: :func:`rst_text` escapes it, and :func:`check_rst` refuses a caption that could still carry a directive
(the report renders captions with docutils, whose defaults allow ``raw`` and ``include``)."""

from __future__ import annotations

import re
import string
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from . import stats
from .claims import R_BAND
from .crossover import describe
from .errors import SpecsweepError
from .jsonio import atomic_write_bytes
from .latency import NAMES as LATENCY_NAMES
from .latency import TARGET_RULE, b_text, target_text
from .view import (
    CONCURRENCY_FIGURE,
    FIGURES,
    HEADLINE_STEP,
    K_ALPHA_WORKLOADS,
    R_AT_SCALE_FIGURE,
    SERVE_FIGURE,
    SPEC_METHODS,
    Tables,
    Val,
    concurrency_curves,
    crossovers,
    drawn_figures,
    r_series,
    serve_curves,
    serve_limits,
    size_stats,
)

#: Every ASCII punctuation character: any of them can open reST markup somewhere (``..`` a directive, ``:`` a
#: role or field, `` ` `` a literal or link, ``*`` emphasis, ``_`` a reference, ``|`` a substitution, ...).
_PUNCT = frozenset(string.punctuation)
#: What reST would read as markup in a caption: an explicit markup start (``.. name::``, ``.. include::``, a
#: comment) or an unescaped ``::`` (a directive's or a literal block's marker).
_MARKUP = re.compile(r"(?m)^\s*\.\.(\s|$)|(?<!\\)::")


def rst_text(value: object) -> str:
    """``value`` as reST text that renders as itself: whitespace and control characters become one space (no
    line of its own, so no directive, list or section), and every ASCII punctuation character is backslash-
    escaped (reST renders an escaped character literally)."""
    text = " ".join("".join(ch if ch.isprintable() else " " for ch in str(value)).split())
    return "".join("\\" + ch if ch in _PUNCT else ch for ch in text)


def check_rst(name: str, text: str) -> str:
    """``text`` when it carries no explicit markup (no directive, no comment, no ``::``), else a one-line
    error: the captions' own words have none, so one there came from data that escaped :func:`rst_text`."""
    m = _MARKUP.search(text)
    if m:
        raise SpecsweepError(f"caption {name}: reST markup {m.group(0).strip()!r} in a generated caption; not written")
    return text


_e = rst_text


def _v(v: Val | None, spec: str = ".2f", over: str = "starts") -> str:
    """A value with its interval ('identical over n starts' where it has zero width; K's is over prompts)."""
    if v is None:
        return "n/a"
    text = format(v.point, spec)
    if v.lo is not None and v.hi is not None:  # v.has_interval
        return text + stats.interval_text(v.lo, v.hi, spec, v.n if over == "starts" else None, over)
    return text + f" (n={v.n})"


def _gain(data: Tables, cell: tuple[str, str, str]) -> str:
    sp = data.spd(cell, "speedup")
    if sp is None:
        return "n/a"
    text = f"{100 * (sp.point - 1):+.1f} %"
    if sp.lo is not None and sp.hi is not None:  # sp.has_interval
        text += f" [{100 * (sp.lo - 1):+.1f}, {100 * (sp.hi - 1):+.1f}]"
    return f"{text} {_e(data.verdict(cell))}"


def _step(data: Tables, model: str, step: str) -> str:
    """A ladder step's settings as the tables recorded them (first measured workload of ``model``)."""
    row = next((data.row(c) for c in sorted(data.cells) if c[0] == model and c[2] == step and data.row(c)), None)
    if row is None:
        return f"{_e(step)} (not measured)"
    parts = []
    if row.get("method") not in (None, "none"):
        n_tok = row.get("num_speculative_tokens") or (
            len(row["accepted_per_pos"]) if row.get("accepted_per_pos") else None
        )
        parts.append(_e(row["method"]) + (f", {_e(n_tok)} speculative tokens" if n_tok else ""))
    else:
        parts.append("no speculation")
    req, eff = row.get("cudagraph_mode_requested"), row.get("cudagraph_mode_effective")
    if req or eff:
        parts.append(f"CUDA graphs {_e(req or 'default')}" + (f" (effective {_e(eff)})" if eff and eff != req else ""))
    if row.get("gpu_memory_utilization") is not None:
        parts.append(f"gmu {row['gpu_memory_utilization']:.2f}")
    if row.get("async_scheduling") is not None:
        parts.append(f"async scheduling {'on' if row['async_scheduling'] else 'off'}")
    return f"{_e(step)} ({', '.join(parts)})"


def _fig1(data: Tables, m: str) -> str:
    ws = data.workloads(m, canonical_all=False)
    step = data.headline_step
    return (
        f"{_step(data, m, data.baseline)} vs {_step(data, m, step)}: output throughput per "
        "workload. Gain per workload [95 % interval] and verdict: "
        + "; ".join(f"{_e(w)} {_gain(data, (m, w, step))}" for w in ws)
        + "."
    )


def _fig2(data: Tables, m: str) -> str:
    ladder = [c for c in data.ladder(m, "code") if c != data.baseline]
    parts = []
    for c in ladder:
        cell = (m, "code", c)
        parts.append(
            f"{_e(c)}: K = {_v(data.val(cell, 'K'), over='prompts')}, T = {_v(data.spd(cell, 'T'))}, "
            f"R = {_v(data.spd(cell, 'R'))} (decode steps only {_v(data.spd(cell, 'R_decode'))}), "
            f"speedup {_v(data.spd(cell, 'speedup'), '.3f')} {_e(data.verdict(cell) or '')}".rstrip()
        )
    return (
        "R (step time over the baseline's), K (1 + accepted/drafts) and T (tokens per step over the "
        f"baseline's) on code. {'; '.join(parts)}. Speedup = T / R exactly; K is the article's per-request "
        "proxy for T, which batching lowers."
    )


def _fig3(data: Tables, m: str) -> str:
    ladder = data.ladder(m, "sonnet")
    return (
        "The sonnet ladder, output tok/s (geometric mean over engine starts, the statistic the speedups are "
        "ratios of; the median below 2 starts): "
        + " → ".join(f"{_e(c)} {_v(data.geo((m, 'sonnet', c), 'output_tok_s'), '.0f')}" for c in ladder)
        + ". Speedups: "
        + "; ".join(f"{_e(c)} {_gain(data, (m, 'sonnet', c))}" for c in ladder if c != data.baseline)
        + "."
    )


def _fig4(data: Tables, m: str) -> str:
    return (
        "K and α per workload and method, with each cell's own R and T: "
        + "; ".join(
            f"{_e(w)}/{_e(c)} K = {_v(data.val((m, w, c), 'K'), over='prompts')}, "
            f"α = {_v(data.val((m, w, c), 'alpha'), '.3f', over='prompts')}, "
            f"R = {_v(data.spd((m, w, c), 'R'))}, T = {_v(data.spd((m, w, c), 'T'))}"
            for w in K_ALPHA_WORKLOADS
            for c in SPEC_METHODS
        )
        + ". A K bar above its R mark is no speedup: "
        "the speedup is T / R."
    )


def _fig5(data: Tables, _: str) -> str:
    models, known, methods, common, stat = size_stats(data)
    meth = HEADLINE_STEP if HEADLINE_STEP in methods else (methods[0] if methods else HEADLINE_STEP)
    parts = []
    for m in models:
        if (meth, m) not in stat:
            parts.append(f"{_e(m)} ({known.get(m, float('nan')):g}B) n/a")
            continue
        g, lo, hi, cnt = stat[(meth, m)]
        iv = f" [{lo:.3f}, {hi:.3f}]" if lo is not None else f" ({cnt} of {len(common)} workloads)"
        parts.append(f"{_e(m)} ({known[m]:g}B) {g:.3f}{iv}")
    return (
        f"{_e(meth)} speedup against model size, geometric mean over the same workloads for every model "
        f"({', '.join(map(_e, common)) or 'none'}); interval: geometric means of the per-workload 95 % bounds. "
        + "; ".join(parts)
        + ". The article puts the boundary between 7B and 14B."
    )


def _fig6(data: Tables, m: str) -> str:
    util = {}
    for c in (data.baseline, data.headline_step):
        vals = [
            v.point
            for w in data.workloads(m, canonical_all=False)
            if (v := data.val((m, w, c), "gpu_util_mean")) is not None
        ]
        if vals:
            util[c] = vals
    if not util:
        return "GPU utilisation was not measured on this run (no NVML: a CPU run); throughput and wall time are shown."
    return (
        "Mean GPU utilisation during generation (medians per workload): "
        + "; ".join(f"{_e(c)} {min(v):.1f}–{max(v):.1f} %" for c, v in util.items())
        + "."
    )


def _fig7(data: Tables, m: str) -> str:
    from .claims import k_predictions

    preds = [
        (c, p)
        for c in sorted(data.cells)
        if data.cells[c].get("method") not in (None, "none")
        and c[0] not in data.dummy
        and (row := data.row(c)) is not None
        and (p := k_predictions(row)) is not None
    ]
    if not preds:
        return "No speculative cell with per-position acceptance counts: nothing to predict K from."
    per = []
    for cfg in sorted({c[2] for c, _ in preds}):
        mine = [p for c, p in preds if c[2] == cfg]
        per.append(
            f"{_e(cfg)} ({len(mine)} cells): linear {sum(abs(p['err_linear']) for p in mine) / len(mine):.2f}, "
            f"Leviathan {sum(abs(p['err_leviathan']) for p in mine) / len(mine):.2f}"
        )
    lin = sum(abs(p["err_linear"]) for _, p in preds) / len(preds)
    lev = sum(abs(p["err_leviathan"]) for _, p in preds) / len(preds)
    return (
        f"Measured K against K predicted from the acceptance at draft position 1 (p1) and the mean draft "
        f"length g: linear 1 + p1·g, Leviathan (1 − p1^(g+1)) / (1 − p1). Mean absolute error over "
        f"{len(preds)} cells: linear {lin:.2f}, Leviathan {lev:.2f}; per step: "
        + "; ".join(per)
        + f". Right: conditional acceptance per draft position for {_e(m)} (accepted at i over accepted at "
        "i − 1; each curve ends at the last position where any token was accepted)."
    )


def _fig8(data: Tables, _: str, others: Sequence[Tables] = ()) -> str:
    series = r_series(data, others)[2]
    if not any(series.values()):
        return "No sized model with an ngram or suffix step in this run: no R at scale."
    per = [
        f"{_e(cfg)} on {_e(w)}{f' ({_e(q)} weights)' if q else ''}: " + ", ".join(f"{p.size:g}B {_v(p.r)}" for p in pts)
        for (cfg, w, q), pts in series.items()
    ]
    runs = sorted({p.run for pts in series.values() for p in pts})
    lo, hi = R_BAND
    return (
        f"R (step time over {_e(data.baseline)}'s, decode steps where probed) per model size: "
        + ("; ".join(per) or "none measured")
        + (f" (runs {', '.join(map(_e, runs))}, each R within its own run)" if len(runs) > 1 else "")
        + f". The article reports R {lo:.2f}–{hi:.2f} for Llama-3.3-70B at TP 8."
    )


def _fig9(data: Tables, _: str) -> str:
    conc = data.concurrency()
    parts = []
    for key, x in crossovers(conc).items():
        name = "/".join(key)
        if x["b_star"] is not None:
            parts.append(f"{name} {describe(x)} (n = {x['n']})")
        else:
            parts.append(f"{name}: {x['note']}")
    tpot = []
    for (m, w, cfg), pts in concurrency_curves(conc).items():
        ts = [(b, 1000 * t) for b, c in pts if (r := conc.row(c)) and (t := r.get("tpot_s_median")) is not None]
        if len(ts) > 1:
            tpot.append(f"{m}/{w}/{cfg} {ts[0][1]:.1f} ms at b = {ts[0][0]} → {ts[-1][1]:.1f} ms at b = {ts[-1][0]}")
    bases = sorted({str(r["baseline"]) for r in conc.speedup.values() if r.get("baseline")} | {data.baseline})
    over = data.baseline if len(bases) == 1 else f"its baseline ({' or '.join(bases)}, of the step's own mode)"
    return (
        f"Speedup of each drafter over {over} at the same concurrency b (log axis), with 95 % "
        "intervals. X marks b*, where the speedup falls through 1, interpolated on log b between the last b "
        "with speedup > 1 and the next with speedup < 1; its band runs from where the interval's lower bound "
        "falls through 1 to where its upper bound does (pointwise intervals, so approximate coverage; an end "
        "past the measured b is open). Crossovers: "
        + ("; ".join(parts) or "none")
        + ". Right: time per output token (median over requests): "
        + ("; ".join(tpot) or "not measured")
        + "."
    )


def _fig10(data: Tables, _: str) -> str:
    served = data.served()
    limit = serve_limits(served)
    parts = []
    for key, pts in serve_curves(served).items():
        shown = []
        for metric in ("tpot", "e2el"):
            vals = [
                (b, float(r["output_tok_s"]), v) for b, _, r in pts if (v := r.get(f"{metric}_ms_median")) is not None
            ]
            if vals:
                ends = (vals[0], vals[-1]) if len(vals) > 1 else (vals[0],)
                shown.append(
                    f"{LATENCY_NAMES[metric]} "
                    + " → ".join(f"{v:.1f} ms at {x:.1f} tok/s ({b_text(b)})" for b, x, v in ends)
                )
        lim = limit.get(key)
        parts.append(
            f"{'/'.join(map(_e, key))}: {'; '.join(shown) or 'no latency measured'}"
            + (f"; {target_text(lim.targets)}: {lim.note}" if lim is not None else "")
        )
    return (
        "Each serve-mode cell's latency through vLLM's OpenAI-compatible server, measured by vLLM's benchmark "
        "client, against its output throughput: one point per concurrency b (requests in flight at most), one "
        "line per ladder step and workload; left the time per output token, right the end-to-end latency, each "
        "the median over requests (per repeat, then the median over repeats) with a whisker up to the p99 and a "
        f"tick at the p90 over requests; dashed, the config's latency target. {TARGET_RULE.capitalize()}. "
        "Per line: " + ("; ".join(parts) or "none") + "."
    )


_CAPTIONS: dict[str, Callable[[Tables, str], str]] = {
    "fig1_headline": _fig1,
    "fig2_r_vs_k_code": _fig2,
    "fig3_sonnet_ladder": _fig3,
    "fig4_k_alpha": _fig4,
    "fig5_model_size": _fig5,
    "fig6_gpu_util": _fig6,
    "fig7_k_predicted": _fig7,
    "fig8_r_at_scale": _fig8,
    "fig9_concurrency": _fig9,
    "fig10_serve_latency": _fig10,
}


def captions(
    tables: Path,
    headline: str,
    run: str | None = None,
    r_runs: Sequence[Tables] = (),
    *,
    dummy: Iterable[str] = (),
    left_out: Iterable[str] = (),
    headline_step: str = HEADLINE_STEP,
) -> dict[str, str]:
    """One caption per figure of FIGURES the run gets (drawn_figures) and draws, in that order. ``run``: the
    tables' run (default: their only run); ``r_runs``: other runs figure 8 draws R of (config r_at_scale_runs);
    ``dummy``: the models with random weights; ``left_out``: the figures not drawn (the manifest's
    ``left_out``), which get no caption."""
    if set(_CAPTIONS) != set(FIGURES):
        raise ValueError(f"captions and figures disagree: {sorted(set(_CAPTIONS) ^ set(FIGURES))}")
    if run is None:
        from .tables import read_parquet

        ctab = read_parquet(Path(tables), "cells.parquet")
        meta = ctab.schema.metadata or {}
        run = (meta.get(b"specsweep.run") or b"").decode() or ctab.column("run")[0].as_py()
    data = Tables.load(Path(tables), run)
    data.dummy = frozenset(dummy)
    data.headline_step = headline_step

    def footer(d: Tables, models: Sequence[str] = (headline,)) -> str:
        """The run's conditions and n, from the cells of ``models`` (the headline model, or every model of the
        run for figure 8, which draws them all; figure 9: the cells at a b)."""
        mine = [c for c in d.cells if c[0] in models]
        device = next((r["device_name"] for r in d.rows_of(mine) if r.get("device_name")), "unknown device")
        named = ", ".join(f"**{_e(m)}**" + (" (random weights)" if m in data.dummy else "") for m in models)
        foot = (
            f"\n\nModel{'s' if len(models) > 1 else ''} {named} on {_e(device)}; "
            f"{_e(d.n_text(mine, with_replication=False))}, {_e(stats.REPEATS_ARE[d.replication])}: "
            "medians with [95 % intervals over engine starts; none below 2 starts]."
        )

        def name(c: tuple[str, str, str]) -> str:
            return "/".join(map(_e, c if len(models) > 1 else c[1:]))

        missing = [name(c) for c in mine if not d.n(c)]
        fewer = [f"{name(c)} (n={d.n(c)})" for c in mine if 0 < d.n(c) < d.repeats]
        if missing:
            foot += f" Missing or failed cells: {', '.join(missing)}."
        if fewer:
            foot += f" Cells with fewer repeats: {', '.join(fewer)}."
        return foot

    out: dict[str, Any] = {
        stem: _fig8(data, headline, r_runs) if stem == R_AT_SCALE_FIGURE else _CAPTIONS[stem](data, headline)
        for stem in drawn_figures(data.concurrency_axis, data.serves)
        if stem not in set(left_out)
    }
    foot = footer(data)

    def foot_of(stem: str) -> str:
        """Figure 9's footer from the cells at a b, figure 10's from the serve-mode cells, figure 8's from every
        model it draws (smallest first)."""
        if stem == CONCURRENCY_FIGURE:
            return footer(data.concurrency())
        if stem == SERVE_FIGURE:
            return footer(data.served())
        if stem == R_AT_SCALE_FIGURE:
            return footer(data, tuple(data.models()) or (headline,))
        return foot

    return {k: check_rst(k, v + foot_of(k)) for k, v in out.items()}


def write_captions(
    tables: Path,
    headline: str,
    out_dir: Path,
    run: str | None = None,
    r_runs: Sequence[Tables] = (),
    *,
    dummy: Iterable[str] = (),
    left_out: Iterable[str] = (),
    headline_step: str = HEADLINE_STEP,
) -> list[Path]:
    paths = []
    texts = captions(tables, headline, run, r_runs, dummy=dummy, left_out=left_out, headline_step=headline_step)
    for name, text in texts.items():
        path = Path(out_dir) / f"{name}.rst"
        atomic_write_bytes(path, (text + "\n").encode())
        paths.append(path)
    return paths


def use_report_docutils_config(path: str) -> None:
    """Make docutils, which renders the Snakemake report's RST, read `path` (raw HTML off) after any config the
    user's DOCUTILSCONFIG names, so that it wins. Snakemake calls docutils with no settings of its own; this
    variable is docutils' only way in."""
    import os

    given = os.environ.get("DOCUTILSCONFIG")
    if path not in (given or "").split(os.pathsep):
        os.environ["DOCUTILSCONFIG"] = os.pathsep.join(p for p in (given, path) if p)
