"""PD901 trace-quality: a firing and a silent case (and skips), answers worked out by hand (µs).

Moved from tests/test_rules_synthetic.py (issue 9: one test file per rule).
"""

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
