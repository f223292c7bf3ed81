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
    # the 300 µs free of steps 2 and 3, outside every op, is cut from the host timeline: the second launch and
    # the step's end (host time) move 300 µs earlier, the device waits on the host there; none in step 1:
    # (0 + 300 + 300) / 3 per analysed step (the report's denominator). The calls and their host time are counted
    # in the steady-state steps #2 and #3 and divided by those 2 (a per-step count divided by steps it was not
    # counted in would understate it): 2 / 2 = 1 call and 600 / 2 = 300 µs per steady-state step
    assert f["saving_us_per_step"] == 200
    ev = f["evidence"]
    assert ev["allocator_calls_per_step"] == 1.0 and ev["allocator_host_ms"] == 0.3 and f["steps"] == [2, 3]
    assert (
        "calls per steady-state step (0.30 ms of host time), the mean of the 2 steady-state steps #2–#3"
        in (f["message"])
    )
    assert "takes the mean of the 3 analysed steps from 1.00 ms to 0.80 ms" in f["message"]
    assert "per steady-state step" in f["headline"] and "0.20 ms per analysed step" in f["headline"]
    assert f["saving_method"].startswith("replay of the step's dependency graph with the fix applied")
    # its steps (#2, #3) are fewer than the 3 averaged: the saving method says which (the engine's note)
    assert f["saving_method"].endswith("; the problem shows in 2 of the 3 steps averaged (#2–#3)")


def _cause_trace(kind, api="cuda"):
    """3 steps of 1,000 µs; each runs a 400 µs op that launches a 100 µs kernel. ``kind`` adds, to steps 2 and 3
    (step 1 fills the cache):

    - "retry": in the op, cudaMalloc 10 µs (the one that does not fit), 2 × cudaFree 100 µs, cudaMalloc 100 µs:
      210 + 100 µs of driver calls;
    - "empty_cache": a 50 µs cudaMalloc in the op, and 3 × cudaFree 40 µs outside every op at the step's end
      (torch.cuda.empty_cache() called from Python): 50 + 120 µs;
    - "shape_change": 2 × cudaMalloc 80 µs in the op, no free: 160 µs.
    """
    tb = TraceBuilder()
    for n in range(3):
        s = 1000 * n
        tb.step(n + 1, s, 1000)
        tb.cpu_op("aten::mm", s + 200, 400)
        calls = []
        if n >= 1 and kind == "retry":
            calls = [("cudaMalloc", 10), ("cudaFree", 100), ("cudaFree", 100), ("cudaMalloc", 100)]
        if n >= 1 and kind == "empty_cache":
            calls = [("cudaMalloc", 50)]
        if n >= 1 and kind == "shape_change":
            calls = [("cudaMalloc", 80), ("cudaMalloc", 80)]
        t = s + 210
        for name, dur in calls:
            tb.runtime(name.replace("cuda", api), t, dur)
            t += dur
        tb.launch(SGEMM, launch_ts=t + 5, start=t + 15, dur=100)
        if n >= 1 and kind == "empty_cache":
            for k in range(3):
                tb.runtime(f"{api}Free", s + 800 + 50 * k, 40)
    return tb


def test_pd501_names_an_allocator_retry_and_its_fix(tmp_path):
    f = run_tb(_cause_trace("retry"), tmp_path, ["PD501"]).findings["PD501"]
    ev = f["evidence"]
    assert ev["cause"] == "retry" and ev["frees_retry"] == 4 and ev["frees_no_caching"] == ev["frees_empty_cache"] == 0
    assert "allocator retries" in f["message"] and "expandable_segments:True" in f["fix"]
    # the 310 µs of calls in each of steps 2 and 3 leave the host timeline, and the step's end with them:
    # (0 + 310 + 310) / 3 = 206.67 µs per analysed step
    assert abs(f["saving_us_per_step"] - 620 / 3) < 1e-3
    assert ev["allocator_calls_per_step"] == 8 / 2  # 4 calls in each of the 2 steady-state steps


def test_pd501_names_empty_cache_in_the_loop_and_its_fix(tmp_path):
    f = run_tb(_cause_trace("empty_cache"), tmp_path, ["PD501"]).findings["PD501"]
    ev = f["evidence"]
    assert ev["cause"] == "empty_cache" and ev["frees_empty_cache"] == 6 and ev["frees_retry"] == 0
    assert "empty_cache() in the loop" in f["message"] and "Remove `torch.cuda.empty_cache()`" in f["fix"]
    # 50 + 3 × 40 = 170 µs of calls in each of steps 2 and 3: (0 + 170 + 170) / 3
    assert abs(f["saving_us_per_step"] - 340 / 3) < 1e-3


def test_pd501_names_shape_changes_and_their_fix(tmp_path):
    f = run_tb(_cause_trace("shape_change"), tmp_path, ["PD501"]).findings["PD501"]
    assert f["evidence"]["cause"] == "shape_change" and "changing shapes" in f["message"]
    assert "bucket" in f["fix"]
    assert abs(f["saving_us_per_step"] - 320 / 3) < 1e-3  # 2 × 80 µs in steps 2 and 3


def test_pd501_silent_on_a_steady_trace_without_allocator_calls(tmp_path):
    r = run_tb(_cause_trace("none"), tmp_path, ["PD501"])
    assert "PD501" in r.passed and r.metrics("PD501")["allocator_calls_per_step"] == 0


def test_pd501_silent_when_only_first_step_allocates(tmp_path):
    r = run_tb(_alloc_trace("cudaMalloc", {0}), tmp_path, ["PD501"])
    assert "PD501" in r.passed and r.metrics("PD501")["allocator_calls_per_step"] == 0


def test_pd501_per_step_figures_share_the_analysed_steps_on_the_mi300x_trace():
    """MI300X ResNet18 (TraceLens): 4 steps from 5 Optimizer.step#SGD.step annotations (a step from one's end to
    the next's), the first left out. From the raw JSON: hipMalloc/hipFree calls and the union of their host time
    in steps 1-3, divided by those 3 steady-state steps (564 calls in each); the saving is per analysed step (÷ 4),
    so it cannot exceed the host time in the calls, and that cannot exceed the steady-state step."""
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
    report = pipeline.build([str(path)]).report
    f = next(f for f in report["findings"] if f["code"] == "PD501")
    ev = f["evidence"]
    # ROCm's words in every line that names the calls: the verdict, the headline, the fix
    assert ev["alloc_api"] == "hipMalloc/hipFree" and "cuda" not in report["verdict"].lower()
    assert "replaying the step with cached allocations" in report["verdict"]  # a replayed saving now
    assert "cuda" not in (report["verdict"] + f["headline"] + f["message"]).lower()
    # the cause here is the caching allocator switched off: its fix names the HIP switch
    assert (
        "PYTORCH_NO_HIP_MEMORY_CACHING" in f["fix"] and "PYTORCH_CUDA_ALLOC_CONF" not in f["fix"] + f["example_after"]
    )
    assert ev["allocator_calls_per_step"] == n_calls / 3 == 564.0
    assert abs(ev["allocator_host_ms"] - host_us / 3 / 1000) < 1e-6  # 1,045.6 ms
    assert ev["allocator_host_ms"] < sum(steps_us[1:]) / 3 / 1000  # the mean steady-state step
    assert "564.0 hipMalloc/hipFree calls per steady-state step" in f["headline"]
    assert ev["idle_ms"] <= ev["allocator_host_ms"]


def test_pd501_on_rocm_names_hip_calls_and_the_hip_variable(tmp_path):
    """On an MI300X trace (hipMalloc/hipFree) PD501 said "cudaMalloc/cudaFree" and advised
    PYTORCH_CUDA_ALLOC_CONF; ROCm's allocator reads PYTORCH_HIP_ALLOC_CONF."""
    f = run_tb(_cause_trace("retry", api="hip"), tmp_path, ["PD501"]).findings["PD501"]
    assert "hipMalloc/hipFree calls per steady-state step" in f["message"] and "cudaMalloc" not in f["message"]
    assert "PYTORCH_HIP_ALLOC_CONF=expandable_segments:True" in f["fix"] and "PYTORCH_CUDA" not in f["fix"]
    assert "PYTORCH_HIP_ALLOC_CONF" in f["example_after"]
    (tmp_path / "cuda").mkdir()
    g = run_tb(_cause_trace("retry"), tmp_path / "cuda", ["PD501"]).findings["PD501"]
    assert "cudaMalloc/cudaFree calls per steady-state step" in g["message"] and "PYTORCH_CUDA_ALLOC_CONF" in g["fix"]


def test_pd501_on_the_mi300x_trace_names_the_allocator_off_and_replays_the_fix():
    """MI300X ResNet18 (TraceLens): from the raw JSON, every step window (from one Optimizer.step#SGD.step's end to
    the next's, and the time before the first) holds the same 292 hipMalloc and 272 hipFree: a caching allocator
    serves a step after the first from its cache, so every tensor goes to the driver (caching off). Served from
    the cache, the steady steps are as long as the device's work: the replayed mean step lies within 1% above
    (step #0 recorded + the device-busy time of steps #1-#3, from the kernels, copies and memsets) / 4."""
    import gzip
    import json
    from collections import Counter

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
    calls = [e for e in events if e.get("name") in ("hipMalloc", "hipFree")]
    bounds = [float("-inf"), *opt]
    per_window = [Counter(e["name"] for e in calls if a <= e["ts"] < b) for a, b in zip(bounds, bounds[1:])]
    assert all(c == Counter(hipMalloc=292, hipFree=272) for c in per_window)

    busy_us = []
    acts = sorted(
        (e["ts"], e["ts"] + e["dur"]) for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
    )
    for a, b in zip(opt[1:-1], opt[2:]):
        total, end = 0.0, a
        for s, t in acts:
            s, t = max(s, end), min(t, b)
            if t > s:
                total, end = total + t - s, t
        busy_us.append(total)
    floor_ms = ((opt[1] - opt[0]) + sum(busy_us)) / 4 / 1000

    f = next(f for f in pipeline.build([str(path)]).report["findings"] if f["code"] == "PD501")
    assert f["evidence"]["cause"] == "no_caching" and "the caching allocator is off" in f["message"]
    assert "PYTORCH_NO_HIP_MEMORY_CACHING" in f["fix"]
    assert f["saving_method"].startswith("replay of the step's dependency graph") and "≤" not in f["message"]
    recorded_ms = sum(b - a for a, b in zip(opt, opt[1:])) / 4 / 1000  # 818.70 ms
    replayed_ms = recorded_ms - f["saving_us_per_step"] / 1000
    assert floor_ms <= replayed_ms <= floor_ms * 1.01  # 82.54 ≤ 82.67 ms
