"""One attribution of every µs of a rank's steps, read off the replay's critical path.

The critical path is walked backwards from the end of the last analysed step to the start of the first, through
the constraint that bound each node in the replay (:mod:`perfdoctor.replay.simulate`):

- a device activity charges its own time to its category (matmul, ..., ``communication`` — on the critical path
  communication is exposed by definition —, memcpy, memset); the path continues through the constraint that started
  it: the previous activity on its stream, the activity of another stream it waited for (the gap between the two
  is charged to the activity's category: device-side overhead), or its launch;
- a launch charges the time from the host's launch call to the activity's start to ``host_launch_bound`` (launch
  latency) and the path moves to the host; the part of it the graph calls a stall (``act_stall_us``: the activity
  started more than :data:`perfdoctor.replay.graph.SLACK_US` later than its launch and stream allow, with no other
  stream's activity to wait for) is ``other``: its work was queued, the host was not what the device waited for;
- host time is charged, µs by µs, to ``dataloader`` (inside a DataLoader ``__next__``), ``synchronization`` (inside a
  blocking call's own time), ``host_launch_bound`` (inside any CPU op or runtime call: the framework and launch
  overhead of queuing work) or ``python`` (the process outside every op: its own Python, I/O, sleeps), back to
  the last blocking call that
  waited for the device; there only the release latency (device end → call return) is ``synchronization``, and the
  path continues on the device activity the call waited for. A sync that returned at once costs only its own µs.
- time before the first recorded launch, with no launch to follow (work queued before the recording), is ``other``.

Segments are disjoint and cover ``[first window start, last window end)`` exactly, so per step they add up to the
step time, and the part of them that falls in a device's idle gaps is that device's idle, by cause.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from perfdoctor.replay.activities import ACT_TABLES
from perfdoctor.replay.rank import RankReplay
from perfdoctor.replay.simulate import ReplayResult
from perfdoctor.trace.tables import TraceTables

Intervals = tuple[np.ndarray, np.ndarray]
HOST_CAUSES = ("dataloader", "synchronization", "host_launch_bound", "python", "other")
DATALOADER = re.compile(r"^enumerate\(DataLoader\)#.*__next__|DataLoader.*__next__|^DataLoader")
OPTIMIZER_STEP = re.compile(r"^Optimizer\.step#")
_OVERRIDABLE = {"elementwise", "reduction_norm", "other", "optimizer"}
_TIE_US = 1e-6
# internal labels of the walk (host segments are split by cause after it)
_HOST, _LAUNCH, _SYNC, _INHERITED, _STALL = -1, -2, -3, -4, -5


@dataclass
class Attribution:
    """The critical path of one rank as labelled segments (µs, sorted, disjoint).

    ``start_us`` / ``end_us`` / ``label`` (shape ``(n,)``); ``label`` is a category name (device work) or a host
    cause of :data:`HOST_CAUSES`.
    """

    start_us: np.ndarray
    end_us: np.ndarray
    label: np.ndarray

    def labels(self) -> list[str]:
        return sorted(set(self.label.tolist()))

    def intervals(self, label: str) -> Intervals:
        m = self.label == label
        return self.start_us[m], self.end_us[m]

    def per_window(self, ws: np.ndarray, we: np.ndarray, within: Intervals | None = None) -> dict[str, np.ndarray]:
        """µs of each label inside each window ``[ws[i], we[i])`` (optionally only inside ``within``)."""
        from perfdoctor.trace import intervals as iv

        s, e, label = self.start_us, self.end_us, self.label
        if within is not None:  # the segments cut by ``within`` once, each piece keeping its segment's label
            s, e, seg = _clip_to(s, e, within)
            label = label[seg]
        return {lab: iv.per_window((s[m], e[m]), ws, we) for lab in self.labels() for m in [label == lab]}

    def idle_causes(self, gaps: Intervals, ws: np.ndarray, we: np.ndarray) -> dict[str, np.ndarray]:
        """Per step, a device's idle gaps split by the critical path's cause at that time (adds up to the gaps);
        idle while the path is on another device's work counts as ``other``."""
        per = self.per_window(ws, we, within=gaps)
        out = {c: per.pop(c, np.zeros(ws.size)) for c in HOST_CAUSES}
        for v in per.values():
            out["other"] = out["other"] + v
        return out


def _clip_to(s: np.ndarray, e: np.ndarray, within: Intervals) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The parts of the sorted disjoint segments ``[s, e)`` inside the interval set ``within``: (starts, ends,
    index of the segment each part comes from), sorted; O(n + m + parts)."""
    ws_, we_ = within
    lo = np.searchsorted(we_, s, side="right")  # first interval of ``within`` ending after the segment's start
    hi = np.searchsorted(ws_, e, side="left")  # past the last one starting before its end
    cnt = np.maximum(hi - lo, 0)
    seg = np.repeat(np.arange(s.size), cnt)
    j = np.repeat(lo, cnt) + np.arange(int(cnt.sum())) - np.repeat(np.cumsum(cnt) - cnt, cnt)
    ps, pe = np.maximum(s[seg], ws_[j]), np.minimum(e[seg], we_[j])
    keep = pe > ps
    return ps[keep], pe[keep], seg[keep]


def _categories(tables: TraceTables, rr: RankReplay) -> np.ndarray:
    """Category of every activity of the graph, with the breakdown's optimizer override (object array; made once
    per graph, as the tables are one per graph: read it, do not edit it)."""
    if rr.graph.categories is None:
        rr.graph.categories = _compute_categories(tables, rr)
    return rr.graph.categories


def _compute_categories(tables: TraceTables, rr: RankReplay) -> np.ndarray:
    from perfdoctor.analysis.timing.classify import classify_kernel

    g = rr.graph
    names = tables.names
    cat = np.empty(g.n_act, dtype=object)
    for k, tname in enumerate(ACT_TABLES):
        m = g.act_table == k
        if not m.any():
            continue
        if tname == "kernels":  # the breakdown's categories: unfused attention and c10d-named comm need the op
            from perfdoctor.analysis.timing.kernel_ops import kernel_labels

            cat[m] = kernel_labels(tables).category[g.act_row[m]]
            continue
        ids = tables.tables[tname]["name_id"][g.act_row[m]]
        uniq, inv = np.unique(ids, return_inverse=True)
        cat[m] = np.array([classify_kernel(names[i]).category for i in uniq.tolist()], dtype=object)[inv]
    opt = _named(tables, OPTIMIZER_STEP)
    if opt[0].size and g.n_act:
        lt = g.act_launch_ts_us
        in_opt = np.searchsorted(opt[0], lt, side="right") - 1
        inside = (in_opt >= 0) & (lt < opt[1][np.maximum(in_opt, 0)])
        over = np.isin(cat, list(_OVERRIDABLE)) & inside
        cat[over] = "optimizer"
    return cat


def _named(tables: TraceTables, rx: re.Pattern[str], pid: int | None = None) -> Intervals:
    from perfdoctor.trace import intervals as iv

    ok = tables.names_matching(rx)
    starts, ends = [], []
    for tname in ("annotations", "cpu_ops"):
        tab = tables.tables[tname]
        if len(tab) == 0:
            continue
        m = ok[tab["name_id"]]
        if pid is not None:
            m &= tab["pid"] == pid
        starts.append(tab["ts_us"][m])
        ends.append(tab["end_us"][m])
    if not starts:
        return np.empty(0), np.empty(0)
    return iv.union(np.concatenate(starts), np.concatenate(ends))


def _binding(rr: RankReplay, res: ReplayResult) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(kind per activity: 0 launch / no predecessor, 1 stream, 2 cross-stream dep; waited per blocking call;
    the cross-stream dependency that binds each activity, -1 none), for the replay ``res`` (the edges its
    scenario drops or moves are left out or moved, as in :func:`perfdoctor.replay.simulate.replay`)."""
    g, sc = rr.graph, res.scenario
    st = res.act_start_us
    prev_t = np.where(g.act_prev >= 0, res.act_end_us[np.maximum(g.act_prev, 0)] + g.act_gap_us, -np.inf)
    dep = g.act_dep.copy() if sc.act_dep_removed is None else np.where(sc.act_dep_removed, -1, g.act_dep)
    dep_t = np.where(dep >= 0, res.act_end_us[np.maximum(dep, 0)] + g.act_dep_gap_us, -np.inf)
    keep = np.ones(g.xdep_dst.size, dtype=bool) if sc.xdep_removed is None else ~np.asarray(sc.xdep_removed, bool)
    xsrc = g.xdep_src if sc.xdep_src_moved is None else np.where(sc.xdep_src_moved >= 0, sc.xdep_src_moved, g.xdep_src)
    xdst, xsrc, xgap = g.xdep_dst[keep], xsrc[keep], g.xdep_gap_us[keep]
    if xdst.size:  # further edges (recorded event waits, collective order): the latest-ending one binds
        xt = res.act_end_us[xsrc] + xgap
        order = np.lexsort((xt, xdst))
        last = np.r_[xdst[order][1:] != xdst[order][:-1], True]
        d, s, t = xdst[order][last], xsrc[order][last], xt[order][last]
        later = t > dep_t[d]
        dep[d[later]], dep_t[d[later]] = s[later], t[later]
    kind = np.zeros(g.n_act, dtype=np.int64)
    kind[prev_t >= st - _TIE_US] = 1
    kind[(dep_t >= st - _TIE_US) & (dep_t >= prev_t)] = 2
    dep_end = np.where(g.blk_dep >= 0, res.act_end_us[np.maximum(g.blk_dep, 0)] + g.blk_lat_us, -np.inf)
    waited = (g.blk_dep >= 0) & (dep_end >= res.blk_end_us - _TIE_US) & g.blk_waited
    if sc.blk_removed is not None:
        waited &= ~np.asarray(sc.blk_removed, dtype=bool)
    return kind, waited, dep


@dataclass
class _PathColumns:
    """What the backward walk reads of one replay, as Python lists (µs): per activity its replayed start and end,
    the constraint that bound it (``kind``: 0 launch or none, 1 stream, 2 cross-stream dependency; ``prev`` /
    ``dep``: the activity behind each), its launch call (``launch``: runtime row, -1 none), the host time of that
    call (``launch_t``), its process and its stall (:attr:`ReplayGraph.act_stall_us`); per blocking call the
    activity it waits for and whether it waited; per process its blocking calls (indices, replayed ends, by end)."""

    start: list[float]
    end: list[float]
    kind: list[int]
    prev: list[int]
    dep: list[int]
    launch: list[int]
    launch_t: list[float]
    pid: list[int]
    stall: list[float]
    blk_dep: list[int]
    blk_waited: list[bool]
    blk_by_pid: dict[int, tuple[np.ndarray, np.ndarray]]


def _path_columns(rr: RankReplay, res: ReplayResult) -> _PathColumns:
    """The walk's columns of the replay ``res`` (its binding constraints: :func:`_binding`)."""
    g = rr.graph
    kind, waited, bound_dep = _binding(rr, res)
    by_pid: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for p in np.unique(g.blk_pid).tolist():
        idx = np.flatnonzero(g.blk_pid == p)
        by_pid[p] = (idx, res.blk_end_us[idx])
    return _PathColumns(
        start=res.act_start_us.tolist(),
        end=res.act_end_us.tolist(),
        kind=kind.tolist(),
        prev=g.act_prev.tolist(),
        dep=bound_dep.tolist(),
        launch=g.act_launch.tolist(),
        launch_t=(res.act_start_us - g.act_lat_us).tolist(),
        pid=g.act_pid.tolist(),
        stall=g.act_stall_us.tolist() if g.act_stall_us.size == g.n_act else [0.0] * g.n_act,
        blk_dep=g.blk_dep.tolist(),
        blk_waited=waited.tolist(),
        blk_by_pid=by_pid,
    )


def _last_waited(c: _PathColumns, pid: int, t: float) -> tuple[int, float]:
    """The last blocking call of process ``pid`` that ended by ``t`` (µs) and waited for the device, and its
    replayed end (µs); (-1, -inf) when none."""
    idx, ends = c.blk_by_pid.get(pid, (np.empty(0, np.int64), np.empty(0)))
    j = int(np.searchsorted(ends, t, side="right")) - 1
    while j >= 0 and not c.blk_waited[int(idx[j])]:
        j -= 1
    return (int(idx[j]), float(ends[j])) if j >= 0 else (-1, -np.inf)


@dataclass
class _Segments:
    """The walk's segments as parallel lists: start and end (µs, clipped at ``lo``), label (>= 0: activity index;
    < 0: internal labels) and, for host segments, the process id (else -1)."""

    lo: float
    start: list[float] = field(default_factory=list)
    end: list[float] = field(default_factory=list)
    label: list[int] = field(default_factory=list)
    pid: list[int] = field(default_factory=list)

    def add(self, a: float, b: float, label: int, pid: int = -1) -> None:
        """Record ``[max(a, lo), b)`` when it is not empty."""
        lo = self.lo
        a = lo if lo > a else a  # max(a, lo), as max() picks it
        if b > a:
            self.start.append(a)
            self.end.append(b)
            self.label.append(label)
            self.pid.append(pid)


def _walk(rr: RankReplay, res: ReplayResult, lo: float, hi: float, start_act: int, host_pid: int) -> _Segments:
    """Backward walk through the replay ``res`` from ``hi`` to ``lo`` (µs), starting on activity ``start_act`` (-1:
    on the host of ``host_pid``); see the module docstring."""
    c = _path_columns(rr, res)
    a_start, a_end, kindl, prevl, depl = c.start, c.end, c.kind, c.prev, c.dep
    out = _Segments(lo)
    seg = out.add
    ss_add, ee_add, lab_add, pids_add = out.start.append, out.end.append, out.label.append, out.pid.append
    t = hi
    node = start_act
    pid = host_pid
    while t > lo:
        if node >= 0:
            s = a_start[node]
            s = t if t < s else s  # min(a_start, t), as min() picks it
            a = lo if lo > s else s  # seg(s, t, node), inlined: the walk's one call per activity
            if t > a:
                ss_add(a)
                ee_add(t)
                lab_add(node)
                pids_add(-1)
            t = s
            k = kindl[node]
            if k == 1 or k == 2:
                pred = prevl[node] if k == 1 else depl[node]
                pe = a_end[pred]
                pe = t if t < pe else pe
                a = lo if lo > pe else pe  # seg(pe, t, node), inlined
                if t > a:
                    ss_add(a)
                    ee_add(t)
                    lab_add(node)
                    pids_add(-1)
                t, node = pe, pred
            elif c.launch[node] >= 0:
                lt = min(c.launch_t[node], t)
                mid = max(min(t - c.stall[node], t), lt)
                seg(mid, t, _STALL)
                seg(lt, mid, _LAUNCH)
                t, pid, node = lt, c.pid[node], -1
            else:
                seg(lo, t, _INHERITED)
                break
            continue
        # on the host of process `pid` at time t: back to the last blocking call that waited
        b, b_end = _last_waited(c, pid, t)
        if b < 0 or b_end <= lo:
            seg(lo, t, _HOST, pid)
            break
        seg(b_end, t, _HOST, pid)
        de = min(a_end[c.blk_dep[b]], b_end)
        seg(de, b_end, _SYNC)
        t, node = de, c.blk_dep[b]
    return out


def _host_split(
    tables: TraceTables, rr: RankReplay, hs: np.ndarray, he: np.ndarray, pid: int, res: ReplayResult | None = None
) -> list[Intervals]:
    """Host segments of one process split into :data:`HOST_CAUSES` (priority in that order). With a what-if's
    replay ``res``, the recorded host intervals (fetches, blocking calls, ops) are first moved to their replayed
    times (:meth:`perfdoctor.replay.simulate.ReplayResult.host_time`: host time the what-if cut collapses away)."""
    from perfdoctor.trace import intervals as iv

    def at(s: Intervals) -> Intervals:
        if res is None or s[0].size == 0:
            return s
        return iv.union(res.host_time(pid, s[0]), res.host_time(pid, s[1]))

    seg = iv.union(hs, he)
    dl = iv.intersect(seg, at(_named(tables, DATALOADER, pid if pid >= 0 else None)))
    rest = iv.subtract(seg, dl)
    g = rr.graph
    mb = g.blk_pid == pid
    calls = iv.union(g.blk_ts_us[mb], g.blk_end_us[mb])
    if res is not None and calls[0].size:
        calls = iv.union(res.host_time(pid, g.blk_ts_us[mb]), res.blk_end_us[mb])
    sync = iv.intersect(rest, calls)
    rest = iv.subtract(rest, sync)
    busy_parts = []
    for tname in ("cpu_ops", "runtime"):
        tab = tables.tables[tname]
        if len(tab):
            m = tab["pid"] == pid if pid >= 0 else np.ones(len(tab), bool)
            busy_parts.append(at(iv.union(tab["ts_us"][m], tab["end_us"][m])))
    busy = iv.intersect(rest, iv.union_of(*busy_parts)) if busy_parts else iv.EMPTY
    # the host process is outside every op and runtime call: the script's own Python (preprocessing, logging),
    # or I/O and sleeps with no op around them (its own cause, PD106)
    return [dl, sync, busy, iv.subtract(rest, busy), iv.EMPTY]


def critical_path(tables: TraceTables, rr: RankReplay, res: ReplayResult | None = None) -> Attribution:
    """The labelled critical path of the analysed steps (see the module docstring) of the recording's replay, or of
    a what-if's replay ``res`` (its host times moved as :func:`_host_split` says)."""
    from perfdoctor.replay.windows import replayed_windows

    mapped = res
    res = rr.baseline if res is None else res
    ws, we = replayed_windows(res, rr.windows)
    empty = Attribution(np.empty(0), np.empty(0), np.empty(0, dtype=object))
    if ws.size == 0:
        return empty
    lo, hi = float(ws[0]), float(we[-1])
    g = rr.graph
    start_act = -1
    if g.n_act:
        ends = np.where(res.act_end_us <= hi + _TIE_US, res.act_end_us, -np.inf)
        cand = int(np.argmax(ends))
        host_end = float(res.host_time(rr.windows.pid, rr.windows.host_end_us[-1:])[0])
        if ends[cand] > -np.inf and ends[cand] >= min(host_end, hi) - _TIE_US:
            start_act = cand
    path = _walk(rr, res, lo, hi, start_act, rr.windows.pid)
    s, e = np.asarray(path.start), np.asarray(path.end)
    lb, pp = np.asarray(path.label, dtype=np.int64), np.asarray(path.pid, dtype=np.int64)
    cats = _categories(tables, rr)
    labels = np.empty(s.size, dtype=object)
    dev = lb >= 0
    labels[dev] = cats[lb[dev]]
    labels[lb == _LAUNCH] = "host_launch_bound"
    labels[lb == _SYNC] = "synchronization"
    labels[(lb == _INHERITED) | (lb == _STALL)] = "other"
    parts_s, parts_e, parts_l = [s[lb != _HOST]], [e[lb != _HOST]], [labels[lb != _HOST]]
    host = lb == _HOST
    for p in np.unique(pp[host]).tolist():
        m = host & (pp == p)
        for cause, (cs, ce) in zip(HOST_CAUSES, _host_split(tables, rr, s[m], e[m], p, mapped), strict=True):
            parts_s.append(cs)
            parts_e.append(ce)
            parts_l.append(np.full(cs.size, cause, dtype=object))
    s_all, e_all, l_all = np.concatenate(parts_s), np.concatenate(parts_e), np.concatenate(parts_l)
    order = np.argsort(s_all, kind="stable")
    return Attribution(s_all[order], e_all[order], l_all[order])
