"""The run's memory from steps.csv (perfdoctor/analysis/memory/run_memory.py): growth, peak, limits and allocator counts
over hand-written run directories, every figure worked out by hand."""

from __future__ import annotations

import numpy as np
import pytest
from runbuilder import GiB, MiB, write_run

from perfdoctor.analysis.memory.run_memory import longest_run, run_allocator_values, theil_sen
from perfdoctor.capture.run_data import load_run_dir

CUDA = {"environment": {"cuda_available": True, "device_name": "NVIDIA H100 80GB HBM3"}}


def _reserved(i: int) -> int:
    # 2 GiB + 64 MiB per step, with two outlying steps (an allocator flush and a spike)
    return {40: 1 * GiB, 50: 9 * GiB}.get(i, 2 * GiB + 64 * MiB * i)


def test_cuda_growth_peak_and_steps_to_capacity(tmp_path):
    run = load_run_dir(
        write_run(
            tmp_path / "r",
            60,
            {
                "cuda_reserved_bytes": _reserved,
                "cuda_allocated_bytes": lambda i: 1 * GiB,
                "cuda_malloc_count": lambda i: 10 + 3 * i,
                "cuda_alloc_retries": lambda i: (i >= 35) + (i >= 40),
            },
            window=range(20, 30),
            run_json={**CUDA, "memory": {"device_total_bytes": 80 * GiB}},
        )
    )
    assert run.steady_state is not None and run.steady_state.steady_start_step == 0  # even 0.1 s steps
    mem = run.memory
    g = mem.growth("cuda_reserved_bytes")
    # the longest unprofiled stretch: steps 30–59 (30 steps; 0–19 hold 20). Of its 435 pairs, the 58 − 1 = 57 that
    # touch step 40 or 50 have other slopes; the other 378 all have 64 MiB per step, so the median is exactly that
    assert (g.first_step, g.last_step, g.n_steps) == (30, 59, 30)
    assert g.slope_bytes_per_step == pytest.approx(64 * MiB)
    assert g.slope_low_bytes_per_step <= 64 * MiB <= g.slope_high_bytes_per_step and g.slope_low_bytes_per_step > 0
    # the fitted line at 30 and 59: 2 GiB + 64 MiB × step; growth 64 MiB × 29 steps
    assert g.start_bytes == pytest.approx(2 * GiB + 30 * 64 * MiB)
    assert g.end_bytes == pytest.approx(2 * GiB + 59 * 64 * MiB)
    assert g.growth_bytes == pytest.approx(29 * 64 * MiB)
    # the peak of the whole run: the 9 GiB spike at step 50
    assert (g.peak_bytes, g.peak_step) == (9 * GiB, 50)
    # (80 GiB − (2 GiB + 59 × 64 MiB)) ÷ 64 MiB = (81,920 − 5,824) ÷ 64 = 1,189 steps
    assert g.limit_bytes == 80 * GiB and g.steps_to_limit == pytest.approx(1189.0)
    flat = mem.growth("cuda_allocated_bytes")
    assert flat.slope_bytes_per_step == 0 and flat.steps_to_limit is None
    # allocator counters: steady unprofiled steps 1–19 and 30–59 (49 steps; step 0 has no previous row), 3
    # cudaMalloc each; retries at step 35 and step 40: 2 in 49 steps
    a = mem.allocator
    assert (a.n_steps, a.first_step) == (49, 1)
    assert a.mallocs_per_step == pytest.approx(3.0) and a.retries_per_step == pytest.approx(2 / 49)
    assert a.retry_steps == [35, 40]
    assert run_allocator_values(mem) == {
        "run_retries_per_step": pytest.approx(2 / 49),
        "run_steady_steps": 49,
        "run_mallocs_per_step": pytest.approx(3.0),
        "run_retry_steps": [35, 40],
    }


def test_cpu_rss_limit_is_available_memory_plus_rss_at_start(tmp_path):
    run = load_run_dir(
        write_run(
            tmp_path / "r",
            40,
            {"rss_bytes": lambda i: 500 * MiB + MiB * i},
            run_json={"memory": {"host_available_bytes": 8 * GiB, "rss_bytes": 300 * MiB, "host_limit": "host"}},
        )
    )
    g = run.memory.growth("rss_bytes")
    assert (g.first_step, g.last_step) == (0, 39) and g.slope_bytes_per_step == pytest.approx(MiB)
    # limit 8 GiB + 300 MiB = 8,492 MiB; the line ends at 539 MiB: 7,953 steps at 1 MiB per step
    assert g.limit_bytes == 8 * GiB + 300 * MiB and g.steps_to_limit == pytest.approx(7953.0)
    assert "available at the run's start" in g.limit_source
    assert run.memory.allocator is None and run_allocator_values(run.memory) == {}


def test_no_memory_column_gives_none(tmp_path):
    run = load_run_dir(write_run(tmp_path / "r", 10, {}))
    assert run.memory is None


def test_theil_sen_and_longest_run_by_hand():
    # y = 3x + 1 with one outlier at x = 4: 10 pairs, the 4 touching it differ, the median of the 10 slopes is 3
    x = np.arange(5.0)
    y = 3 * x + 1
    y[4] = 100.0
    slope, intercept, low, high = theil_sen(x, y)
    assert slope == 3 and intercept == 1
    assert longest_run(np.array([1, 1, 0, 1, 1, 1, 0, 1, 1, 1], bool)).tolist() == [7, 8, 9]  # the later on a tie
    assert longest_run(np.zeros(3, bool)).size == 0


def test_pd501_evidence_counts_the_whole_run(tmp_path):
    # a profile run directory: the trace's steps 1–3 call cudaFree in steps 2 and 3 (PD501 fires on the window);
    # steps.csv says, over the whole run, 3 cudaMalloc per steady step and retries at steps 35 and 40
    from rules_helpers import SGEMM, run_rules
    from tracebuilder import TraceBuilder

    tb = TraceBuilder()
    for n in range(3):
        s = 1000 * n
        tb.step(n + 1, s, 1000)
        tb.launch(SGEMM, launch_ts=s + 5, start=s + 10, dur=400)
        if n:
            tb.runtime("cudaFree", s + 420, 300)
        tb.launch(SGEMM, launch_ts=s + 730, start=s + 740, dur=200)
    run = write_run(
        tmp_path / "run",
        60,
        {"cuda_malloc_count": lambda i: 10 + 3 * i, "cuda_alloc_retries": lambda i: (i >= 35) + (i >= 40)},
        window=range(20, 30),
        run_json=CUDA,
    )
    tb.write(run / "trace.rank0.pt.trace.json")
    ev = run_rules([run], ["PD501"]).findings["PD501"]["evidence"]
    # as in test_cuda_growth_peak_and_steps_to_capacity: 49 steady unprofiled steps (1–19, 30–59)
    assert (ev["run_mallocs_per_step"], ev["run_steady_steps"], ev["run_retry_steps"]) == (3.0, 49, [35, 40])
    assert ev["run_retries_per_step"] == pytest.approx(2 / 49)


def test_memory_info_reads_meminfo_and_a_cgroup_limit(tmp_path):
    from perfdoctor.capture.environment import memory_info

    meminfo = "MemTotal:       24684092 kB\nMemFree:         1000 kB\nMemAvailable:   20906356 kB\n"
    cg = tmp_path / "cg"
    cg.mkdir()
    (cg / "memory.max").write_text("max\n")
    info = memory_info(meminfo, cg)
    # 24,684,092 kB and 20,906,356 kB × 1,024; no cgroup limit ("max")
    assert (info["host_total_bytes"], info["host_available_bytes"], info["host_limit"]) == (
        24_684_092 * 1024,
        20_906_356 * 1024,
        "host",
    )
    # a container limited to 4 GiB with 3 GiB in use leaves 1 GiB, less than the host's 19.9 GiB available
    (cg / "memory.max").write_text(f"{4 * GiB}\n")
    (cg / "memory.current").write_text(f"{3 * GiB}\n")
    info = memory_info(meminfo, cg)
    assert (info["host_available_bytes"], info["host_limit"]) == (GiB, "cgroup")
    assert info["rss_bytes"] > 0  # this test process
