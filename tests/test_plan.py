"""specsweep plan on committed runs: the between-start noise is the one the verdict rule pooled into the run's
speedup intervals, the power is the rule's own simulation (specsweep.verdictsim), the planned n is where that
power first reaches the target, more noise needs more starts, and at the design's noise levels the plan agrees
with the power table of docs/design.md."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter

import pyarrow.parquet as pq
import pytest

from conftest import ROOT
from specsweep import plan, stats, verdictsim

RESULTS = ROOT / "results"
#: committed runs whose repeats are engine starts: a GPU-bound shape (8B, two boots), the 32B shape, and the real
#: SmolLM2 measured on one engine start a cell
RUNS = ("h200-concurrency-boot2", "h200-concurrency-32b", "h200-smollm2")
SCENARIOS = [s.name for s in verdictsim.DECISION]


@pytest.mark.parametrize("run", RUNS)
def test_noise_is_the_models_pooled_spread(run):
    """Each model's sd and df are its between-start spread pooled over its cells (stats.model_spreads), the
    tables' speedup intervals each cell's own (stats.speedup_ci on the two cells' starts), and n used is its
    cells' most common engine starts."""
    tables = RESULTS / run / "tables"
    noise = {m.model: m for m in plan.measured(tables)}
    rows = [
        r | {"_start": r["engine_key"]}
        for r in pq.read_table(tables / "measurements.parquet").to_pylist()
        if r["status"] == "ok" and r["output_tok_s"]
    ]
    series = stats.cell_series(rows, "output_tok_s")
    for model, pooled in stats.model_spreads(series).items():
        assert (noise[model].sd, noise[model].df) == (pooled or (None, 0))
    checked = 0
    for r in pq.read_table(tables / "speedup.parquet").to_pylist():
        if r["speedup_lo"] is None:
            continue
        key = (r["model"], r["workload"])
        got = stats.speedup_ci(
            series[(*key, r["config"], r["concurrency"])], series[(*key, r["baseline"], r["concurrency"])]
        )
        assert (r["speedup"], r["speedup_lo"], r["speedup_hi"]) == got, (r["workload"], r["config"])
        checked += 1
    starts = Counter()
    for c in pq.read_table(tables / "cells.parquet").to_pylist():
        if c["n_starts"]:
            starts[(c["model"], c["n_starts"])] += 1
    for m in noise.values():
        mine = {n: k for (model, n), k in starts.items() if model == m.model}
        assert m.n_used == max(mine, key=lambda n: (mine[n], n))
        assert m.cells == sum(k for n, k in mine.items() if n >= 2)
    # a run of one engine start a cell has no spread: no interval in its tables, nothing to plan from
    assert checked > 0 or all(m.sd is None for m in noise.values())


def test_planned_n_is_where_the_rules_power_first_reaches_the_target():
    """In every decision scenario the planned n reaches the target and n - 1 does not (or n is 2); the power at
    the run's own n is below the target exactly when the plan asks for more starts than the run used."""
    for run in RUNS[:2]:
        for p in plan.plan(RESULTS / run / "tables"):
            m = p.noise
            for s in SCENARIOS:
                n = p.n_needed[s]
                assert n is not None and plan.power_at(m.sd, n, m.cells, s) >= plan.TARGET
                assert n == 2 or plan.power_at(m.sd, n - 1, m.cells, s) < plan.TARGET
                assert (p.power_used[s] < plan.TARGET) == (n > m.n_used), (run, s, p)
            assert p.n == max(p.n_needed.values())


def test_more_noise_needs_more_starts():
    """Smallest n never falls as the noise grows (24 cells, as the 8B run on its second boot); the committed 8B
    shape, seven per cent between starts, needs more starts than the 32B shape's two."""
    for s in SCENARIOS:
        ns = [plan.smallest_n(sd, 24, s) for sd in (0.01, 0.03, 0.06, 0.12)]
        assert ns == sorted(ns) and ns[0] < ns[-1], (s, ns)
    (eight,), (big,) = (plan.plan(RESULTS / run / "tables") for run in RUNS[:2])
    assert eight.noise.sd > big.noise.sd and eight.n > big.n


def _design_rows() -> dict[str, dict[tuple[float, int], int]]:
    """docs/design.md's power (in %) of the chosen rule, per scenario and (noise, n), read from its tables."""
    text = (ROOT / "docs" / "design.md").read_text()
    out: dict[str, dict[tuple[float, int], int]] = {}
    for s in SCENARIOS:
        section = text.split(f"*{s}* — power")[1].split("\n\n")[1]
        head, _, *rows = section.splitlines()
        cols = [tuple(map(float, re.match(r"(\d+) % n=(\d+)", c).groups())) for c in head.split(" | ")[1:]]
        (row,) = [r for r in rows if r.startswith(f"| {verdictsim.CHOSEN} |")]
        powers = [int(c.strip("* ").split(" / ")[0]) for c in row.strip("| ").split(" | ")[1:]]
        out[s] = {(sd / 100, int(n)): p for (sd, n), p in zip(cols, powers, strict=True)}
    return out


def test_agrees_with_the_design_power_table():
    """At the design table's noise levels and n: the plan's power on the table's study (4 workloads x 4 steps)
    is the table's to the per cent, on 16 cells of one model (the plan's own shape) within Monte Carlo error
    (3 points), and the smallest n it plans is where the table crosses 80 %, where the table's powers lie
    clear of it."""
    table = _design_rows()
    for s, powers in table.items():
        for (sd, n), want in powers.items():
            same = plan.power_at(sd, n, 16, s, shape=(verdictsim.WORKLOADS, 1 + verdictsim.STEPS))
            assert round(100 * same) == want, (s, sd, n)
            assert abs(100 * plan.power_at(sd, n, 16, s) - want) <= 3, (s, sd, n)
        for sd in sorted({k[0] for k in powers}):
            row = {n: p for (x, n), p in powers.items() if x == sd}
            if any(abs(p - 80) <= 3 for p in row.values()):
                continue  # at the target: Monte Carlo error decides the n
            first = min((n for n, p in row.items() if p >= 80), default=None)
            got = plan.smallest_n(sd, 16, s)
            if first is None:
                assert got > max(row), (s, sd, got)
            elif first > min(row):
                assert got == first, (s, sd, got)
            else:
                assert got <= first, (s, sd, got)


def _cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "specsweep.cli", "plan", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT / "workflow"), "PATH": "/usr/bin:/bin"},
    )


def test_plan_command_on_committed_runs():
    """The command prints the plan of each model (JSON: the module's numbers); a run of passes on one engine and a
    run without a spread say why there is no plan; an effect inside the band is refused in one line."""
    boot2 = RESULTS / "h200-concurrency-boot2" / "tables"
    proc = _cli("--tables", str(boot2), "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    (p,) = plan.plan(boot2)
    (m,) = doc["models"]
    assert (m["model"], m["n"], m["n_used"], m["sd"]) == (p.noise.model, p.n, p.noise.n_used, p.noise.sd)
    text = _cli("--tables", str(boot2)).stdout
    assert f"| {p.noise.model} | {p.noise.cells} | {100 * p.noise.sd:.1f} % ({p.noise.df}) | 3 |" in text
    assert text.rstrip().endswith(f"| {p.n} |")
    assert "technical replicates decide no verdict" in _cli("--tables", str(RESULTS / "h200-shapes" / "tables")).stdout
    assert "no between-start spread measured" in _cli("--tables", str(RESULTS / "h200-smollm2" / "tables")).stdout
    bad = _cli("--tables", str(boot2), "--effect", "0.03")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "within the band" in bad.stderr


# ------------------------------------------------------------------------------------------ how long a pass at b


def _random_weight_models() -> set[str]:
    import yaml

    out = set()
    for cfg in RESULTS.glob("*/config.yaml"):
        out |= {m["name"] for m in yaml.safe_load(cfg.read_text())["models"] if m.get("weights") == "dummy"}
    return out


def test_what_design_md_says_of_pass_length_holds_on_the_committed_runs():
    """docs/design.md's reasons for min_pass_seconds, on every committed run, one card's cells apart from
    another's: on the random-weight shapes a drafter spreads more than vanilla on the same workload and card; on
    the H200's short passes its spread in seconds grows more slowly than its pass (slope < 1) and the 8B's
    code-greedy drafters wobble by a fixed amount (slope near 0), under 1 % of a pass of GPU_MIN_PASS_SECONDS
    at its median; on the H100's passes of up to 31 s, on each of its three prompt pools, the same drafters
    spread 2-5 % (median over cells) at every length (slope near 1: past a few seconds a longer pass divides
    nothing more); the host-bound SmolLM2's vanilla spreads
    several per cent at every workload; and a committed cell at b has now run a pass that long."""
    from specsweep.config import GPU_MIN_PASS_SECONDS

    groups = {(g.model, g.workload, g.arm, g.device): g for g in plan.pass_spread(RESULTS)}
    dummy = _random_weight_models()
    drafters = [g for g in groups.values() if g.model in dummy and g.arm == plan.DRAFTER and g.slope is not None]
    assert len(drafters) >= 5
    for g in drafters:
        base = groups[(g.model, g.workload, plan.BASELINE, g.device)]
        assert g.sd_log[0] > 2 * base.sd_log[0], (g, base)
        if g.device == "NVIDIA H200":
            assert g.slope < 1, g
    greedy = groups[("llama-3.1-8b-dummy", "code-greedy", plan.DRAFTER, "NVIDIA H200")]
    assert abs(greedy.slope) < 0.3 and greedy.sd_s[0] / GPU_MIN_PASS_SECONDS < 0.01
    for pool in ("code-greedy", "code-greedy-b16", "code-greedy-b1"):
        steady = groups[("llama-3.1-8b-dummy", pool, plan.DRAFTER, "NVIDIA H100 80GB HBM3")]
        assert 0.7 < steady.slope < 1.3 and 0.015 < steady.sd_log[0] < 0.06, steady
    assert groups[("llama-3.1-8b-dummy", "code-greedy", plan.DRAFTER, "NVIDIA H100 80GB HBM3")].pass_s[1] > 25
    host = [g for (m, _, arm, _), g in groups.items() if m == "smollm2-135m-instruct" and arm == plan.BASELINE]
    assert host and all(g.sd_log[0] > 0.05 for g in host)
    longest = max(
        r["gen_wall_s"]
        for f in RESULTS.glob("*/tables/measurements.parquet")
        for r in pq.read_table(f).to_pylist()
        if r["concurrency"] and r["status"] == "ok"
    )
    assert longest >= GPU_MIN_PASS_SECONDS


def test_gpu_profile_sets_the_pass_minimum_for_cells_at_b_only():
    """config/gpu-reference.yaml sets min_pass_seconds = GPU_MIN_PASS_SECONDS on every workload; its own cells
    (all prompts at once) and workload files are what they are without it, and a workload given a concurrency
    carries it into its cells at b."""
    import copy

    import yaml

    from specsweep.config import GPU_MIN_PASS_SECONDS, build_study

    raw = yaml.safe_load((ROOT / "config" / "gpu-reference.yaml").read_text())
    assert {w.get("min_pass_seconds") for w in raw["workloads"].values()} == {GPU_MIN_PASS_SECONDS}
    bare = copy.deepcopy(raw)
    for w in bare["workloads"].values():
        del w["min_pass_seconds"]
    study, without = build_study(copy.deepcopy(raw)), build_study(bare)
    assert study.cells == without.cells
    for c in study.cells:
        assert study.cell_settings(c) == without.cell_settings(c)
        assert study.workload_hash(c.base_workload) == without.workload_hash(c.base_workload)
    raw["workloads"]["code"]["concurrency"] = [8]
    at_b = build_study(raw)
    (cell, *_) = [c for c in at_b.cells if c.concurrency == 8]
    assert at_b.cell_settings(cell)["workload"]["min_pass_seconds"] == GPU_MIN_PASS_SECONDS


def test_plan_says_it_could_not_check_tables_without_their_manifest(tmp_path):
    """plan reads a run's tables through the same check as figures: a set whose MANIFEST.json is gone is planned
    from with the same 'could not check' line (a changed file under a manifest is refused, read_parquet)."""
    import shutil

    tables = tmp_path / "tables"
    shutil.copytree(RESULTS / "h200-concurrency-boot2" / "tables", tables)
    (tables / "MANIFEST.json").unlink()
    proc = _cli("--tables", str(tables))
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("specsweep: ")]
    assert lines == [
        f"specsweep: could not check: tables {tables}: no MANIFEST.json, so whether its files are the ones specsweep "
        "wrote could not be checked (rebuild them: snakemake, or specsweep tables)"
    ]


@pytest.mark.parametrize("manifest", [True, False], ids=["manifest-of-the-run", "no-manifest"])
def test_plan_refuses_another_runs_measurements(tmp_path, manifest):
    """A tables set holding another run's measurements.parquet (copied in, its manifest gone or rewritten for
    it) is one line naming the file and both runs, before any plan: not a plan of the wrong run's noise."""
    import hashlib
    import shutil

    tables = tmp_path / "tables"
    shutil.copytree(RESULTS / "h200-concurrency" / "tables", tables)
    shutil.copy(RESULTS / "h200-concurrency-boot2" / "tables" / "measurements.parquet", tables)
    mpath = tables / "MANIFEST.json"
    if manifest:  # the manifest made to agree with the copied file: only the runs the tables name disagree
        doc = json.loads(mpath.read_text())
        doc["files"]["measurements.parquet"] = hashlib.sha256(
            (tables / "measurements.parquet").read_bytes()
        ).hexdigest()
        mpath.write_text(json.dumps(doc))
    else:
        mpath.unlink()
    proc = _cli("--tables", str(tables))
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr
    assert proc.stderr.splitlines() == [
        f"specsweep: error: tables {tables / 'measurements.parquet'}: a table of run 'h200-concurrency-boot2' in the "
        "tables of run 'h200-concurrency' (copied in from another run?); rebuild the tables (snakemake, or specsweep "
        "tables)"
    ]
