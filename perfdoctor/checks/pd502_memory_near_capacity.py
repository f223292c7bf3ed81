"""PD502 memory-near-capacity: peak reserved device memory close to the device's capacity.

Peak = the largest ``Total Reserved`` of the trace's ``[memory]`` events on the
primary device (what the caching allocator holds from the driver); capacity =
``totalGlobalMem`` of ``deviceProperties``. Near capacity the allocator starts
freeing its cache and retrying (PD501), and the batch cannot grow.
"""

from __future__ import annotations

from dataclasses import dataclass

from perfdoctor.checks.common import pct
from perfdoctor.checks.context import Outcome, RankContext, passed, skipped
from perfdoctor.findings import Evidence, Hit

CODE = "PD502"
METRICS = {
    "peak_reserved_pct": "peak reserved ÷ device memory, %",
    "peak_allocated_pct": "peak allocated ÷ device memory, %",
}

# what a hit's evidence/fields add to METRICS for the TOML message (its placeholders are checked at load)
MESSAGE_FIELDS = ("capacity_gib", "peak_reserved_gib")


@dataclass(frozen=True)
class Thresholds:
    """``[thresholds]`` of rules/PD502.toml: names and types checked when the catalogue loads."""

    min_reserved_pct: float


def check(ctx: RankContext) -> Outcome:
    mem = ctx.tables.memory
    dev = ctx.device.device
    cap = next(
        (p.get("totalGlobalMem") for p in ctx.tables.device_properties if isinstance(p, dict) and p.get("id") == dev),
        None,
    )
    if not cap:
        return skipped(f"device {dev} has no totalGlobalMem in deviceProperties")
    m = (mem["device_type"] == 1) & (mem["device_id"] == dev) & (mem["total_reserved"] >= 0)
    if not m.any():
        return skipped(f"no [memory] events with allocator totals for device {dev}")
    reserved = float(mem["total_reserved"][m].max())
    allocated = float(mem["total_allocated"][m].max())
    metrics = {"peak_reserved_pct": pct(reserved, cap), "peak_allocated_pct": pct(allocated, cap)}
    if metrics["peak_reserved_pct"] < ctx.th["min_reserved_pct"]:
        return passed(**metrics)
    ev = Evidence(
        values={
            "peak_reserved_gib": reserved / 2**30,
            "peak_allocated_gib": allocated / 2**30,
            "capacity_gib": cap / 2**30,
            "peak_reserved_pct": metrics["peak_reserved_pct"],
        },
        steps=ctx.step_numbers,
    )
    return Outcome(metrics=metrics, hit=Hit(evidence=ev, estimate=None))
