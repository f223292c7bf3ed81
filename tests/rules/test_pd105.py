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


def _head_loop(heads: int) -> TraceBuilder:
    """One 2000 µs CPU step: an mm [0, 90), then ``heads`` per-head linears of one shape, 40 µs each with its
    addmm inside, every 60 µs from 100 (Python gaps of 20 µs), then a 4 µs view at 1900 (the shortest op)."""
    tb = TraceBuilder(device_name=None)
    tb.step(1, 0, 2000)
    tb.cpu_op("aten::mm", 0, 90)
    for i in range(heads):
        tb.cpu_op("aten::linear", 100 + 60 * i, 40, input_dims=[[8, 64], [16, 64], [16]])
        tb.cpu_op("aten::addmm", 105 + 60 * i, 30, input_dims=[[16], [8, 64], [64, 16]])
    tb.cpu_op("aten::view", 1900, 4)
    return tb


def test_pd105_batches_a_loop_of_same_shape_small_ops(tmp_path):
    f = run_tb(_head_loop(20), tmp_path, ["PD105"]).findings["PD105"]
    # gaps outside ops: [90, 100) 10, 19 × 20 in the loop, [1280, 1900) 620, [1904, 2000) 96: median of the 22 is 20.
    # The loop [100, 1280): 20 linears × 40 µs = 800 µs of ops, each dispatching 2 ops (linear, addmm) at the 4 µs
    # floor: 160 µs, of which 19/20 go: batched 800 − 152 = 648 µs, the span 1180 µs shrinks by 532 µs.
    # Outside it, the 620 and 96 µs gaps shrink to 20: 600 + 76 = 676 µs. Saving 532 + 676 = 1208 µs
    assert f["saving_us_per_step"] == 1208
    assert "1 loop(s) of same-shape small ops (20×1 ops)" in f["method"]
    # the message's loop clause: 1 loop per step, 20 iterations of 1 op, 20 × 2 ops dispatched at the 4 µs floor
    assert f["message"].endswith(
        "; 1 loop(s) per step of same-shape small ops (iterations × ops: 20×1) spend 0.16 ms dispatching them one "
        "by one"
    )
    assert "median gap (20 µs" in f["method"]


def test_pd105_keeps_a_short_loop_as_gaps(tmp_path):
    f = run_tb(_head_loop(10), tmp_path, ["PD105"]).findings["PD105"]
    # 10 repeats, under min_loop_iterations (16): no batching. Gaps: 10, 9 × 20, [680, 1900) 1220, 96: median 20;
    # only the long gaps shrink: (1220 − 20) + (96 − 20) = 1276 µs alone (PD201 ranks above it in this trace)
    assert f["saving_alone_us_per_step"] == 1276
    assert "loop" not in f["method"]


def test_pd105_batched_loop_does_its_work_at_the_traces_best_rate(tmp_path):
    tb = _head_loop(20)
    # the first op now has shapes: a 256 x 256 x 256 mm, 2 x 256^3 = 33,554,432 FLOP in 90 µs: 372,827 FLOP/µs,
    # the trace's best matmul rate (the per-head addmms do 2 x 8 x 64 x 16 = 16,384 FLOP each, under 1 MFLOP)
    tb.events[-2 * 20 - 2]["args"]["Input Dims"] = [[256, 256], [256, 256]]
    tb.events[-2 * 20 - 2]["args"]["Input type"] = ["float", "float"]
    f = run_tb(tb, tmp_path, ["PD105"]).findings["PD105"]
    # the loop's work: 20 linears (counted once each, not their addmm) x 16,384 FLOP = 327,680 FLOP: 0.8789 µs at
    # that rate. Batched: one iteration's 40 µs + 19/20 of 0.8789 = 40.835 µs (under 648, the dispatch-only
    # bound): the 1180 µs span shrinks by 1139.165 µs; with the 676 µs of long gaps: 1815.165 µs
    assert abs(f["saving_us_per_step"] - 1815.165) < 0.01
    assert "372.8 GFLOP/s for matmuls" in f["method"]


def _optimizer_loop(annotated: bool) -> TraceBuilder:
    """One 2000 µs CPU step: an mm [0, 90), then 16 parameters' updates, each 3 ops on a weight (8 x 8) then 3 on
    its bias (8): 6-op bodies, every op 10 µs with 5 µs gaps, [100, 1540); inside ``Optimizer.step#SGD.step`` when
    ``annotated``; a 4 µs view at 1900."""
    tb = TraceBuilder(device_name=None)
    tb.step(1, 0, 2000)
    if annotated:
        tb.annotation("Optimizer.step#SGD.step", 95, 1450)
    tb.cpu_op("aten::mm", 0, 90)
    t = 100.0
    for _ in range(16):
        for shape in ([8, 8], [8]):
            for name in ("aten::mul_", "aten::add_", "aten::addcmul_"):
                tb.cpu_op(name, t, 10, input_dims=[shape, shape])
                t += 15
    tb.cpu_op("aten::view", 1900, 4)
    return tb


def test_pd105_batches_the_optimizers_per_parameter_loop_only_inside_optimizer_step(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    f = run_tb(_optimizer_loop(True), tmp_path / "a", ["PD105"]).findings["PD105"]
    # a 6-op body repeated 16 times, inside Optimizer.step: a loop (longer bodies than 4 ops are looked for there)
    assert "1 loop(s) of same-shape small ops (16×6 ops)" in f["method"]
    f = run_tb(_optimizer_loop(False), tmp_path / "b", ["PD105"]).findings.get("PD105")
    # the same ops outside any optimizer step: no loop (a long body elsewhere may be layers feeding each other)
    assert f is None or "loop" not in f["method"]


def test_pd105_names_the_line_holding_the_python_time(tmp_path):
    tb = _cpu_step(100, 300)  # outside ops: [0, 100) and [400, 1000)
    mod = tb.python_function("train.py(1): <module>", 0, 1000)
    tb.python_function("train.py(20): log_metrics", 420, 560, mod, "train.py(9): <module>")
    f = run_tb(tb, tmp_path, ["PD105"]).findings["PD105"]
    # the stretch [400, 1000) (600 µs, middle 700) is inside log_metrics (its own time: named by its first line,
    # not an exact call line), called from train.py:9; [0, 100) (middle 50) only in <module>: log_metrics holds
    # 600 of the 700 µs, 85.7%
    src = f["source"]
    assert src["location"] == "train.py:20" and src["function"] == "log_metrics" and not src["exact"]
    assert src["frames"] == ["train.py:20 in log_metrics", "train.py:9 in <module>"]
    assert abs(src["share_pct"] - 600 / 7) < 0.01


def test_pd105_without_stacks_says_how_to_name_the_line(tmp_path):
    f = run_tb(_cpu_step(100, 300), tmp_path, ["PD105"]).findings["PD105"]
    assert f["source"] is None and "--with-stack" in f["source_hint"]
