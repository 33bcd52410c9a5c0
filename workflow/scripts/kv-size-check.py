"""Times one engine start and two decode passes at each KV-cache size, with a config's own engine settings.

Each size is measured in a fresh process (as the pipeline starts each engine host), with the config's engine
arguments and environment for its first model and a ladder step (specsweep.engine.engine_kwargs and cell_env),
only `engine.kv_cache_memory_bytes` replaced. Per size it prints the engine start's CPU seconds and wall
seconds, the process's peak resident memory and the wall seconds of two passes of the same prompts (8 requests
of 64 tokens, greedy, every request its full length). From the repository root, with the model built (make demo):

    python3 workflow/scripts/kv-size-check.py config/smoke.yaml resources/models/smollm2-135m-instruct \
        --sizes 1073741824 536870912 --rounds 3

A diagnostic, not a measurement of the study: nothing is written but its stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PROMPTS = ["# sort a list of numbers\ndef sort_numbers(xs):\n", "Shall I compare thee to a summer's day?\n"] * 4


def _cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _study_cell(config: str, step: str):
    """The config's study and its first cell of ladder step `step` (SpecsweepError naming the culprit)."""
    import yaml

    from specsweep.config import build_study
    from specsweep.errors import SpecsweepError

    try:
        study = build_study(yaml.safe_load(Path(config).read_text()))
    except OSError as exc:
        raise SpecsweepError(f"config {config}: {exc.strerror or exc}") from None
    cell = next((c for c in study.cells if c.step == step), None)
    if cell is None:
        raise SpecsweepError(f"config {config}: no cell of ladder step {step!r} in its groups")
    return study, cell


def _one(config: str, model: str, step: str, size: int) -> dict:
    """In this process: start the engine at `size` bytes of KV cache and time two passes."""
    from specsweep.engine import cell_env, engine_kwargs

    study, cell = _study_cell(config, step)
    os.environ.update(cell_env(study, cell))
    kwargs = engine_kwargs(study, cell, model) | {"kv_cache_memory_bytes": size}
    from vllm import LLM, SamplingParams

    c0, w0 = _cpu_s(), time.monotonic()
    llm = LLM(**kwargs)
    start = {"start_cpu_s": _cpu_s() - c0, "start_wall_s": time.monotonic() - w0}
    params = SamplingParams(max_tokens=64, temperature=0.0, ignore_eos=True)
    passes = []
    for _ in range(2):
        t0 = time.monotonic()
        llm.generate(PROMPTS, params, use_tqdm=False)
        passes.append(time.monotonic() - t0)
    peak_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6  # ru_maxrss is in KiB on Linux
    return {"kv_bytes": size} | start | {"peak_rss_gb": peak_gb, "pass_s": passes}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("config", help="a specsweep config (its first model, engine settings and env)")
    ap.add_argument("model_dir", help="the model folder the engine loads")
    ap.add_argument("--step", default="vanilla", help="the ladder step whose settings the engine takes")
    ap.add_argument("--sizes", type=int, nargs="+", default=[1 << 30, 1 << 29], help="KV-cache sizes in bytes")
    ap.add_argument("--rounds", type=int, default=2, help="engine starts per size, sizes interleaved")
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)  # the child: one size, one JSON line
    args = ap.parse_args()
    if not (Path(args.model_dir) / "config.json").is_file():
        print(f"kv-size-check: {args.model_dir}: no config.json there", file=sys.stderr)
        return 2
    from specsweep.errors import SpecsweepError

    try:
        _study_cell(args.config, args.step)
    except SpecsweepError as exc:
        print(f"kv-size-check: {exc}", file=sys.stderr)
        return 2
    if args.one is not None:
        print("RESULT " + json.dumps(_one(args.config, args.model_dir, args.step, args.one)), flush=True)
        return 0
    for rnd in range(1, args.rounds + 1):
        for size in args.sizes:
            cmd = [sys.executable, __file__, args.config, args.model_dir, "--step", args.step, "--one", str(size)]
            out = subprocess.run(cmd, capture_output=True, text=True, check=False)
            lines = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")]
            if out.returncode != 0 or not lines:
                print(f"kv-size-check: size {size}: the engine process failed:\n{out.stderr[-2000:]}", file=sys.stderr)
                return 1
            r = json.loads(lines[-1].removeprefix("RESULT "))
            print(
                f"round {rnd} kv {size / 2**20:.0f} MiB: start {r['start_cpu_s']:.1f} s CPU "
                f"({r['start_wall_s']:.1f} s wall), peak {r['peak_rss_gb']:.2f} GB, "
                f"passes {' / '.join(f'{p:.2f}' for p in r['pass_s'])} s"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
