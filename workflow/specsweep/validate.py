"""Replay and the advisor checked against a run's measurements (`specsweep validate`).

Two tables, written as a set (with a MANIFEST) into the run's `validation/` folder:

- `replay_vs_measured`: every real-weight drafter cell that stores its token ids, replayed with the cell's own
  drafter settings, concurrency (the cell's b, else max_num_seqs) and token budget on the lockstep schedule
  (replay.py): replayed K and alpha against the K and alpha vLLM's counters measured in that cell.
- `advise_vs_measured`: per (model, workload, drafter, concurrency) measured against vanilla, the advisor's
  predicted speedup T / R (advise.advise: T from the replay of repeat 1 of that cell, R from the run's speedup
  table) against the measured speedup. Two predictions per row: R taken from the other workloads of the run
  (`predicted_other`: what a user gets whose traffic was never measured on this shape, the advisor's real use)
  and R from the same workload (`predicted_same`: only the replayed T is then a prediction).

Both read only committed files (cells, token files, the run's tables); no model or tokenizer is needed."""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa

from . import advise, cells, paths, replay
from .errors import SpecsweepError
from .escape import md_text
from .jsonio import atomic_write_json

#: The tolerances the replay is held to (tests/test_replay.py holds the CPU profile's cells to the same):
#: ngram drafts from the request's own tokens only, so replay reproduces vLLM's drafts; suffix decoding's
#: global cache also sees the partial responses of the requests beside it, which the lockstep schedule follows
#: only as far as vLLM's batch order is admission order.
TOLERANCE = {"ngram": 0.03, "suffix": 0.05}
#: The advisor's goal: predicted speedup within 10 % of the measured one.
ADVISE_GOAL = 0.10

REPLAY_COLUMNS: list[tuple[str, pa.DataType]] = [
    ("model", pa.string()),
    ("workload", pa.string()),
    ("config", pa.string()),
    ("method", pa.string()),
    ("concurrency", pa.int64()),
    ("repeat", pa.int64()),
    ("requests", pa.int64()),
    ("K_measured", pa.float64()),
    ("K_replayed", pa.float64()),
    ("K_replayed_lo", pa.float64()),
    ("K_replayed_hi", pa.float64()),
    ("K_error", pa.float64()),
    ("alpha_measured", pa.float64()),
    ("alpha_replayed", pa.float64()),
    ("drafts_measured", pa.int64()),
    ("drafts_replayed", pa.int64()),
    ("T_replayed", pa.float64()),
    ("tolerance", pa.float64()),
    ("within", pa.bool_()),
]

#: The columns that name a speedup and its measurement, first in the advisor's tables (in-sample and held out).
SPEEDUP_COLUMNS: list[tuple[str, pa.DataType]] = [
    ("model", pa.string()),
    ("workload", pa.string()),
    ("config", pa.string()),
    ("method", pa.string()),
    ("concurrency", pa.int64()),
    ("n_starts", pa.int64()),
    ("speedup_measured", pa.float64()),
    ("speedup_measured_lo", pa.float64()),
    ("speedup_measured_hi", pa.float64()),
]

ADVISE_COLUMNS: list[tuple[str, pa.DataType]] = [
    *SPEEDUP_COLUMNS,
    ("T_measured", pa.float64()),
    ("T_replayed", pa.float64()),
    ("R_same", pa.float64()),
    ("predicted_same", pa.float64()),
    ("error_same", pa.float64()),
    ("R_other", pa.float64()),
    ("R_other_from", pa.string()),
    ("predicted_other", pa.float64()),
    ("predicted_other_lo", pa.float64()),
    ("predicted_other_hi", pa.float64()),
    ("error_other", pa.float64()),
    ("within_goal_other", pa.bool_()),
]


def replay_cell(path: Path) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """(the cell, its replay report) for a drafter cell that stores token ids; None for any other cell."""
    doc = cells.load(path)
    spec = doc["settings"]["ladder"].get("speculative") or {}
    if not spec or not doc.get("replay_tokens") or doc.get("status") != "ok":
        return None
    requests = replay.cell_requests(path, doc)
    sched = replay.cell_schedule(doc)
    drafter = replay.Drafter.from_speculative(dict(spec), sched.max_model_len)
    return doc, replay.replay_report(requests, drafter, "lockstep", sched.concurrency, sched.token_budget, str(path))


def _f(x: Any) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else float(x)


def replay_rows(
    cells_dir: Path, tmp: Path
) -> tuple[list[dict[str, Any]], dict[tuple[str, str, str, int | None], Path]]:
    """One row per replayed cell, and the replay reports of repeat 1 written to the folder tmp, keyed by
    (model, workload, ladder step, concurrency) for the advisor."""
    rows: list[dict[str, Any]] = []
    reports: dict[tuple[str, str, str, int | None], Path] = {}
    for path in paths.cell_files(cells_dir):
        got = replay_cell(path)
        if got is None:
            continue
        doc, rep = got
        o, spec = rep["overall"], doc["spec"]
        method = rep["drafter"]["method"]
        b = doc["settings"]["workload"].get("concurrency")
        workload = doc["workload"].split("@")[0]
        km, kr = _f(spec.get("K")), _f(o.get("K"))
        err = None if km is None or kr is None else kr / km - 1
        tol = TOLERANCE.get(method)
        rows.append(
            {
                "model": doc["model"],
                "workload": workload,
                "config": doc["config"],
                "method": method,
                "concurrency": b,
                "repeat": doc["repeat"],
                "requests": o["requests"],
                "K_measured": km,
                "K_replayed": kr,
                "K_replayed_lo": _f((o.get("K_ci") or [None, None])[0]),
                "K_replayed_hi": _f((o.get("K_ci") or [None, None])[1]),
                "K_error": err,
                "alpha_measured": _f(spec.get("alpha")),
                "alpha_replayed": _f(o.get("alpha")),
                "drafts_measured": spec.get("drafts"),
                "drafts_replayed": o.get("drafts"),
                "T_replayed": _f(o.get("T")),
                "tolerance": tol,
                "within": None if err is None or tol is None else abs(err) <= tol,
            }
        )
        if doc["repeat"] == 1:
            out = tmp / f"{doc['model']}-{workload}-{doc['config']}-b{b}.json"
            atomic_write_json(out, rep)
            reports[(doc["model"], workload, doc["config"], b)] = out
    return rows, reports


def advise_rows(
    tables: Path, reports: dict[tuple[str, str, str, int | None], Path], config_dir: Path | None = None
) -> list[dict[str, Any]]:
    """The advisor's prediction for every measured (model, workload, drafter, b) against the measurement."""
    from .tables import read_parquet

    measured = [r for r in read_parquet(Path(tables), "speedup.parquet").to_pylist() if _f(r.get("speedup"))]
    by_model: dict[str, set[str]] = {}
    for r in measured:
        by_model.setdefault(r["model"], set()).add(r["workload"].split("@")[0])
    rows = []
    for r in measured:
        workload, b = r["workload"].split("@")[0], r.get("concurrency")
        rep = reports.get((r["model"], workload, r["config"], b))
        if rep is None:
            continue
        step = {r["method"]: r["config"]}  # R of this ladder step, not of every step of its method
        same = _predict(rep, tables, r["model"], r["workload"], b, config_dir, step)
        others = sorted(by_model[r["model"]] - {workload})
        other = None
        if others:
            # R over the other workloads at the same b: the advisor's spread of R over workloads, this one left out
            got = [_predict(rep, tables, r["model"], _at(w, b), b, config_dir, step) for w in others]
            preds = [p for p in got if p is not None]
            if preds:
                rs = sorted(p["R"] for p in preds)
                other = {
                    "R": rs[len(rs) // 2] if len(rs) % 2 else (rs[len(rs) // 2 - 1] + rs[len(rs) // 2]) / 2,
                    "R_lo": None if any(p["R_lo"] is None for p in preds) else min(p["R_lo"] for p in preds),
                    "R_hi": None if any(p["R_hi"] is None for p in preds) else max(p["R_hi"] for p in preds),
                    "T": preds[0]["T"],
                    "T_lo": preds[0]["T_lo"],
                    "T_hi": preds[0]["T_hi"],
                    "from": ", ".join(others),
                }
        sm = float(r["speedup"])
        row = {
            "model": r["model"],
            "workload": workload,
            "config": r["config"],
            "method": r["method"],
            "concurrency": b,
            "n_starts": r.get("n_starts"),
            "speedup_measured": sm,
            "speedup_measured_lo": _f(r.get("speedup_lo")),
            "speedup_measured_hi": _f(r.get("speedup_hi")),
            "T_measured": _f(r.get("T")),
            "T_replayed": None if same is None else same["T"],
            "R_same": None if same is None else same["R"],
            "predicted_same": None if same is None else same["T"] / same["R"],
        }
        row["error_same"] = None if row["predicted_same"] is None else row["predicted_same"] / sm - 1
        if other is not None:
            pred = other["T"] / other["R"]
            row |= {
                "R_other": other["R"],
                "R_other_from": other["from"],
                "predicted_other": pred,
                "predicted_other_lo": None if other["R_hi"] is None else other["T_lo"] / other["R_hi"],
                "predicted_other_hi": None if other["R_lo"] is None else other["T_hi"] / other["R_lo"],
                "error_other": pred / sm - 1,
                "within_goal_other": abs(pred / sm - 1) <= ADVISE_GOAL,
            }
        rows.append(row)
    return rows


def _at(workload: str, b: int | None) -> str:
    return workload if b is None else f"{workload}@b{b}"


def _predict(
    rep: Path,
    tables: Path,
    model: str,
    workload: str,
    b: int | None,
    config_dir: Path | None,
    steps: dict[str, str] | None = None,
) -> dict[str, Any] | None:
    """advise.advise's row at concurrency b with R of one workload and ladder step (None when that workload was
    not measured there)."""
    try:
        adv = advise.advise([rep], tables, model, workload, config_dir, steps)
    except SpecsweepError:
        return None
    hit = [x for x in adv["rows"] if x["concurrency"] == b]
    if not hit:
        return None
    x = hit[0]
    return {k: x[k] for k in ("T", "T_lo", "T_hi", "R", "R_lo", "R_hi")}


def _pct(x: Any) -> str:
    return "–" if x is None else f"{100 * x:+.1f} %"


def _n(x: Any, d: int = 2) -> str:
    return "–" if x is None else f"{x:.{d}f}"


def markdown(run: str, replays: list[dict[str, Any]], adv: list[dict[str, Any]]) -> str:
    out = [f"# Replay and advisor against measurement: run `{run}`", ""]
    out += [
        "## Replayed K against measured K",
        "",
        "Each drafter cell replayed from its stored token ids with its own settings, concurrency and token "
        "budget (lockstep schedule). Tolerance: "
        + ", ".join(f"{m} ±{100 * t:.0f} %" for m, t in TOLERANCE.items())
        + ".",
        "",
    ]
    for method in sorted({r["method"] for r in replays}):
        g = [r for r in replays if r["method"] == method and r["K_error"] is not None]
        if g:
            errs = sorted(abs(r["K_error"]) for r in g)
            inside = sum(bool(r["within"]) for r in g)
            out.append(
                f"- {method}: {len(g)} cells, {inside} within ±{100 * TOLERANCE[method]:.0f} %; |error| median "
                f"{100 * errs[len(errs) // 2]:.1f} %, largest {100 * errs[-1]:.1f} %; signed mean "
                f"{100 * sum(r['K_error'] for r in g) / len(g):+.1f} %"
            )
    out += [
        "",
        "| workload | drafter | b | repeat | requests | K measured | K replayed [95 % CI] | error | drafts m / r |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in replays:
        ci = "" if r["K_replayed_lo"] is None else f" [{r['K_replayed_lo']:.2f}, {r['K_replayed_hi']:.2f}]"
        out.append(
            f"| {md_text(r['workload'])} | {md_text(r['method'])} | {r['concurrency'] or 'all'} | {r['repeat']} | "
            f"{r['requests']} | "
            f"{_n(r['K_measured'], 3)} | {_n(r['K_replayed'], 3)}{ci} | {_pct(r['K_error'])} | "
            f"{r['drafts_measured']} / {r['drafts_replayed']} |"
        )
    out += [
        "",
        "## Predicted speedup against measured speedup",
        "",
        f"The advisor's prediction T / R (goal: within ±{100 * ADVISE_GOAL:.0f} % of the measured speedup). "
        "`other`: R from the run's other workloads at the same b (the advisor's use on unmeasured traffic); "
        "`same`: R from this workload's own cells, so only the replayed T is predicted.",
        "",
    ]
    g = [r for r in adv if r.get("error_other") is not None]
    if g:
        inside = sum(bool(r["within_goal_other"]) for r in g)
        errs = sorted(abs(r["error_other"]) for r in g)
        out.append(
            f"- R from other workloads: {inside} of {len(g)} within ±{100 * ADVISE_GOAL:.0f} %; |error| median "
            f"{100 * errs[len(errs) // 2]:.1f} %, largest {100 * errs[-1]:.1f} %"
        )
    g = [r for r in adv if r.get("error_same") is not None]
    if g:
        errs = sorted(abs(r["error_same"]) for r in g)
        inside = sum(abs(r["error_same"]) <= ADVISE_GOAL for r in g)
        out.append(
            f"- R from the same workload: {inside} of {len(g)} within ±{100 * ADVISE_GOAL:.0f} %; |error| "
            f"median {100 * errs[len(errs) // 2]:.1f} %, largest {100 * errs[-1]:.1f} %"
        )
    out += [
        "",
        "| workload | step | b | n | measured [95 % CI] | T measured | T replayed | predicted (other) | error | "
        "predicted (same) | error |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in adv:
        m = _n(r["speedup_measured"])
        if r["speedup_measured_lo"] is not None:
            m += f" [{r['speedup_measured_lo']:.2f}, {r['speedup_measured_hi']:.2f}]"
        out.append(
            f"| {md_text(r['workload'])} | {md_text(r['config'])} | {r['concurrency'] or 'all'} | "
            f"{r['n_starts'] or '–'} | {m} | "
            f"{_n(r['T_measured'])} | {_n(r['T_replayed'])} | {_n(r.get('predicted_other'))} | "
            f"{_pct(r.get('error_other'))} | {_n(r['predicted_same'])} | {_pct(r['error_same'])} |"
        )
    out.append("")
    return "\n".join(out)


def validate(cells_dir: Path, tables: Path, out: Path, config_dir: Path | None = None) -> dict[str, Any]:
    """Both tables for one run, written as a set into out."""
    from .jsonio import check_replaceable
    from .tables import _parquet_bytes, _table, check_tables_run, read_parquet, unchecked_tables, write_set

    if not Path(cells_dir).is_dir():
        raise SpecsweepError(f"validate: {cells_dir} is not a folder of cells")
    run = Path(cells_dir).resolve().parent.name
    check_replaceable(Path(out), "validation", run)  # before the replays; write_set checks again
    if not (Path(tables) / "speedup.parquet").is_file():
        raise SpecsweepError(f"validate: {tables} holds no speedup.parquet (run `specsweep tables` first)")
    # the tables checked against their manifest and their run; the cells against the run's archive, as the
    # tables check them; what cannot be checked is said and recorded
    check_tables_run(Path(tables), read_parquet(Path(tables), "speedup.parquet"), run)
    unchecked = unchecked_tables(Path(tables)) + check_archive(Path(cells_dir), run)
    with tempfile.TemporaryDirectory(prefix="specsweep-validate-") as tmp:
        replays, reports = replay_rows(Path(cells_dir), Path(tmp))
        if not replays:
            raise SpecsweepError(f"validate: no drafter cell under {cells_dir} stores token ids (replay_tokens)")
        adv = advise_rows(Path(tables), reports, config_dir)
    meta = {"specsweep": "validate", "run": run, **({"unchecked": json.dumps(unchecked)} if unchecked else {})}
    files = {
        "replay_vs_measured.parquet": _parquet_bytes(_table(replays, REPLAY_COLUMNS, meta)),
        "advise_vs_measured.parquet": _parquet_bytes(_table(adv, ADVISE_COLUMNS, meta)),
        "validation.md": markdown(run, replays, adv).encode(),
    }
    write_set(Path(out), files, "validation", run)
    return {"replay": replays, "advise": adv, "unchecked": unchecked}


# ------------------------------------------------------------------------------------------ held out

HELDOUT_COLUMNS: list[tuple[str, pa.DataType]] = [
    *SPEEDUP_COLUMNS,
    ("T", pa.float64()),
    ("T_lo", pa.float64()),
    ("T_hi", pa.float64()),
    ("T_from", pa.string()),
    ("source_run", pa.string()),
    ("source_model", pa.string()),
    ("source_concurrency", pa.int64()),
    ("R_same", pa.float64()),
    ("R_same_lo", pa.float64()),
    ("R_same_hi", pa.float64()),
    ("predicted_same", pa.float64()),
    ("predicted_same_lo", pa.float64()),
    ("predicted_same_hi", pa.float64()),
    ("error_same", pa.float64()),
    ("covers_same", pa.bool_()),
    ("R_pooled", pa.float64()),
    ("R_pooled_lo", pa.float64()),
    ("R_pooled_hi", pa.float64()),
    ("R_pooled_from", pa.string()),
    ("predicted_pooled", pa.float64()),
    ("predicted_pooled_lo", pa.float64()),
    ("predicted_pooled_hi", pa.float64()),
    ("error_pooled", pa.float64()),
    ("covers_pooled", pa.bool_()),
    ("default_from", pa.string()),
    ("predicted_default", pa.float64()),
    ("predicted_default_lo", pa.float64()),
    ("predicted_default_hi", pa.float64()),
    ("error_default", pa.float64()),
    ("covers_default", pa.bool_()),
]


def _source_model(target: dict[str, Any], source: list[dict[str, Any]]) -> str | None:
    """The source run's model for a target row: the same name, else the one model of the same size, tensor
    parallelism and quantization (the same shape measured under another name, e.g. another checkpoint's
    random weights)."""
    names = {r["model"] for r in source}
    if target["model"] in names:
        return str(target["model"])
    shape = ("model_params_b", "tp", "quantization")
    same = {r["model"] for r in source if all(r.get(k) == target.get(k) for k in shape)}
    return same.pop() if len(same) == 1 else None


def _load(b: Any, all_at: int | None) -> Any:
    """A concurrency point, `all prompts at once` (None) taken as all_at where given."""
    return all_at if b is None and all_at is not None else b


def heldout_rows(
    target_tables: Path,
    source_tables: Path,
    all_at: int | None = None,
    target_cells: Path | None = None,
    config_dir: Path | None = None,
) -> list[dict[str, Any]]:
    """Each speedup of the target run predicted as T / R with R measured in the source run (another run, another
    engine boot): R of the same workload, ladder step and concurrency (`same`), and the advisor's default, R's
    median over the source's workloads of that step at that concurrency (`pooled`, interval the lowest to the
    highest bound, advise.step_time_ratios). T is the target cell's own: replayed from its stored token ids
    where `target_cells` holds them (repeat 1, advise's interval over requests), else the tables' measured T
    with its interval over engine starts. `all_at`: the load point "all prompts at once" of either run stands
    for this concurrency (the engine's max_num_seqs when the prompts exceed it)."""
    from .tables import read_parquet

    for folder in (target_tables, source_tables):
        if not (Path(folder) / "speedup.parquet").is_file():
            raise SpecsweepError(f"validate: {folder} holds no speedup.parquet (run `specsweep tables` first)")
    target = [r for r in read_parquet(Path(target_tables), "speedup.parquet").to_pylist() if _f(r.get("speedup"))]
    source = [r for r in read_parquet(Path(source_tables), "speedup.parquet").to_pylist() if _f(r.get("R"))]
    source_run = Path(source_tables).resolve().parent.name
    rows = []
    with tempfile.TemporaryDirectory(prefix="specsweep-heldout-") as tmp:
        for r in target:
            sm = _source_model(r, source)
            if sm is None or _f(r.get("T")) is None:
                continue
            workload, b = r["workload"].split("@")[0], _load(r.get("concurrency"), all_at)
            here = [
                s
                for s in source
                if s["model"] == sm and s["config"] == r["config"] and _load(s.get("concurrency"), all_at) == b
            ]
            if not here:
                continue
            t, t_lo, t_hi, t_from = _heldout_t(r, target_cells, Path(tmp))
            same = next((s for s in here if s["workload"].split("@")[0] == workload), None)
            rs = sorted(float(s["R"]) for s in here)
            mid = len(rs) // 2
            pooled: dict[str, Any] = {
                "R": rs[mid] if len(rs) % 2 else (rs[mid - 1] + rs[mid]) / 2,
                "R_lo": None if any(_f(s.get("R_lo")) is None for s in here) else min(s["R_lo"] for s in here),
                "R_hi": None if any(_f(s.get("R_hi")) is None for s in here) else max(s["R_hi"] for s in here),
            }
            speed = float(r["speedup"])
            row: dict[str, Any] = {
                **_measured(r, workload, (t, t_lo, t_hi, t_from), source_run),
                "source_model": sm,
                "source_concurrency": here[0].get("concurrency"),
                "R_pooled_from": ", ".join(sorted(s["workload"] for s in here)),
            }
            for name, got in (("same", same), ("pooled", pooled)):
                if got is None:
                    continue
                r_, r_lo, r_hi = float(got["R"]), _f(got.get("R_lo")), _f(got.get("R_hi"))
                pred = t / r_
                lo = None if r_hi is None or t_lo is None else t_lo / r_hi
                hi = None if r_lo is None or t_hi is None else t_hi / r_lo
                row |= {
                    f"R_{name}": r_,
                    f"R_{name}_lo": r_lo,
                    f"R_{name}_hi": r_hi,
                    f"predicted_{name}": pred,
                    f"predicted_{name}_lo": lo,
                    f"predicted_{name}_hi": hi,
                    f"error_{name}": pred / speed - 1,
                    f"covers_{name}": None if lo is None or hi is None else lo <= speed <= hi,
                }
            rows.append(row | _default(row))
    return rows


def _default(row: dict[str, Any]) -> dict[str, Any]:
    """The advisor's default prediction (advise.DEFAULT_R): R of the same workload where the source measured it
    at this step and b, else R pooled over the source's workloads (the stated fallback)."""
    name = "same" if row.get("R_same") is not None else "pooled"
    if row.get(f"R_{name}") is None:
        return {}
    return {"default_from": name} | {
        f"{k}_default{tail}": row.get(f"{k}_{name}{tail}")
        for k, tail in (("predicted", ""), ("predicted", "_lo"), ("predicted", "_hi"), ("error", ""), ("covers", ""))
    }


def _heldout_t(r: dict[str, Any], cells_dir: Path | None, tmp: Path) -> tuple[float, float | None, float | None, str]:
    """T of a target speedup row: replayed (repeat 1's stored token ids) where the cell has them, else measured."""
    if cells_dir is not None:
        path = Path(cells_dir) / r["model"] / r["workload"] / r["config"] / "r1.json"
        got = replay_cell(path) if path.is_file() else None
        if got is not None:
            out = tmp / f"{r['model']}-{r['workload']}-{r['config']}.json"
            atomic_write_json(out, got[1])
            t, lo, hi = advise._t_interval(got[1])
            return t, lo, hi, "replayed"
    if r.get("T_same_starts"):  # the same on every engine start of both sides: exact, its own bounds
        return float(r["T"]), float(r["T"]), float(r["T"]), "measured"
    return float(r["T"]), _f(r.get("T_lo")), _f(r.get("T_hi")), "measured"


def _share(rows: list[dict[str, Any]], name: str) -> str:
    g = [r for r in rows if r.get(f"error_{name}") is not None]
    if not g:
        return "none"
    errs = sorted(abs(r[f"error_{name}"]) for r in g)
    inside = sum(e <= ADVISE_GOAL for e in errs)
    c = [r[f"covers_{name}"] for r in g if r.get(f"covers_{name}") is not None]
    cover = f"; its interval covers the measured speedup in {sum(c)} of {len(c)}" if c else "; no interval"
    med = errs[len(errs) // 2] if len(errs) % 2 else (errs[len(errs) // 2 - 1] + errs[len(errs) // 2]) / 2
    return (
        f"{inside} of {len(g)} within ±{100 * ADVISE_GOAL:.0f} %; |error| median {100 * med:.1f} %, largest "
        f"{100 * errs[-1]:.1f} %{cover}"
    )


def heldout_markdown(run: str, rows: list[dict[str, Any]]) -> str:
    out = [f"# The advisor held out: run `{run}` predicted with R from other runs", ""]
    out += [
        "Each speedup of this run predicted as T / R, with R (the ladder step's step-time ratio) measured in "
        "another run on another engine boot, never in this run's cells. `same`: R of the same workload, step "
        "and concurrency there; `pooled`: R's median over that run's workloads of the "
        "step at that concurrency (interval the lowest to the highest bound); `default`: the advisor's default "
        "(advise.DEFAULT_R), `same` where the other run measured this workload there, else `pooled`. T is this "
        "run's own (replayed "
        "from the cell's token ids, else measured). Goal: within "
        f"±{100 * ADVISE_GOAL:.0f} % of the measured speedup; an interval covers when the measured speedup "
        "lies inside it.",
        "",
    ]
    for src in sorted({r["source_run"] for r in rows}):
        g = [r for r in rows if r["source_run"] == src]
        out += [
            f"- R from `{src}`, same workload: {_share(g, 'same')}",
            f"- R from `{src}`, pooled over its workloads: {_share(g, 'pooled')}",
            f"- R from `{src}`, the advisor's default (same workload, else pooled): {_share(g, 'default')}",
        ]
    out += [
        "",
        "| workload | step | b | measured [95 % CI] | T (from) | R from | R same | predicted same [95 % CI] | error "
        "| R pooled | predicted pooled [95 % CI] | error | default |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]

    def ci(r: dict[str, Any], k: str) -> str:
        lo, hi = r.get(f"{k}_lo"), r.get(f"{k}_hi")
        return _n(r.get(k)) + ("" if lo is None or hi is None else f" [{lo:.2f}, {hi:.2f}]")

    for r in rows:
        src = f"{r['source_run']} ({r['source_model']}, b {r['source_concurrency'] or 'all'})"
        out.append(
            f"| {r['workload']} | {r['config']} | {r['concurrency'] or 'all'} | {ci(r, 'speedup_measured')} | "
            f"{_n(r['T'])} ({r['T_from']}) | {src} | {_n(r.get('R_same'))} | {ci(r, 'predicted_same')} | "
            f"{_pct(r.get('error_same'))} | {_n(r.get('R_pooled'))} | {ci(r, 'predicted_pooled')} | "
            f"{_pct(r.get('error_pooled'))} | {r.get('default_from') or '–'} |"
        )
    out.append("")
    return "\n".join(out)


def heldout(
    target_tables: Path,
    sources: list[Path],
    out: Path,
    all_at: int | None = None,
    target_cells: Path | None = None,
    config_dir: Path | None = None,
) -> list[dict[str, Any]]:
    """The held-out tables of one run, R from each source run's tables, written as a set into out."""
    if not sources:
        raise SpecsweepError("validate --heldout-from: name at least one other run")
    rows: list[dict[str, Any]] = []
    for src in sources:
        if Path(src).resolve() == Path(target_tables).resolve():
            raise SpecsweepError(f"validate --heldout-from {src}: that is this run's own tables (not held out)")
        rows += heldout_rows(Path(target_tables), Path(src), all_at, target_cells, config_dir)
    if not rows:
        raise SpecsweepError(
            f"validate: no speedup of {target_tables} has a step measured at its concurrency in "
            f"{', '.join(map(str, sources))} (same model or shape; --all-at B matches `all prompts at once` to b B)"
        )
    run = Path(target_tables).resolve().parent.name
    _write_validation(Path(out), "heldout", run, rows, HELDOUT_COLUMNS, heldout_markdown(run, rows))
    return rows


def _write_validation(
    out: Path, kind: str, run: str, rows: list[dict[str, Any]], columns: list[tuple[str, pa.DataType]], md: str
) -> None:
    """One validation set of a run (kind heldout or crossmodel): validate-KIND.parquet and .md, written as a
    set into out (validation-KIND)."""
    from .tables import _parquet_bytes, _table, write_set

    meta = {"specsweep": f"validate-{kind}", "run": run}
    files = {
        f"validate-{kind}.parquet": _parquet_bytes(_table(rows, columns, meta)),
        f"validate-{kind}.md": md.encode(),
    }
    write_set(out, files, f"validation-{kind}", run)


# ------------------------------------------------------------------------------------------ across models

CROSSMODEL_COLUMNS: list[tuple[str, pa.DataType]] = [
    *SPEEDUP_COLUMNS,
    ("model_params_b", pa.float64()),
    ("T", pa.float64()),
    ("T_lo", pa.float64()),
    ("T_hi", pa.float64()),
    ("T_from", pa.string()),
    ("source_run", pa.string()),
    ("source_model", pa.string()),
    ("source_params_b", pa.float64()),
    ("R", pa.float64()),
    ("R_lo", pa.float64()),
    ("R_hi", pa.float64()),
    ("R_target", pa.float64()),
    ("predicted", pa.float64()),
    ("predicted_lo", pa.float64()),
    ("predicted_hi", pa.float64()),
    ("error", pa.float64()),
    ("within_goal", pa.bool_()),
    ("covers", pa.bool_()),
]


def crossmodel_rows(
    target_tables: Path, source_tables: Path, all_at: int | None = None, target_cells: Path | None = None
) -> list[dict[str, Any]]:
    """Each speedup of the target run predicted as T / R with R of ANOTHER model (every other model of the source
    run), measured at the same workload, ladder step and concurrency: the advisor fitted on one model, used on
    another. T is the target cell's own (replayed where `target_cells` stores token ids, else measured), R
    the source model's with its interval; R_target is the target model's own R (what the prediction needed)."""
    from .tables import read_parquet

    for folder in (target_tables, source_tables):
        if not (Path(folder) / "speedup.parquet").is_file():
            raise SpecsweepError(f"validate: {folder} holds no speedup.parquet (run `specsweep tables` first)")
    target = [r for r in read_parquet(Path(target_tables), "speedup.parquet").to_pylist() if _f(r.get("speedup"))]
    source = [r for r in read_parquet(Path(source_tables), "speedup.parquet").to_pylist() if _f(r.get("R"))]
    source_run = Path(source_tables).resolve().parent.name
    rows = []
    with tempfile.TemporaryDirectory(prefix="specsweep-crossmodel-") as tmp:
        for r in target:
            if _f(r.get("T")) is None:
                continue
            workload, b = r["workload"].split("@")[0], _load(r.get("concurrency"), all_at)
            here = [
                s
                for s in source
                if s["model"] != r["model"]
                and s["config"] == r["config"]
                and s["workload"].split("@")[0] == workload
                and _load(s.get("concurrency"), all_at) == b
            ]
            if not here:
                continue
            t, t_lo, t_hi, t_from = _heldout_t(r, target_cells, Path(tmp))
            speed = float(r["speedup"])
            for s in sorted(here, key=lambda s: (s.get("model_params_b") or 0, s["model"])):
                r_, r_lo, r_hi = float(s["R"]), _f(s.get("R_lo")), _f(s.get("R_hi"))
                lo = None if r_hi is None or t_lo is None else t_lo / r_hi
                hi = None if r_lo is None or t_hi is None else t_hi / r_lo
                rows.append(
                    {
                        **_measured(r, workload, (t, t_lo, t_hi, t_from), source_run),
                        "model_params_b": _f(r.get("model_params_b")),
                        "source_model": s["model"],
                        "source_params_b": _f(s.get("model_params_b")),
                        "R": r_,
                        "R_lo": r_lo,
                        "R_hi": r_hi,
                        "R_target": _f(r.get("R")),
                        "predicted": t / r_,
                        "predicted_lo": lo,
                        "predicted_hi": hi,
                        "error": t / r_ / speed - 1,
                        "within_goal": abs(t / r_ / speed - 1) <= ADVISE_GOAL,
                        "covers": None if lo is None or hi is None else lo <= speed <= hi,
                    }
                )
    return rows


def _measured(r: dict[str, Any], workload: str, t: tuple[Any, Any, Any, Any], source_run: str) -> dict[str, Any]:
    """The measured side of a held-out or cross-model row: the speedup table's row r (its cell, measured speedup
    and interval) and T (value, bounds, where it came from), with the run whose R predicts it."""
    return {
        "model": r["model"],
        "workload": workload,
        "config": r["config"],
        "method": r["method"],
        "concurrency": r.get("concurrency"),
        "n_starts": r.get("n_starts"),
        "speedup_measured": float(r["speedup"]),
        "speedup_measured_lo": _f(r.get("speedup_lo")),
        "speedup_measured_hi": _f(r.get("speedup_hi")),
        "T": t[0],
        "T_lo": t[1],
        "T_hi": t[2],
        "T_from": t[3],
        "source_run": source_run,
    }


def crossmodel_summary(rows: list[dict[str, Any]]) -> list[str]:
    """One line per (source run, source model -> target model): the share within the goal, |error| median and
    largest, the intervals' coverage."""
    out = []
    pairs = sorted({(r["source_run"], r["source_model"], r["model"]) for r in rows})
    for src, sm, tm in pairs:
        g = [
            r | {"error_x": r["error"], "covers_x": r["covers"]}
            for r in rows
            if (r["source_run"], r["source_model"], r["model"]) == (src, sm, tm)
        ]
        out.append(f"- R of `{sm}` (`{src}`) for `{tm}`: {_share(g, 'x')}")
    return out


def crossmodel_markdown(run: str, rows: list[dict[str, Any]]) -> str:
    out = [f"# The advisor across models: run `{run}` predicted with another model's R", ""]
    out += [
        "Each speedup of this run predicted as T / R, with R (the ladder step's step-time ratio) of another model "
        "measured at the same workload, step and concurrency: the advisor fitted on one model's cells and used on "
        "another's. T is the predicted model's own (replayed from the cell's token ids, else measured); `R own` "
        "is its own R, the one the prediction needed. Goal: within "
        f"±{100 * ADVISE_GOAL:.0f} % of the measured speedup; an interval covers when the measured speedup lies "
        "inside it. Where a model's R does not carry to another family or size, that is a finding: measure R on "
        "the model that serves.",
        "",
        *crossmodel_summary(rows),
        "",
        "| model | workload | step | b | measured [95 % CI] | T (from) | R from | R | R own | predicted [95 % CI] "
        "| error |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]

    def ci(r: dict[str, Any], k: str) -> str:
        lo, hi = r.get(f"{k}_lo"), r.get(f"{k}_hi")
        return _n(r.get(k)) + ("" if lo is None or hi is None else f" [{lo:.2f}, {hi:.2f}]")

    for r in rows:
        out.append(
            f"| {r['model']} | {r['workload']} | {r['config']} | {r['concurrency'] or 'all'} | "
            f"{ci(r, 'speedup_measured')} | {_n(r['T'])} ({r['T_from']}) | {r['source_model']} ({r['source_run']}) "
            f"| {ci(r, 'R')} | {_n(r.get('R_target'))} | {ci(r, 'predicted')} | {_pct(r['error'])} |"
        )
    out.append("")
    return "\n".join(out)


def crossmodel(
    target_tables: Path,
    sources: list[Path],
    out: Path,
    all_at: int | None = None,
    target_cells: Path | None = None,
) -> list[dict[str, Any]]:
    """The cross-model tables of one run, R from the other models of each source run (the run itself
    included), written as a set into out."""
    rows: list[dict[str, Any]] = []
    for src in sources:
        rows += crossmodel_rows(Path(target_tables), Path(src), all_at, target_cells)
    if not rows:
        raise SpecsweepError(
            f"validate --cross-model: no speedup of {target_tables} has another model measured at its workload, "
            f"step and concurrency in {', '.join(map(str, sources))}"
        )
    run = Path(target_tables).resolve().parent.name
    _write_validation(Path(out), "crossmodel", run, rows, CROSSMODEL_COLUMNS, crossmodel_markdown(run, rows))
    return rows


def check_archive(cells_dir: Path, run: str) -> list[str]:
    """Every cell of the run is the write specsweep archived (tables.edited_since_archived), else one line
    naming it; the line saying the archive is missing when it is (tables.archive_unchecked)."""
    from .jsonio import read_json
    from .tables import archive_unchecked, edited_since_archived

    files = paths.cell_files(cells_dir)
    results = Path(cells_dir).parent.parent
    missing = archive_unchecked(results, run, len(files))
    if missing:
        return missing
    for path in files:
        root, key = paths.parse(path)
        why = edited_since_archived(root, key, read_json(path, "cell"))
        if why:
            raise SpecsweepError(
                f"cell {key.label}: edited since specsweep wrote it ({why}); put the archived measurement back "
                f"(specsweep restore --config CONFIG --force {path}) or rerun it"
            )
    return []
