"""PD304 collective-wait: ranks wait inside collectives for the other ranks to arrive.

From :mod:`perfdoctor.crossrank.collectives` (the k-th collective kernel of
every rank matched; each rank's excess over the shortest copy is wait). The
rank with the largest mean wait per step is reported, with the rank that
arrived last to the most collectives. Ranks that tie (equal largest waits,
equal counts of last arrivals) are named together, never the first of them
alone: on a job where every rank but one waits the same, "rank 0" would be an
artefact of the order. Skipped when the collectives cannot be matched
(different counts per rank). Steps PD902 calls cold start on any rank are left
out of the wait and of the last arrivals, and the rule is skipped when that
leaves a rank no step (:attr:`perfdoctor.checks.context.JobContext.cold`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from perfdoctor.checks.arrival import replayed_saving
from perfdoctor.checks.common import pct, rank_list_text
from perfdoctor.checks.context import JobContext, Outcome, RankContext, passed, skipped
from perfdoctor.crossrank.collectives import CollectiveWait
from perfdoctor.findings import Estimate, Evidence, Hit

CODE = "PD304"
METRICS = {
    "max_wait_us": "largest mean wait per step inside collectives over the ranks, µs",
    "saving_us": "the job's step replayed jointly as recorded − with every rank arriving with the median rank, µs "
    "(the largest wait where the ranks cannot be replayed jointly)",
}

# every field a hit gives the TOML message and headline (its evidence values and fields; checked at load)
MESSAGE_FIELDS = ("all_wait_ms", "arrival", "n_collectives", "transfer_ms", "wait_ms", "wait_pct", "waiting")


@dataclass(frozen=True)
class Thresholds:
    """``[thresholds]`` of rules/PD304.toml: names and types checked when the catalogue loads."""

    min_saving_pct: float


def check(job: JobContext) -> Outcome:
    th = job.thresholds(Thresholds)
    cold, why_not = job.cold
    if why_not:
        return skipped(f"{why_not}: a wait for another rank cannot be told from first-call work")
    cw = job.analysis.collective_wait
    if cw is None:
        why = job.analysis.collective_wait_note or "no matched collectives"
        return skipped(f"collectives not matched across ranks: {why}")
    by_rank = {c.rank.rank: c for c in job.ranks}
    mean_wait, all_wait = _waits(job, cw, by_rank, cold)
    wait = max(mean_wait.values())
    tied = sorted(r for r, w in mean_wait.items() if w == wait)
    metrics = {"max_wait_us": wait, "saving_us": 0.0}
    if wait <= 0:  # min_saving_pct: the engine's, on the report's denominator (the job's step)
        return passed(**metrics)
    ev = _evidence(job, cw, [by_rank[r] for r in tied], tied, mean_wait, all_wait)
    replayed = replayed_saving(job, None, "every rank")
    if not isinstance(replayed, str):
        saving, method, values = replayed
        ev.values.update(values)
    else:  # the ranks cannot be replayed jointly (``replayed`` says why): the measured wait, which no arrival
        # order can exceed
        saving = wait
        method = (
            "the rank's mean wait per step inside matched collectives (its duration − the shortest copy's), "
            f"at most its exposed collective time; an upper bound: the ranks cannot be replayed jointly ({replayed})"
        )
    metrics["saving_us"] = saving
    if saving <= 0:
        return passed(**metrics)
    hit = Hit(
        evidence=ev,
        estimate=Estimate(saving, method),
        rank=tied[0] if len(tied) == 1 else None,
        min_saving_pct=th.min_saving_pct,
    )
    return Outcome(metrics=metrics, hit=hit)


def _waits(
    job: JobContext, cw: CollectiveWait, by_rank: dict[int | None, RankContext], cold: set[int]
) -> tuple[dict[int, float], dict[int, float]]:
    """Per rank, the mean µs per step it waits inside matched collectives: (the wait no compute kernel overlaps,
    min(wait, exposed collective time) per step, which costs step time; all of it, hidden or not: the job
    summary's "longest wait inside collectives"). Cold-start steps (PD902, ``cold``) are left out: first-call work
    is what the others wait for there."""
    warm = {r: np.array([s.step not in cold for s in by_rank[r].step_rows], dtype=bool) for r in by_rank}
    exposed = {
        r: np.array([s.communication.exposed_us for s in by_rank[r].step_rows]) for r in cw.wait_us if r in by_rank
    }
    mean_wait = {
        r: float(np.mean(np.minimum(cw.wait_us[r], exposed[r])[warm[r]])) if warm[r].any() else 0.0 for r in exposed
    }
    all_wait = {r: float(np.mean(np.asarray(cw.wait_us[r])[warm[r]])) if warm[r].any() else 0.0 for r in exposed}
    return mean_wait, all_wait


def _evidence(
    job: JobContext,
    cw: CollectiveWait,
    tied_ctx: list[RankContext],
    tied: list[int],
    mean_wait: dict[int, float],
    all_wait: dict[int, float],
) -> Evidence:
    """The evidence of the ranks ``tied`` for the largest wait (their contexts ``tied_ctx``): the wait (ms and % of
    their own step, their median when several tie), who arrives last, the collectives' transfer time."""
    wait = mean_wait[tied[0]]
    steps = [float(np.mean([s.dur_us for s in job.warm_rows(c)])) for c in tied_ctx]
    step_us = float(np.median(steps))  # one rank's own step; the tied ranks' median when several tie
    comm = float(np.median([np.mean([s.communication.total_us for s in job.warm_rows(c)]) for c in tied_ctx]))
    most = max(cw.last_arrivals.values(), default=0)
    last = sorted(r for r, n in cw.last_arrivals.items() if n == most) if most > 0 else []
    return Evidence(
        values={
            "rank": tied[0] if len(tied) == 1 else None,
            "tied_ranks": tied if len(tied) > 1 else [],
            "waiting": f"Rank {tied[0]} waits" if len(tied) == 1 else f"Ranks {rank_list_text(tied)} tie: each waits",
            "wait_ms": wait / 1000,
            "wait_pct": pct(wait, step_us),
            "all_wait_ms": float(np.median([all_wait[r] for r in tied])) / 1000,
            "last_rank": last[0] if len(last) == 1 else None,
            "last_count": most,
            "arrival": _arrival(last, most, cw.n_collectives, cw.n_counted),
            "n_collectives": cw.n_collectives,
            # the collectives' time less all their waiting: each one's shortest copy (the job summary's figure;
            # less the exposed wait only, it held the hidden wait too: 0.28 vs 0.22 ms on DLRM rank 1)
            "transfer_ms": max(comm - float(np.median([all_wait[r] for r in tied])), 0.0) / 1000,
            "wait_ms_by_rank": {str(r): round(v / 1000, 3) for r, v in sorted(mean_wait.items())},
            "last_arrivals_by_rank": {str(r): n for r, n in sorted(cw.last_arrivals.items())},
        },
        steps=[s.step for s in job.warm_rows(tied_ctx[0])],
    )


def _arrival(last: list[int], count: int, n: int, counted: int | None) -> str:
    """Who arrives last to the most matched collectives, as a clause: one rank, ranks that tie, or none (every
    collective's shortest copy shared by several ranks). ``counted``: of the ``n``, those outside cold-start steps
    (None: all)."""
    cold = counted is not None and counted < n
    what = f"{counted if cold else n} matched collectives" + (" outside cold-start steps" if cold else "")
    if not last:
        return f"no rank arrives last to any of the {what} alone (their shortest copies tie)"
    if len(last) == 1:
        return f"rank {last[0]} arrives last to {count} of the {what}"
    return f"ranks {rank_list_text(last)} tie, each arriving last to {count} of the {what}"
