"""Ranks replayed jointly (perfdoctor/crossrank/joint.py) and the reordered-collective what-if: by hand (µs), and on the
ykcai MoE pair against values read from the raw trace JSON with independent code."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import SHARED_TRACES
from tracebuilder import TraceBuilder

from perfdoctor.analysis.steps.steps import find_steps
from perfdoctor.crossrank.joint import match
from perfdoctor.replay.rank import replay_rank
from perfdoctor.replay.simulate import Scenario
from perfdoctor.replay.transforms.kernels import issue_collectives_early
from perfdoctor.trace import load_trace

NCCL = "ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)"
GEMM = "ampere_sgemm_128x64_nn"
SHARED = SHARED_TRACES


def _rank(tmp_path: Path, rank: int) -> tuple:
    """One step [0, 200) of host time on each rank; the all-to-all ends at 320 on both devices.

    rank 0: GEMM A launched at 0 runs 10-110; the all-to-all, launched at 120, starts at 130 and waits for rank 1
    until 320 (190 µs); GEMM B, launched at 125, needs its output: 320-370.
    rank 1: GEMM A' launched at 0 runs 10-290; the all-to-all, launched at 5, waits for A' (its input) and runs
    300-320 (the transfer, 20 µs: the last to arrive); GEMM B', launched at 6, runs 320-370.
    """
    tb = TraceBuilder(rank=rank, world_size=2)
    tb.step(1, 0, 200)
    if rank == 0:
        tb.launch(GEMM, launch_ts=0, start=10, dur=100)
        tb.launch(NCCL, launch_ts=120, start=130, dur=190, stream=16)
        tb.launch(GEMM, launch_ts=125, start=320, dur=50)
    else:
        tb.launch(GEMM, launch_ts=0, start=10, dur=280)
        tb.launch(NCCL, launch_ts=5, start=300, dur=20, stream=16, launch_dur=0.5)
        tb.launch(GEMM, launch_ts=6, start=320, dur=50, launch_dur=0.5)
    t = load_trace(str(tb.write(tmp_path / f"rank{rank}.json")))
    return replay_rank(t, find_steps(t)), t


def test_a_faster_late_rank_moves_the_early_ranks_wait(tmp_path: Path) -> None:
    (r0, t0), (r1, t1) = _rank(tmp_path, 0), _rank(tmp_path, 1)
    jr, why = match([r0, r1], [t0, t1])
    assert jr is not None, why
    # the recording: both steps end with GEMM B at 370; the transfer is the shortest copy, 20
    assert [s.tolist() for s in jr.step_times()] == [[370.0], [370.0]] and jr.transfer_us.tolist() == [20.0]
    # rank 1's A' takes 140 instead of 280: it ends at 150, its all-to-all starts at 150 + 10 = 160 and, rank 0
    # having arrived at 130, ends at max(130, 160) + 20 = 180 on both ranks; B and B' run 180-230.
    dur = r1.graph.act_dur_us.copy()
    dur[dur == 280.0] = 140.0
    fixed = jr.step_times([None, Scenario("faster A'", act_dur_us=dur)])
    assert [s.tolist() for s in fixed] == [[230.0], [230.0]]
    # replayed alone, rank 0 does not see it: its all-to-all keeps its recorded 190 µs wait
    assert r0.step_times().tolist() == [370.0]


def test_a_late_rank_bounds_the_early_ranks_fix(tmp_path: Path) -> None:
    (r0, t0), (r1, t1) = _rank(tmp_path, 0), _rank(tmp_path, 1)
    jr, _ = match([r0, r1], [t0, t1])
    assert jr is not None
    # rank 0's A takes 10 instead of 100: its all-to-all still cannot end before rank 1 arrives (300) + 20 = 320,
    # so nothing moves
    dur = r0.graph.act_dur_us.copy()
    dur[dur == 100.0] = 10.0
    assert [s.tolist() for s in jr.step_times([Scenario("faster A", act_dur_us=dur), None])] == [[370.0], [370.0]]


def test_unmatched_collectives_are_refused(tmp_path: Path) -> None:
    (r0, t0), _ = _rank(tmp_path, 0), None
    tb = TraceBuilder(rank=1, world_size=2)
    tb.step(1, 0, 200)
    tb.launch(GEMM, launch_ts=0, start=10, dur=280)
    t1 = load_trace(str(tb.write(tmp_path / "none.json")))
    jr, why = match([r0, replay_rank(t1, find_steps(t1))], [t0, t1])
    assert jr is None and "different numbers of collective kernels (1, 0)" in why


def _kernels(path: Path) -> dict[int, tuple[float, float]]:
    """correlation -> (start, end) of every kernel, read with json alone (µs)."""
    events = json.loads(path.read_text())["traceEvents"]
    return {
        e["args"]["correlation"]: (e["ts"], e["ts"] + e["dur"])
        for e in events
        if e.get("cat") == "kernel" and e.get("ph") == "X"
    }


def test_moe_1layer_reordered_all_to_all_against_the_after_trace() -> None:
    pair = SHARED / "ykcai__a100x2_moe_1layer_before"
    if not pair.exists():
        pytest.skip(f"needs {pair} (../shared/traces, see its README)")
    before = _kernels(pair / "rank0.pt.trace.json")
    after = _kernels(SHARED / "ykcai__a100x2_moe_1layer_after" / "rank0.pt.trace.json")
    # rank 0's backward tail, from the input-gradient matmul (cutlass, corr 341 before / 1498 after) to the end of
    # the last all-to-all and of the weight-gradient matmul + bias sum it was moved in front of (357, 370 before;
    # 1568, 1583 after): 8,462.1 -> 8,502.8 (A2A 398 last) before, 6,027.8 -> 6,056.7 after: about 11.8 µs saved
    seg_before = max(before[c][1] for c in (357, 370, 398)) - before[341][0]
    seg_after = max(after[c][1] for c in (1568, 1583, 1530)) - after[1498][0]
    measured = seg_before - seg_after
    assert 11.0 < measured < 12.5
    ts = [load_trace(str(pair / f"rank{r}.pt.trace.json")) for r in (0, 1)]
    rrs = [replay_rank(t, find_steps(t)) for t in ts]
    jr, why = match(rrs, ts)
    assert jr is not None, why
    ws = [issue_collectives_early(rr, t) for rr, t in zip(rrs, ts)]
    base, fixed = jr.replay(), jr.replay([w.scenario for w in ws])
    last = int(jr.coll[0][-1])
    predicted = float(base[0].act_end_us[last] - fixed[0].act_end_us[last])
    assert abs(predicted - measured) <= 0.25 * measured
    # the step itself does not move: the AccumulateGrad add_ after it is launched 10.7 ms later (its first launch)
    assert jr.step_times([w.scenario for w in ws])[0].tolist() == pytest.approx(rrs[0].recorded_step_us.tolist())


def _backward_tail(tmp_path: Path) -> tuple:
    """One rank, one step (host [0, 50), record_shapes): on stream 7 the input-gradient matmul A (8×4 @ 4×16 →
    (8, 16)) runs 10-110, the weight-gradient matmul B (16×8 @ 8×32 → (16, 32)) 110-210; the all-to-all of A's
    output (8, 16), launched after B on stream 16, waits for B and runs 210-310; matmul C consumes its output:
    310-360. The recorded step ends at 360."""
    tb = TraceBuilder(rank=0, world_size=1)
    tb.step(1, 0, 50)
    kernels = [
        ("aten::mm", [[8, 4], [4, 16]], GEMM, 10, 100, 7),
        ("aten::mm", [[16, 8], [8, 32]], GEMM, 110, 100, 7),
        ("record_param_comms", [[8, 16]], NCCL, 210, 100, 16),
        ("aten::mm", [[8, 16], [16, 4]], GEMM, 310, 50, 7),
    ]
    for i, (op, dims, kernel, start, dur, stream) in enumerate(kernels):
        tb.cpu_op(op, 1 + i, 0.8, input_dims=dims, external_id=11 + i)
        tb.launch(kernel, 1.1 + i, start, dur, stream=stream, launch_dur=0.5, extra={"External id": 11 + i})
    t = load_trace(str(tb.write(tmp_path / "tail.json")))
    return replay_rank(t, find_steps(t)), t


def test_issue_collectives_early_moves_the_all_to_all_behind_its_producer(tmp_path: Path) -> None:
    rr, t = _backward_tail(tmp_path)
    assert rr.step_times().tolist() == [360.0]
    # B's output (16, 32) is not the all-to-all's input (8, 16): passed over; A's is: the all-to-all waits for A
    # only and runs 110-210 beside B (110-210); C, which needs it, runs 210-260: 100 µs (B's time) saved
    w = issue_collectives_early(rr, t)
    assert rr.step_times(w.scenario).tolist() == [260.0] and w.assumption.startswith("1 collective(s) issued")
    # overlap-communication (PD301's what-if) instead lets C run without the all-to-all's output: C 210-260 after
    # B, the all-to-all still 210-310, so the step ends at 310 (50 µs saved), with C reading data not yet there
    from perfdoctor.replay.transforms.kernels import overlap_communication

    assert rr.step_times(overlap_communication(rr, t).scenario).tolist() == [310.0]
