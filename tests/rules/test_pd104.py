"""PD104 cpu-thread-oversubscription: synthetic inputs with answers worked out by hand.

Moved from tests/test_rules_run_and_mfu.py (issue 9: one test file per rule).
"""

from types import SimpleNamespace

from perfdoctor.checks import pd104_cpu_thread_oversubscription as pd104
from perfdoctor.checks.context import JobContext


def test_pd104_fires_on_oversubscription():
    run = {
        "world_size": 2,
        "launcher": "torchrun",
        "environment": {"torch_threads": 2},
        "cpu": {"logical_cpus": 2},
        "ranks": [{"rank": 0, "torch_threads": 2}, {"rank": 1, "torch_threads": 2}],
    }
    analysis = SimpleNamespace(run=run)
    th = SimpleNamespace(thresholds={"max_threads_per_core": 1.0})
    out = pd104.check(JobContext(analysis, [], th))
    assert out.hit is not None and out.hit.evidence.values["busy_threads"] == 4
    assert out.hit.evidence.values["suggested_threads"] == 1
    # each rank set torch.set_num_threads(1) after start-up: the parent's count (2) must not be used
    for r in run["ranks"]:
        r["torch_threads"] = 1
    assert pd104.check(JobContext(analysis, [], th)).hit is None
    # an older run directory without per-rank counts: skipped, never guessed
    del run["ranks"]
    assert "thread count" in pd104.check(JobContext(analysis, [], th)).skip


def test_pd104_silent_at_one_thread_per_core():
    # one rank with 2 torch threads on 2 logical CPUs: 2 busy threads / 2 cores = 1.0, not above the 1.0 limit
    run = {
        "world_size": 1,
        "environment": {"torch_threads": 2},
        "cpu": {"logical_cpus": 2},
        "ranks": [{"rank": 0, "torch_threads": 2}],
    }
    out = pd104.check(
        JobContext(SimpleNamespace(run=run), [], SimpleNamespace(thresholds={"max_threads_per_core": 1.0}))
    )
    assert out.hit is None and not out.skip
    assert out.metrics["threads_per_core"] == 1.0


def test_pd104_counts_each_ranks_dataloader_workers():
    # 2 ranks x 1 thread + 2 ranks x 2 DataLoader workers = 6 busy threads on 4 logical CPUs: 1.5 per core
    run = {
        "world_size": 2,
        "environment": {"torch_threads": 1, "dataloader_workers": 2},
        "cpu": {"logical_cpus": 4},
        "ranks": [
            {"rank": 0, "torch_threads": 1, "dataloader_workers": 2},
            {"rank": 1, "torch_threads": 1, "dataloader_workers": 2},
        ],
    }
    th = SimpleNamespace(thresholds={"max_threads_per_core": 1.0})
    out = pd104.check(JobContext(SimpleNamespace(run=run), [], th))
    assert out.hit is not None and out.hit.evidence.values["busy_threads"] == 6
    assert out.metrics["threads_per_core"] == 1.5
