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
    # M = 8 rows [8100, 8500), Python around it. Growth = target_m 64 / 8 = 8. The fixed cost the larger batch
    # spreads is the host time outside the fetch: 10000 - 8000 = 2000 µs (no optimizer kernels on a CPU trace);
    # the replay keeps 1/8 of it: saving 2000 × 7/8 = 1750 µs. (The message used to quote step - GEMM = 9600 µs,
    # the DataLoader included: new-user review F4.)
    from rules_helpers import run_tb
    from tracebuilder import TraceBuilder

    tb = TraceBuilder(device_name=None)
    tb.step(1, 0, 10_000)
    tb.annotation("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 0, 8_000)
    tb.cpu_op("aten::linear", 8_100, 400, input_dims=[[8, 64], [256, 64], [256]], input_type=["float"] * 3)
    f = run_tb(tb, tmp_path, ["PD201"]).findings["PD201"]
    assert f["evidence"]["growth"] == 8.0
    assert f["evidence"]["fixed_ms"] == 2.0
    assert f["saving_us_per_step"] == 1750.0
    assert "2.00 ms per step of fixed cost (host time outside DataLoader fetches" in f["message"]
