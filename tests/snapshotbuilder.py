"""Small memory snapshots built in code, with the structure of ``torch.cuda.memory._snapshot()`` (its docstring in
``torch/cuda/memory.py``): ``segments`` of ``blocks`` with ``frames``, ``device_traces`` of allocator actions."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

MiB = 1 << 20
TORCH_FRAME = {
    "filename": "/venv/lib/python3.11/site-packages/torch/nn/modules/module.py",
    "line": 1790,
    "name": "_call_impl",
}
CPP_FRAME = {"filename": "??", "line": 0, "name": "c10::cuda::CUDACachingAllocator::Native::malloc"}
STDLIB_FRAME = {"filename": "/usr/lib/python3.11/runpy.py", "line": 88, "name": "_run_code"}


def frames(*user: str) -> list[dict[str, Any]]:
    """A stack, innermost first: an allocator C++ frame, a torch frame, the ``file:line:function`` user frames
    given, then a standard-library frame."""
    out: list[dict[str, Any]] = [CPP_FRAME, TORCH_FRAME]
    for u in user:
        f, line, name = u.split(":")
        out.append({"filename": f, "line": int(line), "name": name})
    return out + [STDLIB_FRAME]


def block(size: int, state: str, requested: int | None = None, stack: list[dict[str, Any]] | None = None) -> dict:
    return {
        "size": size,
        "requested_size": size if requested is None else requested,
        "state": state,
        "frames": stack or [],
    }


def segment(address: int, blocks: list[dict[str, Any]], device: int = 0, stype: str = "large") -> dict:
    offset = address
    for b in blocks:
        b["address"] = offset
        offset += b["size"]
    total = offset - address
    allocated = sum(b["size"] for b in blocks if b["state"] == "active_allocated")
    return {
        "device": device,
        "address": address,
        "total_size": total,
        "allocated_size": allocated,
        "active_size": allocated,
        "requested_size": sum(b["requested_size"] for b in blocks if b["state"] == "active_allocated"),
        "stream": 0,
        "segment_type": stype,
        "segment_pool_id": (0, 0),
        "is_expandable": False,
        "frames": [],
        "blocks": blocks,
    }


def event(action: str, addr: int, size: int, stack: list[dict[str, Any]] | None = None, **extra: Any) -> dict:
    return {"action": action, "addr": addr, "size": size, "stream": 0, "frames": stack or [], **extra}


def hand_snapshot() -> dict[str, Any]:
    """The worked example of tests/test_snapshot_analysis.py.

    Segment S1 (0x10000000, 4 MiB): block A (1 MiB, 1,000,000 requested, allocated before the history, by
    train.py:10) then 3 MiB free. Segment S2 (0x20000000, 2 MiB, cudaMalloc'd in the history): block C (2,000,000
    requested, model.py:20). History: alloc X 500,000 (model.py:30); segment_alloc S2; alloc C 2,000,000;
    free X (requested, completed); free_completed Y 300,000 (allocated before the history, loss.py:5); an OOM of
    8,000,000 bytes with 1,000,000 free on the device.
    """
    s1 = segment(
        0x10000000,
        [block(MiB, "active_allocated", 1_000_000, frames("/p/train.py:10:build")), block(3 * MiB, "inactive")],
    )
    s2 = segment(0x20000000, [block(2 * MiB, "active_allocated", 2_000_000, frames("/p/model.py:20:forward"))])
    trace = [
        event("alloc", 0x10100000, 500_000, frames("/p/model.py:30:forward"), time_us=1_000),
        event("segment_alloc", 0x20000000, 2 * MiB, time_us=1_100),
        event("alloc", 0x20000000, 2_000_000, frames("/p/model.py:20:forward"), time_us=1_200),
        event("free_requested", 0x10100000, 500_000, time_us=1_300),
        event("free_completed", 0x10100000, 500_000, time_us=1_300),
        event("free_completed", 0x10300000, 300_000, frames("/p/loss.py:5:loss"), time_us=1_400),
        {"action": "oom", "size": 8_000_000, "device_free": 1_000_000, "stream": 0, "frames": [], "time_us": 1_500},
    ]
    return {"segments": [s1, s2], "device_traces": [trace], "allocator_settings": {"expandable_segments": False}}


def write(path: Path, data: object) -> Path:
    path.write_bytes(pickle.dumps(data))
    return path
