"""PD201 small-batch: a firing and a silent case on real CPU training runs of examples/mlp.py (`perfdoctor profile`).

Moved from tests/test_rules_examples.py (issue 9: one test file per rule); the runs are shared through
tests/examples_runs.py.
"""

from examples_runs import BIG, example, faster, profile, quiet_machine  # noqa: F401 (a fixture)


@example
def test_pd201_fires_on_a_batch_of_one():
    slow = profile("bs1", [*BIG, "--batch-size", "1", "--num-workers", "0"])
    fixed = profile("healthy", [*BIG, "--num-workers", "0"])
    assert slow[0]["PD201"]["evidence"]["gemm_m_median"] == 1
    faster(slow, fixed, "PD201 batch 1 vs 64", per_sample=True)


@example
def test_pd201_silent_at_batch_64():
    fixed = profile("healthy", [*BIG, "--num-workers", "0"])
    assert "PD201" not in fixed[0]


def test_pd201_fixed_cost_leaves_the_dataloader_out(tmp_path):
    # CPU step [0, 10000): DataLoader fetch [0, 8000) (per sample: a larger batch fetches more), aten::linear with
    # M = 8 rows [8100, 8500), Python around it. Growth = target_m 64 / 8 = 8. On a CPU trace the op runs on the
    # host and its compute follows the batch (per sample, kept); the fixed cost the larger batch spreads is the
    # host time outside the fetch and outside ops: 10000 - 8000 - 400 = 1600 µs (no optimizer here); the replay
    # keeps 1/8 of it: saving 1600 × 7/8 = 1400 µs. (The message used to quote step - GEMM = 9600 µs, the
    # DataLoader included; nor 2000 µs, the linear's own 400 µs counted as fixed.)
    from rules_helpers import run_tb
    from tracebuilder import TraceBuilder

    tb = TraceBuilder(device_name=None)
    tb.step(1, 0, 10_000)
    tb.annotation("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 0, 8_000)
    tb.cpu_op("aten::linear", 8_100, 400, input_dims=[[8, 64], [256, 64], [256]], input_type=["float"] * 3)
    f = run_tb(tb, tmp_path, ["PD201"]).findings["PD201"]
    assert f["evidence"]["growth"] == 8.0
    assert f["evidence"]["fixed_ms"] == 1.6
    assert f["saving_us_per_step"] == 1400.0
    assert "1.60 ms per step of fixed cost (host time outside ops and DataLoader fetches" in f["message"]
    assert "the other ops' time (their compute follows the batch on a CPU)" in f["saving_method"]
    # the upper bound, every op's time fixed (the old model): (10000 - 8000) × 7/8 = 1750 µs
    upper = "if no op's time grew with the batch, the saving would be 1.75 ms (the upper bound)"
    assert f["saving_method"].endswith(upper)


def test_pd201_cpu_ops_scale_with_the_batch_the_optimizers_do_not(tmp_path):
    # CPU step [0, 10000): fetch [0, 4000), aten::linear M = 8 [4100, 4500) and aten::relu [4600, 4800) (per
    # sample: kept), Optimizer.step#SGD.step [8000, 9000) holding aten::add_ [8100, 8600) (its work follows the
    # parameter count: fixed). Host time outside fetch and ops: 10000 - 4000 - 400 - 200 - 500 = 4900 µs (the
    # optimizer's Python included); fixed = 4900 + 500 (optimizer op) = 5400 µs; saving = 5400 × 7/8 = 4725 µs.
    from rules_helpers import run_tb
    from tracebuilder import TraceBuilder

    tb = TraceBuilder(device_name=None)
    tb.step(1, 0, 10_000)
    tb.annotation("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 0, 4_000)
    tb.cpu_op("aten::linear", 4_100, 400, input_dims=[[8, 64], [256, 64], [256]], input_type=["float"] * 3)
    tb.cpu_op("aten::relu", 4_600, 200)
    tb.annotation("Optimizer.step#SGD.step", 8_000, 1_000)
    tb.cpu_op("aten::add_", 8_100, 500)
    f = run_tb(tb, tmp_path, ["PD201"]).findings["PD201"]
    assert f["evidence"]["growth"] == 8.0
    assert round(f["evidence"]["fixed_ms"], 9) == 5.4
    assert round(f["saving_us_per_step"], 6) == 4725.0
