"""Step breakdown on synthetic traces whose answers are worked out by hand (µs)."""

import pytest
from tracebuilder import TraceBuilder

from perfdoctor import pipeline
from perfdoctor.analysis.timing.breakdown import Communication
from perfdoctor.trace import load_trace

SGEMM = "volta_sgemm_128x64_nn"
ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float> >(int)"
NCCL = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"
DL = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def analyse(tb, tmp_path, name="t.json"):
    return pipeline.analyze_tables(load_trace(str(tb.write(tmp_path / name))))


def test_overlapping_streams_count_once(tmp_path):
    tb = TraceBuilder()
    tb.step(1, 0, 1000)
    tb.launch(SGEMM, launch_ts=10, start=100, dur=300, stream=7)  # [100, 400)
    tb.launch(ADD, launch_ts=20, start=300, dur=300, stream=8)  # [300, 600)
    s = analyse(tb, tmp_path).primary.steps[0]
    assert s.dur_us == 1000
    assert s.busy_us == 500  # union [100, 600)
    assert s.idle_us == 500
    assert s.categories_us["matmul"] == 300
    assert s.categories_us["elementwise"] == 200  # [400, 600): the overlap goes to matmul
    assert s.category_union_us["elementwise"] == 300
    assert sum(s.categories_us.values()) == s.busy_us
    assert s.n_kernels == 2 and s.kernel_sum_us == 600


def test_gpu_work_spilling_past_host_step_stays_in_its_step(tmp_path):
    tb = TraceBuilder()
    tb.step(1, 0, 100)
    tb.launch(SGEMM, launch_ts=50, start=200, dur=300)  # launched in step 1, runs [200, 500)
    tb.step(2, 100, 200)
    tb.launch(SGEMM, launch_ts=150, start=500, dur=100)  # step 2's kernel runs [500, 600)
    a = analyse(tb, tmp_path)
    s1, s2 = a.primary.steps
    assert (s1.start_us, s1.dur_us, s1.busy_us) == (0, 500, 300)
    assert (s2.start_us, s2.dur_us, s2.busy_us, s2.idle_us) == (500, 100, 100, 0)
    assert s1.host_dur_us == 100 and s2.host_dur_us == 200


def test_idle_causes(tmp_path):
    tb = TraceBuilder()
    tb.step(1, 0, 1000)
    tb.annotation(DL, 0, 300)
    tb.launch(SGEMM, launch_ts=310, start=320, dur=180)  # [320, 500)
    tb.runtime("cudaStreamSynchronize", 480, 120)  # [480, 600): device drains at 500
    tb.launch(SGEMM, launch_ts=660, start=700, dur=100)  # [700, 800)
    tb.cpu_op("aten::add", 820, 80)  # host busy, nothing queued: [820, 900)
    s = analyse(tb, tmp_path).primary.steps[0]
    # gaps: [0,320) [500,700) [800,1000)
    assert s.idle_us == 720
    # the replay's critical path: host to 1000 (the annotation ends after the last kernel), back to the sync's
    # return at 600; the sync waited for the kernel ending at 500; the kernel's launch at 310; the host before it
    assert s.idle_causes_us == {
        "dataloader": 300,  # [0, 300): the fetch itself (not the 20 µs of host work after it)
        "synchronization": 100,  # [500, 600): the device waits for the sync's return only
        "host_launch_bound": 95,  # [310, 320) launch latency, [660, 665) launch call, [820, 900) aten::add
        "python": 225,  # [300, 310), [600, 660), [665, 700), [800, 820), [900, 1000): Python outside ops
        "other": 0,
    }


def test_communication_overlap(tmp_path):
    tb = TraceBuilder()
    tb.step(1, 0, 600)
    tb.launch(NCCL, launch_ts=10, start=100, dur=400, stream=20)  # [100, 500)
    tb.launch(SGEMM, launch_ts=20, start=300, dur=100, stream=7)  # [300, 400)
    s = analyse(tb, tmp_path).primary.steps[0]
    assert s.communication == Communication(total_us=400, overlapped_us=100, exposed_us=300)
    assert s.categories_us["communication"] == 300 and s.categories_us["matmul"] == 100
    assert s.communication_by_collective_us == {"all_reduce": 400}


def test_memcpy_direction_and_optimizer_override(tmp_path):
    tb = TraceBuilder()
    tb.step(1, 0, 1000)
    tb.memcpy(launch_ts=5, start=10, dur=90, kind="HtoD (Pageable -> Device)")  # [10, 100)
    tb.annotation("Optimizer.step#SGD.step", 500, 200)
    tb.launch(ADD, launch_ts=510, start=520, dur=50)  # elementwise inside optimizer.step
    s = analyse(tb, tmp_path).primary.steps[0]
    assert s.memcpy_by_direction_us == {"h2d": 90}
    assert s.categories_us["optimizer"] == 50 and s.categories_us["elementwise"] == 0
    assert s.phases_host_us["optimizer"] == 200 and s.phases_device_us["optimizer"] == 50


def test_no_step_markers_gives_one_window_and_a_warning(tmp_path):
    tb = TraceBuilder()
    tb.cpu_op("aten::mm", 0, 50)
    tb.launch(SGEMM, launch_ts=10, start=20, dur=100)
    a = analyse(tb, tmp_path)
    assert len(a.steps) == 1 and a.steps.source == "whole-trace"
    assert a.primary.steps[0].dur_us == 120  # [0, 120)
    assert any("no ProfilerStep" in w for w in a.warnings)


def test_custom_step_marker(tmp_path):
    tb = TraceBuilder()
    tb.annotation("train_iter_1", 0, 100)
    tb.annotation("train_iter_2", 100, 100)
    tb.launch(SGEMM, launch_ts=10, start=20, dur=50)
    tables = load_trace(str(tb.write(tmp_path / "m.json")))
    a = pipeline.analyze_tables(tables, step_marker=r"^train_iter_(\d+)$")
    assert a.steps.numbers.tolist() == [1, 2]
    assert [s.dur_us for s in a.primary.steps] == [100, 100]


def test_cpu_only_trace(tmp_path):
    tb = TraceBuilder(device_name=None)
    tb.step(1, 0, 1000)
    tb.annotation(DL, 0, 90)
    tb.cpu_op("aten::linear", 100, 300)
    tb.cpu_op("aten::mm", 120, 260)
    tb.cpu_op("aten::add", 500, 100)
    tb.annotation("Optimizer.step#SGD.step", 700, 200)
    tb.cpu_op("aten::add_", 710, 180)
    a = analyse(tb, tmp_path)
    dev = a.primary
    assert dev.kind == "cpu"
    s = dev.steps[0]
    assert s.categories_us["dataloader"] == 90
    assert s.categories_us["matmul"] == 300
    assert s.categories_us["elementwise"] == 100
    assert s.categories_us["optimizer"] == 200
    assert s.idle_causes_us == {"python": 310}
    assert s.busy_us + s.idle_us == 1000
    assert s.n_kernels == 0  # 4 host ops, no kernel: the ops were once counted as kernels


def test_old_kineto_generation(tmp_path):
    tb = TraceBuilder(old_format=True)
    tb.step(1, 0, 500)
    tb.launch(SGEMM, launch_ts=10, start=50, dur=100)
    s = analyse(tb, tmp_path).primary.steps[0]
    assert s.busy_us == 100 and s.categories_us["matmul"] == 100


def test_multi_rank_summary(tmp_path):
    for rank, dur in ((0, 1000), (1, 1500)):
        tb = TraceBuilder(rank=rank, world_size=2)
        tb.step(1, 0, dur)
        tb.launch(SGEMM, launch_ts=10, start=20, dur=100)
        tb.write(tmp_path / f"rank{rank}.json")
    report = pipeline.build([str(tmp_path)]).report
    assert [r["rank"] for r in report["ranks"]] == [0, 1]
    assert report["summary"]["slowest_rank"] == 1
    assert report["summary"]["spread_pct"] == pytest.approx(50.0)


def test_triton_kernels_are_flagged(tmp_path):
    tb = TraceBuilder()
    tb.step(1, 0, 500)
    tb.launch("triton_poi_fused_add_mul_0", launch_ts=10, start=20, dur=30)
    tb.launch("triton_red_fused_add_mean_mul_pow_rsqrt_0", launch_ts=12, start=60, dur=40)
    tb.launch(SGEMM, launch_ts=14, start=100, dur=50)
    s = analyse(tb, tmp_path).primary.steps[0]
    assert s.triton_us == 70
    assert s.categories_us["elementwise"] == 30 and s.categories_us["reduction_norm"] == 40


def test_stub_last_step_is_left_out(tmp_path):
    tb = TraceBuilder()
    for i in range(3):
        tb.step(i, i * 1000, 1000)
        tb.launch(SGEMM, launch_ts=i * 1000 + 10, start=i * 1000 + 20, dur=100)
    tb.step(3, 3000, 20)  # the profiler stopped inside this step
    a = analyse(tb, tmp_path)
    assert a.steps.numbers.tolist() == [0, 1, 2]
    assert any("last step holds 20 µs" in w for w in a.warnings)


def test_truncated_file_keeps_only_complete_steps(tmp_path):
    import json

    tb = TraceBuilder()
    for i in range(3):
        tb.step(i, i * 1000, 1000)
        tb.cpu_op("aten::mm", i * 1000 + 5, 30)
        tb.launch(SGEMM, launch_ts=i * 1000 + 10, start=i * 1000 + 20, dur=100)
    doc = tb.to_dict()
    # a killed exporter: the kernel of step 2 never reached the file
    last_kernel = max(i for i, e in enumerate(doc["traceEvents"]) if e.get("cat") == "kernel")
    events = [e for i, e in enumerate(doc["traceEvents"]) if i != last_kernel]
    text = json.dumps({**doc, "traceEvents": events}, indent=1)
    p = tmp_path / "cut.json"
    p.write_text(text[: text.rindex("}") - 3])  # and the file ends mid-way through the last event
    a = pipeline.analyze_tables(load_trace(str(p)))
    # step 2 lost its kernel; step 1 holds the last device activity in the file, so work after it may be
    # lost too (device activities are written in time order): only step 0 is certainly complete
    assert a.steps.numbers.tolist() == [0]
    assert [s.busy_us for s in a.primary.steps] == [100]
    assert any("truncated" in w and "left out" in w for w in a.warnings)


def test_step_marker_errors(tmp_path):
    from perfdoctor.errors import PerfDoctorError

    tb = TraceBuilder()
    tb.step(1, 0, 100)
    tables = load_trace(str(tb.write(tmp_path / "m.json")))
    with pytest.raises(PerfDoctorError, match="not a valid regular expression"):
        pipeline.analyze_tables(tables, step_marker="(")
    with pytest.raises(PerfDoctorError, match="no annotation or op matches"):
        pipeline.analyze_tables(tables, step_marker="^nothing$")


def test_cpu_only_communication_annotations(tmp_path):
    tb = TraceBuilder(device_name=None)
    tb.step(1, 0, 1000)
    tb.annotation("gloo:all_reduce", 100, 600)
    tb.cpu_op("aten::add", 800, 100)
    s = analyse(tb, tmp_path).primary.steps[0]
    assert s.categories_us["host_collective"] == 600 and s.categories_us["elementwise"] == 100
    assert s.idle_causes_us == {"python": 300}


def test_step_annotation_running_past_the_recording_is_cut(tmp_path):
    # like the HTA Triton trace: ProfilerStep#1 lasts 13.3 s but every recorded event ends 1.5 ms in
    tb = TraceBuilder()
    tb.step(1, 0, 13_336_316)
    tb.cpu_op("aten::add", 10, 1000)
    tb.launch(SGEMM, launch_ts=20, start=100, dur=1400)
    a = pipeline.analyze_tables(load_trace(str(tb.write(tmp_path / "t.json"))))
    assert [s.dur_us for s in a.primary.steps] == [1500]
    assert any("runs 13,334.8 ms past the last recorded event" in w for w in a.warnings)
    # a last step whose tail is only Python time (no op) is kept whole: 3 steps of 1000 µs, ops end 400 µs in
    tb = TraceBuilder(device_name=None)
    for i in range(3):
        tb.step(i, 1000 * i, 1000)
        tb.cpu_op("aten::add", 1000 * i, 400)
    a = pipeline.analyze_tables(load_trace(str(tb.write(tmp_path / "py.json"))))
    assert [s.dur_us for s in a.primary.steps] == [1000, 1000, 1000] and not a.warnings


def test_kernels_outside_every_window_count_in_none(tmp_path):
    # step 1 [1000, 2000), step 2 [2500, 3500): a kernel at 100 (set-up, before the first step) and one at 2100
    # (the host gap between the windows) start in no window; n_kernels counts kernels *starting* in [start, end)
    tb = TraceBuilder()
    tb.step(1, 1000, 1000)
    tb.step(2, 2500, 1000)
    tb.launch(SGEMM, launch_ts=50, start=100, dur=50, stream=7)
    tb.launch(SGEMM, launch_ts=1100, start=1200, dur=300, stream=7)
    tb.launch(SGEMM, launch_ts=2050, start=2100, dur=70, stream=7)
    tb.launch(SGEMM, launch_ts=2600, start=2700, dur=200, stream=7)
    s = analyse(tb, tmp_path).primary.steps
    assert [x.n_kernels for x in s] == [1, 1]
    assert [x.kernel_sum_us for x in s] == [300, 200]


def test_first_step_kernel_count_matches_the_raw_trace():
    # HTA's step_based_trace (GP100, steps derived from Optimizer.step): the previous, unanalysed iteration's 26
    # kernels were once added to step 0 (52). Counted here from the raw JSON: cat "kernel", ts in [start, end).
    import gzip
    import json
    from pathlib import Path

    path = Path(__file__).parent / "data" / "hta__with_gpu_user_annotation__step_based_trace.json.gz"
    steps = pipeline.analyze_tables(load_trace(str(path))).primary.steps
    events = json.loads(gzip.open(path).read())["traceEvents"]
    kts = [e["ts"] for e in events if e.get("cat") == "kernel" and e.get("ph") == "X"]
    for s in steps:
        raw = sum(1 for t in kts if s.start_us <= t < s.start_us + s.dur_us)
        assert s.n_kernels == raw
    assert steps[0].n_kernels == 26
