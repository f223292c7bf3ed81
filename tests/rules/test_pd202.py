"""PD202 unfused-elementwise: a firing and a silent case (and skips), answers worked out by hand (µs).

Moved from tests/test_rules_synthetic.py (issue 9: one test file per rule).
"""

from rules_helpers import ADD, run_tb
from tracebuilder import TraceBuilder


def _elementwise_trace(extra=None):
    tb = TraceBuilder()
    tb.step(1, 0, 1000)
    for i in range(40):
        tb.launch(ADD, launch_ts=1 + 24 * i, start=10 + 24 * i, dur=20, launch_dur=1)
    if extra:
        tb.launch(extra, launch_ts=970, start=975, dur=5, launch_dur=1)
    return tb


def test_pd202_fires_on_many_short_elementwise_kernels(tmp_path):
    r = run_tb(_elementwise_trace(), tmp_path, ["PD202"])
    f = r.findings["PD202"]
    assert f["evidence"]["elementwise_pct"] == 80.0
    assert f["saving_us_per_step"] == 400  # 800 µs × max_fused_fraction 0.5
    assert f["evidence"]["elementwise_per_step"] == 40


def test_pd202_silent_when_compiled(tmp_path):
    r = run_tb(_elementwise_trace(extra="triton_poi_fused_add_mul_0"), tmp_path, ["PD202"])
    assert "PD202" in r.passed and r.metrics("PD202")["compiled"] == 1.0
