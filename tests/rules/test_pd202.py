"""PD202 unfused-elementwise: a firing and a silent case (and skips), answers worked out by hand (µs).

Moved from tests/test_rules_synthetic.py (issue 9: one test file per rule).
"""

from rules_helpers import ADD, run_tb
from tracebuilder import TraceBuilder


def _elementwise_trace(extra=None, ops=False):
    tb = TraceBuilder()
    tb.step(1, 0, 1000)
    for i in range(40):
        if ops:  # the aten op that launches each kernel: [24 i, 24 i + 22)
            tb.cpu_op("aten::add", 24 * i, 22, external_id=1000 + i)
        tb.launch(ADD, launch_ts=1 + 24 * i, start=10 + 24 * i, dur=20, launch_dur=1)
        if ops:
            tb.events[-4]["args"]["External id"] = 1000 + i  # the launch call carries its op's external id
    if extra:
        tb.launch(extra, launch_ts=970, start=975, dur=5, launch_dur=1)
    return tb


def test_pd202_fires_on_many_short_elementwise_kernels(tmp_path):
    r = run_tb(_elementwise_trace(ops=True), tmp_path, ["PD202"])
    f = r.findings["PD202"]
    assert f["evidence"]["elementwise_pct"] == 80.0
    # replayed fused: the 40 back-to-back kernels are one chain, one 20 µs kernel [10, 30); the host time of the
    # other 39 aten::add ops (22 µs each, 858 µs) goes, so the annotation ends at 142: 1000 -> 142
    assert f["saving_us_per_step"] == 858
    assert f["evidence"]["elementwise_per_step"] == 40


def test_pd202_saves_only_launch_calls_without_ops(tmp_path):
    # no CPU ops in the trace: fusion removes the 39 other 1 µs launch calls only; the host-bound step 1000 -> 961
    f = run_tb(_elementwise_trace(), tmp_path, ["PD202"]).findings["PD202"]
    assert f["saving_us_per_step"] == 39 and f["evidence"]["elementwise_ms"] == 0.8


def test_pd202_silent_when_compiled(tmp_path):
    r = run_tb(_elementwise_trace(extra="triton_poi_fused_add_mul_0"), tmp_path, ["PD202"])
    assert "PD202" in r.passed and r.metrics("PD202")["compiled"] == 1.0
