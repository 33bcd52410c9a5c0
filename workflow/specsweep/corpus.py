"""The sonnet corpus (vLLM's benchmarks/sonnet.txt): downloaded from a pinned commit or read from a local
copy, and in both cases checked against the sha256 of its LF-normalised text before use."""

from __future__ import annotations

import urllib.error
import urllib.request
from pathlib import Path

from .errors import SpecsweepError
from .jsonio import atomic_write_bytes, sha256_text

#: The most bytes read as a corpus (vLLM's sonnet.txt is 23 kB): a device, a FIFO or a huge file named by
#: mistake is refused, not read until the process runs out of memory.
MAX_CORPUS_BYTES = 16 * 1024 * 1024


def normalise(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n")


def verify(text: str, sha256: str, source: str) -> str:
    text = normalise(text)
    digest = sha256_text(text)
    if digest != sha256:
        raise SpecsweepError(f"corpus {source}: sha256 of the LF-normalised text is {digest}, expected {sha256}")
    return text


def read_local(path: Path, hint: str) -> bytes:
    """The bytes of a corpus file: a regular file of at most MAX_CORPUS_BYTES, else one line naming it (`hint`
    says where the path came from)."""
    try:
        if not path.is_file():  # /dev/zero, a FIFO, a folder: never opened
            if not path.exists():
                raise SpecsweepError(f"corpus {path}: file not found ({hint})")
            raise SpecsweepError(f"corpus {path}: not a regular file ({hint})")
        with open(path, "rb") as fh:
            raw = fh.read(MAX_CORPUS_BYTES + 1)
    except OSError as exc:
        raise SpecsweepError(f"corpus {path}: cannot be read ({exc.strerror})") from None
    if len(raw) > MAX_CORPUS_BYTES:
        raise SpecsweepError(f"corpus {path}: larger than {MAX_CORPUS_BYTES} bytes, not a sonnet corpus ({hint})")
    return raw


def fetch(url: str, sha256: str, out: Path, local: str | None = None, timeout: float = 60.0) -> Path:
    """Write the verified corpus to out: from the local copy when given, else from url."""
    if local:
        path = Path(local)
        raw = read_local(path, "config key sonnet_path")
        source = str(path)
    else:
        try:
            with urllib.request.urlopen(url, timeout=timeout) as resp:
                raw = resp.read(MAX_CORPUS_BYTES + 1)
        except (urllib.error.URLError, TimeoutError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise SpecsweepError(f"corpus {url}: download failed ({reason}); set sonnet_path to a local copy") from None
        source = url
        if len(raw) > MAX_CORPUS_BYTES:
            raise SpecsweepError(f"corpus {url}: larger than {MAX_CORPUS_BYTES} bytes, not a sonnet corpus")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise SpecsweepError(f"corpus {source}: not UTF-8 text") from None
    text = verify(text, sha256, source)
    atomic_write_bytes(Path(out), text.encode("utf-8"))
    return Path(out)


def load_lines(path: Path, sha256: str) -> list[str]:
    """The corpus lines (non-empty, stripped), after re-checking the checksum of the file on disk."""
    path = Path(path)
    try:
        text = read_local(path, "run the 'corpus' rule first").decode("utf-8")
    except UnicodeDecodeError:
        raise SpecsweepError(f"corpus {path}: not UTF-8 text") from None
    text = verify(text, sha256, str(path))
    return [line.strip() for line in text.split("\n") if line.strip()]
