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
