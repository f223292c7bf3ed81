"""Multi-rank bounds on replayed savings: a collective cannot finish before the slowest peer arrives (all µs).

Each rank is replayed alone, with its collective kernels at their recorded durations, which include the time the
rank waited for its peers. A what-if applied to one rank does not move its peers, so its copy of collective ``k``
ends no earlier than the latest peer's recorded arrival plus the transfer:

    T[r, k] = max over peers p ≠ r of (start[p, k] − offset[p] + offset[r]) + min over ranks of dur[·, k]

(``start``: the copy's recorded start on the peer's device, i.e. its arrival; ``offset``: one clock offset per
rank, the median over matched collectives of ``end[p, k] − end[ref, k]``, as
:func:`perfdoctor.analysis.collective_wait.compute` aligns them; the shortest copy is the transfer itself.)
The replay applies that bound collective by collective (:mod:`perfdoctor.replay.peers`); :func:`peer_bounds`
gives each rank the bounds that differ from its recorded ends (it arrived last).

Fixing the findings on every rank moves the peers too: the job's "fixing the top N findings" figure replays the
ranks jointly (:func:`perfdoctor.replay.joint.job_fix_all`). Where they cannot be (collectives that do not match),
it is the slowest rank's replayed step (:func:`job_fix_all` here), each rank's taken with its peers unchanged
(conservative: the fixes would also move them).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from perfdoctor.analysis.collective_wait import CollectiveTimeline


def earliest_ends(timelines: list[CollectiveTimeline]) -> dict[int, np.ndarray]:
    """``T[r, k]`` (see the module docstring) per rank, in the rank's own clock (µs, shape ``(n_collectives,)``).

    ``timelines`` must be matched (:func:`perfdoctor.analysis.collective_wait.compute` returned a result): the same
    number of collectives on every rank, two ranks or more. Returns {} otherwise.
    """
    if len(timelines) < 2 or len({len(t.dur_us) for t in timelines}) != 1 or not timelines[0].dur_us:
        return {}
    starts = np.array([t.start_us for t in timelines], dtype=np.float64)  # (ranks, collectives)
    ends = np.array([t.end_us for t in timelines], dtype=np.float64)
    durs = np.array([t.dur_us for t in timelines], dtype=np.float64)
    offset = clock_offsets(ends)
    arrival = starts - offset[:, None]  # in the first rank's clock
    transfer = durs.min(axis=0)
    # the latest arrival among each rank's peers: the latest of all, or for the rank that alone arrived latest
    # the second latest (equal to the latest when two ranks tie); O(ranks) where deleting each rank's row was
    # O(ranks²): 0.34 s of the 4,096-rank reduce
    top2 = np.partition(arrival, arrival.shape[0] - 2, axis=0)[-2:]  # (2, collectives): 2nd latest, latest
    peers_latest = np.where(arrival == top2[1], top2[0], top2[1])
    return {int(t.rank): peers_latest[i] + transfer + offset[i] for i, t in enumerate(timelines)}


def clock_offsets(ends_us: np.ndarray) -> np.ndarray:
    """Clock offset of each rank against the first (µs, shape ``(ranks,)``): the median over matched collectives of
    ``end[r, k] − end[0, k]`` (``ends_us``: shape ``(ranks, collectives)``; the copies of one collective end
    together)."""
    return np.asarray(np.median(ends_us - ends_us[0], axis=1))


def job_fix_all(sections: dict[int, Any]) -> tuple[list[str], float, float, int] | None:
    """(codes, recorded, replayed, rank) of the job's "fixing the top N findings" figure: the slowest rank's
    recorded mean step and the slowest rank's replayed step with every rank's fixes applied (µs); None without any
    replayed fix. ``sections``: {rank: its report section's ``replay`` dict}."""
    reps = {r: rep for r, rep in sections.items() if isinstance(rep, dict)}
    fixes = {r: rep["fix_all"] for r, rep in reps.items() if rep.get("fix_all")}
    if not fixes:
        return None
    recorded = max(float(rep.get("recorded_mean_step_us") or 0.0) for rep in reps.values())
    # a rank without a replayed fix keeps its replayed (= recorded) step
    after = {
        r: float(fixes[r]["replayed_mean_step_us"]) if r in fixes else float(rep.get("replayed_mean_step_us") or 0.0)
        for r, rep in reps.items()
    }
    slowest = max(after, key=lambda r: after[r])
    codes = sorted({c for f in fixes.values() for c in f["codes"]})
    return codes, recorded, after[slowest], slowest


MARGIN_SHARE = 0.002  # the report shows a saving to 0.1% of the step; a peer bound counts above a fifth of that


def peer_bounds(
    timelines: list[CollectiveTimeline], step_us: dict[int, float]
) -> dict[int, tuple[list[float], list[float]]]:
    """{rank: (recorded starts of its collectives, the earliest each may end)} (µs, the rank's clock) for the ranks
    that arrived last somewhere: ``T[r, k]`` (:func:`earliest_ends`) where it is below the recorded end, for the
    ranks whose largest margin (recorded end − ``T``) exceeds :data:`MARGIN_SHARE` of their mean step
    (``step_us``, by rank). Replays are max-plus, so a rank left out understates its savings by at most that
    margin (:mod:`perfdoctor.replay.peers`). {} when the timelines do not match
    (:func:`perfdoctor.analysis.collective_wait.compute`)."""
    from perfdoctor.analysis import collective_wait

    if len(timelines) < 2 or collective_wait.compute(timelines)[0] is None:
        return {}
    ends = earliest_ends(timelines)
    out: dict[int, tuple[list[float], list[float]]] = {}
    for t in timelines:
        bound = ends.get(int(t.rank))
        if bound is None or bound.size == 0:
            continue
        margin = np.asarray(t.end_us, dtype=np.float64) - bound
        if float(margin.max()) <= MARGIN_SHARE * step_us.get(int(t.rank), 0.0):
            continue
        k = np.flatnonzero(margin > 0)
        out[int(t.rank)] = ([t.start_us[i] for i in k.tolist()], bound[k].tolist())
    return out
