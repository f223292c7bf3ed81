"""PD105 python-outside-ops: on a CPU-only run, much of the step passes outside any op.

From the CPU breakdown (:mod:`perfdoctor.analysis.timing.cpu_breakdown`): per step,
the time on the training thread's process where no op or annotation is open
(``idle_causes_us["python"]``). Fires when its mean is at least
``min_saving_pct`` of the mean step, or when the analysed steps hold loops of
many same-shape small ops (a ``Linear`` per attention head) whose batching the
replay says saves at least ``min_loop_saving_pct`` of the step: their cost is
the ops' dispatch more than the Python between them. The saving is the replay's
(:func:`perfdoctor.replay.transforms.cpu_fusion.python_and_dispatch`): each gap
between ops shrinks to the trace's median gap (the per-op dispatch stays), and a
loop of many same-shape small ops (``min_loop_iterations`` repeats or more) is
batched: its ops' dispatch goes as well as the Python between them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from perfdoctor.checks.common import name_line_at, pct, steps_over
from perfdoctor.checks.context import Outcome, RankContext, passed
from perfdoctor.findings import Estimate, Evidence, Hit
from perfdoctor.replay.transforms.cpu_fusion import OpLoop, python_and_dispatch

CODE = "PD105"
METRICS = {
    "outside_us": "mean µs per step outside any op",
    "outside_pct": "outside_us as % of the mean step",
    "loops": "loops of same-shape small ops per analysed step (min_loop_iterations repeats or more)",
    "loop_dispatch_us": "mean µs per step dispatching those loops' ops (the dispatch floor per op)",
}

# every field a hit gives the TOML message and headline (its evidence values and fields; checked at load)
MESSAGE_FIELDS = (
    "ops_pct",
    "outside_ms",
    "outside_pct",
    "loops_clause",
)


@dataclass(frozen=True)
class Thresholds:
    """``[thresholds]`` of rules/PD105.toml: names and types checked when the catalogue loads."""

    min_saving_pct: float
    min_loop_iterations: int
    min_loop_saving_pct: float


def check(ctx: RankContext) -> Outcome:
    th = ctx.thresholds(Thresholds)
    outside = ctx.per_step(lambda s: s.idle_causes_us.get("python", 0.0))
    mean = float(outside.mean())
    share = pct(mean, ctx.step_us)
    whatif, loops = python_and_dispatch(ctx.replay(), ctx.tables, th.min_loop_iterations)
    loops = _in_steps(ctx, loops)
    n = max(len(ctx.step_numbers), 1)
    metrics = {
        "outside_us": mean,
        "outside_pct": share,
        "loops": len(loops) / n,
        "loop_dispatch_us": sum(lp.dispatch_us for lp in loops) / n,
    }
    if share < th.min_saving_pct and not loops:
        return passed(**metrics)
    ops_us = float(ctx.per_step(lambda s: s.busy_us).mean())
    ev = Evidence(
        values={
            "outside_ms": mean / 1000,
            "outside_pct": share,
            "ops_pct": pct(ops_us, ctx.step_us),
            "loops_per_step": metrics["loops"],
            "loop_dispatch_ms": metrics["loop_dispatch_us"] / 1000,
            "loop_shapes": [f"{lp.iterations}×{lp.body_ops}" for lp in loops[: max(1, len(loops) // n)]],
        },
        steps=steps_over(outside, ctx.per_step(lambda s: s.dur_us), th.min_saving_pct, ctx.step_numbers)
        if share >= th.min_saving_pct
        else ctx.step_numbers,
    )
    _name_python_line(ctx, ev)
    saving, _, method = ctx.replayed_saving(whatif)
    return Outcome(
        metrics=metrics,
        hit=Hit(
            evidence=ev,
            estimate=Estimate(max(saving, 0.0), method),
            fields={"loops_clause": _loops_clause(loops, n)},
            # the Python share judged here; a step fired on by its loops alone is judged on the saving
            min_saving_pct=None if share >= th.min_saving_pct else th.min_loop_saving_pct,
        ),
    )


def _name_python_line(ctx: RankContext, ev: Evidence) -> None:
    """The user's line holding most of the time outside ops (each stretch with no op open placed at its middle on
    the step's thread, weighted by its length), from the trace's Python stacks; else the hint to record them."""
    from perfdoctor.replay.transforms.cpu import outside_ops

    gaps = outside_ops(ctx.replay(), ctx.tables)
    name_line_at(ev, ctx.tables, ctx.steps.pid, ctx.steps.tid, (gaps[0] + gaps[1]) / 2, gaps[1] - gaps[0])


def _in_steps(ctx: RankContext, loops: list[OpLoop]) -> list[OpLoop]:
    """The loops that start inside an analysed step."""
    if not loops:
        return loops
    inside = ctx.step_of(np.array([lp.start_us for lp in loops])) >= 0
    return [lp for lp, ok in zip(loops, inside.tolist()) if ok]


def _loops_clause(loops: list[OpLoop], n_steps: int) -> str:
    """The message's clause on the loops ("" without any): how many per step, their shapes, their dispatch."""
    if not loops:
        return ""
    per_step = loops[: max(1, len(loops) // n_steps)]
    shapes = ", ".join(f"{lp.iterations}×{lp.body_ops}" for lp in per_step)
    ms = sum(lp.dispatch_us for lp in loops) / n_steps / 1000
    return (
        f"; {len(loops) / n_steps:.3g} loop(s) per step of same-shape small ops (iterations × ops: {shapes}) "
        f"spend {ms:.2f} ms dispatching them one by one"
    )
