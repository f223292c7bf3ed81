"""Replay of the step's dependency graph: hand-worked TraceBuilder graphs and the error bound on real traces.

Every expected time below is worked out by hand from the events written in the test (µs).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import SHARED_TRACES
from tracebuilder import TraceBuilder

from perfdoctor.analysis.steps.steps import find_steps
from perfdoctor.replay.graph import build_graph
from perfdoctor.replay.rank import replay_rank
from perfdoctor.replay.simulate import Scenario, replay
from perfdoctor.trace import load_trace


def _load(tb: TraceBuilder, tmp_path: Path):  # type: ignore[no-untyped-def]
    tables = load_trace(str(tb.write(tmp_path / "t.json")))
    return tables, find_steps(tables)


def _durs(rr, **new: float) -> np.ndarray:  # type: ignore[no-untyped-def]
    """Activity durations with some replaced, by the activity's recorded start (``at_20=200.0``)."""
    d = rr.graph.act_dur_us.copy()
    for key, val in new.items():
        d[rr.graph.act_ts_us == float(key.split("_")[1])] = val
    return d


def test_overlapping_streams_and_an_unrecorded_event_wait(tmp_path: Path) -> None:
    # stream 7: K1 20-520. stream 8: K2 40-340, then K3 waits for K1 (an event wait) and runs 520-620.
    tb = TraceBuilder()
    tb.step(1, 0, 100)
    tb.launch("k1", launch_ts=10, start=20, dur=500, stream=7)
    tb.launch("k2", launch_ts=30, start=40, dur=300, stream=8)
    tb.runtime("cudaStreamWaitEvent", 45, 2)
    tb.launch("k3", launch_ts=50, start=520, dur=100, stream=8)
    tables, steps = _load(tb, tmp_path)
    rr = replay_rank(tables, steps)
    assert rr.recorded_step_us.tolist() == [620.0]
    assert rr.replayed_step_us.tolist() == [620.0]
    g = rr.graph
    k3 = int(np.flatnonzero(g.act_ts_us == 520)[0])
    assert g.act_ts_us[g.act_dep[k3]] == 20  # K3 waits for K1
    # K1 500 -> 200 µs: K1 ends 220; K3 now waits for K2 (ends 340) on its own stream: 340-440
    assert rr.step_times(Scenario(act_dur_us=_durs(rr, at_20=200.0))).tolist() == [440.0]
    # K2 300 -> 100 µs changes nothing: K3 still waits for K1
    assert rr.step_times(Scenario(act_dur_us=_durs(rr, at_40=100.0))).tolist() == [620.0]


def test_sync_that_returns_at_once_then_long_host_work(tmp_path: Path) -> None:
    # K1 20-120; cudaDeviceSynchronize 200-203 returns at once; 4,797 µs of host work; K2 launched at 5000: 5010-5110
    tb = TraceBuilder()
    tb.step(1, 0, 5020)
    tb.launch("k1", launch_ts=10, start=20, dur=100)
    tb.runtime("cudaDeviceSynchronize", 200, 3)
    tb.cpu_op("aten::something_on_the_host", 203, 4797)
    tb.launch("k2", launch_ts=5000, start=5010, dur=100)
    tables, steps = _load(tb, tmp_path)
    rr = replay_rank(tables, steps)
    assert rr.replayed_step_us.tolist() == [5110.0]
    g = rr.graph
    assert g.n_blk == 1 and not g.blk_waited[0]
    # the sync removed: only its own 3 µs go
    removed = Scenario(blk_removed=np.array([True]), host_cut={100: (np.array([200.0]), np.array([203.0]))})
    assert rr.step_times(removed).tolist() == [5107.0]
    # K1 ten times longer (1,000 µs: ends 1020): the sync now waits until 1020 + its release latency
    # (the trace has no waiting sync, so the default 5 µs); the host
    # work and K2 shift by 1025 - 203 = 822 µs: K2 runs 5832-5932
    assert rr.step_times(Scenario(act_dur_us=_durs(rr, at_20=1000.0))).tolist() == [5932.0]


def test_sync_that_waits_shifts_the_host(tmp_path: Path) -> None:
    # K1 20-1020; cudaStreamSynchronize 30-1025 waits for it (returns 5 µs after); host to 1500; K2 1510-1610
    tb = TraceBuilder()
    tb.step(1, 0, 1520)
    tb.launch("k1", launch_ts=10, start=20, dur=1000)
    tb.runtime("cudaStreamSynchronize", 30, 995)
    tb.cpu_op("aten::host_work", 1025, 475)
    tb.launch("k2", launch_ts=1500, start=1510, dur=100)
    tables, steps = _load(tb, tmp_path)
    rr = replay_rank(tables, steps)
    assert rr.replayed_step_us.tolist() == [1610.0]
    assert rr.graph.blk_waited.tolist() == [True]
    # K1 500 µs shorter: the sync returns at 525, everything after it 500 µs earlier: K2 1010-1110
    assert rr.step_times(Scenario(act_dur_us=_durs(rr, at_20=500.0))).tolist() == [1110.0]


def _optimizer_trace(backward_kernel_us: float) -> TraceBuilder:
    # four backward kernels launched at 10-40; Optimizer.step runs 2,000 µs on the host (50-2050) and launches
    # one optimizer kernel at 2040
    tb = TraceBuilder()
    tb.step(1, 0, 2100)
    t = 20.0
    for i in range(4):
        tb.launch(f"bwd{i}", launch_ts=10 + 10 * i, start=max(t, 15 + 10 * i), dur=backward_kernel_us)
        t = max(t, 15 + 10 * i) + backward_kernel_us
    tb.annotation("Optimizer.step#SGD.step", 50, 2000)
    tb.launch("multi_tensor_apply_kernel", launch_ts=2040, start=max(t, 2045), dur=10)
    return tb


def test_optimizer_hidden_behind_queued_kernels(tmp_path: Path) -> None:
    # backward kernels 20-1020, 1020-2020, 2020-3020, 3020-4020; the optimizer kernel queues behind: 4020-4030
    tables, steps = _load(_optimizer_trace(1000.0), tmp_path)
    rr = replay_rank(tables, steps)
    assert rr.replayed_step_us.tolist() == [4030.0]
    # a fused optimizer that removes 1,990 µs of host time (50-2040): the kernel is still queued behind backward
    cut = Scenario(host_cut={100: (np.array([50.0]), np.array([2040.0]))})
    assert rr.step_times(cut).tolist() == [4030.0]


def test_optimizer_exposed_when_the_device_is_idle(tmp_path: Path) -> None:
    # backward kernels of 10 µs: 20-30, 30-40, 40-50, 50-60; the optimizer kernel runs 2045-2055, the host
    # annotation ends at 2100: step 2100. Cutting 1,990 µs of host time: annotation ends 110, kernel 60-70
    # (launched at 55, after the last backward kernel ends at 60): 110
    tables, steps = _load(_optimizer_trace(10.0), tmp_path)
    rr = replay_rank(tables, steps)
    assert rr.replayed_step_us.tolist() == [2100.0]
    cut = Scenario(host_cut={100: (np.array([50.0]), np.array([2040.0]))})
    assert rr.step_times(cut).tolist() == [110.0]


def test_activity_without_launch_keeps_its_start(tmp_path: Path) -> None:
    tb = TraceBuilder()
    tb.step(1, 0, 100)
    tb.kernel("inherited", start=5, dur=50)
    tb.launch("k", launch_ts=10, start=60, dur=10)
    tables, _ = _load(tb, tmp_path)
    g = build_graph(tables)
    assert g.act_launch.tolist() == [-1, 0]
    res = replay(g, Scenario(act_dur_us=np.array([20.0, 10.0])))
    # K was queued behind it (start 60 = its end 55 + 5 µs gap): it still starts 5 µs after it, at 25 + 5
    assert res.act_start_us.tolist() == [5.0, 30.0]


def _shared_with_steps() -> list[Path]:
    if not SHARED_TRACES.exists():
        return []
    return sorted(
        p for p in SHARED_TRACES.rglob("*") if p.is_file() and ".json" in p.name and not p.name.startswith("bad__")
    )


@pytest.mark.parametrize("path", _shared_with_steps(), ids=lambda p: p.name[:60])
def test_replay_reproduces_every_shared_trace(path: Path) -> None:
    tables = load_trace(str(path))
    steps = find_steps(tables)
    rr = replay_rank(tables, steps)
    assert abs(rr.mean_error) <= 0.02, rr.to_dict()
    assert float(np.abs(rr.step_errors).max()) <= 0.05, rr.to_dict()


def test_shared_traces_present_or_skipped() -> None:
    if not _shared_with_steps():
        pytest.skip("../shared/traces is absent")


def test_html_shows_each_finding_before_and_after_its_fix(tmp_path: Path) -> None:
    from reporting import write_reports

    tb = TraceBuilder()
    tb.step(1, 0, 1000)
    tb.annotation("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 0, 400)
    tb.launch("volta_sgemm_128x64_nn", launch_ts=410, start=420, dur=480)
    out = write_reports([str(tb.write(tmp_path / "dl.json"))], tmp_path)
    html = out["html"].read_text()
    # PD101 replayed: 1000 -> 600 µs (the fetch becomes a hand-off); the bars say 1.00 ms now, 0.60 ms fixed
    report = json.loads(out["json"].read_text())
    assert html.count('<svg class="chart before-after"') == len(
        [f for f in report["findings"] if f["saving_us_per_step"]]
    )
    pd101 = html.index('aria-label="mean step now and with the fix of PD101"')
    assert "<title>now: 1.00 ms</title>" in html[pd101:] and "<title>fixed: 0.60 ms</title>" in html[pd101:]
    assert "would take the mean step from 1.00 ms to " in html


def test_larger_batch_amortises_fixed_host_time_only(tmp_path: Path) -> None:
    from perfdoctor.replay.transforms.batch import larger_batch

    # DataLoader [0, 200) (per sample), 800 µs of other host time (per step), a kernel launched at 300: [310, 410)
    tb = TraceBuilder()
    tb.step(1, 0, 1000)
    tb.annotation("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 0, 200)
    tb.launch("volta_sgemm_128x64_nn", launch_ts=300, start=310, dur=100)
    tables, steps = _load(tb, tmp_path)
    rr = replay_rank(tables, steps)
    # batch × 2, per step of today's batch: the 800 µs of host time halve (cut [250, 300), [302.5, 305),
    # [652.5, 1000)), the fetch and the kernel stay: launch at 250, kernel [260, 360), annotation ends at 600
    w = larger_batch(rr, tables, 2.0)
    assert rr.step_times(w.scenario).tolist() == [600.0]


def _three_cpu_ops(tmp_path: Path):  # type: ignore[no-untyped-def]
    """CPU-only, one 1000 µs step: A = mm [8, 1024] x [1024, 1024] (the batch's GEMM, 8 rows) [100, 300),
    B = add of two 1024 x 1024 tensors [400, 500), C = mm 1024 x 1024 x 1024 [600, 700); (replay, tables)."""
    tb = TraceBuilder(device_name=None)
    tb.step(1, 0, 1000)
    tb.cpu_op("aten::mm", 100, 200, input_dims=[[8, 1024], [1024, 1024]])
    tb.cpu_op("aten::add", 400, 100, input_dims=[[1024, 1024], [1024, 1024]])
    tb.cpu_op("aten::mm", 600, 100, input_dims=[[1024, 1024], [1024, 1024]])
    tables, steps = _load(tb, tmp_path)
    return replay_rank(tables, steps), tables


def test_larger_batch_on_a_cpu_grows_each_op_as_its_roofline_time(tmp_path: Path) -> None:
    from perfdoctor.replay.transforms.batch import larger_batch

    rr, tables = _three_cpu_ops(tmp_path)
    # without rows every op is per sample and only the 600 µs outside ops halve: 300 + 400 = 700 µs
    assert rr.step_times(larger_batch(rr, tables, 2.0).scenario).tolist() == [700.0]
    # best rates: C 2 x 1024^3 FLOP / 100 µs = 21,474,836 FLOP/µs; B 3 x 4 MiB / 100 µs = 125,829 B/µs. A moves
    # 32,768 + 4,194,304 + 32,768 B (its [8, 1024] input and output grow, the weight does not) and does
    # 16,777,216 FLOP: bandwidth-bound (33.9 µs vs 0.8 µs); doubled, 4,325,376 B: grows 1.01538x, so per today's
    # batch it keeps 1.01538 / 2 of its 200 µs = 101.538 µs. B and C have no 8-row dimension: per step, keep half.
    # 300 + 101.538 + 50 + 50 = 501.538 µs
    w = larger_batch(rr, tables, 2.0, rows=8)
    assert abs(rr.step_times(w.scenario)[0] - (300 + 200 * 4325376 / 4259840 / 2 + 100)) < 1e-6
    assert "21474.8 GFLOP/s" in w.assumption and "125.8 GB/s" in w.assumption


def test_measured_gemm_share_per_sample_interpolates_in_log_growth() -> None:
    from perfdoctor.replay.transforms.batch import measured_keep

    shares = {"2": 0.6, "4": 0.5, "8": 0.4}
    assert measured_keep(shares, 4.0) == pytest.approx(0.5)
    # growth 2.83 = 2^1.5: halfway between the shares at 2 and 4 in log growth
    assert measured_keep(shares, 2**1.5) == pytest.approx(0.55)
    # under 2: between 1 (growth 1) and 0.6; beyond 8: the last share
    assert measured_keep(shares, 2**0.5) == pytest.approx(0.8) and measured_keep(shares, 16.0) == 0.4
    assert measured_keep(None, 4.0) is None and measured_keep(shares, 1.0) is None


def test_larger_batch_on_a_cpu_uses_the_measured_gemm_share(tmp_path: Path) -> None:
    from perfdoctor.replay.transforms.batch import larger_batch

    # with a measured share: the 8-row GEMM A keeps 0.7 of its 200 µs per sample at growth 2 (140 µs); B and C as
    # in the roofline test (50 each): 300 + 240
    rr, tables = _three_cpu_ops(tmp_path)
    w = larger_batch(rr, tables, 2.0, rows=8, per_sample={"2": 0.7, "4": 0.4})
    assert rr.step_times(w.scenario)[0] == pytest.approx(540.0)
    assert "keep 0.70 of their time per sample (measured by the runner" in w.assumption
    # a share under 1/growth is taken as 1/growth (a larger batch's GEMM takes at least today's time)
    w = larger_batch(rr, tables, 2.0, rows=8, per_sample={"2": 0.3})
    assert rr.step_times(w.scenario)[0] == pytest.approx(300 + 100 + 100)


def test_first_window_after_inherited_work_stays_put(tmp_path: Path) -> None:
    # a kernel queued before the recording runs [0, 100): the first window starts at 100 (issue 10 item 6)
    tb = TraceBuilder()
    tb.step(1, 0, 1000)
    tb.kernel("inherited", start=0, dur=100)
    tb.launch("volta_sgemm_128x64_nn", launch_ts=500, start=510, dur=90)
    tables, steps = _load(tb, tmp_path)
    rr = replay_rank(tables, steps)
    assert float(steps.start_us[0]) == 100.0 and rr.replayed_step_us.tolist() == [900.0]
    # 40 µs of host time cut before 100: the host finishes at 960; the window still starts at 100
    assert rr.step_times(Scenario(host_cut={100: (np.array([20.0]), np.array([60.0]))})).tolist() == [860.0]


def test_a_left_out_step_ends_the_next_window_in_the_replay_too(tmp_path: Path) -> None:
    """Fuzzer: PD401 read 111% of the step when the first analysed window started where a left-out step's work
    ended (its recorded time was kept while the host before it moved): the replay cuts every marker, as here.

    Step 1 [0, 1000) is cold (a compile annotation covers 900 µs of it) and is left out. In it: kernel A
    (launched at 20) runs 40-300, cudaDeviceSynchronize 30-310 waits for it, kernel B (launched at 900) runs
    920-1300. Step 2 [1000, 2000): kernel C (launched at 1100) queues behind B, 1300-1700. Step 3 [2000, 3000):
    kernel D (launched at 2100) 2120-2520. Recorded windows: step 1 ends at max(1000, 1300) = 1300, so step 2 is
    [1300, 2000) = 700 µs and step 3 [2000, 3000) = 1000 µs.
    With the sync no longer blocking, the host from 310 on moves earlier by the same amount d for every later
    host event; step 1 ends at B's new end 1300 - d, and step 2 at its host end 2000 - d (C ends at 1700 - d):
    700 µs again, and step 3 1000 µs. The analysed steps hold no sync: the saving is 0 in each.
    """
    from perfdoctor.replay.transforms.host import remove_syncs

    tb = TraceBuilder()
    tb.step(1, 0, 1000)
    tb.annotation("compile_fx (dynamo_timed)", 50, 900)
    tb.launch("a", launch_ts=20, start=40, dur=260)
    tb.runtime("cudaDeviceSynchronize", 30, 280)
    tb.launch("b", launch_ts=900, start=920, dur=380)
    tb.step(2, 1000, 1000)
    tb.launch("c", launch_ts=1100, start=1300, dur=400)
    tb.step(3, 2000, 1000)
    tb.launch("d", launch_ts=2100, start=2120, dur=400)
    tables, steps = _load(tb, tmp_path)
    assert steps.numbers.tolist() == [2, 3] and steps.dur_us.tolist() == [700.0, 1000.0]
    rr = replay_rank(tables, steps)
    assert rr.replayed_step_us.tolist() == [700.0, 1000.0]
    fixed = rr.step_times(remove_syncs(rr, (np.array([30.0]), np.array([310.0]))).scenario)  # the sync call
    assert fixed.tolist() == [700.0, 1000.0]
