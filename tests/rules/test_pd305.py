"""PD305 host-collective-time: gloo collectives the host runs itself, exposed or overlapped, by hand (µs).

Moved from tests/test_coverage_rules.py (issue 9: one test file per rule).
"""

from rules_helpers import gloo_trace, run_tb


def test_pd305_fires_on_exposed_host_collectives(tmp_path):
    r = run_tb(gloo_trace(overlap=False), tmp_path, ["PD305"])
    f = r.findings["PD305"]
    assert f["saving_us_per_step"] == 600 and f["saving_pct_of_step"] == 60
    ev = f["evidence"]
    assert ev["collectives"] == [
        {"collective": "all_reduce", "bytes": 1e6, "count": 2.0, "mean_us": 600.0, "algbw_bytes_per_s": 1e6 / 600e-6}
    ]
    # 2 calls over 2 steps: 1 per step; 1 MB ÷ 600 µs = 1.667 GB/s
    assert (
        "all_reduce of 1.00 MB ×1 per step (0.6 ms each, 1.667 GB/s) (a duration includes any wait for other ranks)"
        in (f["message"])
    )
    # one call per step: nothing to coalesce, so no "fewer, larger collectives"
    assert "messages are small" not in ev["advice"] and "overlap them with the backward" in ev["advice"]
    assert "below 1 GB/s" not in ev["advice"]


def test_pd305_small_collectives_several_per_step_are_told_to_coalesce(tmp_path):
    """3 all_reduces of 40,000 floats (0.16 MB) per step, 200 µs each (latency-sized, under 1 ms): coalescing
    applies. The same 3 calls at 1,500 µs each are waiting for peers, not paying gloo's latency: no coalescing."""
    from tracebuilder import TraceBuilder

    def trace(dur):
        tb = TraceBuilder(device_name=None)
        span = 1000 if dur < 1000 else 6000
        for n in range(2):
            s = span * n
            tb.step(n + 1, s, span)
            for k in range(3):
                tb.annotation("gloo:all_reduce", s + k * (dur + 10), dur)
                tb.events[-1]["args"] = {
                    "External id": 900 + 3 * n + k,
                    "Input Dims": [[40000]],
                    "Input type": ["float"],
                }
        return tb

    ev = run_tb(trace(200), tmp_path, ["PD305"]).findings["PD305"]["evidence"]
    assert [(r["count"], r["mean_us"]) for r in ev["collectives"]] == [(6.0, 200.0)]  # 3 per step
    assert "fewer, larger collectives" in ev["advice"]
    (tmp_path / "slow").mkdir()
    slow = run_tb(trace(1500), tmp_path / "slow", ["PD305"]).findings["PD305"]["evidence"]
    assert "fewer, larger collectives" not in slow["advice"]


def test_pd305_silent_when_collectives_overlap_compute(tmp_path):
    r = run_tb(gloo_trace(overlap=True), tmp_path, ["PD305"])
    assert "PD305" in r.passed and r.res.metrics["PD305"]["0"]["exposed_us"] == 0
    assert r.res.metrics["PD305"]["0"]["collective_us"] == 600


def _slow(tb, floats):
    for e in tb.events:
        if e["name"] == "gloo:all_reduce":
            e["args"]["Input Dims"] = [[floats]]
    return tb


def test_pd305_slow_collective_does_not_blame_the_transport_on_one_ranks_trace(tmp_path):
    """100,000 floats (0.4 MB) in 600 µs: 0.667 GB/s, below 1 GB/s. One rank's duration includes any wait for its
    peers, so the message says so and does not conclude the transport is the limit."""
    f = run_tb(_slow(gloo_trace(overlap=False), 100_000), tmp_path, ["PD305"]).findings["PD305"]
    assert (
        "all_reduce of 0.40 MB ×1 per step (0.6 ms each, 0.667 GB/s) (a duration includes any wait for other ranks)"
        in (f["message"])
    )
    assert "the transport is the limit" not in f["message"]
    assert "one rank's trace cannot separate the wait for other ranks from the transfer" in f["message"]


def test_pd305_advice_on_a_sharded_run_speaks_fsdp(tmp_path):
    """The FullyShardedDataParallel CPU (gloo) trace of test_pd306: the all-gather calls [10, 100) and [420, 600)
    run with no other op: 90 + 180 = 270 µs of the 1000 µs step exposed (27%). The fix is FSDP's (prefetch,
    MixedPrecision), not DDP's buckets; the evidence's tips name FSDP's knobs."""
    from test_pd306 import _cpu_fsdp1

    f = run_tb(_cpu_fsdp1(prefetch=False), tmp_path, ["PD305"]).findings["PD305"]
    assert f["saving_us_per_step"] == 270 and f["saving_pct_of_step"] == 27
    assert "backward_prefetch=BackwardPrefetch.BACKWARD_PRE" in f["fix"] and "bucket_cap_mb" not in f["fix"]
    assert "forward_prefetch=True" in f["evidence"]["advice"] and "DDP" not in f["evidence"]["advice"]


def test_pd305_advice_on_a_ddp_run_keeps_ddp_knobs(tmp_path):
    f = run_tb(gloo_trace(overlap=False), tmp_path, ["PD305"]).findings["PD305"]
    assert "bucket_cap_mb" in f["fix"] and "DDP launches each bucket" in f["evidence"]["advice"]


def test_pd305_ops_inside_the_collective_call_are_not_compute(tmp_path):
    """A ``c10d::allreduce_`` call [300, 900) on the training thread holding its own ops (``record_param_comms``
    [310, 880), ``aten::empty`` [320, 330)) is exposed whole: 600 µs of the 1000 µs step. An ``aten::mm`` on another
    thread [500, 700) does overlap it: 200 µs hidden, 400 µs exposed."""
    from tracebuilder import TraceBuilder

    def trace(other_thread: bool) -> TraceBuilder:
        tb = TraceBuilder(device_name=None)
        tb.step(1, 0, 1000)
        tb.cpu_op("aten::mm", 0, 300)
        tb.cpu_op("c10d::allreduce_", 300, 600, input_dims=[[250000]])
        tb.cpu_op("record_param_comms", 310, 570)
        tb.cpu_op("aten::empty", 320, 10)
        if other_thread:
            tb.cpu_op("aten::mm", 500, 200, tid=77)
        return tb

    m = run_tb(trace(False), tmp_path, ["PD305"]).res.metrics["PD305"]["0"]
    assert (m["collective_us"], m["exposed_us"]) == (600, 600)
    (tmp_path / "b").mkdir()
    m = run_tb(trace(True), tmp_path / "b", ["PD305"]).res.metrics["PD305"]["0"]
    assert (m["collective_us"], m["exposed_us"]) == (600, 400)
