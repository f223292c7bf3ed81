"""Whether a trace without device activity is a CPU-only one, or a GPU one that lost its device side.

A trace that names GPUs (``deviceProperties``) or holds CUDA/HIP runtime calls
but no kernel, memcpy or memset must never be analysed as CPU-only training: its
host ops would be read as the whole step. Kineto writes every host event before
the device activities, so a file cut anywhere before them keeps the first and
loses all of the second.
"""

from __future__ import annotations

import re

from perfdoctor.errors import TraceFormatError
from perfdoctor.trace.tables import TraceTables

# runtime calls that put work on a device stream (CUDA and HIP spellings)
LAUNCH_CALL = re.compile(r"Launch|Memcpy|Memset|^cu(da)?Graph|^hip(Ext)?ModuleLaunch", re.IGNORECASE)


def named_gpus(tables: TraceTables) -> str:
    """The GPUs the trace's ``deviceProperties`` lists, as text ("4 × Tesla V100-DGXS-32GB"); "" when none."""
    gpus = [p for p in tables.device_properties if isinstance(p, dict)]
    counts: dict[str, int] = {}
    for p in gpus:
        name = str(p.get("name", "unnamed GPU"))
        counts[name] = counts.get(name, 0) + 1
    return ", ".join(f"{n} × {name}" for name, n in sorted(counts.items()))[:200]


def launch_calls(tables: TraceTables) -> str:
    """The CUDA/HIP runtime calls that put work on a device (:data:`LAUNCH_CALL`), as text
    ("9096 CUDA/HIP launch call(s) (cudaLaunchKernel, cudaMemcpyAsync)"); "" when none."""
    rt = tables.runtime
    if not len(rt):
        return ""
    is_launch = tables.names_matching(LAUNCH_CALL)[rt["name_id"]]
    if not is_launch.any():
        return ""
    calls = sorted(set(tables.name_array()[rt["name_id"][is_launch]].tolist()))
    shown = ", ".join(calls[:3]) + (", ..." if len(calls) > 3 else "")
    return f"{int(is_launch.sum())} CUDA/HIP launch call(s) ({shown})"


def check_device_side(tables: TraceTables) -> None:
    """Refuse a cut trace that may have lost its whole device side; warn on a complete one without it.

    A complete trace that names GPUs or holds launch calls but no device activity (profiled without
    ``ProfilerActivity.CUDA``, or its activities stripped) is analysed on its host side; the warning
    saying so is put first in ``tables.warnings``.

    Raises:
        TraceFormatError: the file is truncated, holds no kernel, memcpy or memset, and either names GPUs
            or holds CUDA/HIP runtime calls (its device side was lost), or has no ``deviceProperties`` key
            at all (a CPU-only Kineto trace writes an empty list, so a GPU trace cannot be ruled out).
    """
    if tables.has_device_activity:
        return
    gpus, launches = named_gpus(tables), launch_calls(tables)
    if tables.truncated and (gpus or len(tables.runtime)):
        raise TraceFormatError(
            f"{tables.path}: the file is truncated before any GPU activity was written (it holds "
            "CUDA/HIP runtime calls or GPU properties but no kernel, memcpy or memset): "
            "the device side cannot be analysed"
        )
    if tables.truncated and "deviceProperties" not in tables.metadata:
        # a CPU-only Kineto trace says so with an empty deviceProperties list; without the key (metadata written
        # after the events, or an older exporter) a cut GPU trace looks exactly like a CPU-only one
        raise TraceFormatError(
            f"{tables.path}: the file is truncated and holds no GPU activity, and it names no "
            "devices (no deviceProperties): a GPU trace cut before its device events cannot be "
            "told from a CPU-only one, so it is not analysed"
        )
    if launches:
        tables.warnings.insert(
            0,
            f"{tables.path}: GPU activity missing: {launches} put work on a GPU, but the trace "
            "holds no kernel, memcpy or memset; only host time is analysed and GPU time is "
            "unknown: this is not a CPU-only run",
        )
    elif gpus:
        prof = tables.tables["profiler"]
        why = (
            "device tracing was on: the trace holds Kineto's overhead records, so its export lost them (PD901)"
            if len(prof) and not prof["is_span"].all()
            else "profiled without ProfilerActivity.CUDA?"
        )
        tables.warnings.insert(
            0,
            f"{tables.path}: GPU activity missing: the trace names GPUs ({gpus} in "
            f"deviceProperties) but holds no kernel, memcpy or memset ({why}); only host time is analysed: if "
            "the model ran on a GPU, its GPU time is unknown and this is not a CPU-only run",
        )
