"""memory_summary: peaks from [memory] events, allocator calls, profiler settings; worked out by hand."""

from __future__ import annotations

from tracebuilder import TraceBuilder

from perfdoctor.analysis.memory import memory_summary
from perfdoctor.analysis.trace_info import profiler_settings
from perfdoctor.trace import load_trace

GiB = 1 << 30


def test_peaks_capacity_and_allocator_calls(tmp_path):
    tb = TraceBuilder(total_memory=80 * GiB)
    tb.step(1, 0, 1000)
    tb.memory(10, GiB, total_allocated=2 * GiB, total_reserved=4 * GiB)
    tb.memory(20, 3 * GiB, total_allocated=5 * GiB, total_reserved=8 * GiB)
    tb.memory(30, -4 * GiB, total_allocated=1 * GiB, total_reserved=8 * GiB)
    tb.runtime("cudaMalloc", 11, 5)
    tb.runtime("cudaMalloc", 21, 5)
    tb.runtime("cudaFree", 31, 5)
    tb.runtime("cudaLaunchKernel", 40, 5)
    tb.meta.update({"profile_memory": 1, "record_shapes": 1})
    tables = load_trace(str(tb.write(tmp_path / "m.json")))
    mem = memory_summary(tables)
    assert mem["devices"] == [
        {
            "device_type": "GPU",
            "device": 0,
            "label": "GPU 0",
            "peak_allocated_bytes": 5 * GiB,
            "peak_reserved_bytes": 8 * GiB,
            "capacity_bytes": 80 * GiB,
            "peak_reserved_fraction": 0.1,
            "n_events": 3,
        }
    ]
    assert mem["allocator_calls"] == {"cudaFree": 1, "cudaMalloc": 2}
    assert mem["note"] == ""
    assert profiler_settings(tables.metadata) == {"schemaVersion": "1", "profile_memory": "1", "record_shapes": "1"}


def test_no_memory_events_says_why(tmp_path):
    tb = TraceBuilder(rank=3, world_size=8)
    tb.step(1, 0, 1000)
    tables = load_trace(str(tb.write(tmp_path / "m.json")))
    mem = memory_summary(tables)
    assert mem["devices"] == [] and mem["allocator_calls"] == {}
    assert "profile_memory=True" in mem["note"]
    settings = profiler_settings(tables.metadata)
    assert settings["distributed rank"] == "3" and settings["distributed world_size"] == "8"
