"""Discrete-event replay of a :class:`~perfdoctor.replay.graph.ReplayGraph` (all times µs).

:func:`replay` runs the graph once, with the recorded durations or with a :class:`Scenario` (a what-if
transformation's edits): device activities start at the latest of their launch, their stream and their
cross-stream dependency; a blocking call returns after its own time or after the activity it waits for, whichever
is later, and shifts the rest of its process's host timeline by the difference; host time a scenario removes
(a prefetched DataLoader fetch, a removed sync) collapses out of the timeline.

Nodes are visited once, in an order every edge respects (recorded start of an activity, recorded end of a
blocking call, raised where a skewed clock would put a dependency later), so a replay is one linear pass.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from perfdoctor.errors import PerfDoctorError
from perfdoctor.replay.graph import ReplayGraph, ReplayLists

Intervals = tuple[np.ndarray, np.ndarray]
_EPS_US = 1e-6


@dataclass
class Scenario:
    """A what-if's edits to the recorded graph.

    Attributes:
        name: the transformation's name (``"recorded"`` for none).
        act_dur_us: new duration of every activity (shape ``(n_act,)``), or None to keep the recorded ones.
        host_cut: per host process id, disjoint sorted ``(starts, ends)`` of recorded host time that no longer
            runs (µs); every later host event of that process moves earlier by the time cut before it.
        blk_removed: per blocking call (shape ``(n_blk,)``), True when the call no longer waits for the device.
        act_dep_removed: per activity (shape ``(n_act,)``), True when it no longer waits for its cross-stream
            dependency ``act_dep``.
        xdep_removed: per further cross-stream edge, True when it is dropped.
        act_end_min_us: per activity (shape ``(n_act,)``), the earliest it may end (-inf: no bound): a collective
            cannot end before the last rank arrives plus the transfer (:mod:`perfdoctor.crossrank.joint`,
            :mod:`perfdoctor.crossrank.bounds`).
        peers_move: the fix is applied on every rank alike, so the peers' arrivals move with this rank's (CUDA
            graphs, a larger batch...): the per-rank collective bounds of :mod:`perfdoctor.crossrank.bounds` do not
            apply.
        peers_with: for a combination of fixes some of which every rank gets and some only this rank (``peers_move``
            False), the scenario of the former alone: the peers get those, so each collective bound moves earlier by
            as much as they alone move the collective's end
            (:meth:`perfdoctor.replay.collective_floor.CollectiveFloor.apply`).
    """

    name: str = "recorded"
    act_dur_us: np.ndarray | None = None
    host_cut: dict[int, Intervals] = field(default_factory=dict)
    blk_removed: np.ndarray | None = None
    act_dep_removed: np.ndarray | None = None
    xdep_removed: np.ndarray | None = None  # per edge of ``ReplayGraph.xdep_*`` (shape ``(n_xdep,)``): dropped
    act_end_min_us: np.ndarray | None = None
    # per edge of ``ReplayGraph.xdep_*``: a new source (an activity earlier on the recorded source's stream), -1 keeps
    xdep_src_moved: np.ndarray | None = None
    # per edge of ``ReplayGraph.xdep_*``: a new gap (µs) after its source's end (NaN: as recorded)
    xdep_gap_us: np.ndarray | None = None
    peers_move: bool = False
    peers_with: Scenario | None = None
    # per activity (shape ``(n_act,)``): the recorded-clock host time its launch call is issued at instead (NaN:
    # as recorded); the last blocking call before its recorded launch still shifts it
    act_launch_ts_us: np.ndarray | None = None

    @property
    def edits_graph(self) -> bool:
        """False when no field edits the recorded graph, so its replay is the recording's (the bounds of
        ``RankReplay.peers`` aside); ``act_dur_us`` edits it when given, whatever its values."""
        return bool(
            self.act_dur_us is not None
            or any(c[0].size for c in self.host_cut.values())
            or (self.blk_removed is not None and self.blk_removed.any())
            or (self.act_dep_removed is not None and self.act_dep_removed.any())
            or (self.xdep_removed is not None and self.xdep_removed.any())
            or (self.act_end_min_us is not None and not bool((self.act_end_min_us == -np.inf).all()))
            or (self.xdep_src_moved is not None and bool((self.xdep_src_moved >= 0).any()))
            or (self.xdep_gap_us is not None and not bool(np.isnan(self.xdep_gap_us).all()))
            or (self.act_launch_ts_us is not None and not bool(np.isnan(self.act_launch_ts_us).all()))
        )


@dataclass
class ReplayResult:
    """Replayed times: ``act_start_us`` / ``act_end_us`` (shape ``(n_act,)``), ``blk_end_us`` and ``blk_shift_us``
    (shape ``(n_blk,)``: replayed minus collapsed-recorded host time of its process after the call)."""

    graph: ReplayGraph
    scenario: Scenario
    act_start_us: np.ndarray
    act_end_us: np.ndarray
    blk_end_us: np.ndarray
    blk_shift_us: np.ndarray

    def host_time(self, pid: int, t_us: np.ndarray) -> np.ndarray:
        """Replayed time (µs) of recorded host times ``t_us`` of process ``pid``."""
        g = self.graph
        t = np.asarray(t_us, dtype=np.float64)
        mine = np.flatnonzero(g.blk_pid == pid)
        h = collapse(t, self.scenario.host_cut.get(pid))
        if mine.size == 0:
            return h
        k = np.searchsorted(g.blk_end_us[mine], t, side="right") - 1
        return h + np.where(k >= 0, self.blk_shift_us[mine[np.maximum(k, 0)]], 0.0)


def collapse(t_us: np.ndarray, cut: Intervals | None) -> np.ndarray:
    """``t - (time of ``cut`` before t)``: recorded host times with the removed intervals squeezed out (µs)."""
    t = np.asarray(t_us, dtype=np.float64)
    if cut is None or cut[0].size == 0:
        return t.copy()
    s, e = cut
    before = np.concatenate([[0.0], np.cumsum(e - s)])
    k = np.searchsorted(s, t, side="right") - 1
    kk = np.maximum(k, 0)
    partial = np.where(k >= 0, np.clip(t - s[kk], 0.0, e[kk] - s[kk]), 0.0)
    return t - np.where(k >= 0, before[kk], 0.0) - partial


def _visit_order(g: ReplayGraph) -> list[int]:
    """The nodes in an order every edge respects, as one list: an activity as its index ``i``, a blocking call as
    ``~i`` (negative); computed once per graph (:func:`_graph_lists`): a scenario changes durations and drops edges,
    never adds one, so the order stays valid."""
    kinds, idx = _compute_visit_order(g)
    order: list[int] = np.where(np.asarray(kinds) == 0, np.asarray(idx), ~np.asarray(idx)).tolist() if kinds else []
    return order


def _compute_visit_order(g: ReplayGraph) -> tuple[list[int], list[int]]:
    """(kind, index) pairs in an order every edge respects: kind 0 = activity, 1 = blocking call."""
    key_a = np.maximum(g.act_ts_us, np.where(g.act_launch >= 0, g.act_launch_ts_us, -np.inf))
    key_b = g.blk_end_us.copy()
    prev, dep, ab, bd, bb = g.act_prev, g.act_dep, g.act_blk_before, g.blk_dep, g.blk_blk_before
    for _ in range(64):
        new_a = key_a.copy()
        if prev.size:
            new_a = np.maximum(new_a, np.where(prev >= 0, key_a[np.maximum(prev, 0)] + _EPS_US, -np.inf))
            new_a = np.maximum(new_a, np.where(dep >= 0, key_a[np.maximum(dep, 0)] + _EPS_US, -np.inf))
            if g.xdep_dst.size:
                np.maximum.at(new_a, g.xdep_dst, key_a[g.xdep_src] + _EPS_US)
        if key_b.size and new_a.size:
            new_a = np.maximum(new_a, np.where(ab >= 0, key_b[np.maximum(ab, 0)] + _EPS_US, -np.inf))
        new_b = key_b.copy()
        if key_b.size:
            if new_a.size:
                new_b = np.maximum(new_b, np.where(bd >= 0, new_a[np.maximum(bd, 0)] + _EPS_US, -np.inf))
            new_b = np.maximum(new_b, np.where(bb >= 0, new_b[np.maximum(bb, 0)] + _EPS_US, -np.inf))
        if np.array_equal(new_a, key_a) and np.array_equal(new_b, key_b):
            break
        key_a, key_b = new_a, new_b
    else:
        raise PerfDoctorError("replay: the dependency graph has a cycle (inconsistent timestamps)")
    keys = np.concatenate([key_a, key_b])
    kinds = np.concatenate([np.zeros(key_a.size, np.int64), np.ones(key_b.size, np.int64)])
    idx = np.concatenate([np.arange(key_a.size), np.arange(key_b.size)])
    order = np.lexsort((kinds, keys))
    return kinds[order].tolist(), idx[order].tolist()


def _graph_lists(g: ReplayGraph) -> ReplayLists:
    """The graph's columns the replay loop reads that no scenario changes, as Python lists, with its visit order
    (:func:`_visit_order`): built once per graph and kept on it (``tolist`` of a 232,023-node graph's columns cost
    ~40 ms of each ~100 ms replay)."""
    if g.replay_lists is None:
        g.replay_lists = ReplayLists(
            order=_visit_order(g),
            prev=g.act_prev.tolist(),
            gap=g.act_gap_us.tolist(),
            dgap=g.act_dep_gap_us.tolist(),
            ab=g.act_blk_before.tolist(),
            bb=g.blk_blk_before.tolist(),
            blat=g.blk_lat_us.tolist(),
            dep=g.act_dep.tolist(),
            dur=np.asarray(g.act_dur_us, dtype=np.float64).tolist(),
            bdep=np.asarray(g.blk_dep).tolist(),
        )
    return g.replay_lists


def _extra_deps(g: ReplayGraph, sc: Scenario) -> dict[int, list[tuple[int, float]]]:
    """The graph's further cross-stream edges a scenario keeps: destination → [(source, gap µs)]."""
    keep = np.ones(g.xdep_dst.size, dtype=bool)
    if sc.xdep_removed is not None:
        keep &= ~np.asarray(sc.xdep_removed, dtype=bool)
    src = g.xdep_src if sc.xdep_src_moved is None else np.where(sc.xdep_src_moved >= 0, sc.xdep_src_moved, g.xdep_src)
    gaps = g.xdep_gap_us
    if sc.xdep_gap_us is not None:
        gaps = np.where(np.isnan(sc.xdep_gap_us), g.xdep_gap_us, sc.xdep_gap_us)
    out: dict[int, list[tuple[int, float]]] = {}
    for s, d, gap in zip(src[keep].tolist(), g.xdep_dst[keep].tolist(), gaps[keep].tolist()):
        out.setdefault(d, []).append((s, gap))
    return out


def _checked(g: ReplayGraph, sc: Scenario) -> tuple[np.ndarray, np.ndarray]:
    """The scenario's activity durations (µs, shape ``(n_act,)``) and removed blocking calls (bool, ``(n_blk,)``).

    Raises:
        PerfDoctorError: either has the wrong shape for ``g``.
    """
    dur = g.act_dur_us if sc.act_dur_us is None else np.asarray(sc.act_dur_us, dtype=np.float64)
    removed = np.zeros(g.n_blk, bool) if sc.blk_removed is None else np.asarray(sc.blk_removed, dtype=bool)
    if dur.shape != (g.n_act,) or removed.shape != (g.n_blk,):
        raise PerfDoctorError(f"replay: scenario {sc.name!r} does not fit the graph ({dur.shape}, {removed.shape})")
    return dur, removed


def _host_times(g: ReplayGraph, sc: Scenario) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Host times (µs) under the scenario: each activity's launch call (a moved launch in its place), each blocking
    call's start and end, with the host time the scenario cuts squeezed out of each process's timeline."""
    h_launch = g.act_launch_ts_us.copy()
    if sc.act_launch_ts_us is not None:
        moved = ~np.isnan(np.asarray(sc.act_launch_ts_us, dtype=np.float64))
        h_launch[moved] = np.asarray(sc.act_launch_ts_us, dtype=np.float64)[moved]
    h_bs, h_be = g.blk_ts_us.copy(), g.blk_end_us.copy()
    for pid, cut in sc.host_cut.items():
        m = g.act_pid == pid
        h_launch[m] = collapse(h_launch[m], cut)
        mb = g.blk_pid == pid
        h_bs[mb], h_be[mb] = collapse(g.blk_ts_us[mb], cut), collapse(g.blk_end_us[mb], cut)
    return h_launch, h_bs, h_be


@dataclass
class _Columns:
    """What one replay's loop reads, as Python lists: the graph's fixed columns (``fixed``) and the ones the
    scenario sets. Per activity: ``base`` (its start from its launch alone, µs: host launch + latency, or its
    recorded start without a launch), ``dep`` (cross-stream dependency, -1 none), ``dur`` (µs), ``end_min`` (the
    earliest it may end, µs; None: no bound); ``extra``: further cross-stream edges (:func:`_extra_deps`). Per
    blocking call: ``bdep`` (the activity it waits for, -1 none), ``own`` (its own host time, µs), ``hbs`` / ``hbe``
    (its host start and end, µs, cut time squeezed out)."""

    fixed: ReplayLists
    base: list[float]
    dep: list[int]
    dur: list[float]
    end_min: list[float] | None
    extra: dict[int, list[tuple[int, float]]]
    bdep: list[int]
    own: list[float]
    hbs: list[float]
    hbe: list[float]


def _columns(g: ReplayGraph, sc: Scenario, dur: np.ndarray, removed: np.ndarray) -> _Columns:
    """The loop's inputs for ``sc`` (``dur`` / ``removed``: :func:`_checked`'s), the graph's own lists where the
    scenario leaves a column as recorded."""
    h_launch, h_bs, h_be = _host_times(g, sc)
    # a call that no longer waits takes what is left of its host time (a cut may keep part of it: a launch)
    left = np.maximum(h_be - h_bs, 0.0)
    own = np.where(removed, left, np.minimum(g.blk_own_us, left))
    anchored = g.act_launch < 0
    fixed = _graph_lists(g)
    end_min = None if sc.act_end_min_us is None else np.asarray(sc.act_end_min_us, float).tolist()
    if end_min is None and np.isnan(dur).any():  # a NaN end takes the -inf bound, as a bound's test reads it
        end_min = [-np.inf] * g.n_act
    return _Columns(
        fixed=fixed,
        base=np.where(anchored, g.act_ts_us, h_launch + g.act_lat_us).tolist(),
        dep=fixed.dep if sc.act_dep_removed is None else np.where(sc.act_dep_removed, -1, g.act_dep).tolist(),
        dur=fixed.dur if sc.act_dur_us is None else dur.tolist(),
        end_min=end_min,
        extra=_extra_deps(g, sc),
        bdep=fixed.bdep if sc.blk_removed is None else np.where(removed, -1, g.blk_dep).tolist(),
        own=own.tolist(),
        hbs=h_bs.tolist(),
        hbe=h_be.tolist(),
    )


def _run(n_act: int, n_blk: int, c: _Columns) -> tuple[list[float], list[float], list[float], list[float]]:
    """The replay's one pass over the nodes in visit order: (activity starts, activity ends, blocking-call ends,
    blocking-call shifts), µs. An activity starts at the latest of its launch (shifted by the last blocking call
    before it), its stream's previous end + gap and its dependencies' ends + gaps; a blocking call ends at the
    later of its own time and its activity's end + release latency, and shifts its process's host time after it."""
    order, base, durl, end_min, xd = c.fixed.order, c.base, c.dur, c.end_min, c.extra
    prev, gap, dep, dgap, ab, bb, blat = (
        c.fixed.prev,
        c.fixed.gap,
        c.dep,
        c.fixed.dgap,
        c.fixed.ab,
        c.fixed.bb,
        c.fixed.blat,
    )
    bdl, ownl, hbs, hbe = c.bdep, c.own, c.hbs, c.hbe
    # index -1 (no predecessor, no blocking call before) reads a sentinel at the end of each list: an end of -inf
    # binds nothing, a shift of 0 moves nothing; the same arithmetic as testing for -1 first, without the branch
    start = [0.0] * n_act
    end = [0.0] * n_act + [-np.inf]
    bend = [0.0] * n_blk
    shift = [0.0] * (n_blk + 1)
    for i in order:
        if i >= 0:
            st = base[i] + shift[ab[i]]
            t = end[prev[i]] + gap[i]
            if t > st:
                st = t
            t = end[dep[i]] + dgap[i]
            if t > st:
                st = t
            if xd:
                x = xd.get(i)
                if x is not None:
                    for s_, g_ in x:
                        if end[s_] + g_ > st:
                            st = end[s_] + g_
            start[i] = st
            t = st + durl[i]
            if end_min is not None and not t >= end_min[i]:
                t = end_min[i]
            end[i] = t
        else:
            i = ~i
            e = hbs[i] + shift[bb[i]] + ownl[i]
            t = end[bdl[i]] + blat[i]
            if t > e:
                e = t
            bend[i] = e
            shift[i] = e - hbe[i]
    del end[-1], shift[-1]
    return start, end, bend, shift


def replay(g: ReplayGraph, scenario: Scenario | None = None) -> ReplayResult:
    """Replay ``g`` under ``scenario`` (None: the recording itself).

    Returns:
        :class:`ReplayResult` with every activity's and blocking call's replayed times (µs).

    Raises:
        PerfDoctorError: a scenario array has the wrong shape, or the graph has a cycle.
    """
    sc = scenario or Scenario()
    dur, removed = _checked(g, sc)
    start, end, bend, shift = _run(g.n_act, g.n_blk, _columns(g, sc, dur, removed))
    return ReplayResult(
        graph=g,
        scenario=sc,
        act_start_us=np.asarray(start),
        act_end_us=np.asarray(end),
        blk_end_us=np.asarray(bend),
        blk_shift_us=np.asarray(shift),
    )
