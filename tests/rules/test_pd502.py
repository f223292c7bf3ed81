"""PD502 memory-near-capacity: a firing and a silent case (and skips), answers worked out by hand (µs).

Moved from tests/test_rules_synthetic.py (issue 9: one test file per rule).
"""

import pytest
from rules_helpers import SGEMM, run_tb
from tracebuilder import TraceBuilder


def _mem_trace(frac):
    tb = TraceBuilder(total_memory=80 * 2**30)
    tb.step(1, 0, 1000)
    tb.launch(SGEMM, launch_ts=5, start=10, dur=400)
    if frac is not None:
        tb.memory(100, 1 << 20, int(0.8 * frac * 80 * 2**30), int(frac * 80 * 2**30))
    return tb


def test_pd502_fires_near_capacity(tmp_path):
    f = run_tb(_mem_trace(0.95), tmp_path, ["PD502"]).findings["PD502"]
    assert f["evidence"]["peak_reserved_pct"] == pytest.approx(95.0)
    assert f["severity"] == "medium" and f["position"] is None and f["saving_method"] == ""


def test_pd502_silent_with_headroom(tmp_path):
    r = run_tb(_mem_trace(0.5), tmp_path, ["PD502"])
    assert "PD502" in r.passed and r.metrics("PD502")["peak_reserved_pct"] == pytest.approx(50.0)


def test_pd502_skipped_without_memory_events(tmp_path):
    assert "profile_memory" in run_tb(_mem_trace(None), tmp_path, ["PD502"]).skipped["PD502"]
