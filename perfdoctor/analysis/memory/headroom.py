"""Memory headroom and what it buys: how far the batch can grow before the peak reaches the device's capacity.

Source: the peak step of :func:`perfdoctor.analysis.memory.memory_steps.memory_over_steps` (``[memory]`` events) and the
device's ``totalGlobalMem`` (``deviceProperties``). The peak splits in two:

- ``fixed_bytes``: allocated at the start of the peak step: parameters, optimizer state, gradients kept between
  steps, whatever the step inherits; they do not grow with the batch;
- ``activation_bytes``: peak − that start level: what the step allocated and still held at its high-water mark
  (activations kept for backward, their gradients, workspaces), assumed to grow in proportion to the batch.

A batch ``k``× larger then peaks at ``fixed + k × activation``; it fits while that stays under ``fill`` of the
capacity (the allocator's reserve over what is allocated, fragmentation, needs the rest).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from perfdoctor.analysis.memory.memory_steps import memory_over_steps
from perfdoctor.analysis.steps.steps import Steps
from perfdoctor.trace.tables import TraceTables


@dataclass(frozen=True)
class Headroom:
    """One device's peak step, split (bytes; module docstring)."""

    capacity_bytes: int
    peak_allocated_bytes: int
    peak_reserved_bytes: int
    fixed_bytes: int
    activation_bytes: int
    step: int
    phase: str
    op: str | None

    def batch_factor(self, fill: float) -> float | None:
        """The largest batch, × today's, whose peak ``fixed + k × activation`` stays under ``fill`` × capacity
        (``fill`` in (0, 1]); None without an activation part (nothing in the peak grows with the batch)."""
        if self.activation_bytes <= 0:
            return None
        return (fill * self.capacity_bytes - self.fixed_bytes) / self.activation_bytes


def headroom(tables: TraceTables, steps: Steps, device: int) -> Headroom | None:
    """The headroom of GPU ``device`` at its highest step peak, or None without ``[memory]`` events carrying
    allocator totals for it or without its ``totalGlobalMem``."""
    entry: dict[str, Any] | None = next(
        (d for d in memory_over_steps(tables, steps) if d["device_type"] != "CPU" and d["device"] == device), None
    )
    if entry is None or not entry.get("capacity_bytes") or not entry["steps"]:
        return None
    peak = max(entry["steps"], key=lambda s: s["peak_allocated_bytes"])
    fixed = int(peak["start_allocated_bytes"])
    return Headroom(
        capacity_bytes=int(entry["capacity_bytes"]),
        peak_allocated_bytes=int(peak["peak_allocated_bytes"]),
        peak_reserved_bytes=int(peak["reserved_bytes"] or 0),
        fixed_bytes=fixed,
        activation_bytes=max(int(peak["peak_allocated_bytes"]) - fixed, 0),
        step=int(peak["step"]),
        phase=str(peak["phase"]),
        op=peak["op"],
    )
