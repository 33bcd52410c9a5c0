"""Checks `host_cpu` (specsweep.hostcpu) against known competitors, on whatever vLLM is installed (GPU or CPU).

One engine with random weights (load_format="dummy", no tokenizer: the prompts are token ids), four timed passes
of fresh prompts: plain; with a busy loop in another process session (it must show as ~1 `other` core); with a
busy loop in the engine host's own session (it must show as ~1 more `own` core); plain again. It also prints the
session's members, which must include vLLM's engine-core process. Run it as the leader of a session of its own,
as the pipeline runs its engine hosts (from the repository root):

    setsid -w python3 workflow/scripts/hostcpu-check.py config/architectures/qwen2.5-0.5b-instruct
    setsid -w python3 workflow/scripts/hostcpu-check.py config/architectures/opt-125m --prompts 8 --input 64 --output 16

A diagnostic, not a measurement of the study: nothing is written but its stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specsweep.hostcpu import HostCpuMeter, session_ticks


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model_dir", help="a folder with an architecture config.json (config/architectures/<shape>)")
    ap.add_argument("--prompts", type=int, default=256)
    ap.add_argument("--input", type=int, default=480, help="tokens per prompt")
    ap.add_argument("--output", type=int, default=128, help="tokens generated per prompt")
    args = ap.parse_args()
    if not (Path(args.model_dir) / "config.json").is_file():
        print(f"hostcpu-check: {args.model_dir}: no config.json there", file=sys.stderr)
        return 2
    if os.getsid(0) != os.getpid():
        print("hostcpu-check: not a session leader: run it under `setsid -w`", file=sys.stderr)
        return 2

    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    t0 = time.time()
    llm = LLM(
        model=args.model_dir,
        load_format="dummy",
        skip_tokenizer_init=True,
        gpu_memory_utilization=0.5,
        max_model_len=2048,
        max_num_seqs=256,
        seed=0,
        enforce_eager=True,
    )
    print(f"engine start {time.time() - t0:.1f} s; pid {os.getpid()} sid {os.getsid(0)}", flush=True)
    members = session_ticks(os.getsid(0))
    names = {p: Path(f"/proc/{p}/comm").read_text().strip() for p in members if Path(f"/proc/{p}").exists()}
    print("session members:", names, flush=True)
    sp = SamplingParams(max_tokens=args.output, ignore_eos=True, temperature=1.0, detokenize=False)
    rng = random.Random(0)
    busy = [sys.executable, "-c", "while True: pass"]
    for cond in ["plain", "other", "same", "plain"]:
        prompts = [
            TokensPrompt(prompt_token_ids=[rng.randrange(100, 40000) for _ in range(args.input)])
            for _ in range(args.prompts)
        ]
        competitor = None
        if cond == "other":
            competitor = subprocess.Popen(busy, start_new_session=True)
        elif cond == "same":
            competitor = subprocess.Popen(busy)
        time.sleep(0.5)
        with HostCpuMeter() as meter:
            llm.generate(prompts, sp, use_tqdm=False)
        if competitor:
            competitor.kill()
            competitor.wait()
        summary = meter.summary() or {}
        print(cond, json.dumps({k: v for k, v in summary.items() if k != "method"}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
