"""Prompt files in the JSON Lines forms of vLLM's benchmark datasets, read by one reader for both of their uses:
a `dataset` workload's prompts (workloads.py, measured like any workload) and the traffic that
`specsweep replay --traffic` replays (replay.py).

One record a line, a JSON object with exactly one prompt form:

  prompt            the prompt's text (vLLM's custom dataset: ``{"prompt": ...}``)
  prompt_token_ids  the prompt's token ids (replay only: ids belong to one tokenizer)
  messages          chat messages ``[{"role": ..., "content": ...}]``; a last message of role ``assistant``
                    (after at least one other) is the recorded response
  conversations     ShareGPT: ``[{"from": ..., "value": ...}]``; the first turn is the prompt and the second,
                    where there is one, the recorded response (as vLLM's ShareGPT dataset reads it)
  turns             Spec-Bench's question.jsonl: a list of user turns; the first is the prompt (as vLLM's
                    Spec-Bench dataset reads it)

and optionally

  response, response_token_ids    the recorded response (at most one response in all)
  max_tokens, output_tokens       this prompt's own output length (vLLM's custom dataset says output_tokens)
  finish_order                    the rank in which the request finished in a real run (replay)
  id                              a name for the record

Blank lines are skipped. A bad file is refused with one line naming the file and, where it applies, the line:
not a regular file, binary or not UTF-8, a line longer than MAX_LINE_BYTES, not JSON, not an object, the wrong
shape, or no record at all.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import SpecsweepError
from .jsonio import JsonRefused, loads_strict, open_bounded

#: The longest line read (16 MiB of prompt text is far past any engine's context); a longer one, a file with
#: one huge line or no line breaks, is refused before it is parsed.
MAX_LINE_BYTES = 16 * 1024 * 1024
#: The largest file read (ShareGPT as JSON Lines is ~0.6 GB).
MAX_FILE_BYTES = 4 * 1024 * 1024 * 1024
PROMPT_FORMS = ("prompt", "prompt_token_ids", "messages", "conversations", "turns")
#: The forms a dataset workload takes: text, tokenised by the engine as it tokenises every workload.
TEXT_FORMS = ("prompt", "messages", "conversations", "turns")
ASSISTANT_ROLES = ("assistant", "gpt", "chatgpt", "model", "bing", "bard")


@dataclass(frozen=True)
class Record:
    """One line of a prompt file: its prompt in one form, its recorded response and output length if given."""

    line: int
    form: str  # the prompt form the line used (PROMPT_FORMS)
    text: str | None = None  # the prompt as one text (prompt, the first turn); for messages their contents
    messages: tuple[dict[str, str], ...] | None = None  # a chat prompt (form messages)
    prompt_token_ids: tuple[int, ...] | None = None
    response: str | None = None
    response_token_ids: tuple[int, ...] | None = None
    max_tokens: int | None = None
    finish_order: int | None = None
    id: str | None = None


def file_sha256(path: Path, what: str = "dataset") -> str:
    """The sha256 of a prompt file's bytes (what a config pins), after the checks on the file itself."""
    path = Path(path)
    h = hashlib.sha256()
    try:
        with open_bounded(path, what, MAX_FILE_BYTES) as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    except OSError as exc:
        raise SpecsweepError(f"{what} {path}: cannot be read ({exc.strerror})") from None
    return h.hexdigest()


def read(path: Path, what: str = "dataset", sha256: str | None = None, forms: tuple[str, ...] = PROMPT_FORMS,
         noun: str = "prompts") -> list[Record]:  # fmt: skip
    """Every record of a prompt file, in file order. `sha256`: the file must have this digest (checked first,
    so a changed file is named as changed rather than by its first odd line). `forms`: the prompt forms
    accepted. `what` and `noun` word the errors (`traffic file ...: holds no requests`)."""
    path = Path(path)
    if sha256 is not None:
        got = file_sha256(path, what)
        if got != sha256:
            raise SpecsweepError(f"{what} {path}: sha256 is {got}, the config pins {sha256}")
    out: list[Record] = []
    try:
        with open_bounded(path, what, MAX_FILE_BYTES) as fh:  # a regular file (no device, FIFO or folder)
            n = 0
            while True:
                raw = fh.readline(MAX_LINE_BYTES + 1)
                if not raw:
                    break
                n += 1
                if len(raw) > MAX_LINE_BYTES:
                    raise SpecsweepError(f"{what} {path}: line {n}: longer than {MAX_LINE_BYTES} bytes")
                rec = _record(raw, n, f"{what} {path}: line {n}", forms)
                if rec is not None:
                    out.append(rec)
    except OSError as exc:
        raise SpecsweepError(f"{what} {path}: cannot be read ({exc.strerror})") from None
    if not out:
        raise SpecsweepError(f"{what} {path}: holds no {noun}")
    return out


def _record(raw: bytes, n: int, where: str, forms: tuple[str, ...]) -> Record | None:
    if b"\x00" in raw:
        raise SpecsweepError(f"{where}: binary data (a NUL byte), not JSON Lines text")
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise SpecsweepError(f"{where}: not UTF-8 text") from None
    if not line.strip():
        return None
    try:
        obj = loads_strict(line)
    except json.JSONDecodeError as exc:
        raise SpecsweepError(f"{where}: not JSON ({exc.msg})") from None
    except JsonRefused as exc:  # a duplicate key, NaN, Infinity
        raise SpecsweepError(f"{where}: {exc}") from None
    except RecursionError:
        raise SpecsweepError(f"{where}: not JSON this reads (nested deeper than Python's stack)") from None
    except ValueError as exc:  # an integer of more digits than Python converts
        raise SpecsweepError(f"{where}: not JSON this reads ({str(exc)[:80]})") from None
    if not isinstance(obj, dict):
        raise SpecsweepError(f"{where}: not a JSON object")
    present = [k for k in PROMPT_FORMS if k in obj]
    if len(present) != 1 or present[0] not in forms:
        raise SpecsweepError(f"{where}: needs exactly one of {', '.join(forms)} (has {', '.join(present) or 'none'})")
    form = present[0]
    value = obj[form]
    fields: dict[str, Any] = {}
    response: str | None = None
    if form == "prompt":
        fields["text"] = _text(value, f"{where}: prompt")
    elif form == "prompt_token_ids":
        fields["prompt_token_ids"] = _ids(value, f"{where}: prompt_token_ids")
    elif form == "turns":
        if not isinstance(value, list) or not value:
            raise SpecsweepError(f"{where}: turns is not a non-empty list of strings (Spec-Bench's form)")
        fields["text"] = _text(value[0], f"{where}: turns[0]")
    elif form == "messages":
        msgs = _turns(value, "role", "content", f"{where}: messages")
        if len(msgs) > 1 and msgs[-1]["role"] == "assistant":
            response = msgs[-1]["content"]
            msgs = msgs[:-1]
        if all(m["role"] == "assistant" for m in msgs):
            raise SpecsweepError(f"{where}: messages holds no message of another role than assistant")
        fields["messages"] = tuple(msgs)
        fields["text"] = "\n\n".join(m["content"] for m in msgs)
    else:
        turns = _turns(value, "from", "value", f"{where}: conversations")
        if turns[0]["from"].lower() in ASSISTANT_ROLES:
            raise SpecsweepError(f"{where}: conversations[0] is the assistant's turn, not a prompt")
        fields["text"] = _text(turns[0]["value"], f"{where}: conversations[0].value")
        if len(turns) > 1:
            response = turns[1]["value"]
    given = [k for k in ("response", "response_token_ids") if k in obj]
    if len(given) > 1 or (given and response is not None):
        raise SpecsweepError(f"{where}: more than one recorded response ({', '.join(given)} and the {form})")
    if "response" in obj:
        if not isinstance(obj["response"], str):
            raise SpecsweepError(f"{where}: response is not a string")
        response = obj["response"]
    if "response_token_ids" in obj:
        fields["response_token_ids"] = _ids(obj["response_token_ids"], f"{where}: response_token_ids")
    lengths = [k for k in ("max_tokens", "output_tokens") if k in obj]
    if len(lengths) > 1:
        raise SpecsweepError(f"{where}: both max_tokens and output_tokens: give one")
    if lengths:
        m = obj[lengths[0]]
        if not isinstance(m, int) or isinstance(m, bool) or m < 1:
            raise SpecsweepError(f"{where}: {lengths[0]} {m!r} is not a token count (an integer >= 1)")
        fields["max_tokens"] = m
    rank = obj.get("finish_order")
    if rank is not None and (not isinstance(rank, int) or isinstance(rank, bool) or rank < 0):
        raise SpecsweepError(f"{where}: finish_order {rank!r} is not a rank (an integer >= 0)")
    name = obj.get("id", obj.get("question_id"))
    return Record(
        line=n,
        form=form,
        response=response,
        finish_order=rank,
        id=None if name is None else str(name)[:200],
        **fields,
    )


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise SpecsweepError(f"{where}: not a non-empty string")
    return value


def _ids(value: Any, where: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not value:
        raise SpecsweepError(f"{where}: not a non-empty list of token ids")
    for t in value:
        if not isinstance(t, int) or isinstance(t, bool) or t < 0:
            raise SpecsweepError(f"{where}: token id {t!r} is not an integer >= 0")
    return tuple(value)


def _turns(value: Any, role: str, content: str, where: str) -> list[dict[str, str]]:
    if not (
        isinstance(value, list)
        and value
        and all(isinstance(m, dict) and isinstance(m.get(role), str) and isinstance(m.get(content), str) for m in value)
    ):
        raise SpecsweepError(f"{where}: not a non-empty list of {{{role}, {content}}} strings")
    return [{role: m[role], content: m[content]} for m in value]
