"""One rank's dependency graph, built from the trace tables (all times µs, absolute as in the file).

Nodes and edges (arrays, no per-event Python objects):

- **device activities** (kernels, memcpys, memsets of every device), sorted by start. Each starts at the latest of
  three constraints: its launch (``host time of the launching runtime call + act_lat_us``; the call is joined by
  ``correlation``), the previous activity on the same ``(device, stream)`` (FIFO: ``end + act_gap_us``), and a
  cross-stream dependency (``end of act_dep + act_dep_gap_us``, and the edges of :mod:`perfdoctor.replay.deps`:
  recorded stream waits, collective order). An activity without a launch record in the trace
  (work queued before the profiler started) keeps its recorded start.
- **blocking host calls**: synchronize calls, blocking copies, and other runtime calls (``cudaFree``, a launch into a
  full queue) the host provably sat in until device work finished. Each waits for one activity (``blk_dep``) and
  returns ``blk_lat_us`` after it ends, or after ``blk_own_us`` of its own time, whichever is later.
- **host work** is the recorded timeline of each process: everything the host does between two blocking calls
  (CPU ops, Python, runtime calls, the measured gaps between them) keeps its recorded duration; a blocking call that
  returns later or earlier shifts every later host event of its process by the difference.

The offsets are read from the recording so that replaying it with the recorded durations reproduces it; which
constraint binds is decided per activity (see :func:`_bind_constraints`). Assumptions standing in for
dependencies the trace does not record are listed in :attr:`ReplayGraph.assumptions`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from perfdoctor.replay.activities import ACT_TABLES, Activities, activities
from perfdoctor.replay.deps import cross_stream_edges
from perfdoctor.trace.join import launch_rows
from perfdoctor.trace.tables import TraceTables

# host calls that block until the device (or a stream/event) catches up: CUDA and HIP spellings
SYNC_CALL = re.compile(
    r"^(cuda|hip)(Device|Stream|Event|Ctx)Synchronize$|^cu(Ctx|Stream|Event)Synchronize"
    r"|^(cuda|hip)Memcpy(Peer)?$|^(cuda|hip)Memcpy[DH]to[DH]$|^hipMemcpyWithStream$"
)
# runtime calls that queue work or ask cheap questions (a long one may still block: a full launch queue)
QUEUE_CALL = re.compile(
    r"Launch|Memcpy.*Async|Memset.*Async|EventRecord|StreamWaitEvent|GetDevice|"
    r"StreamIsCapturing|GetLastError|PeekAtLastError|FuncGetAttributes|Occupancy|"
    r"StreamGetCaptureInfo|StreamGetPriority|DeviceGetStreamPriorityRange|FuncSetAttribute|"
    r"EventQuery|PointerGetAttributes|^cu(da)?Graph",
    re.IGNORECASE,
)
# a launch into a full queue (1,024 entries on CUDA) blocks; shorter launch calls are never treated as waiting
LONG_LAUNCH_US = 50.0
# unexplained delay (µs) beyond which an activity's start is searched for a cross-stream dependency
SLACK_US = 20.0
DEFAULT_LAUNCH_LAT_US = 5.0  # launch → start latency when the trace has no launch-bound activity to measure it
DEFAULT_RELEASE_US = 5.0  # device end → sync return when the trace has no waiting sync to measure it


@dataclass
class ReplayLists:
    """The columns of a graph the replay's loop reads that no scenario changes, as Python lists (list indexing is
    what the loop's one pass does fastest), and its visit order (an activity as its index ``i``, a blocking call as
    ``~i``): made once per graph by :func:`perfdoctor.replay.simulate.replay`."""

    order: list[int]
    prev: list[int]
    gap: list[float]
    dgap: list[float]
    ab: list[int]
    bb: list[int]
    blat: list[float]
    dep: list[int]
    dur: list[float]
    bdep: list[int]


@dataclass
class ReplayGraph:
    """Arrays of one rank's graph (see the module docstring).

    Activities (``n_act``): ``act_ts_us``, ``act_dur_us``, ``act_device``, ``act_stream``, ``act_table`` (index
    into :data:`ACT_TABLES`), ``act_row`` (row in that table), ``act_launch`` (runtime row, -1 none),
    ``act_launch_ts_us`` (the call's start; the activity's own start without one), ``act_pid`` (host process of
    the launch, -1 none), ``act_lat_us``, ``act_prev`` / ``act_gap_us``, ``act_dep`` / ``act_dep_gap_us``.

    Blocking calls (``n_blk``, sorted by recorded end): ``blk_row`` (runtime row), ``blk_ts_us``, ``blk_end_us``,
    ``blk_pid``, ``blk_dep`` (activity, -1 none), ``blk_lat_us``, ``blk_own_us``, ``blk_waited`` (the recorded call
    ended within ``blk_lat_us`` of its activity's end: it waited). ``act_blk_before`` / ``blk_blk_before``: the
    last blocking call of the same process that ended before the launch / call started (-1 none).
    """

    act_ts_us: np.ndarray
    act_dur_us: np.ndarray
    act_device: np.ndarray
    act_stream: np.ndarray
    act_table: np.ndarray
    act_row: np.ndarray
    act_launch: np.ndarray
    act_launch_ts_us: np.ndarray
    act_pid: np.ndarray
    act_lat_us: np.ndarray
    act_prev: np.ndarray
    act_gap_us: np.ndarray
    act_dep: np.ndarray
    act_dep_gap_us: np.ndarray
    act_blk_before: np.ndarray
    blk_row: np.ndarray
    blk_ts_us: np.ndarray
    blk_end_us: np.ndarray
    blk_pid: np.ndarray
    blk_dep: np.ndarray
    blk_lat_us: np.ndarray
    blk_own_us: np.ndarray
    blk_waited: np.ndarray
    blk_blk_before: np.ndarray
    assumptions: list[str] = field(default_factory=list)
    # further cross-stream edges (recorded event waits, collective ordering), sorted by ``xdep_dst``: activity
    # ``xdep_dst[k]`` starts no earlier than ``end of xdep_src[k] + xdep_gap_us[k]`` (shape ``(n_xdep,)``)
    xdep_src: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    xdep_dst: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    xdep_gap_us: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.float64))
    # per activity (shape ``(n_act,)``, or empty: none), the part of ``act_lat_us`` beyond what its launch and
    # stream explain: it started more than SLACK_US late with its work queued and no other stream's activity to
    # wait for (a device stall the trace does not explain; the attribution charges it to ``other``, not the host)
    act_stall_us: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.float64))
    # (category, math dtype or "", name) of every activity, object arrays: perfdoctor.replay.kernel_classes, made once
    kernel_classes: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
    # the replay loop's fixed columns, made on the first replay (perfdoctor.replay.simulate)
    replay_lists: ReplayLists | None = field(default=None, repr=False, compare=False)
    # the category of every activity with the optimizer override (object array), made once by
    # perfdoctor.replay.attribution
    categories: np.ndarray | None = field(default=None, repr=False, compare=False)

    @property
    def n_act(self) -> int:
        return int(self.act_ts_us.size)

    @property
    def n_blk(self) -> int:
        return int(self.blk_ts_us.size)

    @property
    def act_end_us(self) -> np.ndarray:
        return np.asarray(self.act_ts_us + self.act_dur_us)


def _join_launch(tables: TraceTables, acts: Activities) -> np.ndarray:
    """Runtime row of each activity's launching call (:func:`perfdoctor.trace.join.launch_rows`; -1 for none)."""
    out = np.full(acts.ts_us.size, -1, dtype=np.int64)
    for k, tname in enumerate(ACT_TABLES):
        m = acts.table == k
        if m.any():
            out[m] = launch_rows(tables, tname)[acts.row[m]]
    return out


def _stream_prev(device: np.ndarray, stream: np.ndarray) -> np.ndarray:
    """Index of the previous activity on the same (device, stream), -1 for the first (input sorted by start)."""
    n = device.size
    prev = np.full(n, -1, dtype=np.int64)
    if n == 0:
        return prev
    order = np.lexsort((np.arange(n), stream, device))
    same = (device[order][1:] == device[order][:-1]) & (stream[order][1:] == stream[order][:-1])
    prev[order[1:][same]] = order[:-1][same]
    return prev


def _latest_end_before(
    end: np.ndarray,
    group: np.ndarray,
    eligible_from: np.ndarray,
    t: np.ndarray,
    t_group: np.ndarray,
    launch: np.ndarray,
    launched_by: np.ndarray,
) -> np.ndarray:
    """For each query k: the activity of group ``t_group[k]`` with the latest end ≤ ``t[k]`` whose launch time is
    ≤ ``launched_by[k]`` and whose end is > ``eligible_from[k]``; -1 when none.

    ``group`` per activity (a device, or a device-stream key). A few vectorised back-steps over the end-sorted
    activities of the group; a query still unresolved after them gets -1 (a dependency is then not assumed).
    """
    out = np.full(t.size, -1, dtype=np.int64)
    if end.size == 0 or t.size == 0:
        return out
    order = np.lexsort((end, group))
    g_s, e_s = group[order], end[order]
    # position of the last activity with (group, end) <= (t_group, t)
    keys_hi = np.searchsorted(g_s, t_group, side="right")
    keys_lo = np.searchsorted(g_s, t_group, side="left")
    pos = np.empty(t.size, dtype=np.int64)
    for lo_hi in np.unique(t_group):
        m = t_group == lo_hi
        lo, hi = int(keys_lo[m][0]), int(keys_hi[m][0])
        pos[m] = lo + np.searchsorted(e_s[lo:hi], t[m], side="right") - 1
    lo_bound = keys_lo
    active = pos >= lo_bound
    for _ in range(16):
        idx = np.flatnonzero(active)
        if idx.size == 0:
            break
        cand = order[pos[idx]]
        too_early = end[cand] <= eligible_from[idx]
        ok = (launch[cand] <= launched_by[idx]) & ~too_early
        out[idx[ok]] = cand[ok]
        active[idx[ok | too_early]] = False
        step_back = idx[~(ok | too_early)]
        pos[step_back] -= 1
        active[step_back] = pos[step_back] >= lo_bound[step_back]
    return out


@dataclass(frozen=True)
class _Binding:
    """The offsets that reproduce each activity's recorded start (µs, shape ``(n_act,)``): launch latency
    (``lat``), gap after the previous activity of its stream (``gap``), the cross-stream dependency taken
    (``dep``, -1 none) and the gap after its end (``dep_gap``), and the unexplained delay (``stall``)."""

    lat: np.ndarray
    gap: np.ndarray
    dep: np.ndarray
    dep_gap: np.ndarray
    stall: np.ndarray


def _typical_latency(typ: np.ndarray, dev: np.ndarray, to_launch: np.ndarray, m: np.ndarray) -> np.ndarray:
    """``typ`` (µs per activity) with each device's entries set to the median launch→start time (``to_launch``)
    of its activities in ``m``; devices without one keep theirs."""
    out = typ.copy()
    for d in np.unique(dev).tolist():
        md = m & (dev == d)
        if md.any():
            out[dev == d] = float(np.median(to_launch[md]))
    return out


def _other_stream_waits(
    acts: Activities,
    launch_ts: np.ndarray,
    has_launch: np.ndarray,
    earliest: np.ndarray,
    unexplained: np.ndarray,
) -> np.ndarray:
    """For each activity in ``unexplained`` (started more than :data:`SLACK_US` after ``earliest``, µs, its launch
    and stream allow), the latest-ending activity of another stream on its device that ended in between: taken as
    the one it waited for (-1 none, and for every other activity)."""
    ts, dev, stream = acts.ts_us, acts.device, acts.stream
    end = ts + acts.dur_us
    dep = np.full(ts.size, -1, dtype=np.int64)
    if unexplained.any():
        q = np.flatnonzero(unexplained)
        # another stream's activity on the same device: group by device, skip this stream by requiring end > the
        # stream's own constraints (the previous activity on this stream ends before them)
        cand = _latest_end_before(
            end, dev, earliest[q], ts[q] + 1e-9, dev[q], np.where(has_launch, launch_ts, ts), ts[q]
        )
        same_stream = (cand >= 0) & (stream[np.maximum(cand, 0)] == stream[q])
        cand[same_stream] = -1
        dep[q] = cand
    return dep


def _binding_notes(n_waits: int, n_unexplained: int) -> list[str]:
    """The assumptions :func:`_bind_constraints` makes: ``n_waits`` activities given another stream's activity to
    wait for, ``n_unexplained`` late ones kept as launch latency."""
    notes = []
    if n_waits:
        notes.append(
            f"{n_waits} device activities started later than their launch and stream allow; each "
            "waits for the activity of another stream that ended just before it (assumed: an event wait "
            "the trace does not record)"
        )
    if n_unexplained:
        notes.append(
            f"{n_unexplained} device activities started more than {SLACK_US:.0f} µs after their launch and "
            "stream allowed, with no other stream's activity to explain it: the delay is kept as fixed "
            "launch latency"
        )
    return notes


def _bind_constraints(
    acts: Activities, launch_ts: np.ndarray, has_launch: np.ndarray, prev: np.ndarray, notes: list[str]
) -> _Binding:
    """Which constraint started each activity in the recording, and the offsets that reproduce its start.

    - launch-bound (the stream was free when the launch could start it): ``lat = start - launch``; the stream term
      keeps its recorded gap only if that gap is not larger than the launch term (it never binds first).
    - stream-bound (queued behind the previous activity): ``gap = start - prev end``; the launch term keeps the
      device's typical launch latency (median over launch-bound activities) so that a what-if that frees the stream
      earlier starts it earlier.
    - neither explains a start more than :data:`SLACK_US` late: the latest-ending activity of another stream on the
      same device that ended in between is taken as a cross-stream dependency (an unrecorded event wait); without one
      the delay is kept as launch latency (counted in the assumptions).
    """
    ts, dev = acts.ts_us, acts.device
    end = ts + acts.dur_us
    prev_end = np.where(prev >= 0, end[np.maximum(prev, 0)], -np.inf)
    to_launch = np.where(has_launch, ts - launch_ts, 0.0)
    lb = has_launch & (prev_end <= launch_ts) & (to_launch >= 0)  # the stream was free at the launch
    typ = _typical_latency(np.full(ts.size, DEFAULT_LAUNCH_LAT_US), dev, to_launch, lb)
    earliest = np.maximum(
        np.where(has_launch, launch_ts + np.minimum(typ, np.maximum(to_launch, 0.0)), -np.inf), prev_end
    )
    unexplained = has_launch & (ts - earliest > SLACK_US)
    dep = _other_stream_waits(acts, launch_ts, has_launch, earliest, unexplained)
    has_dep = dep >= 0
    dep_end = np.where(has_dep, end[np.maximum(dep, 0)], -np.inf)
    # the typical launch latency again, without the activities a cross-stream wait held back
    typ = _typical_latency(typ, dev, to_launch, lb & ~has_dep)
    small_lat = np.minimum(typ, np.maximum(to_launch, 0.0))
    # queued: the stream was still busy when the launch could have started the activity
    stream_bound = ~has_dep & (prev >= 0) & (~has_launch | (prev_end >= launch_ts + small_lat))
    lat = np.where(has_launch, to_launch, 0.0)
    lat = np.where(stream_bound | has_dep, np.where(has_launch, small_lat, 0.0), lat)
    gap = np.where(prev >= 0, ts - prev_end, 0.0)
    gap = np.where(stream_bound, gap, np.minimum(gap, 0.0))
    # beyond the typical launch latency (the one ``lat`` keeps for queued activities) and the stream's constraint
    stall_from = np.maximum(np.where(has_launch, launch_ts + small_lat, -np.inf), prev_end)
    stall = np.where(unexplained & ~has_dep, np.maximum(ts - stall_from, 0.0), 0.0)
    notes.extend(_binding_notes(int(has_dep.sum()), int((unexplained & ~has_dep).sum())))
    return _Binding(lat, gap, dep, np.where(has_dep, ts - dep_end, 0.0), stall)


@dataclass(frozen=True)
class _BlockingCalls:
    """The blocking host calls, sorted by recorded end (shape ``(n_blk,)``; see :class:`ReplayGraph`'s ``blk_*``):
    runtime ``row``, ``ts`` / ``end`` (µs), ``pid``, the activity waited for (``dep``, -1 none), release latency
    (``lat``, µs), own time (``own``, µs) and whether it waited (``waited``)."""

    row: np.ndarray
    ts: np.ndarray
    end: np.ndarray
    pid: np.ndarray
    dep: np.ndarray
    lat: np.ndarray
    own: np.ndarray
    waited: np.ndarray

    @classmethod
    def none(cls) -> _BlockingCalls:
        """No blocking call (a trace without runtime calls or device activities)."""
        e, ei = np.empty(0), np.empty(0, dtype=np.int64)
        return cls(ei, e, e, ei, ei, e, e, np.empty(0, bool))


def _blocking_copies(tables: TraceTables, acts: Activities, launch_row: np.ndarray) -> np.ndarray:
    """Per runtime row: the call launched a pageable copy (staged by the driver, so the host waits for it)."""
    from perfdoctor.analysis.timing.classify import classify_kernel  # category/pageable names live in one table

    mc_tab = acts.table == ACT_TABLES.index("memcpy")
    blocking_copy = np.zeros(len(tables.runtime), dtype=bool)
    if mc_tab.any():
        names = tables.names
        pageable = np.array([classify_kernel(names[i]).pageable for i in tables.memcpy["name_id"].tolist()], dtype=bool)
        rows = launch_row[mc_tab]
        pg = pageable[acts.row[mc_tab]]
        blocking_copy[rows[(rows >= 0) & pg]] = True
    return blocking_copy


def _waited_activity(
    acts: Activities, launch_ts: np.ndarray, launch_row: np.ndarray, ts: np.ndarray, end: np.ndarray
) -> np.ndarray:
    """For each call ``[ts, end)`` (µs): the latest-ending activity launched by its start, on any stream or device,
    that ended by its return (+1 µs of clock); -1 none."""
    a_end = acts.end_us
    a_launch = np.where(launch_row >= 0, launch_ts, acts.ts_us)
    group = acts.device * 0  # one group: a device sync waits for every device of the process
    return _latest_end_before(
        a_end, group, np.full(ts.size, -np.inf), end + 1.0, np.zeros(ts.size, np.int64), a_launch, ts
    )


def _blocking_calls(
    tables: TraceTables, acts: Activities, launch_ts: np.ndarray, launch_row: np.ndarray, notes: list[str]
) -> _BlockingCalls:
    """Runtime calls that block the host until device work ends, and the activity each waits for.

    A synchronize call or blocking copy (:data:`SYNC_CALL`, or a copy whose memcpy is pageable or device-to-host
    and synchronous) always waits; any other call waits only when the trace shows it (an activity launched before
    it ended inside it: ``cudaFree``, a launch into a full queue). The activity waited for is the latest-ending
    one launched at or before the call, on any stream, that ended by the call's return (a stream or event
    synchronize is assumed to wait for it too: the trace does not say which stream an event was recorded on).
    """
    rt = tables.runtime
    if len(rt) == 0 or acts.ts_us.size == 0:
        return _BlockingCalls.none()
    rt_name = rt["name_id"]
    is_sync = tables.names_matching(SYNC_CALL)[rt_name]
    blocking_copy = _blocking_copies(tables, acts, launch_row)
    always = is_sync | blocking_copy
    idx = np.flatnonzero(always | ~tables.names_matching(QUEUE_CALL)[rt_name] | (rt["dur_us"] > LONG_LAUNCH_US))
    dep = _waited_activity(acts, launch_ts, launch_row, rt["ts_us"][idx], rt["end_us"][idx])
    has = dep >= 0
    dep_end = np.where(has, (acts.end_us)[np.maximum(dep, 0)], -np.inf)
    waited = has & (dep_end > rt["ts_us"][idx])
    keep = always[idx] | waited
    idx, dep, dep_end, waited, has = idx[keep], dep[keep], dep_end[keep], waited[keep], has[keep]
    ts, end_c = rt["ts_us"][idx], rt["end_us"][idx]
    release = end_c - dep_end
    typ_release = float(np.median(release[waited])) if waited.any() else DEFAULT_RELEASE_US
    lat = np.where(waited, release, np.minimum(np.where(has, release, 0.0), max(typ_release, 0.0)))
    own = np.where(waited, np.clip(release, 0.0, end_c - ts), end_c - ts)
    order = np.argsort(end_c, kind="stable")
    if idx.size:
        notes.append(
            f"{idx.size} blocking host call(s) ({int(waited.sum())} of them waited for the device): each waits for "
            "the device activity that, in the recording, ended last before it returned among those launched "
            "before it"
        )
    pid = rt["pid"][idx][order].astype(np.int64)
    return _BlockingCalls(
        idx[order], ts[order], end_c[order], pid, np.where(has, dep, -1)[order], lat[order], own[order], waited[order]
    )


def _last_block_before(
    blk_pid: np.ndarray, blk_end: np.ndarray, pid: np.ndarray, t: np.ndarray, of_blocks: bool = False
) -> np.ndarray:
    """Index of the last blocking call of process ``pid[k]`` that ended at or before ``t[k]`` (-1 none).

    ``of_blocks``: the queries are the blocking calls themselves (``pid``, ``t``: their processes and starts, in
    the calls' order), and each is answered by an earlier call of its process, never itself: a call recorded with
    no duration ends where it starts, and reading its own (not yet replayed) shift as the host's dropped every
    earlier call's shift (on the DLRM 8-rank job a 0 µs ``cudaDeviceGetAttribute`` put each rank's host back on
    its recorded timeline, so no replay moved a step end past it)."""
    out = np.full(t.size, -1, dtype=np.int64)
    for p in np.unique(blk_pid).tolist():
        bi = np.flatnonzero(blk_pid == p)
        m = pid == p
        if not m.any():
            continue
        k = np.searchsorted(blk_end[bi], t[m], side="right") - 1
        if of_blocks:  # the j-th call of the process: at most the (j − 1)-th
            k = np.minimum(k, np.arange(bi.size) - 1)
        out[m] = np.where(k >= 0, bi[np.maximum(k, 0)], -1)
    return out


@dataclass(frozen=True)
class _Launches:
    """Each activity's launching runtime call (shape ``(n_act,)``): its row (-1 none), its start (µs; the
    activity's own start without one) and its host process (-1 none)."""

    row: np.ndarray
    ts_us: np.ndarray
    pid: np.ndarray

    @property
    def found(self) -> np.ndarray:
        """Whether each activity has a launch call in the trace."""
        return self.row >= 0


def _launches(tables: TraceTables, acts: Activities, notes: list[str]) -> _Launches:
    """The launch call of every activity (:func:`_join_launch`); notes how many have none."""
    rt = tables.runtime
    launch_row = _join_launch(tables, acts)
    has_launch = launch_row >= 0
    safe = np.maximum(launch_row, 0)
    launch_ts = np.where(has_launch, rt["ts_us"][safe], acts.ts_us) if len(rt) else acts.ts_us.copy()
    act_pid = (
        np.where(has_launch, rt["pid"][safe].astype(np.int64), -1)
        if len(rt)
        else np.full(acts.ts_us.size, -1, dtype=np.int64)
    )
    n_anchor = int((~has_launch).sum())
    if n_anchor:
        notes.append(
            f"{n_anchor} device activities have no launch call in the trace (queued before the recording "
            "began, or the launch was not recorded): they keep their recorded start"
        )
    return _Launches(launch_row, launch_ts, act_pid)


# what every graph assumes, whatever its trace
_GRAPH_NOTES = (
    "the baseline replay reproduces the recording by construction (its offsets are read from the "
    "recording), so its error (mean_error, max_step_error) is no evidence of accuracy; validation of "
    "what-ifs: benchmarks/replay_pairs.py (predicted vs measured on before/after trace pairs)",
    "host work keeps its recorded durations; all threads of a process share one timeline, shifted by "
    "each blocking call that returns earlier or later than recorded (waits between host threads are "
    "not recorded)",
)


def build_graph(tables: TraceTables) -> ReplayGraph:
    """The dependency graph of one trace (all devices, all host processes)."""
    notes: list[str] = []
    acts = activities(tables)
    launch = _launches(tables, acts, notes)
    prev = _stream_prev(acts.device, acts.stream)
    bind = _bind_constraints(acts, launch.ts_us, launch.found, prev, notes)
    blk = _blocking_calls(tables, acts, launch.ts_us, launch.row, notes)
    xsrc, xdst, xgap = cross_stream_edges(tables, acts, launch.row, launch.ts_us, notes)
    notes.extend(_GRAPH_NOTES)
    return ReplayGraph(
        act_ts_us=acts.ts_us,
        act_dur_us=acts.dur_us,
        act_device=acts.device,
        act_stream=acts.stream,
        act_table=acts.table,
        act_row=acts.row,
        act_launch=launch.row,
        act_launch_ts_us=launch.ts_us,
        act_pid=launch.pid,
        act_lat_us=bind.lat,
        act_prev=prev,
        act_gap_us=bind.gap,
        act_dep=bind.dep,
        act_dep_gap_us=bind.dep_gap,
        act_blk_before=_last_block_before(blk.pid, blk.end, launch.pid, launch.ts_us),
        blk_row=blk.row,
        blk_ts_us=blk.ts,
        blk_end_us=blk.end,
        blk_pid=blk.pid,
        blk_dep=blk.dep,
        blk_lat_us=blk.lat,
        blk_own_us=blk.own,
        blk_waited=blk.waited,
        blk_blk_before=_last_block_before(blk.pid, blk.end, blk.pid, blk.ts, of_blocks=True),
        assumptions=notes,
        xdep_src=xsrc,
        xdep_dst=xdst,
        xdep_gap_us=xgap,
        act_stall_us=bind.stall,
    )
