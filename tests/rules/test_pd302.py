"""PD302 accumulation-without-no-sync: a firing and a silent case on real 2-rank DDP runs of examples/mlp.py.

Moved from tests/test_rules_examples.py (issue 9: one test file per rule); the runs are shared through
tests/examples_runs.py.
"""

from examples_runs import example, faster, profile, quiet_machine  # noqa: F401 (a fixture)


@example
def test_pd302_fires_on_grad_accum_without_no_sync():
    slow = profile("ddp_sync", ["--ddp", "--grad-accum", "4", "--sync-every-microbatch"], steps=20)
    fixed = profile("ddp_nosync", ["--ddp", "--grad-accum", "4"], steps=20)
    assert slow[0]["PD302"]["evidence"]["early_allreduce_calls_per_update"] > 0
    faster(slow, fixed, "PD302 all-reduce every micro-batch")


@example
def test_pd302_silent_with_no_sync_on_the_micro_batches():
    fixed = profile("ddp_nosync", ["--ddp", "--grad-accum", "4"], steps=20)
    assert "PD302" not in fixed[0]
