"""Ranks replayed together: a collective ends when the last rank has arrived and the data has moved (all µs).

Replayed alone, a rank's collective kernels keep their recorded durations, which hold the wait for the last peer:
a what-if that makes the rank arrive earlier then ends its collectives earlier too, though its peers have not
moved. Replayed jointly, the k-th collective kernel of every rank (start order on each rank's device; the same
program issues the same collectives in the same order) takes its transfer time, the shortest recorded copy, and
ends no earlier than

    T_k = max over ranks p of (start[p, k] − offset[p]) + transfer_k       (rank r's clock: T_k + offset[r])

(``offset``: one clock offset per rank, the median over the collectives of ``end[r, k] − end[0, k]``, as
:func:`perfdoctor.analysis.replay_cap.clock_offsets` computes it). A what-if on one rank thus moves the others'
waits. The ranks are replayed again with the bounds of the previous round until no bound moves: a round only
delays collectives, and each settles at least the earliest unsettled one, so it ends within n + 1 rounds.

:func:`match` refuses (None and the reason) when the ranks ran different numbers of collective kernels, when the
k-th copies do not end together (:func:`perfdoctor.analysis.collective_wait.copies_end_together`), or when the
joint replay of the recording misses a rank's recorded steps by more than
:data:`perfdoctor.replay.rank.MAX_MEAN_ERROR`; each rank is then replayed alone.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from perfdoctor.replay.rank import MAX_MEAN_ERROR, RankReplay
from perfdoctor.replay.simulate import ReplayResult, Scenario, replay
from perfdoctor.replay.windows import replayed_windows
from perfdoctor.trace.tables import TraceTables


@dataclass
class JointReplay:
    """Matched ranks: ``coll[r]`` the activity indices of rank r's collectives (shape ``(n,)``, the same n for
    every rank), ``offset_us`` (shape ``(n_ranks,)``) and ``transfer_us`` (shape ``(n,)``)."""

    ranks: list[RankReplay]
    coll: list[np.ndarray]
    offset_us: np.ndarray
    transfer_us: np.ndarray

    def replay(self, scenarios: list[Scenario | None] | None = None) -> list[ReplayResult]:
        """Every rank replayed under its scenario (None: the recording), collectives bounded as above."""
        scs = scenarios or [None] * len(self.ranks)
        base: list[Scenario] = []
        for rr, sc, idx in zip(self.ranks, scs, self.coll):
            g = rr.graph
            own = dataclasses.replace(sc) if sc is not None else Scenario()
            dur = (g.act_dur_us if own.act_dur_us is None else np.asarray(own.act_dur_us, dtype=np.float64)).copy()
            dur[idx] = np.minimum(dur[idx], self.transfer_us)
            own.act_dur_us = dur
            base.append(own)
        bound = np.full(self.transfer_us.size, -np.inf)  # T_k on the first rank's clock
        for _ in range(self.transfer_us.size + 2):
            res = []
            for r, (rr, sc, idx) in enumerate(zip(self.ranks, base, self.coll)):
                em = np.full(rr.graph.n_act, -np.inf) if sc.act_end_min_us is None else sc.act_end_min_us.copy()
                em[idx] = np.maximum(em[idx], bound + self.offset_us[r])
                res.append(replay(rr.graph, dataclasses.replace(sc, act_end_min_us=em)))
            arrival = np.array(
                [x.act_start_us[idx] - self.offset_us[r] for r, (x, idx) in enumerate(zip(res, self.coll))]
            )
            new = arrival.max(axis=0) + self.transfer_us
            if np.allclose(new, bound, rtol=0.0, atol=1e-6):
                break
            bound = new
        return res

    def step_times(self, scenarios: list[Scenario | None] | None = None) -> list[np.ndarray]:
        """Replayed duration of every analysed step of each rank (µs, shape ``(n_steps,)`` per rank)."""
        out = []
        for rr, res in zip(self.ranks, self.replay(scenarios)):
            start, end = replayed_windows(res, rr.windows)
            out.append(np.asarray(end - start))
        return out


def _collectives(rr: RankReplay, tables: TraceTables) -> np.ndarray:
    """Activity indices of the rank's collective kernels on its busiest device, in start order."""
    from perfdoctor.replay.transforms.kernels import _kernel_classes

    g = rr.graph
    cat, _, _ = _kernel_classes(tables, rr)
    comm = np.flatnonzero(cat == "communication")
    if comm.size == 0:
        return comm
    dev = int(np.bincount(g.act_device[comm] - g.act_device[comm].min()).argmax() + g.act_device[comm].min())
    comm = comm[g.act_device[comm] == dev]
    return np.asarray(comm[np.argsort(g.act_ts_us[comm], kind="stable")])


def match(ranks: list[RankReplay], tables: list[TraceTables]) -> tuple[JointReplay | None, str]:
    """The ranks' collectives matched for a joint replay, or (None, why not) (see the module docstring)."""
    from perfdoctor.analysis.collective_wait import copies_end_together
    from perfdoctor.analysis.replay_cap import clock_offsets

    if len(ranks) < 2:
        return None, "single rank"
    coll = [_collectives(rr, t) for rr, t in zip(ranks, tables)]
    counts = {c.size for c in coll}
    if len(counts) != 1 or 0 in counts:
        return None, f"the ranks ran different numbers of collective kernels ({', '.join(str(c.size) for c in coll)})"
    starts = np.array([rr.graph.act_ts_us[c] for rr, c in zip(ranks, coll)])
    durs = np.array([rr.graph.act_dur_us[c] for rr, c in zip(ranks, coll)])
    ends = starts + durs
    if not copies_end_together(ends, durs):
        return None, "the k-th collective kernels of the ranks do not end together (not the same collectives)"
    jr = JointReplay(ranks, coll, clock_offsets(ends), durs.min(axis=0))
    for rr, rep in zip(ranks, jr.step_times()):
        rec = float(rr.recorded_step_us.mean()) if rr.recorded_step_us.size else 0.0
        off = float(rep.mean()) / rec - 1 if rec > 0 else 0.0
        if abs(off) > MAX_MEAN_ERROR:
            return None, f"the joint replay of the recording misses a rank's mean step by {100 * off:+.1f}%"
    return jr, ""
