"""PD304 collective-wait: a firing and a silent case (and skips), answers worked out by hand (µs).

Moved from tests/test_rules_synthetic.py (issue 9: one test file per rule).
"""

import pytest
from rules_helpers import NCCL, SGEMM, run_rules
from tracebuilder import TraceBuilder


def _two_ranks(tmp_path):
    """Two ranks, one 2000 µs step each, compute then one all-reduce. Rank 1 computes 800 µs longer, so
    rank 0's all-reduce (launched at 500) runs until rank 1 arrives: 1200 µs on rank 0, 400 µs on rank 1."""
    paths = []
    for rank, (compute, coll_start, coll_dur) in enumerate([(400, 500, 1200), (1200, 1300, 400)]):
        tb = TraceBuilder(rank=rank, world_size=2)
        tb.step(1, 0, 2000)
        tb.cpu_op("aten::mm", 10, 20)
        tb.launch(SGEMM, launch_ts=20, start=50, dur=compute)
        tb.launch(NCCL, launch_ts=30, start=coll_start, dur=coll_dur)
        paths.append(tb.write(tmp_path / f"rank{rank}.json"))
    return paths


def test_pd304_fires_naming_the_waiting_rank_and_pd301_keeps_only_the_transfer(tmp_path):
    r = run_rules(_two_ranks(tmp_path), ["PD301", "PD304"])
    f = r.findings["PD304"]
    v = f["evidence"]
    # rank 0 waits 1200 − 400 = 800 µs, none of it overlapped by compute; rank 1 (the shortest copy) arrives last
    assert v["rank"] == 0 and v["wait_ms"] == pytest.approx(0.8) and v["last_rank"] == 1
    assert v["transfer_ms"] == pytest.approx(0.4) and f["saving_us_per_step"] == pytest.approx(800)
    # PD301 on rank 0: 1200 µs exposed, 800 of it waiting:
    # 400 µs of transfer (20% of the step) is what overlap could hide
    m = r.metrics("PD301", "0")
    assert m["wait_us"] == pytest.approx(800) and m["exposed_us"] == pytest.approx(400)


def test_pd304_skipped_when_the_ranks_collectives_do_not_match(tmp_path):
    paths = _two_ranks(tmp_path)
    tb = TraceBuilder(rank=1, world_size=2)
    tb.step(1, 0, 2000)
    tb.launch(NCCL, launch_ts=30, start=1300, dur=200)
    tb.launch(NCCL, launch_ts=40, start=1600, dur=200)  # two collectives on rank 1, one on rank 0
    tb.write(paths[1])
    r = run_rules(paths, ["PD304"])
    assert "different numbers of collective kernels" in r.skipped["PD304"]


def test_pd304_refuses_pairs_that_do_not_end_together_or_a_partial_job(tmp_path):
    paths = _two_ranks(tmp_path)
    # two collectives each; rank 1's first ends at 1400, rank 0's at 1700, the second ones both at 1850: no one
    # clock offset lines both pairs up, so the first pair is two different collectives
    for rank, first in ((0, (500, 1200)), (1, (1300, 100))):
        tb = TraceBuilder(rank=rank, world_size=2)
        tb.step(1, 0, 2000)
        tb.launch(NCCL, launch_ts=30, start=first[0], dur=first[1])
        tb.launch(NCCL, launch_ts=40, start=1750, dur=100)
        tb.write(paths[rank])
    assert "do not end together" in run_rules(paths, ["PD304"]).skipped["PD304"]
    for rank in (0, 1):  # the same two ranks, from a 128-rank job
        tb = TraceBuilder(rank=rank, world_size=128)
        tb.step(1, 0, 2000)
        tb.launch(NCCL, launch_ts=30, start=500 + 800 * rank, dur=1200 - 800 * rank)
        tb.write(paths[rank])
    assert "the job has 128 ranks but 2 traces were given" in run_rules(paths, ["PD304"]).skipped["PD304"]


def test_pd304_silent_when_the_ranks_arrive_together(tmp_path):
    # both ranks compute 800 µs and start the all-reduce at 900: nobody waits, the 400 µs are all transfer
    paths = []
    for rank in (0, 1):
        tb = TraceBuilder(rank=rank, world_size=2)
        tb.step(1, 0, 2000)
        tb.cpu_op("aten::mm", 10, 20)
        tb.launch(SGEMM, launch_ts=20, start=50, dur=800)
        tb.launch(NCCL, launch_ts=30, start=900, dur=400)
        paths.append(tb.write(tmp_path / f"rank{rank}.json"))
    r = run_rules(paths, ["PD304"])
    assert "PD304" in r.passed
