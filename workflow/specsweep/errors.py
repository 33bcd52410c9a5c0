"""One error type whose message is a single line naming the culprit (a key, a file, a cell)."""

from __future__ import annotations


class SpecsweepError(Exception):
    """A user-facing error: bad config, bad cell JSON, bad dataset, bad model path."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(str(message).split()))
