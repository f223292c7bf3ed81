"""PD106 device-idle-host-outside-ops: the GPU waits while the host runs code outside any op.

From the breakdown's ``python`` idle cause (:mod:`perfdoctor.replay.attribution`: device idle while the replay's
critical path is on the host process outside every op and runtime call: the script's own Python such as
preprocessing, tokenisation, metric logging, or I/O and sleeps with no op around them). The GPU counterpart of
PD105. Saving: that idle time, an upper bound (the host work itself must still happen somewhere: in DataLoader
workers, or overlapped with queued device work).
"""

from __future__ import annotations

from dataclasses import dataclass

from perfdoctor.checks.common import cold_reason, pct, steps_over
from perfdoctor.checks.context import Outcome, RankContext, passed, skipped
from perfdoctor.findings import Estimate, Evidence, Hit

CODE = "PD106"
METRICS = {
    "idle_us": "mean µs per step the device idles while the host is outside any op",
    "idle_pct": "idle_us as % of the mean step",
}

# every field a hit gives the TOML message and headline (its evidence values and fields; checked at load)
MESSAGE_FIELDS = (
    "idle_ms",
    "idle_pct",
)


@dataclass(frozen=True)
class Thresholds:
    """``[thresholds]`` of rules/PD106.toml: names and types checked when the catalogue loads."""

    min_saving_pct: float


def check(ctx: RankContext) -> Outcome:
    th = ctx.thresholds(Thresholds)
    if reason := cold_reason(ctx):  # torch.compile's compilation is Python outside any op: warm-up, not the loop
        return skipped(reason)
    idle = ctx.per_step(lambda s: s.idle_causes_us.get("python", 0.0))
    mean = float(idle.mean())
    metrics = {"idle_us": mean, "idle_pct": pct(mean, ctx.step_us)}
    if mean <= 0:  # min_saving_pct is the engine's, on the report's denominator (perfdoctor.checks.after)
        return passed(**metrics)
    ev = Evidence(
        values={"idle_ms": mean / 1000, "idle_pct": metrics["idle_pct"]},
        steps=steps_over(idle, ctx.per_step(lambda s: s.dur_us), th.min_saving_pct, ctx.step_numbers),
    )
    method = (
        "mean device idle per step while the replay's critical path is on the host outside any op "
        "(breakdown 'Python / host outside any op')"
    )
    return Outcome(
        metrics=metrics, hit=Hit(evidence=ev, estimate=Estimate(mean, method), min_saving_pct=th.min_saving_pct)
    )
