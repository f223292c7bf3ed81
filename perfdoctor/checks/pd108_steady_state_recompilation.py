"""PD108 steady-state-recompilation: torch.compile compiles again inside analysed (warm) steps.

From :func:`perfdoctor.analysis.timing.compiled.recompiles`: per analysed step, the union of Dynamo/Inductor compile
spans
(``dynamo`` > ``entire_frame_compile``, ``(dynamo_timed)`` ranges, ``entire_backward_compile``) and of the cache
lookups that ran them, the recompiled frames (a ``Torch-Compiled Region: F/C`` with ``C > 0`` first run in that
step) and the input shapes of the step's first graph call before and at the recompile. A trace whose every
analysed step is a cold start is PD902's. The saving is the replay's
(:func:`perfdoctor.replay.transforms.compiled.no_recompiles`): the compile spans leave the steps.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from perfdoctor.analysis.timing.compiled import recompiles
from perfdoctor.checks.common import cold_reason, pct, replay_fields
from perfdoctor.checks.context import Outcome, RankContext, passed, replayed_outcome, skipped
from perfdoctor.findings import Evidence
from perfdoctor.replay.transforms.compiled import no_recompiles

CODE = "PD108"
METRICS = {
    "compile_us": "mean µs per analysed step spent compiling (torch.compile compile spans inside the steps)",
    "compile_pct": "compile_us as % of the mean step",
    "compiling_steps": "analysed steps that hold a compile span",
}

# every field a hit gives the TOML message and headline (its evidence values and fields; checked at load)
MESSAGE_FIELDS = (
    "n_steps",
    "each_ms",
    "frames",
    "cause",
    "recorded_ms",
    "compile_ms",
    "compile_pct",
)


@dataclass(frozen=True)
class Thresholds:
    """``[thresholds]`` of rules/PD108.toml: names and types checked when the catalogue loads."""

    min_saving_pct: float


FIX_SHAPES = """
The compiled graph's input shapes change between steps (the evidence shows them), and each new shape is compiled
again. Mark the changing dimension dynamic before the call (`torch._dynamo.mark_dynamic(x, 0)`), compile with
`dynamic=True` (or leave `dynamic=None`, whose automatic dynamic shapes recompile once, not per shape), or pad the
batch to a few fixed sizes (`drop_last=True` in the DataLoader for a short last batch; sequence lengths bucketed).
`TORCH_LOGS=recompiles python train.py` prints each recompilation's failed guard."""
FIX_GUARD = """
No input shape changed at the recompiles: a guard on a Python value failed (a Python int or float argument such
as a step counter or learning rate, a global, a module attribute or a flag that changes between calls, or
`model.train()`/`eval()` switching). Run `TORCH_LOGS=recompiles python train.py`: it names the failed guard.
Pass changing scalars as tensors (`torch.tensor(lr)`), keep flags constant inside the compiled function, or
compile the two modes separately."""
EXAMPLE_SHAPES_BEFORE = """
model = torch.compile(model, dynamic=False)
for x, y in loader:                 # a new batch size or sequence length: a new compile
    loss = loss_fn(model(x), y)
"""
EXAMPLE_SHAPES_AFTER = """
model = torch.compile(model)
for x, y in loader:
    torch._dynamo.mark_dynamic(x, 0)   # one graph for every batch size
    loss = loss_fn(model(x), y)
"""


def check(ctx: RankContext) -> Outcome:
    th = ctx.thresholds(Thresholds)
    if reason := cold_reason(ctx):
        return skipped(reason)
    steps = ctx.steps
    rc = recompiles(ctx.tables, steps.host_start_us, steps.host_end_us)
    hit_steps = np.flatnonzero(rc.compile_us > 0)
    metrics = {
        "compile_us": float(rc.compile_us.mean()) if rc.compile_us.size else 0.0,
        "compile_pct": pct(float(rc.compile_us.mean()) if rc.compile_us.size else 0.0, ctx.step_us),
        "compiling_steps": float(hit_steps.size),
    }
    if hit_steps.size == 0:
        return passed(**metrics)
    pid = int(ctx.tables.cpu_ops["pid"][0]) if len(ctx.tables.cpu_ops) else -1
    saving, _, method = ctx.replayed_saving(no_recompiles(ctx.replay(), rc.cut, pid))
    if saving <= 0:
        return passed(**metrics)
    numbers = ctx.step_numbers
    frames = sorted({f for k in hit_steps.tolist() for f in rc.new_frames[k]})
    shapes = [f"step #{numbers[k]}: {rc.shapes[k]}" for k in hit_steps.tolist() if rc.shapes[k]]
    cause = (
        f"changing input shapes ({'; '.join(shapes[:3])})"
        if shapes
        else "no input shape changed in the trace (or it has no shapes): a guard on a Python value, such as a "
        "scalar argument, a global or a module attribute"
    )
    ev = Evidence(
        values={
            "compile_ms_per_step": metrics["compile_us"] / 1000,
            "compile_pct": metrics["compile_pct"],
            "compiling_steps": ", ".join(f"#{numbers[k]}" for k in hit_steps.tolist()),
            "each_ms": "; ".join(f"{rc.compile_us[k] / 1000:,.1f}" for k in hit_steps.tolist()),
            "recompiled_frames": ", ".join(frames) or "none named (a first compile of a new frame)",
            "shapes": "; ".join(shapes) or "unchanged or not recorded",
        },
        steps=[numbers[k] for k in hit_steps.tolist()],
    )
    fields = {
        "n_steps": f"{hit_steps.size} of {ctx.n_steps}",
        "each_ms": ev.values["each_ms"],
        "frames": ev.values["recompiled_frames"],
        "cause": cause,
        "compile_ms": metrics["compile_us"] / 1000,
        **replay_fields(ctx),
    }
    advice = (
        {"fix": FIX_SHAPES, "example_before": EXAMPLE_SHAPES_BEFORE, "example_after": EXAMPLE_SHAPES_AFTER}
        if shapes
        else {"fix": FIX_GUARD}
    )
    return replayed_outcome(ctx, metrics, ev, saving, method, fields, advice, min_saving_pct=th.min_saving_pct)
