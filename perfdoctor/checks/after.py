"""The fix plan: the replayed fixes in the order to make them, each with its saving on top of those above it.

Host time can hide device work: a fix that shortens kernels saves little while the host sets the step's pace and
much once the host-side fixes are in (ResNet50 FP32 on a V100, nw0: faster GEMMs save 2.7 ms replayed alone, 19.0 ms
on top of prefetched batches, CUDA graphs and a fused optimizer), and two fixes of one cause save it once. So, per
rank with a replay, :func:`plan` is greedy: first the fix that saves most alone, then each time the one that saves
most on top of those chosen (the step replayed with them − replayed with them and it, both the mean over the
analysed steps); a fix whose marginal saving falls under its threshold leaves the plan and states its saving on top
of the whole plan. A hit whose check leaves its threshold to the engine (:attr:`perfdoctor.findings.Hit.min_saving_pct`)
fires when its saving alone or on top of the others reaches the threshold as a share of the report's one
denominator (:func:`passes`, :func:`gate`), so a finding is never hidden below its threshold when its saving after
the others passes it.
"""

from __future__ import annotations

import dataclasses

from perfdoctor.checks.context import Outcome
from perfdoctor.findings import MIN_MEDIUM_PCT, Hit
from perfdoctor.replay.rank import RankReplay


def passes(hit: Hit, denominator_us: float) -> bool:
    """Whether ``hit`` fires: its saving alone or after the higher-ranked fixes is at least its
    ``min_saving_pct`` of ``denominator_us`` (µs, the report's one denominator); True when the check judged
    its threshold itself (``min_saving_pct`` None)."""
    est = hit.estimate
    if hit.min_saving_pct is None or est is None:
        return True
    best_us = max(est.saving_us, est.after_us or 0.0)
    return denominator_us > 0 and 100.0 * best_us / denominator_us >= hit.min_saving_pct


def stated_after(hit: Hit, alone_pct: float) -> bool:
    """Whether ``hit`` is stated with its saving after the higher-ranked fixes: it fires on that saving only (its
    saving alone, ``alone_pct`` % of the report's denominator, is under its ``min_saving_pct``). Its headline, share
    and severity are then all that one number (ResNet50 FP32 on a V100: PD203's GEMM fix saves 1.6% alone, 10.7% once
    PD101, PD103 and PD205 are fixed)."""
    est = hit.estimate
    return (
        est is not None
        and est.after_us is not None
        and hit.min_saving_pct is not None
        and alone_pct < hit.min_saving_pct
    )


def gate(outcome: Outcome, denominator_us: float) -> Outcome:
    """``outcome`` (:class:`perfdoctor.checks.context.Outcome`), or a pass with its metrics when its hit does not
    fire (:func:`passes`)."""
    hit = outcome.hit
    if hit is None or passes(hit, denominator_us):
        return outcome
    return dataclasses.replace(outcome, hit=None)


# a hit that judged its own threshold (``min_saving_pct`` None) stays in the fix plan while its marginal saving is at
# least this share of the denominator: the share under which no finding is medium (perfdoctor.findings)
PLAN_MIN_PCT = MIN_MEDIUM_PCT


def marginal_passes(hit: Hit, marginal_us: float, denominator_us: float) -> bool:
    """Whether a fix saving ``marginal_us`` (µs per step) on top of the fixes above it keeps its place in the fix
    plan: at least its ``min_saving_pct`` (else :data:`PLAN_MIN_PCT`) of ``denominator_us``, and positive."""
    if not marginal_us > 0 or not denominator_us > 0:
        return False
    floor = hit.min_saving_pct if hit.min_saving_pct is not None else PLAN_MIN_PCT
    return 100.0 * marginal_us / denominator_us >= floor


def plan(rr: RankReplay, hits: dict[str, Hit], denominator_us: float) -> list[str]:
    """The rank's fix plan: the codes of the replayed hits in the order to fix them, chosen greedily.

    First the fix that saves most alone, then, each time, the fix that saves most on top of the fixes already
    chosen (the step replayed with them − replayed with them and the candidate, means over the analysed steps;
    :meth:`perfdoctor.replay.rank.RankReplay.fix_all`, memoised), while that marginal saving passes the hit's
    threshold (:func:`marginal_passes`); a hit whose saving is measured on top of another's fix
    (:attr:`Hit.builds_on`) is a candidate once that fix is chosen. Fills, in place, each plan entry's
    ``estimate.plan_position``, ``after_us`` (marginal µs), ``after_codes`` (the fixes above it), ``after_from_us``
    (the step replayed with those, µs) and ``step_after_us`` (the step replayed with them and this one, µs: the
    last entry's is the plan's fix-all); every other replayed hit gets its saving on top of the whole plan
    (``after_us``, ``after_codes`` = the plan, ``plan_position`` None).

    ``rr``: the rank's :class:`perfdoctor.replay.rank.RankReplay` (its ``whatifs`` hold each check's
    transformation); ``denominator_us``: the report's one denominator (µs). Greedy is the exact order for
    savings that add up and a defensible one where fixes overlap (a fix that saves nothing once the fixes above
    it are in leaves the plan); the number of replays is n(n+1)/2 for n candidates.
    """
    cands = {c: h for c, h in hits.items() if h.estimate is not None and c in rr.whatifs}
    chosen: list[str] = []
    prev_us = float(rr.base_step_us)
    while (best := _next_entry(rr, cands, chosen, prev_us, denominator_us)) is not None:
        code, marginal, step_after = best
        _place(cands[code], marginal, chosen, prev_us, step_after)
        chosen.append(code)
        prev_us = step_after
    if chosen:
        for code, hit in cands.items():
            if code not in chosen:
                _off_plan(rr, hit, code, chosen, prev_us)
    return chosen


def _next_entry(
    rr: RankReplay, cands: dict[str, Hit], chosen: list[str], prev_us: float, denominator_us: float
) -> tuple[str, float, float] | None:
    """The plan's next entry: of the candidates not ``chosen`` whose :attr:`Hit.builds_on` fixes are in, the one
    saving most on top of ``chosen`` (the step replayed with them, ``prev_us`` µs, − replayed with them and it)
    while that saving keeps its place (:func:`marginal_passes`): (code, marginal µs, step after µs), or None."""
    best: tuple[str, float, float] | None = None
    for code in sorted(cands):
        hit = cands[code]
        if code in chosen or any(b in cands and b not in chosen for b in hit.builds_on):
            continue
        both = rr.fix_all([*chosen, code])
        if both is None:
            continue
        marginal = max(prev_us - both[1], 0.0)
        if marginal_passes(hit, marginal, denominator_us) and (best is None or marginal > best[1]):
            best = (code, marginal, both[1])
    return best


def _place(hit: Hit, marginal_us: float, chosen: list[str], prev_us: float, step_after_us: float) -> None:
    """``hit`` as the plan's next entry, in place: its marginal saving (µs) on top of ``chosen`` (the step
    replayed with them ``prev_us`` µs, with it as well ``step_after_us`` µs)."""
    est = hit.estimate
    assert est is not None
    hit.estimate = dataclasses.replace(
        est,
        after_us=marginal_us,
        after_codes=tuple(chosen),
        basis=dataclasses.replace(est.basis, after_from_us=prev_us),
        step_after_us=step_after_us,
        plan_position=len(chosen) + 1,
    )


def _off_plan(rr: RankReplay, hit: Hit, code: str, chosen: list[str], prev_us: float) -> None:
    """``hit`` (fix ``code``), off the plan, with its saving on top of the whole plan ``chosen`` (the step
    replayed with it ``prev_us`` µs), in place."""
    est = hit.estimate
    if est is None:
        return
    both = rr.fix_all([*chosen, code])
    if both is None:
        return
    hit.estimate = dataclasses.replace(
        est,
        after_us=max(prev_us - both[1], 0.0),
        after_codes=tuple(chosen),
        basis=dataclasses.replace(est.basis, after_from_us=prev_us),
        step_after_us=None,
        plan_position=None,
    )
