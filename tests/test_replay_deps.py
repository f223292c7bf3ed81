"""Cross-stream edges the recording's timing does not reveal (perfdoctor/replay/deps.py): recorded stream waits and
collective order, on hand-worked TraceBuilder graphs. Every expected time is worked out by hand from the events
written in the test (µs).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from tracebuilder import TraceBuilder

from perfdoctor.analysis.steps.steps import find_steps
from perfdoctor.replay.rank import RankReplay, replay_rank
from perfdoctor.replay.simulate import Scenario
from perfdoctor.trace import load_trace

NCCL = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"


def _rr(tb: TraceBuilder, tmp_path: Path) -> RankReplay:
    tables = load_trace(str(tb.write(tmp_path / "t.json")))
    return replay_rank(tables, find_steps(tables))


def _at(rr: RankReplay, ts: float) -> int:
    return int(np.flatnonzero(rr.graph.act_ts_us == ts)[0])


def _durs(rr: RankReplay, **new: float) -> np.ndarray:
    """Activity durations with some replaced, by the activity's recorded start (``at_20=300.0``)."""
    d = rr.graph.act_dur_us.copy()
    for key, val in new.items():
        d[rr.graph.act_ts_us == float(key.split("_")[1])] = val
    return d


def _edges(rr: RankReplay) -> set[tuple[float, float]]:
    """The further edges as (recorded start of source, recorded start of destination)."""
    g = rr.graph
    return {(float(g.act_ts_us[s]), float(g.act_ts_us[d])) for s, d in zip(g.xdep_src.tolist(), g.xdep_dst.tolist())}


def _ddp_like(tb: TraceBuilder) -> None:
    """Host-bound DDP step: every recorded wait is long satisfied when its consumer is launched.

    stream 7: K1 (backward) 20-120; event record 125; the NCCL stream waits (call at 200); all-reduce on stream 40
    launched 210, runs 220-270; the compute stream waits for it (call at 275); the optimizer kernel launched 280
    runs 290-310. Host step annotation 0-300, so the recorded step is 0-310.
    """
    tb.step(1, 0, 300)
    tb.launch("gemm_bwd", launch_ts=10, start=20, dur=100, stream=7)
    tb.runtime("cudaEventRecord", 125, 2)
    tb.runtime("cudaStreamWaitEvent", 200, 2)
    tb.launch(NCCL, launch_ts=210, start=220, dur=50, stream=40)
    tb.runtime("cudaStreamWaitEvent", 275, 2)
    tb.launch("multi_tensor_apply_kernel", launch_ts=280, start=290, dur=20, stream=7)


def test_recorded_stream_waits_hold_in_a_what_if(tmp_path: Path) -> None:
    tb = TraceBuilder()
    _ddp_like(tb)
    rr = _rr(tb, tmp_path)
    assert rr.recorded_step_us.tolist() == [310.0]
    assert rr.replayed_step_us.tolist() == [310.0]
    # wait at 200: the next launch of the thread is the all-reduce (stream 40); the last stream-7 activity launched
    # before the wait is K1. Wait at 275: the optimizer (stream 7) waits for the all-reduce.
    assert _edges(rr) == {(20.0, 220.0), (220.0, 290.0)}
    assert any("recorded stream waits" in a for a in rr.graph.assumptions)
    # K1 100 -> 300 µs (20-320): the all-reduce waits for it, 320-370 (launch latency 10 would allow 220); the
    # optimizer waits for the all-reduce: 370-390. Without the edges: all-reduce 220-270, optimizer 320-340.
    sc = Scenario(act_dur_us=_durs(rr, at_20=300.0))
    res = rr.step_times(sc)
    assert res.tolist() == [390.0]
    # and with 70 µs of host time before the first wait removed, the waits still hold (same 390)
    cut = Scenario(act_dur_us=_durs(rr, at_20=300.0), host_cut={100: (np.array([130.0]), np.array([200.0]))})
    assert rr.step_times(cut).tolist() == [390.0]


def test_the_cuda_sync_record_names_the_waiting_stream(tmp_path: Path) -> None:
    # as above, but the thread first launches K3 on stream 8 (launched 205, runs 215-225) and then the all-reduce;
    # Kineto's "Stream Wait Event" record says stream 40 waits, so the all-reduce (not K3) waits for K1
    tb = TraceBuilder()
    tb.step(1, 0, 300)
    tb.launch("gemm_bwd", launch_ts=10, start=20, dur=100, stream=7)
    corr = tb.runtime("cudaStreamWaitEvent", 200, 2)
    tb.events.append(
        {
            "ph": "X",
            "cat": "cuda_sync",
            "name": "Stream Wait Event",
            "pid": 0,
            "tid": 40,
            "ts": 201,
            "dur": 1,
            "args": {"device": 0, "stream": 40, "correlation": corr, "wait_on_stream": 7},
        }
    )
    tb.launch("fill_kernel", launch_ts=203, start=215, dur=10, stream=8)
    tb.launch(NCCL, launch_ts=210, start=220, dur=50, stream=40)
    rr = _rr(tb, tmp_path)
    assert _edges(rr) == {(20.0, 220.0)}
    assert rr.replayed_step_us.tolist() == rr.recorded_step_us.tolist() == [300.0]


def test_an_edge_the_recording_contradicts_is_dropped(tmp_path: Path) -> None:
    # stream 8's K2 was launched (150) before the wait (200) but ran 160-400, past the all-reduce's start (220):
    # the event cannot have covered it, so only K1 -> all-reduce stands and the recording replays unchanged
    tb = TraceBuilder()
    tb.step(1, 0, 450)
    tb.launch("gemm_bwd", launch_ts=10, start=20, dur=100, stream=7)
    tb.launch("long_kernel", launch_ts=150, start=160, dur=240, stream=8)
    tb.runtime("cudaStreamWaitEvent", 200, 2)
    tb.launch(NCCL, launch_ts=210, start=220, dur=50, stream=40)
    rr = _rr(tb, tmp_path)
    assert _edges(rr) == {(20.0, 220.0)}
    assert rr.replayed_step_us.tolist() == rr.recorded_step_us.tolist() == [450.0]


def _no_waits(tb: TraceBuilder) -> None:
    """No event calls: K1 20-120 (stream 7, launched 10); all-reduce 140-190 (stream 40, launched 130); K2 195-245
    (stream 7, launched 185: its start is explained by its launch, 185 + 10). Host step 0-260."""
    tb.step(1, 0, 260)
    tb.launch("gemm_bwd", launch_ts=10, start=20, dur=100, stream=7)
    tb.launch(NCCL, launch_ts=130, start=140, dur=50, stream=40)
    tb.launch("sgd_kernel", launch_ts=185, start=195, dur=50, stream=7)


def test_collectives_keep_their_recorded_order_without_recorded_waits(tmp_path: Path) -> None:
    tb = TraceBuilder()
    _no_waits(tb)
    rr = _rr(tb, tmp_path)
    assert rr.replayed_step_us.tolist() == rr.recorded_step_us.tolist() == [260.0]
    # K1 ended (120) before the all-reduce started (140); K2 started (195) after it ended (190), launched after it
    assert _edges(rr) == {(20.0, 140.0), (140.0, 195.0)}
    assert any("collective kernel keeps its recorded order" in a for a in rr.graph.assumptions)
    # K1 100 -> 200 (20-220): all-reduce 220-270, K2 270-320 (without the edges: 140-190 and 220-270)
    assert rr.step_times(Scenario(act_dur_us=_durs(rr, at_20=200.0))).tolist() == [320.0]
    # all-reduce 50 -> 100 (140-240): K2 waits, 240-290 (without the edge: 195-245, step 260)
    assert rr.step_times(Scenario(act_dur_us=_durs(rr, at_140=100.0))).tolist() == [290.0]
    k2 = _at(rr, 195.0)
    assert rr.baseline.act_start_us[k2] == 195.0


def test_overlap_communication_drops_the_waits_on_collectives(tmp_path: Path) -> None:
    from perfdoctor.replay.transforms.kernels import overlap_communication

    tb = TraceBuilder()
    _ddp_like(tb)
    tables = load_trace(str(tb.write(tmp_path / "t.json")))
    rr = replay_rank(tables, find_steps(tables))
    w = overlap_communication(rr, tables)
    # the optimizer's wait on the all-reduce goes; the all-reduce's wait on K1 stays
    g = rr.graph
    assert w.scenario.xdep_removed is not None
    dropped = {
        (float(g.act_ts_us[s]), float(g.act_ts_us[d]))
        for s, d, x in zip(g.xdep_src.tolist(), g.xdep_dst.tolist(), w.scenario.xdep_removed.tolist())
        if x
    }
    assert dropped == {(220.0, 290.0)}
