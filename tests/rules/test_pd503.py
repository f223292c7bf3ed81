"""PD503 memory-growth: hand-written run directories through `perfdoctor report RUN_DIR` (the production path: a
run without a trace gives a run-only report whose run checks still run); figures worked out by hand."""

from __future__ import annotations

import pytest
from rules_helpers import run_rules
from runbuilder import GiB, MiB, write_run

CUDA = {"environment": {"cuda_available": True, "device_name": "NVIDIA H100 80GB HBM3"}}


def _cuda_run(tmp_path, reserved, allocated=lambda i: 1 * GiB):
    return write_run(
        tmp_path / "run",
        60,
        {"cuda_reserved_bytes": reserved, "cuda_allocated_bytes": allocated, "cuda_alloc_retries": lambda i: 0},
        window=range(20, 30),
        run_json={**CUDA, "memory": {"device_total_bytes": 80 * GiB}},
    )


def test_pd503_fires_on_reserved_memory_climbing(tmp_path):
    # reserved = 2 GiB + 64 MiB × step; fitted over the unprofiled steps 30–59: 64 MiB per step, 29 × 64 = 1,856 MiB
    # from 3,968 to 5,824 MiB; the device's 80 GiB (81,920 MiB) is reached in (81,920 − 5,824) ÷ 64 = 1,189 steps
    r = run_rules([str(_cuda_run(tmp_path, lambda i: 2 * GiB + 64 * MiB * i))], ["PD503"])
    f = r.findings["PD503"]
    assert f["message"] == (
        "Reserved device memory grows 64.00 MiB per step (95% interval 64.00–64.00) over the 30 steady-state steps "
        "30–59, 1,856 MiB in all (from 3,968 to 5,824 MiB; peak 5,824 MiB at step 59); at that rate it reaches the "
        "80.0 GiB of device memory (total_memory) in about 1,189 more steps"
    )
    assert f["evidence"]["steps_to_limit"] == pytest.approx(1189.0)
    assert f["saving_us_per_step"] == 0 and f["position"] is None  # no time saving: the run, not the step


def test_pd503_headline_is_one_short_sentence(tmp_path):
    from perfdoctor.checks import pd503_memory_growth as pd503
    from perfdoctor.checks.catalogue import load_catalogue

    spec = load_catalogue().rules["PD503"]
    r = run_rules([str(_cuda_run(tmp_path, lambda i: 2 * GiB + 64 * MiB * i))], ["PD503"])
    ev = r.findings["PD503"]["evidence"]
    head = spec.headline.format_map({**ev, "n_steps": 30})
    assert head == "Reserved device memory grows 64.00 MiB per step over 30 steady steps: out of memory in ~1,189 steps"
    assert len(head) <= 120 and "headline_tail" in pd503.MESSAGE_FIELDS


def test_pd503_names_the_other_growing_series(tmp_path):
    # allocated grows too, 32 MiB per step (1 GiB + 32 MiB × step: 928 MiB over steps 30–59, 3% of ≥ 1,984 MiB)
    r = run_rules(
        [str(_cuda_run(tmp_path, lambda i: 2 * GiB + 64 * MiB * i, lambda i: 1 * GiB + 32 * MiB * i))], ["PD503"]
    )
    assert r.findings["PD503"]["message"].endswith("; allocated device memory grows too, 32.00 MiB per step")


def test_pd503_silent_on_a_flat_noisy_series(tmp_path):
    # reserved 4 GiB ± 8 MiB alternating, and a cache filling in the first steps (the profiled window's steps are
    # out of the fit): the Theil–Sen slope over steps 30–59 is 0, its interval holds 0
    def reserved(i):
        return min(i, 5) * 512 * MiB + 4 * GiB + (8 * MiB if i % 2 else -8 * MiB)

    r = run_rules([str(_cuda_run(tmp_path, reserved))], ["PD503"])
    assert "PD503" in r.passed and r.metrics("PD503", "None")["growth_bytes_per_step"] == 0


def test_pd503_silent_below_the_growth_floor(tmp_path):
    # RSS creeping 0.5 MiB per step over 40 steps: 19.5 MiB in all, but 1.9% of its 1,000 MiB start (< 2%)
    run = write_run(tmp_path / "run", 40, {"rss_bytes": lambda i: 1000 * MiB + MiB // 2 * i})
    r = run_rules([str(run)], ["PD503"])
    assert "PD503" in r.passed and r.metrics("PD503", "None")["growth_pct"] == pytest.approx(100 * 19.5 / 1000)


def test_pd503_skipped_without_memory_columns_or_enough_steps(tmp_path):
    r = run_rules([str(write_run(tmp_path / "a", 40, {}))], ["PD503"])
    assert "no memory series" in r.skipped["PD503"]
    r = run_rules([str(write_run(tmp_path / "b", 15, {"rss_bytes": lambda i: MiB * i}))], ["PD503"])
    assert r.skipped["PD503"] == "only 15 steady-state unprofiled steps in one stretch (needs 20)"


def test_headline_key_is_checked_and_can_be_overridden(tmp_path):
    from perfdoctor.checks.catalogue import load_catalogue
    from perfdoctor.errors import PerfDoctorError

    bad, good = tmp_path / "bad", tmp_path / "good"
    bad.mkdir()
    good.mkdir()
    (bad / "PD503.toml").write_text('code = "PD503"\nheadline = 5\n')
    with pytest.raises(PerfDoctorError, match=r"PD503.toml: headline must be a string"):
        load_catalogue([str(bad)])
    (good / "PD503.toml").write_text('code = "PD503"\nheadline = "{series_cap} grows"\n')
    assert load_catalogue([str(good)]).rules["PD503"].headline == "{series_cap} grows"


def test_pd503_reads_the_profiled_window_memory_events(tmp_path):
    # a CUDA run directory whose trace (steps 1–3) holds [memory] events: each step allocates 2 MiB it keeps and
    # 1 MiB it frees, so 3 MiB allocated − 1 MiB freed = 2 MiB per step outlives its step, in all 3 steps
    from rules_helpers import SGEMM
    from tracebuilder import TraceBuilder

    tb = TraceBuilder()
    total = 100 * MiB
    for n in range(3):
        s = 1000 * n
        tb.step(n + 1, s, 1000)
        tb.cpu_op("aten::linear", s + 100, 10)
        tb.memory(s + 105, 2 * MiB, total + 2 * MiB, 2 * GiB, addr=0x1000 + n)
        tb.cpu_op("aten::linear", s + 200, 10)
        tb.memory(s + 205, MiB, total + 3 * MiB, 2 * GiB, addr=0x9000)
        tb.launch(SGEMM, launch_ts=s + 300, start=s + 310, dur=500)
        tb.memory(s + 900, -MiB, total + 2 * MiB, 2 * GiB, addr=0x9000)
        total += 2 * MiB
    run = _cuda_run(tmp_path, lambda i: 2 * GiB + 64 * MiB * i)
    tb.write(run / "trace.rank0.pt.trace.json")
    msg = run_rules([str(run)], ["PD503"]).findings["PD503"]["message"]
    assert "; the trace's [memory] events agree: in the profiled steps 1–3 on GPU" in msg
    assert msg.endswith(
        "2.00 MiB per step is allocated and not freed (mean of allocated − freed over 3 steps; 3 of them hold more)"
    )
