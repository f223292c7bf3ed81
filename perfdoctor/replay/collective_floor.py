"""The bounds one rank's replay puts on its collective kernels: each ends no earlier than a given time (µs).

A collective kernel's recorded duration holds the rank's wait for the last peer to arrive, so a what-if that makes
the rank arrive earlier must not end the collective earlier than the peers let it. :class:`CollectiveFloor` holds
those bounds and applies them inside the replay (:attr:`perfdoctor.replay.simulate.Scenario.act_end_min_us`),
collective by collective; :func:`recorded_floor` builds the default, each collective bounded by its recorded end.
Where better bounds come from (the peers' recorded arrivals), which what-ifs move the peers, and the words that
state the assumption: :mod:`perfdoctor.crossrank.bounds`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from perfdoctor.replay.simulate import Scenario


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
        per_step: how many analysed steps the collectives counted in
            :func:`perfdoctor.crossrank.bounds.moving_text` cover, and which of them
            (shape ``(n,)``, True: recorded start inside an analysed step).
    """

    act: np.ndarray
    end_min_us: np.ndarray
    from_peers: int = 0
    dur_us: np.ndarray = dataclasses.field(default_factory=lambda: np.empty(0))
    transfer_us: np.ndarray = dataclasses.field(default_factory=lambda: np.empty(0))
    per_step: tuple[int, np.ndarray] = (0, np.empty(0, dtype=bool))

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
