"""PD501 allocator-stall: a firing and a silent case (and skips), answers worked out by hand (µs).

Moved from tests/test_rules_synthetic.py (issue 9: one test file per rule).
"""

from rules_helpers import SGEMM, run_tb
from tracebuilder import TraceBuilder


def _alloc_trace(call, steps_with_call):
    tb = TraceBuilder()
    for n in range(3):
        s = 1000 * n
        tb.step(n + 1, s, 1000)
        tb.launch(SGEMM, launch_ts=s + 5, start=s + 10, dur=400)
        if n in steps_with_call:
            tb.runtime(call, s + 420, 300)
        tb.launch(SGEMM, launch_ts=s + 730, start=s + 740, dur=200)
    return tb


def test_pd501_fires_on_cudafree_in_steady_steps(tmp_path):
    f = run_tb(_alloc_trace("cudaFree", {1, 2}), tmp_path, ["PD501"]).findings["PD501"]
    # 300 µs of idle in each of steps 2 and 3, none in step 1: (0 + 300 + 300) / 3 per analysed step; the calls
    # and the host time in them over the same 3 steps: 2 calls / 3, (300 + 300) µs / 3 = 0.2 ms
    assert f["saving_us_per_step"] == 200
    ev = f["evidence"]
    assert ev["allocator_calls_per_step"] == 2 / 3 and ev["allocator_host_ms"] == 0.2 and f["steps"] == [2, 3]
    assert "steady-state steps #2–#3 and divided by the 3 analysed steps" in f["message"]
    # its steps (#2, #3) are fewer than the 3 averaged: the saving method says which (the engine's note)
    assert f["saving_method"].endswith("; the problem shows in 2 of the 3 steps averaged (#2–#3)")


def test_pd501_silent_when_only_first_step_allocates(tmp_path):
    r = run_tb(_alloc_trace("cudaMalloc", {0}), tmp_path, ["PD501"])
    assert "PD501" in r.passed and r.metrics("PD501")["allocator_calls_per_step"] == 0


def test_pd501_per_step_figures_share_the_analysed_steps_on_the_mi300x_trace():
    """MI300X ResNet18 (TraceLens): 4 steps from 5 Optimizer.step#SGD.step annotations (a step from one's end to
    the next's), the first left out. From the raw JSON: hipMalloc/hipFree calls and the union of their host time
    in steps 1-3, divided by the 4 analysed steps like the saving; the host time can then not exceed the step."""
    import gzip
    import json

    from conftest import shared_trace

    from perfdoctor import pipeline

    path = shared_trace("tracelens__mi300__ddp_resnet18.json.gz")
    with gzip.open(path, "rt") as fh:
        events = json.load(fh)["traceEvents"]
    opt = sorted(
        e["ts"] + e["dur"]
        for e in events
        if e.get("cat") == "user_annotation" and str(e.get("name", "")).startswith("Optimizer.step#SGD.step")
    )
    calls = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e.get("name") in ("hipMalloc", "hipFree"))
    n_calls, host_us = 0, 0.0
    for a, b in zip(opt[1:-1], opt[2:]):  # steady steps: 1..3
        inside = [(max(s, a), min(t, b)) for s, t in calls if a <= s < b]
        n_calls += len(inside)
        end = -1.0
        for s, t in inside:  # union of the calls, clipped to the step
            host_us += max(t - max(s, end), 0.0)
            end = max(end, t)
    steps_us = [b - a for a, b in zip(opt, opt[1:])]
    f = next(f for f in pipeline.build([str(path)]).report["findings"] if f["code"] == "PD501")
    ev = f["evidence"]
    assert ev["allocator_calls_per_step"] == n_calls / 4 == 423.0
    assert abs(ev["allocator_host_ms"] - host_us / 4 / 1000) < 1e-6
    assert ev["allocator_host_ms"] < sum(steps_us) / 4 / 1000  # 784.21 ms < 818.70 ms
    assert ev["idle_ms"] <= ev["allocator_host_ms"]


def test_pd501_on_rocm_names_hip_calls_and_the_hip_variable(tmp_path):
    """On an MI300X trace (hipMalloc/hipFree) PD501 said "cudaMalloc/cudaFree" and advised
    PYTORCH_CUDA_ALLOC_CONF; ROCm's allocator reads PYTORCH_HIP_ALLOC_CONF."""
    f = run_tb(_alloc_trace("hipFree", {1, 2}), tmp_path, ["PD501"]).findings["PD501"]
    assert "hipMalloc/hipFree calls per step" in f["message"] and "cudaMalloc" not in f["message"]
    assert "PYTORCH_HIP_ALLOC_CONF=expandable_segments:True" in f["fix"] and "PYTORCH_CUDA" not in f["fix"]
    assert "PYTORCH_HIP_ALLOC_CONF" in f["example_after"] and "hipMalloc/hipFree" in f["saving_method"]
    (tmp_path / "cuda").mkdir()
    g = run_tb(_alloc_trace("cudaFree", {1, 2}), tmp_path / "cuda", ["PD501"]).findings["PD501"]
    assert "cudaMalloc/cudaFree calls per step" in g["message"] and "PYTORCH_CUDA_ALLOC_CONF" in g["fix"]
