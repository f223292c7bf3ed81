"""Facts about the machine and software for ``run.json``; read once, never fail.

Sources: ``/proc/cpuinfo`` (CPU model and flags such as ``amx_bf16``,
``avx512_bf16``), ``torch.version``/``torch.cuda`` (versions, device), ``git``
in the script's directory (commit of the user's repo, if any).
"""

from __future__ import annotations

import os
import platform
import socket
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import NotRequired, TypedDict

import torch

# CPU flags that change which kernels (and peak FLOP/s) a CPU run gets
CPU_FLAGS_OF_INTEREST = (
    "amx_bf16",
    "amx_tile",
    "amx_int8",
    "amx_fp16",
    "avx512_bf16",
    "avx512_fp16",
    "avx512f",
    "avx512_vnni",
    "avx2",
    "fma",
    "avx_vnni",
)


# bf16 matrix instructions; oneDNN (which runs CPU bf16 GEMMs and convolutions) uses them natively
BF16_MATRIX_FLAGS = ("avx512_bf16", "amx_bf16")
# ONEDNN_MAX_CPU_ISA caps below AVX512_CORE_BF16: oneDNN then emulates bf16 through fp32, even on a CPU
# with the instructions. Source: oneDNN docs, "CPU Dispatcher Control" (dev_guide_cpu_dispatcher_control).
ISA_CAPS_WITHOUT_BF16 = ("SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX512_CORE", "AVX512_CORE_VNNI")


class CpuInfo(TypedDict):
    """``run.json["cpu"]``: see :func:`cpu_info`."""

    model: str | None
    flags: list[str]
    logical_cpus: int | None
    onednn_max_cpu_isa: str | None
    bf16_matrix_units: bool


class GitCommit(TypedDict):
    """``run.json["git"]``: the script's repository's commit and whether its tracked files are modified."""

    commit: str
    dirty: bool


class DeviceInfo(TypedDict):
    """``run.json["environment"]``: see :func:`device_info` (``capability``: "major.minor" of CUDA device 0)."""

    python: str
    torch: str
    cuda: str | None
    hip: str | None
    cuda_available: bool
    device_count: int
    device_name: str | None
    torch_threads: int
    hostname: str
    platform: str
    capability: NotRequired[str]


class MemoryInfo(TypedDict):
    """``run.json["memory"]``: see :func:`memory_info` (bytes)."""

    host_total_bytes: int | None
    host_available_bytes: int | None
    host_limit: str
    rss_bytes: int | None
    device_total_bytes: int | None


def onednn_isa_cap(env: Mapping[str, str] | None = None) -> str | None:
    """The oneDNN ISA cap set for this process, upper-cased.

    Read from ``ONEDNN_MAX_CPU_ISA`` or the older ``DNNL_MAX_CPU_ISA``.
    """
    env = os.environ if env is None else env
    value = env.get("ONEDNN_MAX_CPU_ISA") or env.get("DNNL_MAX_CPU_ISA")
    return value.strip().upper() if value and value.strip() else None


def cpu_info(cpuinfo: str | None = None, env: Mapping[str, str] | None = None) -> CpuInfo:
    """Facts about the CPU that decide which CPU kernels a run gets.

    Returns ``{"model": str|None, "flags": [...], "logical_cpus": int, "onednn_max_cpu_isa": str|None,
    "bf16_matrix_units": bool}``: ``flags`` are the ones of interest present in ``/proc/cpuinfo``;
    ``bf16_matrix_units`` is True when the CPU has AVX512-BF16 or AMX-BF16 *and* no oneDNN ISA cap
    (``ONEDNN_MAX_CPU_ISA``) hides them, i.e. bf16 GEMMs in this process run natively.
    """
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            cpuinfo = ""
    model: str | None = None
    flags: set[str] = set()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name" and model is None:
            model = value.strip()
        elif key in ("flags", "Features") and not flags:
            flags = set(value.split())
    cap = onednn_isa_cap(env)
    return {
        "model": model or platform.processor() or None,
        "flags": [f for f in CPU_FLAGS_OF_INTEREST if f in flags],
        "logical_cpus": os.cpu_count(),
        "onednn_max_cpu_isa": cap,
        "bf16_matrix_units": any(f in flags for f in BF16_MATRIX_FLAGS) and cap not in ISA_CAPS_WITHOUT_BF16,
    }


def git_commit(directory: str | os.PathLike[str]) -> GitCommit | None:
    """``{"commit": sha, "dirty": bool}`` of the git repo holding ``directory``, else None."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(directory), *args], capture_output=True, text=True, timeout=5, check=True
        ).stdout.strip()

    try:
        sha = git("rev-parse", "HEAD")
        dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
    except (OSError, subprocess.SubprocessError):
        return None
    return {"commit": sha, "dirty": dirty}


def device_info() -> DeviceInfo:
    """Torch/CUDA versions and the accelerator (or CPU) the run can use."""
    info: DeviceInfo = {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "hip": getattr(torch.version, "hip", None),
        "cuda_available": torch.cuda.is_available(),
        "device_count": torch.cuda.device_count() if torch.cuda.is_available() else 0,
        "device_name": None,
        "torch_threads": torch.get_num_threads(),
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
    }
    if info["cuda_available"]:
        try:
            info["device_name"] = torch.cuda.get_device_name(0)
            info["capability"] = ".".join(map(str, torch.cuda.get_device_capability(0)))
        except Exception:  # noqa: BLE001 - facts are best effort
            pass
    return info


def _meminfo_bytes(text: str, key: str) -> int | None:
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name.strip() == key:
            parts = value.split()
            if parts and parts[0].isdigit():
                return int(parts[0]) * (1024 if parts[1:] == ["kB"] else 1)
    return None


def _cgroup_left(root: Path) -> int | None:
    """Bytes the process's cgroup (v2) may still use: ``memory.max`` − ``memory.current``; None without a limit."""
    try:
        limit = (root / "memory.max").read_text().strip()
        if limit == "max":
            return None
        return max(int(limit) - int((root / "memory.current").read_text().strip()), 0)
    except (OSError, ValueError):
        return None


def memory_info(meminfo: str | None = None, cgroup: Path | None = None) -> MemoryInfo:
    """Memory limits at the run's start, for the projected steps until a growing series runs out (bytes).

    ``host_total_bytes`` / ``host_available_bytes``: ``MemTotal`` / ``MemAvailable`` of ``/proc/meminfo``;
    available is lowered to what the cgroup v2 limit leaves (``/sys/fs/cgroup/memory.max`` −
    ``memory.current``) when that is less, and ``host_limit`` then says "cgroup"; ``rss_bytes`` this process's
    resident set; ``device_total_bytes`` the first CUDA device's ``total_memory`` (None on CPU).
    """
    from perfdoctor.capture.step_timer import rss_bytes

    if meminfo is None:
        try:
            meminfo = Path("/proc/meminfo").read_text()
        except OSError:
            meminfo = ""
    avail = _meminfo_bytes(meminfo, "MemAvailable")
    left = _cgroup_left(cgroup if cgroup is not None else Path("/sys/fs/cgroup"))
    info: MemoryInfo = {
        "host_total_bytes": _meminfo_bytes(meminfo, "MemTotal"),
        "host_available_bytes": avail if left is None or (avail is not None and avail <= left) else left,
        "host_limit": "cgroup" if left is not None and (avail is None or left < avail) else "host",
        "rss_bytes": rss_bytes(),
        "device_total_bytes": None,
    }
    if torch.cuda.is_available():
        try:
            info["device_total_bytes"] = int(torch.cuda.get_device_properties(0).total_memory)
        except Exception:  # noqa: BLE001 - facts are best effort
            pass
    return info
