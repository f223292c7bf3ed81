"""PD601 transient-measurement: the profiled window is not the steady state.

From the run data of ``perfdoctor profile`` (:mod:`perfdoctor.analysis.steps.steady_state`):
the unprofiled steps right next to the profiled window are compared with the
steady-state median (the last phase after warm-up). The profiled steps
themselves carry the profiler's own overhead, so their neighbours are the
fair witness; when no neighbour exists, the window's own median is used and
the evidence says so. Fires when the ratio is off by more than ``max_deviation``
and by more than 3 robust standard deviations (IQR ÷ 1.349) of the unprofiled
steady-state steps (a window inside the run's normal noise is not a transient),
or by more than ``max_deviation`` when the window lies in an earlier phase than
the last (a phase change: the levels were already found distinct, so the last
phase's noise does not excuse it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from perfdoctor.analysis.steps.steady_state import SteadyState
from perfdoctor.checks.common import unprofiled_step_times
from perfdoctor.checks.context import JobContext, Outcome, passed, skipped
from perfdoctor.findings import Evidence, Hit

if TYPE_CHECKING:
    from perfdoctor.analysis.steps.steady_state import SteadyState
    from perfdoctor.capture.run_data import RunData

CODE = "PD601"
METRICS = {"window_deviation_pct": "|profiled-window neighbours' median ÷ steady-state median − 1|, %"}

# every field a hit gives the TOML message and headline (its evidence values and fields; checked at load)
MESSAGE_FIELDS = ("basis", "deviation_pct", "direction", "steady_ms", "window_ms")


@dataclass(frozen=True)
class Thresholds:
    """``[thresholds]`` of rules/PD601.toml: names and types checked when the catalogue loads."""

    max_deviation: float


def check(job: JobContext) -> Outcome:
    th = job.thresholds(Thresholds)
    run = job.analysis.run
    ss = run.steady_state if run is not None else None
    if ss is None:
        return skipped("no step series in the run data")
    ratio, basis = ss.window_neighbor_ratio, "the unprofiled steps next to the profiled window"
    median_s = ss.window_neighbor_median_s
    if ratio is None:
        ratio, basis, median_s = ss.window_ratio, "the profiled steps (profiler overhead included)", ss.window_median_s
    if ratio is None or median_s is None:
        return skipped("the run has no profiled window inside its step series")
    if (earlier := _phase_left(run, ss)) is not None and abs(ratio - 1.0) > th.max_deviation:
        # the window lies in a phase the run left: the phase detection already found the levels distinct, so the
        # noise of the last phase (wide when that phase is slow and noisy) does not excuse it
        return _hit(ss, ratio, abs(ratio - 1.0) * 100, median_s, f"{basis}, in {earlier},")
    if ss.unstable:
        # no single level, but a window outside the run's whole p10-p90 band is a transient all the same: the
        # profiled steps faster than 90% of the unprofiled steady steps (despite the profiler's overhead), or
        # their unprofiled neighbours outside the band
        outside = _outside_band(ss, median_s if basis.startswith("the unprofiled") else None, ss.window_median_s)
        if outside is None:
            return skipped(
                f"step times vary {ss.spread:.1f}x within the steady state and the profiled window lies inside "
                f"their p10-p90 band ({ss.p10_s * 1e3:,.1f}-{ss.p90_s * 1e3:,.1f} ms): no single level to "
                "compare it with (see PD603)"
            )
        median_s, basis = outside
        ratio = median_s / ss.median_s
        dev = abs(ratio - 1.0) * 100
        return _hit(ss, ratio, dev, median_s, basis)
    dev = abs(ratio - 1.0) * 100
    # a transient must stand out from the run's own step-to-step noise (3 robust sigmas from the IQR of the
    # unprofiled steady steps), not just from its median
    within_noise = abs(median_s - ss.median_s) <= 3 * _robust_sigma(run, ss.steady_start_step)
    if dev <= 100 * th.max_deviation or within_noise:
        return passed(window_deviation_pct=dev)
    return _hit(ss, ratio, dev, median_s, basis)


def _phase_left(run: RunData | None, ss: SteadyState) -> str | None:
    """Words for the earlier phase the profiled window lies in ("the phase of steps 0–201 (median 24.8 ms) that the
    run left at step 202"), or None: no phase change, or the window (steps.csv rows whose profiler phase is
    "active"; phases are positions in that series) reaches the last phase."""
    import numpy as np

    if not ss.phase_change:
        return None
    steps = run.steps if run is not None else None
    if steps is None or "profiler_phase" not in steps:
        return None
    active = np.flatnonzero(np.asarray(steps["profiler_phase"]) == "active")
    if not active.size or int(active.max()) >= ss.steady_start_step:
        return None
    first = int(active.min())
    for ph in ss.phases[:-1]:
        if ph.start_step <= first < ph.end_step:
            return (
                f"the phase of steps {ph.start_step}–{ph.end_step - 1} (median {ph.median_s * 1e3:,.1f} ms) that "
                f"the run left at step {ss.steady_start_step}"
            )
    return None


def _outside_band(ss: SteadyState, neighbours_s: float | None, window_s: float | None) -> tuple[float, str] | None:
    """(median s, basis text) of the first witness outside the steady state's p10-p90 band, or None: the
    unprofiled neighbours of the window outside [p10, p90], or the profiled steps below p10 (they carry the
    profiler's overhead, so only "faster" is evidence)."""
    band = f"the steady state's p10-p90 band {ss.p10_s * 1e3:,.1f}-{ss.p90_s * 1e3:,.1f} ms"
    if neighbours_s is not None and not ss.p10_s <= neighbours_s <= ss.p90_s:
        return neighbours_s, f"the unprofiled steps next to the profiled window, outside {band},"
    if window_s is not None and window_s < ss.p10_s:
        return window_s, f"the profiled steps (profiler overhead included), below {band},"
    return None


def _hit(ss: SteadyState, ratio: float, dev: float, median_s: float, basis: str) -> Outcome:
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


def _robust_sigma(run: RunData | None, start: int) -> float:
    """IQR ÷ 1.349 of the unprofiled step times from ``start`` on (s); 0 when unknown."""
    import numpy as np

    _, x = unprofiled_step_times(run, start)
    if x.size < 4:
        return 0.0
    q75, q25 = np.percentile(x, [75, 25])
    return float((q75 - q25) / 1.349)
