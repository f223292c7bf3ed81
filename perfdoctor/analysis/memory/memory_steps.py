"""Memory over the step: each step's high-water mark, where it falls, and the ops whose allocations make it up.

Source: the ``[memory]`` instant events torch.profiler writes with ``profile_memory=True`` (CUDA, ROCm and
CPU alike). Each event is one allocation (``Bytes`` > 0) or free (``Bytes`` < 0) of the block at ``Addr`` on
the host thread that asked for it, and carries the allocator's ``Total Allocated`` and ``Total Reserved``
after it (PyTorch's ``reportMemoryUsage``; the CPU allocator reports no reserved bytes, 0).

Per device and per analysed step (host windows, where the allocations are made):

- the high-water mark: the largest ``Total Allocated`` in the step, at the first event that reaches it;
- where it falls: the phase (forward / backward / optimizer from :func:`perfdoctor.analysis.timing.host.phases`,
  as the span of each phase inside the step) and the op running: the innermost ``cpu_op`` on the same
  thread enclosing that event;
- what makes it up: every allocation still live at that event (allocated at or before it, its block not
  freed or handed out again by then), attributed to the innermost ``cpu_op`` enclosing it when it was
  made; bytes live at the peak that no recorded allocation explains were allocated before the trace began;
- churn: bytes allocated (and freed) in the step;
- reserved − allocated at the peak: memory the caching allocator holds that no tensor uses.

Everything is vectorised over events (numpy); loops run over threads and steps only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from perfdoctor.analysis.memory.peaks import DEVICE_TYPES, device_capacity
from perfdoctor.analysis.steps.steps import Steps
from perfdoctor.analysis.timing import host
from perfdoctor.trace import intervals as iv
from perfdoctor.trace.tables import TraceTables

TOP_CONTRIBUTORS = 5  # contributors kept per step
CHART_POINTS = 400  # most points of the peak step's series (binned by time beyond that)
BEFORE_TRACE = "(allocated before the trace)"
NO_OP = "(outside any op)"
# ops that only allocate: an allocation inside one is charged to the op that called it
FACTORY_OPS = r"^aten::(empty|empty_strided|empty_like|new_empty|new_empty_strided|resize_)$"
PHASE_ORDER = ("optimizer", "backward", "forward")  # which phase a time belongs to when spans overlap


def innermost_ops(
    op_ts: np.ndarray, op_end: np.ndarray, op_thread: np.ndarray, at_ts: np.ndarray, at_thread: np.ndarray
) -> np.ndarray:
    """Row (into the ops) of the innermost op enclosing each time on its thread, -1 where none does.

    An op encloses ``t`` when ``op_ts <= t < op_end`` (µs). Ops of one thread nest (Kineto's ``cpu_op``
    events do); the innermost is the top of the op stack at ``t``: with ``depth`` the number of open ops after
    each start/end boundary (ends first at equal times), it is the last op that started at that depth.
    ``op_thread`` / ``at_thread``: one integer key per thread (pid and tid combined by the caller).
    """
    out = np.full(at_ts.size, -1, dtype=np.int64)
    if at_ts.size == 0 or op_ts.size == 0:
        return out
    for thread in np.unique(at_thread):
        rows = np.flatnonzero((op_thread == thread) & (op_end > op_ts))
        q = np.flatnonzero(at_thread == thread)
        if rows.size == 0:
            continue
        n = rows.size
        times = np.concatenate([op_ts[rows], op_end[rows]])
        delta = np.concatenate([np.ones(n, dtype=np.int64), -np.ones(n, dtype=np.int64)])
        # at equal times: ends before starts; of starts, the longer (outer) op first; of ends, the inner first
        outer_first = np.concatenate([-op_end[rows], -op_ts[rows]])
        order = np.lexsort((outer_first, delta, times))
        times, delta = times[order], delta[order]
        depth = np.cumsum(delta)
        is_start = np.flatnonzero(delta > 0)
        key = depth[is_start] * (2 * n + 1) + is_start
        by_key = np.argsort(key, kind="stable")
        key, start_rows = key[by_key], rows[order[is_start[by_key]]]
        pos = np.searchsorted(times, at_ts[q], side="right") - 1
        d = np.where(pos >= 0, depth[np.maximum(pos, 0)], 0)
        k = np.searchsorted(key, d * (2 * n + 1) + pos, side="right") - 1
        found = (d > 0) & (k >= 0)
        cand = np.where(found, start_rows[np.maximum(k, 0)], -1)
        inside = found & (op_ts[np.maximum(cand, 0)] <= at_ts[q]) & (at_ts[q] < op_end[np.maximum(cand, 0)])
        out[q] = np.where(inside, cand, -1)
    return out


def next_use(addr: np.ndarray) -> np.ndarray:
    """Index of the next event at the same address (n where none): an allocation's block is live until its
    address is freed or handed out again (a lost free event cannot keep a block alive twice)."""
    n = addr.size
    order = np.argsort(addr, kind="stable")
    nxt = np.full(n, n, dtype=np.int64)
    same = addr[order[1:]] == addr[order[:-1]]
    nxt[order[:-1][same]] = order[1:][same]
    return nxt


def _thread_keys(pid: np.ndarray, tid: np.ndarray) -> np.ndarray:
    return pid.astype(np.int64) * (1 << 32) + (tid.astype(np.int64) & 0xFFFFFFFF)


def _phase_spans(phases: dict[str, iv.Intervals], lo: float, hi: float) -> list[tuple[str, float, float]]:
    """(phase, start, end) µs: the span of each phase's host intervals inside [lo, hi)."""
    spans = []
    for name in ("forward", "backward", "optimizer"):
        s, e = phases.get(name, iv.EMPTY)  # sorted, disjoint (a union)
        first, last = int(np.searchsorted(e, lo, side="right")), int(np.searchsorted(s, hi, side="left")) - 1
        if first <= last:
            spans.append((name, max(float(s[first]), lo), min(float(e[last]), hi)))
    return spans


def _phase_at(spans: list[tuple[str, float, float]], t: float, inference: bool) -> str:
    """The phase whose span holds ``t``; in a trace without backward or optimizer ops (inference) every op's
    time is forward; else "other" (data loading, zero_grad, time between phases)."""
    for name in PHASE_ORDER:
        if any(p == name and a <= t < b for p, a, b in spans):
            return name
    return "forward" if inference else "other"


@dataclass
class _Device:
    """One device's events, in trace order, with each allocation's op and its block's next use."""

    ts: np.ndarray
    allocated: np.ndarray
    reserved: np.ndarray
    nbytes: np.ndarray
    op_name: np.ndarray  # name id of the innermost op (-1: none), per event
    nxt: np.ndarray


def _live_at(dev: _Device, peaks: np.ndarray, names: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Bytes and counts live at each peak event, per op name id: (op name ids, bytes [ops, peaks], counts)."""
    alloc = np.flatnonzero(dev.nbytes > 0)
    # the peaks each allocation is live at: peaks[p] in [alloc index, next use)
    p_lo = np.searchsorted(peaks, alloc, side="left")
    p_hi = np.searchsorted(peaks, dev.nxt[alloc], side="left")
    live = p_hi > p_lo
    alloc, p_lo, p_hi = alloc[live], p_lo[live], p_hi[live]
    ops, op_row = np.unique(dev.op_name[alloc], return_inverse=True)
    nb = np.zeros((ops.size, peaks.size + 1), dtype=np.int64)
    nc = np.zeros((ops.size, peaks.size + 1), dtype=np.int64)
    np.add.at(nb, (op_row, p_lo), dev.nbytes[alloc])
    np.add.at(nb, (op_row, p_hi), -dev.nbytes[alloc])
    np.add.at(nc, (op_row, p_lo), 1)
    np.add.at(nc, (op_row, p_hi), -1)
    return ops, np.cumsum(nb, axis=1)[:, :-1], np.cumsum(nc, axis=1)[:, :-1]


def _top(ops: np.ndarray, nb: np.ndarray, nc: np.ndarray, names: list[str], total: int) -> list[dict[str, str | int]]:
    """The largest contributors at one peak, by op name; bytes no allocation explains predate the trace. The
    first :data:`TOP_CONTRIBUTORS` by bytes, then allocations (more first), then name, and every other group holding
    as many bytes as the last of them: a tie at the cut is shown, not cut by its name."""
    rows = [(names[o] if o >= 0 else NO_OP, int(b), int(c)) for o, b, c in zip(ops.tolist(), nb, nc) if c > 0]
    before = total - sum(b for _, b, _ in rows)
    if before > 0:
        rows.append((BEFORE_TRACE, before, 0))
    rows.sort(key=lambda r: (-r[1], -r[2], r[0]))
    cut = rows[TOP_CONTRIBUTORS - 1][1] if len(rows) >= TOP_CONTRIBUTORS else 0
    keep = rows[:TOP_CONTRIBUTORS] + [r for r in rows[TOP_CONTRIBUTORS:] if r[1] == cut]
    return [{"op": o, "bytes": b, "n_allocations": c} for o, b, c in keep]


def _chart(dev: _Device, lo: int, hi: int, t0: float, carried: tuple[int, int]) -> dict[str, list[float] | list[int]]:
    """The step's allocated/reserved series as offsets from its start (µs), binned beyond CHART_POINTS."""
    ts, al, rs = dev.ts[lo:hi] - t0, dev.allocated[lo:hi], dev.reserved[lo:hi]
    if ts.size > CHART_POINTS:
        span = max(float(ts[-1]), 1e-9)
        b = np.minimum((ts / span * CHART_POINTS).astype(np.int64), CHART_POINTS - 1)
        starts = np.flatnonzero(np.r_[True, b[1:] != b[:-1]])
        top = np.maximum.reduceat(al, starts)
        ts = ts[starts]  # each bin at its first event, holding its largest totals (the peak stays visible)
        al, rs = top, np.maximum.reduceat(rs, starts)
    return {
        "offsets_us": [0.0, *np.round(ts, 3).tolist()],
        "allocated_bytes": [carried[0], *al.tolist()],
        "reserved_bytes": [carried[1], *rs.tolist()],
    }


def allocating_op_rows(tables: TraceTables) -> np.ndarray:
    """Row (into ``cpu_ops``) of the op each ``[memory]`` event is made in (-1: none): the innermost ``cpu_op`` on
    its thread, looking through the allocation factories (``aten::empty`` and kin, :data:`FACTORY_OPS`) to the op
    that called them; a factory called outside any other op is the answer itself."""
    mem, ops = tables.tables["memory"], tables.tables["cpu_ops"]
    if len(ops) == 0:  # a trace without ops (a kernel-only recording): no event is made in one
        return np.full(len(mem), -1, dtype=np.int64)
    op_thread, at_thread = _thread_keys(ops["pid"], ops["tid"]), _thread_keys(mem["pid"], mem["tid"])
    factory = tables.names_matching(FACTORY_OPS)[ops["name_id"]] if len(ops) else np.zeros(0, dtype=bool)
    keep = np.flatnonzero(~factory)
    inner = innermost_ops(ops["ts_us"][keep], ops["end_us"][keep], op_thread[keep], mem["ts_us"], at_thread)
    inner = np.where(inner >= 0, keep[np.maximum(inner, 0)], -1)
    alone = inner < 0
    if alone.any() and factory.any():
        inner[alone] = innermost_ops(ops["ts_us"], ops["end_us"], op_thread, mem["ts_us"][alone], at_thread[alone])
    return inner


def _allocating_ops(tables: TraceTables) -> np.ndarray:
    """Name id of the op each ``[memory]`` event is made in (-1: none; :func:`allocating_op_rows`)."""
    rows = allocating_op_rows(tables)
    ops = tables.tables["cpu_ops"]
    return np.where(rows >= 0, ops["name_id"][np.maximum(rows, 0)], -1) if len(ops) else rows


def _device_rows(tables: TraceTables) -> list[tuple[int, int, np.ndarray]]:
    """(device type, device id, rows of the memory table) of each device whose events carry totals."""
    mem = tables.tables["memory"]
    have = mem["total_allocated"] >= 0
    keys = sorted(
        set(zip(mem["device_type"][have].tolist(), mem["device_id"][have].tolist())), key=lambda k: (-k[0], k[1])
    )
    return [(dt, d, np.flatnonzero(have & (mem["device_type"] == dt) & (mem["device_id"] == d))) for dt, d in keys]


def _load_device(tables: TraceTables, rows: np.ndarray, op_name: np.ndarray) -> _Device:
    mem = tables.tables["memory"]
    addr = mem["addr"][rows]
    nxt = next_use(addr)
    untracked = addr < 0  # no Addr (older PyTorch): its block cannot be followed, so it counts live nowhere
    nxt[untracked] = np.flatnonzero(untracked)
    return _Device(
        ts=mem["ts_us"][rows],
        allocated=mem["total_allocated"][rows],
        reserved=np.maximum(mem["total_reserved"][rows], 0),
        nbytes=mem["mem_bytes"][rows],
        op_name=op_name[rows],
        nxt=nxt,
    )


@dataclass(frozen=True)
class _Peak:
    """One step's high-water mark on a device: ``j`` the row of the event that reaches it, ``carried`` the
    allocated and reserved bytes before the step's first event, ``fields`` the step's byte counts and peak values
    (the keys of :func:`memory_over_steps`' steps)."""

    j: int
    carried: tuple[int, int]
    fields: dict[str, int]


def _step_peak(dev: _Device, lo: int, hi: int) -> _Peak:
    """The high-water mark of the events ``[lo, hi)``: the first event reaching their largest allocated total."""
    j = lo + int(np.argmax(dev.allocated[lo:hi]))
    nb = dev.nbytes[lo:hi]
    before = (
        (int(dev.allocated[lo - 1]), int(dev.reserved[lo - 1]))
        if lo > 0
        else (int(dev.allocated[lo] - max(int(nb[0]), 0)), int(dev.reserved[lo]))
    )
    fields = {
        "peak_allocated_bytes": int(dev.allocated[j]),
        "peak_event_bytes": int(dev.nbytes[j]),
        "reserved_bytes": int(dev.reserved[j]),
        "start_allocated_bytes": before[0],
        "allocated_in_step_bytes": int(nb[nb > 0].sum()),
        "freed_in_step_bytes": int(-nb[nb < 0].sum()),
        "n_allocations": int((nb > 0).sum()),
    }
    return _Peak(j, before, fields)


def memory_over_steps(tables: TraceTables, steps: Steps) -> list[dict[str, Any]]:
    """Memory over the analysed steps, one entry per device with allocator totals in its ``[memory]`` events.

    Returns:
        ``[{device_type, device, label, capacity_bytes, peak_step, steps, chart}]`` where ``steps`` holds, per
        step with memory events, ``{step, name, peak_allocated_bytes, peak_ts_us, peak_offset_us, phase, op,
        peak_event_bytes, reserved_bytes, reserved_unallocated_bytes, start_allocated_bytes,
        allocated_in_step_bytes, freed_in_step_bytes, n_allocations, contributors}`` (bytes; µs; ``phase``
        "forward", "backward", "optimizer" or "other"; ``reserved_unallocated_bytes`` None on a device that
        reports no reserved bytes, the CPU), ``peak_step`` the step number with the highest high-water mark and
        ``chart`` that step's series (offsets from its host start, µs) and phase spans. Empty without events.
    """
    mem = tables.tables["memory"]
    if len(mem) == 0 or not (mem["total_allocated"] >= 0).any():
        return []
    op_name = _allocating_ops(tables)
    phases = host.phases(tables, (steps.host_start_us, steps.host_end_us))
    timelines = (
        _device_timeline(tables, steps, dt, d, _load_device(tables, rows, op_name), phases)
        for dt, d, rows in _device_rows(tables)
    )
    return [t for t in timelines if t is not None]


@dataclass(frozen=True)
class _Window:
    """One analysed step's events on a device: step index ``k``, event rows ``[lo, hi)``, its start ``t0_us`` (the
    host start; a whole-trace window's first event when earlier) and the end of its phase spans ``end_us``."""

    k: int
    lo: int
    hi: int
    t0_us: float
    end_us: float


def _step_windows(dev: _Device, steps: Steps) -> list[_Window]:
    """The analysed steps with memory events on the device (by host time: where the allocations are made)."""
    if steps.source == "whole-trace":  # the trace's start: its first op, call or activity, or memory event
        t0 = min(float(steps.host_start_us[0]), float(dev.ts[0])) if dev.ts.size else float(steps.host_start_us[0])
        return [_Window(0, 0, int(dev.ts.size), t0, np.inf)]
    lo = np.searchsorted(dev.ts, steps.host_start_us, side="left")
    hi = np.searchsorted(dev.ts, steps.host_end_us, side="left")
    return [
        _Window(k, int(a), int(b), float(steps.host_start_us[k]), float(steps.host_end_us[k]))
        for k, (a, b) in enumerate(zip(lo, hi))
        if b > a
    ]


def _contributors(dev: _Device, peaks: list[_Peak], names: list[str]) -> list[list[dict[str, str | int]]]:
    """The largest contributors (:func:`_top`) at each step's peak, in the steps' order."""
    js = np.array([p.j for p in peaks], dtype=np.int64)
    order = np.argsort(js, kind="stable")
    column = np.empty_like(order)
    column[order] = np.arange(order.size)  # step i's peak is column[i] of the contributions
    ops, nb, nc = _live_at(dev, js[order], names)
    return [
        _top(ops, nb[:, int(column[i])], nc[:, int(column[i])], names, p.fields["peak_allocated_bytes"])
        for i, p in enumerate(peaks)
    ]


def _device_timeline(
    tables: TraceTables, steps: Steps, dtype: int, device: int, dev: _Device, phases: dict[str, iv.Intervals]
) -> dict[str, Any] | None:
    """One device's entry of :func:`memory_over_steps`; None when no analysed step holds its events."""
    names = tables.names
    windows = _step_windows(dev, steps)
    if not windows:  # every event outside the analysed steps
        return None
    peaks = [_step_peak(dev, w.lo, w.hi) for w in windows]
    contributors = _contributors(dev, peaks, names)
    reports_reserved = bool(dev.reserved.max() > 0)
    inference = phases["backward"][0].size == 0 and phases["optimizer"][0].size == 0
    spans = [_phase_spans(phases, w.t0_us, w.end_us) for w in windows]
    out_steps = []
    for w, p, sp, top in zip(windows, peaks, spans, contributors):
        t = float(dev.ts[p.j])
        op = int(dev.op_name[p.j])
        out_steps.append(
            {
                "step": int(steps.numbers[w.k]),
                "name": steps.names[w.k],
                **p.fields,
                "peak_ts_us": t,
                "peak_offset_us": round(t - w.t0_us, 3),
                "phase": _phase_at(sp, t, inference and op >= 0),
                "op": names[op] if op >= 0 else None,
                "reserved_unallocated_bytes": p.fields["reserved_bytes"] - p.fields["peak_allocated_bytes"]
                if reports_reserved
                else None,
                "contributors": top,
            }
        )
    i = max(range(len(windows)), key=lambda i: peaks[i].fields["peak_allocated_bytes"])
    kind = DEVICE_TYPES.get(dtype, f"device type {dtype}")
    return {
        "device_type": kind,
        "device": device,
        "label": kind if device < 0 else f"{kind} {device}",
        "capacity_bytes": device_capacity(tables, device) if dtype == 1 else None,
        "peak_step": int(steps.numbers[windows[i].k]),
        "steps": out_steps,
        "chart": _peak_chart(dev, steps, windows[i], peaks[i], spans[i]),
    }


def _peak_chart(
    dev: _Device, steps: Steps, w: _Window, peak: _Peak, spans: list[tuple[str, float, float]]
) -> dict[str, object]:
    """The peak step's chart: its number, duration (µs), allocated/reserved series (:func:`_chart`) and phase
    spans, as offsets from its start (µs)."""
    end = dev.ts[w.hi - 1] if steps.source == "whole-trace" else steps.host_end_us[w.k]
    t0 = w.t0_us
    return {
        "step": int(steps.numbers[w.k]),
        "dur_us": round(float(end) - t0, 3),
        **_chart(dev, w.lo, w.hi, t0, peak.carried),
        "phases": [{"phase": ph, "start_us": round(s - t0, 3), "end_us": round(e - t0, 3)} for ph, s, e in spans],
    }
