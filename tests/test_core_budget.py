"""The machine in the replay (issue 23 item 1): the prefetch what-if bounded by the run's cores, from run.json's
CPU count and steps.csv's CPU time per step; every number worked out by hand (µs)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tracebuilder import TraceBuilder

from perfdoctor.analysis.steps.steps import find_steps
from perfdoctor.replay.machine import CoreBudget, core_budget
from perfdoctor.replay.rank import RankReplay, replay_rank
from perfdoctor.replay.transforms.host import prefetch_dataloader
from perfdoctor.trace import load_trace
from perfdoctor.trace.tables import TraceTables

DL = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def _fetch_bound(tmp_path: Path) -> tuple[RankReplay, TraceTables]:
    """Two 10 ms CPU steps, each a 6 ms DataLoader fetch (an aten::stack inside it) then a 4 ms addmm: with the fetch
    handed off (no batch copy in a CPU trace: nothing kept), each step replays at 4 ms."""
    tb = TraceBuilder(device_name=None)
    for k in (0, 1):
        t0 = 10000 * k
        tb.step(k + 1, t0, 10000)
        tb.annotation(DL, t0, 6000)
        tb.cpu_op("aten::stack", t0 + 1000, 500)
        tb.cpu_op("aten::addmm", t0 + 6000, 4000)
    tables = load_trace(str(tb.write(tmp_path / "t.json")))
    return replay_rank(tables, find_steps(tables)), tables


def _saving(case: tuple[RankReplay, TraceTables], budget: CoreBudget | None) -> tuple[float, str]:
    rr, t = case
    w = prefetch_dataloader(rr, t, budget=budget)
    return float((rr.recorded_step_us - rr.step_times(w.scenario)).mean()), w.assumption


@pytest.fixture
def fetch_bound(tmp_path: Path) -> tuple[RankReplay, TraceTables]:
    return _fetch_bound(tmp_path)


def test_without_a_budget_the_saving_states_the_cores_it_needs(fetch_bound: tuple[RankReplay, TraceTables]) -> None:
    saving, text = _saving(fetch_bound, None)
    assert saving == pytest.approx(6000.0)  # 10000 → 4000
    assert "the __next__ of a ready batch itself (about 1300 µs on a 2-core machine" in text and "not counted" in text
    # the training thread busy 4 ms + 6 ms of fetching moved to workers: 10 / 4 → 3 logical CPUs
    assert "core budget: not recorded (bare trace); needs 3 free logical CPUs" in text


def test_measured_cpu_time_bounds_the_fixed_step(fetch_bound: tuple[RankReplay, TraceTables]) -> None:
    # a run with its CPU times: each fetch keeps the __next__ of a ready batch on the loop's thread (HANDOFF_US,
    # 1.3 ms), so the step replays at 1.3 + 4 = 5.3 ms. 2 cores; the process used 9.7 ms of CPU per 10 ms step, its
    # loop thread off the CPU 0.3 ms (the fetch is 5.7 / 6 CPU work); receiving the batch costs the process those
    # 1.3 ms of CPU: the fixed step lasts at least (9.7 + 1.3) / 2 = 5.5 ms, above the replayed 5.3 → saving 4.5 ms
    budget = CoreBudget(2, "Test CPU", step_us=10000.0, process_cpu_us=9700.0, main_cpu_us=9700.0)
    saving, text = _saving(fetch_bound, budget)
    assert saving == pytest.approx(4500.0)
    assert "2 logical CPU(s) (Test CPU, run.json)" in text and "the fetch is 95% CPU work" in text
    assert "1.3 ms to receive 1 batch(es) from the workers" in text
    assert "and 1.3 ms for the __next__ of a ready batch itself" in text
    assert "at least (9.7 + 1.3) ÷ 2.00 = 5.5 ms (binds" in text
    # a sleeping __getitem__: the process used 4 ms of CPU (off the CPU 6 ms): (4 + 1.3) / 2 = 2.65 ms floor, no bind:
    # the replayed 5.3 ms step, saving 4.7 ms
    sleepy = CoreBudget(2, None, step_us=10000.0, process_cpu_us=4000.0, main_cpu_us=4000.0)
    saving, text = _saving(fetch_bound, sleepy)
    assert saving == pytest.approx(4700.0) and "the fetch is 0% CPU work" in text and "(does not bind)" in text


def test_the_run_queue_wait_measures_the_cores_the_job_gets(fetch_bound: tuple[RankReplay, TraceTables]) -> None:
    # the loop's thread ran 2 ms and waited 6 ms for a core: f = 0.25 of a core while runnable, so L = 2 / 0.25 − 1
    # = 7 other threads; with 2 workers the job's 3 threads get 3 × 2 / (7 + 3) = 0.6 cores. The process used 3 ms
    # of CPU per 10 ms step (asleep 10 − 2 − 6 = 2 ms: the fetch is 4 / 6 CPU work), 1.3 ms more to receive the
    # batch: the fixed step lasts at least 4.3 / 0.6 = 7.167 ms → saving 2.833 ms
    b = CoreBudget(2, None, step_us=10000.0, process_cpu_us=3000.0, main_cpu_us=2000.0, main_wait_us=6000.0)
    assert b.job_cores(3) == pytest.approx(0.6) and b.off_cpu_us() == pytest.approx(2000.0)
    rr, t = fetch_bound
    w = prefetch_dataloader(rr, t, workers=2, budget=b)
    assert float((rr.recorded_step_us - rr.step_times(w.scenario)).mean()) == pytest.approx(10000 - 4300 / 0.6)
    assert "waited 6.0 ms per step for a core, so its 3 threads with the workers get 0.60 cores" in w.assumption
    assert "the fetch is 67% CPU work" in w.assumption
    quiet = CoreBudget(2, None, step_us=10000.0, process_cpu_us=3000.0, main_cpu_us=2000.0, main_wait_us=50.0)
    assert quiet.job_cores(3) == 2.0  # under 5% of its runnable time waiting: the load cannot be told


def test_cores_only_assume_a_busy_training_thread_and_a_cpu_bound_fetch(
    fetch_bound: tuple[RankReplay, TraceTables],
) -> None:
    # C·T ≥ T + 6000: 2 cores → T ≥ 6000 (saving 4000); 4 cores → 2000, no bind (6000); 1 core → 4000 + 6000
    # (nothing)
    assert _saving(fetch_bound, CoreBudget(2))[0] == pytest.approx(4000.0)
    assert _saving(fetch_bound, CoreBudget(4))[0] == pytest.approx(6000.0)
    saving, text = _saving(fetch_bound, CoreBudget(1))
    assert saving == pytest.approx(0.0) and "under two free cores" in text
    # 4 cores with a load of 2.5 at the start: 1.5 free → T ≥ 4000 + 6000 × 0.5 = 7000 (saving 3000)
    saving, text = _saving(fetch_bound, CoreBudget(4, load_avg=2.5))
    assert saving == pytest.approx(3000.0) and "1.5 of them free for the job" in text


def test_core_budget_reads_the_run() -> None:
    run = {"cpu": {"logical_cpus": 4, "model": "Xeon"}, "load_avg": {"start": [0.5, 1.0, 2.0]}}
    steps = {
        "duration_s": np.array([0.5, 0.010, 0.012, 0.011, 0.020]),
        "cpu_s": np.array([np.nan, 0.008, 0.009, 0.010, 0.030]),
        "main_cpu_s": np.array([np.nan, 0.007, 0.008, 0.006, 0.015]),
        "main_wait_s": np.array([np.nan, 0.001, 0.003, 0.002, 0.0]),
        "profiler_phase": np.array(["none", "none", "none", "none", "active"], dtype=object),
    }
    # steps 1-3 (step 0 before the steady start, step 4 profiled): medians 11 ms wall, 9 ms process, 7 ms thread
    b = core_budget(run, steps, start=1)
    assert b is not None and b.cores == 4 and b.cpu_model == "Xeon" and b.measured
    assert b.step_us == pytest.approx(11000.0) and b.process_cpu_us == pytest.approx(9000.0)
    # run-queue wait median 2 ms: asleep 11 − 7 − 2 = 2 ms
    assert b.main_cpu_us == pytest.approx(7000.0) and b.main_wait_us == pytest.approx(2000.0)
    assert b.off_cpu_us() == pytest.approx(2000.0)
    assert b.load_avg == 0.5 and b.free_cores == pytest.approx(3.5)  # the 1-minute load at the start
    old = core_budget(run, {"duration_s": steps["duration_s"]}, start=1)  # a run before cpu_s: cores only
    assert old == CoreBudget(4, "Xeon", load_avg=0.5) and not old.measured
    assert core_budget({"cpu": {}}, steps) is None and core_budget(None, None) is None


def test_other_processes_cpu_is_measured_during_the_steps() -> None:
    run = {"cpu": {"logical_cpus": 2}, "load_avg": {"start": [1.1, 1.0, 1.0]}}
    steps = {
        "duration_s": np.array([0.2, 0.3, 0.3, 0.2]),
        "cpu_s": np.array([0.2, 0.3, 0.3, 0.2]),
        "main_cpu_s": np.array([0.2, 0.3, 0.3, 0.2]),
        "machine_cpu_s": np.array([0.3, 0.36, 0.33, 0.21]),
        "profiler_phase": np.array(["none"] * 4, dtype=object),
    }
    # Σ machine 1.20 s − Σ process 1.00 s = 0.20 CPU-s over 1.00 s of steps: other processes kept 0.20 cores busy,
    # so 1.80 are free, whatever the 1-minute load average at the start (1.1: a job that had just ended) says
    b = core_budget(run, steps)
    assert b is not None and b.other_cores == pytest.approx(0.2) and b.free_cores == pytest.approx(1.8)
    assert "other processes kept 0.20 busy" in b.machine_text()
    short = core_budget(run, {k: v[:1] for k, v in steps.items()})  # 0.2 s of steps: under MIN_MEASURED_S
    assert short is not None and short.other_cores is None and short.free_cores == 1.0  # 2 − 1.1, at least 1


def test_workers_that_outnumber_the_cores_leave_some_idle(fetch_bound: tuple[RankReplay, TraceTables]) -> None:
    # 2 workers and the loop on 2 free cores: together they keep POOL_CORE_SHARE (0.9) of them busy, so the fixed
    # step lasts at least (9.7 + 1.3) / (2 × 0.9) = 6.111 ms → saving 10 − 6.111 = 3.889 ms
    from perfdoctor.replay.transforms.host import POOL_CORE_SHARE

    assert POOL_CORE_SHARE == 0.9
    budget = CoreBudget(2, None, step_us=10000.0, process_cpu_us=9700.0, main_cpu_us=9700.0)
    rr, t = fetch_bound
    w = prefetch_dataloader(rr, t, workers=2, budget=budget)
    assert float((rr.recorded_step_us - rr.step_times(w.scenario)).mean()) == pytest.approx(10000 - 11000 / 1.8)
    assert "÷ 1.80 = 6.1 ms (3 busy threads on 2.00 cores keep 90% of them busy" in w.assumption
    # one worker: 2 threads on 2 cores, none idles by this count: (9.7 + 1.3) / 2 = 5.5 ms, under the one worker's
    # 6 ms per batch, which sets the step: saving 4 ms
    w1 = prefetch_dataloader(rr, t, workers=1, budget=budget)
    assert float((rr.recorded_step_us - rr.step_times(w1.scenario)).mean()) == pytest.approx(4000.0)
    assert "÷ 2.00 = 5.5 ms" in w1.assumption and "keep 90%" not in w1.assumption
