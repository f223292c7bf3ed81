"""What a memory-snapshot report or snapshot diff shows, as display strings: one :class:`Page` that the terminal,
Markdown and HTML renderers lay out (:mod:`perfdoctor.render.snapshot`), so each format shows the same figures.
Reads :mod:`perfdoctor.snapshot.report` types and computes nothing but shares and display units."""

from __future__ import annotations

from dataclasses import dataclass, field

from perfdoctor.render.diff_view import TableView
from perfdoctor.snapshot.report import GIB, DeviceChange, DeviceMemory, SiteChange, SnapshotDiff, SnapshotReport

ROWS = 10


@dataclass
class Section:
    """A titled block: ``facts`` (label, value) lines, then tables."""

    title: str
    facts: list[tuple[str, str]] = field(default_factory=list)
    tables: list[TableView] = field(default_factory=list)


@dataclass
class Page:
    """The whole report: a headline sentence, the input line(s), sections, notes."""

    title: str
    headline: str
    inputs: list[str]
    sections: list[Section]
    notes: list[str]


def gib(n: int) -> str:
    """Bytes as GiB (2**30), two decimals."""
    return f"{n / GIB:.2f} GiB"


def mib(n: int) -> str:
    """Bytes as MiB (2**20), one decimal."""
    return f"{n / (1 << 20):,.1f} MiB"


def both(n: int) -> str:
    """``12,426,629,128 B (11.57 GiB)``."""
    return f"{n:,} B ({gib(n)})"


def short_site(site: str) -> str:
    """A call site with its file name cut to the last two path parts (``cs336_basics/model.py:54:forward``)."""
    if site.startswith("<"):
        return site
    path, _, rest = site.partition(".py:")
    if not rest:
        return site
    return "/".join(path.split("/")[-2:]) + ".py:" + rest


def _ms(us: int | None) -> str:
    return "n/a" if us is None else f"{us / 1000:,.1f} ms"


def _signed_pct(p: float | None) -> str:
    return "n/a" if p is None else f"{p:+.1f}%"


def _peak_facts(d: DeviceMemory) -> list[tuple[str, str]]:
    where = (
        "before the first recorded event"
        if d.peak_event_index is None
        else (
            f"event {d.peak_event_index + 1:,} of {d.history_events:,}, {_ms(d.peak_time_us)} into the "
            f"{_ms(d.history_span_us)} history"
        )
    )
    if d.history_events == 0:
        where = "no history recorded: the figure at the snapshot"
    if d.peak_during:
        where += f", during {', '.join(d.peak_during)}"
    held = d.reserved_at_peak_bytes - d.peak_allocated_bytes
    return [
        ("peak allocated", f"{both(d.peak_allocated_bytes)} at {where}; {d.peak_live_allocations:,} allocations live"),
        (
            "peak reserved",
            f"{both(d.peak_reserved_bytes)}; at the allocated peak {gib(d.reserved_at_peak_bytes)} "
            f"reserved, {gib(held)} of it cached but not allocated",
        ),
    ]


def _state_facts(d: DeviceMemory) -> list[tuple[str, str]]:
    frag = "n/a (no free block)" if d.fragmentation is None else f"{d.fragmentation:.2f}"
    return [
        (
            "at the snapshot",
            f"reserved {both(d.reserved_at_snapshot_bytes)}, allocated {both(d.allocated_at_snapshot_bytes)}",
        ),
        (
            "free in the cache",
            f"{gib(d.cached_free_bytes)} in inactive blocks, the largest {mib(d.largest_free_block_bytes)} "
            f"(fragmentation {frag}: 1 - largest / free); {mib(d.rounding_bytes)} lost to rounding; "
            f"{mib(d.awaiting_free_bytes)} awaiting free on another stream",
        ),
        ("segments", f"{d.segments:,} ({d.large_segments:,} large, {d.small_segments:,} small)"),
        (
            "allocator calls",
            f"{d.cuda_malloc_calls:,} cudaMalloc and {d.cuda_free_calls:,} cudaFree in the history; "
            f"{d.cache_flushes_then_malloc:,} cache flushes followed by cudaMalloc (an allocator retry, or "
            f"empty_cache before growth); {len(d.ooms):,} OOM",
        ),
    ]


def _sites_table(d: DeviceMemory) -> TableView:
    """The call sites holding memory at the peak (the first :data:`ROWS`), with their share of the peak."""
    total = max(d.peak_allocated_bytes, 1)
    return TableView(
        title=f"device {d.device}: call sites holding memory at the peak",
        header=["bytes", "GiB", "share", "allocations", "call site (innermost frame outside torch and stdlib)"],
        rows=[
            [
                f"{c.bytes:,}",
                f"{c.bytes / GIB:.2f}",
                f"{100 * c.bytes / total:.1f}%",
                f"{c.allocations:,}",
                short_site(c.site),
            ]
            for c in d.call_sites[:ROWS]
        ],
        align=["r", "r", "r", "r", "l"],
        note=f"{len(d.call_sites) - ROWS} more call sites in the JSON" if len(d.call_sites) > ROWS else "",
    )


def _allocations_table(d: DeviceMemory) -> TableView:
    """The largest allocations live at the peak, with their call site and stack."""
    return TableView(
        title=f"device {d.device}: largest allocations at the peak",
        header=["bytes", "MiB", "address", "call site", "stack (outside torch)"],
        rows=[
            [
                f"{a.bytes:,}",
                f"{a.bytes / (1 << 20):,.1f}",
                hex(a.address),
                short_site(a.site),
                " < ".join(short_site(s) for s in a.stack[1:4]),
            ]
            for a in d.top_allocations
        ],
        align=["r", "r", "l", "l", "l"],
    )


def _segments_table(d: DeviceMemory) -> TableView:
    """The segments with free space at the snapshot, most free first (as the snapshot analysis lists them)."""
    return TableView(
        title=f"device {d.device}: segments with the most free space at the snapshot",
        header=["address", "size", "allocated", "free", "largest free", "blocks", "type", "stream"],
        rows=[
            [
                hex(s.address),
                mib(s.total_bytes),
                mib(s.allocated_bytes),
                mib(s.free_bytes),
                mib(s.largest_free_bytes),
                f"{s.blocks:,}",
                s.segment_type,
                str(s.stream),
            ]
            for s in d.top_segments
            if s.free_bytes > 0
        ],
        align=["l", "r", "r", "r", "r", "r", "l", "r"],
    )


def _ooms_table(d: DeviceMemory) -> TableView:
    """The out-of-memory errors the snapshot recorded: what was asked, what was free and held then."""
    return TableView(
        title=f"device {d.device}: out-of-memory errors",
        header=["time", "requested", "free on device", "reserved then", "allocated then", "call site"],
        rows=[
            [
                _ms(o.time_us),
                mib(o.requested_bytes),
                "n/a" if o.device_free_bytes is None else mib(o.device_free_bytes),
                gib(o.reserved_bytes),
                gib(o.allocated_bytes),
                short_site(o.site),
            ]
            for o in d.ooms
        ],
        align=["r", "r", "r", "r", "r", "l"],
    )


def _categories_table(d: DeviceMemory) -> TableView:
    """Memory at the peak by category, with each one's share of the peak."""
    total = max(d.peak_allocated_bytes, 1)
    return TableView(
        title=f"device {d.device}: memory at the peak by category",
        header=["category", "bytes", "GiB", "share"],
        rows=[[k, f"{v:,}", f"{v / GIB:.2f}", f"{100 * v / total:.1f}%"] for k, v in (d.categories or {}).items()],
        align=["l", "r", "r", "r"],
    )


def _device_tables(d: DeviceMemory) -> list[TableView]:
    """The device's tables that have rows: call sites, allocations, segments, OOMs, categories."""
    tables = (_sites_table(d), _allocations_table(d), _segments_table(d), _ooms_table(d), _categories_table(d))
    return [t for t in tables if t.rows]


def report_page(r: SnapshotReport) -> Page:
    """The page of a snapshot report; the headline names each device's peak and what holds the most then."""
    heads = []
    for d in r.devices:
        top = d.call_sites[0] if d.call_sites else None
        holder = f"; {short_site(top.site)} holds {gib(top.bytes)}" if top else ""
        heads.append(
            f"device {d.device}: peak {gib(d.peak_allocated_bytes)} allocated, "
            f"{gib(d.peak_reserved_bytes)} reserved{holder}"
        )
    sections = [
        Section(title=f"device {d.device}", facts=_peak_facts(d) + _state_facts(d), tables=_device_tables(d))
        for d in r.devices
    ]
    settings = {k: v for k, v in r.allocator_settings.items() if k != "roundup_power2_divisions"}
    if settings:
        sections.append(Section(title="allocator settings", facts=[(k, str(v)) for k, v in settings.items()]))
    return Page(
        title="perfdoctor memory snapshot",
        headline="; ".join(heads) if heads else "the snapshot holds no segment and no history",
        inputs=[f"{r.input.path} ({r.input.bytes:,} bytes, sha256 {r.input.sha256[:12]})"],
        sections=sections,
        notes=r.notes,
    )


def _change_tables(c: DeviceChange) -> list[TableView]:
    def rows(changes: list[SiteChange]) -> list[list[str]]:
        return [
            [
                f"{s.change_bytes:+,}",
                f"{s.change_bytes / GIB:+.2f}",
                f"{s.before_bytes:,}",
                f"{s.after_bytes:,}",
                short_site(s.site),
            ]
            for s in changes
        ]

    header = ["change (B)", "GiB", "before (B)", "after (B)", "call site"]
    align = ["r", "r", "r", "r", "l"]
    grew = TableView(f"device {c.device}: call sites that grew most at the peak", header, rows(list(c.grew)), align)
    shrank = TableView(
        f"device {c.device}: call sites that shrank most at the peak", header, rows(list(c.shrank)), align
    )
    return [t for t in (grew, shrank) if t.rows]


def diff_page(d: SnapshotDiff) -> Page:
    """The page of a snapshot diff; the headline gives each device's peak change."""
    heads = [
        f"device {c.device}: peak allocated {gib(c.before_peak_allocated_bytes)} → "
        f"{gib(c.after_peak_allocated_bytes)} ({_signed_pct(c.peak_allocated_change_pct)})"
        for c in d.devices
    ]
    sections = []
    for c in d.devices:
        facts = [
            (
                "peak allocated",
                f"{both(c.before_peak_allocated_bytes)} → {both(c.after_peak_allocated_bytes)} "
                f"({_signed_pct(c.peak_allocated_change_pct)})",
            ),
            (
                "peak reserved",
                f"{both(c.before_peak_reserved_bytes)} → {both(c.after_peak_reserved_bytes)} "
                f"({_signed_pct(c.peak_reserved_change_pct)})",
            ),
            (
                "reserved at the snapshot",
                f"{both(c.before_reserved_at_snapshot_bytes)} → {both(c.after_reserved_at_snapshot_bytes)}",
            ),
        ]
        sections.append(Section(title=f"device {c.device}", facts=facts, tables=_change_tables(c)))
    return Page(
        title="perfdoctor memory snapshot diff",
        headline="; ".join(heads) if heads else "no device in common",
        inputs=[f"BEFORE: {d.before.path}", f"AFTER: {d.after.path}"],
        sections=sections,
        notes=d.notes,
    )
