"""RST captions for the Snakemake report, with the numbers that matter, from a run's tables."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from .jsonio import atomic_write_bytes

WORKLOADS = ("sonnet", "chat", "code", "mix-balanced", "mix-ch", "mix-sh")


def _fmt(v: float | None, spec: str) -> str:
    return "n/a" if v is None else format(v, spec)


def captions(tables: Path, headline: str) -> dict[str, str]:
    cells = [r for r in pq.read_table(Path(tables) / "cells.parquet").to_pylist() if r["model"] == headline]
    sp = [r for r in pq.read_table(Path(tables) / "speedup.parquet").to_pylist()]
    cell = {(r["workload"], r["config"]): r for r in cells}
    spd = {(r["model"], r["workload"], r["config"]): r for r in sp}
    device = next((r["device_name"] for r in cells if r["device_name"]), "unknown device")
    missing = [f"{r['workload']}/{r['config']}" for r in cells if r["status"] != "ok"]
    foot = f"\n\nModel **{headline}** on {device}."
    if missing:
        foot += f" Missing or failed cells: {', '.join(missing)}."

    def gain(w: str, c: str) -> str:
        g = (spd.get((headline, w, c)) or {}).get("gain_pct")
        return "n/a" if g is None else f"{g:+.1f} %"

    out: dict[str, Any] = {}
    out["fig1_headline"] = "Vanilla vs trident (suffix, 32 tokens, PIECEWISE, gmu 0.80) output throughput. " + \
        "Gain per workload: " + "; ".join(f"{w} {gain(w, 'trident')}" for w in WORKLOADS) + "."
    code = {c: spd.get((headline, "code", c)) or {} for c in ("ngram", "suffix")}

    def t_ratio(r: dict[str, Any]) -> float | None:
        tps, van = r.get("tokens_per_step"), r.get("vanilla_tokens_per_step")
        return tps / van if tps is not None and van else None

    out["fig2_r_vs_k_code"] = "R (spec step time over vanilla step time), K (1 + accepted/drafts) and T " + \
        "(tokens-per-step ratio) on code. " + "; ".join(
            f"{c}: K = {_fmt(code[c].get('K'), '.2f')}, T = {_fmt(t_ratio(code[c]), '.2f')}, "
            f"R = {_fmt(code[c].get('R'), '.2f')}, speedup {gain('code', c)}" for c in code) + \
        ". Speedup = T / R exactly; K is the article's per-request proxy for T, which batching lowers."
    out["fig3_sonnet_ladder"] = "The sonnet ladder, output tok/s: " + " → ".join(
        f"{c} {_fmt((cell.get(('sonnet', c)) or {}).get('output_tok_s'), '.0f')}"
        for c in ("vanilla", "ngram", "suffix", "trident")) + "."
    out["fig4_k_alpha"] = "K and α per workload and method: " + "; ".join(
        f"{w}/{c} K = {_fmt((cell.get((w, c)) or {}).get('K'), '.2f')}, "
        f"α = {_fmt((cell.get((w, c)) or {}).get('alpha'), '.3f')}"
        for w in ("sonnet", "chat", "code") for c in ("ngram", "suffix")) + ". The dashed line is the mean R."
    by_model: dict[str, list[float]] = {}
    for r in sp:
        if r["config"] == "trident" and r["speedup"] is not None:
            by_model.setdefault(f"{r['model']} ({r['model_params_b']:g}B)", []).append(r["speedup"])
    out["fig5_model_size"] = "Trident speedup against model size (mean over workloads): " + (
        "; ".join(f"{m} {sum(v) / len(v):.3f}" for m, v in sorted(by_model.items())) or "no trident cell yet") + \
        ". The article puts the boundary between 7B and 14B."
    util = {c: [cell[(w, c)]["gpu_util_mean"] for w in WORKLOADS
                if (w, c) in cell and cell[(w, c)]["gpu_util_mean"] is not None] for c in ("vanilla", "trident")}
    out["fig6_gpu_util"] = ("Mean GPU utilisation during generation: " + "; ".join(
        f"{c} {min(v):.1f}–{max(v):.1f} %" for c, v in util.items() if v) + ".") if any(util.values()) else \
        "GPU utilisation was not measured on this run (no NVML: a CPU run); throughput and wall time are shown."
    return {k: v + foot for k, v in out.items()}


def write_captions(tables: Path, headline: str, out_dir: Path) -> list[Path]:
    paths = []
    for name, text in captions(tables, headline).items():
        path = Path(out_dir) / f"{name}.rst"
        atomic_write_bytes(path, (text + "\n").encode())
        paths.append(path)
    return paths
