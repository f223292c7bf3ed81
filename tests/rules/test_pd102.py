"""PD102 pageable-h2d-copy: a firing and a silent case (and skips), answers worked out by hand (µs).

Moved from tests/test_rules_synthetic.py (issue 9: one test file per rule).
"""

import pytest
from rules_helpers import SGEMM, run_tb
from tracebuilder import TraceBuilder


def _copy_trace(kind):
    tb = TraceBuilder()
    tb.step(1, 0, 1000)
    tb.memcpy(launch_ts=10, start=20, dur=80, kind=kind, nbytes=8 << 20, launch_dur=300)  # host blocked [10, 310)
    tb.launch(SGEMM, launch_ts=320, start=330, dur=570)  # [330, 900)
    return tb


def test_pd102_fires_on_pageable_copy(tmp_path):
    r = run_tb(_copy_trace("HtoD (Pageable -> Device)"), tmp_path, ["PD102"])
    f = r.findings["PD102"]
    # replayed pinned and non_blocking: the copy call keeps a 5 µs launch (the trace's other launch call), so
    # 295 µs of host time go [15, 310); the kernel launches at 25 but queues behind the copy [20, 100): [100, 670);
    # the annotation ends at 705: 1000 -> 705
    assert f["saving_us_per_step"] == 295
    assert f["evidence"]["copies_per_step"] == 1
    assert f["evidence"]["host_blocked_ms"] == pytest.approx(0.3)
    assert f["severity"] == "high"


def test_pd102_message_gives_size_in_fitting_units(tmp_path):
    f = run_tb(_copy_trace("HtoD (Pageable -> Device)"), tmp_path, ["PD102"]).findings["PD102"]
    # 8 MiB = 8,388,608 B; held [10, 310): 300 µs ≤ 8.4 MB at 2 GB/s + 20 µs
    assert "(1 per step, 8.4 MB)" in f["message"] and "block the host 0.30 ms per step" in f["message"]
    assert f["evidence"]["bytes_per_step"] == 8 << 20


def _queued_copy_trace():
    """A 1 KB pageable copy queued behind an 880 µs kernel: its sync waits for the kernel, not for the copy."""
    tb = TraceBuilder()
    tb.step(1, 0, 2000)
    tb.launch(SGEMM, launch_ts=10, start=20, dur=880)  # [20, 900)
    tb.cpu_op("aten::copy_", 100, 805)  # [100, 905)
    tb.memcpy(launch_ts=100, start=900, dur=1, nbytes=1000, launch_dur=5)  # call [100, 105), copy [900, 901)
    tb.runtime("cudaStreamSynchronize", 110, 793)  # [110, 903)
    tb.launch(SGEMM, launch_ts=1400, start=1410, dur=500)  # [1410, 1910)
    return tb


def test_pd102_silent_when_tiny_copy_waits_on_queued_kernels(tmp_path):
    r = run_tb(_queued_copy_trace(), tmp_path, ["PD102", "PD401"])
    m = r.metrics("PD102")
    assert m["copy_host_us"] == 16 and m["host_blocked_us"] == 5 + 793
    # either fix removes the sync [110, 903) that waits for the queued kernel (a pinned non_blocking copy is not
    # followed by one): the host runs on 793 µs earlier, the second kernel launches at 607 and queues behind the
    # copy, running [901, 1401) (PD102: the 1 KB copy at 25 GB/s takes 0.04 µs, [900, 900.04): [900.04, 1400.04));
    # the annotation ends at 1207: the step ends with the kernel. Each finding claims it alone; in the fix plan
    # PD102 (599.96) comes first and PD401 then saves nothing: off the plan, its 599 µs alone beside it
    assert r.findings["PD401"]["saving_alone_us_per_step"] == pytest.approx(599)
    assert r.findings["PD401"]["saving_us_per_step"] == 0.0
    assert r.findings["PD401"]["plan_note"] == "no further saving once PD102 is fixed"
    assert r.findings["PD102"]["saving_us_per_step"] == pytest.approx(599.96)
    assert r.findings["PD401"]["evidence"]["syncs_per_step"] == 1


def test_pd102_message_quotes_the_host_time_blocked_not_only_the_copies_share(tmp_path):
    """The saving (599.96 µs, above) exceeds the 16 µs the 1 KB copy explains (its bound, 1 µs device copy + 20 µs
    per-copy overhead from the call's start at 100, meets the blocked host time [100, 105) ∪ [110, 121)): the
    message quotes the host time blocked, 5 + 793 = 798 µs (the copy
    call and the sync after it), which the saving does not exceed, and names the copies' share of it."""
    f = run_tb(_queued_copy_trace(), tmp_path, ["PD102"]).findings["PD102"]
    assert "block the host 0.80 ms per step in the copy calls and the stream syncs after them" in f["message"]
    assert "the copies themselves explain 0.02 ms of it" in f["message"]
    assert "up to 0.02 ms" not in f["message"] and f["saving_us_per_step"] <= 798


def test_pd102_silent_on_pinned_copy(tmp_path):
    r = run_tb(_copy_trace("HtoD (Pinned -> Device)"), tmp_path, ["PD102"])
    assert "PD102" in r.passed and r.metrics("PD102")["pageable_h2d_per_step"] == 0
