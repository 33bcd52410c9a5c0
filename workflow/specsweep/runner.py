"""One measurement (a cell's repeat): ask the engine of its (model, ladder step, repeat) to measure it, then
write the schema-checked JSON atomically, plus an append-only archive copy. A failure leaves no JSON at the
measurement's path (a previous measurement there stays where it was), only a failure record.
"""

from __future__ import annotations

import functools
import hashlib
import os
import signal
import socket
import time
import traceback
from pathlib import Path
from typing import Any

from . import (
    celldoc,
    cells,
    enginehost,
    inflight,
    metrics,
    paths,
    preflight_checks,
    provenance,
    serve,
    slots,
    workloads,
)
from .architectures import tokenizer_path
from .config import Cell, Study
from .engine import (
    Engine,
    encode_prompts,
    engine_identity,
    engine_key,
    request_max_tokens,
    resolve_model,
    token_hash,
    uses_chat,
)
from .errors import SpecsweepError
from .jsonio import atomic_write_bytes, atomic_write_json, read_json, sha256_obj

FORMAT = celldoc.FORMAT


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
    probe_ms = (
        (1000.0 * decode_s / decode_steps)
        if decode_steps is not None and decode_s is not None and decode_steps > 0 and decode_s > 0
        else None
    )
    measured_ms = raw["decode"].step_time_ms
    # per-request latency from vLLM's RequestStateStats (RequestOutput.metrics, filled when stats are logged)
    latencies = [
        inflight.request_latency(getattr(o, "metrics", None), len(ids)) for o, ids in zip(outs, out_ids, strict=True)
    ]
    ttft = [lat[0] for lat in latencies]
    tpot = [lat[1] for lat in latencies]
    method = "timestamps" if measured_ms is not None else ("prefill probe" if probe_ms is not None else None)
    order = raw["finish_order"]
    return {
        **celldoc.header(study, cell, repeat, engine, raw["use_chat"]),
        "dataset": {
            **celldoc.dataset(workload_path, wl, len(timed_ids), raw["warm_count"], input_tokens, output_tokens),
            # a cell at b: the whole cycles of the prompt pool its pass ran (engine.pool_record); null otherwise
            "pool": raw.get("pool"),
        },
        "effective": raw["effective"],
        **celldoc.pass_fields(engine, raw, os.getpid(), gen_wall_s, input_tokens, output_tokens, prefill["probe_s"]),
        "steps": {
            "engine_steps": steps,
            "tokens_per_step": output_tokens / steps if steps else None,
            "step_time_ms": 1000.0 * gen_wall_s / steps if steps else None,
            "scheduled_tokens": d["step_tokens"],
            "preemptions": d["counters"]["vllm:num_preemptions"],
            "prefill_steps": prefill["probe_steps"],
            "prefill_method": prefill["method"],
            "decode_steps": decode_steps,
            # measured (vLLM's step timestamps) where they are, else the prefill probe's subtraction
            "decode_step_time_ms": measured_ms if measured_ms is not None else probe_ms,
            "decode_method": method,
            "decode_step_time_ms_timestamps": measured_ms,
            "decode_step_time_ms_probe": probe_ms,
            "decode_only_steps": raw["decode"].steps,
        },
        "requests": {
            "output_tokens": [len(ids) for ids in out_ids],
            "gen_steps": raw["gen_steps"],
            "ttft_s": ttft,
            "tpot_s": tpot,
            "finish_order": inflight.finish_ranks(order, len(outs)) if order is not None else None,
            # prompt tokens each request found in the prefix cache (RequestOutput.num_cached_tokens)
            "cached_tokens": [getattr(o, "num_cached_tokens", None) for o in outs],
        },
        "latency": inflight.latency_block(ttft, tpot, raw["decode"]),
        "concurrency": raw["concurrency"],
        "spec": metrics.spec_summary(d) if settings["ladder"]["speculative"] else None,
        "outputs": {
            "token_sha256": [token_hash(ids) for ids in out_ids],
            "finish_reasons": dict(sorted(finish.items())),
            "first_output": outs[0].outputs[0].text[:300],
        },
        "gpu": gpu,
        "host_cpu": raw.get("host_cpu"),
        "provenance": celldoc.provenance_block(
            spec.tp,
            engine,
            raw,
            "specsweep.runner (vllm.LLM.generate, offline)"
            if cell.concurrency is None
            else f"specsweep.runner (vllm LLMEngine.add_request/step, offline, {cell.concurrency} in flight)",
        ),
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


def run_engine_host(
    study: Study, cell: Cell, repeat: int, model_path: str | None, key: str, token: str | None = None
) -> None:
    """The engine host process: start the engine, then measure what cell jobs ask for, each only if the
    cell's settings here (the config as it was read when this host started) are those the cell job has now."""
    enginehost.check_knobs()
    d = enginehost.engine_dir()  # the folder and its socket path are checked before the engine start
    model = resolve_model(study, cell, model_path)
    served = study.mode(cell.step) == "serve"
    engine: Engine | serve.ServeEngine = (serve.ServeEngine if served else Engine)(study, cell, model, repeat)
    if engine.key != key:
        raise SpecsweepError(f"engine {key}: the config now gives engine {engine.key} (config changed?)")
    held = [x for x in os.environ.get("SPECSWEEP_HOST_SLOTS", "").split(",") if x]
    if served:  # SIGTERM ends the host through its `finally`, which ends the server
        signal.signal(signal.SIGTERM, _exit_on_signal)
    try:
        _host(study, cell, repeat, key, token, d, held, engine)
    finally:
        if isinstance(engine, serve.ServeEngine):
            engine.close()


def _exit_on_signal(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


def _host(
    study: Study,
    cell: Cell,
    repeat: int,
    key: str,
    token: str | None,
    d: Path,
    held: list[str],
    engine: Engine | serve.ServeEngine,
) -> None:
    starting = enginehost.Activity(d, "engine start", {"run": study.run, "key": key, "cell": None, "slots": held})
    try:
        engine.start()
    except SpecsweepError:
        raise
    except Exception as exc:  # vLLM refused or failed to start this engine: one line, the informative one
        raise SpecsweepError(f"engine start failed: {informative_line(exc)}") from exc
    finally:
        starting.end()
    print(f"engine {key}: ready in {engine.import_s:.1f} s import + {engine.engine_start_s:.1f} s start", flush=True)

    def handle(msg: dict[str, Any]) -> dict[str, Any]:
        label = f"{cell.model}/{msg.get('workload')}/{cell.step}"
        try:
            c = study.cell(cell.model, str(msg["workload"]), cell.step)
        except (KeyError, SpecsweepError):
            raise enginehost.StaleHostError(
                f"engine {key}: its config (as read at its start) has no cell {label}"
            ) from None
        have, want = sha256_obj(study.cell_settings(c)), msg.get("settings_sha256")
        if have != want:
            raise enginehost.StaleHostError(
                f"engine {key}: started for other settings of {label} (settings sha256 {have[:12]}, "
                f"asked for {str(want)[:12]}): the config changed since this host started"
            )
        wl_path = Path(msg["workload_file"])
        r = int(msg.get("repeat", repeat))
        if study.engine_repeat(r) != study.engine_repeat(repeat):
            raise SpecsweepError(f"engine {key}: serves repeat {repeat}, not repeat {r}")
        # one measurement at a time in this engine folder unless the cell job says side by side is allowed;
        # either way the cell records what ran beside it
        side = msg.get("side_by_side") is True
        what = {"run": study.run, "key": key, "cell": f"{label}/r{r}", "slots": held}
        activity = enginehost.Activity(d, "measure", what, exclusive=not side)
        try:
            raw = engine.measure(c, wl_path)
        finally:
            near = activity.end()
        if isinstance(engine, serve.ServeEngine):
            doc = serve.build_doc(study, c, r, wl_path, engine, raw)
        else:
            doc = build_doc(study, c, r, wl_path, engine, raw)
        doc["beside"] = {"side_by_side": side, "activities": near}
        return doc

    enginehost.serve(key, engine, handle, d, token)


#: Tokens a prompt may hold beyond its UTF-8 bytes plus its chat template's text: BOS/EOS and the like. A
#: byte-level BPE or byte-fallback tokenizer gives at most one token per byte of text.
SPECIAL_TOKEN_SLACK = 16


def _chat_template_bytes(tokenizer_dir: Path) -> int | None:
    """The size of the chat template's own text (tokenizer_config.json's chat_template, chat_template.jinja),
    which bounds what it adds around one message; None when it cannot be read."""
    size = 0
    try:
        jinja = tokenizer_dir / "chat_template.jinja"
        if jinja.is_file():
            size += jinja.stat().st_size
        tc = tokenizer_dir / "tokenizer_config.json"
        if tc.is_file():
            template = read_json(tc, "tokenizer config").get("chat_template") or ""
            items = template if isinstance(template, list) else [template]
            size += sum(len(str(t.get("template", "") if isinstance(t, dict) else t).encode()) for t in items)
    except (OSError, SpecsweepError, AttributeError):
        return None
    return size


#: The tokenizer files whose content decides how a prompt tokenises (the memo of check_workload_fits keys them).
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
)


def _tokenizer_digest(tok_dir: Path) -> str | None:
    """sha256 over the tokenizer files (TOKENIZER_FILES) in tok_dir; None when one cannot be read."""
    h = hashlib.sha256()
    try:
        for name in TOKENIZER_FILES:
            f = tok_dir / name
            if f.is_file():
                h.update(f"{name}\n{f.stat().st_size}\n".encode())
                h.update(f.read_bytes())
    except OSError:
        return None
    return h.hexdigest()


@functools.lru_cache(maxsize=4)
def _tokenizer(tok_dir: str, remote: bool, digest: str) -> Any:
    """The model folder's tokenizer, loaded once per process and tokenizer content (digest)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tok_dir, trust_remote_code=remote)


def _fits_memo(workload_path: Path, digest: str, max_len: int, use_chat: bool, remote: bool) -> Path | None:
    """Where a passed exact check of this workload file against this tokenizer (its files' digest) and
    max_model_len is recorded: beside the workload file, named by the sha256 of the file's bytes, the digest and
    the settings, so the cells after the first skip the tokenizer (its import and the workload's prompts,
    paid again by every cell job otherwise); None when the file cannot be read."""
    h = hashlib.sha256(f"fits/1 {max_len} {use_chat} {remote} {digest}\n".encode())
    try:
        h.update(workload_path.read_bytes())
    except OSError:
        return None
    return workload_path.with_name(f".{workload_path.name}.fits-{h.hexdigest()[:24]}")


def check_workload_fits(
    study: Study, cell: Cell, model: str, wl: dict[str, Any], workload_path: Path | None = None
) -> str:
    """Refuse, before any engine starts, a workload whose prompt plus its max_tokens exceeds the cell's
    engine.max_model_len (vLLM would refuse it only after the engine start). Returns how it decided:
    `bound`, `memo`, `tokenized` or `left to the engine`.

    Prompts that fit by a bound need no tokenizer: tokens <= UTF-8 bytes of the text + the chat template's
    text + SPECIAL_TOKEN_SLACK. When the bound does not prove it, the prompts are tokenised as the engine
    tokenises them (engine.encode_prompts, the model folder's tokenizer) and checked exactly; a pass is recorded
    beside the workload file (`_fits_memo`), so later cells of the same file, tokenizer and max_model_len skip
    it. A model that is not a local folder, or a tokenizer that does not load here, is left to the engine's
    own check."""
    max_len = study.cell_settings(cell)["engine"].get("max_model_len")
    spec = study.models[cell.model]
    tok_dir = Path(tokenizer_path(spec, model))
    if max_len is None or not tok_dir.is_dir():
        return "left to the engine"
    template = _chat_template_bytes(tok_dir) if spec.chat_template else 0
    parts = (("prompts", "workload"), ("warmup", "workload warm-up"))
    # a dataset's prompt needs room for one token (its max_tokens is cut to fit); a chat of several messages
    # renders the template once per message, past this bound: tokenised
    if template is not None and all(
        "messages" not in it
        and len(it["text"].encode()) + template + SPECIAL_TOKEN_SLACK + (1 if "origin" in it else it["max_tokens"])
        <= max_len
        for key, _ in parts
        for it in wl[key]
    ):
        return "bound"
    digest = _tokenizer_digest(tok_dir)
    memo = (
        _fits_memo(workload_path, digest, max_len, spec.chat_template, spec.trust_remote_code)
        if workload_path is not None and digest is not None
        else None
    )
    if memo is not None and memo.is_file():
        return "memo"
    try:
        tokenizer = _tokenizer(str(tok_dir), spec.trust_remote_code, digest or "")
    except Exception:  # a tokenizer only vLLM loads (its own modes): the engine's check stays
        return "left to the engine"
    use_chat = uses_chat(spec, tokenizer)
    for key, what in parts:
        if wl[key]:
            ids = encode_prompts(tokenizer, wl[key], use_chat)
            preflight_checks.check_prompt_lengths(
                [len(i) for i in ids],
                request_max_tokens(tokenizer, wl[key], ids, max_len),
                max_len,
                f"{what} {cell.workload} on model {cell.model}",
            )
    if memo is not None:
        try:
            atomic_write_bytes(memo, b"fits\n")
        except OSError:  # a read-only workload folder: checked again next time
            pass
    return "tokenized"


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
    cell = study.cell(key.model, key.workload, key.step)
    if not 1 <= key.repeat <= study.repeats:
        raise SpecsweepError(f"cell {key.label}: repeat {key.repeat} is outside 1..{study.repeats} (config repeats)")
    out_path = paths.measurement(root, key)
    fail_path = paths.failure(root, key)
    wait_s = 0.0
    try:
        # cheap checks before any engine second: the workload file (content hash, name, made for the config
        # as it is now) and the model folder's config.json
        wl = workloads.load(Path(workload_path))
        if wl["name"] != cell.base_workload:
            raise SpecsweepError(
                f"workload file {workload_path}: holds workload '{wl['name']}', not '{cell.base_workload}'"
            )
        preflight_checks.check_workload_current(
            wl,
            study.workloads[cell.base_workload],
            f"workload file {workload_path}",
            seed=study.raw["seed"],
            warmup=study.raw["warmup_prompts"],
        )
        if model_path:
            preflight_checks.check_model_dir(model_path)
        model = resolve_model(study, cell, model_path)
        check_workload_fits(study, cell, model, wl, Path(workload_path))
        ekey = engine_key(engine_identity(study, cell, model, key.repeat))
        if reuse:
            if config_path is None:
                raise SpecsweepError("run-cell: engine reuse needs the config file path")
            enginehost.check_knobs()
            d = enginehost.engine_dir()
            log = Path(log_path).with_name(f"engine-{ekey}.log") if log_path else d / f"{ekey}.log"
            argv = enginehost.host_argv(
                str(Path(config_path).resolve()),
                cell.model,
                cell.step,
                key.repeat,
                model if Path(model).is_dir() else None,
                ekey,
            )
            # the host measures this cell only with the settings it has now (sampling included): a host started
            # for other settings (the config changed since) refuses, and is replaced by one started for these
            settings_sha256 = sha256_obj(study.cell_settings(cell))
            msg = {
                "op": "measure",
                "workload": cell.workload,
                "repeat": key.repeat,
                "workload_file": str(Path(workload_path).resolve()),
                "settings_sha256": settings_sha256,
            }
            msg["side_by_side"] = study.side_by_side
            # the slots of this job's engine folder (Snakemake's grant), as many as the model's TP (one on the CPU)
            pool = slots.slot_pool(study.device)
            need = study.models[cell.model].tp if study.device == "gpu" else 1
            t0 = time.time()
            stale: enginehost.StaleHostError | None = None
            with enginehost.use_host(ekey, argv, log, d, pool, need, run_id=watch_pid, run=study.run) as host:
                wait_s = time.time() - t0
                try:
                    doc = enginehost.measure_via_host(ekey, msg, d)
                except enginehost.StaleHostError as exc:
                    stale = exc
            if stale is not None:
                print(f"{stale}; stopping it and starting one for the config as it is now", flush=True)
                t0 = time.time()
                with enginehost.use_host(
                    ekey, argv, log, d, pool, need, run_id=watch_pid, run=study.run, replace=True
                ) as host:
                    wait_s += time.time() - t0
                    doc = enginehost.measure_via_host(ekey, msg, d)
            if doc.get("config_sha256") != settings_sha256:
                raise SpecsweepError(
                    f"engine {ekey}: measured {key.label} with settings {str(doc.get('config_sha256'))[:12]}, "
                    f"not this config's {settings_sha256[:12]}"
                )
            doc["engine"] |= {
                "host_pid": host["pid"],
                "spawned_at": host["spawned_at"],
                "spawned_by_this_job": host["spawned"],
                "slots": host["slots"],
                "cpus": host["cpus"],
            }
        elif study.mode(cell.step) == "serve":
            served = serve.ServeEngine(study, cell, model, key.repeat)
            t0 = time.time()
            try:
                served.start()
                wait_s = time.time() - t0
                raw = served.measure(cell, Path(workload_path))
                doc = serve.build_doc(study, cell, key.repeat, Path(workload_path), served, raw)
            finally:
                served.close()
            doc["engine"] |= {"host_pid": os.getpid(), "spawned_at": t0, "spawned_by_this_job": True}
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
        doc["schedule"] = study.schedule_record(cell, key.repeat)
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
        "config": key.step,
        "repeat": key.repeat,
        "error_type": type(exc).__name__,
        "message": _message(exc),
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


def _message(exc: BaseException) -> str:
    """The failure's one-line message; never empty (a bare Ctrl-C or SIGTERM says so)."""
    text = " ".join(str(exc).split())[:2000]
    if text:
        return text
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted (SIGINT, Ctrl-C)"
    if isinstance(exc, SystemExit):
        return f"exited with code {exc.code}"
    return f"{type(exc).__name__} (no message)"


def _snakemake_version() -> str | None:
    try:
        import importlib.metadata as md

        return md.version("snakemake")
    except Exception:
        return None
