"""PD901 trace-quality: a firing and a silent case (and skips), answers worked out by hand (µs).

Moved from tests/test_rules_synthetic.py (issue 9: one test file per rule).
"""

import pytest
from rules_helpers import SGEMM, run_tb
from tracebuilder import TraceBuilder


def test_pd901_fires_listing_what_is_missing_and_what_it_disabled(tmp_path):
    tb = TraceBuilder()
    tb.launch(SGEMM, launch_ts=5, start=10, dur=400)
    r = run_tb(tb, tmp_path, ["PD101", "PD901"])
    f = r.findings["PD901"]
    assert any("ProfilerStep" in x for x in f["evidence"]["lacks"])
    assert "PD101" in f["evidence"]["disabled_checks"] and "PD101" in r.skipped
    assert f["severity"] == "low"


def test_pd901_silent_on_complete_trace(tmp_path):
    tb = TraceBuilder()
    for n in range(3):
        tb.step(n + 1, 1000 * n, 1000)
        tb.cpu_op("aten::mm", 1000 * n + 1, 50, input_dims=[[64, 64], [64, 64]])
        tb.launch(SGEMM, launch_ts=1000 * n + 5, start=1000 * n + 10, dur=400)
    tb.memory(100, 1 << 20, 1 << 30, 2 << 30)
    r = run_tb(tb, tmp_path, ["PD901"])
    assert "PD901" in r.passed


def _steps(path):  # type: ignore[no-untyped-def]
    from analysed import rank_analysis

    return rank_analysis(path).ranks[0].primary.steps


BUFFER_REQUEST = {"ph": "X", "cat": "overhead", "name": "Activity Buffer Request", "pid": -1, "tid": 0}


def test_pd901_fires_on_an_export_that_lost_its_activity_and_sync_is_not_python(tmp_path):
    # The profiler's span is 2 s (its Trace event), the file holds 600 µs of events: cudaGetDeviceCount 0-1 and a
    # cudaDeviceSynchronize 100-600, a CUPTI buffer request, and no kernel, memcpy or memset. The analysed window
    # (no steps: the whole trace) is 0-600: 500 µs blocked in the sync (host synchronization, whatever it waited
    # for), 100 µs Python (outside any op: none is recorded); 0.6 ms / 2 s = 0.03% of the span.
    tb = TraceBuilder()
    tb.runtime("cudaGetDeviceCount", 0, 1)
    tb.runtime("cudaDeviceSynchronize", 100, 500)
    tb.events.append({**BUFFER_REQUEST, "ts": 2, "dur": 40})
    tb.events.append({"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans", "tid": "PyTorch"})
    tb.events[-1].update(ts=-1_999_400, dur=2_000_000)
    r = run_tb(tb, tmp_path, ["PD901"])
    text = r.findings["PD901"]["evidence"]["lacks_text"]
    assert "the profiler's span is 2,000.0 ms but its events cover 0.6 ms (0.03% of it)" in text
    assert "2 CUDA/HIP runtime call(s) were recorded with device tracing on (1 Kineto overhead event(s), 1 " in text
    assert "the host sat 0.5 ms in blocking calls (cudaDeviceSynchronize)" in text
    (step,) = _steps(tmp_path / "t.json")
    assert step.dur_us == 600 and step.idle_causes_us == {"python": 100.0, "synchronization": 500.0}


def test_pd901_names_device_activity_that_stops_while_the_host_launches_on(tmp_path):
    # one kernel (launch 0, runs 10-20), then launches at 100, 110, ... with no kernel: 10 of them are a sign
    # (MIN_LOST_LAUNCHES), 9 are not; the device stops 100 + 10·10 + 5 - 20 = 185 µs before the host's last call
    from perfdoctor.analysis.lost_activity import lost_activity
    from perfdoctor.trace import load_trace

    for n, expect in ((9, None), (10, "device activity stops 0.2 ms before the host's last runtime call")):
        tb = TraceBuilder()
        tb.launch(SGEMM, launch_ts=0, start=10, dur=10)
        for k in range(n):
            tb.runtime("cudaLaunchKernel", 100 + 10 * k, 5)
        lost = lost_activity(load_trace(str(tb.write(tmp_path / f"t{n}.json"))))
        if expect is None:
            assert lost is None
        else:
            assert lost is not None and lost.text().startswith(expect) and "the 10 launch calls after it" in lost.text()


def test_pd901_on_the_overflowed_bclarkson_export(shared):
    """F17: the RTX 3090 run exported with 72 events; values from the raw JSON with this test's own code."""
    import json

    from rules_helpers import run_rules

    path = shared("bclarkson__rtx3090x2_overflowed_export.json")
    events = json.loads(path.read_text())["traceEvents"]
    span = next(e["dur"] for e in events if e.get("cat") == "Trace")
    timed = [e for e in events if e.get("ph") == "X" and e.get("cat") in ("cuda_runtime", "kernel", "cpu_op")]
    lo, hi = min(e["ts"] for e in timed), max(e["ts"] + e["dur"] for e in timed)
    sync = sum(e["dur"] for e in timed if e["name"] == "cudaDeviceSynchronize")
    requests = sum(e.get("name") == "Activity Buffer Request" for e in events)
    assert round(span / 1000, 1) == 77_862.9 and round(sync / 1000, 1) == 185.1 and requests == 1
    r = run_rules([path], ["PD901"])
    text = r.findings["PD901"]["evidence"]["lacks_text"]
    assert f"the profiler's span is {span / 1000:,.1f} ms but its events cover {(hi - lo) / 1000:,.1f} ms" in text
    assert f"{requests} 'Activity Buffer Request'" in text
    assert f"the host sat {sync / 1000:,.1f} ms in blocking calls (cudaDeviceSynchronize)" in text
    (step,) = _steps(path)
    assert step.dur_us == pytest.approx(hi - lo)
    # was 210.6 ms of 'Python'; the sync's 185.1 ms is host synchronization, whether or not its work was recorded
    assert step.idle_causes_us["synchronization"] == pytest.approx(sync)
    assert step.idle_causes_us["python"] == pytest.approx(hi - lo - sync)


def test_pd901_silent_about_lost_activity_on_a_complete_export_with_a_buffer_request(shared):
    """The RTX 4090 compiled ResNet18 trace also holds one 'Activity Buffer Request' (every CUPTI run asks for
    buffers): its span (60.6 ms) and its events (53.7 ms) agree, and every launch has its activity."""
    from perfdoctor.analysis.lost_activity import lost_activity
    from perfdoctor.trace import load_trace

    assert lost_activity(load_trace(str(shared("wings236__rtx4090_compiled_resnet18.json")))) is None


def test_pd901_counts_only_the_checks_its_missing_data_skipped(tmp_path):
    # three steps with shapes and a device (deviceProperties of an A100), no memory events: of the checks run,
    # PD502 needs memory events (skipped for them); PD101 (no DataLoader), PD204 (a GPU trace: the rule is about
    # CPU-only training) and PD303 (one rank) are skipped for other reasons and are not the trace's fault
    tb = TraceBuilder()
    for n in range(3):
        tb.step(n + 1, 1000 * n, 1000)
        tb.cpu_op("aten::mm", 1000 * n + 1, 50, input_dims=[[64, 64], [64, 64]])
        tb.launch(SGEMM, launch_ts=1000 * n + 5, start=1000 * n + 10, dur=400)
    r = run_tb(tb, tmp_path, ["PD101", "PD204", "PD303", "PD502", "PD901"])
    assert {"PD101", "PD204", "PD303", "PD502"} <= set(r.skipped)
    f = r.findings["PD901"]
    assert f["evidence"]["lacks"] == ["memory events (profile_memory=True)"]
    assert f["evidence"]["disabled_checks"] == {"PD502": r.skipped["PD502"]}
    assert f["headline"] == "The trace lacks memory events: 1 check(s) skipped"
    assert f["message"].endswith("; 1 check(s) need what it lacks and were skipped")
