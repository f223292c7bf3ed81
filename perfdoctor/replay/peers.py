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

A fix applied on every rank alike (a larger batch: ``Scenario.peers_move``) moves the peers too; the bounds do
not apply to it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from perfdoctor.replay.simulate import Scenario

MATCH_TOLERANCE_US = 0.5  # a peer bound names its collective by the kernel's recorded start on this rank


@dataclass
class CollectiveFloor:
    """Bounds on one rank's collective kernels.

    Attributes:
        act: activity indices of the collective kernels (shape ``(n,)``).
        end_min_us: the earliest each may end (shape ``(n,)``, µs on the rank's clock).
        from_peers: how many of the bounds come from the peers' recorded arrivals (the rest: recorded ends).
    """

    act: np.ndarray
    end_min_us: np.ndarray
    from_peers: int = 0

    def text(self) -> str:
        """The assumption, for the saving's method."""
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

    def apply(self, scenario: Scenario, n_act: int) -> Scenario:
        """``scenario`` with these bounds added to its ``act_end_min_us`` (unchanged when the peers move too)."""
        if scenario.peers_move or self.act.size == 0:
            return scenario
        em = np.full(n_act, -np.inf) if scenario.act_end_min_us is None else np.array(scenario.act_end_min_us)
        em[self.act] = np.maximum(em[self.act], self.end_min_us)
        return dataclasses.replace(scenario, act_end_min_us=em)


def recorded_floor(act_end_us: np.ndarray, comm: np.ndarray, world_size: int) -> CollectiveFloor | None:
    """Each collective kernel (activity indices ``comm``) bounded by its recorded end (``act_end_us``: every
    activity's, µs); None when the rank has none or the trace says it is the only rank (``world_size`` 1;
    0: unknown, the collective kernels then say the job has peers)."""
    if comm.size == 0 or world_size == 1:
        return None
    return CollectiveFloor(act=comm, end_min_us=np.asarray(act_end_us[comm], dtype=np.float64))


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
    return CollectiveFloor(act=floor.act, end_min_us=end_min, from_peers=int(moved.sum()))
