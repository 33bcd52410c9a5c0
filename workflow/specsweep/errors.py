"""One error type whose message is a single line naming the culprit (a key, a file, a cell)."""

from __future__ import annotations

#: The longest message a SpecsweepError carries: anything longer (an echoed value, a huge repr) is cut.
MAX_MESSAGE = 400


def one_line(message: object, limit: int = MAX_MESSAGE) -> str:
    """message on one line (all whitespace runs become one space), cut to `limit` characters."""
    text = str(message)
    if len(text) > 16 * limit:  # never split or join megabytes of text just to throw most of it away
        text = text[: 16 * limit]
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


class SpecsweepError(Exception):
    """A user-facing error: bad config, bad cell JSON, bad dataset, bad model path."""

    def __init__(self, message: str) -> None:
        super().__init__(one_line(message))


class EngineStartError(SpecsweepError):
    """An engine host that exited before its engine was ready. `reason` is the host's own one-line error
    (vLLM's refusal, out of memory, ...), without the host's key, exit code and log path."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = one_line(reason)
