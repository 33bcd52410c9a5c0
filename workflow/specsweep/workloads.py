"""Deterministic workloads: sonnet, chat, code and their mixes, written as JSON with a content hash.

The same config, seed and corpus always give byte-identical files.
"""

from __future__ import annotations

import hashlib
import random
from pathlib import Path
from typing import Any

from .config import WorkloadSpec
from .errors import SpecsweepError
from .jsonio import atomic_write_json, read_json, sha256_obj

FORMAT = "specsweep-workload/1"
CODE_WORDS = ("python", "code", "function", "list", "dict", "loop", "return", "test")
CHAT_QUESTIONS = (
    "What is the author's intent?",
    "What is the main theme of this passage?",
    "Whom is the speaker addressing, and why?",
    "What images does the poet use, and what do they suggest?",
    "How does the poem treat the passage of time?",
    "What emotion dominates this excerpt?",
    "Summarise the argument of these lines.",
    "What does the poet want the reader to do?",
)
CODE_FUNCTIONS = (
    ("merge_records", "left, right"),
    ("count_items", "items"),
    ("filter_values", "values, threshold"),
    ("group_by_key", "rows, key"),
    ("flatten_list", "nested"),
    ("invert_dict", "mapping"),
    ("running_total", "numbers"),
    ("find_duplicates", "items"),
    ("chunk_list", "items, size"),
    ("top_k", "scores, k"),
    ("normalise_scores", "scores"),
    ("zip_pairs", "keys, values"),
)
SONNET_INSTRUCTION = (
    "Continue the following poem in the same style, writing new lines in the manner of Shakespeare's sonnets."
)
CHAT_INSTRUCTION = "Read this excerpt from a poem and answer the question that follows."
#: The non-excerpt part of a chat prompt: a reader's notes, none of it sonnet text.
CHAT_NOTES = (
    "I am preparing a seminar on early modern poetry and want to understand this passage better.",
    "Last week we discussed how poets of the period used seasons and nature as images.",
    "Some students found the language difficult, so plain explanations help.",
    "We have also been comparing how different readers interpret the same lines.",
    "Please consider the historical context as well as the wording itself.",
    "I would like to hear how the structure of the lines supports their meaning.",
    "Our group keeps returning to the question of who the poems are really addressed to.",
    "Several of us noticed recurring words and wondered what they signal.",
    "The discussion so far has focused on imagery, rhyme and the turn of the argument.",
    "Feel free to quote from the excerpt when you explain your reading.",
)
CODE_INSTRUCTION = (
    "Implement every function below in Python. Replace each `pass` with a working body and keep the signatures."
)


def rng_for(seed: int, *labels: str) -> random.Random:
    """An independent, platform-stable random stream for (seed, labels)."""
    digest = hashlib.sha256(":".join([str(seed), *labels]).encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def sonnet_prompt(rng: random.Random, lines: list[str], spec: WorkloadSpec) -> str:
    picked = rng.choices(lines, k=spec.lines)  # with replacement, as in the article
    return SONNET_INSTRUCTION + "\n\n" + "\n".join(picked)


def chat_prompt(rng: random.Random, lines: list[str], spec: WorkloadSpec) -> tuple[str, float]:
    """A prompt of about a sonnet prompt's size (spec.lines lines' worth of text), excerpt_share of it a
    contiguous sonnet excerpt, the rest a reader's notes (not sonnet text), then a question at the end. No
    instruction shortens the answer: answers run until EOS (the article: ~660 tokens)."""
    question = rng.choice(CHAT_QUESTIONS)
    start = rng.randrange(len(lines))
    mean_line = sum(len(x) + 1 for x in lines) / len(lines)
    target = spec.lines * mean_line  # a sonnet prompt's size in characters
    excerpt: list[str] = []
    while len("\n".join(excerpt)) < spec.excerpt_share * target:
        excerpt.append(lines[(start + len(excerpt)) % len(lines)])
    body = "\n".join(excerpt)
    notes: list[str] = []
    while len(" ".join(notes)) < (1 - spec.excerpt_share) * target:
        notes.append(rng.choice(CHAT_NOTES))
    head = CHAT_INSTRUCTION + "\n\nReader's notes: " + " ".join(notes) + "\n\nExcerpt:\n"
    tail = f"\n\nQuestion: {question}"
    text = head + body + tail
    return text, len(body) / len(text)


def code_prompt(rng: random.Random, spec: WorkloadSpec) -> str:
    funcs = rng.sample(CODE_FUNCTIONS, k=min(spec.functions, len(CODE_FUNCTIONS)))
    blocks, n = [], 0
    for name, args in funcs:
        body = [f"def {name}({args}):"]
        for _ in range(spec.comment_lines):
            n += 1
            body.append(f"    # comment line {n}: " + " ".join(rng.choices(CODE_WORDS, k=8)))
        body.append("    pass")
        blocks.append("\n".join(body))
    return CODE_INSTRUCTION + "\n\n```python\n" + "\n\n\n".join(blocks) + "\n```"


def _base_prompts(spec: WorkloadSpec, lines: list[str], rng: random.Random, n: int) -> list[dict[str, Any]]:
    out = []
    for _ in range(n):
        item: dict[str, Any] = {"kind": spec.kind, "source": spec.name, "max_tokens": spec.max_tokens}
        if spec.kind == "sonnet":
            item["text"] = sonnet_prompt(rng, lines, spec)
        elif spec.kind == "chat":
            item["text"], share = chat_prompt(rng, lines, spec)
            item["excerpt_share"] = round(share, 4)
        elif spec.kind == "code":
            item["text"] = code_prompt(rng, spec)
        else:  # pragma: no cover - config validation forbids it
            raise SpecsweepError(f"workload {spec.name}: kind {spec.kind} is not a base kind")
        out.append(item)
    return out


def split_counts(parts: tuple[tuple[str, float], ...], n: int) -> dict[str, int]:
    """Largest-remainder apportionment of n prompts to the parts of a mix (ties by name)."""
    exact = {name: share * n for name, share in parts}
    counts = {name: int(v) for name, v in exact.items()}
    left = n - sum(counts.values())
    for name in sorted(exact, key=lambda k: (-(exact[k] - counts[k]), k))[:left]:
        counts[name] += 1
    return counts


def _prompts(specs: dict[str, WorkloadSpec], name: str, lines: list[str], seed: int, purpose: str, n: int):
    spec = specs[name]
    rng = rng_for(seed, name, purpose)
    if spec.kind != "mix":
        return _base_prompts(spec, lines, rng, n)
    items: list[dict[str, Any]] = []
    for part, count in split_counts(spec.parts, n).items():
        items += _base_prompts(specs[part], lines, rng_for(seed, name, purpose, part), count)
    rng.shuffle(items)
    return items


def build(
    specs: dict[str, WorkloadSpec], name: str, lines: list[str], seed: int, warmup: int, corpus_sha256: str
) -> dict[str, Any]:
    """The workload document for `name`: prompts, untimed warm-up prompts, provenance and content hash."""
    spec = specs[name]
    prompts = _prompts(specs, name, lines, seed, "timed", spec.num_prompts)
    warm = _prompts(specs, name, lines, seed, "warmup", warmup)
    for i, p in enumerate(prompts):
        p["id"] = i
    for i, p in enumerate(warm):
        p["id"] = i
    doc: dict[str, Any] = {
        "format": FORMAT,
        "name": name,
        "kind": spec.kind,
        "seed": seed,
        "spec": {k: v for k, v in spec.__dict__.items() if k != "parts"} | {"parts": dict(spec.parts)},
        "corpus_sha256": corpus_sha256,
        "prompts": prompts,
        "warmup": warm,
    }
    doc["content_sha256"] = content_hash(doc)
    return doc


def content_hash(doc: dict[str, Any]) -> str:
    return sha256_obj({k: v for k, v in doc.items() if k != "content_sha256"})


def write(doc: dict[str, Any], path: Path) -> None:
    atomic_write_json(Path(path), doc)


def load(path: Path) -> dict[str, Any]:
    """Read a workload file and check its content hash: a hand-edited file is refused."""
    doc = read_json(Path(path), "workload file")
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or "prompts" not in doc:
        raise SpecsweepError(f"workload file {path}: not a {FORMAT} document")
    if doc.get("content_sha256") != content_hash(doc):
        raise SpecsweepError(
            f"workload file {path}: content hash mismatch (edited by hand?); delete it and rerun the workload rule"
        )
    if not doc["prompts"]:
        raise SpecsweepError(f"workload file {path}: has no prompts")
    return doc
