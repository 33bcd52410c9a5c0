"""The sonnet corpus (vLLM's benchmarks/sonnet.txt): downloaded from a pinned commit or read from a local
copy, and in both cases checked against the sha256 of its LF-normalised text before use."""

from __future__ import annotations

import urllib.error
import urllib.request
from pathlib import Path

from .errors import SpecsweepError
from .jsonio import atomic_write_bytes, sha256_text


def normalise(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n")


def verify(text: str, sha256: str, source: str) -> str:
    text = normalise(text)
    digest = sha256_text(text)
    if digest != sha256:
        raise SpecsweepError(f"corpus {source}: sha256 of the LF-normalised text is {digest}, expected {sha256}")
    return text


def fetch(url: str, sha256: str, out: Path, local: str | None = None, timeout: float = 60.0) -> Path:
    """Write the verified corpus to out: from the local copy when given, else from url."""
    if local:
        path = Path(local)
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            raise SpecsweepError(f"corpus {path}: file not found (config key sonnet_path)") from None
        except OSError as exc:
            raise SpecsweepError(f"corpus {path}: cannot be read ({exc.strerror})") from None
        source = str(path)
    else:
        try:
            with urllib.request.urlopen(url, timeout=timeout) as resp:
                raw = resp.read()
        except (urllib.error.URLError, TimeoutError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise SpecsweepError(f"corpus {url}: download failed ({reason}); set sonnet_path to a local copy") from None
        source = url
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
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecsweepError(f"corpus {path}: file not found (run the 'corpus' rule first)") from None
    text = verify(text, sha256, str(path))
    return [line.strip() for line in text.split("\n") if line.strip()]
