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
