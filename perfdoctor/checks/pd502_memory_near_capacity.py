"""PD502 memory-near-capacity: peak reserved device memory close to the device's capacity.

Peak = the largest ``Total Reserved`` of the trace's ``[memory]`` events on the
primary device (what the caching allocator holds from the driver); capacity =
``totalGlobalMem`` of ``deviceProperties``. Near capacity the allocator starts
freeing its cache and retrying (PD501), and the batch cannot grow.

What is near capacity, and which fix frees most: the peak step's split
(:mod:`perfdoctor.analysis.memory.headroom`) into what the step starts with (parameters, optimizer state: fixed) and
what
it allocates up to its peak (activations), and the bytes each fix would free from it (:func:`fixes`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from perfdoctor.analysis.memory.headroom import Headroom, headroom
from perfdoctor.checks.common import pct
from perfdoctor.checks.context import Outcome, RankContext, passed, skipped
from perfdoctor.findings import Evidence, Hit
from perfdoctor.trace.json_value import number

CODE = "PD502"
METRICS = {
    "peak_reserved_pct": "peak reserved ÷ device memory, %",
    "peak_allocated_pct": "peak allocated ÷ device memory, %",
}

# every field a hit gives the TOML message and headline (its evidence values and fields; checked at load)
MESSAGE_FIELDS = (
    "capacity_gib",
    "peak_reserved_gib",
    "split_text",
    "peak_reserved_pct",
)

OPTIMIZER = re.compile(r"^Optimizer\.step#(\w+)\.step")
# optimizer state ÷ the step-start level, by optimizer class: Adam/AdamW keep two moments per parameter (torch.optim
# Adam: exp_avg, exp_avg_sq), so parameters + state = 3 × the parameters; SGD keeps at most a momentum buffer (at
# most half); gradients assumed set to None between steps (zero_grad's default since torch 2.0)
STATE_SHARE = {"Adam": 2 / 3, "AdamW": 2 / 3, "SGD": 1 / 2}
HALF_DTYPES = ("bf16", "fp16", "fp8")


@dataclass(frozen=True)
class Thresholds:
    """``[thresholds]`` of rules/PD502.toml: names and types checked when the catalogue loads."""

    min_reserved_pct: float


def check(ctx: RankContext) -> Outcome:
    th = ctx.thresholds(Thresholds)
    mem = ctx.tables.memory
    dev = ctx.device.device
    cap = next(
        (
            number(p.get("totalGlobalMem"))
            for p in ctx.tables.device_properties
            if isinstance(p, dict) and p.get("id") == dev
        ),
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
    if metrics["peak_reserved_pct"] < th.min_reserved_pct:
        return passed(**metrics)
    hr = headroom(ctx.tables, ctx.steps, int(dev)) if ctx.has_trace else None
    freed = fixes(ctx, hr) if hr is not None else []
    ev = Evidence(
        values={
            "peak_reserved_gib": reserved / 2**30,
            "peak_allocated_gib": allocated / 2**30,
            "capacity_gib": cap / 2**30,
            "peak_reserved_pct": metrics["peak_reserved_pct"],
            **(
                {
                    "step_start_allocated_gib": hr.fixed_bytes / 2**30,
                    "activation_gib": hr.activation_bytes / 2**30,
                    **{f"frees_{key}_gib": b / 2**30 for key, _, b, _ in freed},
                }
                if hr is not None
                else {}
            ),
        },
        steps=ctx.step_numbers,
    )
    return Outcome(
        metrics=metrics, hit=Hit(evidence=ev, estimate=None, fields={"split_text": _split_text(ctx, hr, freed)})
    )


def fixes(ctx: RankContext, hr: Headroom) -> list[tuple[str, str, float, str]]:
    """Bytes each fix frees at the peak, largest first: ``(key, label, bytes, assumption)``.

    - activation checkpointing: up to the activation part (it keeps each checkpointed block's input and one
      block's recomputed activations: an upper bound);
    - bf16 activations (autocast): half the activation part when the step's GEMMs run in a 32-bit dtype
      (:func:`perfdoctor.analysis.work.mfu.gemm_dtype`), nothing when they already run in 16 bits;
    - sharded optimizer state (ZeRO-1 / FSDP): the state's share of the step-start level (:data:`STATE_SHARE`, by
      the optimizer class of the trace's ``Optimizer.step#`` annotation) × (1 − 1/world size); nothing on one rank
      or with an unknown optimizer.
    """
    act = float(hr.activation_bytes)
    dtype = ctx.traced.gemm_dtype.dominant
    half = dtype in HALF_DTYPES
    out = [
        ("checkpointing", "activation checkpointing", act, "up to the activations held at the peak"),
        (
            "bf16_activations",
            "bf16 activations",
            0.0 if half else act / 2,
            f"activations already {dtype}" if half else f"half the activations (GEMMs run in {dtype or 'fp32'})",
        ),
    ]
    names = ctx.tables.name_array()
    opt = next((m.group(1) for n in names if (m := OPTIMIZER.match(str(n)))), None)
    dist = ctx.tables.metadata.get("distributedInfo")
    world = int(number(dist.get("world_size", 1)) or 1) if isinstance(dist, dict) else 1
    share = STATE_SHARE.get(opt or "", 0.0)
    state = share * hr.fixed_bytes
    sharded = state * (1 - 1 / world) if world > 1 else 0.0
    why = (
        f"{opt} state ≈ {share:.2f} of the step-start level, over {world} ranks"
        if opt in STATE_SHARE
        else "no Adam/AdamW/SGD step in the trace"
    )
    out.append(("sharded_optimizer", "sharded optimizer state", sharded, why if world > 1 else "one rank"))
    return sorted(out, key=lambda f: -f[2])


def _split_text(ctx: RankContext, hr: Headroom | None, freed: list[tuple[str, str, float, str]]) -> str:
    """The message's clause on what is near capacity and which fix frees most ("" without the split)."""
    if hr is None:
        return ""
    where = hr.phase + (f", {hr.op}" if hr.op else "")
    text = (
        f"; at the peak ({where}) {hr.fixed_bytes / 2**30:.1f} GiB is held from the step's start (parameters, "
        f"optimizer state) and {hr.activation_bytes / 2**30:.1f} GiB was allocated in the step (activations)"
    )
    useful = [f for f in freed if f[2] > 0]
    if not useful:
        return text
    parts = ", ".join(f"{label} ~{b / 2**30:.1f} GiB ({why})" for _, label, b, why in useful)
    return f"{text}; frees most: {parts}"
