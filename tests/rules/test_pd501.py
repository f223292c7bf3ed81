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
    # 300 µs of idle in each of steps 2 and 3, none in step 1: (0 + 300 + 300) / 3 per analysed step
    assert f["saving_us_per_step"] == 200
    assert f["evidence"]["allocator_calls_per_step"] == 1 and f["steps"] == [2, 3]


def test_pd501_silent_when_only_first_step_allocates(tmp_path):
    r = run_tb(_alloc_trace("cudaMalloc", {0}), tmp_path, ["PD501"])
    assert "PD501" in r.passed and r.metrics("PD501")["allocator_calls_per_step"] == 0
