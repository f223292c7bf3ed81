"""PD105 python-outside-ops: a firing and a silent case on CPU-only traces, answers worked out by hand (µs).

The real-script case (Python bookkeeping between ops) stays in tests/test_rules_examples.py.
"""

from rules_helpers import run_tb
from tracebuilder import TraceBuilder


def _cpu_step(op_start: float, op_dur: float) -> TraceBuilder:
    """One 1000 µs step of a CPU-only run (no GPU listed) with one op; the rest of the step is outside any op."""
    tb = TraceBuilder(device_name=None)
    tb.step(1, 0, 1000)
    tb.cpu_op("aten::mm", op_start, op_dur)
    return tb


def test_pd105_fires_when_most_of_the_step_is_outside_ops(tmp_path):
    r = run_tb(_cpu_step(100, 300), tmp_path, ["PD105"])
    f = r.findings["PD105"]
    # the op covers [100, 400): 1000 − 300 = 700 µs of the step are outside any op, 70% (limit 15%): it fires.
    # Saving (trim-python-outside-ops): the gaps are [0, 100) and [400, 1000), median (100 + 600) / 2 = 350 µs;
    # the 600 µs gap shrinks to 350 µs, the 100 µs one stays: 250 µs, 25% of the step
    assert r.metrics("PD105")["outside_us"] == 700
    assert f["saving_us_per_step"] == 250
    assert f["saving_pct_of_step"] == 25.0
    assert f["message"].startswith("70% of the step (0.70 ms) runs outside any PyTorch op")
    assert "the ops fill 30%" in f["message"]


def test_pd105_silent_when_ops_fill_the_step(tmp_path):
    r = run_tb(_cpu_step(5, 990), tmp_path, ["PD105"])
    # the op covers [5, 995): 10 µs outside, 1% of the step, under the 15% threshold
    assert "PD105" in r.passed
    assert r.metrics("PD105")["outside_us"] == 10
    assert r.metrics("PD105")["outside_pct"] == 1.0
