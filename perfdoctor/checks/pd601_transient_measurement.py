"""PD601 transient-measurement: the profiled window is not the steady state.

From the run data of ``perfdoctor profile`` (:mod:`perfdoctor.analysis.steady_state`):
the unprofiled steps right next to the profiled window are compared with the
steady-state median (the last phase after warm-up). The profiled steps
themselves carry the profiler's own overhead, so their neighbours are the
fair witness; when no neighbour exists, the window's own median is used and
the evidence says so. Fires when the ratio is off by more than ``max_deviation``
and by more than 3 robust standard deviations (IQR ÷ 1.349) of the unprofiled
steady-state steps (a window inside the run's normal noise is not a transient).
"""

from __future__ import annotations

from dataclasses import dataclass

from perfdoctor.checks.common import unprofiled_step_times
from perfdoctor.checks.context import JobContext, Outcome, passed, skipped
from perfdoctor.findings import Evidence, Hit

CODE = "PD601"
METRICS = {"window_deviation_pct": "|profiled-window neighbours' median ÷ steady-state median − 1|, %"}

# what a hit's evidence/fields add to METRICS for the TOML message (its placeholders are checked at load)
MESSAGE_FIELDS = ("basis", "deviation_pct", "direction", "steady_ms", "window_ms")


@dataclass(frozen=True)
class Thresholds:
    """``[thresholds]`` of rules/PD601.toml: names and types checked when the catalogue loads."""

    max_deviation: float


def check(job: JobContext) -> Outcome:
    run = getattr(job.analysis, "run", None)
    ss = getattr(run, "steady_state", None)
    if ss is None:
        return skipped("no step series in the run data")
    ratio, basis = ss.window_neighbor_ratio, "the unprofiled steps next to the profiled window"
    median_s = ss.window_neighbor_median_s
    if ratio is None:
        ratio, basis, median_s = ss.window_ratio, "the profiled steps (profiler overhead included)", ss.window_median_s
    if ratio is None or median_s is None:
        return skipped("the run has no profiled window inside its step series")
    if ss.unstable:
        return skipped(
            f"step times vary {ss.spread:.1f}x within the steady state: no single level to compare the "
            "profiled window with (see PD603)"
        )
    dev = abs(ratio - 1.0) * 100
    # a transient must stand out from the run's own step-to-step noise (3 robust sigmas from the IQR of the
    # unprofiled steady steps), not just from its median
    within_noise = abs(median_s - ss.median_s) <= 3 * _robust_sigma(run, ss.steady_start_step)
    if dev <= 100 * job.th["max_deviation"] or within_noise:
        return passed(window_deviation_pct=dev)
    ev = Evidence(
        values={
            "ratio": ratio,
            "deviation_pct": dev,
            "window_ms": median_s * 1e3,
            "steady_ms": ss.median_s * 1e3,
            "basis": basis,
            "steady_start_step": ss.steady_start_step,
            "warmup_steps": ss.warmup_steps,
            "direction": "slower" if ratio > 1 else "faster",
        }
    )
    return Outcome(metrics={"window_deviation_pct": dev}, hit=Hit(evidence=ev, estimate=None))


def _robust_sigma(run: object, start: int) -> float:
    """IQR ÷ 1.349 of the unprofiled step times from ``start`` on (s); 0 when unknown."""
    import numpy as np

    _, x = unprofiled_step_times(run, start)
    if x.size < 4:
        return 0.0
    q75, q25 = np.percentile(x, [75, 25])
    return float((q75 - q25) / 1.349)
