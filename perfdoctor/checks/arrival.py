"""The saving of ranks arriving together, for PD304: the job replayed jointly (all µs).

A collective ends when its last rank has arrived and the data has moved, so the job steps at the pace of its
latest arrivals. The fix both rules point at (balance the work before the collectives) is replayed as: the ranks
named arrive at each collective no later than the median rank; each collective then ends at the latest of those
arrivals plus its transfer, the shortest recorded copy (:func:`perfdoctor.crossrank.joint.median_arrival`, on every
rank's dependency graph at once: what moves on one rank moves the others' waits). The saving is the job's step, its
longest rank's mean analysed step, replayed jointly as recorded minus replayed with the fix.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from perfdoctor.checks.context import JobContext
from perfdoctor.text import REPLAY_METHOD

if TYPE_CHECKING:
    from perfdoctor.crossrank.joint import JointInputs

EvidenceValue = float | dict[str, float]


def joint_inputs(job: JobContext) -> tuple[dict[int, JointInputs] | None, str]:
    """Each rank's :class:`perfdoctor.crossrank.joint.JointInputs` by trace rank, from its rank summary; (None, why
    not) when a rank has none (no collective kernel, no replay)."""
    if "joint_inputs" in job.cache:
        cached: tuple[dict[int, JointInputs] | None, str] = job.cache["joint_inputs"]
        return cached
    out: dict[int, JointInputs] = {}
    why = ""
    for c in job.ranks:
        summary = c.rank.summary
        ji = summary.joint if summary is not None else None
        if ji is None:
            why = f"rank {c.rank.rank} has no collective kernels or no replay"
            break
        out[int(c.rank.rank or 0)] = ji
    job.cache["joint_inputs"] = (None, why) if why else (out, "")
    result: tuple[dict[int, JointInputs] | None, str] = job.cache["joint_inputs"]
    return result


def replayed_saving(
    job: JobContext, pulled: set[int] | None, who: str
) -> tuple[float, str, dict[str, EvidenceValue]] | str:
    """(saving µs per step, method, evidence values) of the ranks ``pulled`` (None: every rank) arriving at each
    collective with the median rank, ``who`` naming them in the method ("every rank", "rank 3"); the reason when
    the ranks cannot be replayed jointly."""
    from perfdoctor.crossrank.joint import median_arrival

    inputs, why = joint_inputs(job)
    res = None
    if inputs is not None:
        res, why = median_arrival(inputs, pulled)
    if res is None:
        return why
    (r0, before), (r1, after) = res.before, res.after
    n_steps = min(len(i.recorded_step_us) for i in inputs.values()) if inputs else 0
    method = (
        f"{REPLAY_METHOD} of every rank at once, with {who} arriving at each collective no later than the median "
        "rank (the median of the ranks' arrivals, the mean of the middle two for an even count; clocks aligned by "
        "the collectives' ends), each collective ending at the latest arrival plus its transfer, the shortest "
        "recorded copy, and on each rank no earlier than the rank itself arrives (a late rank's own work stays; its "
        "peers stop waiting for it): the job's step (its longest rank's mean step) "
        f"replayed as recorded, rank {r0} {before / 1000:,.2f} ms, − replayed with the fix, rank {r1} "
        f"{after / 1000:,.2f} ms, mean over {n_steps} analysed step(s)"
    )
    values: dict[str, EvidenceValue] = {
        "job_step_replayed_ms": before / 1000,
        "job_step_after_ms": after / 1000,
        "step_after_ms_by_rank": {str(r): round(v / 1000, 3) for r, v in sorted(res.replayed_us.items())},
    }
    return max(before - after, 0.0), method, values
