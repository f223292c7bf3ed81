"""A memory snapshot's figures: per device, the segments' state when it was taken, and over the recorded
history the peak allocated and reserved, who held memory at the peak, OOMs and cudaMalloc/cudaFree traffic.

The peak follows PyTorch's own viewer (``torch/utils/viz/MemoryViz.js``, ``process_alloc_data``, the "Active
Memory Timeline" at pytorch.org/memory_viz): allocations live before the history began are the snapshot's
``active_allocated`` blocks not allocated during it (at their ``requested_size``) plus every free whose alloc
is not in the history (at the free's size); each ``alloc`` adds its size, each ``free_completed`` removes its
allocation's size (``free_requested`` alone frees nothing: the block waits for another stream). One difference:
the viewer takes the maximum only after the first action, this takes the state before it too (the true peak when
the history starts by freeing). Reserved is the segments' total at the snapshot, walked back through
``segment_alloc``/``segment_map`` (+size) and ``segment_free``/``segment_unmap`` (-size).
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from perfdoctor.snapshot.reader import Annotation, Block, Frame, Segment, Snapshot, Stack, TraceEvent
from perfdoctor.snapshot.report import (
    Allocation,
    CallSite,
    DeviceMemory,
    InputSnapshot,
    Oom,
    SegmentRow,
    SnapshotReport,
)

TOP_ALLOCATIONS = 10
TOP_SEGMENTS = 10
STACK_FRAMES = 6
FREE_ACTIONS = ("free_completed", "free")  # "free": MemoryViz's name for a free_requested+free_completed pair
ALLOCATED = "active_allocated"
INACTIVE = "inactive"

# Frames that are not the user's: torch itself (installed, or a source checkout's package directories) and the
# Python standard library; what remains first in a stack is the line that asked for the memory.
_LIBRARY_PATH = re.compile(
    r"/(?:site|dist)-packages/torch/"
    r"|/lib/python3\.\d+/(?!site-packages/|dist-packages/)"
    r"|^<frozen "
    r"|/torch/(?:nn|optim|autograd|utils|amp|cuda|distributed|_dynamo|_inductor|_functorch|_tensor\.py|functional\.py)"
)


_BACKWARD_NODE = re.compile(r"torch::autograd::generated::(\w+)::apply\b")
_ATEN_OP = re.compile(r"at::_ops::(\w+)::call\b")


def cpp_site(frames: Stack) -> str:
    """A name for a stack without Python frames (the autograd engine's thread runs backward without one): the
    backward node (``<backward: BmmBackward0>``), else the outermost ATen op called (``<op: bmm>``)."""
    for f in frames:
        m = _BACKWARD_NODE.search(f.name)
        if m:
            return f"<backward: {m.group(1)}>"
    ops = [m.group(1) for f in frames if (m := _ATEN_OP.search(f.name))]
    return f"<op: {ops[-1]}>" if ops else "<no Python frame>"


def is_python_frame(frame: Frame) -> bool:
    """A Python frame (``*.py``, or generated code such as ``<eval_with_key>.3``), not a C++ one."""
    return frame.filename.endswith(".py") or (frame.filename.startswith("<") and frame.line > 0)


def is_user_frame(frame: Frame) -> bool:
    """A Python frame outside torch and the standard library (:data:`_LIBRARY_PATH`)."""
    return is_python_frame(frame) and not _LIBRARY_PATH.search(frame.filename)


def frame_text(frame: Frame) -> str:
    """``file:line:function``, the form ``torch.cuda._memory_viz`` prints (with the full file name)."""
    return f"{frame.filename}:{frame.line}:{frame.name}"


class _Sites:
    """Call site and short stack of each stack, computed once per stack (stacks are shared between events). An empty
    stack names no site: its words depend on ``recorded`` (the event was recorded without a stack, or lived before
    the history began), so it is never memoised (Python shares one empty tuple between all of them)."""

    def __init__(self) -> None:
        self.memo: dict[int, tuple[Stack, str, list[str]]] = {}

    def of(self, frames: Stack, recorded: bool) -> tuple[str, list[str]]:
        if not frames:
            return ("<no stack recorded>" if recorded else "<before the history: no stack>"), []
        hit = self.memo.get(id(frames))
        if hit is not None and hit[0] is frames:
            return hit[1], hit[2]
        user = [f for f in frames if is_user_frame(f)]
        python = [f for f in frames if is_python_frame(f)]
        if user:
            site = frame_text(user[0])
        elif python:
            site = frame_text(python[0])
        else:
            site = cpp_site(frames)
        stack = [frame_text(f) for f in (user or python)[:STACK_FRAMES]]
        self.memo[id(frames)] = (frames, site, stack)
        return site, stack


@dataclass
class _Element:
    """An allocation of the timeline: a recorded ``alloc``, or one live before the history began."""

    size: int
    frames: Stack
    address: int
    recorded: bool
    category: str | None


@dataclass
class _Timeline:
    """The allocated/reserved walk over one device's history."""

    elements: list[_Element]
    initial: list[int]  # elements live before the first event
    change: list[tuple[int, int] | None]  # per event: (element, +1 alloc / -1 free) or None
    peak_allocated: int
    peak_index: int | None  # the event after which the peak was reached; None: before the first event
    peak_reserved: int
    reserved_at_peak: int
    oom_state: dict[int, tuple[int, int]]  # event index → (reserved, allocated) then
    mid_run: bool


def _timeline(events: Sequence[TraceEvent], blocks: Sequence[Block], reserved_end: int) -> _Timeline:
    """Walk one device's history (see the module docstring for the rules and their source)."""
    elements: list[_Element] = []
    initial: list[int] = []
    change: list[tuple[int, int] | None] = []
    live: dict[int, int] = {}
    mid_run = False
    net_reserved = 0
    for e in events:
        if e.action == "alloc":
            elements.append(_Element(e.size, e.frames, e.addr, True, e.category))
            live[e.addr] = len(elements) - 1
            change.append((len(elements) - 1, 1))
        elif e.action in FREE_ACTIONS:
            k = live.pop(e.addr, None)
            if k is None:
                mid_run = True
                elements.append(_Element(e.size, e.frames, e.addr, False, e.category))
                k = len(elements) - 1
                initial.append(k)
            change.append((k, -1))
        else:
            change.append(None)
            if e.action in ("segment_alloc", "segment_map"):
                net_reserved += e.size
            elif e.action in ("segment_free", "segment_unmap"):
                net_reserved -= e.size
    for b in blocks:
        if b.state == ALLOCATED and b.address not in live:
            elements.append(_Element(b.requested_size, b.frames, b.address, False, None))
            initial.append(len(elements) - 1)
    allocated = sum(elements[k].size for k in initial)
    reserved = reserved_end - net_reserved
    peak_allocated, peak_index, reserved_at_peak, peak_reserved = allocated, None, reserved, reserved
    oom_state: dict[int, tuple[int, int]] = {}
    for i, (e, c) in enumerate(zip(events, change)):
        if c is not None:
            allocated += c[1] * elements[c[0]].size
        elif e.action in ("segment_alloc", "segment_map"):
            reserved += e.size
        elif e.action in ("segment_free", "segment_unmap"):
            reserved -= e.size
        elif e.action == "oom":
            oom_state[i] = (reserved, allocated)
        if allocated > peak_allocated:
            peak_allocated, peak_index, reserved_at_peak = allocated, i, reserved
        peak_reserved = max(peak_reserved, reserved)
    return _Timeline(
        elements, initial, change, peak_allocated, peak_index, peak_reserved, reserved_at_peak, oom_state, mid_run
    )


def _live_at_peak(t: _Timeline) -> list[_Element]:
    """The allocations live when the peak was reached."""
    alive = set(t.initial)
    if t.peak_index is not None:
        for c in t.change[: t.peak_index + 1]:
            if c is not None:
                (alive.add if c[1] > 0 else alive.discard)(c[0])
    return [t.elements[k] for k in sorted(alive)]


def _segment_rows(segments: Sequence[Segment]) -> tuple[list[SegmentRow], dict[str, int]]:
    """Each segment's row, and the device's totals: allocated (requested), rounding, inactive (cached free),
    awaiting-free bytes and the largest inactive block."""
    rows: list[SegmentRow] = []
    tot: Counter[str] = Counter()
    for s in segments:
        allocated = sum(b.requested_size for b in s.blocks if b.state == ALLOCATED)
        free = [b.size for b in s.blocks if b.state == INACTIVE]
        tot["allocated"] += allocated
        tot["rounding"] += sum(b.size - b.requested_size for b in s.blocks if b.state == ALLOCATED)
        tot["free"] += sum(free)
        tot["awaiting"] += sum(b.size for b in s.blocks if b.state not in (ALLOCATED, INACTIVE))
        tot["largest_free"] = max(tot["largest_free"], max(free, default=0))
        row = SegmentRow(
            address=s.address,
            total_bytes=s.total_size,
            allocated_bytes=allocated,
            free_bytes=sum(free),
            largest_free_bytes=max(free, default=0),
            blocks=len(s.blocks),
            stream=s.stream,
            segment_type=s.segment_type,
        )
        rows.append(row)
    rows.sort(key=lambda r: (-r.free_bytes, -r.total_bytes, r.address))
    return rows, tot


def _flushes_then_malloc(events: Sequence[TraceEvent]) -> int:
    """cudaFree bursts followed by a cudaMalloc with no allocation served in between: what an allocator retry
    looks like (free the cached blocks, then cudaMalloc again), and also ``empty_cache()`` before growth."""
    n, pending = 0, False
    for e in events:
        if e.action in ("segment_free", "segment_unmap"):
            pending = True
        elif e.action in ("segment_alloc", "segment_map") and pending:
            n, pending = n + 1, False
        elif e.action == "alloc":
            pending = False
    return n


def _during(annotations: Sequence[Annotation], device: int, time_us: int | None) -> list[str]:
    """The names of the recorded START/END ranges (``external_annotations``) that enclose ``time_us``."""
    if time_us is None:
        return []
    open_at: dict[str, list[int]] = defaultdict(list)
    out: list[str] = []
    for a in sorted((a for a in annotations if a.device == device), key=lambda a: a.time_us):
        if a.stage == "START":
            open_at[a.name].append(a.time_us)
        elif a.stage == "END" and open_at[a.name]:
            start = open_at[a.name].pop()
            if start <= time_us <= a.time_us and a.name not in out:
                out.append(a.name)
    return out


def _held_at_peak(live: Sequence[_Element], sites: _Sites) -> tuple[list[Allocation], list[CallSite]]:
    """The allocations live at the peak, largest first, and their call sites (bytes and allocations per site,
    largest first)."""
    by_site: dict[str, list[int]] = {}
    allocations = []
    for el in live:
        site, stack = sites.of(el.frames, el.recorded)
        agg = by_site.setdefault(site, [0, 0])
        agg[0] += el.size
        agg[1] += 1
        allocations.append(Allocation(bytes=el.size, site=site, stack=stack, address=el.address, recorded=el.recorded))
    allocations.sort(key=lambda a: (-a.bytes, a.address))
    call_sites = sorted(
        (CallSite(site=s, bytes=b, allocations=n) for s, (b, n) in by_site.items()), key=lambda c: (-c.bytes, c.site)
    )
    return allocations, call_sites


def _categories_at_peak(t: _Timeline, live: Sequence[_Element]) -> dict[str, int] | None:
    """Bytes live at the peak per allocation category (``unknown`` for none), largest first; None when the
    history labels no allocation with a category."""
    if not any(el.category is not None for el in t.elements):
        return None
    categories: Counter[str] = Counter()
    for el in live:
        categories[el.category or "unknown"] += el.size
    return dict(categories.most_common())


def _ooms(events: Sequence[TraceEvent], t: _Timeline, t0: int | None, sites: _Sites) -> list[Oom]:
    """Each recorded OOM: when (µs from ``t0``, the first event's time), what was asked, and the device's state."""
    return [
        Oom(
            time_us=None if e.time_us is None or t0 is None else e.time_us - t0,
            requested_bytes=e.size,
            device_free_bytes=e.device_free,
            reserved_bytes=t.oom_state[i][0],
            allocated_bytes=t.oom_state[i][1],
            site=sites.of(e.frames, True)[0],
        )
        for i, e in enumerate(events)
        if e.action == "oom"
    ]


def device_memory(snapshot: Snapshot, device: int, sites: _Sites | None = None) -> DeviceMemory:
    """One device's :class:`DeviceMemory` (bytes; times in µs from its first recorded event)."""
    sites = sites or _Sites()
    segments = [s for s in snapshot.segments if s.device == device]
    events = snapshot.device_traces[device] if device < len(snapshot.device_traces) else ()
    rows, tot = _segment_rows(segments)
    reserved_end = sum(s.total_size for s in segments)
    t = _timeline(events, [b for s in segments for b in s.blocks], reserved_end)
    live = _live_at_peak(t)
    times = [e.time_us for e in events if e.time_us is not None]
    t0 = times[0] if times else None
    peak_time = None
    if t0 is not None and t.peak_index is not None and events[t.peak_index].time_us is not None:
        peak_time = events[t.peak_index].time_us
    allocations, call_sites = _held_at_peak(live, sites)
    categories = _categories_at_peak(t, live)
    actions = Counter(e.action for e in events)
    return DeviceMemory(
        device=device,
        segments=len(segments),
        large_segments=sum(s.segment_type == "large" for s in segments),
        small_segments=sum(s.segment_type == "small" for s in segments),
        reserved_at_snapshot_bytes=reserved_end,
        allocated_at_snapshot_bytes=tot["allocated"],
        rounding_bytes=tot["rounding"],
        cached_free_bytes=tot["free"],
        awaiting_free_bytes=tot["awaiting"],
        largest_free_block_bytes=tot["largest_free"],
        fragmentation=1 - tot["largest_free"] / tot["free"] if tot["free"] else None,
        top_segments=rows[:TOP_SEGMENTS],
        history_events=len(events),
        history_span_us=times[-1] - times[0] if times else None,
        history_starts_mid_run=t.mid_run,
        peak_allocated_bytes=t.peak_allocated,
        peak_reserved_bytes=t.peak_reserved,
        reserved_at_peak_bytes=t.reserved_at_peak,
        peak_time_us=None if peak_time is None or t0 is None else peak_time - t0,
        peak_event_index=t.peak_index,
        peak_during=_during(snapshot.annotations, device, peak_time),
        peak_live_allocations=len(live),
        cuda_malloc_calls=actions["segment_alloc"] + actions["segment_map"],
        cuda_free_calls=actions["segment_free"] + actions["segment_unmap"],
        cache_flushes_then_malloc=_flushes_then_malloc(events),
        ooms=_ooms(events, t, t0, sites),
        top_allocations=allocations[:TOP_ALLOCATIONS],
        call_sites=call_sites,
        categories=categories,
    )


def _notes(snapshot: Snapshot, devices: Sequence[DeviceMemory]) -> list[str]:
    notes = []
    for d in devices:
        if d.history_events == 0:
            notes.append(
                f"device {d.device}: no allocation history recorded (torch.cuda.memory._record_memory_history was "
                "not on): the peaks are the figures at the moment of the snapshot, and no call site is known for "
                "allocations without a stack"
            )
        elif d.history_starts_mid_run:
            notes.append(
                f"device {d.device}: the history starts mid-run (it frees allocations made before it; its buffer "
                "keeps the last max_entries events): the peak is the peak within the recorded history"
            )
    if snapshot.allocator_settings.get("expandable_segments") is True:
        notes.append("expandable_segments is on: a segment grows in place, so segment counts understate the mappings")
    return notes


def analyse(snapshot: Snapshot, data_sha256: str | None = None) -> SnapshotReport:
    """The report of ``snapshot``: one :class:`DeviceMemory` per device holding segments or history, in order.

    ``data_sha256`` is the file's sha256 (computed here when not given).
    """
    if data_sha256 is None:
        with open(snapshot.path, "rb") as fh:
            data_sha256 = hashlib.sha256(fh.read()).hexdigest()
    ids = sorted({s.device for s in snapshot.segments} | {i for i, t in enumerate(snapshot.device_traces) if t})
    sites = _Sites()
    devices = [device_memory(snapshot, d, sites) for d in ids]
    return SnapshotReport(
        input=InputSnapshot(path=snapshot.path, bytes=snapshot.file_bytes, sha256=data_sha256),
        devices=devices,
        allocator_settings=dict(snapshot.allocator_settings),
        notes=_notes(snapshot, devices),
    )
