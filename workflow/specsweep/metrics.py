"""vLLM's in-process metrics (``LLM.get_metrics()``): snapshots, deltas over the timed pass, K and alpha."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

COUNTERS = (
    "vllm:spec_decode_num_drafts",
    "vllm:spec_decode_num_draft_tokens",
    "vllm:spec_decode_num_accepted_tokens",
    "vllm:generation_tokens",
    "vllm:prompt_tokens",
    "vllm:num_preemptions",
)
PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos"
#: One observation per engine step (the number of tokens it scheduled): its count is the step count.
STEPS_HISTOGRAM = "vllm:iteration_tokens_total"


def snapshot(metrics: Iterable[Any]) -> dict[str, Any]:
    """Sum the metrics we use over their label sets (engines)."""
    snap: dict[str, Any] = {"counters": {name: 0 for name in COUNTERS}, "per_pos": [], "steps": 0, "step_tokens": 0.0}
    for m in metrics:
        kind = type(m).__name__
        if m.name in COUNTERS and kind == "Counter":
            snap["counters"][m.name] += int(m.value)
        elif m.name == PER_POSITION and kind == "Vector":
            vals = [int(v) for v in m.values]
            acc = snap["per_pos"]
            acc.extend([0] * (len(vals) - len(acc)))
            for i, v in enumerate(vals):
                acc[i] += v
        elif m.name == STEPS_HISTOGRAM and kind == "Histogram":
            snap["steps"] += int(m.count)
            snap["step_tokens"] += float(m.sum)
    return snap


def delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    counters = {k: after["counters"][k] - before["counters"].get(k, 0) for k in after["counters"]}
    n = max(len(before["per_pos"]), len(after["per_pos"]))
    b = before["per_pos"] + [0] * (n - len(before["per_pos"]))
    a = after["per_pos"] + [0] * (n - len(after["per_pos"]))
    return {
        "counters": counters,
        "per_pos": [y - x for x, y in zip(b, a, strict=True)],
        "steps": after["steps"] - before["steps"],
        "step_tokens": after["step_tokens"] - before["step_tokens"],
    }


def spec_summary(d: dict[str, Any]) -> dict[str, Any]:
    """K = 1 + accepted/drafts (mean tokens a verify step yields), alpha = accepted/draft tokens."""
    c = d["counters"]
    drafts = c["vllm:spec_decode_num_drafts"]
    draft_tokens = c["vllm:spec_decode_num_draft_tokens"]
    accepted = c["vllm:spec_decode_num_accepted_tokens"]
    per_pos = d["per_pos"]
    return {
        "drafts": drafts,
        "draft_tokens": draft_tokens,
        "accepted": accepted,
        "accepted_per_pos": per_pos,
        "acceptance_per_pos": [round(v / drafts, 6) if drafts else None for v in per_pos],
        "K": 1.0 + accepted / drafts if drafts else None,
        "alpha": accepted / draft_tokens if draft_tokens else None,
    }
