"""Cheap checks made before any GPU second is spent: pure functions of what a cell is given (the config's
environment, the model folder, the tokenised prompts), each refusing with one line naming the culprit.

The config check (`config.build_study`) calls `check_env`; the cell runner calls `check_model_dir` before
the engine starts and `check_prompt_lengths` once the prompts are tokenised and before they are generated.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .errors import SpecsweepError

ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: Variables that choose GPUs or configure specsweep's GPU slots: they belong to the scheduler or the node,
#: and set from a config they would switch the slot locking off or point it elsewhere.
RESERVED_ENV = {
    "CUDA_VISIBLE_DEVICES": "it belongs to the scheduler (set there, it switches specsweep's GPU locking off)",
    "NVIDIA_VISIBLE_DEVICES": "it belongs to the scheduler or the container runtime",
    "HIP_VISIBLE_DEVICES": "it belongs to the scheduler",
    "ROCR_VISIBLE_DEVICES": "it belongs to the scheduler",
    "SPECSWEEP_GPU_IDS": "it describes the node: export it in the shell that runs the workflow",
    "SPECSWEEP_SLOT_DIR": "it describes the node: export it in the shell that runs the workflow",
    "SPECSWEEP_SLOT_TIMEOUT_S": "it describes the node: export it in the shell that runs the workflow",
    "SPECSWEEP_SLOTS": "it describes the node: export it in the shell that runs the workflow",
    "SPECSWEEP_SLOT_LIMIT": "it is the GPUs Snakemake grants (--resources gpu=N)",
    "SPECSWEEP_HOST_SLOTS": "it is what specsweep gives each engine host",
}
#: The config's `env` is an allowlist of the variables whose effect a cell records: the cell keeps their values
#: (settings.env, and the engine key hashes them), so only a switch or a number whose whole effect follows from its
#: value may be set, and nothing that chooses which code runs (a config is data: LD_PRELOAD, PYTHONPATH or PATH
#: there would run anything in every engine process). vLLM's, PyTorch's and Arctic Inference's variables are
#: allowed by name (ENV_NAMES): vLLM's others are refused, many of them name a folder, file or address whose
#: content the cell does not record (VLLM_MODEL_REDIRECT_PATH loads another model folder while the cell records
#: the first one's manifest hash; VLLM_CACHE_ROOT, VLLM_CONFIG_ROOT and VLLM_TUNED_CONFIG_FOLDER choose the
#: compiled code and tuned kernels it loads). NCCL's and PyTorch's NCCL switches are allowed by name too (ENV_NCCL:
#: switches and numbers of the collectives of multi-GPU engines); their others are refused, NCCL_NET among them (it
#: picks a network plugin by name, code the cell does not record). CUDA_DEVICE_ORDER orders the GPUs the slots
#: hand out; OMP_NUM_THREADS and MKL_NUM_THREADS size the CPU engine's thread pools; TOKENIZERS_PARALLELISM,
#: HF_HUB_OFFLINE and TRANSFORMERS_OFFLINE keep the tokenizer quiet and the Hub unasked (the models are fetched
#: first). config/README.md lists them all.
ENV_PREFIXES = ("NCCL_", "TORCH_NCCL_")
#: The NCCL switches whose whole effect follows from their value (a switch, a level or a number): which transports
#: and algorithms the collectives use, their channels and buffers, logging, and PyTorch's error handling and timeouts.
ENV_NCCL = frozenset(
    {
        "NCCL_DEBUG",
        "NCCL_DEBUG_SUBSYS",
        "NCCL_P2P_DISABLE",
        "NCCL_P2P_LEVEL",
        "NCCL_SHM_DISABLE",
        "NCCL_IB_DISABLE",
        "NCCL_CUMEM_ENABLE",
        "NCCL_NVLS_ENABLE",
        "NCCL_ALGO",
        "NCCL_PROTO",
        "NCCL_MIN_NCHANNELS",
        "NCCL_MAX_NCHANNELS",
        "NCCL_BUFFSIZE",
        "NCCL_NTHREADS",
        "NCCL_LAUNCH_MODE",
        "NCCL_CROSS_NIC",
        "NCCL_NET_GDR_LEVEL",
        "NCCL_COLLNET_ENABLE",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING",
        "TORCH_NCCL_BLOCKING_WAIT",
        "TORCH_NCCL_ENABLE_MONITORING",
        "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC",
        "TORCH_NCCL_AVOID_RECORD_STREAMS",
        "TORCH_NCCL_USE_COMM_NONBLOCKING",
    }
)
ENV_VLLM = frozenset(
    {
        # what runs: plugins (installed packages, "" for none), the model runner, engine processes, compilation
        "VLLM_PLUGINS",
        "VLLM_USE_V2_MODEL_RUNNER",
        "VLLM_ENABLE_V1_MULTIPROCESSING",
        "VLLM_WORKER_MULTIPROC_METHOD",
        "VLLM_ALLOW_LONG_MAX_MODEL_LEN",
        "VLLM_ATTENTION_BACKEND",
        "VLLM_FLASH_ATTN_VERSION",
        "VLLM_USE_FLASHINFER_SAMPLER",
        "VLLM_BATCH_INVARIANT",
        "VLLM_KV_CACHE_LAYOUT",
        "VLLM_FLOAT32_MATMUL_PRECISION",
        "VLLM_USE_DEEP_GEMM",
        "VLLM_MOE_USE_DEEP_GEMM",
        "VLLM_DISABLE_COMPILE_CACHE",
        "VLLM_USE_AOT_COMPILE",
        "VLLM_USE_STANDALONE_COMPILE",
        "VLLM_ENABLE_INDUCTOR_MAX_AUTOTUNE",
        "VLLM_ENABLE_INDUCTOR_COORDINATE_DESCENT_TUNING",
        # multi-GPU collectives
        "VLLM_DISABLE_PYNCCL",
        "VLLM_SKIP_P2P_CHECK",
        "VLLM_ALLREDUCE_USE_SYMM_MEM",
        "VLLM_USE_NCCL_SYMM_MEM",
        # the CPU engine
        "VLLM_CPU_KVCACHE_SPACE",
        "VLLM_CPU_OMP_THREADS_BIND",
        "VLLM_CPU_NUM_OF_RESERVED_CPU",
        # logs, usage reports and timeouts
        "VLLM_LOGGING_LEVEL",
        "VLLM_CONFIGURE_LOGGING",
        "VLLM_LOG_STATS_INTERVAL",
        "VLLM_NO_USAGE_STATS",
        "VLLM_DO_NOT_TRACK",
        "VLLM_ENGINE_READY_TIMEOUT_S",
        "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS",
    }
)
ENV_NAMES = (
    ENV_VLLM
    | ENV_NCCL
    | frozenset(
        {
            "ARCTIC_INFERENCE_ENABLED",
            "PYTORCH_CUDA_ALLOC_CONF",
            "PYTORCH_ALLOC_CONF",
            "CUDA_DEVICE_ORDER",
            "OMP_NUM_THREADS",
            "MKL_NUM_THREADS",
            "TOKENIZERS_PARALLELISM",
            "HF_HUB_OFFLINE",
            "TRANSFORMERS_OFFLINE",
        }
    )
)
#: The families whose members are allowed by name only: another member is refused naming why.
ENV_NAMED_FAMILIES = ("VLLM_", "PYTORCH_", "ARCTIC_INFERENCE_", *ENV_PREFIXES)
ENV_ALLOWED = "the switches config/README.md lists"
#: Variables that name code to load: a shared library (VLLM_*_SO_PATH, VLLM_CUDA_COMPATIBILITY_PATH, NCCL's
#: *_PLUGIN), a program (VLLM_RUST_FRONTEND_PATH) or a logging config, whose handlers may call any installed
#: function (VLLM_LOGGING_CONFIG_PATH).
ENV_CODE = re.compile(
    r"VLLM_\w*SO_PATH|VLLM_(CUDA_COMPATIBILITY_PATH|RUST_FRONTEND_PATH|LOGGING_CONFIG_PATH)|(TORCH_)?NCCL_\w*PLUGIN\w*"
)
#: Variables that name a file, a folder or a URL: the cell records the name, not what is read from there.
ENV_PATH = re.compile(r"(?:[A-Z0-9_]*_)?(PATH|FILE|DIR|FOLDER|ROOT|CACHE|URL)(?:_[A-Z0-9_]*)?")
MAX_MODEL_CONFIG_BYTES = 16 * 1024 * 1024


def check_env(env: Any, where: str = "config: env") -> None:
    """The config's `env`: valid names (`[A-Za-z_][A-Za-z0-9_]*`) from the allowlist (ENV_NAMES, ENV_PREFIXES;
    none that loads code, ENV_CODE, or names a file, folder or address, ENV_PATH), string values without NUL, no
    reserved key."""
    if not isinstance(env, Mapping):
        raise SpecsweepError(f"{where}: must be a mapping of NAME: value, got {type(env).__name__}")
    for name, value in env.items():
        if not isinstance(name, str) or not ENV_NAME.fullmatch(name):
            raise SpecsweepError(f"{where}: {str(name)[:60]!r} is not a valid environment variable name")
        if name in RESERVED_ENV:
            raise SpecsweepError(f"{where}.{name}: may not be set in the config: {RESERVED_ENV[name]}")
        if ENV_CODE.fullmatch(name):
            raise SpecsweepError(
                f"{where}.{name}: may not be set in the config: it names code to load (a library, a program or a "
                "logging config); export it in the shell if you mean it"
            )
        if name not in ENV_NAMES and name.startswith(ENV_NAMED_FAMILIES + ENV_PREFIXES) and ENV_PATH.fullmatch(name):
            raise SpecsweepError(
                f"{where}.{name}: may not be set in the config: it names a file, folder or URL, and a cell "
                "records the name, not what is loaded from there (a model, a cache, tuned kernels); export it in "
                "the shell if you mean it"
            )
        if name.startswith(ENV_NAMED_FAMILIES) and name not in ENV_NAMES:
            raise SpecsweepError(
                f"{where}.{name}: may not be set in the config: it is none of the switches whose effect a cell "
                "records (config/README.md, 'What env may set', lists them); export it in the shell if you mean it"
            )
        if not (name.startswith(ENV_PREFIXES) or name in ENV_NAMES):
            raise SpecsweepError(
                f"{where}.{name}: may not be set in the config: it takes only the engine's settings ({ENV_ALLOWED}); "
                "LD_*, PYTHON*, PATH and the like choose which code runs (export them in the shell if you mean it)"
            )
        if not isinstance(value, str):
            raise SpecsweepError(f"{where}.{name}: the value must be a string, got {type(value).__name__} (quote it)")
        if "\x00" in value:
            raise SpecsweepError(f"{where}.{name}: the value contains a NUL character")


def check_model_dir(path: Path | str) -> dict[str, Any]:
    """A local model folder: it exists and holds a config.json that is a JSON object (returned)."""
    p = Path(path).expanduser()
    if not p.is_dir():
        raise SpecsweepError(f"model path {p}: does not exist or is not a directory")
    cfg = p / "config.json"
    if not cfg.is_file():
        raise SpecsweepError(f"model path {p}: has no config.json")
    try:
        with open(cfg, "rb") as fh:
            raw = fh.read(MAX_MODEL_CONFIG_BYTES + 1)
    except OSError as exc:
        raise SpecsweepError(f"model path {p}: config.json cannot be read ({exc.strerror})") from None
    if len(raw) > MAX_MODEL_CONFIG_BYTES:
        raise SpecsweepError(f"model path {p}: config.json is larger than {MAX_MODEL_CONFIG_BYTES} bytes")
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise SpecsweepError(f"model path {p}: config.json is not valid JSON") from None
    if not isinstance(doc, dict):
        raise SpecsweepError(f"model path {p}: config.json is not a JSON object")
    return doc


def check_prompt_lengths(lengths: Sequence[int], max_tokens: Sequence[int], max_model_len: int, where: str) -> None:
    """Every prompt and its max_tokens fit in max_model_len (else vLLM refuses it mid-run, after engine start).

    `where` names the workload (e.g. "workload code"); the message names the prompt that overflows most
    and the longest prompt."""
    if len(lengths) != len(max_tokens):
        raise SpecsweepError(f"{where}: {len(lengths)} prompt lengths but {len(max_tokens)} max_tokens")
    if not lengths:
        raise SpecsweepError(f"{where}: has no prompts")
    for i, (n, m) in enumerate(zip(lengths, max_tokens, strict=True)):
        if n < 1:
            raise SpecsweepError(f"{where}: prompt {i} is empty (0 tokens)")
        if m < 1:
            raise SpecsweepError(f"{where}: prompt {i} has max_tokens {m}, must be >= 1")
    worst = max(range(len(lengths)), key=lambda i: (lengths[i] + max_tokens[i], -i))
    need = lengths[worst] + max_tokens[worst]
    if need > max_model_len:
        longest = max(range(len(lengths)), key=lambda i: (lengths[i], -i))
        over = sum(1 for n, m in zip(lengths, max_tokens, strict=True) if n + m > max_model_len)
        raise SpecsweepError(
            f"{where}: prompt {worst} needs {lengths[worst]} + {max_tokens[worst]} (max_tokens) = {need} tokens, "
            f"more than engine.max_model_len {max_model_len} ({over} of {len(lengths)} prompts too long; "
            f"the longest prompt, {longest}, has {lengths[longest]} tokens)"
        )


def check_workload_current(
    doc: Mapping[str, Any], spec: Any, where: str, seed: int | None = None, warmup: int | None = None
) -> None:
    """A workload file was made for the workload the config describes now (spec: a config.WorkloadSpec or
    its fields), with the config's seed and warm-up count: a stale file is refused before the engine starts,
    naming the keys that differ."""
    fields = dict(spec) if isinstance(spec, Mapping) else dict(vars(spec))
    expected = {k: v for k, v in fields.items() if k != "parts"} | {"parts": dict(fields.get("parts") or ())}
    got = dict(doc.get("spec") or {})
    diff = sorted(k for k in expected.keys() | got.keys() if expected.get(k) != got.get(k))
    if seed is not None and doc.get("seed") != seed:
        diff.append("seed")
    if warmup is not None and len(doc.get("warmup") or ()) != warmup:
        diff.append("warmup_prompts")
    if not diff and len(doc.get("prompts") or ()) != expected.get("num_prompts"):
        diff.append("num_prompts")
    if diff:
        shown = ", ".join(f"{k} {got.get(k)!r} -> {expected.get(k)!r}" if k in expected else k for k in diff[:4])
        raise SpecsweepError(f"{where}: made for other settings than the config's ({shown}); regenerate it")


def _literal_values(annotation: Any) -> set[str]:
    """The strings a (nested) typing.Literal annotation allows (``Literal["a", Literal["b"]] | None``)."""
    import typing

    out: set[str] = set()
    for arg in typing.get_args(annotation):
        if isinstance(arg, str):
            out.add(arg)
        else:
            out |= _literal_values(arg)
    return out


def check_speculative(spec: Mapping[str, Any] | None, where: str) -> str:
    """A ladder step's `speculative:` block, checked by the installed vLLM's own SpeculativeConfig before any
    engine starts, not by a list of specsweep's: its method must be one this vLLM has and its keys fields of
    its config (each refused in one line naming the method or key and the vLLM version); then vLLM builds the
    config, and what it refuses is refused with its first message. A drafter with a model (EAGLE-3, MTP, a
    draft model) is built only with the target model's config, so for those the method and keys are checked
    here and the rest by vLLM when the engine starts.

    Returns how far it checked: `built` (vLLM built the config), `fields` (method and keys), `no spec` or
    `no vLLM` (vLLM does not import here: the engine's own check stays)."""
    if not spec:
        return "no spec"
    try:
        import vllm
        from vllm.config import SpeculativeConfig
    except ImportError:
        return "no vLLM"
    import dataclasses

    version = getattr(vllm, "__version__", "unknown")
    fields = {f.name: f for f in dataclasses.fields(SpeculativeConfig) if f.init}
    method = spec.get("method")
    methods = _literal_values(fields["method"].type) if "method" in fields else set()
    if methods and method not in methods:
        named = sorted(m for m in methods if not m.endswith("_mtp"))  # a model's own MTP names: counted only
        more = len(methods) - len(named)
        raise SpecsweepError(
            f"{where}.method: {str(method)[:64]!r} is not a speculative method of the installed vLLM {version} "
            f"(it has: {', '.join(named)}{f' and {more} model-specific *_mtp names' if more else ''})"
        )
    unknown = sorted(str(k) for k in spec if k not in fields)
    if unknown:
        raise SpecsweepError(f"{where}.{unknown[0][:64]}: not a key of vLLM {version}'s speculative config")
    try:
        SpeculativeConfig(**dict(spec))
    except ValueError as exc:  # pydantic's ValidationError is one
        errors = getattr(exc, "errors", None)
        first = errors()[0] if callable(errors) and errors() else None
        msg = str(first["msg"]) if first else (str(exc).strip().splitlines() or [""])[0]
        if "target_model_config" in msg:  # a drafter of the target's own weights (MTP): needs the target
            return "fields"
        loc = ".".join(str(p) for p in (first or {}).get("loc", ()) if str(p) != "__init__")
        msg = " ".join(msg.removeprefix("Value error, ").split())[:300]
        raise SpecsweepError(f"{where}{'.' + loc if loc else ''}: vLLM {version} refuses it: {msg}") from None
    except (AttributeError, TypeError, AssertionError):  # a drafter with a model reads the target's config
        return "fields"
    return "built"


def check_ladder(study: Any, source: str = "config") -> dict[str, str]:
    """check_speculative for every speculative ladder step of a study (config.Study): step -> how far."""
    return {
        name: check_speculative(step.speculative, f"{source}: ladder.{name}.speculative")
        for name, step in study.ladder.items()
        if step.speculative
    }


def _ladder_marker(spec: Mapping[str, Any], version: str) -> Path:
    import hashlib
    import os

    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "specsweep" / "ladder-checks"
    blob = json.dumps({"vllm": version, "spec": spec}, sort_keys=True, default=str).encode()
    return root / hashlib.sha256(blob).hexdigest()


def check_ladder_for_run(study: Any, source: str = "config") -> None:
    """check_ladder where a config is loaded for a run (`specsweep cells`, the Snakefile's first step, so
    `snakemake -n` too): an unknown method or key is one line before any job. Importing vLLM takes seconds, so a
    block this installed vLLM (its package folder and config/speculative.py, found without importing it) has
    accepted before is not asked again: each acceptance leaves a marker under ~/.cache/specsweep/ladder-checks
    (nothing is written for a refusal). Where vLLM is not installed the engine's own check stays (Engine.start)."""
    import importlib.util

    found = importlib.util.find_spec("vllm")
    if found is None or not found.origin:
        return
    # which vLLM: its package folder and the file that defines SpeculativeConfig (size and mtime), no import
    source_file = Path(found.origin).parent / "config" / "speculative.py"
    st = source_file.stat() if source_file.is_file() else None
    version = f"{found.origin}:{st.st_size if st else 0}:{st.st_mtime_ns if st else 0}"
    todo = {
        name: step.speculative
        for name, step in study.ladder.items()
        if step.speculative and not _ladder_marker(step.speculative, version).is_file()
    }
    for name, spec in todo.items():
        if check_speculative(spec, f"{source}: ladder.{name}.speculative") == "no vLLM":
            return
        marker = _ladder_marker(spec, version)
        try:
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.touch()
        except OSError:  # a read-only home: the check is only asked again next time
            pass
