"""A saving measured on another kind of step than the report's denominator, restated as the same share of it.

A ``perfdoctor profile`` run has two kinds of step: the profiled window the trace records, and the unprofiled
step the user runs (``steps.csv``). The report's denominator for such a run is the unprofiled step
(:mod:`perfdoctor.checks.denominator`), and every replayed saving is taken from it
(:mod:`perfdoctor.replay.unprofiled`). Two kinds of saving are measured on the other step and say so in their
:class:`~perfdoctor.findings.Basis` (``step_us``, ``step_words``):

- a rank rule's saving that is not replayed (an upper bound from interval rules, e.g. PD202 on CPU) is time of the
  profiled window: :func:`on_unprofiled_step` marks it as part of the rank's recorded mean step;
- PD602's saving is time of the run's unprofiled steady steps, while a report whose ranks state no unprofiled step
  (an unstable series) has the profiled window as its denominator.

:func:`restated` states such a saving as the same share of the report's step: ``saving × target ÷ step``, with both
figures in its method, so its µs and its percentage describe one step.
"""

from __future__ import annotations

import dataclasses

from perfdoctor.checks.context import Outcome, RankContext
from perfdoctor.findings import Estimate
from perfdoctor.text import is_replay_method, method_with, restated_clause


def restated(est: Estimate, target_us: float, target_words: str) -> Estimate:
    """``est`` as the same share of ``target_us`` (µs; described by ``target_words``, e.g. "the unprofiled step")
    when it was measured on another step (``est.basis.step_us``); ``est`` itself otherwise. Its after-fixes saving
    and the steps it is taken from scale alike (:meth:`~perfdoctor.findings.Estimate.rescaled`)."""
    step_us = est.basis.step_us
    if step_us is None or not step_us > 0 or not target_us > 0:
        return est
    r = target_us / step_us
    note = restated_clause(est.saving_us, est.basis.step_words, step_us, target_words, target_us)
    return dataclasses.replace(
        est.rescaled(r), method=method_with(est.method, note) if abs(r - 1.0) > 1e-9 else est.method
    )


def on_unprofiled_step(outcome: Outcome, ctx: RankContext) -> Outcome:
    """A rank rule's ``outcome`` (:class:`perfdoctor.checks.context.Outcome`) on ``ctx``
    (:class:`perfdoctor.checks.context.RankContext`), its saving restated for the rank's unprofiled step when the
    rank has one (``ctx.unprofiled``) and the saving is not replayed (a replayed saving is taken from the
    unprofiled step already)."""
    hit = outcome.hit
    est = None if hit is None else hit.estimate
    if hit is None or est is None or not ctx.unprofiled or is_replay_method(est.method) or not ctx.step_us > 0:
        return outcome
    marked = dataclasses.replace(
        est, basis=dataclasses.replace(est.basis, step_us=ctx.step_us, step_words="the profiled window's mean step")
    )
    new_hit = dataclasses.replace(hit, estimate=restated(marked, ctx.base_step_us, "the unprofiled step"))
    return dataclasses.replace(outcome, hit=new_hit)


def on_denominator(outcome: Outcome, denominator_us: float) -> Outcome:
    """``outcome`` with a saving measured on another step (``estimate.basis.step_us``: PD602's unprofiled steady steps)
    restated as the same share of the report's denominator (``denominator_us``, µs)."""
    hit = outcome.hit
    est = None if hit is None else hit.estimate
    if hit is None or est is None or est.basis.step_us is None:
        return outcome
    new_hit = dataclasses.replace(hit, estimate=restated(est, denominator_us, "the report's step"))
    return dataclasses.replace(outcome, hit=new_hit)
