"""PD105 python-outside-ops: on a CPU-only run, much of the step passes outside any op.

From the CPU breakdown (:mod:`perfdoctor.analysis.timing.cpu_breakdown`): per step,
the time on the training thread's process where no op or annotation is open
(``idle_causes_us["python"]``). Fires when its mean is at least
``min_saving_pct`` of the mean step. The saving is the replay's
(:func:`perfdoctor.replay.transforms.cpu_fusion.python_and_dispatch`): each gap
between ops shrinks to the trace's median gap (the per-op dispatch stays), and a
loop of many same-shape small ops (``min_loop_iterations`` repeats or more) is
batched: its ops' dispatch goes as well as the Python between them.
"""

from __future__ import annotations

from dataclasses import dataclass

from perfdoctor.checks.common import pct, steps_over
from perfdoctor.checks.context import Outcome, RankContext, passed
from perfdoctor.findings import Estimate, Evidence, Hit
from perfdoctor.replay.transforms.cpu_fusion import python_and_dispatch

CODE = "PD105"
METRICS = {"outside_us": "mean µs per step outside any op", "outside_pct": "outside_us as % of the mean step"}

# every field a hit gives the TOML message and headline (its evidence values and fields; checked at load)
MESSAGE_FIELDS = (
    "ops_pct",
    "outside_ms",
    "outside_pct",
)


@dataclass(frozen=True)
class Thresholds:
    """``[thresholds]`` of rules/PD105.toml: names and types checked when the catalogue loads."""

    min_saving_pct: float
    min_loop_iterations: int


def check(ctx: RankContext) -> Outcome:
    th = ctx.thresholds(Thresholds)
    outside = ctx.per_step(lambda s: s.idle_causes_us.get("python", 0.0))
    mean = float(outside.mean())
    share = pct(mean, ctx.step_us)
    metrics = {"outside_us": mean, "outside_pct": share}
    if share < th.min_saving_pct:
        return passed(**metrics)
    ops_us = float(ctx.per_step(lambda s: s.busy_us).mean())
    ev = Evidence(
        values={"outside_ms": mean / 1000, "outside_pct": share, "ops_pct": pct(ops_us, ctx.step_us)},
        steps=steps_over(outside, ctx.per_step(lambda s: s.dur_us), th.min_saving_pct, ctx.step_numbers),
    )
    whatif, _ = python_and_dispatch(ctx.replay(), ctx.tables, th.min_loop_iterations)
    saving, _, method = ctx.replayed_saving(whatif)
    return Outcome(metrics=metrics, hit=Hit(evidence=ev, estimate=Estimate(max(saving, 0.0), method)))
