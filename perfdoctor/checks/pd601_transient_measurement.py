"""PD601 transient-measurement: the profiled window is not the steady state.

From the run data of ``perfdoctor profile`` (:mod:`perfdoctor.analysis.steady_state`):
the unprofiled steps right next to the profiled window are compared with the
steady-state median (the last phase after warm-up). The profiled steps
themselves carry the profiler's own overhead, so their neighbours are the
fair witness; when no neighbour exists, the window's own median is used and
the evidence says so. Fires when the ratio is off by more than ``max_deviation``.
"""

from __future__ import annotations

from perfdoctor.checks.context import JobContext, Outcome, passed, skipped
from perfdoctor.findings import Evidence, Hit

CODE = "PD601"
METRICS = {"window_deviation_pct": "|profiled-window neighbours' median ÷ steady-state median − 1|, %"}


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
    dev = abs(ratio - 1.0) * 100
    if dev <= 100 * job.th["max_deviation"]:
        return passed(window_deviation_pct=dev)
    ev = Evidence(values={
        "ratio": ratio, "deviation_pct": dev, "window_ms": median_s * 1e3, "steady_ms": ss.median_s * 1e3,
        "basis": basis, "steady_start_step": ss.steady_start_step, "warmup_steps": ss.warmup_steps,
        "direction": "slower" if ratio > 1 else "faster",
    })
    return Outcome(metrics={"window_deviation_pct": dev}, hit=Hit(evidence=ev, estimate=None))
