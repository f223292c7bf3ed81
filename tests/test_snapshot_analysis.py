"""Memory-snapshot figures on snapshots built in code, each worked out by hand in the test."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest
from snapshotbuilder import MiB, block, event, hand_snapshot, segment, write

from perfdoctor.snapshot.analysis import analyse
from perfdoctor.snapshot.reader import read_snapshot
from perfdoctor.snapshot.report import SnapshotReport, to_json


def _report(tmp_path: Path, data: object) -> SnapshotReport:
    return analyse(read_snapshot(str(write(tmp_path / "s.pickle", data))))


def test_hand_snapshot_peaks_and_state(tmp_path: Path) -> None:
    d = _report(tmp_path, hand_snapshot()).devices[0]
    # live before the history: A (1,000,000 requested) and Y (300,000, freed in the history without its alloc)
    # = 1,300,000; + X 500,000 = 1,800,000; + C 2,000,000 = 3,800,000 (the peak, after event 3 of 7);
    # - X = 3,300,000; - Y = 3,000,000 = A + C, the snapshot's allocated
    assert d.peak_allocated_bytes == 3_800_000
    assert d.peak_event_index == 2
    assert d.peak_time_us == 200  # 1,200 - 1,000 µs
    assert d.history_span_us == 500
    assert d.history_starts_mid_run
    assert d.peak_live_allocations == 4
    # reserved: 4 MiB + 2 MiB at the snapshot; one segment_alloc of 2 MiB in the history → 4 MiB before it
    assert d.reserved_at_snapshot_bytes == 6 * MiB == 6_291_456
    assert d.peak_reserved_bytes == 6 * MiB
    assert d.reserved_at_peak_bytes == 6 * MiB
    assert d.allocated_at_snapshot_bytes == 3_000_000
    assert d.rounding_bytes == (MiB - 1_000_000) + (2 * MiB - 2_000_000) == 145_728
    assert d.cached_free_bytes == d.largest_free_block_bytes == 3 * MiB
    assert d.fragmentation == 0.0  # one free block
    assert d.allocated_at_snapshot_bytes + d.rounding_bytes + d.cached_free_bytes == d.reserved_at_snapshot_bytes
    assert (d.segments, d.large_segments, d.cuda_malloc_calls, d.cuda_free_calls) == (2, 2, 1, 0)
    assert d.cache_flushes_then_malloc == 0


def test_hand_snapshot_call_sites_skip_torch_and_stdlib(tmp_path: Path) -> None:
    d = _report(tmp_path, hand_snapshot()).devices[0]
    assert [(c.site, c.bytes, c.allocations) for c in d.call_sites] == [
        ("/p/model.py:20:forward", 2_000_000, 1),
        ("/p/train.py:10:build", 1_000_000, 1),  # the snapshot block's stack: allocated before the history
        ("/p/model.py:30:forward", 500_000, 1),
        ("/p/loss.py:5:loss", 300_000, 1),  # the free's stack: its alloc is not in the history
    ]
    top = d.top_allocations[0]
    assert (top.bytes, top.address, top.recorded, top.stack) == (
        2_000_000,
        0x20000000,
        True,
        ["/p/model.py:20:forward"],
    )
    assert [a.recorded for a in d.top_allocations] == [True, False, True, False]


def test_hand_snapshot_oom(tmp_path: Path) -> None:
    d = _report(tmp_path, hand_snapshot()).devices[0]
    (oom,) = d.ooms
    assert (oom.requested_bytes, oom.device_free_bytes, oom.time_us) == (8_000_000, 1_000_000, 500)
    assert (oom.reserved_bytes, oom.allocated_bytes) == (6 * MiB, 3_000_000)  # the state after the last free


def test_report_json_round_trip(tmp_path: Path) -> None:
    report = _report(tmp_path, hand_snapshot())
    assert msgspec.json.decode(to_json(report), type=SnapshotReport) == report


def test_fragmentation_is_one_minus_largest_over_free(tmp_path: Path) -> None:
    seg = segment(
        0x30000000,
        [
            block(2 * MiB, "active_allocated"),
            block(3 * MiB, "inactive"),
            block(MiB, "active_allocated"),
            block(4 * MiB, "inactive"),
        ],
    )
    d = _report(tmp_path, {"segments": [seg], "device_traces": []}).devices[0]
    assert d.cached_free_bytes == 7 * MiB
    assert d.largest_free_block_bytes == 4 * MiB
    assert d.fragmentation == pytest.approx(1 - 4 / 7)
    (row,) = d.top_segments
    assert (row.total_bytes, row.allocated_bytes, row.free_bytes, row.largest_free_bytes, row.blocks) == (
        10 * MiB,
        3 * MiB,
        7 * MiB,
        4 * MiB,
        4,
    )


def test_no_history_peak_is_the_snapshot(tmp_path: Path) -> None:
    seg = segment(0x30000000, [block(2 * MiB, "active_allocated", 1_500_000), block(MiB, "inactive")])
    report = _report(tmp_path, {"segments": [seg], "device_traces": [[]]})
    d = report.devices[0]
    assert (d.peak_allocated_bytes, d.peak_reserved_bytes) == (1_500_000, 3 * MiB)
    assert d.peak_event_index is None and d.history_events == 0
    assert d.call_sites[0].site == "<before the history: no stack>"
    assert "no allocation history recorded" in report.notes[0]


def test_cache_flush_then_malloc_and_awaiting_free(tmp_path: Path) -> None:
    # two cudaFree then a cudaMalloc with no allocation between (a retry's shape): 1; the later cudaMalloc follows
    # an allocation served from the cache: not counted. Reserved: 8 MiB at the snapshot; history -4 -2 +4 +2 -2 MiB
    # (net -2) → 10 MiB before it, then 6, 4, 8, 10, 8: the peak is 10 MiB, reached before the first event.
    seg = segment(0x40000000, [block(4 * MiB, "active_pending_free"), block(4 * MiB, "inactive")])
    trace = [
        event("segment_free", 0x50000000, 4 * MiB),
        event("segment_free", 0x60000000, 2 * MiB),
        event("segment_alloc", 0x40000000, 4 * MiB),
        event("alloc", 0x40000000, 4 * MiB),
        event("segment_alloc", 0x40400000, 2 * MiB),
        event("segment_free", 0x40400000, 2 * MiB),
    ]
    d = _report(tmp_path, {"segments": [seg], "device_traces": [trace]}).devices[0]
    assert (d.cuda_malloc_calls, d.cuda_free_calls, d.cache_flushes_then_malloc) == (2, 3, 1)
    assert d.peak_reserved_bytes == 10 * MiB
    assert d.awaiting_free_bytes == 4 * MiB  # a block freed but waiting for another stream: not reusable yet
    assert d.allocated_at_snapshot_bytes == 0


def test_categories_and_annotations(tmp_path: Path) -> None:
    seg = segment(0x10000000, [block(8 * MiB, "inactive")])
    trace = [
        event("alloc", 0x10000000, 1000, category="PARAMETER", time_us=0),
        event("alloc", 0x10001000, 3000, category="ACTIVATION", time_us=10),
        event("alloc", 0x10002000, 500, time_us=20),
        event("free_completed", 0x10001000, 3000, time_us=30),
        event("free_completed", 0x10000000, 1000, time_us=40),
        event("free_completed", 0x10002000, 500, time_us=50),
    ]
    notes = [
        {"stage": "START", "name": "Optimizer.step#AdamW.step", "device": 0, "time_us": 15},
        {"stage": "END", "name": "Optimizer.step#AdamW.step", "device": 0, "time_us": 25},
        {"stage": "START", "name": "other", "device": 0, "time_us": 30},
        {"stage": "END", "name": "other", "device": 0, "time_us": 35},
    ]
    data = {"segments": [seg], "device_traces": [trace], "external_annotations": notes}
    d = _report(tmp_path, data).devices[0]
    assert d.peak_allocated_bytes == 4500  # after the third alloc, at 20 µs
    assert d.peak_during == ["Optimizer.step#AdamW.step"]
    assert d.categories == {"ACTIVATION": 3000, "PARAMETER": 1000, "unknown": 500}


def test_backward_stack_without_python_names_the_node(tmp_path: Path) -> None:
    stack = [
        {"filename": "??", "line": 0, "name": "at::_ops::bmm::call(at::Tensor const&, at::Tensor const&)"},
        {"filename": "??", "line": 0, "name": "torch::autograd::generated::BmmBackward0::apply(std::vector<>&&)"},
        {"filename": "??", "line": 0, "name": "torch::autograd::Engine::thread_main()"},
    ]
    op_only = stack[:1]
    seg = segment(0x10000000, [block(MiB, "inactive")])
    trace = [event("alloc", 0x10000000, 100, stack), event("alloc", 0x10000100, 50, op_only)]
    d = _report(tmp_path, {"segments": [seg], "device_traces": [trace]}).devices[0]
    assert [c.site for c in d.call_sites] == ["<backward: BmmBackward0>", "<op: bmm>"]


def test_two_devices(tmp_path: Path) -> None:
    s0 = segment(0x10000000, [block(MiB, "active_allocated")], device=0)
    s1 = segment(0x90000000, [block(2 * MiB, "active_allocated")], device=1)
    report = _report(tmp_path, {"segments": [s0, s1], "device_traces": [[], []]})
    assert [(d.device, d.peak_allocated_bytes, d.peak_reserved_bytes) for d in report.devices] == [
        (0, MiB, MiB),
        (1, 2 * MiB, 2 * MiB),
    ]


def test_a_stackless_oom_is_not_named_before_the_history(tmp_path: Path) -> None:
    """A block live before the history with no stack, then an OOM recorded without a stack: the block's site is
    "before the history", the OOM's "no stack recorded" (each empty stack is its own case, whatever came first)."""
    seg = segment(0x30000000, [block(2 * MiB, "active_allocated", 1_500_000)])
    oom = event("oom", 0, 8 * MiB, device_free=0)
    d = _report(tmp_path, {"segments": [seg], "device_traces": [[oom]]}).devices[0]
    assert [o.site for o in d.ooms] == ["<no stack recorded>"]
    assert d.call_sites[0].site == "<before the history: no stack>"
