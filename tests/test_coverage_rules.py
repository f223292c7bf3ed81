"""Rules added or re-judged for issue 11 (PD103 on shares, PD902 cold start, PD305 host collectives), by hand (µs)."""

from rules_helpers import run_tb
from tracebuilder import TraceBuilder

ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float> >(int)"


def _few_kernels_trace():
    """16 kernels of 5 µs, one per 50 µs host op: the device waits for every launch."""
    tb = TraceBuilder()
    tb.step(1, 0, 1000)
    for i in range(16):
        tb.cpu_op("aten::add", 50 * i, 50)
        tb.launch(ADD, launch_ts=50 * i + 10, start=50 * i + 20, dur=5)
    return tb


def test_pd103_fires_with_few_kernels_per_step(tmp_path):
    f = run_tb(_few_kernels_trace(), tmp_path, ["PD103"]).findings["PD103"]
    # gaps while the host is busy in [0, 800): [0, 20) + 15 × 45 between kernels + [775, 800) = 720 µs (the
    # saving itself is the replayed CUDA-graph step's, replay's model)
    assert f["evidence"]["launch_idle_ms"] == 0.72 and f["saving_us_per_step"] > 0
    assert f["evidence"]["kernels_per_step"] == 16


def _cold_then_warm():
    """Step 1: 800 µs of Inductor compilation; steps 2-3 warm, each with one 100 µs convolution."""
    tb = TraceBuilder()
    for n in range(3):
        s = 1000 * n
        tb.step(n + 1, s, 1000)
        if n == 0:
            tb.annotation("compile_fx_inner (dynamo_timed)", s + 10, 800)
        tb.cpu_op("aten::convolution", s + 850, 100)
        tb.launch("volta_scudnn_128x64_relu_interior_nn_v1", launch_ts=s + 900, start=s + 910, dur=50)
    return tb


def test_leading_cold_step_is_left_out(tmp_path):
    from perfdoctor.analysis.steps import find_steps
    from perfdoctor.trace import load_trace

    s = find_steps(load_trace(str(_cold_then_warm().write(tmp_path / "t.json"))))
    assert s.numbers.tolist() == [2, 3]
    assert s.cold_dropped == [(1, 1000.0, 800.0)]
    assert any("left out: 0.8 of their 1.0 ms are first-call work" in w for w in s.warnings)
    r = run_tb(_cold_then_warm(), tmp_path, ["PD902"])
    f = r.findings["PD902"]
    assert f["evidence"]["n_cold_dropped"] == 1 and f["steps"] == [1]
    assert "torch.compile (Dynamo/Inductor) compilation 0.8 ms" in f["message"]  # what filled the step left out


def test_all_cold_skips_launch_and_sync_verdicts(tmp_path):
    tb = _few_kernels_trace()
    tb.cpu_op("aten::convolution", 900, 60)  # first call: 60 µs is under the 1 ms floor, not warm-up
    tb.annotation("OutputGraph.call_user_compiler (dynamo_timed)", 0, 600)
    r = run_tb(tb, tmp_path, ["PD103", "PD401", "PD902"])
    assert "first-call work (60% compilation" in r.skipped["PD103"] and "PD103" not in r.findings
    assert "PD401" in r.skipped
    f = r.findings["PD902"]
    assert f["evidence"]["warmup_ms"] == 0.6 and "torch.compile (Dynamo/Inductor) compilation 0.6 ms" in f["message"]


def test_first_call_outlier_is_warmup(tmp_path):
    import numpy as np

    from perfdoctor.analysis.warmup import warmup
    from perfdoctor.trace import load_trace

    tb = TraceBuilder()
    tb.cpu_op("aten::convolution", 0, 5000)  # cuDNN algorithm search in the first call
    tb.cpu_op("aten::convolution", 6000, 400)
    tb.cpu_op("aten::convolution", 7000, 500)
    tb.cpu_op("aten::to", 8000, 3000)  # one call only: nothing to compare with
    w = warmup(load_trace(str(tb.write(tmp_path / "t.json"))), np.array([0.0]), np.array([30000.0]))
    assert w.first_call_ops == ["aten::convolution"] and w.by_kind_us["first_call"] == 5000
    assert w.per_window_us.tolist() == [5000.0] and not w.cold[0]  # 5000 / 30000 < 25%


def test_pd103_silent_when_host_idle_lies_outside_the_launch_stream(tmp_path):
    tb = TraceBuilder()
    tb.step(1, 0, 3000)
    tb.cpu_op("aten::nonzero", 0, 2500)  # long host work before any launch: not a launch rate problem
    for i in range(4):
        tb.launch(ADD, launch_ts=2400 + 20 * i, start=2405 + 20 * i, dur=1)
    r = run_tb(tb, tmp_path, ["PD103"])
    # host-busy idle [0, 2500) minus 4 µs of kernels; in the stream [2400, 2466): 66 − 4 = 62 µs
    assert "PD103" in r.passed
    assert r.metrics("PD103")["in_stream_share"] == (66 - 4) / (2500 - 4)


def _gloo_trace(overlap: bool):
    """CPU-only, 2 steps of 1000 µs: an mm, then a 600 µs gloo all_reduce of 250,000 floats (1 MB)."""
    tb = TraceBuilder(device_name=None)
    for n in range(2):
        s = 1000 * n
        tb.step(n + 1, s, 1000)
        tb.cpu_op("aten::mm", s, 900 if overlap else 300)
        tb.events.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": "gloo:all_reduce",
                "pid": tb.pid,
                "tid": 200,
                "ts": s + 300,
                "dur": 600,
                "args": {"External id": 900 + n, "Input Dims": [[250000]], "Input type": ["float"]},
            }
        )
    return tb


def test_pd305_host_collectives_exposed(tmp_path):
    r = run_tb(_gloo_trace(overlap=False), tmp_path, ["PD305"])
    f = r.findings["PD305"]
    assert f["saving_us_per_step"] == 600 and f["saving_pct_of_step"] == 60
    ev = f["evidence"]
    assert ev["collectives"] == [
        {"collective": "all_reduce", "bytes": 1e6, "count": 2.0, "mean_us": 600.0, "algbw_bytes_per_s": 1e6 / 600e-6}
    ]
    assert "all_reduce of 1.00 MB ×2 (0.6 ms each, 1.667 GB/s)" in f["message"]
    assert "messages are small" in ev["advice"] and "overlap them with the backward" in ev["advice"]
    assert "below 1 GB/s" not in ev["advice"]


def test_pd305_silent_when_collectives_overlap_compute(tmp_path):
    r = run_tb(_gloo_trace(overlap=True), tmp_path, ["PD305"])
    assert "PD305" in r.passed and r.res.metrics["PD305"]["0"]["exposed_us"] == 0
    assert r.res.metrics["PD305"]["0"]["collective_us"] == 600


def test_cpu_breakdown_names_host_collectives_once(tmp_path):
    from perfdoctor import pipeline
    from perfdoctor.render import view
    from perfdoctor.trace import load_trace

    a = pipeline.analyze_tables(load_trace(str(_gloo_trace(False).write(tmp_path / "g.json"))))
    s = a.primary.steps[0]
    assert s.categories_us["host_collective"] == 600 and "communication" not in s.categories_us
    assert s.communication == {"total_us": 600, "overlapped_us": 0, "exposed_us": 600}
    assert s.communication_by_collective_us == {"all_reduce": 600}
    assert view.CAT_LABELS["host_collective"] == "host collectives (gloo, on the CPU)"


def test_pd106_device_idles_while_host_is_outside_ops(tmp_path):
    tb = TraceBuilder()
    for n in range(2):
        s = 1000 * n
        tb.step(n + 1, s, 1000)
        tb.cpu_op("aten::mm", s, 100)
        tb.launch(ADD, launch_ts=s + 50, start=s + 60, dur=40)  # [60, 100)
        # [100, 700): no op open on the host (Python preprocessing), nothing queued
        tb.cpu_op("aten::add", s + 700, 300)
        tb.launch(ADD, launch_ts=s + 950, start=s + 960, dur=40)  # [960, 1000)
    r = run_tb(tb, tmp_path, ["PD106"])
    f = r.findings["PD106"]
    assert f["saving_us_per_step"] == 600 and f["saving_pct_of_step"] == 60


def test_mtia_device_activity_is_read_and_unknown_categories_are_named(tmp_path):
    from perfdoctor import pipeline
    from perfdoctor.trace import load_trace

    tb = TraceBuilder(device_name=None)
    tb.step(1, 0, 1000)
    tb.launch("mtia_matmul_kernel", launch_ts=10, start=100, dur=400)
    for e in tb.events:  # the same events as MTIA's Kineto writes them
        e["cat"] = {"kernel": "mtia_ccp_events", "cuda_runtime": "mtia_runtime"}.get(e["cat"], e["cat"])
    tb.events.append(
        {"ph": "X", "cat": "hpu_op_kernel", "name": "x", "pid": 1, "tid": 1, "ts": 600, "dur": 10, "args": {}}
    )
    t = load_trace(str(tb.write(tmp_path / "m.json")))
    a = pipeline.analyze_tables(t)
    assert a.primary.kind == "gpu" and a.primary.steps[0].busy_us == 400
    assert any("categories perfdoctor does not read: hpu_op_kernel" in w for w in a.warnings)


def test_empty_device_name_prints_no_colon():
    from types import SimpleNamespace as NS

    from perfdoctor.render.view import device_name

    assert device_name(NS(device_properties=[NS(id=2, name="")]), 2) == "GPU 2"  # type: ignore[arg-type]
    assert device_name(NS(device_properties=[NS(id=2, name="NVIDIA A10")]), 2) == "GPU 2: NVIDIA A10"  # type: ignore[arg-type]


def test_savings_and_single_step_text():
    from perfdoctor.render.view import saving_ms, step_time_text

    assert saving_ms(420.0) == "0.42 ms" and saving_ms(35.0) == "35 µs" and saving_ms(12_345.0) == "12.35 ms"
    assert saving_ms(12_345.0, 1) == "12.3 ms"
    from types import SimpleNamespace

    one = dict(n=1, median=5000.0, p10=5000.0, p90=5000.0, min=5000.0, max=5000.0)
    assert step_time_text(SimpleNamespace(**one)) == "5.00 ms (one step: no spread to report)"
    assert "p10" in step_time_text(SimpleNamespace(**{**one, "n": 3}))


def _first_launch_trace(pending: int = 0, launched_before: bool = False):
    """One 10,000 µs step; at 2,000 a launch call of 6,000 µs (the first launch of the add kernel, as the ykcai
    MoE traces' AccumulateGrad add_ in the process's first step), its kernel at 8,010 for 5 µs. ``pending``
    kernels are launched at 1,000-1,999 and start only after the long call began (a backlogged queue);
    ``launched_before``: the add kernel was launched once already at 500 (so the long call is not its first)."""
    tb = TraceBuilder()
    tb.step(1, 0, 10000)
    if launched_before:
        tb.launch(ADD, launch_ts=500, start=510, dur=5)
    for i in range(pending):
        tb.launch(
            "ampere_sgemm_32x128_nt",
            launch_ts=1000 + i * 999 / max(pending, 1),
            start=2001 + 20 * i,
            dur=20,
            launch_dur=0.5,
        )
    tb.launch(ADD, launch_ts=2000, start=8010, dur=5, launch_dur=6000)
    return tb


def test_first_kernel_launch_is_lazy_module_loading(tmp_path):
    import numpy as np

    from perfdoctor.analysis.warmup import warmup
    from perfdoctor.trace import load_trace

    w = warmup(load_trace(str(_first_launch_trace().write(tmp_path / "t.json"))), np.array([0.0]), np.array([1e4]))
    # the call [2,000, 8,000) is the add kernel's first launch with an empty queue: 6,000 µs, 60% of the step ≥ 25%
    assert w.by_kind_us["lazy_init"] == 6000 and w.per_window_us.tolist() == [6000.0] and w.cold[0]
    r = run_tb(_first_launch_trace(), tmp_path, ["PD902"])
    assert (
        "lazy CUDA/HIP initialisation (module loading, first kernel launches) 6.0 ms" in r.findings["PD902"]["message"]
    )


def test_long_launch_into_a_full_queue_or_of_a_loaded_kernel_is_not_warmup(tmp_path):
    import numpy as np

    from perfdoctor.analysis.warmup import warmup
    from perfdoctor.trace import load_trace

    # 300 kernels launched before 2,000 start after it: the queue is backlogged (≥ 256 pending), the call blocked
    full = warmup(
        load_trace(str(_first_launch_trace(300).write(tmp_path / "a.json"))), np.array([0.0]), np.array([1e4])
    )
    # the add kernel was launched at 500 already: its module is loaded
    again = warmup(
        load_trace(str(_first_launch_trace(0, True).write(tmp_path / "b.json"))), np.array([0.0]), np.array([1e4])
    )
    assert full.by_kind_us["lazy_init"] == 0 and again.by_kind_us["lazy_init"] == 0
    assert "PD902" not in run_tb(_first_launch_trace(0, True), tmp_path, ["PD902"]).findings
