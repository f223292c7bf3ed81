"""Host-side intervals: what the CPU was doing, as interval sets (µs).

Annotations live in ``user_annotation`` events in current Kineto and in
``cpu_op``/``Operator`` events in the 2021 generation, so every lookup here
searches both tables.
"""

from __future__ import annotations

import re

import numpy as np

from perfdoctor.trace import intervals as iv
from perfdoctor.trace.join import launched_rows
from perfdoctor.trace.tables import TraceTables

DATALOADER = r"^enumerate\(DataLoader\)#.*__next__|DataLoader.*__next__|^DataLoader"
OPTIMIZER_STEP = r"^Optimizer\.step#"
OPTIMIZER_ZERO_GRAD = r"^Optimizer\.zero_grad#"
BACKWARD_OP = r"^autograd::engine::evaluate_function"
FORWARD_ANNOTATION = r"^## forward ##$|^forward$|\.forward$"
# Host calls that block until the device (or a stream/event) catches up.
SYNC_RUNTIME = (
    r"^(cuda|hip)(Device|Stream|Event|Ctx)Synchronize$|^cu(Ctx|Stream|Event)Synchronize"
    r"|^(cuda|hip)Memcpy(Peer)?$|^(cuda|hip)MemcpyDtoH$|^hipMemcpyWithStream$"
)


# runtime calls that queue work (or ask cheap questions): host time in these *is* launch overhead; any other
# runtime call the host sits in (cudaFree, hipFree, cudaMalloc, cudaHostAlloc...) blocks it
LAUNCH_CALLS = re.compile(
    r"Launch|Memcpy.*Async|Memset.*Async|EventRecord|StreamWaitEvent|GetDevice|"
    r"StreamIsCapturing|GetLastError|PeekAtLastError|FuncGetAttributes|Occupancy|"
    r"StreamGetCaptureInfo|StreamGetPriority|DeviceGetStreamPriorityRange|FuncSetAttribute|"
    r"EventQuery|PointerGetAttributes"
)


def blocking_runtime_calls(tables: TraceTables) -> iv.Intervals:
    """Host time inside runtime calls that queue no work and are no synchronize call (allocations, frees, ...):
    see :data:`LAUNCH_CALLS` and :data:`SYNC_RUNTIME`."""
    rt = tables.runtime
    if len(rt) == 0:
        return iv.EMPTY
    # synchronize calls and blocking copies are the breakdown's 'synchronization' cause already
    keep = ~(tables.names_matching(LAUNCH_CALLS.pattern) | tables.names_matching(SYNC_RUNTIME))[rt["name_id"]]
    return iv.union(rt["ts_us"][keep], rt["end_us"][keep])


def ranges_named(
    tables: TraceTables, pattern: str, tables_to_search: tuple[str, ...] = ("annotations", "cpu_ops")
) -> tuple[np.ndarray, np.ndarray]:
    """Raw ``(ts_us, end_us)`` of host events whose name matches ``pattern``."""
    rx = re.compile(pattern)
    match_names = tables.names_matching(rx)
    starts, ends = [], []
    for name in tables_to_search:
        tab = tables.tables[name]
        if len(tab) == 0:
            continue
        m = match_names[tab["name_id"]]
        if m.any():
            starts.append(tab["ts_us"][m])
            ends.append(tab["end_us"][m])
    if not starts:
        return np.empty(0), np.empty(0)
    return np.concatenate(starts), np.concatenate(ends)


def named(
    tables: TraceTables, pattern: str, tables_to_search: tuple[str, ...] = ("annotations", "cpu_ops")
) -> iv.Intervals:
    """Union of host events whose name matches ``pattern`` (re.search)."""
    s, e = ranges_named(tables, pattern, tables_to_search)
    return iv.union(s, e)


def dataloader(tables: TraceTables) -> iv.Intervals:
    """Host time inside DataLoader ``__next__`` (the batch fetch)."""
    return named(tables, DATALOADER)


def blocking_memcpy_rows(tables: TraceTables) -> np.ndarray:
    """Row indices (into ``tables.runtime``) of the runtime calls of memcpys that block the host: D2H into
    pageable memory and any H2D from pageable memory (the driver stages through a bounce buffer)."""
    from perfdoctor.analysis.timing.classify import classify_kernel

    mc = tables.memcpy
    if len(mc) == 0 or len(tables.runtime) == 0:
        return np.empty(0, dtype=np.int64)
    names = tables.names
    blocking_ids = {nid for nid in set(mc["name_id"].tolist()) if classify_kernel(names[nid]).pageable}
    if not blocking_ids:
        return np.empty(0, dtype=np.int64)
    return np.asarray(launched_rows(tables, "memcpy", np.isin(mc["name_id"], list(blocking_ids))), dtype=np.int64)


def blocking_memcpy_calls(tables: TraceTables) -> iv.Intervals:
    """Host intervals (µs) of :func:`blocking_memcpy_rows`' calls, merged."""
    rows = blocking_memcpy_rows(tables)
    if rows.size == 0:
        return iv.EMPTY
    rt = tables.runtime
    return iv.union(rt["ts_us"][rows], rt["end_us"][rows])


# runtime calls that queue device work: after one, a synchronize call may have something to wait for
QUEUE_CALLS = r"Launch|Memcpy|Memset"
# synchronize calls that wait for one stream or event: one that drained it leaves them nothing to wait for (a
# device-wide synchronize also waits for every other stream, which that call did not drain)
STREAM_SYNC = r"^(cuda|hip)(Stream|Event)Synchronize$|^cu(Stream|Event)Synchronize"


def _returns_after_its_copy(tables: TraceTables) -> np.ndarray:
    """Runtime rows of the copies that return only once their copy is done: device-to-host into pageable memory
    (the driver copies through a staging buffer and the call returns after the copy; a pageable host-to-device
    copy returns once its data is staged, before the copy ends)."""
    from perfdoctor.analysis.timing.classify import classify_kernel

    mc = tables.memcpy
    if len(mc) == 0:
        return np.empty(0, dtype=np.int64)
    names = tables.names
    ids = [n for n in set(mc["name_id"].tolist()) if (k := classify_kernel(names[n])).pageable and k.direction == "d2h"]
    return launched_rows(tables, "memcpy", np.isin(mc["name_id"], ids)) if ids else np.empty(0, dtype=np.int64)


def waitless_syncs(tables: TraceTables, rows: np.ndarray, max_us: float) -> np.ndarray:
    """Which synchronize calls (``rows`` of ``tables.runtime``) wait for nothing: a stream or event synchronize
    (:data:`STREAM_SYNC`) that follows, on its thread, a call that returned only once the device had caught up
    (another synchronize call, or a device-to-host copy into pageable memory), with no call queuing device work
    in between (:data:`QUEUE_CALLS`, on any thread), and that lasts under ``max_us`` µs (it returned at once; the
    guard keeps a call that waited on another stream's work).

    GPUPuzzlers d2h_sync first_sum: each element's `.cpu()` is a pageable D2H ``cudaMemcpyAsync`` that returns
    after the copy, then a 1–6 µs ``cudaStreamSynchronize`` on the drained stream; the host waits once per
    element, not twice. Returns a boolean mask over ``rows``.
    """
    rt = tables.runtime
    out = np.zeros(rows.size, dtype=bool)
    if rows.size == 0:
        return out
    ts, end = rt["ts_us"], rt["end_us"]
    done = np.union1d(rows, _returns_after_its_copy(tables))
    queued = np.sort(ts[tables.names_matching(QUEUE_CALLS)[rt["name_id"]]])
    short = ((end[rows] - ts[rows]) < max_us) & tables.names_matching(STREAM_SYNC)[rt["name_id"][rows]]
    for pid, tid in {(int(p), int(q)) for p, q in zip(rt["pid"][rows], rt["tid"][rows], strict=True)}:
        sel = np.flatnonzero(short & (rt["pid"][rows] == pid) & (rt["tid"][rows] == tid))
        same = done[(rt["pid"][done] == pid) & (rt["tid"][done] == tid)]
        ends = np.sort(end[same])
        if sel.size == 0 or ends.size == 0:
            continue
        k = np.searchsorted(ends, ts[rows[sel]], side="right") - 1  # the last such call ended by the sync's start
        last = ends[np.maximum(k, 0)]
        between = np.searchsorted(queued, ts[rows[sel]], side="left") - np.searchsorted(queued, last, side="left")
        out[sel] = (k >= 0) & (between == 0)
    return out


def synchronization(tables: TraceTables) -> iv.Intervals:
    """Host time blocked on the device: synchronize calls and blocking copies."""
    sync_calls = named(tables, SYNC_RUNTIME, ("runtime",))
    return iv.union_of(sync_calls, blocking_memcpy_calls(tables))


def busy(tables: TraceTables, pid: int | None = None) -> iv.Intervals:
    """Host time inside any op, annotation-free: cpu ops and runtime calls."""
    parts = []
    for name in ("cpu_ops", "runtime"):
        tab = tables.tables[name]
        if len(tab) == 0:
            continue
        if pid is not None and pid >= 0:
            tab = tab.take(tab["pid"] == pid)
        parts.append(iv.union(tab["ts_us"], tab["end_us"]))
    return iv.union_of(*parts)


def phases(tables: TraceTables, step_windows: tuple[np.ndarray, np.ndarray]) -> dict[str, iv.Intervals]:
    """Host intervals of forward, backward and optimizer.step.

    - optimizer: ``Optimizer.step#...`` annotations.
    - backward: autograd ``evaluate_function`` ops (any thread), or
      ``## backward ##`` annotations.
    - forward: ``## forward ##`` / ``*.forward`` annotations when present,
      else, within each step, from the end of the DataLoader fetch (or the step
      start) to the first backward op.
    """
    opt = named(tables, OPTIMIZER_STEP)
    bwd = named(tables, BACKWARD_OP, ("cpu_ops",))
    if bwd[0].size == 0:
        bwd = named(tables, r"^## backward ##$")
    fwd = named(tables, FORWARD_ANNOTATION)
    if fwd[0].size == 0 and bwd[0].size:
        dl = dataloader(tables)
        starts, ends = [], []
        for lo, hi in zip(*step_windows):
            first_bwd = bwd[0][(bwd[0] >= lo) & (bwd[0] < hi)]
            if first_bwd.size == 0:
                continue
            dl_in = dl[1][(dl[1] > lo) & (dl[1] <= first_bwd[0])]
            begin = dl_in.max() if dl_in.size else lo
            if first_bwd[0] > begin:
                starts.append(begin)
                ends.append(first_bwd[0])
        fwd = iv.union(np.asarray(starts), np.asarray(ends))
    return {"forward": fwd, "backward": bwd, "optimizer": opt}
