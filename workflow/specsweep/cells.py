"""Cell JSON: the schema, loading with one-line errors, and the consistency of a cell's numbers."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from datetime import datetime
from functools import lru_cache
from itertools import pairwise
from pathlib import Path
from typing import Any, NoReturn

import jsonschema
import yaml

from .errors import SpecsweepError
from .jsonio import read_json, sha256_obj
from .paths import split_workload

SCHEMA_PATH = Path(__file__).resolve().parent.parent / "schemas" / "cell.schema.yaml"
#: Raises SpecsweepError naming the cell and what is wrong with it.
Fail = Callable[[str], NoReturn]
UNITS = {"time": "s", "throughput": "tok/s", "memory": "MiB", "utilisation": "%", "step_time": "ms"}


@lru_cache(maxsize=1)
def _validator() -> jsonschema.Draft202012Validator:
    from .config import STRICT_TYPES

    with open(SCHEMA_PATH, encoding="utf-8") as fh:
        schema = yaml.safe_load(fh)
    cls = jsonschema.validators.extend(jsonschema.Draft202012Validator, type_checker=STRICT_TYPES)
    return cls(schema)


def validate(doc: Any, where: str) -> None:
    """The cell's shape (schema), then its consistency (check_consistency); one line `cell <where>: ...`."""
    try:
        bad = _nonfinite(doc)
    except RecursionError:
        raise SpecsweepError(f"cell {where}: nested too deeply to be a cell") from None
    if bad:
        raise SpecsweepError(f"cell {where}: {bad}, not a finite number")
    errors = sorted(_validator().iter_errors(doc), key=lambda e: len(list(e.absolute_path)))
    if errors:
        err = _innermost(errors[0])
        path = ".".join(str(p) for p in err.absolute_path) or "(top level)"
        message = err.message
        if err.validator == "type":  # never echo a whole (maybe huge) value
            shown = repr(err.instance)
            shown = shown if len(shown) <= 60 else shown[:57] + "..."
            types = err.validator_value if isinstance(err.validator_value, list) else [err.validator_value]
            message = f"{shown} is not of type {', '.join(repr(t) for t in types)}"
        raise SpecsweepError(f"cell {where}: {path}: {message}")
    check_consistency(doc, where)


def _innermost(err: jsonschema.ValidationError) -> jsonschema.ValidationError:
    """For `null or an object of this shape` (oneOf), the error inside the object, not a repr of all of it."""
    while err.validator in ("oneOf", "anyOf") and err.context:
        inner = [e for e in err.context if not (e.validator == "type" and e.validator_value == "null")]
        if not inner:
            break
        err = max(inner, key=lambda e: len(list(e.absolute_path)))
    return err


def load(path: Path, expect: tuple[str, str, str, str] | None = None, repeat: int | None = None) -> dict[str, Any]:
    """Load and validate a cell; with expect=(run, model, workload, ladder step) it must also be that cell (the
    step is the cell document's `config` key, its name on disk; the concurrency b of a workload `code@b8` is
    checked against the cell's settings by check_consistency), and with `repeat` that repeat of it.

    Strict JSON (no duplicate key, NaN or Infinity), the schema, then check_consistency."""
    doc = read_json(Path(path), "cell")
    validate(doc, str(path))
    if expect is not None:
        got = (doc["run"], doc["model"], doc["workload"], doc["config"])
        if got != expect:
            raise SpecsweepError(
                f"cell {path}: holds {'/'.join(got[1:])} of run {got[0]}, but its path says "
                f"{'/'.join(expect[1:])} of run {expect[0]}"
            )
    if repeat is not None and doc["repeat"] != repeat:
        raise SpecsweepError(f"cell {path}: holds repeat {doc['repeat']}, but its path says repeat {repeat}")
    return doc


# ------------------------------------------------------------------------------------------ consistency

#: Relative tolerance of a derived quantity against the totals it is derived from (the runner computes it
#: from the same numbers, and JSON keeps a float exactly, so only a hand edit or a bug moves it).
REL_TOL = 1e-6


def _close(a: float, b: float, abs_tol: float = 1e-9) -> bool:
    return math.isclose(a, b, rel_tol=REL_TOL, abs_tol=abs_tol)


def _nonfinite(value: Any, path: str = "") -> str | None:
    """The path of the first NaN or infinite number in value, if any."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"{path or '(top level)'} is {value}"
    items: Iterable[tuple[Any, Any]]
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        return None
    for key, item in items:
        found = _nonfinite(item, f"{path}.{key}" if path else str(key))
        if found:
            return found
    return None


def _fmt(x: Any) -> str:
    return f"{x:.6g}" if isinstance(x, float) else str(x)


def check_consistency(doc: dict[str, Any], where: str) -> None:
    """The numbers of a cell agree with each other (it must already match the schema).

    Finite numbers everywhere; output_tok_s = output_tokens / gen_wall_s and total_tok_s likewise;
    tokens_per_step = output_tokens / engine_steps and step_time_ms = 1000 gen_wall_s / engine_steps;
    prompts = settings' num_prompts = output hashes = finish reasons; the cell's names match its settings and
    config_sha256 is their hash; spec present exactly when the ladder step is speculative, accepted <=
    draft tokens <= drafts x num_speculative_tokens, sum(accepted_per_pos) = accepted, K = 1 + accepted/drafts,
    alpha = accepted/draft_tokens; vanilla match, GPU and time stamps in order. One line `cell <where>: ...`."""

    def fail(what: str) -> NoReturn:
        raise SpecsweepError(f"cell {where}: {what}")

    try:
        bad = _nonfinite(doc)
    except RecursionError:
        bad = None
        fail("nested too deeply to be a cell")
    if bad:
        fail(f"{bad}, not a finite number")
    try:
        _check(doc, fail)
    except (KeyError, TypeError, AttributeError, ZeroDivisionError) as exc:
        fail(f"not a valid cell (check it against the schema first): {type(exc).__name__} {exc}")


def _check(doc: dict[str, Any], fail: Fail) -> None:
    timing, tok, steps, settings = doc["timing"], doc["tokens"], doc["steps"], doc["settings"]
    wall, out, inp, n_steps = timing["gen_wall_s"], tok["output_tokens"], tok["input_tokens"], steps["engine_steps"]

    def agree(name: str, value: Any, expected: float, formula: str) -> None:
        if value is None or not _close(value, expected):
            fail(f"{name} is {_fmt(value)}, but {formula} = {_fmt(expected)}")

    agree("tokens.output_tok_s", tok["output_tok_s"], out / wall, "output_tokens / timing.gen_wall_s")
    agree(
        "tokens.total_tok_s",
        tok["total_tok_s"],
        (inp + out) / wall,
        "(input_tokens + output_tokens) / timing.gen_wall_s",
    )
    agree("steps.tokens_per_step", steps["tokens_per_step"], out / n_steps, "output_tokens / steps.engine_steps")
    agree(
        "steps.step_time_ms",
        steps["step_time_ms"],
        1000.0 * wall / n_steps,
        "1000 x timing.gen_wall_s / steps.engine_steps",
    )

    prompts = doc["dataset"]["prompts"]
    wanted = settings["workload"]["num_prompts"]
    b, per_slot = settings["workload"].get("concurrency"), settings["workload"].get("prompts_per_slot")
    pool = doc["dataset"].get("pool")
    if pool is not None:  # a pass at b: whole cycles over the pool of num_prompts prompts (engine.pool_record)
        if pool["prompts"] != wanted:
            fail(f"dataset.pool.prompts is {pool['prompts']}, but settings.workload.num_prompts is {wanted}")
        least = max(b or 1, (per_slot or 0) * (b or 1))
        if not prompts == pool["requests"] == pool["prompts"] * pool["cycles"] or prompts < least:
            fail(
                f"dataset.prompts is {prompts}, not whole cycles of the pool of {pool['prompts']} prompts "
                f"covering at least {least} requests (dataset.pool: {pool['cycles']} cycles, "
                f"{pool['requests']} requests)"
            )
        wanted = prompts
    elif b is not None and per_slot is not None:  # cells before the pool record: the first k * b prompts
        wanted = min(wanted, per_slot * b)
    if prompts != wanted:
        fail(f"dataset.prompts is {prompts}, but settings.workload.num_prompts is {wanted} (a stale workload file?)")
    if doc["dataset"]["seed"] != settings["seed"]:
        fail(
            f"dataset.seed is {doc['dataset']['seed']}, but settings.seed is {settings['seed']} "
            "(a stale workload file?)"
        )
    warm = doc["dataset"].get("warmup_prompts")
    if warm is not None and warm != settings["warmup_prompts"]:
        fail(f"dataset.warmup_prompts is {warm}, but settings.warmup_prompts is {settings['warmup_prompts']}")
    hashes = len(doc["outputs"]["token_sha256"])
    if hashes != prompts:
        fail(f"outputs.token_sha256 has {hashes} entries for {prompts} prompts")
    finished = sum(doc["outputs"]["finish_reasons"].values())
    if finished != prompts:
        fail(f"outputs.finish_reasons count {finished} requests for {prompts} prompts")
    if inp < prompts:
        fail(f"tokens.input_tokens is {inp} for {prompts} prompts (each prompt has at least one token)")
    max_tokens = settings["workload"].get("max_tokens")
    if settings["workload"]["kind"] != "mix" and max_tokens is not None and out > prompts * max_tokens:
        fail(f"tokens.output_tokens is {out}, more than {prompts} prompts x max_tokens {max_tokens}")

    if settings["model"]["name"] != doc["model"]:
        fail(f"settings.model.name is '{settings['model']['name']}', but the cell is of model '{doc['model']}'")
    named_b = split_workload(doc["workload"])[1]
    if named_b != b:
        fail(
            f"workload '{doc['workload']}' names concurrency {named_b or 'none (all prompts at once)'}, but "
            f"settings.workload.concurrency is {b}"
        )
    if settings["ladder"]["name"] != doc["config"]:
        fail(f"settings.ladder.name is '{settings['ladder']['name']}', but the cell is of config '{doc['config']}'")
    for key in ("tp", "params_b"):
        if doc["model_info"][key] != settings["model"][key]:
            fail(f"model_info.{key} is {doc['model_info'][key]}, but settings.model.{key} is {settings['model'][key]}")
    want_draft, draft = settings.get("draft_model"), doc["model_info"].get("draft")
    if want_draft is None and draft is not None:
        fail(f"model_info.draft names drafter '{draft['name']}', but settings has no draft_model")
    if want_draft is not None:
        if draft is None:
            fail(f"settings.draft_model is '{want_draft['name']}', but model_info.draft records no drafter weights")
        for key in ("name", "revision"):
            if want_draft.get(key) is not None and draft[key] != want_draft[key]:
                fail(f"model_info.draft.{key} is {draft[key]}, but settings.draft_model.{key} is {want_draft[key]}")
    digest = sha256_obj(settings)
    if doc["config_sha256"] != digest:
        fail(
            f"config_sha256 is not the hash of its settings ({doc['config_sha256'][:12]}... vs {digest[:12]}...): "
            "edited by hand?"
        )

    served = settings.get("mode") == "serve"
    if served != ("serve" in doc):
        fail(
            "serve holds the benchmark client's summary, but settings.mode is not serve"
            if not served
            else "settings.mode is serve, but the cell has no serve block (the benchmark client's summary)"
        )
    _check_spec(doc["spec"], settings["ladder"]["speculative"], fail)
    _check_requests(doc, prompts, fail)
    if "engine" in doc and "job" in doc:  # specsweep-cell/2
        _check_engine(doc, fail)

    match = doc.get("vanilla_match")  # format 1 only
    if match is not None and not match["matching"] <= match["compared"] <= prompts:
        fail(
            f"vanilla_match: matching {match['matching']} <= compared {match['compared']} <= prompts {prompts} "
            "does not hold"
        )

    gpu = doc["gpu"]
    if gpu is not None:
        if gpu["util_mean"] > gpu["util_max"] * (1 + REL_TOL) + 1e-9:
            fail(f"gpu.util_mean {_fmt(gpu['util_mean'])} is above gpu.util_max {_fmt(gpu['util_max'])}")
        if gpu["mem_used_mean_mib"] > gpu["mem_used_max_mib"] * (1 + REL_TOL) + 1e-9:
            fail(
                f"gpu.mem_used_mean_mib {_fmt(gpu['mem_used_mean_mib'])} is above gpu.mem_used_max_mib "
                f"{_fmt(gpu['mem_used_max_mib'])}"
            )
        if len(gpu["timeline"]) > gpu["samples"]:
            fail(f"gpu.timeline has {len(gpu['timeline'])} points for {gpu['samples']} samples")

    prov = doc["provenance"]
    try:
        started, ended = datetime.fromisoformat(prov["started"]), datetime.fromisoformat(prov["finished"])
    except ValueError:
        fail("provenance.started or provenance.finished is not an ISO 8601 time")
    else:
        try:
            backwards = ended < started
        except TypeError:  # one with a time zone, one without
            fail("provenance.started and provenance.finished mix times with and without a time zone")
        else:
            if backwards:
                fail(f"provenance.finished ({prov['finished']}) is before provenance.started ({prov['started']})")


def _check_engine(doc: dict[str, Any], fail: Fail) -> None:
    """A measurement on a reused engine: the repeat, the engine's place in its sequence and in the run's
    schedule, the job's clock."""
    eng, job, timing, steps = doc["engine"], doc["job"], doc["timing"], doc["steps"]
    if eng["engine_start_paid"] != (eng["position"] == 1):
        fail(
            f"engine.engine_start_paid is {eng['engine_start_paid']} at engine.position {eng['position']} "
            "(only the engine's first cell pays its start)"
        )
    paid = eng["engine_start_s"] if eng["engine_start_paid"] else 0.0
    if not _close(timing["engine_start_s"], paid):
        fail(
            f"timing.engine_start_s is {_fmt(timing['engine_start_s'])}, but the engine start this cell paid is "
            f"{_fmt(paid)}"
        )
    if not _close(job["wall_s"], job["finished_at"] - job["started_at"], 1e-6):
        fail(
            f"job.wall_s is {_fmt(job['wall_s'])}, but job.finished_at - job.started_at = "
            f"{_fmt(job['finished_at'] - job['started_at'])}"
        )
    sched = doc.get("schedule")
    if sched is not None and sched["position"] > sched["of"]:
        fail(f"schedule.position is {sched['position']}, beyond the run's {sched['of']} engine starts (schedule.of)")
    prefill = steps.get("prefill_steps")
    if prefill is not None and steps.get("decode_steps") is not None:
        if steps["decode_steps"] != steps["engine_steps"] - prefill:
            fail(
                f"steps.decode_steps is {steps['decode_steps']}, but engine_steps - prefill_steps = "
                f"{steps['engine_steps'] - prefill}"
            )
        probe_s = timing.get("prefill_probe_s")
        per_step = steps.get("decode_step_time_ms_probe", steps.get("decode_step_time_ms"))
        if per_step is not None and probe_s is not None and steps["decode_steps"] > 0:
            expected = 1000.0 * (timing["gen_wall_s"] - probe_s) / steps["decode_steps"]
            if not _close(per_step, expected):
                fail(
                    f"steps.decode_step_time_ms(_probe) is {_fmt(per_step)}, but 1000 x (gen_wall_s - "
                    f"prefill_probe_s) / decode_steps = {_fmt(expected)}"
                )
    method = steps.get("decode_method")
    if method is not None:
        chosen = steps["decode_step_time_ms_timestamps" if method == "timestamps" else "decode_step_time_ms_probe"]
        if chosen is None or steps["decode_step_time_ms"] is None or not _close(steps["decode_step_time_ms"], chosen):
            fail(f"steps.decode_step_time_ms is {_fmt(steps['decode_step_time_ms'])}, not its {method} value")


def _check_requests(doc: dict[str, Any], prompts: int, fail: Fail) -> None:
    """The per-request block (optional): one entry per prompt, its tokens summing to the cell's; the concurrency
    target is the settings' b."""
    req = doc.get("requests")
    if req is not None:
        for name, values in req.items():
            if values is not None and len(values) != prompts:
                fail(f"requests.{name} has {len(values)} entries for {prompts} prompts")
        if sum(req["output_tokens"]) != doc["tokens"]["output_tokens"]:
            fail(
                f"sum(requests.output_tokens) = {sum(req['output_tokens'])}, but tokens.output_tokens is "
                f"{doc['tokens']['output_tokens']}"
            )
        if req["finish_order"] is not None and sorted(req["finish_order"]) != list(range(prompts)):
            fail("requests.finish_order is not a ranking of the prompts")
    conc = doc.get("concurrency")
    if conc is not None and conc["target"] != doc["settings"]["workload"].get("concurrency"):
        fail(
            f"concurrency.target is {conc['target']}, but settings.workload.concurrency is "
            f"{doc['settings']['workload'].get('concurrency')}"
        )


def _check_spec(spec: dict[str, Any] | None, speculative: dict[str, Any] | None, fail: Fail) -> None:
    if spec is None:
        if speculative is not None:
            fail("spec is null, but settings.ladder.speculative says the cell is speculative")
        return
    if speculative is None:
        fail("spec holds draft counts, but settings.ladder.speculative is null (a vanilla cell)")
    drafts, draft_tokens, accepted = spec["drafts"], spec["draft_tokens"], spec["accepted"]
    per_pos, k = spec["accepted_per_pos"], speculative["num_speculative_tokens"]
    if accepted > draft_tokens:
        fail(f"spec.accepted ({accepted}) is more than spec.draft_tokens ({draft_tokens})")
    if draft_tokens > drafts * k:
        fail(f"spec.draft_tokens ({draft_tokens}) is more than spec.drafts ({drafts}) x num_speculative_tokens ({k})")
    if len(per_pos) > k:
        fail(f"spec.accepted_per_pos has {len(per_pos)} positions, more than num_speculative_tokens ({k})")
    if sum(per_pos) != accepted:
        fail(f"sum(spec.accepted_per_pos) = {sum(per_pos)}, but spec.accepted is {accepted}")
    if any(a < b for a, b in pairwise(per_pos)):
        fail("spec.accepted_per_pos grows with the position (a token is accepted only after the one before it)")
    if drafts and per_pos and per_pos[0] > drafts:
        fail(f"spec.accepted_per_pos[0] ({per_pos[0]}) is more than spec.drafts ({drafts})")
    if drafts:
        if spec["K"] is None or not _close(spec["K"], 1.0 + accepted / drafts):
            fail(f"spec.K is {_fmt(spec['K'])}, but 1 + accepted / drafts = {_fmt(1.0 + accepted / drafts)}")
    elif spec["K"] is not None:
        fail(f"spec.K is {_fmt(spec['K'])} with no drafts (it must be null)")
    if draft_tokens:
        if spec["alpha"] is None or not _close(spec["alpha"], accepted / draft_tokens):
            fail(f"spec.alpha is {_fmt(spec['alpha'])}, but accepted / draft_tokens = {_fmt(accepted / draft_tokens)}")
    elif spec["alpha"] is not None:
        fail(f"spec.alpha is {_fmt(spec['alpha'])} with no draft tokens (it must be null)")
    rates = spec["acceptance_per_pos"]
    if len(rates) != len(per_pos):
        fail(f"spec.acceptance_per_pos has {len(rates)} positions, spec.accepted_per_pos {len(per_pos)}")
    for i, (rate, n) in enumerate(zip(rates, per_pos, strict=True)):
        expected = n / drafts if drafts else None
        if (rate is None) != (expected is None) or (
            rate is not None and expected is not None and not _close(rate, expected, 1e-6)
        ):
            fail(f"spec.acceptance_per_pos[{i}] is {_fmt(rate)}, but accepted_per_pos[{i}] / drafts = {_fmt(expected)}")
