"""Bounds on one rank's collectives from its peers, and what each what-if assumes of them (all µs).

A collective kernel's recorded duration holds the rank's wait for the last peer to arrive. A what-if on one
rank moves that rank alone: if it arrives earlier, the kernel starts earlier but still ends when the last peer
has arrived and the data has moved. So every per-rank replay bounds each collective kernel ``k`` by

    end[k] ≥ (the latest peer's arrival at k) + transfer_k

applied inside the replay (:class:`perfdoctor.replay.collective_floor.CollectiveFloor`), collective by
collective, so the time after each one follows from it.

Where the bound comes from:

- **recorded** (the default, and every collective of a single-rank trace of a multi-rank job,
  :func:`perfdoctor.replay.collective_floor.recorded_floor`): the collective ends no earlier than its recorded
  end, i.e. the recorded wait is taken as the peers' (they arrived late enough to end it there). Exact for a rank
  that did not arrive last; for the last arrival it is conservative.
- **peers** (a job whose ranks' collectives match, :func:`peer_bounds`, handed to the rank's second analysis by
  :mod:`perfdoctor.jobs.rounds` and applied with :func:`with_peer_ends`): the latest other rank's recorded
  arrival plus the transfer (the shortest copy), on this rank's clock:

    T[r, k] = max over peers p ≠ r of (start[p, k] − offset[p] + offset[r]) + min over ranks of dur[·, k]

  (``start``: the copy's recorded start on the peer's device, i.e. its arrival; ``offset``: one clock offset
  per rank, :func:`perfdoctor.crossrank.collectives.clock_offsets`; the shortest copy is the transfer itself.)
  Only below the recorded end (this rank arrived last) does it differ from the recorded bound.

Replays are max-plus: lowering every bound by at most ``m`` µs lowers every replayed time by at most ``m``, so the
recorded bound understates a last-arriving rank's saving by at most its largest margin (recorded end − peer
bound): :func:`peer_bounds` keeps the ranks whose margin exceeds :data:`MARGIN_SHARE` of their step.

Which what-ifs move the peers (``Scenario.peers_move``): a fix that changes the program every rank runs moves
every rank alike — CUDA graphs, a fused optimizer, removed syncs, batched or pinned copies, tensor cores, fused
elementwise chains, collectives issued earlier or overlapped, a larger batch, a straggler's skew removed. The
peers are then assumed alike (the same program, the same fix, the same saving at the same point), so their
arrivals move with this rank's and each collective keeps its recorded duration: the transfer plus the wait for
the last peer, whose skew stays as recorded (:func:`moving_text` states both parts). The device work stays, so a
replayed step never goes below what each stream's recorded work allows; it may go below the recorded busy time
where collectives that were exposed now overlap compute. Fixes of what one rank's host or data does on its own —
the DataLoader (data and I/O per rank), the script's own Python outside ops (rank 0's logging), CPU threads per
core — are rank-specific (the classic straggler causes): the peers arrive as recorded. Combined
(:func:`perfdoctor.replay.transforms.combine`), the peers move by what the program-wide parts alone move this
rank's collectives (``Scenario.peers_with``).

Fixing the findings on every rank moves the peers too: the job's "fixing the top N findings" figure replays the
ranks jointly (:func:`perfdoctor.crossrank.joint.job_fix_all`). Where they cannot be (collectives that do not
match), it is the slowest rank's replayed step (:func:`job_fix_all` here), each rank's taken with its peers
unchanged (conservative: the fixes would also move them).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from perfdoctor.crossrank.collectives import CollectiveTimeline, clock_offsets, compute
from perfdoctor.replay.collective_floor import CollectiveFloor
from perfdoctor.replay.simulate import Scenario

MATCH_TOLERANCE_US = 0.5  # a peer bound names its collective by the kernel's recorded start on this rank


def earliest_ends(timelines: list[CollectiveTimeline]) -> dict[int, np.ndarray]:
    """``T[r, k]`` (see the module docstring) per rank, in the rank's own clock (µs, shape ``(n_collectives,)``).

    ``timelines`` must be matched (:func:`perfdoctor.crossrank.collectives.compute` returned a result): the same
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
    margin (module docstring). {} when the timelines do not match
    (:func:`perfdoctor.crossrank.collectives.compute`)."""
    if len(timelines) < 2 or compute(timelines)[0] is None:
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


def floor_text(floor: CollectiveFloor) -> str:
    """The assumption of a rank-specific fix (the peers unchanged), for the saving's method."""
    n = int(floor.act.size)
    if floor.from_peers:
        return (
            f"the other ranks unchanged: each of the rank's {n} collective kernels ends no earlier than the "
            f"latest other rank's recorded arrival plus the transfer ({floor.from_peers} where this rank "
            "arrived last, from the peers' traces; its recorded end for the others)"
        )
    return (
        f"the other ranks unchanged: each of the rank's {n} collective kernels ends no earlier than recorded "
        "(its recorded wait is taken as the peers': they arrive as they did)"
    )


def moving_text(floor: CollectiveFloor) -> str:
    """The assumption of a fix every rank gets (the peers move alike), with the collectives' recorded time per
    analysed step split into transfer and wait (ms), for the saving's method."""
    n_steps, inside = floor.per_step
    head = (
        "the other ranks assumed alike and fixed alike (one program): their arrivals move with this rank's, so "
        "each of its collective kernels keeps its recorded duration"
    )
    if n_steps <= 0 or floor.dur_us.size != floor.act.size or not inside.any():
        return head
    head = head.replace("kernels keeps", f"kernels ({int(inside.sum()) / n_steps:.0f} per step) keeps")
    total = float(floor.dur_us[inside].sum()) / n_steps
    transfer = float(floor.transfer_us[inside].sum()) / n_steps
    return (
        f"{head}, {total / 1000:.2f} ms per step: {transfer / 1000:.2f} ms of transfer (each collective's "
        f"shortest recorded duration for its name and size on this rank) and {(total - transfer) / 1000:.2f} ms "
        "of waiting for the last peer, whose skew stays as recorded"
    )


def peers_text(floor: CollectiveFloor, scenario: Scenario) -> str:
    """What a what-if's ``scenario`` assumes of the peers, for its saving's method: they move alike
    (:func:`moving_text`), arrive as bounded (:func:`floor_text`), or get only the
    program-wide part of a combination (``Scenario.peers_with``)."""
    if scenario.peers_move:
        return moving_text(floor)
    if scenario.peers_with is not None:
        return (
            f"{floor_text(floor)}, except that they get {scenario.peers_with.name} alike (a change to the program "
            "every rank runs): each bound moves earlier by as much as that alone moves its collective"
        )
    return floor_text(floor)


def with_peer_ends(
    floor: CollectiveFloor, act_ts_us: np.ndarray, starts_us: list[float], ends_us: list[float]
) -> CollectiveFloor:
    """``floor`` with the peers' bounds: the collective that started at ``starts_us[i]`` (its recorded start on
    this rank, µs) ends no earlier than ``ends_us[i]`` instead (only a bound below the recorded end changes
    anything); a start that names no collective kernel within :data:`MATCH_TOLERANCE_US` is left out."""
    if not starts_us:
        return floor
    ts = np.asarray(act_ts_us[floor.act], dtype=np.float64)
    order = np.argsort(ts, kind="stable")
    want = np.asarray(starts_us, dtype=np.float64)
    pos = np.clip(np.searchsorted(ts[order], want), 0, max(ts.size - 1, 0))
    near = np.where(
        np.abs(ts[order][np.maximum(pos - 1, 0)] - want) < np.abs(ts[order][pos] - want), np.maximum(pos - 1, 0), pos
    )
    ok = np.abs(ts[order][near] - want) <= MATCH_TOLERANCE_US
    end_min = floor.end_min_us.copy()
    idx = order[near[ok]]
    lower = np.asarray(ends_us, dtype=np.float64)[ok]
    moved = lower < end_min[idx]
    end_min[idx[moved]] = lower[moved]
    return dataclasses.replace(floor, end_min_us=end_min, from_peers=int(moved.sum()))
