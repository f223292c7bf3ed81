"""Every rule: a positive and a negative synthetic case, answers worked out by hand (µs)."""

import pytest
from rules_helpers import ADD, DL, HGEMM, NCCL, SGEMM, run_rules, run_tb
from tracebuilder import TraceBuilder

# -- PD101 dataloader-starvation -------------------------------------------------

def test_pd101_fires_when_device_waits_on_dataloader(tmp_path):
    tb = TraceBuilder()
    tb.step(1, 0, 1000)
    tb.annotation(DL, 0, 400)
    tb.launch(SGEMM, launch_ts=410, start=420, dur=480)  # [420, 900)
    r = run_tb(tb, tmp_path, ["PD101"])
    f = r.findings["PD101"]
    # replayed with the fetch a hand-off: the launch moves from 410 to 10, the kernel runs [20, 500), the host
    # annotation ends at 600: 1000 -> 600 (the 20 µs of launch after the fetch were never the DataLoader's)
    assert f["saving_us_per_step"] == 400
    assert f["saving_pct_of_step"] == 40.0
    assert f["severity"] == "high"
    assert f["steps"] == [1]
    assert "420" not in f["message"] and "0.4 ms" in f["message"]
    assert f["evidence"]["fetches_per_step"] == 1.0


def test_pd101_silent_when_fetch_is_short(tmp_path):
    tb = TraceBuilder()
    tb.step(1, 0, 1000)
    tb.annotation(DL, 0, 10)
    tb.launch(SGEMM, launch_ts=12, start=20, dur=970)
    r = run_tb(tb, tmp_path, ["PD101"])
    assert "PD101" in r.passed
    # replayed: the kernel runs [10, 980), the annotation ends at 990
    assert r.metrics("PD101")["dataloader_wait_us"] == 10


def test_pd101_skipped_without_dataloader_events(tmp_path):
    tb = TraceBuilder()
    tb.step(1, 0, 1000)
    tb.launch(SGEMM, launch_ts=12, start=20, dur=970)
    r = run_tb(tb, tmp_path, ["PD101"])
    assert "DataLoader" in r.skipped["PD101"]


def test_pd101_skipped_without_profiler_steps(tmp_path):
    tb = TraceBuilder()
    tb.annotation(DL, 0, 400)
    tb.launch(SGEMM, launch_ts=410, start=420, dur=480)
    r = run_tb(tb, tmp_path, ["PD101"])
    assert "ProfilerStep" in r.skipped["PD101"]


# -- PD102 pageable-h2d-copy --------------------------------------------------------

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
    assert "(1 per step, 8.4 MB)" in f["message"] and "hold the host up to 0.30 ms" in f["message"]
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
    # the annotation ends at 1207: the step ends with the kernel. Each finding claims it; they are not additive
    assert r.findings["PD401"]["saving_us_per_step"] == pytest.approx(599)
    assert r.findings["PD102"]["saving_us_per_step"] == pytest.approx(599.96)
    assert r.findings["PD401"]["evidence"]["syncs_per_step"] == 1


def test_pd102_silent_on_pinned_copy(tmp_path):
    r = run_tb(_copy_trace("HtoD (Pinned -> Device)"), tmp_path, ["PD102"])
    assert "PD102" in r.passed and r.metrics("PD102")["pageable_h2d_per_step"] == 0


# -- PD103 host-launch-bound ---------------------------------------------------------

def _launch_trace(kernel_dur, spacing=30):
    tb = TraceBuilder()
    tb.step(1, 0, 1000)
    tb.cpu_op("aten::add", 0, 1000)  # the host is busy the whole step
    for i in range(30):
        t = 10 + spacing * i
        tb.launch(ADD, launch_ts=t, start=t + 12, dur=kernel_dur, launch_dur=10)
    return tb


def test_pd103_fires_on_tiny_kernels(tmp_path):
    r = run_tb(_launch_trace(2), tmp_path, ["PD103"])
    f = r.findings["PD103"]
    # replayed as one CUDA graph: host time [20, 890) between the first launch (+10 µs graph launch) and the last
    # launch's end goes, the annotation ends at 130, the kernels (2 µs each) end before it
    assert f["saving_us_per_step"] == 870
    assert f["evidence"]["short_kernel_pct"] == 100
    assert f["evidence"]["kernels_per_step"] == 30
    assert f["evidence"]["median_launch_gap_us"] == 30 and f["evidence"]["median_launch_us"] == 10


def test_pd103_fires_when_op_overhead_between_launches_outlasts_kernels(tmp_path):
    # kernels (16 µs) outlast their launch call (10 µs) but not the host's 30 µs between launches:
    # the queue drains (A100 DDP trace: 16 µs kernels, 10 µs launches, 172 µs between launches)
    r = run_tb(_launch_trace(16), tmp_path, ["PD103"])
    f = r.findings["PD103"]
    # as one CUDA graph: the 30 kernels queue back to back from 22: [22, 502); the annotation ends at 130
    assert f["saving_us_per_step"] == 1000 - 502
    assert f["evidence"]["short_kernel_pct"] == 100


def test_pd103_silent_when_kernels_outlast_the_host_between_launches(tmp_path):
    # launches every 20 µs, kernels of 25 µs: the device never waits between kernels; the idle before the
    # first and after the last kernel is there, but it is not a stream of kernels the host cannot feed
    r = run_tb(_launch_trace(25, spacing=20), tmp_path, ["PD103"])
    assert "PD103" in r.passed
    m = r.metrics("PD103")
    assert m["short_kernel_share"] == 0 and m["launch_idle_us"] == 1000 - (10 + 20 * 29 + 12 + 25 - 22)


# -- PD202 unfused-elementwise -------------------------------------------------------

def _elementwise_trace(extra=None):
    tb = TraceBuilder()
    tb.step(1, 0, 1000)
    for i in range(40):
        tb.launch(ADD, launch_ts=1 + 24 * i, start=10 + 24 * i, dur=20, launch_dur=1)
    if extra:
        tb.launch(extra, launch_ts=970, start=975, dur=5, launch_dur=1)
    return tb


def test_pd202_fires_on_many_short_elementwise_kernels(tmp_path):
    r = run_tb(_elementwise_trace(), tmp_path, ["PD202"])
    f = r.findings["PD202"]
    assert f["evidence"]["elementwise_pct"] == 80.0
    assert f["saving_us_per_step"] == 400  # 800 µs × max_fused_fraction 0.5
    assert f["evidence"]["elementwise_per_step"] == 40


def test_pd202_silent_when_compiled(tmp_path):
    r = run_tb(_elementwise_trace(extra="triton_poi_fused_add_mul_0"), tmp_path, ["PD202"])
    assert "PD202" in r.passed and r.metrics("PD202")["compiled"] == 1.0


# -- PD203 fp32-matmul-without-tensor-cores -------------------------------------------

def _gemm_trace(name, device_name, cc, sms=80, memory=34_089_730_048):
    tb = TraceBuilder(device_name=device_name, compute_capability=cc, total_memory=memory)
    tb.meta["deviceProperties"][0]["numSms"] = sms
    tb.step(1, 0, 1000)
    tb.launch(name, launch_ts=5, start=100, dur=600)
    return tb


def test_pd203_fires_on_v100_with_fp16_advice(tmp_path):
    from perfdoctor.analysis.hardware import match_device

    tb = _gemm_trace(SGEMM, "Tesla V100-SXM2-32GB", (7, 0))
    r = run_tb(tb, tmp_path, ["PD203"])
    f = r.findings["PD203"]
    spec = match_device(tb.meta["deviceProperties"][0])
    ratio = min(spec.peak("fp16") / spec.peak("fp32"), 8.0) if spec else 2.0
    assert f["saving_us_per_step"] == pytest.approx(600 * (1 - 1 / ratio), abs=1e-3)
    assert "float16" in f["message"] and "GradScaler" in f["message"]
    assert "set_float32_matmul_precision" not in f["message"] and "bfloat16" not in f["message"]
    assert f["evidence"]["events"][0]["name"] == SGEMM


def test_pd203_advice_on_a100_is_bf16_or_tf32(tmp_path):
    tb = _gemm_trace("ampere_sgemm_128x64_tn", "NVIDIA A100-SXM4-80GB", (8, 0), sms=108, memory=85_899_345_920)
    f = run_tb(tb, tmp_path, ["PD203"]).findings["PD203"]
    assert "bfloat16" in f["message"] and "set_float32_matmul_precision" in f["message"]


def test_pd203_silent_on_tensor_core_kernels(tmp_path):
    r = run_tb(_gemm_trace(HGEMM, "Tesla V100-SXM2-32GB", (7, 0)), tmp_path, ["PD203"])
    assert "PD203" in r.passed and r.metrics("PD203")["fp32_gemm_us"] == 0


def test_pd203_silent_without_tensor_cores(tmp_path):
    r = run_tb(_gemm_trace(SGEMM, "Quadro GP100", (6, 0), sms=56), tmp_path, ["PD203"])
    assert "PD203" in r.passed and r.metrics("PD203")["fp32_gemm_us"] == 600


def test_pd203_skipped_on_amd(tmp_path):
    r = run_tb(_gemm_trace("Cijk_Alik_Bljk_SB_MT64x16x32", "AMD Instinct MI300X", (9, 4)), tmp_path, ["PD203"])
    assert "AMD" in r.skipped["PD203"]


# -- PD205 unfused-optimizer ----------------------------------------------------------

def _optimizer_trace(kernels, cls="SGD"):
    tb = TraceBuilder()
    tb.step(1, 0, 1000)
    tb.launch(SGEMM, launch_ts=5, start=10, dur=200)  # [10, 210)
    tb.annotation(f"Optimizer.step#{cls}.step", 300, 600)  # [300, 900)
    for i, name in enumerate(kernels):
        t = 305 + 9 * i
        tb.launch(name, launch_ts=t, start=t + 2, dur=1, launch_dur=5)
    return tb


def test_pd205_fires_on_per_parameter_kernels(tmp_path):
    r = run_tb(_optimizer_trace([ADD] * 60), tmp_path, ["PD205"])
    f = r.findings["PD205"]
    # replayed with a fused step: Optimizer.step [300, 900) keeps 10 launches × 5 µs, [350, 900) goes; its
    # kernels (1 µs each) end before the annotation, which now ends at 450: 1000 -> 450
    assert f["saving_us_per_step"] == 550
    assert f["evidence"]["optimizer_kernels_per_step"] == 60


def test_pd205_advice_names_the_optimizer_in_the_trace(tmp_path):
    f = run_tb(_optimizer_trace([ADD] * 60), tmp_path, ["PD205"]).findings["PD205"]
    assert f["message"].startswith("SGD.step launches 60 small kernels")
    assert f["message"].endswith("use torch.optim.SGD(..., foreach=True) or fused=True")
    assert f["evidence"]["optimizer"] == "SGD"
    assert "torch.optim.SGD(params, ..., foreach=True)" in f["fix"] and "AdamW" not in f["fix"]
    assert f["example_after"] == "opt = torch.optim.SGD(model.parameters(), lr=1e-3, fused=True)\n"


@pytest.mark.parametrize("cls, after", [("RMSprop", "foreach=True"), ("AdamW", "fused=True")])
def test_pd205_offers_fused_only_where_the_class_has_it(tmp_path, cls, after):
    import inspect

    torch = pytest.importorskip("torch")
    f = run_tb(_optimizer_trace([ADD] * 60, cls), tmp_path, ["PD205"]).findings["PD205"]
    assert f["example_after"].endswith(f"lr=1e-3, {after})\n") and f"torch.optim.{cls}(" in f["fix"]
    has_fused = "fused" in inspect.signature(getattr(torch.optim, cls)).parameters
    assert ("fused=True" in f["message"]) is has_fused


def test_pd205_silent_with_foreach_kernel(tmp_path):
    name = "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<TensorListMetadata<4> >(int)"
    r = run_tb(_optimizer_trace([name]), tmp_path, ["PD205"])
    assert "PD205" in r.passed and r.metrics("PD205")["multi_tensor_share"] == 1.0


# -- PD301 exposed-communication ----------------------------------------------------------

def _comm_trace(overlap):
    tb = TraceBuilder()
    tb.step(1, 0, 1000)
    tb.launch(NCCL, launch_ts=5, start=100, dur=400, stream=20)  # [100, 500)
    tb.launch(SGEMM, launch_ts=6, start=100 if overlap else 500, dur=400 if overlap else 300, stream=7)
    return tb


def test_pd301_fires_on_exposed_all_reduce(tmp_path):
    f = run_tb(_comm_trace(False), tmp_path, ["PD301"]).findings["PD301"]
    assert f["saving_us_per_step"] == 400 and f["evidence"]["overlap_pct"] == 0
    assert f["evidence"]["by_collective_ms"] == {"all_reduce": 0.4}


def test_pd301_silent_when_overlapped(tmp_path):
    r = run_tb(_comm_trace(True), tmp_path, ["PD301"])
    assert "PD301" in r.passed and r.metrics("PD301")["overlap_pct"] == 100


def test_pd301_skipped_without_collectives(tmp_path):
    tb = TraceBuilder()
    tb.step(1, 0, 1000)
    tb.launch(SGEMM, launch_ts=6, start=100, dur=400)
    assert "collective" in run_tb(tb, tmp_path, ["PD301"]).skipped["PD301"]


# -- PD303 straggler-rank ----------------------------------------------------------------

def _rank_trace(tmp_path, rank, compute_us, comm_us):
    tb = TraceBuilder(rank=rank, world_size=2)
    tb.step(1, 0, 1000)
    tb.launch(SGEMM, launch_ts=1, start=10, dur=compute_us)
    tb.launch(NCCL, launch_ts=2, start=900 - comm_us, dur=comm_us, stream=20)
    return tb.write(tmp_path / f"rank{rank}.json")


def test_pd303_fires_on_straggler(tmp_path):
    paths = [_rank_trace(tmp_path, 0, 190, 700), _rank_trace(tmp_path, 1, 790, 100)]
    f = run_rules(paths, ["PD303"]).findings["PD303"]
    # own work: rank 0 1000-700 = 300, rank 1 1000-100 = 900
    assert f["evidence"]["straggler"] == 1 and f["evidence"]["ranks"] == [1]
    assert f["saving_us_per_step"] == 600 and f["saving_pct_of_step"] == 60


def test_pd303_silent_when_balanced(tmp_path):
    paths = [_rank_trace(tmp_path, 0, 190, 700), _rank_trace(tmp_path, 1, 190, 700)]
    r = run_rules(paths, ["PD303"])
    assert "PD303" in r.passed


def test_pd303_skipped_on_single_rank(tmp_path):
    r = run_rules([_rank_trace(tmp_path, 0, 190, 700)], ["PD303"])
    assert "single rank" in r.skipped["PD303"]


# -- PD401 host-device-sync ------------------------------------------------------------------

def _sync_trace(with_sync):
    tb = TraceBuilder()
    tb.step(1, 0, 1000)
    tb.launch(SGEMM, launch_ts=5, start=10, dur=490)  # [10, 500)
    tb.cpu_op("aten::item", 15, 500)
    if with_sync:
        tb.runtime("cudaStreamSynchronize", 20, 490)  # [20, 510)
    tb.launch(SGEMM, launch_ts=700, start=710, dur=200)  # [710, 910)
    return tb


def test_pd401_fires_on_sync(tmp_path):
    f = run_tb(_sync_trace(True), tmp_path, ["PD401"]).findings["PD401"]
    # replayed without the sync: 490 µs of host time go, the second kernel launches at 210 and queues behind the
    # first: [500, 700); the annotation ends at 510: 1000 -> 700
    assert f["saving_us_per_step"] == 300
    assert f["evidence"]["syncs_per_step"] == 1
    assert f["evidence"]["events"][0]["name"].endswith("cudaStreamSynchronize")


def test_pd401_silent_without_sync(tmp_path):
    r = run_tb(_sync_trace(False), tmp_path, ["PD401"])
    assert "PD401" in r.passed and r.metrics("PD401")["idle_us"] == 0


def test_pd401_leaves_pageable_copy_syncs_to_pd102(tmp_path):
    tb = TraceBuilder()
    tb.step(1, 0, 1000)
    tb.cpu_op("aten::copy_", 5, 400)
    tb.memcpy(launch_ts=10, start=20, dur=80, launch_dur=20)
    tb.runtime("cudaStreamSynchronize", 35, 300)
    tb.launch(SGEMM, launch_ts=420, start=430, dur=500)
    r = run_tb(tb, tmp_path, ["PD401", "PD102"])
    assert r.metrics("PD401")["idle_us"] == 0
    # replayed pinned and non_blocking: the copy call keeps a 5 µs launch, [15, 30) and the sync [35, 335) go
    # (315 µs); the kernel launches at 105, runs [115, 615); the annotation ends at 685
    assert r.findings["PD102"]["saving_us_per_step"] == 315


# -- PD501 allocator-stall ------------------------------------------------------------------

def _alloc_trace(call, steps_with_call):
    tb = TraceBuilder()
    for n in range(3):
        s = 1000 * n
        tb.step(n + 1, s, 1000)
        tb.launch(SGEMM, launch_ts=s + 5, start=s + 10, dur=400)
        if n in steps_with_call:
            tb.runtime(call, s + 420, 300)
        tb.launch(SGEMM, launch_ts=s + 730, start=s + 740, dur=200)
    return tb


def test_pd501_fires_on_cudafree_in_steady_steps(tmp_path):
    f = run_tb(_alloc_trace("cudaFree", {1, 2}), tmp_path, ["PD501"]).findings["PD501"]
    # 300 µs of idle in each of steps 2 and 3, none in step 1: (0 + 300 + 300) / 3 per analysed step
    assert f["saving_us_per_step"] == 200
    assert f["evidence"]["allocator_calls_per_step"] == 1 and f["steps"] == [2, 3]


def test_pd501_silent_when_only_first_step_allocates(tmp_path):
    r = run_tb(_alloc_trace("cudaMalloc", {0}), tmp_path, ["PD501"])
    assert "PD501" in r.passed and r.metrics("PD501")["allocator_calls_per_step"] == 0


# -- PD502 memory-near-capacity ---------------------------------------------------------------

def _mem_trace(frac):
    tb = TraceBuilder(total_memory=80 * 2**30)
    tb.step(1, 0, 1000)
    tb.launch(SGEMM, launch_ts=5, start=10, dur=400)
    if frac is not None:
        tb.memory(100, 1 << 20, int(0.8 * frac * 80 * 2**30), int(frac * 80 * 2**30))
    return tb


def test_pd502_fires_near_capacity(tmp_path):
    f = run_tb(_mem_trace(0.95), tmp_path, ["PD502"]).findings["PD502"]
    assert f["evidence"]["peak_reserved_pct"] == pytest.approx(95.0)
    assert f["severity"] == "medium" and f["position"] is None and f["saving_method"] == ""


def test_pd502_silent_with_headroom(tmp_path):
    r = run_tb(_mem_trace(0.5), tmp_path, ["PD502"])
    assert "PD502" in r.passed and r.metrics("PD502")["peak_reserved_pct"] == pytest.approx(50.0)


def test_pd502_skipped_without_memory_events(tmp_path):
    assert "profile_memory" in run_tb(_mem_trace(None), tmp_path, ["PD502"]).skipped["PD502"]


# -- PD901 trace-quality ------------------------------------------------------------------------

def test_pd901_lists_what_is_missing_and_what_it_disabled(tmp_path):
    tb = TraceBuilder()
    tb.launch(SGEMM, launch_ts=5, start=10, dur=400)
    r = run_tb(tb, tmp_path, ["PD101", "PD901"])
    f = r.findings["PD901"]
    assert any("ProfilerStep" in x for x in f["evidence"]["lacks"])
    assert "PD101" in f["evidence"]["disabled_checks"] and "PD101" in r.skipped
    assert f["severity"] == "low"


def test_pd901_silent_on_complete_trace(tmp_path):
    tb = TraceBuilder()
    for n in range(3):
        tb.step(n + 1, 1000 * n, 1000)
        tb.cpu_op("aten::mm", 1000 * n + 1, 50, input_dims=[[64, 64], [64, 64]])
        tb.launch(SGEMM, launch_ts=1000 * n + 5, start=1000 * n + 10, dur=400)
    tb.memory(100, 1 << 20, 1 << 30, 2 << 30)
    r = run_tb(tb, tmp_path, ["PD901"])
    assert "PD901" in r.passed


# -- PD304 collective-wait / PD301 without the wait ------------------------------------

def _two_ranks(tmp_path):
    """Two ranks, one 2000 µs step each, compute then one all-reduce. Rank 1 computes 800 µs longer, so
    rank 0's all-reduce (launched at 500) runs until rank 1 arrives: 1200 µs on rank 0, 400 µs on rank 1."""
    paths = []
    for rank, (compute, coll_start, coll_dur) in enumerate([(400, 500, 1200), (1200, 1300, 400)]):
        tb = TraceBuilder(rank=rank, world_size=2)
        tb.step(1, 0, 2000)
        tb.cpu_op("aten::mm", 10, 20)
        tb.launch(SGEMM, launch_ts=20, start=50, dur=compute)
        tb.launch(NCCL, launch_ts=30, start=coll_start, dur=coll_dur)
        paths.append(tb.write(tmp_path / f"rank{rank}.json"))
    return paths


def test_pd304_names_the_waiting_rank_and_pd301_keeps_only_the_transfer(tmp_path):
    r = run_rules(_two_ranks(tmp_path), ["PD301", "PD304"])
    f = r.findings["PD304"]
    v = f["evidence"]
    # rank 0 waits 1200 − 400 = 800 µs, none of it overlapped by compute; rank 1 (the shortest copy) arrives last
    assert v["rank"] == 0 and v["wait_ms"] == pytest.approx(0.8) and v["last_rank"] == 1
    assert v["transfer_ms"] == pytest.approx(0.4) and f["saving_us_per_step"] == pytest.approx(800)
    # PD301 on rank 0: 1200 µs exposed, 800 of it waiting:
    # 400 µs of transfer (20% of the step) is what overlap could hide
    m = r.metrics("PD301", "0")
    assert m["wait_us"] == pytest.approx(800) and m["exposed_us"] == pytest.approx(400)


def test_pd304_skipped_when_the_ranks_collectives_do_not_match(tmp_path):
    paths = _two_ranks(tmp_path)
    tb = TraceBuilder(rank=1, world_size=2)
    tb.step(1, 0, 2000)
    tb.launch(NCCL, launch_ts=30, start=1300, dur=200)
    tb.launch(NCCL, launch_ts=40, start=1600, dur=200)  # two collectives on rank 1, one on rank 0
    tb.write(paths[1])
    r = run_rules(paths, ["PD304"])
    assert "different numbers of collective kernels" in r.skipped["PD304"]


def test_idle_inside_cudafree_is_named_and_not_launch_overhead(tmp_path):
    tb = _launch_trace(2)                 # 30 tiny kernels, the host busy the whole 1000 µs step
    tb.runtime("cudaFree", 950, 40)       # ...and inside cudaFree for the last 40 µs
    path = tb.write(tmp_path / "free.json")
    r = run_rules([path], ["PD103"])
    # a CUDA graph removes the launch host time [20, 890), not the cudaFree at 950: same saving as without it
    assert r.findings["PD103"]["saving_us_per_step"] == 870
    big = TraceBuilder()
    big.step(1, 0, 1000)
    big.cpu_op("aten::empty", 0, 1000)
    big.launch(ADD, launch_ts=10, start=20, dur=100)
    big.runtime("hipFree", 130, 800)      # 800 of the 900 µs 'host busy' idle (0–20, 120–1000) inside hipFree
    from perfdoctor import pipeline

    dev = pipeline.analyze_paths([str(big.write(tmp_path / "hipfree.json"))]).ranks[0].primary
    assert dev.notes == ["89% of the idle charged to 'host busy, nothing queued' (0.8 ms) is spent inside hipFree "
                         "calls: a blocking runtime call, not launch overhead"]
    assert "PD103" in run_rules([tmp_path / "hipfree.json"], ["PD103"]).passed


def test_gpu_trace_without_its_device_side_is_not_cpu_training(tmp_path):
    tb = TraceBuilder()                   # lists an A100
    tb.step(1, 0, 1000)
    for i in range(40):                   # many small host ops, each launching a kernel the trace never recorded
        tb.cpu_op("aten::add", 10 + 20 * i, 15)
        tb.runtime("cudaLaunchKernel", 12 + 20 * i, 5)
    path = tb.write(tmp_path / "nodev.json")
    r = run_rules([path], ["PD105", "PD202", "PD204"])
    assert not r.findings
    assert r.skipped["PD202"].startswith("the trace lists GPUs or holds CUDA/HIP launch calls but no GPU activity")
    assert "not CPU-only training" in r.skipped["PD105"] and "not CPU-only training" in r.skipped["PD204"]
    from perfdoctor import pipeline
    from perfdoctor.render import view

    report = pipeline.build([str(path)]).report
    facts = {label: value for label, value, _ in view.summary_facts(report)}
    assert facts["devices"].startswith("no GPU activity recorded, although the trace lists NVIDIA A100-SXM4-80GB")
    assert "host ops only" in view.device_name(report["ranks"][0], -1)


def test_pd304_refuses_pairs_that_do_not_end_together_or_a_partial_job(tmp_path):
    paths = _two_ranks(tmp_path)
    # two collectives each; rank 1's first ends at 1400, rank 0's at 1700, the second ones both at 1850: no one
    # clock offset lines both pairs up, so the first pair is two different collectives
    for rank, first in ((0, (500, 1200)), (1, (1300, 100))):
        tb = TraceBuilder(rank=rank, world_size=2)
        tb.step(1, 0, 2000)
        tb.launch(NCCL, launch_ts=30, start=first[0], dur=first[1])
        tb.launch(NCCL, launch_ts=40, start=1750, dur=100)
        tb.write(paths[rank])
    assert "do not end together" in run_rules(paths, ["PD304"]).skipped["PD304"]
    for rank in (0, 1):                                   # the same two ranks, from a 128-rank job
        tb = TraceBuilder(rank=rank, world_size=128)
        tb.step(1, 0, 2000)
        tb.launch(NCCL, launch_ts=30, start=500 + 800 * rank, dur=1200 - 800 * rank)
        tb.write(paths[rank])
    assert "the job has 128 ranks but 2 traces were given" in run_rules(paths, ["PD304"]).skipped["PD304"]
