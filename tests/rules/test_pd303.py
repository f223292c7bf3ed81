"""PD303 straggler-rank: a firing and a silent case (and skips), answers worked out by hand (µs).

Moved from tests/test_rules_synthetic.py (issue 9: one test file per rule).
"""

from rules_helpers import NCCL, SGEMM, run_rules
from tracebuilder import TraceBuilder


def _rank_trace(tmp_path, rank, compute_us, comm_us):
    tb = TraceBuilder(rank=rank, world_size=2)
    tb.step(1, 0, 1000)
    tb.launch(SGEMM, launch_ts=1, start=10, dur=compute_us)
    tb.launch(NCCL, launch_ts=2, start=900 - comm_us, dur=comm_us, stream=20)
    return tb.write(tmp_path / f"rank{rank}.json")


def test_pd303_fires_on_straggler(tmp_path):
    paths = [_rank_trace(tmp_path, 0, 190, 700), _rank_trace(tmp_path, 1, 790, 100)]
    f = run_rules(paths, ["PD303"]).findings["PD303"]
    # own work: rank 0 1000-700 = 300, rank 1 1000-100 = 900
    assert f["evidence"]["straggler"] == 1 and f["evidence"]["ranks"] == [1]
    assert f["saving_us_per_step"] == 600 and f["saving_pct_of_step"] == 60


def test_pd303_silent_when_balanced(tmp_path):
    paths = [_rank_trace(tmp_path, 0, 190, 700), _rank_trace(tmp_path, 1, 190, 700)]
    r = run_rules(paths, ["PD303"])
    assert "PD303" in r.passed


def test_pd303_skipped_on_single_rank(tmp_path):
    r = run_rules([_rank_trace(tmp_path, 0, 190, 700)], ["PD303"])
    assert "single rank" in r.skipped["PD303"]


def _stalled_rank(tmp_path, rank):
    """One step, host 0-300. Both ranks: a GEMM launched at 1 runs 10-200 on stream 7 and three small kernels
    (launched at 30, 40, 50) start 9 µs after their launch on stream 9: the device's typical launch latency, 9 µs.

    rank 0: its send/recv, launched at 260, starts at 269 and waits for rank 1 until 900 (631 µs).
    rank 1: a kernel K launched at 250 on stream 8, with every stream free and nothing else running, starts only at
    850 (a device stall: 591 µs beyond 250 + 9); its send/recv, launched at 260, follows it: 851-900 (the transfer).
    """
    tb = TraceBuilder(rank=rank, world_size=2)
    tb.step(1, 0, 300)
    tb.launch(SGEMM, launch_ts=1, start=10, dur=190)
    for t in (30, 40, 50):
        tb.launch("void at::native::vectorized_elementwise_kernel<4>", launch_ts=t, start=t + 9, dur=1, stream=9)
    if rank == 0:
        tb.launch(NCCL, launch_ts=260, start=269, dur=631, stream=20)
    else:
        tb.launch("void at::native::vectorized_elementwise_kernel<4>", launch_ts=250, start=850, dur=1, stream=8)
        tb.launch(NCCL, launch_ts=260, start=851, dur=49, stream=20)
    return tb.write(tmp_path / f"rank{rank}.json")


def test_pd303_silent_when_the_extra_time_is_a_device_stall(tmp_path):
    paths = [_stalled_rank(tmp_path, r) for r in (0, 1)]
    r = run_rules(paths, ["PD303"])
    # own work: rank 0 900 - 631 = 269; rank 1 900 - 49 - 591 (its stall: idle of no known cause, K's work queued
    # since 250) = 260; counted as work, rank 1 "worked" 851 µs and was a 582 µs straggler
    assert "PD303" in r.passed
    m = r.metrics("PD303", "None")
    assert m["max_own_us"] == 269.0 and m["median_own_us"] == 260.0
