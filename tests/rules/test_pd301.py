"""PD301 exposed-communication: a firing and a silent case (and skips), answers worked out by hand (µs).

Moved from tests/test_rules_synthetic.py (issue 9: one test file per rule).
"""

from rules_helpers import NCCL, SGEMM, run_tb
from tracebuilder import TraceBuilder


def _comm_trace(overlap):
    tb = TraceBuilder()
    tb.step(1, 0, 1000)
    tb.launch(NCCL, launch_ts=5, start=100, dur=400, stream=20)  # [100, 500)
    tb.launch(SGEMM, launch_ts=6, start=100 if overlap else 500, dur=400 if overlap else 300, stream=7)
    return tb


def test_pd301_fires_on_exposed_all_reduce(tmp_path):
    tb = TraceBuilder()
    tb.step(1, 0, 50)  # the host is done at 50: the device work decides the step, [0, 800)
    tb.launch(NCCL, launch_ts=5, start=100, dur=400, stream=20)  # [100, 500)
    tb.launch(SGEMM, launch_ts=6, start=500, dur=300, stream=7)  # [500, 800): waits for the all-reduce
    f = run_tb(tb, tmp_path, ["PD301"]).findings["PD301"]
    # replayed with the GEMM no longer waiting: it starts 95 µs after its launch (the device's launch latency,
    # from the all-reduce's), [101, 401); the all-reduce still ends at 500: 800 -> 500
    assert f["saving_us_per_step"] == 300 and f["evidence"]["overlap_pct"] == 0
    assert f["evidence"]["exposed_ms"] == 0.4 and f["evidence"]["by_collective_ms"] == {"all_reduce": 0.4}
    # an all-reduce only: data parallel, so the DDP advice and not FSDP's or the all-to-all's
    assert f["evidence"]["parallelism"] == "data parallel (all-reduce)"
    assert "bucket_cap_mb" in f["fix"] and "FSDP" not in f["fix"] and "DDP(" in f["example_after"]


def test_pd301_silent_when_the_host_decides_the_step(tmp_path):
    # 400 µs of exposed all-reduce, but the host annotation runs to 1000: overlapping it saves nothing
    r = run_tb(_comm_trace(False), tmp_path, ["PD301"])
    assert "PD301" in r.passed and r.metrics("PD301")["exposed_us"] == 400 and r.metrics("PD301")["saving_us"] == 0


def test_pd301_silent_when_overlapped(tmp_path):
    r = run_tb(_comm_trace(True), tmp_path, ["PD301"])
    assert "PD301" in r.passed and r.metrics("PD301")["overlap_pct"] == 100


def test_pd301_skipped_without_collectives(tmp_path):
    tb = TraceBuilder()
    tb.step(1, 0, 1000)
    tb.launch(SGEMM, launch_ts=6, start=100, dur=400)
    assert "collective" in run_tb(tb, tmp_path, ["PD301"]).skipped["PD301"]


def test_pd301_second_fix_issues_the_all_to_all_when_its_input_is_ready(tmp_path):
    """test_replay_joint's backward tail, its all-to-all named as Kineto names it: on stream 7 the input-gradient
    matmul A (8×4 @ 4×16 → (8, 16)) runs 10-110, the weight-gradient matmul B (16×8 @ 8×32) 110-210; the all-to-all
    of A's output (8, 16), launched after B, waits for B and runs 210-310; matmul C consumes it: 310-360."""
    tb = TraceBuilder(rank=0, world_size=1)
    tb.step(1, 0, 50)
    kernels = [
        ("aten::mm", [[8, 4], [4, 16]], SGEMM, 10, 100, 7, {}),
        ("aten::mm", [[16, 8], [8, 32]], SGEMM, 110, 100, 7, {}),
        ("record_param_comms", [[8, 16]], NCCL, 210, 100, 16, {"Collective name": "all_to_allv"}),
        ("aten::mm", [[8, 16], [16, 4]], SGEMM, 310, 50, 7, {}),
    ]
    for i, (op, dims, kernel, start, dur, stream, more) in enumerate(kernels):
        tb.cpu_op(op, 1 + i, 0.8, input_dims=dims, external_id=11 + i)
        tb.launch(kernel, 1.1 + i, start, dur, stream=stream, launch_dur=0.5, extra={"External id": 11 + i, **more})
    f = run_tb(tb, tmp_path, ["PD301"]).findings["PD301"]
    # the first fix (compute no longer waits for the collective): C runs 210-260 after B, the all-to-all still
    # 210-310: 360 -> 310, 50 µs. The second: the all-to-all waits for A only and runs 110-210 beside B, C 210-260:
    # 360 -> 260, 100 µs (at most the 100 µs of exposed collective time), with its assumption and source
    assert f["saving_alone_us_per_step"] == 50.0 and f["evidence"]["reorder_saving_ms"] == 0.1
    # the report's PD203 (FP32 GEMMs at the tensor-core floor) shortens the matmuls the collective waits on:
    # once it is in, neither reorder saves anything, so PD301 is off the plan with its saving alone beside it
    assert f["saving_us_per_step"] == 0.0 and f["plan_note"] == "no further saving once PD203 is fixed"
    assert "second fix: issue the all-to-all as soon as its input is ready: saves 0.10 ms per step" in f["message"]
    assert "1 collective(s) issued right after the op producing their input" in f["message"]
    assert "source: torch.compile/FX reordering of collectives" in f["message"]
    # record_param_comms names it an all_to_allv: the all-to-all's advice, not DDP's buckets or FSDP's prefetch
    assert f["evidence"]["parallelism"] == "all-to-all (expert or embedding parallel)"
    assert "async_op=True" in f["fix"] and "bucket_cap_mb" not in f["fix"] and "FSDP" not in f["fix"]
    assert "DDP" not in f["example_after"]


def test_pd301_advice_on_the_moe_all_to_all_job_is_not_ddp_or_fsdp(shared):
    """ykcai's 2×A100 MoE (3 layers, before): its collectives are all_to_allv (record_param_comms), run as NCCL
    send/recv kernels, and the job has no DistributedDataParallel annotation (PD302: "not a DDP run")."""
    from rules_helpers import run_rules

    path = shared("ykcai__a100x2_moe_3layer_before")
    r = run_rules(sorted(path.glob("*.json*")), ["PD301", "PD302"])
    f = r.findings["PD301"]
    assert "not a data-parallel (DDP) run" in r.skipped["PD302"]
    assert "all_to_allv" in f["evidence"]["messages"] and set(f["evidence"]["by_collective_ms"]) == {"send_recv"}
    assert f["evidence"]["parallelism"] == "all-to-all (expert or embedding parallel)"
    text = f["fix"] + f["example_before"] + f["example_after"]
    assert "bucket_cap_mb" not in text and "FSDP" not in text and "DDP" not in text
    assert "all_to_all_single" in f["example_after"]


def test_pd301_advice_follows_the_sharding_labels(tmp_path):
    """The all-reduce kernel alone would read as DDP; the labels say FSDP (fully_shard) or DeepSpeed ZeRO, so the
    advice is theirs and names no DDP knob."""
    for label, parallelism, word in (
        ("FSDP::post_backward_reduce (layers.0)", "sharded data parallel (all-gather / reduce-scatter)", "prefetch"),
        ("deepspeed/runtime/zero/stage3.py(1200): reduce_ready_partitions", "DeepSpeed ZeRO", "overlap_comm"),
    ):
        tb = TraceBuilder()
        tb.step(1, 0, 50)
        tb.annotation(label, 1, 4)
        tb.launch(NCCL, launch_ts=5, start=100, dur=400, stream=20)
        tb.launch(SGEMM, launch_ts=6, start=500, dur=300, stream=7)
        f = run_tb(tb, tmp_path, ["PD301"], name=f"{word}.json").findings["PD301"]
        assert f["evidence"]["parallelism"].startswith(parallelism)
        assert word in f["fix"] and "bucket_cap_mb" not in f["fix"]
