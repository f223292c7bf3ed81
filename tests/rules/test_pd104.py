"""PD104 cpu-thread-oversubscription: synthetic inputs with answers worked out by hand.

Moved from tests/test_rules_run_and_mfu.py (issue 9: one test file per rule).
"""

from types import SimpleNamespace

from rules_helpers import run_analysis

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
    analysis = run_analysis(run_json=run)
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
        JobContext(run_analysis(run_json=run), [], SimpleNamespace(thresholds={"max_threads_per_core": 1.0}))
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
    out = pd104.check(JobContext(run_analysis(run_json=run), [], th))
    assert out.hit is not None and out.hit.evidence.values["busy_threads"] == 6
    assert out.metrics["threads_per_core"] == 1.5


def _oversubscribed_run(tmp_path, probe):
    """A run directory: one rank at 4 intra-op threads on 2 logical CPUs; one 1000 µs CPU step, an 800 µs addmm,
    a 100 µs mul_ of the optimizer, then 100 µs of Python; ``probe``: run.json's thread_probe of rank 0 (None: not
    measured)."""
    import json

    from rules_helpers import run_rules
    from tracebuilder import TraceBuilder

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    tb = TraceBuilder(device_name=None)
    tb.step(1, 0, 1000)
    tb.cpu_op("aten::addmm", 0, 800)
    tb.cpu_op("aten::mul_", 800, 100)
    tb.write(run_dir / "trace.rank0.pt.trace.json")
    run = {
        "status": "complete",
        "world_size": 1,
        "environment": {"torch_threads": 4},
        "cpu": {"logical_cpus": 2},
        "ranks": [{"rank": 0, "torch_threads": 4, "thread_probe": probe}],
    }
    (run_dir / "run.json").write_text(json.dumps(run))
    return run_rules([run_dir], ["PD104"]).findings["PD104"]


_ADDMM = {"name": "aten::addmm", "kind": "gemm", "shapes": [[8], [8, 8], [8, 8]], "recorded_us": 800.0}
_MUL = {"name": "aten::mul_", "kind": "other", "shapes": [{"tensor": [8, 8]}, {"scalar": 0.9}], "recorded_us": 100.0}


def test_pd104_replays_the_measured_thread_ratio(tmp_path):
    # an older run.json's probe (no kinds): the dominant GEMM measured at 400 µs with 4 threads, 100 µs with 2: every
    # op keeps 0.25 of its time → the 800 µs addmm becomes 200 µs, the 100 µs mul_ 25: saving 675 µs of the 1000
    probe = {
        "ops": [{**_ADDMM, "at_recorded_us": 400.0, "at_suggested_us": 100.0}],
        "recorded_threads": 4,
        "suggested_threads": 2,
        "suggested_over_recorded": 0.25,
    }
    f = _oversubscribed_run(tmp_path, probe)
    assert f["saving_us_per_step"] == 675
    assert "GEMM time (0.8 ms per analysed step) keeps 0.25 of it" in f["saving_method"]
    assert "the other op time (0.1 ms: elementwise, optimizer, autograd) 0.25" in f["saving_method"]
    assert "aten::addmm: 400 → 100 µs" in f["saving_method"]


def test_pd104_keeps_each_kinds_measured_ratio(tmp_path):
    # the GEMM keeps 200 / 400 = 0.5 of its time (800 → 400 µs), the elementwise op 20 / 80 = 0.25 (100 → 25 µs):
    # saving 400 + 75 = 475 µs of the 1000 µs step
    probe = {
        "ops": [
            {**_ADDMM, "at_recorded_us": 400.0, "at_suggested_us": 200.0},
            {**_MUL, "at_recorded_us": 80.0, "at_suggested_us": 20.0},
        ],
        "recorded_threads": 4,
        "suggested_threads": 2,
        "suggested_over_recorded": (800 * 0.5 + 100 * 0.25) / 900,
        "kinds": {
            "gemm": {"suggested_over_recorded": 0.5, "recorded_us": 800.0},
            "other": {"suggested_over_recorded": 0.25, "recorded_us": 100.0},
        },
    }
    f = _oversubscribed_run(tmp_path, probe)
    assert f["saving_us_per_step"] == 475
    assert "GEMM time (0.8 ms per analysed step) keeps 0.50 of it" in f["saving_method"]
    assert "the other op time (0.1 ms: elementwise, optimizer, autograd) 0.25" in f["saving_method"]
    assert "aten::mul_: 80 → 20 µs" in f["saving_method"]
    # a probe that timed GEMMs only: the other op time keeps the GEMMs' ratio, 800 → 400 and 100 → 50: 450 µs
    gemm_only = {**probe, "ops": probe["ops"][:1], "kinds": {"gemm": probe["kinds"]["gemm"]}}
    (tmp_path / "g").mkdir()
    assert _oversubscribed_run(tmp_path / "g", gemm_only)["saving_us_per_step"] == 450


def test_pd104_without_a_measurement_divides_by_the_oversubscription(tmp_path):
    # 4 threads on 2 cores: op time ÷ 2 → the addmm keeps 400 µs, the mul_ 50: saving 450 µs, stated as not measured
    f = _oversubscribed_run(tmp_path, None)
    assert f["saving_us_per_step"] == 450
    assert "an estimate from the counts, not measured" in f["saving_method"]
