"""Device memory from a trace: peak allocated / reserved per device, allocator runtime calls.

Sources: the ``[memory]`` instant events torch.profiler writes with
``profile_memory=True`` (each carries the caching allocator's ``Total
Allocated`` and ``Total Reserved`` bytes after the event), and the CUDA/HIP
runtime calls that ask the driver for memory (``cudaMalloc``, ``cudaFree``,
``hipMalloc``...). A busy caching allocator shows up as many such calls inside
training steps. Capacity is ``deviceProperties[].totalGlobalMem``.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from perfdoctor.trace.tables import TraceTables

ALLOCATOR_CALL = re.compile(
    r"^(cuda|hip)(Malloc|Free|MallocAsync|FreeAsync|MallocManaged|MallocHost|FreeHost|HostAlloc|HostMalloc|"
    r"HostFree|ExtMallocWithFlags)$"
)
DEVICE_TYPES = {0: "CPU", 1: "GPU"}


def device_capacity(tables: TraceTables, device: int) -> int | None:
    """Bytes of device ``device`` (``deviceProperties[].totalGlobalMem``), None when the trace does not say."""
    for p in tables.device_properties:
        total = p.get("totalGlobalMem")
        if p.get("id") == device and isinstance(total, int):
            return int(total)
    return None


def allocator_calls(tables: TraceTables) -> dict[str, int]:
    """Count of each allocator runtime call in the whole trace, e.g. ``{"cudaMalloc": 168, "cudaFree": 2}``."""
    rt = tables.tables["runtime"]
    if len(rt) == 0:
        return {}
    ids, counts = np.unique(rt["name_id"], return_counts=True)
    out: dict[str, int] = {}
    for nid, c in zip(ids.tolist(), counts.tolist()):
        name = tables.names[nid]
        if ALLOCATOR_CALL.match(name):
            out[name] = out.get(name, 0) + int(c)
    return dict(sorted(out.items()))


def memory_summary(tables: TraceTables) -> dict[str, Any]:
    """Peak memory per device and allocator activity of one trace.

    Returns:
        ``{"devices": [{device_type, device, label, peak_allocated_bytes, peak_reserved_bytes,
        capacity_bytes, peak_reserved_fraction, n_events}], "allocator_calls": {name: count}, "note": str}``.
        ``peak_*`` are the maxima of the ``[memory]`` events' totals (bytes); ``peak_reserved_fraction`` =
        peak reserved ÷ capacity (None when the capacity is unknown). ``note`` explains an empty ``devices``.
    """
    mem = tables.tables["memory"]
    devices = []
    note = ""
    if len(mem) == 0:
        note = "no [memory] events in the trace (profile with profile_memory=True to record them)"
    else:
        have = (mem["total_allocated"] >= 0) | (mem["total_reserved"] >= 0)
        if not have.any():
            note = "the trace's [memory] events carry no allocator totals (older PyTorch): peaks unknown"
        keys = sorted(
            set(zip(mem["device_type"][have].tolist(), mem["device_id"][have].tolist())), key=lambda k: (-k[0], k[1])
        )
        for dtype, dev in keys:
            m = have & (mem["device_type"] == dtype) & (mem["device_id"] == dev)
            kind = DEVICE_TYPES.get(dtype, f"device type {dtype}")
            cap = device_capacity(tables, dev) if dtype == 1 else None
            reserved = int(mem["total_reserved"][m].max())
            devices.append(
                {
                    "device_type": kind,
                    "device": int(dev),
                    "label": kind if dev < 0 else f"{kind} {dev}",
                    "peak_allocated_bytes": int(mem["total_allocated"][m].max()),
                    "peak_reserved_bytes": reserved,
                    "capacity_bytes": cap,
                    "peak_reserved_fraction": reserved / cap if cap else None,
                    "n_events": int(m.sum()),
                }
            )
    return {"devices": devices, "allocator_calls": allocator_calls(tables), "note": note}
