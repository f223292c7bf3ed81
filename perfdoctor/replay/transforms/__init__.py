"""What-if transformations: one small function per fix, each returning a :class:`WhatIf` (a
:class:`~perfdoctor.replay.simulate.Scenario` plus the assumption and its source, shown next to the saving).

A transformation edits the recorded graph (activity durations, host time cut from a process's timeline, blocking
calls that no longer wait); :meth:`perfdoctor.replay.rank.RankReplay.fixed_step_times` replays it (with any other
fixes) per analysed step; a check's saving is the step without it − the step with it, the mean over the analysed steps
(:meth:`perfdoctor.checks.context.RankContext.replayed_saving`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from perfdoctor.replay.simulate import Intervals, Scenario


@dataclass
class WhatIf:
    """A transformation's scenario and what it assumes (one sentence each, for the report)."""

    name: str
    scenario: Scenario
    assumption: str
    source: str

    @property
    def changes_anything(self) -> bool:
        return self.scenario.edits_graph


def merge_cuts(*cuts: dict[int, Intervals]) -> dict[int, Intervals]:
    """Union of several per-process host cuts."""
    from perfdoctor.trace import intervals as iv

    out: dict[int, Intervals] = {}
    for cut in cuts:
        for pid, (s, e) in cut.items():
            out[pid] = iv.union_of(out[pid], (s, e)) if pid in out else iv.union(s, e)
    return out


def combine(name: str, parts: list[WhatIf], n_act: int, n_blk: int, act_dur_us: np.ndarray) -> WhatIf:
    """All transformations at once: the duration a transformation gives an activity (the shortest where several
    change it: a stretched copy stays stretched beside a fix that leaves it alone), every host cut, every removed
    wait, the earliest launch any of them issues an activity at (``act_dur_us``: the recorded durations). The
    peers move when every part moves them; when only some do, ``peers_with`` holds those parts combined (the peers
    get them, not the rank-specific rest)."""
    dur = act_dur_us.copy()
    changed = np.zeros(act_dur_us.size, dtype=bool)
    removed = np.zeros(n_blk, dtype=bool)
    dep_removed = np.zeros(n_act, dtype=bool)
    xdep_removed: np.ndarray | None = None
    end_min: np.ndarray | None = None
    moved: np.ndarray | None = None
    launch: np.ndarray | None = None
    gaps: np.ndarray | None = None
    for p in parts:
        if p.scenario.xdep_gap_us is not None:
            gp = np.asarray(p.scenario.xdep_gap_us, dtype=np.float64)
            gaps = gp.copy() if gaps is None else np.where(np.isnan(gaps), gp, gaps)
        if p.scenario.act_launch_ts_us is not None:
            lt = np.asarray(p.scenario.act_launch_ts_us, dtype=np.float64)
            launch = lt.copy() if launch is None else np.fmin(launch, lt)
        if p.scenario.xdep_src_moved is not None:
            mv = np.asarray(p.scenario.xdep_src_moved, dtype=np.int64)
            moved = mv.copy() if moved is None else np.where(moved >= 0, moved, mv)
        if p.scenario.act_end_min_us is not None:
            em = np.asarray(p.scenario.act_end_min_us, dtype=np.float64)
            end_min = em.copy() if end_min is None else np.maximum(end_min, em)
        if p.scenario.xdep_removed is not None:
            xr = np.asarray(p.scenario.xdep_removed, dtype=bool)
            xdep_removed = xr.copy() if xdep_removed is None else xdep_removed | xr
        if p.scenario.act_dep_removed is not None:
            dep_removed |= p.scenario.act_dep_removed
        if p.scenario.act_dur_us is not None:
            d = np.asarray(p.scenario.act_dur_us, dtype=np.float64)
            ch = d != act_dur_us
            dur = np.where(ch & changed, np.minimum(dur, d), np.where(ch, d, dur))
            changed |= ch
        if p.scenario.blk_removed is not None:
            removed |= p.scenario.blk_removed
    sc = Scenario(
        name=name,
        act_dur_us=dur,
        host_cut=merge_cuts(*(p.scenario.host_cut for p in parts)),
        blk_removed=removed,
        act_dep_removed=dep_removed,
        xdep_removed=xdep_removed,
        act_end_min_us=end_min,
        xdep_src_moved=moved,
        peers_move=all(p.scenario.peers_move for p in parts),
        act_launch_ts_us=launch,
        xdep_gap_us=gaps,
    )
    moving = [p for p in parts if p.scenario.peers_move]
    if moving and not sc.peers_move:
        sc.peers_with = combine(" + ".join(p.name for p in moving), moving, n_act, n_blk, act_dur_us).scenario
    return WhatIf(name, sc, "; ".join(p.assumption for p in parts), "; ".join(sorted({p.source for p in parts})))
