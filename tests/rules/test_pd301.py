"""PD301 exposed-communication: a firing and a silent case (and skips), answers worked out by hand (µs).

Moved from tests/test_rules_synthetic.py (issue 9: one test file per rule).
"""

from rules_helpers import NCCL, SGEMM, run_tb
from tracebuilder import TraceBuilder


def _comm_trace(overlap):
    tb = TraceBuilder()
    tb.step(1, 0, 1000)
    tb.launch(NCCL, launch_ts=5, start=100, dur=400, stream=20)  # [100, 500)
    tb.launch(SGEMM, launch_ts=6, start=100 if overlap else 500, dur=400 if overlap else 300, stream=7)
    return tb


def test_pd301_fires_on_exposed_all_reduce(tmp_path):
    tb = TraceBuilder()
    tb.step(1, 0, 50)  # the host is done at 50: the device work decides the step, [0, 800)
    tb.launch(NCCL, launch_ts=5, start=100, dur=400, stream=20)  # [100, 500)
    tb.launch(SGEMM, launch_ts=6, start=500, dur=300, stream=7)  # [500, 800): waits for the all-reduce
    f = run_tb(tb, tmp_path, ["PD301"]).findings["PD301"]
    # replayed with the GEMM no longer waiting: it starts 95 µs after its launch (the device's launch latency,
    # from the all-reduce's), [101, 401); the all-reduce still ends at 500: 800 -> 500
    assert f["saving_us_per_step"] == 300 and f["evidence"]["overlap_pct"] == 0
    assert f["evidence"]["exposed_ms"] == 0.4 and f["evidence"]["by_collective_ms"] == {"all_reduce": 0.4}


def test_pd301_silent_when_the_host_decides_the_step(tmp_path):
    # 400 µs of exposed all-reduce, but the host annotation runs to 1000: overlapping it saves nothing
    r = run_tb(_comm_trace(False), tmp_path, ["PD301"])
    assert "PD301" in r.passed and r.metrics("PD301")["exposed_us"] == 400 and r.metrics("PD301")["saving_us"] == 0


def test_pd301_silent_when_overlapped(tmp_path):
    r = run_tb(_comm_trace(True), tmp_path, ["PD301"])
    assert "PD301" in r.passed and r.metrics("PD301")["overlap_pct"] == 100


def test_pd301_skipped_without_collectives(tmp_path):
    tb = TraceBuilder()
    tb.step(1, 0, 1000)
    tb.launch(SGEMM, launch_ts=6, start=100, dur=400)
    assert "collective" in run_tb(tb, tmp_path, ["PD301"]).skipped["PD301"]
