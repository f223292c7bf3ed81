"""PD105 python-outside-ops: on a CPU-only run, much of the step passes outside any op.

From the CPU breakdown (:mod:`perfdoctor.analysis.cpu_breakdown`): per step,
the time on the training thread's process where no op or annotation is open
(``idle_causes_us["python"]``). Fires when its mean is at least
``min_saving_pct`` of the mean step.
"""

from __future__ import annotations

from dataclasses import dataclass

from perfdoctor.checks.common import pct, steps_over
from perfdoctor.checks.context import Outcome, RankContext, passed
from perfdoctor.findings import Estimate, Evidence, Hit

CODE = "PD105"
METRICS = {"outside_us": "mean µs per step outside any op", "outside_pct": "outside_us as % of the mean step"}

# what a hit's evidence/fields add to METRICS for the TOML message (its placeholders are checked at load)
MESSAGE_FIELDS = ("ops_pct", "outside_ms")


@dataclass(frozen=True)
class Thresholds:
    """``[thresholds]`` of rules/PD105.toml: names and types checked when the catalogue loads."""

    min_saving_pct: float


def check(ctx: RankContext) -> Outcome:
    outside = ctx.per_step(lambda s: s.idle_causes_us.get("python", 0.0))
    mean = float(outside.mean())
    share = pct(mean, ctx.step_us)
    metrics = {"outside_us": mean, "outside_pct": share}
    if share < ctx.th["min_saving_pct"]:
        return passed(**metrics)
    ops_us = float(ctx.per_step(lambda s: s.busy_us).mean())
    ev = Evidence(
        values={"outside_ms": mean / 1000, "outside_pct": share, "ops_pct": pct(ops_us, ctx.step_us)},
        steps=steps_over(outside, ctx.per_step(lambda s: s.dur_us), ctx.th["min_saving_pct"], ctx.step_numbers),
    )
    method = "mean time per step outside any op on the training process (CPU breakdown 'Python / host outside any op')"
    return Outcome(metrics=metrics, hit=Hit(evidence=ev, estimate=Estimate(mean, method)))
