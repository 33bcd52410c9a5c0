import os
import json
import re
import sys
from pathlib import Path
from types import SimpleNamespace

from snakemake.utils import validate

from specsweep.config import build_study, check_gpu_budget, Cell  # noqa: E402
from specsweep import paths  # noqa: E402
from specsweep.tables import MANIFEST, set_aside_damaged, table_files  # noqa: E402
from specsweep.errors import SpecsweepError  # noqa: E402
from specsweep.jsonio import atomic_write_bytes, sha256_obj  # noqa: E402

import copy  # noqa: E402

import yaml  # noqa: E402

from specsweep.safeyaml import check_config_files  # noqa: E402
from specsweep.preflight_checks import check_ladder_for_run  # noqa: E402
from specsweep.slurm import check_snakemake_run  # noqa: E402
from specsweep.jobenv import cli_command, interpreter_note  # noqa: E402
from specsweep.slots import export_slot_limit, slot_pool  # noqa: E402
from snakemake.settings.types import DeploymentMethod  # noqa: E402

# Snakemake has already read each config file itself (JSON, else YAML through YTE, which evaluates a file
# with `__use_yte__: true` as a Python template and drops the key): under Snakemake a config file is trusted
# input. Re-read each as plain data, so that a YTE key, duplicate keys, boolean names or an alias bomb stop
# here with the one line the CLI gives for the same file.
try:
    check_config_files(workflow.configfiles)
except SpecsweepError as exc:
    sys.exit(f"specsweep: error: {exc}")


def _granted_gpus() -> int | None:
    """N of --resources gpu=N (None when not given)."""
    res = workflow.global_resources.get("gpu")
    value = getattr(res, "value", res)
    return int(value) if isinstance(value, (int, float)) else None


# specsweep's own check first (schema + semantics), so a bad config gives one line naming the key; then
# Snakemake's validation against the same schema, which fills the defaults into `config` itself.
def _preflight_only() -> bool:
    """`snakemake preflight` (or preflight verdict paths): a cell needing more GPUs than granted is recorded
    as refused there, not an error of the whole workflow."""
    # the DAG settings are not there yet while the Snakefile is parsed: read the targets off the command line
    settings = workflow.dag_settings
    words = list(settings.targets) if settings else sys.argv[1:]
    return any(w == "preflight" or "preflight" in Path(w).parts[:-1] for w in words)


try:
    STUDY = build_study(copy.deepcopy(config))
    # vLLM's own check of each speculative block, before the DAG
    check_ladder_for_run(STUDY)
    if not _preflight_only():
        check_gpu_budget(STUDY, _granted_gpus())
    check_snakemake_run()  # under the SLURM executor: a partition for the GPU jobs
except SpecsweepError as exc:
    sys.exit(f"specsweep: error: {exc}")
validate(config, schema="../schemas/config.schema.yaml")

RUN = STUDY.run
CORPUS = paths.CORPUS
# Every rule runs `python3 -m specsweep.cli` from the job's own environment (never Snakemake's interpreter),
# with this checkout's package first on PYTHONPATH: see specsweep/jobenv.py.
SPECSWEEP = cli_command(str(Path(workflow.basedir) / "workflow"))
_note = interpreter_note(
    DeploymentMethod.CONDA in workflow.deployment_settings.deployment_method,
    sys.executable,
)
if _note:
    print(_note, file=sys.stderr)
# The conda env of each job under --sdm conda (envs/ beside workflow/). Cells and model steps get the stack of
# the study's device; corpus, workloads, tables and figures the light env (no vLLM, no torch).
CONDA_ENV = "../../envs/gpu.yaml" if STUDY.device == "gpu" else "../../envs/cpu.yaml"
LIGHT_ENV = "../../envs/light.yaml"


def _effective_config() -> str:
    """The validated config (defaults and --config overrides applied), content-addressed outside results/:
    a dry run writes nothing under results/, and two configs of one run name never overwrite each other.
    """
    text = yaml.safe_dump(STUDY.raw, sort_keys=True).encode()
    path = (
        Path(".snakemake") / "specsweep" / f"config-{sha256_obj(STUDY.raw)[:16]}.yaml"
    )
    if not path.is_file() or path.read_bytes() != text:
        atomic_write_bytes(path, text)
    return str(path)


EFFECTIVE_CONFIG = _effective_config()
# Models built locally under resources/models/ (by a recipe, build; or without weights, weights dummy).
BUILT_MODELS = [
    m.name for m in STUDY.models.values() if m.build or m.weights == "dummy"
]
# Hugging Face models pinned at a revision: rule fetch_model puts them in resources/models/{model}.
FETCHED_MODELS = [m.name for m in STUDY.models.values() if m.revision]


SCHEDULE = STUDY.schedule()
# The cell jobs' engine hosts hold at most as many slots (GPUs; virtual on the CPU) as granted: see
# specsweep/slots.py and docs/scheduling.md.
export_slot_limit(_granted_gpus())


def _lanes() -> int:
    """How many engines can be alive at once: the slots granted over the largest TP (CPU: the virtual slots)."""
    if STUDY.device != "gpu":
        return slot_pool("cpu").limit
    tp = max(m.tp for m in STUDY.models.values())
    return max(1, (_granted_gpus() or 1) // tp)


# Snakemake runs the highest priority first: the schedule's order (Study.engine_order: in rounds, repeat r of
# every ladder step before repeat r + 1 of any, a model's steps in a seeded order rotated per round; the cells of
# one engine adjacent); one job at a time (the profiles' --cores 1) keeps to it exactly. With N lanes (engines
# alive at once), the cells of N engines take turns (Study.lane_schedule), so that jobs started together are of
# different engines.
PRIORITY = {
    (c.model, c.workload, c.step, r): len(SCHEDULE) - i
    for i, (c, r) in enumerate(STUDY.lane_schedule(_lanes()))
}

# Inputs (corpus, workloads, models) before any cell: a cell must never wait on the next workload's file
# while the engine that would measure it idles.
FIRST = len(SCHEDULE) + 100


def cell_paths() -> list[str]:
    return [
        str(
            paths.measurement(
                paths.RESULTS, paths.Key(RUN, c.model, c.workload, c.step, r)
            )
        )
        for c, r in SCHEDULE
    ]


def preflight_paths() -> list[str]:
    return [
        str(paths.preflight(paths.RESULTS, RUN, c.model, c.workload, c.step))
        for c, r in SCHEDULE
        if r == 1
    ]


def preflight_priority(wildcards) -> int:
    """The schedule's order, but cells needing more GPUs than granted first: their verdict (refused) costs
    no engine start, so a preflight cut short by its time limit still has them."""
    granted = _granted_gpus()
    if granted is not None and STUDY.models[wildcards.model].tp > granted:
        return FIRST - 1
    return PRIORITY.get((wildcards.model, wildcards.workload, wildcards.step, 1), 0)


def cell_priority(wildcards) -> int:
    return PRIORITY.get(
        (
            wildcards.model,
            wildcards.workload,
            wildcards.step,
            int(wildcards.repeat),
        ),
        0,
    )


def workload_file(wildcards) -> str:
    """The workload file a cell reads: its name carries the hash of everything it is made from, so a changed
    workload config gives a new file (made before any cell uses it), never a stale one.
    """
    name = paths.split_workload(wildcards.workload)[0]  # code@b8 reads code's prompts
    return str(paths.workload_file(RUN, name, WORKLOAD_HASH[name]))


# The report() function; a line that starts with `report` would be parsed as the directive.
in_report = report


def table_paths() -> list[str]:
    """The tables and their MANIFEST.json (a missing manifest is a missing output: the tables are rebuilt)."""
    return paths.table_paths(RUN, [*table_files(STUDY.serves), MANIFEST])


# A table that is not what the tables' MANIFEST.json records (truncated, changed) is moved out of the set, so
# that Snakemake rebuilds the tables: its readers' error says "rebuild the tables: snakemake".
for _damaged, _aside in set_aside_damaged(
    paths.tables_dir(RUN), table_files(STUDY.serves)
):
    print(
        f"specsweep: {_damaged}: not what the tables' {MANIFEST} records (moved to {_aside}); the tables "
        "will be rebuilt",
        file=sys.stderr,
    )


def crossmodel_paths() -> list[str]:
    """The advisor across models (`specsweep validate --cross-model`), when two of the run's models measure a
    drafter at the same workload, ladder step and b: results/RUN/validation-crossmodel/, each model's speedups
    predicted with the other's R."""
    seen: dict[tuple, set[str]] = {}
    for c in STUDY.cells:
        if c.step != STUDY.baseline:
            seen.setdefault((c.base_workload, c.concurrency, c.step), set()).add(
                c.model
            )
    if not any(len(models) > 1 for models in seen.values()):
        return []
    out = paths.run_dir(RUN) / "validation-crossmodel"
    return [
        str(out / f)
        for f in ("validate-crossmodel.parquet", "validate-crossmodel.md", MANIFEST)
    ]


def k_ref_paths() -> list[str]:
    """The tables figure 8 takes K from (config predict_k_from) and R from (r_at_scale_runs), other runs'."""
    ref = STUDY.raw.get("predict_k_from")
    runs = [ref["run"]] if ref else []
    runs += STUDY.raw.get("r_at_scale_runs") or []
    return [
        path
        for run in dict.fromkeys(runs)
        if run != RUN
        for path in paths.table_paths(run, ("cells.parquet", "speedup.parquet"))
    ]


def reported_table_paths() -> list:
    """The tables, with the CSV in the Snakemake report."""
    out = []
    for path in table_paths():
        if path.endswith((".csv", "claims.md")):
            path = in_report(path, category="Tables", labels={"table": Path(path).stem})
        out.append(path)
    return out


# The figure list has one home, specsweep.figures.FIGURES (the renderer and the captions use it too).
# A run draws those its config allows (random weights draw no figure about acceptance; the manifest names the
# figures left out, with the reason).
from specsweep.view import planned_figures  # noqa: E402


def left_out_before() -> set[str]:
    """The figures the last render left out (its manifest's left_out: e.g. figure 8 of a partial run whose
    R comes from single repeats), which the report cannot hold."""
    manifest = paths.figures_dir(RUN) / paths.FIGURES_MANIFEST
    if not manifest.is_file():
        return set()
    return set(json.loads(manifest.read_text()).get("left_out") or {})


def figure_paths() -> list[str]:
    left = left_out_before()
    drawn = [f for f in planned_figures(STUDY) if f not in left]
    return paths.figure_files(RUN, drawn)


def reported_figure_paths() -> list:
    """The figures, each PNG in the Snakemake report with its caption: workflow/report/{figure}.rst, the
    figure's fixed description, which includes the RST the figures step writes with the run's numbers
    (figures/{run}/captions/{figure}.rst). Each is flagged update: Snakemake keeps the last good figures
    until the render succeeds, and puts them back when it fails (a truncated table, say), instead of
    deleting them before the job and after its failure."""
    out = []
    for path in figure_paths():
        if path.endswith(".png"):
            name = Path(path).stem
            caption = os.path.join(
                workflow.basedir, "workflow", "report", f"{name}.rst"
            )
            path = in_report(
                path, caption=caption, category="Figures", labels={"figure": name}
            )
        out.append(update(path))
    return out


def model_dir(wildcards) -> list[str]:
    """The model folder a cell needs: built (build_model) or fetched (fetch_model) under resources/models/, or
    the local folder its hf_id names."""
    if wildcards.model in BUILT_MODELS or wildcards.model in FETCHED_MODELS:
        return [paths.MODEL.format(model=wildcards.model)]
    return [os.path.expanduser(STUDY.models[wildcards.model].hf_id)]


def draft_dir(wildcards) -> list[str]:
    """The draft model folder of a cell's ladder step (speculative.model naming a `models` entry, made like
    a target's by fetch_model, build_model or dummy_model), or none."""
    draft = STUDY.draft_model(wildcards.step)
    return [] if draft is None else model_dir(SimpleNamespace(model=draft.name))


def prepare_paths() -> list[str]:
    """The workload files and model folders of every cell (`snakemake prepare`)."""
    models = sorted(
        {c.model for c in STUDY.cells}
        | {d.name for s in {c.step for c in STUDY.cells} if (d := STUDY.draft_model(s))}
    )
    return RUN_WORKLOAD_FILES + [
        d for m in models for d in model_dir(SimpleNamespace(model=m))
    ]


def model_arg(wildcards) -> str:
    return (
        f"--model-path {paths.MODEL.format(model=wildcards.model)}"
        if wildcards.model in BUILT_MODELS or wildcards.model in FETCHED_MODELS
        else ""
    )


def cell_gpus(wildcards) -> int:
    """A cell's `gpu` resource: its model's TP on a GPU node, one virtual slot on the CPU."""
    return STUDY.models[wildcards.model].tp if STUDY.device == "gpu" else 1


def cell_settings_hash(wildcards) -> str:
    """Changes when anything that defines the cell changes (a params rerun trigger)."""
    return sha256_obj(
        STUDY.cell_settings(Cell(wildcards.model, wildcards.workload, wildcards.step))
    )


WORKLOAD_HASH = {name: STUDY.workload_hash(name) for name in STUDY.workloads}
# The workload file of every cell's workload, once. Every cell takes them all as inputs, so no cell starts before
# all are made: priorities alone do not hold that (a cell whose workload file is made is run by a free core while
# another workload is still being made), and with several lanes the first cells started together must be the lane
# schedule's, of different engines, not two of one engine because their workload happened to be made first.
RUN_WORKLOAD_FILES = [
    workload_file(SimpleNamespace(workload=w))
    for w in sorted({c.base_workload for c in STUDY.cells})
]
# The cells of one engine (the config's engine_per_repeat) form one Snakemake group. A local run ignores groups;
# on a cluster, the SLURM profile's group-components puts a group's cells into one job, and its `engine`
# resource (scoped local, one per job) runs them there one after the other, so the engine starts once per job
# instead of once per cell.
ENGINE_GROUP = "engine-{model}-{step}" + (
    "-r{repeat}" if STUDY.engine_per_repeat else ""
)
# The Snakemake scheduler's own pid: a cell job writes nothing when it has died (kill -9 of Snakemake).
SCHEDULER_PID = os.getpid()


wildcard_constraints:
    run=re.escape(RUN),
    model="|".join(map(re.escape, STUDY.models)),
    workload="|".join(
        map(
            re.escape, sorted({c.workload for c in STUDY.cells} | set(STUDY.workloads))
        )
    ),
    step="|".join(map(re.escape, STUDY.ladder)),
    repeat="[1-9][0-9]*",
    whash="[0-9a-f]{12}",


def stop_engines() -> None:
    """End the engine hosts this run's jobs spawned (in Snakemake's own process: nothing here needs a job's
    stack), and those of this run no live scheduler owns (a SLURM job's Snakemake, a killed run). Hosts of
    other runs in this folder, and a folder this run never made, are left alone."""
    from specsweep import enginehost
    from specsweep.errors import SpecsweepError

    try:
        d = enginehost.existing_engine_dir()
        stopped = enginehost.stop_all(d, run_id=SCHEDULER_PID, run=RUN) if d else []
    except SpecsweepError as exc:
        print(f"specsweep: error: {exc}", file=sys.stderr)
        return
    if stopped:
        print(f"stopped {len(stopped)} engine host(s): {', '.join(stopped)}")


def missing_targets() -> list[str]:
    """The requested files (targets given by path, the outputs of the target rules, the inputs of a target
    rule of inputs only) that a run which "succeeded" did not make. Snakemake 9.27 (dag.py, update_needrun)
    can skip a job whose output is missing: when a job producing its `ancient` input (a model folder, a
    workload file) reruns although its output exists (e.g. the input set changed: another folder, another
    corpus path), every job below it is masked and then passed over because its ancient input exists. None
    with --until/--omit-from.
    """
    dag = workflow.dag
    if dag.untilrules or dag.untilfiles or dag.omitrules or dag.omitfiles:
        return []
    wanted = set(dag.targetfiles)
    for job in dag.targetjobs:
        # a rule of inputs only (all, preflight) asks for its inputs
        wanted.update(job.input if job.rule.norun else job.output)
    return sorted(f for f in wanted if not os.path.exists(f))


# The engine hosts this run spawned end with the workflow (they also end on their own when idle). A run that
# ends "successful" without what was asked fails instead of passing silently.
onsuccess:
    stop_engines()
    if missing := missing_targets():
        print(
            f"specsweep: error: Snakemake finished without making {len(missing)} requested file(s) "
            f"(first: {missing[0]}): a model folder or workload file was remade in this run and Snakemake "
            "then skipped the jobs that read it; run the same command again (or `snakemake prepare` first)",
            file=sys.stderr,
        )
        sys.exit(1)


onerror:
    stop_engines()


# The advice flow's inputs (rules advice_replay and advise, workflow/rules/report.smk).
import shlex  # noqa: E402

from specsweep.architectures import tokenizer_path  # noqa: E402

ADVICE = STUDY.advice_replays() if STUDY.raw.get("advice") else {}
ADVICE_DIR = paths.run_dir(RUN) / "advice"
ADVICE_REPLAYS = [str(ADVICE_DIR / "replay" / f"{name}.json") for name in ADVICE]


def advice_traffic(wildcards) -> list[str]:
    return [STUDY.raw["advice"]["traffic"]["path"]] if ADVICE else []


def advice_model_dir(wildcards) -> list[str]:
    return model_dir(SimpleNamespace(model=STUDY.advice_model))
