"""Deterministic workloads: sonnet, chat, code, a dataset file's prompts and their mixes, written as JSON with
a content hash.

The same config, seed, corpus and dataset files always give byte-identical files.
"""

from __future__ import annotations

import hashlib
import random
from pathlib import Path
from typing import Any

from .config import MAX_WORKLOAD_CHARS, WorkloadSpec
from .datasets import Record
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


def dataset_prompts(
    spec: WorkloadSpec, records: list[Record], source: str, seed: int, purpose: str, n: int
) -> list[dict[str, Any]]:
    """n prompts of a dataset file, drawn without replacement in the order a seeded permutation of its records
    gives (the same for every purpose): timed prompts from its front, warm-up prompts from its back, so the two
    never share a record while the file holds enough of them (build checks it).

    A prompt's max_tokens is the workload's, or below it the line's own (max_tokens, output_tokens) or its
    recorded response's length: response token ids are counted here, a response given as text is kept for
    the engine to count with the model's tokenizer (engine.request_max_tokens), which also cuts max_tokens to
    what max_model_len leaves after the prompt."""
    if n > len(records):
        raise SpecsweepError(
            f"dataset {source}: holds {len(records)} prompts, workload '{spec.name}' draws {n} {purpose} prompts"
        )
    order = list(range(len(records)))
    rng_for(seed, spec.name, "dataset").shuffle(order)
    if purpose == "warmup":
        order.reverse()
    out = []
    for i in order[:n]:
        rec = records[i]
        item: dict[str, Any] = {"kind": spec.kind, "source": spec.name, "max_tokens": spec.max_tokens}
        item["text"] = rec.text
        if rec.messages is not None:
            item["messages"] = [dict(m) for m in rec.messages]
        own = rec.max_tokens or (len(rec.response_token_ids) if rec.response_token_ids else None)
        if own is not None:
            item["max_tokens"] = min(spec.max_tokens, own)
        elif rec.response is not None:
            item["response"] = rec.response
        item["origin"] = f"{source}: line {rec.line}"
        out.append(item)
    return out


def _base_prompts(
    spec: WorkloadSpec, lines: list[str], rng: random.Random, n: int, data: Any = None
) -> list[dict[str, Any]]:
    if spec.kind == "dataset":
        records, source, seed, purpose = data[spec.name]
        return dataset_prompts(spec, records, source, seed, purpose, n)
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


def _prompts(
    specs: dict[str, WorkloadSpec],
    name: str,
    lines: list[str],
    seed: int,
    purpose: str,
    n: int,
    datasets: dict[str, tuple[list[Record], str]],
):
    spec = specs[name]
    rng = rng_for(seed, name, purpose)
    data = {k: (recs, src, seed, purpose) for k, (recs, src) in datasets.items()}
    if spec.kind != "mix":
        return _base_prompts(spec, lines, rng, n, data)
    items: list[dict[str, Any]] = []
    for part, count in split_counts(spec.parts, n).items():
        items += _base_prompts(specs[part], lines, rng_for(seed, name, purpose, part), count, data)
    rng.shuffle(items)
    return items


def needs_datasets(specs: dict[str, WorkloadSpec], name: str) -> list[str]:
    """The workloads of kind dataset whose files `name` draws from (itself, or a mix's parts)."""
    spec = specs[name]
    names = [p for p, _ in spec.parts] if spec.kind == "mix" else [name]
    return [n for n in names if specs[n].kind == "dataset"]


def build(
    specs: dict[str, WorkloadSpec],
    name: str,
    lines: list[str],
    seed: int,
    warmup: int,
    corpus_sha256: str,
    datasets: dict[str, tuple[list[Record], str]] | None = None,
) -> dict[str, Any]:
    """The workload document for `name`: prompts, untimed warm-up prompts, provenance and content hash.
    `datasets`: for each workload of kind dataset it draws from, the file's records and its name in errors."""
    spec = specs[name]
    datasets = datasets or {}
    missing = [n for n in needs_datasets(specs, name) if n not in datasets]
    if missing:
        raise SpecsweepError(f"workload {name}: the records of dataset workload '{missing[0]}' were not given")
    prompts = _prompts(specs, name, lines, seed, "timed", spec.num_prompts, datasets)
    warm = _prompts(specs, name, lines, seed, "warmup", warmup, datasets)
    shared = {p["origin"] for p in prompts if "origin" in p} & {p["origin"] for p in warm if "origin" in p}
    if shared:
        first = min(shared)
        raise SpecsweepError(
            f"dataset {first.rsplit(': line ', 1)[0]}: too few prompts for {len(prompts)} timed and {warmup} warm-up "
            f"prompts drawn without replacement ({first} would be both); fewer prompts or a larger file"
        )
    chars = sum(len(p["text"]) + len(p.get("response", "")) for p in prompts + warm)
    if chars > MAX_WORKLOAD_CHARS:
        raise SpecsweepError(
            f"workload {name}: {chars // 2**20} MiB of prompt text, at most {MAX_WORKLOAD_CHARS // 2**20} MiB: "
            "fewer prompts or shorter ones"
        )
    for i, p in enumerate(prompts):
        p["id"] = i
    for i, p in enumerate(warm):
        p["id"] = i
    doc: dict[str, Any] = {
        "format": FORMAT,
        "name": name,
        "kind": spec.kind,
        "seed": seed,
        "spec": {k: v for k, v in spec.__dict__.items() if k != "parts" and not (k == "dataset" and v is None)}
        | {"parts": dict(spec.parts)},
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
