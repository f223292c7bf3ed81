"""Cross-stream edges the recording's timing alone does not reveal (all times µs, absolute as in the file).

A host-bound recording satisfies every cross-stream wait long before it matters: the consumer's launch comes after
the producer ended, so no start looks delayed and :func:`perfdoctor.replay.graph._bind_constraints` infers nothing.
A what-if that removes host time would then run a collective before the gradients it reduces, or the optimizer
before the all-reduce it waits for. Two sources of edges stand in for those waits:

- **recorded event waits** (``cudaStreamWaitEvent`` / ``hipStreamWaitEvent`` / ``cuStreamWaitEvent`` calls; Kineto's
  ``cuda_sync`` "Stream Wait Event" record, joined by ``correlation``, names the waiting stream). The first
  activity launched after the wait on the waiting stream depends on the last activity launched before the wait on
  every other stream of the device: the event's own record call does not say which stream it was recorded on, so
  every stream is assumed (conservative: it can only add waiting). The waiting stream is the record's ``stream``,
  else that of the next activity the waiting thread launches.
- **collective order** (only in a trace without any recorded event wait): a collective kernel (NCCL/RCCL) waits for
  the last activity of each other stream that ended before it started in the recording, and the first activity of
  each other stream that started after the collective ended and was launched after it waits for it.

An edge the recording contradicts (its producer ended more than :data:`TOL_US` after the consumer started) is
dropped; otherwise its gap is 0 (or the few-µs overlap the clock shows), so the recorded replay is unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from perfdoctor.replay.activities import Activities
from perfdoctor.trace.tables import TraceTables

TOL_US = 1.0  # clock granularity between streams of one device (µs)

Edges = tuple[np.ndarray, np.ndarray, np.ndarray]


@dataclass(frozen=True)
class _Stream:
    """One (device, stream)'s activities in stream order: their indices (``idx``), running maxima of their launch
    times (``lk``, µs) and ends (``end``, µs), and their starts (``ts``, µs)."""

    idx: np.ndarray
    lk: np.ndarray
    end: np.ndarray
    ts: np.ndarray


Streams = dict[tuple[int, int], _Stream]
Launched = dict[tuple[int, int], tuple[np.ndarray, np.ndarray]]


def _streams(acts: Activities, launch_key: np.ndarray) -> Streams:
    """Per (device, stream): activity indices in stream order with running maxima of launch time and end (µs)."""
    out: Streams = {}
    end = acts.end_us
    order = np.lexsort((np.arange(acts.ts_us.size), acts.stream, acts.device))
    dev_s, st_s = acts.device[order], acts.stream[order]
    cut = np.flatnonzero((np.diff(dev_s) != 0) | (np.diff(st_s) != 0)) + 1
    for part in np.split(order, cut):
        if part.size == 0:
            continue
        key = (int(acts.device[part[0]]), int(acts.stream[part[0]]))
        out[key] = _Stream(
            idx=part,
            lk=np.maximum.accumulate(launch_key[part]),
            end=np.maximum.accumulate(end[part]),
            ts=acts.ts_us[part],
        )
    return out


def _recorded_waiting_streams(tables: TraceTables) -> dict[int, tuple[int, int]]:
    """correlation → (device, stream) of each Kineto "Stream Wait Event" record: the stream that waits."""
    syncs = tables.tables["syncs"]
    out: dict[int, tuple[int, int]] = {}
    if len(syncs):
        is_wait = tables.names_matching(r"^Stream Wait Event$")[syncs["name_id"]]
        for c, d, s in zip(
            syncs["correlation"][is_wait].tolist(), syncs["device"][is_wait].tolist(), syncs["stream"][is_wait].tolist()
        ):
            out[int(c)] = (int(d), int(s))
    return out


def _launched_by_thread(tables: TraceTables, launch_row: np.ndarray, launch_key: np.ndarray) -> Launched:
    """Per host (pid, tid): the launch times (µs) and indices of the activities it launched, in launch order."""
    rt = tables.runtime
    a_idx = np.flatnonzero(launch_row >= 0)
    out: Launched = {}
    if a_idx.size == 0:
        return out
    rows = launch_row[a_idx]
    pid_tid = np.stack([rt["pid"][rows].astype(np.int64), rt["tid"][rows].astype(np.int64)], axis=1)
    keys, inv = np.unique(pid_tid, axis=0, return_inverse=True)
    inv = inv.reshape(-1)
    grouped = np.argsort(inv, kind="stable")
    bounds = np.searchsorted(inv[grouped], np.arange(len(keys) + 1))
    for j, (p, t) in enumerate(keys.tolist()):
        sel = a_idx[grouped[bounds[j] : bounds[j + 1]]]
        o = np.argsort(launch_key[sel], kind="stable")
        out[(int(p), int(t))] = (launch_key[sel][o], sel[o])
    return out


def _waiting_stream(
    tables: TraceTables, acts: Activities, w: int, recorded: dict[int, tuple[int, int]], launched: Launched
) -> tuple[int, int] | None:
    """The (device, stream) the wait call at runtime row ``w`` makes wait: its record's, else that of the next
    activity its thread launches; None when neither is known."""
    rt = tables.runtime
    target = recorded.get(int(rt["correlation"][w]))
    if target is not None:
        return target
    lk, sel = launched.get((int(rt["pid"][w]), int(rt["tid"][w])), (np.empty(0), np.empty(0, np.int64)))
    k = int(np.searchsorted(lk, float(rt["ts_us"][w]), side="right"))
    if k >= lk.size:
        return None
    nxt = int(sel[k])
    return (int(acts.device[nxt]), int(acts.stream[nxt]))


def _wait_edges(
    tables: TraceTables,
    acts: Activities,
    launch_row: np.ndarray,
    launch_key: np.ndarray,
    streams: Streams,
    wait_rows: np.ndarray,
) -> Edges:
    """Edges of the recorded stream waits (see the module docstring): (src, dst, gap) arrays."""
    rt = tables.runtime
    recorded = _recorded_waiting_streams(tables)
    launched = _launched_by_thread(tables, launch_row, launch_key)
    src: list[int] = []
    dst: list[int] = []
    for w in wait_rows.tolist():
        t_w = float(rt["ts_us"][w])
        target = _waiting_stream(tables, acts, w, recorded, launched)
        ws = streams.get(target) if target is not None else None
        if target is None or ws is None:
            continue
        k = int(np.searchsorted(ws.lk, t_w, side="right"))
        if k >= ws.idx.size:
            continue
        d = int(ws.idx[k])  # the first activity launched after the wait on the waiting stream
        for key, other in streams.items():
            if key[0] != target[0] or key == target:
                continue
            j = int(np.searchsorted(other.lk, t_w, side="left")) - 1
            if j >= 0:
                src.append(int(other.idx[j]))
                dst.append(d)
    return _finish(np.asarray(src, np.int64), np.asarray(dst, np.int64), acts.ts_us, acts.end_us)


def _collective_edges(
    tables: TraceTables,
    acts: Activities,
    launch_key: np.ndarray,
    streams: Streams,
) -> Edges:
    """Edges keeping each collective kernel in its recorded order relative to the other streams of its device."""
    ki = acts.table == 0  # kernels (ACT_TABLES[0])
    coll = np.zeros(acts.ts_us.size, dtype=bool)
    if ki.any():
        is_coll = tables.names_matching(r"(?i)nccl|rccl")[tables.kernels["name_id"]]
        coll[ki] = is_coll[acts.row[ki]]
    c = np.flatnonzero(coll)
    end = acts.end_us
    srcs: list[np.ndarray] = []
    dsts: list[np.ndarray] = []
    for key, other in streams.items():
        mine = c[(acts.device[c] == key[0]) & (acts.stream[c] != key[1])]
        if mine.size == 0:
            continue
        n = other.idx.size
        # the other stream's last activity that ended before the collective started → the collective
        j = np.searchsorted(other.end, acts.ts_us[mine] + TOL_US, side="right") - 1
        ok = j >= 0
        srcs.append(other.idx[j[ok]])
        dsts.append(mine[ok])
        # the collective → the other stream's first activity started after it ended and launched after it
        k = np.maximum(
            np.searchsorted(other.ts, end[mine] - TOL_US, side="left"),
            np.searchsorted(other.lk, launch_key[mine], side="right"),
        )
        ok = k < n
        srcs.append(mine[ok])
        dsts.append(other.idx[k[ok]])
    if not srcs:
        return _finish(np.empty(0, np.int64), np.empty(0, np.int64), acts.ts_us, end)
    return _finish(np.concatenate(srcs), np.concatenate(dsts), acts.ts_us, end)


def _finish(src: np.ndarray, dst: np.ndarray, ts: np.ndarray, end: np.ndarray) -> Edges:
    """Unique edges the recording does not contradict, sorted by destination, with their gaps (µs)."""
    if src.size == 0:
        return src, dst, np.empty(0, np.float64)
    pairs = np.unique(np.stack([dst, src], axis=1), axis=0)
    dst, src = pairs[:, 0], pairs[:, 1]
    slack = ts[dst] - end[src]
    ok = (slack >= -TOL_US) & (src != dst)
    return src[ok], dst[ok], np.minimum(slack[ok], 0.0)


def cross_stream_edges(
    tables: TraceTables, acts: Activities, launch_row: np.ndarray, launch_ts: np.ndarray, notes: list[str]
) -> Edges:
    """(src, dst, gap µs) arrays of every edge this module adds, sorted by dst; appends its assumption to
    ``notes``. ``acts``: :func:`perfdoctor.replay.activities.activities`; ``launch_row`` / ``launch_ts``: each
    activity's launching runtime row (-1 none) and its start time (the activity's own start without one)."""
    n = acts.ts_us.size
    empty: Edges = (np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.float64))
    if n == 0:
        return empty
    launch_key = np.where(launch_row >= 0, launch_ts, acts.ts_us)
    streams = _streams(acts, launch_key)
    rt = tables.runtime
    wait_rows = (
        np.flatnonzero(tables.names_matching(r"^(cuda|hip)StreamWaitEvent$|^cuStreamWaitEvent")[rt["name_id"]])
        if len(rt)
        else np.empty(0, np.int64)
    )
    if wait_rows.size:
        edges = _wait_edges(tables, acts, launch_row, launch_key, streams, wait_rows)
        notes.append(
            f"{wait_rows.size} recorded stream waits (cudaStreamWaitEvent): the first activity launched "
            "after each on the waiting stream waits for the last activity launched before it on every other "
            f"stream of the device ({edges[0].size} edges; the trace does not say on which stream the "
            "event was recorded, so all are assumed)"
        )
        return edges
    edges = _collective_edges(tables, acts, launch_key, streams)
    if edges[0].size:
        notes.append(
            "no stream waits are recorded: each collective kernel keeps its recorded order relative to the "
            "other streams (it waits for the last activity of each other stream that ended before it "
            "started, and what started after it ended and was launched after it waits for it; "
            f"{edges[0].size} edges)"
        )
    return edges
