"""The other ranks unchanged: a collective on the replayed rank ends no earlier than its peers let it (all µs).

A collective kernel's recorded duration holds the rank's wait for the last peer to arrive. A what-if on one
rank moves that rank alone: if it arrives earlier, the kernel starts earlier but still ends when the last peer
has arrived and the data has moved. So every per-rank replay bounds each collective kernel ``k`` by

    end[k] ≥ (the latest peer's arrival at k) + transfer_k

applied inside the replay (:attr:`perfdoctor.replay.simulate.Scenario.act_end_min_us`), collective by
collective, so the time after each one follows from it.

Where the bound comes from:

- **recorded** (the default, and every collective of a single-rank trace of a multi-rank job): the collective
  ends no earlier than its recorded end, i.e. the recorded wait is taken as the peers' (they arrived late enough
  to end it there). Exact for a rank that did not arrive last; for the last arrival it is conservative.
- **peers** (a job whose ranks' collectives match, :mod:`perfdoctor.jobs.peers`): the latest other rank's
  recorded arrival plus the transfer (the shortest copy), on this rank's clock
  (:func:`perfdoctor.analysis.replay_cap.earliest_ends`). Only below the recorded end (this rank arrived last)
  does it differ from the recorded bound.

Replays are max-plus: lowering every bound by at most ``m`` µs lowers every replayed time by at most ``m``, so the
recorded bound understates a last-arriving rank's saving by at most its largest margin (recorded end − peer
bound) — what :func:`perfdoctor.jobs.peers.peer_ends` compares with its tolerance.

Which what-ifs move the peers (``Scenario.peers_move``): a fix that changes the program every rank runs moves
every rank alike — CUDA graphs, a fused optimizer, removed syncs, batched or pinned copies, tensor cores, fused
elementwise chains, collectives issued earlier or overlapped, a larger batch, a straggler's skew removed. The
peers are then assumed alike (the same program, the same fix, the same saving at the same point), so their
arrivals move with this rank's and each collective keeps its recorded duration: the transfer plus the wait for
the last peer, whose skew stays as recorded (:meth:`CollectiveFloor.moving_text` states both parts). The device
work stays, so a replayed step never goes below what each stream's recorded work allows; it may go below the
recorded busy time where collectives that were exposed now overlap compute. Fixes of what one rank's host or data
does on its own — the DataLoader (data and I/O per rank), the script's own Python outside ops (rank 0's logging),
CPU threads per core — are rank-specific (the classic straggler causes): the peers arrive as recorded. Combined
(:func:`perfdoctor.replay.transforms.combine`), the peers move by what the program-wide parts alone move this
rank's collectives (``Scenario.peers_with``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from perfdoctor.replay.simulate import Scenario

MATCH_TOLERANCE_US = 0.5  # a peer bound names its collective by the kernel's recorded start on this rank


@dataclass
class CollectiveFloor:
    """Bounds on one rank's collective kernels, and the split of their recorded time into transfer and wait.

    Attributes:
        act: activity indices of the collective kernels (shape ``(n,)``).
        end_min_us: the earliest each may end (shape ``(n,)``, µs on the rank's clock).
        from_peers: how many of the bounds come from the peers' recorded arrivals (the rest: recorded ends).
        dur_us: each one's recorded duration (shape ``(n,)``, µs; empty when unknown).
        transfer_us: the part of it taken as the transfer (shape ``(n,)``, µs): the shortest recorded duration of a
            collective kernel of the same name and message (``In msg nelems``, ``dtype``; the name alone where the
            trace gives no size) on this rank; the rest is the wait for the last peer.
        per_step: how many analysed steps the collectives counted in :meth:`moving_text` cover, and which of them
            (shape ``(n,)``, True: recorded start inside an analysed step).
    """

    act: np.ndarray
    end_min_us: np.ndarray
    from_peers: int = 0
    dur_us: np.ndarray = dataclasses.field(default_factory=lambda: np.empty(0))
    transfer_us: np.ndarray = dataclasses.field(default_factory=lambda: np.empty(0))
    per_step: tuple[int, np.ndarray] = (0, np.empty(0, dtype=bool))

    def text(self) -> str:
        """The assumption of a rank-specific fix (the peers unchanged), for the saving's method."""
        n = int(self.act.size)
        if self.from_peers:
            return (
                f"the other ranks unchanged: each of the rank's {n} collective kernels ends no earlier than the "
                f"latest other rank's recorded arrival plus the transfer ({self.from_peers} where this rank "
                "arrived last, from the peers' traces; its recorded end for the others)"
            )
        return (
            f"the other ranks unchanged: each of the rank's {n} collective kernels ends no earlier than recorded "
            "(its recorded wait is taken as the peers': they arrive as they did)"
        )

    def moving_text(self) -> str:
        """The assumption of a fix every rank gets (the peers move alike), with the collectives' recorded time per
        analysed step split into transfer and wait (ms), for the saving's method."""
        n_steps, inside = self.per_step
        head = (
            "the other ranks assumed alike and fixed alike (one program): their arrivals move with this rank's, so "
            "each of its collective kernels keeps its recorded duration"
        )
        if n_steps <= 0 or self.dur_us.size != self.act.size or not inside.any():
            return head
        head = head.replace("kernels keeps", f"kernels ({int(inside.sum()) / n_steps:.0f} per step) keeps")
        total = float(self.dur_us[inside].sum()) / n_steps
        transfer = float(self.transfer_us[inside].sum()) / n_steps
        return (
            f"{head}, {total / 1000:.2f} ms per step: {transfer / 1000:.2f} ms of transfer (each collective's "
            f"shortest recorded duration for its name and size on this rank) and {(total - transfer) / 1000:.2f} ms "
            "of waiting for the last peer, whose skew stays as recorded"
        )

    def apply(self, scenario: Scenario, n_act: int, moved_us: np.ndarray | None = None) -> Scenario:
        """``scenario`` with these bounds added to its ``act_end_min_us`` (unchanged when the peers move too).

        ``moved_us`` (shape ``(n_act,)``, µs): how much earlier the scenario's program-wide parts alone end each
        activity (``Scenario.peers_with``); the peers, alike, get those parts too, so each bound moves earlier by
        its collective's amount.
        """
        if scenario.peers_move or self.act.size == 0:
            return scenario
        em = np.full(n_act, -np.inf) if scenario.act_end_min_us is None else np.array(scenario.act_end_min_us)
        bound = self.end_min_us if moved_us is None else self.end_min_us - np.asarray(moved_us)[self.act]
        em[self.act] = np.maximum(em[self.act], bound)
        return dataclasses.replace(scenario, act_end_min_us=em)


def transfer_part(dur_us: np.ndarray, key: list[tuple[object, ...]]) -> np.ndarray:
    """The transfer part of each collective's recorded duration (µs, shape of ``dur_us``): the shortest duration
    among the collectives with the same ``key`` (name, message size, dtype): the copy that waited least for its
    peers. An upper bound on the transfer, so the wait it leaves is a lower bound."""
    out = np.asarray(dur_us, dtype=np.float64).copy()
    groups: dict[tuple[object, ...], list[int]] = {}
    for i, k in enumerate(key):
        groups.setdefault(k, []).append(i)
    for idx in groups.values():
        out[idx] = out[idx].min()
    return out


def recorded_floor(
    act_end_us: np.ndarray,
    comm: np.ndarray,
    world_size: int,
    dur_us: np.ndarray | None = None,
    key: list[tuple[object, ...]] | None = None,
    per_step: tuple[int, np.ndarray] | None = None,
) -> CollectiveFloor | None:
    """Each collective kernel (activity indices ``comm``) bounded by its recorded end (``act_end_us``: every
    activity's, µs); None when the rank has none or the trace says it is the only rank (``world_size`` 1;
    0: unknown, the collective kernels then say the job has peers). ``dur_us`` (every activity's recorded
    duration, µs), ``key`` (per collective: name, size, dtype) and ``per_step`` (analysed steps, and per
    collective whether it lies in one) give the transfer/wait split (:func:`transfer_part`)."""
    if comm.size == 0 or world_size == 1:
        return None
    floor = CollectiveFloor(act=comm, end_min_us=np.asarray(act_end_us[comm], dtype=np.float64))
    if dur_us is not None and key is not None and len(key) == comm.size:
        floor.dur_us = np.asarray(dur_us[comm], dtype=np.float64)
        floor.transfer_us = transfer_part(floor.dur_us, key)
        if per_step is not None:
            floor.per_step = per_step
    return floor


def peers_text(floor: CollectiveFloor, scenario: Scenario) -> str:
    """What a what-if's ``scenario`` assumes of the peers, for its saving's method: they move alike
    (:meth:`CollectiveFloor.moving_text`), arrive as bounded (:meth:`CollectiveFloor.text`), or get only the
    program-wide part of a combination (``Scenario.peers_with``)."""
    if scenario.peers_move:
        return floor.moving_text()
    if scenario.peers_with is not None:
        return (
            f"{floor.text()}, except that they get {scenario.peers_with.name} alike (a change to the program every "
            "rank runs): each bound moves earlier by as much as that alone moves its collective"
        )
    return floor.text()


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
