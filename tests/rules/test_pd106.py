"""PD106 device-idle-host-outside-ops: the device idles while the host is outside any op, by hand (µs).

Moved from tests/test_coverage_rules.py (issue 9: one test file per rule).
"""

from rules_helpers import ADD, run_tb
from tracebuilder import TraceBuilder


def _python_gap_trace(op_in_gap: bool) -> TraceBuilder:
    """2 steps of 1000 µs: a kernel [60, 100), [100, 700) with no op open on the host (Python preprocessing) or,
    with ``op_in_gap``, an aten::nonzero over it, then a kernel [960, 1000)."""
    tb = TraceBuilder()
    for n in range(2):
        s = 1000 * n
        tb.step(n + 1, s, 1000)
        tb.cpu_op("aten::mm", s, 100)
        tb.launch(ADD, launch_ts=s + 50, start=s + 60, dur=40)  # [60, 100)
        if op_in_gap:
            tb.cpu_op("aten::nonzero", s + 100, 600)
        # [100, 700): no op open on the host (Python preprocessing), nothing queued
        tb.cpu_op("aten::add", s + 700, 300)
        tb.launch(ADD, launch_ts=s + 950, start=s + 960, dur=40)  # [960, 1000)
    return tb


def test_pd106_fires_when_the_device_idles_while_host_is_outside_ops(tmp_path):
    r = run_tb(_python_gap_trace(False), tmp_path, ["PD106"])
    f = r.findings["PD106"]
    assert f["saving_us_per_step"] == 600 and f["saving_pct_of_step"] == 60


def test_pd106_silent_when_the_host_is_inside_an_op_meanwhile(tmp_path):
    # the same 600 µs of device idle, but the host runs aten::nonzero through it: host work in an op (PD103's
    # 'host busy, nothing queued'), no time outside any op: 0 µs of Python
    r = run_tb(_python_gap_trace(True), tmp_path, ["PD106"])
    assert "PD106" in r.passed and r.metrics("PD106")["idle_us"] == 0
