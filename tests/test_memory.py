"""memory_summary: peaks from [memory] events, allocator calls, profiler settings; worked out by hand."""

from __future__ import annotations

from tracebuilder import TraceBuilder

from perfdoctor.analysis.memory.peaks import memory_summary
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


def test_capacity_below_the_reserved_peak_is_unknown_not_a_share_above_100(tmp_path, capsys):
    """Found by the fuzzer: a ``totalGlobalMem`` below what the [memory] events reserve gave PD502 a peak reserved
    of more than 100% of the device. The allocator cannot reserve more than the device holds, so one number is
    wrong: the capacity is dropped at the trace boundary with a warning naming both, and no share is computed.
    Here 8 GiB reserved on a device said to hold 6 GiB (8,589,934,592 B > 6,442,450,944 B); device 1's 80 GiB,
    with nothing reserved above it, is kept."""
    import json

    from perfdoctor.cli import main

    tb = TraceBuilder(total_memory=6 * GiB)
    tb.meta["deviceProperties"].append({**tb.meta["deviceProperties"][0], "id": 1, "totalGlobalMem": 80 * GiB})
    tb.step(1, 0, 1000)
    tb.launch("k", 10, 20, 500)
    tb.memory(10, GiB, total_allocated=7 * GiB, total_reserved=8 * GiB)
    tb.memory(20, GiB, total_allocated=2 * GiB, total_reserved=4 * GiB, device=1)
    path = tb.write(tmp_path / "m.json")
    tables = load_trace(str(path))
    warning = (
        f"{path}: device 0's totalGlobalMem (6,442,450,944 B) is below the 8,589,934,592 B its [memory] events "
        "record as reserved or allocated: one of the two is wrong, so its capacity is treated as unknown"
    )
    assert warning in tables.warnings
    devices = {d["device"]: d for d in memory_summary(tables)["devices"]}
    assert devices[0]["capacity_bytes"] is None and devices[0]["peak_reserved_fraction"] is None
    assert devices[1]["capacity_bytes"] == 80 * GiB and devices[1]["peak_reserved_fraction"] == 4 / 80
    assert main(["report", str(path), "--format", "json"]) in (0, 1)
    report = json.loads(capsys.readouterr().out)
    assert warning in report["warnings"]
    pd502 = [c for c in report["skipped_checks"] if c["code"] == "PD502"]
    assert pd502 and "totalGlobalMem" in pd502[0]["reason"]
    assert report["ranks"][0]["memory"]["devices"][0]["peak_reserved_fraction"] is None
