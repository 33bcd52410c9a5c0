"""The study configuration: schema validation (defaults filled), semantic checks, matrix expansion.

Every error is a SpecsweepError whose one line names the offending key.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from .architectures import load_architecture, tp_problems
from .errors import SpecsweepError
from .fetch import hub_url, is_hub_id

SCHEMA_PATH = Path(__file__).resolve().parent.parent / "schemas" / "config.schema.yaml"
BASE_KINDS = ("sonnet", "chat", "code")
SPEC_METHODS = ("ngram", "suffix")


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


@dataclass(frozen=True)
class LadderStep:
    name: str
    gpu_memory_utilization: float
    speculative: dict[str, Any] | None = None
    compilation: dict[str, Any] | None = None
    engine: dict[str, Any] | None = None  # engine keys this step overrides (e.g. async_scheduling: false)
    env: dict[str, str] | None = None  # environment this step adds (e.g. VLLM_USE_V2_MODEL_RUNNER: "0")

    @property
    def method(self) -> str:
        return self.speculative["method"] if self.speculative else "none"


@dataclass(frozen=True, order=True)
class Cell:
    model: str
    workload: str
    config: str

    def path(self, run: str, root: Path | str = "results") -> Path:
        return Path(root) / run / "cells" / self.model / self.workload / f"{self.config}.json"

    @property
    def key(self) -> str:
        return f"{self.model}/{self.workload}/{self.config}"


@dataclass
class Study:
    """A validated configuration with its matrix expanded."""

    raw: dict[str, Any]
    models: dict[str, ModelSpec] = field(default_factory=dict)
    workloads: dict[str, WorkloadSpec] = field(default_factory=dict)
    ladder: dict[str, LadderStep] = field(default_factory=dict)
    cells: list[Cell] = field(default_factory=list)
    cell_groups: dict[Cell, str] = field(default_factory=dict)

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
    def baseline(self) -> str:
        """The ladder step every other step is compared with (config key `baseline`)."""
        return self.raw["baseline"]

    def schedule(self) -> list[tuple[Cell, int]]:
        """Every (cell, repeat) in the order they should be measured: grouped by engine (model, ladder step,
        repeat) so one engine serves adjacent cells, and interleaved: repeat r visits the ladder steps rotated
        by r-1, so no step is measured all first (run order is not confounded with the config)."""
        steps = list(self.ladder)
        by_engine: dict[tuple[str, str], list[Cell]] = {}
        for cell in self.cells:
            by_engine.setdefault((cell.model, cell.config), []).append(cell)
        order: list[tuple[Cell, int]] = []
        for r in range(1, self.repeats + 1):
            k = (r - 1) % len(steps)
            rotated = steps[k:] + steps[:k]
            for model in self.models:
                for step in rotated:
                    for cell in by_engine.get((model, step), []):
                        order.append((cell, r))
        return order

    def cell(self, model: str, workload: str, config: str) -> Cell:
        c = Cell(model, workload, config)
        if c not in self.cell_groups:
            raise SpecsweepError(f"cell {c.key}: not part of run '{self.run}' (see its groups)")
        return c

    def cell_settings(self, cell: Cell) -> dict[str, Any]:
        """Everything that defines how a cell runs: hashed into the cell's config_sha256."""
        model = self.models[cell.model]
        step = self.ladder[cell.config]
        engine = dict(self.engine)
        if model.dtype:
            engine["dtype"] = model.dtype
        engine |= step.engine or {}
        return {
            "model": {k: v for k, v in model.__dict__.items()},
            "workload": self.raw["workloads"][cell.workload],
            "ladder": {
                "name": step.name,
                "gpu_memory_utilization": step.gpu_memory_utilization,
                "speculative": step.speculative,
                "compilation": step.compilation,
                "engine": step.engine,
                "env": step.env,
            },
            "engine": engine,
            "sampling": self.sampling,
            "warmup_prompts": self.raw["warmup_prompts"],
            "env": dict(self.raw["env"]) | dict(step.env or {}),
            "seed": self.raw["seed"],
        }


# --------------------------------------------------------------------------------------------- loading

def _validator_with_defaults() -> type:
    base = jsonschema.Draft202012Validator
    validate_props = base.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, schema):  # type: ignore[no-untyped-def]
        if isinstance(instance, dict):
            for prop, sub in properties.items():
                if isinstance(sub, dict) and "default" in sub and prop not in instance:
                    instance[prop] = copy.deepcopy(sub["default"])
        yield from validate_props(validator, properties, instance, schema)

    return jsonschema.validators.extend(base, {"properties": set_defaults})


def _error_path(err: jsonschema.ValidationError) -> str:
    parts: list[str] = []
    for p in err.absolute_path:
        parts.append(f"[{p}]" if isinstance(p, int) else (f".{p}" if parts else str(p)))
    return "".join(parts) or "(top level)"


def load_schema() -> dict[str, Any]:
    with open(SCHEMA_PATH, encoding="utf-8") as fh:
        return yaml.safe_load(fh)


def fill_and_validate_schema(cfg: dict[str, Any], source: str = "config") -> dict[str, Any]:
    """Validate cfg against the schema, filling defaults in place; one line per failure."""
    validator = _validator_with_defaults()(load_schema())
    errors = sorted(validator.iter_errors(cfg), key=lambda e: (len(list(e.absolute_path)), str(e.message)))
    if errors:
        err = errors[0]
        raise SpecsweepError(f"{source}: {_error_path(err)}: {err.message}")
    return cfg


def load_yaml(path: Path | str) -> dict[str, Any]:
    path = Path(path)
    try:
        with open(path, encoding="utf-8") as fh:
            data = yaml.safe_load(fh)
    except FileNotFoundError:
        raise SpecsweepError(f"config {path}: file not found") from None
    except yaml.YAMLError as exc:
        line = getattr(getattr(exc, "problem_mark", None), "line", None)
        where = f" at line {line + 1}" if line is not None else ""
        raise SpecsweepError(f"config {path}: not valid YAML{where}") from None
    if not isinstance(data, dict):
        raise SpecsweepError(f"config {path}: the top level must be a mapping")
    return data


def load_study(path: Path | str, overrides: dict[str, Any] | None = None) -> Study:
    cfg = load_yaml(path)
    if overrides:
        cfg.update(overrides)
    return build_study(cfg, source=f"config {path}")


def build_study(cfg: dict[str, Any], source: str = "config") -> Study:
    """Validate (schema + semantics) and expand the matrix. cfg gets its defaults filled in place."""
    fill_and_validate_schema(cfg, source)
    study = Study(raw=cfg)
    _check_models(study, source)
    _check_workloads(study, source)
    _check_ladder(study, source)
    _expand(study, source)
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
                raise SpecsweepError(f"{source}: {key}.tp: {tp} cannot shard architecture "
                                     f"'{m['architecture']}': {'; '.join(problems)}")
        study.models[m["name"]] = ModelSpec(**m)


def _positive(source: str, key: str, value: Any) -> None:
    if value is not None and value < 1:
        raise SpecsweepError(f"{source}: {key}: must be >= 1, got {value}")


def _check_workloads(study: Study, source: str) -> None:
    raw = study.raw["workloads"]
    for name, w in raw.items():
        key = f"workloads.{name}"
        for count in ("num_prompts", "max_tokens", "lines", "functions", "comment_lines"):
            _positive(source, f"{key}.{count}", w.get(count))
        if not 0 < w["excerpt_share"] < 1:
            raise SpecsweepError(f"{source}: {key}.excerpt_share: must be in (0, 1), got {w['excerpt_share']}")
        parts: tuple[tuple[str, float], ...] = ()
        if w["kind"] == "mix":
            if not w.get("parts"):
                raise SpecsweepError(f"{source}: {key}.parts: a mix needs parts (workload: share)")
            for part, share in w["parts"].items():
                if part not in raw:
                    raise SpecsweepError(f"{source}: {key}.parts.{part}: unknown workload '{part}'")
                if raw[part]["kind"] == "mix":
                    raise SpecsweepError(f"{source}: {key}.parts.{part}: a mix cannot contain another mix")
                if share < 0:
                    raise SpecsweepError(f"{source}: {key}.parts.{part}: share must be >= 0, got {share}")
            total = sum(w["parts"].values())
            if not math.isclose(total, 1.0, abs_tol=1e-3):
                raise SpecsweepError(f"{source}: {key}.parts: shares sum to {total:g}, not 1")
            parts = tuple(sorted(w["parts"].items()))
        elif w.get("parts"):
            raise SpecsweepError(f"{source}: {key}.parts: only a workload of kind 'mix' has parts")
        fields = {k: v for k, v in w.items() if k != "parts"}
        study.workloads[name] = WorkloadSpec(name=name, parts=parts, **fields)


def _check_ladder(study: Study, source: str) -> None:
    for name, step in study.raw["ladder"].items():
        key = f"ladder.{name}"
        gmu = step["gpu_memory_utilization"]
        if not 0 < gmu <= 1:
            raise SpecsweepError(f"{source}: {key}.gpu_memory_utilization: must be in (0, 1], got {gmu}")
        spec = step.get("speculative")
        if spec:
            if spec["method"] not in SPEC_METHODS:
                raise SpecsweepError(
                    f"{source}: {key}.speculative.method: unknown method '{spec['method']}' "
                    f"(built-in drafters: {', '.join(SPEC_METHODS)})"
                )
            if spec["num_speculative_tokens"] < 1:
                raise SpecsweepError(
                    f"{source}: {key}.speculative.num_speculative_tokens: must be >= 1, "
                    f"got {spec['num_speculative_tokens']}"
                )
            lo, hi = spec.get("prompt_lookup_min"), spec.get("prompt_lookup_max")
            for k, v in (("prompt_lookup_min", lo), ("prompt_lookup_max", hi)):
                _positive(source, f"{key}.speculative.{k}", v)
            if lo is not None and hi is not None and lo > hi:
                raise SpecsweepError(
                    f"{source}: {key}.speculative: prompt_lookup_min ({lo}) > prompt_lookup_max ({hi})"
                )
            if spec["method"] != "ngram" and (lo is not None or hi is not None):
                raise SpecsweepError(f"{source}: {key}.speculative: prompt_lookup_* apply to method ngram only")
        study.ladder[name] = LadderStep(
            name=name, gpu_memory_utilization=gmu, speculative=spec or None, compilation=step.get("compilation"),
            engine=step.get("engine") or None, env=step.get("env") or None,
        )
    if study.raw["baseline"] not in study.ladder:
        raise SpecsweepError(
            f"{source}: baseline: unknown ladder step '{study.raw['baseline']}' (known: {', '.join(study.ladder)})"
        )
    if study.ladder[study.raw["baseline"]].speculative:
        raise SpecsweepError(f"{source}: baseline: '{study.raw['baseline']}' is speculative; the baseline must not be")


def _expand(study: Study, source: str) -> None:
    for gname, g in study.raw["groups"].items():
        for axis, known in (("models", study.models), ("workloads", study.workloads), ("configs", study.ladder)):
            seen: set[str] = set()
            for item in g[axis]:
                if item not in known:
                    raise SpecsweepError(
                        f"{source}: groups.{gname}.{axis}: unknown {axis[:-1]} '{item}' (known: {', '.join(known)})"
                    )
                if item in seen:
                    raise SpecsweepError(f"{source}: groups.{gname}.{axis}: '{item}' listed twice")
                seen.add(item)
        for m in g["models"]:
            for w in g["workloads"]:
                for c in g["configs"]:
                    cell = Cell(m, w, c)
                    if cell in study.cell_groups:
                        raise SpecsweepError(
                            f"{source}: groups.{gname}: cell {cell.key} is also in group {study.cell_groups[cell]}"
                        )
                    study.cell_groups[cell] = gname
                    study.cells.append(cell)


def check_gpu_budget(study: Study, gpus: int | None) -> None:
    """A model whose tensor-parallel size exceeds the GPUs granted (--resources gpu=N) can never run."""
    if gpus is None or study.device != "gpu":
        return
    for m in study.models.values():
        if m.tp > gpus:
            raise SpecsweepError(
                f"config: models ({m.name}).tp: {m.tp} exceeds the {gpus} GPU(s) given by --resources gpu={gpus}"
            )
