"""Roofline: kernels tied to ops, attainable vs achieved, bound class; synthetic and real traces."""

from __future__ import annotations

import pytest
from conftest import shared_trace
from tracebuilder import TraceBuilder

from perfdoctor.analysis.work.hardware import device_for_trace, spec_by_name
from perfdoctor.analysis.work.mfu import op_sum_unusable
from perfdoctor.analysis.work.roofline import Roofs, roofline_table, roofs_from_spec
from perfdoctor.trace import load_trace

F32, BF16 = "float", "c10::BFloat16"
N = 1 << 20


def build(tmp_path):
    tb = TraceBuilder(device_name="NVIDIA A100-SXM4-80GB")
    tb.step(1, 0, 10_000)
    tb.cpu_op("aten::mm", 10, 100, input_dims=[[1024, 1024], [1024, 1024]], input_type=[F32, F32])
    tb.launch("ampere_sgemm_128x64_tn", launch_ts=20, start=200, dur=1000)
    tb.cpu_op("aten::add", 200, 50, input_dims=[[N], [N], []], input_type=[F32, F32, "Scalar"])
    tb.launch(
        "void at::native::vectorized_elementwise_kernel<4, AddFunctor<float>>", launch_ts=210, start=1300, dur=100
    )
    # linear -> addmm: costed once, at the outermost op; the kernel ran as TF32
    tb.cpu_op("aten::linear", 300, 100, input_dims=[[2048, 1024], [1024, 1024], [1024]], input_type=[F32] * 3)
    tb.cpu_op(
        "aten::addmm",
        310,
        80,
        input_dims=[[1024], [2048, 1024], [1024, 1024], [], []],
        input_type=[F32, F32, F32, "Scalar", "Scalar"],
    )
    tb.launch(
        "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x64_16x4_nn_align4>", launch_ts=320, start=1500, dur=200
    )
    tb.cpu_op("aten::topk", 500, 20, input_dims=[[N], []], input_type=[F32, "Scalar"])
    tb.launch("void at::native::sbtopk::gatherTopK<float>", launch_ts=505, start=1800, dur=40)
    tb.kernel("orphan_kernel", start=1900, dur=7)
    return load_trace(str(tb.write(tmp_path / "t.json")))


def test_synthetic_rows_worked_by_hand(tmp_path):
    t = build(tmp_path)
    spec = device_for_trace(t.device_properties)
    assert spec.key == "a100-80gb-sxm"
    r = roofline_table(t, roofs_from_spec(spec))
    rows = {x.name: x for x in r.ops}
    assert set(rows) == {"aten::mm", "aten::add", "aten::linear"}  # addmm folded into linear
    mm = rows["aten::mm"]
    assert mm.flops == 2 * 1024**3 and mm.bytes == 3 * 1024 * 1024 * 4 and mm.time_us == 1000
    assert mm.arithmetic_intensity == pytest.approx(2 * 1024 / 12)
    assert mm.math_dtype == "fp32" and mm.attainable_flops_per_s == 19.5e12
    assert mm.achieved_flops_per_s == pytest.approx(2 * 1024**3 / 1e-3)
    assert mm.pct_of_attainable == pytest.approx(100 * 2.147483648e12 / 19.5e12)  # 11.0 %
    assert mm.bound == "compute"
    add = rows["aten::add"]
    assert add.arithmetic_intensity == pytest.approx(1 / 12)
    assert add.attainable_flops_per_s == pytest.approx(2.039e12 / 12)
    assert add.pct_of_attainable == pytest.approx(100 * (N / 1e-4) / (2.039e12 / 12))  # 6.2 % < 10 %
    assert add.bound == "latency"
    lin = rows["aten::linear"]
    assert lin.math_dtype == "tf32" and lin.peak_flops_per_s == 156e12 and lin.time_us == 200
    assert lin.flops == 2 * 2048 * 1024 * 1024
    unc = {u.name: u for u in r.uncosted}
    assert unc["aten::topk"].time_us == 40 and "no FLOP formula" in unc["aten::topk"].reason
    assert unc["orphan_kernel"].time_us == 7
    assert r.costed_time_us == 1300 and r.uncosted_time_us == 47
    assert {p.name for p in r.chart} == {"aten::mm", "aten::add", "aten::linear"}


def test_latency_threshold_is_a_parameter(tmp_path):
    t = build(tmp_path)
    r = roofline_table(t, roofs_from_spec(spec_by_name("a100-80gb-sxm")), latency_fraction=0.05)
    assert {x.name: x.bound for x in r.ops}["aten::add"] == "bandwidth"


def test_without_roofs_reports_achieved_only(tmp_path):
    r = roofline_table(build(tmp_path), None)
    assert all(x.bound == "unknown" and x.attainable_flops_per_s is None for x in r.ops)
    assert r.roofs is None and any("peaks unknown" in w for w in r.warnings)


def test_cpu_trace_uses_op_duration_and_measured_roofs(tmp_path):
    tb = TraceBuilder(device_name=None)
    tb.cpu_op("aten::linear", 0, 500, input_dims=[[64, 256], [128, 256], [128]], input_type=[F32] * 3)
    tb.cpu_op(
        "aten::addmm", 10, 480, input_dims=[[128], [64, 256], [256, 128], [], []], input_type=[F32] * 3 + ["Scalar"] * 2
    )
    t = load_trace(str(tb.write(tmp_path / "cpu.json")))
    roofs = Roofs("cpu", {"fp32": 1e11}, 1e10, "measured: test", "measured")
    r = roofline_table(t, roofs)
    assert r.time_basis == "cpu_op"
    (row,) = r.ops
    assert row.name == "aten::linear" and row.time_us == 500
    assert row.achieved_flops_per_s == pytest.approx(2 * 64 * 128 * 256 / 500e-6)


def test_h100_bert_linear_from_recorded_dims():
    t = load_trace(str(shared_trace("tracelens__h100__bert-small-uncased.json.gz")))
    r = roofline_table(t, roofs_from_spec(device_for_trace(t.device_properties)), top=100)
    row = next(
        x for x in r.ops if x.name == "aten::linear" and x.shapes == "[ [ 1, 141, 512 ], [ 512, 512 ], [ 512 ] ]"
    )
    assert row.count == 17 and row.flops == 17 * 2 * 141 * 512 * 512
    assert row.math_dtype == "bf16" and row.peak_flops_per_s == 989.5e12
    attn = next(x for x in r.ops if x.name == "aten::scaled_dot_product_attention")
    assert attn.flops == 4 * 4 * 8 * 141 * 141 * 64  # 4 calls
    assert r.uncosted_time_us < 0.01 * r.costed_time_us


def test_a100_moe_linear_from_recorded_dims():
    t = load_trace(str(shared_trace("switchtransformers__a100_moe_profile_memory.json.gz")))
    r = roofline_table(t, roofs_from_spec(device_for_trace(t.device_properties)), top=100)
    row = next(x for x in r.ops if x.name == "aten::linear" and x.shapes == "[[8, 1024, 1024], [4096, 1024], [4096]]")
    assert row.count == 40 and row.flops == 40 * 2 * 8192 * 4096 * 1024
    assert row.math_dtype == "fp32" and row.bound == "compute"
    assert row.achieved_flops_per_s <= row.peak_flops_per_s  # kernels tied by correlation, not colliding ext ids


def test_dlrm_sampled_rank_mm_ran_as_tf32():
    t = load_trace(str(shared_trace("hta__trace_filter__sampled_rank-0.json.gz")))
    r = roofline_table(t, roofs_from_spec(spec_by_name("a100-40gb")), top=200)
    row = next(x for x in r.ops if x.name == "aten::mm" and x.shapes == "[[8192, 512], [512, 8192]]")
    assert row.flops == row.count * 2 * 8192 * 8192 * 512
    assert row.math_dtype == "tf32"
    assert any(u.name == "record_param_comms" for u in r.uncosted)


def test_resnet_v100_conv_backward_and_uncosted_forward():
    t = load_trace(str(shared_trace("kineto__resnet50_num_workers_0__worker0.pt.trace.json.gz")))
    r = roofline_table(t, roofs_from_spec(device_for_trace(t.device_properties)), top=500)
    row = next(
        x
        for x in r.ops
        if x.name == "aten::cudnn_convolution_backward"
        and x.shapes.startswith("[[32, 512, 7, 7], [32, 2048, 7, 7], [2048, 512, 1, 1]")
    )
    assert row.flops == row.count * 2 * 2 * 32 * 2048 * 512 * 49
    conv = next(u for u in r.uncosted if u.name == "aten::conv2d")
    assert "stride" in conv.reason and conv.time_us > 0


def test_a_row_above_its_roof_says_which_assumption_broke_and_joins_no_aggregate(tmp_path):
    # A100-80GB SXM datasheet: FP32 19.5 TFLOP/s, HBM 2,039 GB/s.
    # mm 1024x1024x1024 FP32 (sgemm), 1000 µs: 2·1024³ = 2.147e9 FLOP -> 2.15 TFLOP/s, 11% of the peak: trusted.
    # mm 512x1024x1024 FP32, 40 µs: 2·512·1024·1024 = 1.074e9 FLOP -> 26.8 TFLOP/s > 19.5: the FLOP count or
    #   the FP32 peak is wrong for it.
    # add of N = 2**20 floats, 5 µs: 3·N·4 B = 12.58 MB -> 2,517 GB/s > 2,039: the byte count or the bandwidth.
    tb = TraceBuilder(device_name="NVIDIA A100-SXM4-80GB")
    tb.step(1, 0, 10_000)
    tb.cpu_op("aten::mm", 10, 100, input_dims=[[1024, 1024], [1024, 1024]], input_type=[F32, F32])
    tb.launch("ampere_sgemm_128x64_tn", launch_ts=20, start=200, dur=1000)
    tb.cpu_op("aten::mm", 300, 100, input_dims=[[512, 1024], [1024, 1024]], input_type=[F32, F32])
    tb.launch("ampere_sgemm_128x64_tn", launch_ts=310, start=1300, dur=40)
    tb.cpu_op("aten::add", 500, 50, input_dims=[[N], [N], []], input_type=[F32, F32, "Scalar"])
    tb.launch("void at::native::vectorized_elementwise_kernel<4, AddFunctor<float>>", 510, start=1400, dur=5)
    t = load_trace(str(tb.write(tmp_path / "t.json")))
    r = roofline_table(t, roofs_from_spec(spec_by_name("a100-80gb-sxm")))
    rows = {(x.name, x.shapes): x for x in r.ops}
    big, small = rows[("aten::mm", "[[1024, 1024], [1024, 1024]]")], rows[("aten::mm", "[[512, 1024], [1024, 1024]]")]
    add = rows[("aten::add", f"[[{N}], [{N}], []]")]
    assert big.bound == "compute" and big.note == ""
    # 137.7 % of the FP32 peak is no share of it: the row has none, and says why
    assert small.pct_of_attainable is None and add.pct_of_attainable is None and big.pct_of_attainable < 100
    assert small.bound == add.bound == "above_roof"
    assert "26.8 TFLOP/s is above the fp32 peak of 19.5: the FLOP count" in small.note and "GB/s" not in small.note
    assert "2,517 GB/s is above the 2,039 GB/s of HBM: the byte count" in add.note and "TFLOP/s" not in add.note
    # aggregates hold the trusted row only; the other two rows' time is uncosted, with the reason
    assert r.total_flops == 2 * 1024**3 and r.costed_time_us == 1000 and r.uncosted_time_us == 45
    assert {u.name: u.time_us for u in r.uncosted} == {"aten::mm": 40, "aten::add": 5}
    assert all("above its roof" in u.reason for u in r.uncosted)
    assert [p.name for p in r.chart] == ["aten::mm"] and r.chart[0].time_us == 1000
    assert op_sum_unusable(r) is None  # MFU's op-level sum: 45 of 1045 µs uncosted (4.3%) is within its 5%
