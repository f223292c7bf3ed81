"""PD302 accumulation-without-no-sync: CPU-only TraceBuilder traces without any DDP annotation (numbers worked out
by hand, µs), and real 2-rank DDP runs of examples/mlp.py (gloo on CPU) shared through tests/examples_runs.py."""

from examples_runs import example, faster, profile, quiet_machine, real_run  # noqa: F401 (a fixture)
from rules_helpers import run_tb
from tracebuilder import TraceBuilder

BW = "autograd::engine::evaluate_function: "


def _accumulation(synced: list[bool], logged_loss: bool = False, finalize: bool = False) -> TraceBuilder:
    """One 9,000 µs optimizer step of 4 micro-batches at b = 100, 2,100, 4,100, 6,100 µs, no DDP annotation.

    Each micro-batch: a forward op (b, 200 µs), a backward pass of three autograd nodes (AddmmBackward0 at b+300 for
    300 µs, AccumulateGrad at b+600 for 600 µs, TBackward0 at b+1,300 for 50 µs); a synced pass issues one bucket's
    ``c10d::allreduce_`` inside AccumulateGrad (b+650, 500 µs) whose gloo work runs on thread 200 (b+660, 480 µs).
    ``logged_loss``: an all-reduce of the loss after each forward, outside backward (b+210, 40 µs). ``finalize``: a
    synced pass ends with DDP's bucket copy (``copy_bucket_to_grad``, b+1,500, 20 µs) after the host waited for its
    all-reduce outside any op from the pass's end (b+1,350).
    Then ``Optimizer.step`` (8,200, 500 µs).
    """
    tb = TraceBuilder(device_name=None)
    tb.step(1, 0, 9000)
    for j, sync in enumerate(synced):
        b = 100 + 2000 * j
        tb.cpu_op("aten::addmm", b, 200)
        if logged_loss:
            tb.cpu_op("c10d::allreduce_", b + 210, 40)
        tb.cpu_op(BW + "AddmmBackward0", b + 300, 300)
        tb.cpu_op(BW + "torch::autograd::AccumulateGrad", b + 600, 600)
        if sync:
            tb.cpu_op("c10d::allreduce_", b + 650, 500)
            tb.annotation("gloo:all_reduce", b + 660, 480, tid=200)
            if finalize:
                tb.cpu_op("torch.distributed.ddp.reducer::copy_bucket_to_grad", b + 1500, 20)
        tb.cpu_op(BW + "TBackward0", b + 1300, 50)
    tb.annotation("Optimizer.step#SGD.step", 8200, 500)
    return tb


def test_pd302_fires_from_the_backward_passes_without_ddp_annotations(tmp_path):
    r = run_tb(_accumulation([True] * 4), tmp_path, ["PD302"])
    f = r.findings["PD302"]
    ev = f["evidence"]
    assert ev["micro_batches_per_update"] == 4 and ev["allreduce_sets_per_update"] == 4
    assert ev["allreduce_calls_per_update"] == 4 and ev["early_allreduce_calls_per_update"] == 3
    # gloo work before the last micro-batch's backward (6,400 µs): 3 x 480 µs
    assert ev["early_allreduce_ms"] == 1.44
    # replayed: the three early calls' 3 x 500 µs of host time leave the 9,000 µs step
    assert abs(f["saving_us_per_step"] - 1500) < 1e-6
    assert "backward graph" in f["message"]


def test_pd302_replay_removes_the_wait_after_each_early_backward(tmp_path):
    # each early pass also loses its finalize: from its end (b+1,350) to its bucket copy's end (b+1,520), 170 µs;
    # with the 500 µs call: 3 x 670 = 2,010 µs per step. The last pass keeps its call, wait and copy.
    r = run_tb(_accumulation([True] * 4, finalize=True), tmp_path, ["PD302"])
    assert abs(r.findings["PD302"]["saving_us_per_step"] - 2010) < 1e-6


def test_pd302_silent_with_no_sync_and_a_logged_loss(tmp_path):
    # only the last micro-batch all-reduces its gradients; the per-micro-batch loss all-reduce is outside backward
    r = run_tb(_accumulation([False, False, False, True], logged_loss=True), tmp_path, ["PD302"])
    assert "PD302" in r.passed
    m = r.metrics("PD302")
    assert m["micro_batches_per_update"] == 4 and m["allreduce_calls_per_update"] == 1
    assert m["early_allreduce_calls_per_update"] == 0


def test_pd302_skipped_without_all_reduce(tmp_path):
    r = run_tb(_accumulation([False] * 4), tmp_path, ["PD302"])
    assert "not a data-parallel" in r.skipped["PD302"]


@real_run
def test_pd302_fires_on_grad_accum_without_no_sync():
    slow = profile("ddp_sync", ["--ddp", "--grad-accum", "4", "--sync-every-microbatch"], steps=20)
    f = slow[0]["PD302"]
    ev = f["evidence"]
    # mlp's DDP buckets: 2 per backward pass, so 4 x 2 calls per optimizer step, 3 x 2 before the last micro-batch
    assert ev["micro_batches_per_update"] == 4 and ev["allreduce_sets_per_update"] == 4
    assert ev["allreduce_calls_per_update"] == 8 and ev["early_allreduce_calls_per_update"] == 6
    assert f["saving_us_per_step"] > 0 and "no_sync" in f["saving_method"] + f["method"]


@example
def test_pd302_fix_is_faster():
    slow = profile("ddp_sync", ["--ddp", "--grad-accum", "4", "--sync-every-microbatch"], steps=20)
    fixed = profile("ddp_nosync", ["--ddp", "--grad-accum", "4"], steps=20)
    faster(slow, fixed, "PD302 all-reduce every micro-batch")


@real_run
def test_pd302_silent_with_no_sync_on_the_micro_batches():
    fixed = profile("ddp_nosync", ["--ddp", "--grad-accum", "4"], steps=20)
    assert "PD302" not in fixed[0]
