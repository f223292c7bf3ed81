"""Rules added or re-judged for issue 11 (PD103 on shares, warm-up, host collectives in the breakdown), by hand (µs).

PD902's, PD305's and PD106's cases moved to tests/rules/ (one test file per rule).
"""

from rules_helpers import few_kernels_trace, gloo_trace, run_tb
from tracebuilder import TraceBuilder

from perfdoctor.analysis.timing.breakdown import Communication

ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float> >(int)"


def test_pd103_fires_with_few_kernels_per_step(tmp_path):
    f = run_tb(few_kernels_trace(), tmp_path, ["PD103"]).findings["PD103"]
    # gaps while the host is busy in [0, 800): [0, 20) + 15 × 45 between kernels + [775, 800) = 720 µs (the
    # saving itself is the replayed CUDA-graph step's, replay's model)
    assert f["evidence"]["launch_idle_ms"] == 0.72 and f["saving_us_per_step"] > 0
    assert f["evidence"]["kernels_per_step"] == 16


def test_first_call_outlier_is_warmup(tmp_path):
    import numpy as np

    from perfdoctor.analysis.steps.warmup import warmup
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


def test_cpu_breakdown_names_host_collectives_once(tmp_path):
    from perfdoctor import pipeline
    from perfdoctor.render import view
    from perfdoctor.trace import load_trace

    a = pipeline.analyze_tables(load_trace(str(gloo_trace(False).write(tmp_path / "g.json"))))
    s = a.primary.steps[0]
    assert s.categories_us["host_collective"] == 600 and "communication" not in s.categories_us
    assert s.communication == Communication(total_us=600, overlapped_us=0, exposed_us=600)
    assert s.communication_by_collective_us == {"all_reduce": 600}
    assert view.CAT_LABELS["host_collective"] == "host collectives (gloo, on the CPU)"


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

    # DeviceProps always carries ``identified`` (None: the trace's own name stands)
    assert device_name(NS(device_properties=[NS(id=2, name="", identified=None)]), 2) == "GPU 2"  # type: ignore[arg-type]
    ok = NS(device_properties=[NS(id=2, name="NVIDIA A10", identified=None)])
    assert device_name(ok, 2) == "GPU 2: NVIDIA A10"  # type: ignore[arg-type]


def test_savings_and_single_step_text():
    from perfdoctor.render.view import saving_ms, step_time_text

    assert saving_ms(420.0) == "0.42 ms" and saving_ms(35.0) == "35 µs" and saving_ms(12_345.0) == "12.35 ms"
    assert saving_ms(12_345.0, 1) == "12.3 ms"
    from types import SimpleNamespace

    one = dict(n=1, median=5000.0, p10=5000.0, p90=5000.0, min=5000.0, max=5000.0)
    assert step_time_text(SimpleNamespace(**one)) == "5.00 ms (one step: no spread to report)"
    assert "p10" in step_time_text(SimpleNamespace(**{**one, "n": 3}))
