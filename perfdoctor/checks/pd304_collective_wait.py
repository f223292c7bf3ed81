"""PD304 collective-wait: ranks wait inside collectives for the other ranks to arrive.

From :mod:`perfdoctor.analysis.collective_wait` (the k-th collective kernel of
every rank matched; each rank's excess over the shortest copy is wait). The
rank with the largest mean wait per step is reported, with the rank that
arrived last to the most collectives. Skipped when the collectives cannot be
matched (different counts per rank).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from perfdoctor.checks.common import pct
from perfdoctor.checks.context import JobContext, Outcome, passed, skipped
from perfdoctor.findings import Estimate, Evidence, Hit

CODE = "PD304"
METRICS = {"max_wait_us": "largest mean wait per step inside collectives over the ranks, µs"}

# what a hit's evidence/fields add to METRICS for the TOML message (its placeholders are checked at load)
MESSAGE_FIELDS = ("last_count", "last_rank", "n_collectives", "rank", "transfer_ms", "wait_ms", "wait_pct")


@dataclass(frozen=True)
class Thresholds:
    """``[thresholds]`` of rules/PD304.toml: names and types checked when the catalogue loads."""

    min_saving_pct: float


def check(job: JobContext) -> Outcome:
    cw = getattr(job.analysis, "collective_wait", None)
    if cw is None:
        why = getattr(job.analysis, "collective_wait_note", "") or "no matched collectives"
        return skipped(f"collectives not matched across ranks: {why}")
    by_rank = {c.rank.rank: c for c in job.ranks}
    # only the wait that no compute kernel overlaps costs step time: min(wait, exposed collective time) per step
    exposed = {
        r: np.array([s.communication["exposed_us"] for s in by_rank[r].step_rows]) for r in cw.wait_us if r in by_rank
    }
    mean_wait = {r: float(np.mean(np.minimum(cw.wait_us[r], exposed[r]))) if len(exposed[r]) else 0.0 for r in exposed}
    worst = max(mean_wait, key=lambda r: mean_wait[r])
    ctx = by_rank[worst]
    wait = mean_wait[worst]
    metrics = {"max_wait_us": wait}
    if pct(wait, ctx.step_us) < job.th["min_saving_pct"]:
        return passed(**metrics)
    last_rank = max(cw.last_arrivals, key=cw.last_arrivals.get)
    comm = float(np.mean([s.communication["total_us"] for s in ctx.step_rows]))
    ev = Evidence(
        values={
            "rank": worst,
            "wait_ms": wait / 1000,
            "wait_pct": pct(wait, ctx.step_us),
            "last_rank": last_rank,
            "last_count": cw.last_arrivals[last_rank],
            "n_collectives": cw.n_collectives,
            "transfer_ms": max(comm - wait, 0.0) / 1000,
            "wait_ms_by_rank": {str(r): round(v / 1000, 3) for r, v in sorted(mean_wait.items())},
            "last_arrivals_by_rank": {str(r): n for r, n in sorted(cw.last_arrivals.items())},
        },
        steps=ctx.step_numbers,
    )
    method = (
        "the rank's mean wait per step inside matched collectives (its duration − the shortest copy's), "
        "at most its exposed collective time"
    )
    return Outcome(metrics=metrics, hit=Hit(evidence=ev, estimate=Estimate(wait, ctx.step_us, method), rank=worst))
