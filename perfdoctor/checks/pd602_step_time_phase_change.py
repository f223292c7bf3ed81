"""PD602 step-time-phase-change: the run's step time shifts level, or keeps growing.

From the run data of ``perfdoctor profile`` (:mod:`perfdoctor.analysis.steps.steady_state`):
a permanent level shift (phases) or a significant upward trend over the steady span.
A stretch the run recovers from (the last phase within ``min_shift`` of the first)
is not a phase change; a series without one level (``SteadyState.unstable``) is
left to PD603.
The saving bound is what the slowest state costs over the fastest: last phase
median − fastest phase median for phases, the fitted rise over the run for a trend.

One definition for its µs and its share: both come from the run's unprofiled steps, so the share is of the run's
median unprofiled steady step (the later state's), said in the message (``cost``); the estimate carries that step
(``Estimate.basis.step_us``) and the engine states the same share of the report's denominator
(:func:`perfdoctor.checks.restate.on_denominator`): the same number where the denominator is that step (a run
without a trace, or a profile run's unprofiled step), restated with both figures in its method otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from perfdoctor.analysis.steps.steady_state import SteadyState
from perfdoctor.checks.common import unprofiled_step_times
from perfdoctor.checks.context import JobContext, Outcome, passed, skipped
from perfdoctor.findings import Basis, Estimate, Evidence, Hit

if TYPE_CHECKING:
    from perfdoctor.capture.run_data import RunData

CODE = "PD602"
METRICS = {
    "n_phases": "level phases of the step-time series",
    "trend_rise_pct": "fitted rise over the run, % of median",
}

# every field a hit gives the TOML message and headline (its evidence values and fields; checked at load)
MESSAGE_FIELDS = ("change_pct", "change_step", "cost", "first_ms", "last_ms", "what")
STEP_WORDS = "the run's median unprofiled steady step"


def _estimate(saving_us: float, method: str, steady_s: float) -> tuple[Estimate | None, str]:
    """The estimate of a saving of ``saving_us`` (µs, from the unprofiled steps) as part of the run's median
    unprofiled steady step ``steady_s`` (s), and the message's ``cost`` clause saying what its share is of."""
    if saving_us <= 0 or not steady_s > 0:
        return None, ""
    est = Estimate(saving_us, method, basis=Basis(step_us=steady_s * 1e6, step_words=STEP_WORDS))
    share = 100.0 * saving_us / (steady_s * 1e6)
    cost = f"; it costs {saving_us / 1000:,.1f} ms per step, {share:.1f}% of {STEP_WORDS} ({steady_s * 1e3:,.1f} ms)"
    return est, cost


@dataclass(frozen=True)
class Thresholds:
    """``[thresholds]`` of rules/PD602.toml: names and types checked when the catalogue loads."""

    min_shift: float
    min_steps: int


def check(job: JobContext) -> Outcome:
    th = job.thresholds(Thresholds)
    run = job.analysis.run
    ss = run.steady_state if run is not None else None
    if ss is None:
        return skipped("no step series in the run data")
    metrics = {"n_phases": len(ss.phases), "trend_rise_pct": 100 * ss.trend_rise_ratio}
    steady = ss.n_steps - ss.warmup_steps
    if steady < th.min_steps:
        return skipped(
            f"only {steady} steps after warm-up: too few to tell a phase change or a trend from noise "
            f"(needs {th.min_steps}; profile with more --steps)",
            **metrics,
        )
    if ss.unstable:
        return skipped(
            f"step times vary {ss.spread:.1f}x within the steady state (p10 {ss.p10_s * 1e3:.1f} ms, p90 "
            f"{ss.p90_s * 1e3:.1f} ms): a phase change cannot be told from that noise (see PD603)",
            **metrics,
        )
    first = ss.phases[0]
    if ss.phase_change and abs(ss.phases[-1].median_s / first.median_s - 1) < th.min_shift:
        # a slow (or fast) stretch the run recovered from: the later state is the start's, nothing to extrapolate
        return passed(**metrics)
    if ss.phase_change:
        return _phase_hit(ss, metrics)
    if ss.trend_detected and ss.trend_us_per_step > 0:
        jump = _level_change(run)
        # one jump explains the series better than a slope: report it as a level change
        return _jump_hit(ss, jump, metrics) if jump is not None else _trend_hit(ss, metrics)
    return passed(**metrics)


def _hit(ev: Evidence, saving_us: float, method: str, ss: SteadyState, metrics: dict[str, float]) -> Outcome:
    """The outcome of a hit with ``ev`` and a saving of ``saving_us`` per step (:func:`_estimate`)."""
    est, cost = _estimate(saving_us, method, ss.median_s)
    return Outcome(metrics=metrics, hit=Hit(evidence=ev, estimate=est, fields={"cost": cost}))


def _phase_hit(ss: SteadyState, metrics: dict[str, float]) -> Outcome:
    """The steady state's phases change level: the last phase against the fastest."""
    last, best = ss.phases[-1], min(ss.phases, key=lambda p: p.median_s)
    change = ss.phases[1]
    what = "; ".join(f"steps {p.start_step}–{p.end_step - 1}: {p.median_s * 1e3:.1f} ms" for p in ss.phases)
    ev = Evidence(
        values={
            "what": f"step time changes level at step {change.start_step} ({what})",
            "first_ms": ss.phases[0].median_s * 1e3,
            "last_ms": last.median_s * 1e3,
            "change_pct": 100 * (last.median_s / ss.phases[0].median_s - 1),
            "change_step": change.start_step,
            "n_phases": len(ss.phases),
        },
        steps=[p.start_step for p in ss.phases[1:]],
    )
    saving = max(last.median_s - best.median_s, 0.0) * 1e6
    return _hit(ev, saving, "last phase median − fastest phase median (per step)", ss, metrics)


def _jump_hit(ss: SteadyState, jump: tuple[int, float, float], metrics: dict[str, float]) -> Outcome:
    """A trend that one jump (``(step, median before s, median after s)``: :func:`_level_change`) explains better
    than a slope: a level change."""
    step, before_s, after_s = jump
    ev = Evidence(
        values={
            "what": f"step time changes level at step {step} ({before_s * 1e3:.1f} ms before, "
            f"{after_s * 1e3:.1f} ms after)",
            "first_ms": before_s * 1e3,
            "last_ms": after_s * 1e3,
            "change_pct": 100 * (after_s / before_s - 1),
            "change_step": step,
            "n_phases": 2,
        },
        steps=[step],
    )
    saving = max(after_s - before_s, 0.0) * 1e6
    return _hit(ev, saving, "median after the change − median before (per step)", ss, metrics)


def _trend_hit(ss: SteadyState, metrics: dict[str, float]) -> Outcome:
    """Step time that keeps growing over the steady span: its fitted rise (Theil-Sen)."""
    rise_us = ss.trend_rise_ratio * ss.median_s * 1e6
    ev = Evidence(
        values={
            "what": (
                f"step time keeps growing: +{ss.trend_us_per_step:.3g} µs per step, "
                f"+{100 * ss.trend_rise_ratio:.0f}% of the median over the steady span"
            ),
            "first_ms": ss.median_s * 1e3,
            "last_ms": (ss.median_s * 1e6 + rise_us / 2) / 1e3,
            "change_pct": 100 * ss.trend_rise_ratio,
            "change_step": ss.steady_start_step,
            "n_phases": 1,
        }
    )
    return _hit(ev, rise_us, "fitted rise of step time over the steady span (Theil-Sen)", ss, metrics)


def _level_change(run: RunData | None, min_segment: int = 10) -> tuple[int, float, float] | None:
    """(step, median before s, median after s) when one jump fits the unprofiled steady steps
    better than a straight line (sum of absolute residuals at most 60% of the line's), else None."""
    idx, x = unprofiled_step_times(run)
    if x.size < 2 * min_segment:
        return None
    slope, intercept = np.polyfit(idx, x, 1)
    line_cost = float(np.abs(x - (slope * idx + intercept)).sum())
    best = None
    for t in range(min_segment, x.size - min_segment + 1):
        a, b = x[:t], x[t:]
        cost = float(np.abs(a - np.median(a)).sum() + np.abs(b - np.median(b)).sum())
        if best is None or cost < best[0]:
            best = (cost, t)
    if best is None or best[0] > 0.6 * line_cost:
        return None
    t = best[1]
    return int(idx[t]), float(np.median(x[:t])), float(np.median(x[t:]))
