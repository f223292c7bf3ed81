"""The report's one denominator: the step time every finding's saving is a share of.

A check states a saving in µs per step (:class:`perfdoctor.findings.Estimate`); the engine divides every saving by
this one number, so two findings' percentages compare as their µs do. The rule, by input:

- one trace: the mean step time of its analysed steps (the primary device's step windows), which is also the
  recorded mean step a replayed saving is taken from (recorded mean − replayed mean with the fix);
- several ranks of one job: the job's step, the longest of the ranks' mean analysed steps (said "longest mean step";
  the rank spread compares medians, and a rank with the longest median but not the longest mean is named). Ranks of
  a data-parallel job move in lock-step (each step ends in collectives that wait for every rank), so the job steps
  at the pace of its longest rank step; a rank's saving is then a share of the job's step, never of its own;
- a ``perfdoctor profile`` run directory: the unprofiled step, the step the user runs and every replayed saving is
  taken from (:mod:`perfdoctor.replay.unprofiled`): the analysed steps replayed without the profiler's measured
  per-event overhead, or, where that cannot be estimated, scaled by the run's median unprofiled steady step ÷ their
  recorded mean. Without an unprofiled steady level (an unstable series), the mean of the analysed steps;
- a run directory without a trace (nothing analysed): the median of the unprofiled steady-state steps, the only
  step the report has.

Firing thresholds (``min_saving_pct``) compare against the same number: a check hands its threshold to the engine
(:attr:`perfdoctor.findings.Hit.min_saving_pct`), which judges it here (:func:`perfdoctor.checks.after.gate`). Two
gates stay the check's own, on the rank's mean step: PD103's measured launch idle and PD105's measured Python
outside ops (each the problem's size, not its saving, on the rank whose step it is).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from perfdoctor.analysis.rank import Analysis, RankResult, UnprofiledStep
from perfdoctor.checks.common import step_list_text
from perfdoctor.checks.context import RankContext


@dataclass(frozen=True)
class StepDenominator:
    """The step time (µs) every saving is a share of, the words that say what it is, and the rank it comes from
    (None when it is not one rank's)."""

    value_us: float
    definition: str
    rank: int | None = None

    def pct(self, saving_us: float) -> float:
        """``saving_us`` as % of the denominator (0 when it is not positive)."""
        return 100.0 * saving_us / self.value_us if self.value_us > 0 else 0.0


_REGEX_PARTS = re.compile(r"[\^$]|\(.*?\)|\\[dDsSwW][+*]?")  # of a step-marker regex: "^ProfilerStep#(\d+)$"


def _rank_words(ctx: RankContext) -> str:
    """'mean of 6 analysed steps (ProfilerStep #5–#10)' for one rank's context, without an article (the callers
    write "the …" or "rank 3's …")."""
    numbers = ctx.step_numbers
    if ctx.rank.steps.source == "whole-trace":
        return "whole trace window (no step markers: one step)"
    marker = _REGEX_PARTS.sub("", ctx.rank.steps.marker or "").strip("# ") or "step"
    which = f"({marker} {step_list_text(numbers)})"
    if len(numbers) == 1:
        return f"one analysed step {which}"
    return f"mean of {len(numbers)} analysed steps {which}"


def step_denominator(analysis: Analysis[RankResult], rank_ctx: list[RankContext]) -> StepDenominator | None:
    """The report's denominator (see the module docstring) from the ranks' contexts
    (:class:`perfdoctor.checks.context.RankContext`: ``step_us``, ``step_numbers``, ``rank``) and, without a rank
    that has steps, the run's steady state (``analysis.run.steady_state.median_s``). None when there is no step."""
    timed = [c for c in rank_ctx if c.n_steps and c.step_us > 0]
    if not timed:
        ss = analysis.run.steady_state if analysis.run is not None else None
        if ss is None or not ss.median_s > 0:
            return None
        return StepDenominator(
            float(ss.median_s) * 1e6,
            f"median of the {ss.n_steps} unprofiled steady-state steps (no trace analysed)",
        )
    slowest = max(timed, key=lambda c: c.base_step_us)
    rank = slowest.rank.rank
    words = _unprofiled_words(slowest.unprofiled, _rank_words(slowest))
    if len(rank_ctx) < 2:
        who = f", rank {rank}" if rank is not None else ""
        return StepDenominator(slowest.base_step_us, "the " + words + who, rank)
    by_median = max(timed, key=_median_step_us).rank.rank
    other = f"; rank {by_median} has the longest median step (the rank spread's statistic)" if by_median != rank else ""
    return StepDenominator(
        slowest.base_step_us,
        f"the job's step: rank {rank}'s {words}, the longest mean step of {len(rank_ctx)} ranks (they move in "
        f"lock-step){other}",
        rank,
    )


def _median_step_us(ctx: RankContext) -> float:
    """Median analysed step time (µs) of one rank's context: the statistic of the report's rank spread (longest /
    shortest rank), which can name another rank than the denominator's longest mean."""
    return float(np.median([float(s.dur_us) for s in ctx.step_rows]))


def _unprofiled_words(u: UnprofiledStep | None, steps: str) -> str:
    """``steps`` (:func:`_rank_words`), or for a profile run's unprofiled step (the report's ``replay.unprofiled``)
    what it is: "unprofiled step: the mean of 10 analysed steps (…) replayed without the profiler's 0.92 µs per
    recorded host event (…)"."""
    if u is None:
        return steps
    w, s = u.window_step_us / 1000, u.steady_step_us / 1000
    if u.method == "overhead" and u.fault_us > 0:
        f = u.fault_us / 1000
        return (
            f"unprofiled step: the {steps} replayed without the profiler's extra page faults ({f:.2f} ms per step) "
            f"and its {u.per_event_us:.2f} µs per recorded host event ({w:.2f} ms profiled mean step − {s:.2f} ms "
            f"median unprofiled steady step − {f:.2f} ms of page faults, over {u.events_per_step:,.0f} events per "
            "step)"
        )
    if u.method == "overhead":
        return (
            f"unprofiled step: the {steps} replayed without the profiler's {u.per_event_us:.2f} µs per "
            f"recorded host event ({w:.2f} ms profiled mean step − {s:.2f} ms median unprofiled steady step, over "
            f"{u.events_per_step:,.0f} events per step)"
        )
    return (
        f"unprofiled step: the {steps} scaled by the run's median unprofiled steady step ÷ their mean "
        f"({s:.2f} ÷ {w:.2f} ms)"
    )
