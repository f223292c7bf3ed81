"""Two memory-snapshot reports compared: each device's peaks before and after, and the call sites whose bytes at
the peak grew or shrank most (every call site of both reports is compared; a report keeps them all)."""

from __future__ import annotations

from perfdoctor.snapshot.report import DeviceChange, DeviceMemory, SiteChange, SnapshotDiff, SnapshotReport

MOVERS = 10


def change_pct(before: int, after: int) -> float | None:
    """(after - before) / before in %, None when ``before`` is 0."""
    return None if before == 0 else 100.0 * (after - before) / before


def _device_change(b: DeviceMemory, a: DeviceMemory) -> DeviceChange:
    before = {c.site: c.bytes for c in b.call_sites}
    after = {c.site: c.bytes for c in a.call_sites}
    changes = [
        SiteChange(
            site=s,
            before_bytes=before.get(s, 0),
            after_bytes=after.get(s, 0),
            change_bytes=after.get(s, 0) - before.get(s, 0),
        )
        for s in sorted(before.keys() | after.keys())
    ]
    grew = sorted((c for c in changes if c.change_bytes > 0), key=lambda c: (-c.change_bytes, c.site))
    shrank = sorted((c for c in changes if c.change_bytes < 0), key=lambda c: (c.change_bytes, c.site))
    return DeviceChange(
        device=b.device,
        before_peak_allocated_bytes=b.peak_allocated_bytes,
        after_peak_allocated_bytes=a.peak_allocated_bytes,
        peak_allocated_change_pct=change_pct(b.peak_allocated_bytes, a.peak_allocated_bytes),
        before_peak_reserved_bytes=b.peak_reserved_bytes,
        after_peak_reserved_bytes=a.peak_reserved_bytes,
        peak_reserved_change_pct=change_pct(b.peak_reserved_bytes, a.peak_reserved_bytes),
        before_reserved_at_snapshot_bytes=b.reserved_at_snapshot_bytes,
        after_reserved_at_snapshot_bytes=a.reserved_at_snapshot_bytes,
        grew=grew[:MOVERS],
        shrank=shrank[:MOVERS],
    )


def compare(before: SnapshotReport, after: SnapshotReport) -> SnapshotDiff:
    """Compare the devices present in both reports, by device index."""
    b_dev = {d.device: d for d in before.devices}
    a_dev = {d.device: d for d in after.devices}
    notes = [f"device {i}: only in BEFORE" for i in sorted(b_dev.keys() - a_dev.keys())]
    notes += [f"device {i}: only in AFTER" for i in sorted(a_dev.keys() - b_dev.keys())]
    notes += [f"BEFORE: {n}" for n in before.notes] + [f"AFTER: {n}" for n in after.notes]
    return SnapshotDiff(
        before=before.input,
        after=after.input,
        devices=[_device_change(b_dev[i], a_dev[i]) for i in sorted(b_dev.keys() & a_dev.keys())],
        notes=notes,
    )


def peak_regression(diff: SnapshotDiff, pct: float) -> DeviceChange | None:
    """The first device whose peak allocated bytes grew by more than ``pct`` % (from 0 to anything counts), or
    None."""
    for c in diff.devices:
        grew = c.after_peak_allocated_bytes > c.before_peak_allocated_bytes
        p = c.peak_allocated_change_pct
        if grew and (p is None or p > pct):
            return c
    return None
