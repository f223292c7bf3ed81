"""PD202 unfused-elementwise: a firing and a silent case (and skips), answers worked out by hand (µs).

Moved from tests/test_rules_synthetic.py (issue 9: one test file per rule).
"""

import pytest
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


# -- CPU-only traces: the fused chain costs its bytes at the memory bandwidth, plus one dispatch ------------------

MIB = [1024, 256]  # 1024 × 256 fp32 = 1 MiB = 1 048 576 B


def _cpu_chain(shapes: bool = True) -> TraceBuilder:
    """One 1000 µs CPU step: a linear [0, 200), then a chain mul [210, 310), add [320, 420), gelu [430, 530) on a
    1 MiB fp32 tensor (Python gaps of 10 µs between), then a 5 µs view at 800 (the shortest op: one dispatch)."""
    tb = TraceBuilder(device_name=None)
    tb.step(1, 0, 1000)
    tb.cpu_op("aten::linear", 0, 200)
    dims = (lambda *d: list(d)) if shapes else (lambda *d: None)
    tb.cpu_op("aten::mul", 210, 100, input_dims=dims(MIB, []), input_type=["float", "Scalar"])
    tb.cpu_op("aten::add", 320, 100, input_dims=dims(MIB, []), input_type=["float", "Scalar"])
    tb.cpu_op("aten::gelu", 430, 100, input_dims=dims(MIB, []), input_type=["float", "String"])
    tb.cpu_op("aten::view", 800, 5)
    return tb


def test_pd202_fires_on_cpu_with_the_fused_chain_replayed(tmp_path):
    f = run_tb(_cpu_chain(), tmp_path, ["PD202"]).findings["PD202"]
    # elementwise ops: 300 of 1000 µs, 30% (limit 20%). Fused chain: reads the mul's 1 MiB input once and writes the
    # gelu's 1 MiB output once, 2 097 152 B at the assumed 10 GB/s = 209.7152 µs, + one 5 µs dispatch = 214.7152 µs;
    # the chain's span [210, 530) = 320 µs shrinks to it: 320 − 214.7152 = 105.2848 µs saved
    assert f["evidence"]["elementwise_pct"] == 30.0
    assert f["saving_us_per_step"] == pytest.approx(105.2848, abs=0.01)
    assert "10.0 GB/s (assumed, not measured" in f["method"] and "perfdoctor calibrate" in f["method"]


def test_pd202_on_cpu_without_shapes_states_the_bound(tmp_path):
    f = run_tb(_cpu_chain(shapes=False), tmp_path, ["PD202"]).findings["PD202"]
    # no shapes, no replay: 300 µs × max_fused_fraction 0.5 = 150 µs, named an upper bound
    assert f["saving_us_per_step"] == 150
    assert "record_shapes=True" in f["method"]


def test_pd202_silent_on_cpu_when_elementwise_is_a_small_share(tmp_path):
    tb = TraceBuilder(device_name=None)
    tb.step(1, 0, 1000)
    tb.cpu_op("aten::linear", 0, 850)
    tb.cpu_op("aten::mul", 860, 50, input_dims=[MIB, []], input_type=["float", "Scalar"])
    tb.cpu_op("aten::add", 920, 50, input_dims=[MIB, []], input_type=["float", "Scalar"])
    r = run_tb(tb, tmp_path, ["PD202"])
    # elementwise 100 of 1000 µs = 10%, under the 20% limit
    assert "PD202" in r.passed and r.metrics("PD202")["elementwise_pct"] == 10.0
