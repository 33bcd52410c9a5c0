"""One measurement (a cell's repeat): ask the engine of its (model, ladder step, repeat) to measure it, then
write the schema-checked JSON atomically, plus an append-only archive copy. A failure leaves no JSON at the
measurement's path (a previous measurement there stays where it was), only a failure record.
"""

from __future__ import annotations

import os
import platform
import socket
import time
import traceback
from pathlib import Path
from typing import Any

from . import cells, enginehost, metrics, paths, preflight_checks, provenance, workloads
from .config import Cell, Study
from .engine import Engine, engine_identity, engine_key, resolve_model, token_hash
from .errors import SpecsweepError
from .jsonio import atomic_write_bytes, atomic_write_json, sha256_obj

FORMAT = "specsweep-cell/2"


def build_doc(
    study: Study, cell: Cell, repeat: int, workload_path: Path, engine: Engine, raw: dict[str, Any]
) -> dict[str, Any]:
    """The cell document from one Engine.measure() result (runs where the engine is)."""
    spec = study.models[cell.model]
    wl, d, outs, timed_ids = raw["workload"], raw["delta"], raw["outs"], raw["timed_ids"]
    gen_wall_s = raw["gen_wall_s"]
    out_ids = [list(o.outputs[0].token_ids) for o in outs]
    finish: dict[str, int] = {}
    for o in outs:
        reason = str(o.outputs[0].finish_reason)
        finish[reason] = finish.get(reason, 0) + 1
    input_tokens = sum(len(i) for i in timed_ids)
    output_tokens = sum(len(i) for i in out_ids)
    steps = d["steps"]
    settings = study.cell_settings(cell)
    gpu = raw["gpu"]
    prefill = raw["prefill"]
    probed = prefill["probe_s"] is not None
    decode_steps = steps - prefill["probe_steps"] if probed else None
    decode_s = gen_wall_s - prefill["probe_s"] if probed else None
    first = raw["position"] == 1
    return {
        "format": FORMAT,
        "status": "ok",
        "run": study.run,
        "model": cell.model,
        "workload": cell.workload,
        "config": cell.config,
        "repeat": repeat,
        "group": study.cell_groups.get(cell),
        "units": dict(cells.UNITS),
        "settings": settings,
        "config_sha256": sha256_obj(settings),
        "model_info": {
            "source": engine.model,
            "params_b": spec.params_b,
            "tp": spec.tp,
            "trust_remote_code": spec.trust_remote_code,
            "prompt_format": "chat" if raw["use_chat"] else "raw",
            "note": None if raw["use_chat"] else "model has no chat template (or chat_template: false): raw prompts",
            "weights": spec.weights,
            "revision": (engine.model_record or {}).get("revision"),
            "manifest_sha256": (engine.model_record or {}).get("manifest_sha256"),
        },
        "dataset": {
            "workload_file": str(workload_path),
            "content_sha256": wl["content_sha256"],
            "corpus_sha256": wl["corpus_sha256"],
            "seed": wl["seed"],
            "prompts": len(timed_ids),
            "warmup_prompts": raw["warm_count"],
            "input_tokens_mean": input_tokens / len(timed_ids),
            "output_tokens_mean": output_tokens / len(timed_ids),
        },
        "effective": raw["effective"],
        "engine": {
            "key": engine.key,
            "pid": os.getpid(),
            "position": raw["position"],
            "import_s": engine.import_s if first else 0.0,
            "engine_start_s": engine.engine_start_s,
            "engine_start_paid": first,
            "memory_after_start": engine.memory_after_start,
            "resets": raw["resets"],
            "identity_sha256": sha256_obj(engine.identity),
        },
        "timing": {
            "engine_start_s": engine.engine_start_s if first else 0.0,
            "warmup_s": raw["warmup_s"],
            "gen_wall_s": gen_wall_s,
            "reset_s": raw["resets"]["reset_s"],
            "prefill_probe_s": prefill["probe_s"],
        },
        "tokens": {
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "output_tok_s": output_tokens / gen_wall_s,
            "total_tok_s": (input_tokens + output_tokens) / gen_wall_s,
        },
        "steps": {
            "engine_steps": steps,
            "tokens_per_step": output_tokens / steps if steps else None,
            "step_time_ms": 1000.0 * gen_wall_s / steps if steps else None,
            "scheduled_tokens": d["step_tokens"],
            "preemptions": d["counters"]["vllm:num_preemptions"],
            "prefill_steps": prefill["probe_steps"],
            "prefill_method": prefill["method"],
            "decode_steps": decode_steps,
            "decode_step_time_ms": (1000.0 * decode_s / decode_steps)
            if decode_steps is not None and decode_s is not None and decode_steps > 0 and decode_s > 0
            else None,
        },
        "spec": metrics.spec_summary(d) if settings["ladder"]["speculative"] else None,
        "outputs": {
            "token_sha256": [token_hash(ids) for ids in out_ids],
            "finish_reasons": dict(sorted(finish.items())),
            "first_output": outs[0].outputs[0].text[:300],
        },
        "gpu": gpu,
        "provenance": {
            "versions": provenance.versions(),
            "device": provenance.device_info(spec.tp) | {"driver": gpu["driver"] if gpu else raw["driver"]},
            "host": socket.gethostname(),
            "machine": provenance.machine(raw["gpu_uuids"]),
            "platform": platform.platform(),
            "harness": "specsweep.runner (vllm.LLM.generate, offline)",
            "gpu_slots": engine.gpu_slots,
            "git": provenance.git_state(),
            "code": provenance.code_state(),
            "started": None,  # filled in by the cell job
            "finished": provenance.utc_now(),
        },
    } | _replay_payload(spec.weights, raw["timed_ids"], out_ids, outs, engine)


#: The key under which build_doc hands the token ids to run_cell, which stores them beside the cell and
#: replaces the key by the cell's `replay_tokens` record (see attach_tokens).
TOKENS_KEY = "_replay_token_ids"


def _replay_payload(
    weights: str, prompts: list[list[int]], responses: list[list[int]], outs: list[Any], engine: Engine
) -> dict[str, Any]:
    """Real-weight cells carry their prompts' and responses' token ids and finish order (what `specsweep
    replay` needs); the outputs of dummy weights are noise that no drafter should be judged on."""
    if weights == "dummy":
        return {}
    from .replay import tokenizer_identity

    tok = tokenizer_identity(engine.llm.get_tokenizer())
    return {
        TOKENS_KEY: {"prompts": prompts, "responses": responses, "tokenizer": tok, "finish_order": _finish_order(outs)}
    }


def _finish_order(outs: list[Any]) -> list[int] | None:
    """Each request's rank in finishing (0 first), from the engine core's last-token timestamps; requests
    finished in one step share a timestamp and keep their prompt order. None where vLLM gives no timestamps
    (a cell's requests.finish_order, where present, is read first)."""
    ts = [getattr(getattr(o, "metrics", None), "last_token_ts", None) for o in outs]
    if any(not isinstance(t, float) or t <= 0 for t in ts):
        return None
    order = sorted(range(len(ts)), key=lambda i: (ts[i], i))
    rank = [0] * len(ts)
    for r, i in enumerate(order):
        rank[i] = r
    return rank


def attach_tokens(doc: dict[str, Any], out_path: Path) -> dict[Path, bytes]:
    """Take the token ids out of the doc and put in their place the record of the token files to be written
    (returns them, path -> bytes; none for cells without token ids)."""
    payload = doc.pop(TOKENS_KEY, None)
    if payload is None:
        return {}
    from .replay import tokens_blob

    files, doc["replay_tokens"] = tokens_blob(out_path, payload["prompts"], payload["responses"], payload["tokenizer"])
    doc["replay_tokens"]["finish_order"] = payload.get("finish_order")
    return files


def write_token_files(files: dict[Path, bytes]) -> None:
    """Each atomically; a content-named file already there holds these bytes and stays."""
    for path, data in files.items():
        if not (path.name.startswith("prompts.") and path.is_file()):
            atomic_write_bytes(path, data)


def informative_line(exc: BaseException) -> str:
    """The line of an exception that says why: pydantic's "Value error, ..." line (vLLM's config checks), else
    the message's first line, with the exception's type (SpecsweepError then makes it one line of at most
    errors.MAX_MESSAGE characters)."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    pick = next((ln for ln in lines if ln.startswith("Value error,")), lines[0] if lines else "")
    pick = pick.removeprefix("Value error, ").split(" [type=")[0]
    return f"{type(exc).__name__}: {pick}"


def run_engine_host(study: Study, cell: Cell, repeat: int, model_path: str | None, key: str) -> None:
    """The engine host process: start the engine, then measure what cell jobs ask for."""
    model = resolve_model(study, cell, model_path)
    engine = Engine(study, cell, model, repeat)
    if engine.key != key:
        raise SpecsweepError(f"engine {key}: the config now gives engine {engine.key} (config changed?)")
    try:
        engine.start()
    except SpecsweepError:
        raise
    except Exception as exc:  # vLLM refused or failed to start this engine: one line, the informative one
        raise SpecsweepError(f"engine start failed: {informative_line(exc)}") from exc
    print(f"engine {key}: ready in {engine.import_s:.1f} s import + {engine.engine_start_s:.1f} s start", flush=True)

    def handle(msg: dict[str, Any]) -> dict[str, Any]:
        c = study.cell(cell.model, msg["workload"], cell.config)
        wl_path = Path(msg["workload_file"])
        r = int(msg.get("repeat", repeat))
        if study.engine_repeat(r) != study.engine_repeat(repeat):
            raise SpecsweepError(f"engine {key}: serves repeat {repeat}, not repeat {r}")
        raw = engine.measure(c, wl_path)
        doc = build_doc(study, c, r, wl_path, engine, raw)
        return doc

    enginehost.serve(key, engine, handle, enginehost.engine_dir())


def run_cell(
    study: Study,
    key: paths.Key,
    root: Path,
    workload_path: Path,
    model_path: str | None = None,
    config_path: str | None = None,
    log_path: str | None = None,
    reuse: bool = True,
    watch_pid: int | None = None,
) -> dict[str, Any]:
    """Measure one cell repeat and write it. `reuse` measures on the shared engine host (default); without
    it the engine starts in this process and ends with it."""
    t_start = time.time()
    started = provenance.utc_now()
    cell = study.cell(key.model, key.workload, key.config)
    if not 1 <= key.repeat <= study.repeats:
        raise SpecsweepError(f"cell {key.label}: repeat {key.repeat} is outside 1..{study.repeats} (config repeats)")
    out_path = paths.measurement(root, key)
    fail_path = paths.failure(root, key)
    wait_s = 0.0
    try:
        # cheap checks before any engine second: the workload file (content hash, name, made for the config
        # as it is now) and the model folder's config.json
        wl = workloads.load(Path(workload_path))
        if wl["name"] != cell.workload:
            raise SpecsweepError(f"workload file {workload_path}: holds workload '{wl['name']}', not '{cell.workload}'")
        preflight_checks.check_workload_current(
            wl,
            study.workloads[cell.workload],
            f"workload file {workload_path}",
            seed=study.raw["seed"],
            warmup=study.raw["warmup_prompts"],
        )
        if model_path:
            preflight_checks.check_model_dir(model_path)
        model = resolve_model(study, cell, model_path)
        ekey = engine_key(engine_identity(study, cell, model, key.repeat))
        if reuse:
            if config_path is None:
                raise SpecsweepError("run-cell: engine reuse needs the config file path")
            d = enginehost.engine_dir()
            log = Path(log_path).with_name(f"engine-{ekey}.log") if log_path else d / f"{ekey}.log"
            argv = enginehost.host_argv(
                str(Path(config_path).resolve()),
                cell.model,
                cell.config,
                key.repeat,
                model if Path(model).is_dir() else None,
                ekey,
            )
            t0 = time.time()
            host = enginehost.ensure_host(ekey, argv, log, d, run_id=watch_pid)
            wait_s = time.time() - t0
            doc = enginehost.measure_via_host(
                ekey,
                {
                    "op": "measure",
                    "workload": cell.workload,
                    "repeat": key.repeat,
                    "workload_file": str(Path(workload_path).resolve()),
                },
                d,
            )
            doc["engine"] |= {
                "host_pid": host["pid"],
                "spawned_at": host["spawned_at"],
                "spawned_by_this_job": host["spawned"],
            }
        else:
            engine = Engine(study, cell, model, key.repeat)
            t0 = time.time()
            engine.start()
            wait_s = time.time() - t0
            doc = build_doc(
                study, cell, key.repeat, Path(workload_path), engine, engine.measure(cell, Path(workload_path))
            )
            doc["engine"] |= {"host_pid": os.getpid(), "spawned_at": t0, "spawned_by_this_job": True}
        t_end = time.time()
        doc["provenance"]["started"] = started
        doc["provenance"]["snakemake"] = _snakemake_version()
        # the scheduler job that ran this cell (the engine host may have been spawned by an earlier one)
        doc["provenance"]["slurm_job_id"] = os.environ.get("SLURM_JOB_ID")
        doc["job"] = {
            "started_at": t_start,
            "finished_at": t_end,
            "wall_s": t_end - t_start,
            "wait_for_engine_s": wait_s,
            "reuse": reuse,
        }
        token_files = attach_tokens(doc, out_path)
        cells.validate(doc, str(out_path))
        archived = _archive(root, key, doc)
        if watch_pid is not None and not enginehost._pid_alive(watch_pid):
            # the scheduler that started this job is gone (kill -9): its next run would take a late write for an
            # incomplete file; keep the measurement in the archive only
            raise SpecsweepError(
                f"cell {key.label}: the scheduler (pid {watch_pid}) died during the measurement; "
                f"kept only in the archive: {archived}"
            )
        write_token_files(token_files)  # first the token files, then the cell that names them by their hash
        atomic_write_json(out_path, doc)
    except BaseException as exc:  # record the failure as data (the previous measurement stays), then fail
        _write_failure(study, key, fail_path, exc, log_path, started)
        raise
    fail_path.unlink(missing_ok=True)
    return doc


def _archive(root: Path, key: paths.Key, doc: dict[str, Any]) -> Path:
    """Every finished measurement, content-addressed, where no rerun or --force removes it."""
    path = paths.archive_dir(root, key) / f"{sha256_obj(doc)[:16]}.json"
    atomic_write_json(path, doc)
    return path


def _write_failure(
    study: Study, key: paths.Key, fail_path: Path, exc: BaseException, log_path: str | None, started: str
) -> None:
    record = {
        "format": "specsweep-failure/1",
        "run": study.run,
        "model": key.model,
        "workload": key.workload,
        "config": key.config,
        "repeat": key.repeat,
        "error_type": type(exc).__name__,
        "message": " ".join(str(exc).split())[:2000],
        "traceback_tail": traceback.format_exc().strip().splitlines()[-5:],
        "log": log_path,
        "host": socket.gethostname(),
        "started": started,
        "failed": provenance.utc_now(),
    }
    try:
        atomic_write_json(fail_path, record)
    except OSError as write_exc:  # disk full or read-only: say so on stderr, in one line
        print(f"specsweep: error: cannot write failure record {fail_path}: {write_exc}", flush=True)


def _snakemake_version() -> str | None:
    try:
        import importlib.metadata as md

        return md.version("snakemake")
    except Exception:
        return None
