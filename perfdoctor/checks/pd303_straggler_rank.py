"""PD303 straggler-rank: one rank does much more work per step than the others, who wait for it.

Own work of a rank = mean step time − mean collective kernel time − mean idle of
no known cause per step (everything the rank does that is not waiting in or
running a collective: compute, host work, the idle gaps its host causes; not the
breakdown's "idle: other cause", which is work queued before the recording or a
device stall with its work already launched: on the 3-layer MoE "after" job two
~2.45 ms stalls on rank 0, whose next kernel had been launched 2.45 ms earlier,
made rank 0 look 4.54 ms slower than rank 1 with the same 0.24 ms of compute and
the same host launch pace). The straggler is the rank with the most.
A collective finishes only when its last participant arrives, so the others
wait about the difference inside their collectives; the rule asks for that
too: the straggler must spend less time in collectives than the others' median.

Steps PD902 calls cold start on any rank are left out on every rank (first-call work is no rank's steady-state
work, and the others wait for it); when that leaves a rank no step, the rule is skipped with the reason
(:attr:`perfdoctor.checks.context.JobContext.cold`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from perfdoctor.checks.common import pct
from perfdoctor.checks.context import JobContext, Outcome, passed, skipped
from perfdoctor.findings import Estimate, Evidence, Hit
from perfdoctor.vocab import COMPUTE_CATEGORIES

CODE = "PD303"
METRICS = {
    "max_own_us": "mean µs per step outside collectives (less idle of no known cause) of the slowest rank",
    "median_own_us": "median over the other ranks of their mean µs per step outside collectives",
    "excess_pct": "(max - median) ÷ median, %",
    "straggler_comm_us": "mean collective µs per step of the slowest rank",
    "others_comm_us": "median over the other ranks of their mean collective µs per step",
}

# every field a hit gives the TOML message and headline (its evidence values and fields; checked at load)
MESSAGE_FIELDS = (
    "others_comm_ms",
    "others_own_ms",
    "straggler",
    "straggler_comm_ms",
    "straggler_own_ms",
    "excess_pct",
)


@dataclass(frozen=True)
class Thresholds:
    """``[thresholds]`` of rules/PD303.toml: names and types checked when the catalogue loads."""

    min_excess_pct: float
    min_saving_pct: float


T = TypeVar("T")


def _mean(rows: list[T], getter: Callable[[T], float]) -> float:
    """The mean of ``getter`` over ``rows`` (0 for none)."""
    return float(np.mean([getter(s) for s in rows])) if rows else 0.0


def check(job: JobContext) -> Outcome:
    th = job.thresholds(Thresholds)
    ranks = [c.rank.rank for c in job.ranks]
    cold, why_not = job.cold
    if why_not:
        return skipped(f"{why_not}: a straggler cannot be told from first-call work")
    rows = [job.warm_rows(c) for c in job.ranks]  # cold-start steps are no rank's steady-state work
    comm = np.array([_mean(r, lambda s: s.communication.total_us) for r in rows])
    if comm.sum() <= 0:
        return skipped("no collective kernels in the traces: the ranks never wait for each other on the device")
    step = np.array([_mean(r, lambda s: s.dur_us) for r in rows])
    compute = np.array([_mean(r, lambda s: sum(s.categories_us.get(k, 0.0) for k in COMPUTE_CATEGORIES)) for r in rows])
    unexplained = np.array([_mean(r, lambda s: s.idle_causes_us.get("other", 0.0)) for r in rows])
    own = step - comm - unexplained
    worst = int(np.argmax(own))
    median = float(np.median(np.delete(own, worst)))
    others_comm = float(np.median(np.delete(comm, worst)))
    saving = max(float(own[worst]) - median, 0.0)
    step_us = float(np.median(step))
    metrics = {
        "max_own_us": float(own[worst]),
        "median_own_us": median,
        "excess_pct": pct(saving, median),
        "straggler_comm_us": float(comm[worst]),
        "others_comm_us": others_comm,
        "step_us": step_us,
    }
    if (
        metrics["excess_pct"] < th.min_excess_pct
        or comm[worst] >= others_comm
        or saving <= 0  # min_saving_pct: the engine's, on the report's denominator (the job's step)
    ):
        return passed(**metrics)
    ev = Evidence(
        values={
            "straggler": ranks[worst],
            "straggler_own_ms": float(own[worst]) / 1000,
            "others_own_ms": median / 1000,
            "excess_pct": metrics["excess_pct"],
            "straggler_comm_ms": float(comm[worst]) / 1000,
            "others_comm_ms": others_comm / 1000,
            "own_ms_by_rank": {str(r): round(float(v) / 1000, 3) for r, v in zip(ranks, own)},
            "compute_ms_by_rank": {str(r): round(float(v) / 1000, 3) for r, v in zip(ranks, compute)},
            "cold_steps_left_out": sorted(cold),
        },
        steps=[s.step for s in rows[worst]],
    )
    method = (
        "slowest rank's time outside collectives per step (less device idle of no known cause) − median of the "
        "other ranks' (their wait in collectives)"
    )
    return Outcome(
        metrics=metrics,
        hit=Hit(
            evidence=ev,
            estimate=Estimate(saving, method),
            rank=ranks[worst],
            min_saving_pct=th.min_saving_pct,
        ),
    )
