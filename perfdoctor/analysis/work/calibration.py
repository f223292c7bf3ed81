"""Measure this machine's achievable peaks: matmul FLOP/s per dtype and copy bandwidth.

Method: square matmuls ``a @ b`` of size n×n (2·n³ FLOP each, the standard GEMM count),
best of ``repeats`` timed runs after a warm-up; copy bandwidth from ``dst.copy_(src)``
of a large buffer, counting 2 × its size (one read + one write) per copy. CUDA runs
are synchronised around each timing. On CPU this is the only meaningful peak: an MFU
against a GPU datasheet would be meaningless.

The result is stored as JSON per machine, at
``$PERFDOCTOR_HOME/calibration/<machine-id>.json`` or
``~/.cache/perfdoctor/calibration/<machine-id>.json``. A refresh overwrites that file
(it is perfdoctor's own cache, not a user file); one file holds every device measured
on the machine (``"cpu"``, ``"cuda:0"``...).
"""

from __future__ import annotations

import datetime as _dt
import glob
import hashlib
import json
import os
import platform
import re
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from perfdoctor.analysis.work.roofline import Roofs
from perfdoctor.errors import PerfDoctorError

# (matmul n, copy MiB, repeats): sizes large enough to reach steady state, small enough for 2 CPU cores
SIZES = {"quick": (256, 8, 3), "full_cpu": (2048, 256, 5), "full_cuda": (8192, 1024, 10)}
CPU_DTYPES = ("fp32", "bf16")
CUDA_DTYPES = ("fp32", "tf32", "bf16", "fp16")


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo`` on Linux, else ``platform.processor()``)."""
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
        m = re.search(r"^model name\s*:\s*(.+)$", text, re.M)
        if m:
            return m.group(1).strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown-cpu"


def machine_id(gpu_name: str | None = None) -> str:
    """``<hostname>-<8 hex>``: hostname plus a hash of hostname, CPU model and GPU name."""
    host = socket.gethostname() or "host"
    digest = hashlib.sha1(f"{host}|{cpu_model()}|{gpu_name or ''}".encode()).hexdigest()[:8]
    return f"{re.sub(r'[^A-Za-z0-9_.-]', '_', host)}-{digest}"


def calibration_dir() -> Path:
    home = os.environ.get("PERFDOCTOR_HOME")
    base = Path(home) if home else Path.home() / ".cache" / "perfdoctor"
    return base / "calibration"


def _timer(device: str) -> Callable[[], None]:
    import torch

    if device.startswith("cuda"):
        return lambda: torch.cuda.synchronize(device)
    return lambda: None


def _best_time(fn: Callable[[], object], sync: Callable[[], None], repeats: int) -> float:
    fn()
    sync()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        sync()
        best = min(best, time.perf_counter() - t0)
    return best


def measure_matmul(device: str, dtype: str, n: int, repeats: int) -> float:
    """Best achieved FLOP/s of an n×n×n matmul (2·n³ FLOP) on ``device`` in ``dtype``."""
    import torch

    tdtype = {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    a = torch.randn(n, n, device=device).to(tdtype)
    b = torch.randn(n, n, device=device).to(tdtype)
    sync = _timer(device)
    prev = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
    try:
        seconds = _best_time(lambda: torch.matmul(a, b), sync, repeats)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = prev
    return 2.0 * n**3 / seconds


def measure_copy(device: str, mib: int, repeats: int) -> float:
    """Best copy bandwidth, B/s: ``dst.copy_(src)`` of ``mib`` MiB counts 2 × size bytes."""
    import torch

    n = mib * (1 << 20) // 4
    src = torch.ones(n, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    seconds = _best_time(lambda: dst.copy_(src), _timer(device), repeats)
    return 2.0 * n * 4 / seconds


def calibrate_device(device: str, quick: bool = False) -> dict[str, Any]:
    """Measured peaks of one device: ``{"peak_flops": {dtype: FLOP/s}, "copy_bytes_per_s": B/s, ...}``."""
    import torch

    on_cuda = device.startswith("cuda")
    n, mib, repeats = SIZES["quick" if quick else ("full_cuda" if on_cuda else "full_cpu")]
    peaks = {}
    for dtype in CUDA_DTYPES if on_cuda else CPU_DTYPES:
        peaks[dtype] = measure_matmul(device, dtype, n, repeats)
    name = torch.cuda.get_device_name(device) if on_cuda else cpu_model()
    return {
        "device": device,
        "device_name": name,
        "peak_flops": peaks,
        "copy_bytes_per_s": measure_copy(device, mib, repeats),
        "method": {
            "matmul_n": n,
            "copy_mib": mib,
            "repeats": repeats,
            "quick": quick,
            "threads": torch.get_num_threads() if not on_cuda else None,
        },
    }


# a 1-minute load average above this many runnable tasks per core means other work shares the cores: a CPU
# peak measured then is understated (a 2-core box at load 8 measured fp32 0.105 TFLOP/s)
MAX_LOAD_PER_CORE = 0.75


def load_note(load_average: float | None, cores: int | None) -> str:
    """Why a measurement taken at this 1-minute ``load_average`` on ``cores`` cores is not representative
    ("" when it is, or unknown)."""
    if load_average is None or not cores or load_average <= MAX_LOAD_PER_CORE * cores:
        return ""
    return (
        f"measured under load (1-minute load average {load_average:.1f} on {cores} cores): other work "
        "shared the cores, so the CPU peaks are understated; calibrate again on an idle machine"
    )


def _load_average() -> float | None:
    try:
        return float(os.getloadavg()[0])
    except (OSError, AttributeError):  # not available on this platform
        return None


def calibrate(devices: list[str], quick: bool = False) -> dict[str, Any]:
    """Measure ``devices`` (e.g. ``["cpu", "cuda:0"]``) and return the machine record (not saved).

    The record keeps the 1-minute load average before the measurement and ``cores``; ``under_load`` says
    (:func:`load_note`) when other work shared the cores, and reports then do not use its CPU figures.
    """
    import torch

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    load, cores = _load_average(), os.cpu_count()
    return {
        "load_average_1min": load,
        "cores": cores,
        "under_load": load_note(load, cores),
        "schema": "perfdoctor.calibration",
        "version": 1,
        "machine_id": machine_id(gpu),
        "hostname": socket.gethostname(),
        "cpu_model": cpu_model(),
        "torch_version": torch.__version__,
        "measured_at": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "devices": {d: calibrate_device(d, quick) for d in devices},
    }


def save_calibration(record: dict[str, Any], directory: Path | None = None) -> Path:
    """Write ``record`` to ``<dir>/<machine_id>.json``, merging devices already stored there."""
    directory = directory or calibration_dir()
    path = directory / f"{record['machine_id']}.json"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        merged = dict(record)
        if path.exists():
            old = load_calibration(path)
            merged["devices"] = {**old.get("devices", {}), **record["devices"]}
        path.write_text(json.dumps(merged, indent=2, sort_keys=True))
    except OSError as exc:
        raise PerfDoctorError(f"{path}: cannot write calibration ({exc.strerror})") from None
    return path


def load_calibration(path: Path | str | None = None) -> dict[str, Any]:
    """This machine's stored calibration (or the file at ``path``).

    The file is named by :func:`machine_id`, which hashes the GPU name. When torch is already imported
    (``perfdoctor profile``/``calibrate``) the GPU is asked for; otherwise (``perfdoctor report``, which must
    not import torch) the file is found without it: the newest record stored for this hostname and CPU model.

    Raises:
        PerfDoctorError: no calibration stored (run ``perfdoctor calibrate``) or unreadable file.
    """
    if path is None:
        torch = sys.modules.get("torch")
        if torch is not None:
            gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
            path = calibration_dir() / f"{machine_id(gpu)}.json"
        else:
            path = _stored_for_this_host() or calibration_dir() / f"{machine_id(None)}.json"
    path = Path(path)
    try:
        record = json.loads(path.read_text())
    except FileNotFoundError:
        raise PerfDoctorError(f"{path}: no calibration for this machine; run `perfdoctor calibrate`") from None
    except (OSError, ValueError):
        raise PerfDoctorError(f"{path}: unreadable calibration file") from None
    if not isinstance(record, dict) or not isinstance(record.get("devices"), dict):
        raise PerfDoctorError(f"{path}: not a perfdoctor calibration file")
    return record


def _stored_for_this_host() -> Path | None:
    """The newest stored calibration whose hostname and CPU model are this machine's (None when none is)."""
    host, cpu = socket.gethostname(), cpu_model()
    best: tuple[str, Path] | None = None
    prefix = re.sub(r"[^A-Za-z0-9_.-]", "_", host or "host")
    for candidate in sorted(calibration_dir().glob(f"{glob.escape(prefix)}-*.json")):
        try:
            record = json.loads(candidate.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(record, dict) or record.get("hostname") != host or record.get("cpu_model") != cpu:
            continue
        stamp = str(record.get("measured_at", ""))
        if best is None or stamp > best[0]:
            best = (stamp, candidate)
    return best[1] if best else None


def roofs_from_calibration(record: dict[str, Any], device: str = "cpu") -> Roofs:
    """Measured :class:`Roofs` of ``device`` from a calibration record.

    Raises:
        PerfDoctorError: the record has no measurement for ``device``.
    """
    entry = record.get("devices", {}).get(device)
    if not isinstance(entry, dict):
        raise PerfDoctorError(f"calibration of {record.get('machine_id')} has no '{device}' measurement")
    src = (
        f"measured: perfdoctor calibrate on {record.get('hostname')} ({entry.get('device_name')}) at "
        f"{record.get('measured_at')}, best-of-{entry['method']['repeats']} {entry['method']['matmul_n']}³ "
        f"matmul and {entry['method']['copy_mib']} MiB copy"
    )
    return Roofs(
        str(entry.get("device_name")),
        {k: float(v) for k, v in entry["peak_flops"].items()},
        float(entry["copy_bytes_per_s"]),
        src,
        "measured",
    )
