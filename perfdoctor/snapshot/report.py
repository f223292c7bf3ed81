"""The typed memory-snapshot report (schema ``perfdoctor.snapshot``) and the snapshot diff
(``perfdoctor.snapshot-diff``), with their JSON round trip. Documented in ``docs/snapshot.md``.

Bytes end in ``_bytes`` (GiB, where a renderer shows it, is bytes / 2**30); times are µs (``_us``), measured
from the first recorded allocator event.
"""

from __future__ import annotations

import msgspec

from perfdoctor.model.report import RunSnapshot

SCHEMA = "perfdoctor.snapshot"
DIFF_SCHEMA = "perfdoctor.snapshot-diff"
SCHEMA_VERSION = 1
GIB = 1 << 30


class _Struct(msgspec.Struct, kw_only=True):
    """Keyword construction; unknown JSON keys ignored (a newer minor writer)."""


class CallSite(_Struct, kw_only=True):
    """Where memory live at the peak was allocated: the innermost frame outside torch and the Python standard
    library (``site`` is ``file:line:function``); ``bytes`` requested by its ``allocations`` live then."""

    site: str
    bytes: int
    allocations: int


class Allocation(_Struct, kw_only=True):
    """One allocation live at the peak: ``bytes`` requested, its call site and up to 6 frames of its stack
    outside torch and the standard library (innermost first); ``recorded`` is False for one made before the
    history began (its stack is the snapshot block's, or the one its free recorded)."""

    bytes: int
    site: str
    stack: list[str]
    address: int
    recorded: bool


class SegmentRow(_Struct, kw_only=True):
    """One segment (one cudaMalloc) at the moment of the snapshot: ``total_bytes`` reserved, ``allocated_bytes``
    requested by live blocks, ``free_bytes`` in its inactive blocks and the largest of them."""

    address: int
    total_bytes: int
    allocated_bytes: int
    free_bytes: int
    largest_free_bytes: int
    blocks: int
    stream: int
    segment_type: str


class Oom(_Struct, kw_only=True):
    """An out-of-memory the allocator raised: ``requested_bytes`` that did not fit while CUDA reported
    ``device_free_bytes`` free; ``reserved_bytes`` / ``allocated_bytes`` held by the allocator then."""

    time_us: int | None
    requested_bytes: int
    device_free_bytes: int | None
    reserved_bytes: int
    allocated_bytes: int
    site: str


class DeviceMemory(_Struct, kw_only=True):
    """One device's memory, from the snapshot's segments (the moment it was taken: ``*_at_snapshot``) and its
    recorded history (``peak_*``, over the history; with no history, the peaks are the snapshot's figures).

    Allocated bytes are the sizes the callers requested (what ``torch.cuda.memory_allocated`` counts rounded up;
    ``rounding_bytes`` is the difference); reserved bytes are the segments' sizes (cudaMalloc'd).
    ``fragmentation`` is 1 - largest free block / free bytes in the cache (0: one free block; near 1: the free
    memory is in many small pieces, and a large request needs a new segment although enough is free).
    """

    device: int
    segments: int
    large_segments: int
    small_segments: int
    reserved_at_snapshot_bytes: int
    allocated_at_snapshot_bytes: int
    rounding_bytes: int
    cached_free_bytes: int
    awaiting_free_bytes: int
    largest_free_block_bytes: int
    fragmentation: float | None
    top_segments: list[SegmentRow]
    history_events: int
    history_span_us: int | None
    history_starts_mid_run: bool
    peak_allocated_bytes: int
    peak_reserved_bytes: int
    reserved_at_peak_bytes: int
    peak_time_us: int | None
    peak_event_index: int | None
    peak_during: list[str]
    peak_live_allocations: int
    cuda_malloc_calls: int
    cuda_free_calls: int
    cache_flushes_then_malloc: int
    ooms: list[Oom]
    top_allocations: list[Allocation]
    call_sites: list[CallSite]
    categories: dict[str, int] | None


class InputSnapshot(_Struct, kw_only=True):
    """The file read: its path, size on disk and sha256."""

    path: str
    bytes: int
    sha256: str


class SnapshotReport(_Struct, kw_only=True):
    """A memory snapshot's report: one :class:`DeviceMemory` per device that holds segments or history."""

    schema: str = SCHEMA
    schema_version: int = SCHEMA_VERSION
    input: InputSnapshot
    devices: list[DeviceMemory]
    allocator_settings: dict[str, str | int | float | bool]
    notes: list[str]


class SiteChange(_Struct, kw_only=True):
    """A call site's bytes live at the peak, before and after (0 where the site holds nothing)."""

    site: str
    before_bytes: int
    after_bytes: int
    change_bytes: int


class DeviceChange(_Struct, kw_only=True):
    """One device's figures before and after; ``*_change_pct`` is None when the before figure is 0."""

    device: int
    before_peak_allocated_bytes: int
    after_peak_allocated_bytes: int
    peak_allocated_change_pct: float | None
    before_peak_reserved_bytes: int
    after_peak_reserved_bytes: int
    peak_reserved_change_pct: float | None
    before_reserved_at_snapshot_bytes: int
    after_reserved_at_snapshot_bytes: int
    grew: list[SiteChange]
    shrank: list[SiteChange]


class SnapshotDiff(_Struct, kw_only=True):
    """Two snapshots compared device by device (devices present on one side only are listed in ``notes``)."""

    schema: str = DIFF_SCHEMA
    schema_version: int = SCHEMA_VERSION
    before: InputSnapshot
    after: InputSnapshot
    devices: list[DeviceChange]
    notes: list[str]


def run_snapshots(path: str, report: SnapshotReport) -> list[RunSnapshot]:
    """The run report's rows of one snapshot (``path`` relative to the run directory): each device's figures as
    :class:`~perfdoctor.model.report.RunSnapshot`, the same values its :class:`DeviceMemory` holds (bytes), with the
    call site holding most at the peak ("" and 0 when none is recorded) and the count of its OOMs."""
    return [
        RunSnapshot(
            path=path,
            device=d.device,
            peak_allocated_bytes=d.peak_allocated_bytes,
            peak_reserved_bytes=d.peak_reserved_bytes,
            reserved_at_snapshot_bytes=d.reserved_at_snapshot_bytes,
            fragmentation=d.fragmentation,
            cuda_malloc_calls=d.cuda_malloc_calls,
            cache_flushes_then_malloc=d.cache_flushes_then_malloc,
            ooms=len(d.ooms),
            top_site=d.call_sites[0].site if d.call_sites else "",
            top_site_bytes=d.call_sites[0].bytes if d.call_sites else 0,
        )
        for d in report.devices
    ]


def to_json(doc: SnapshotReport | SnapshotDiff) -> bytes:
    """The report or diff as indented JSON (UTF-8, trailing newline)."""
    return msgspec.json.format(msgspec.json.encode(doc), indent=2) + b"\n"
