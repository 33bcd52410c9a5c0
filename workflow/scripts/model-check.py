"""Checks that vLLM runs a model folder (a built one: specsweep build-model), without drafter and with ngram: the
greedy outputs of a few prompts, token for token, and the time of two passes of them on one engine.

    flock /tmp/specsweep-heavy.lock python workflow/scripts/model-check.py resources/models/gemma3-270m vanilla
    flock /tmp/specsweep-heavy.lock python workflow/scripts/model-check.py resources/models/gemma3-270m ngram

Each prints a line `RESULT <method> pass<n> <seconds>s start <seconds>s` per pass and an `IDS` and a `TEXT` line
per prompt (compare the two methods' IDS lines). `--eager` skips torch.compile (as the CPU profile does). A
diagnostic, not a measurement of the study: nothing is written but its stdout.
"""

from __future__ import annotations

import argparse
import time

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):\n    ",
    "Shall I compare thee to a summer's day?\n",
    "A list of prime numbers: 2, 3, 5, 7,",
]
NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model_dir")
    ap.add_argument("method", choices=["vanilla", "ngram"])
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--eager", action="store_true")
    args = ap.parse_args()
    from vllm import LLM, SamplingParams

    kw = {} if args.method == "vanilla" else {"speculative_config": NGRAM}
    t0 = time.time()
    llm = LLM(model=args.model_dir, max_model_len=1024, dtype="float32", seed=0, enforce_eager=args.eager, **kw)
    start = time.time() - t0
    sp = SamplingParams(temperature=0, max_tokens=args.max_tokens)
    outs = []
    for rep in (1, 2):
        t = time.time()
        outs = llm.generate(PROMPTS, sp, use_tqdm=False)
        print(f"RESULT {args.method} pass{rep} {time.time() - t:.2f}s start {start:.1f}s")
    for o in outs:
        print("IDS", args.method, list(o.outputs[0].token_ids))
        print("TEXT", args.method, repr(o.outputs[0].text[:80]))


if __name__ == "__main__":  # vLLM's engine spawns processes: keep the entry point guarded
    main()
