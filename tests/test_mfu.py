"""MFU: the issue's worked figures, exactly (rounding stated)."""

from __future__ import annotations

import pytest
from conftest import shared_trace

from perfdoctor.analysis.work.mfu import (
    ModelFlops,
    achieved_flops_per_s,
    compute_mfu,
    gemm_dtype,
    mfu,
    model_flops_per_step,
    transformer_flops_per_token,
)
from perfdoctor.analysis.work.roofline import Roofs
from perfdoctor.trace import load_trace

FLOPS = 6 * 63.9e6 * 10_880  # 6N FLOP/token × tokens per step
PEAK = 9.46e12  # a measured peak


def test_worked_figures():
    assert model_flops_per_step(6 * 63.9e6, 10_880) == FLOPS
    assert f"{FLOPS:.3g}" == "4.17e+12"  # 4.17e12 FLOP/step (3 significant figures)
    assert round(achieved_flops_per_s(FLOPS, 1.897) / 1e12, 2) == 2.20  # TFLOP/s, 2 decimals
    assert round(100 * mfu(FLOPS, 1.897, PEAK)) == 23  # %, whole
    assert round(achieved_flops_per_s(FLOPS, 2.940) / 1e12, 2) == 1.42
    assert round(100 * mfu(FLOPS, 2.940, PEAK)) == 15


def test_transformer_formula():
    # 6N + 12·L·H·Q·T with Q = C/H: N=85M, L=12, H=12, C=768, T=1024
    assert transformer_flops_per_token(85e6, 12, 12, 768, 1024) == 6 * 85e6 + 12 * 12 * 12 * 64 * 1024
    with pytest.raises(ValueError):
        transformer_flops_per_token(1e6, 2, 5, 768, 128)


def test_compute_mfu_uses_dtype_peak_and_hfu():
    roofs = Roofs("H100", {"bf16": 989.5e12, "fp32": 67e12}, 3.35e12, "spec: test")
    r = compute_mfu(ModelFlops(4e14, "op_sum"), 1.0, roofs, "bf16", on_gpu=True, hardware_flops=5e14)
    assert r.mfu == pytest.approx(4e14 / 989.5e12) and r.hfu == pytest.approx(5e14 / 989.5e12)
    cpu = compute_mfu(ModelFlops(4e9, "op_sum"), 1.0, roofs, "fp32", on_gpu=False)
    assert cpu.mfu is None and "measured" in cpu.note  # a GPU datasheet peak is meaningless for a CPU run
    measured = Roofs("cpu", {"fp32": 1e11}, 1e10, "measured: x", "measured")
    assert compute_mfu(ModelFlops(4e10, "op_sum"), 1.0, measured, "fp32", on_gpu=False).mfu == pytest.approx(0.4)
    assert compute_mfu(ModelFlops(1e12, "op_sum"), 1.0, roofs, "fp8", True).mfu is None


@pytest.mark.parametrize(
    "name,dtype",
    [
        ("tracelens__h100__bert-small-uncased.json.gz", "bf16"),
        ("switchtransformers__a100_moe_profile_memory.json.gz", "fp32"),
        ("hta__nccl_parser_config__nccl_data.json.gz", "tf32"),
        ("tracelens__mi300__ddp_resnet18.json.gz", "bf16"),
    ],
)
def test_gemm_dtype_of_real_traces(name, dtype):
    assert gemm_dtype(load_trace(str(shared_trace(name))))[0] == dtype


def test_trace_mfu_on_h100_bert():
    from perfdoctor.analysis.work.mfu import ModelFlops, roofs_for_trace, trace_mfu
    from perfdoctor.analysis.work.roofline import roofline_table

    t = load_trace(str(shared_trace("tracelens__h100__bert-small-uncased.json.gz")))
    roofs = roofs_for_trace(t)
    assert roofs.kind == "spec" and roofs.device == "NVIDIA H100 SXM5 80GB"
    total = roofline_table(t, roofs).total_flops
    r = trace_mfu(t, roofs, step_time_s=0.01, n_steps=1)
    assert r.flops_source == "op_sum" and r.model_flops_per_step == total and r.dtype == "bf16"
    assert r.mfu == pytest.approx(total / 0.01 / 989.5e12)
    r2 = trace_mfu(t, roofs, step_time_s=0.01, n_steps=1, model_flops=ModelFlops(total / 2))
    assert r2.hfu == pytest.approx(2 * r2.mfu)


def test_cpu_trace_gets_only_measured_roofs():
    from perfdoctor.analysis.work.mfu import roofs_for_trace

    t = load_trace(str(shared_trace("hta__cpu_only__rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz")))
    assert roofs_for_trace(t) is None
    measured = Roofs("cpu", {"fp32": 1e11}, 1e10, "measured: x", "measured")
    assert roofs_for_trace(t, measured) is measured


def test_cudnn_single_precision_kernels_are_fp32_gemms():
    from perfdoctor.analysis.timing.kernel_dtype import is_gemm_kernel, kernel_math_dtype

    for name in (
        "volta_scudnn_128x128_stridedB_splitK_medium_nn_v1",
        "volta_scudnn_winograd_128x128_ldg1_ldg4_relu_tile148t_nt_v1",
        "cudnn_infer_volta_scudnn_128x64_relu_medium_nn_v1",
    ):
        assert is_gemm_kernel(name) and kernel_math_dtype(name) == "fp32"


def test_mfu_above_one_is_never_reported():
    from perfdoctor.analysis.work.mfu import compute_mfu
    from perfdoctor.analysis.work.roofline import Roofs

    bogus = Roofs("cpu", {"fp32": 4.3e9}, 2e9, "measured: a --quick run on a busy machine", "measured")
    r = compute_mfu(ModelFlops(7.65e9, "flop_counter"), 0.0737, bogus, "fp32", on_gpu=False, hardware_flops=8.4e9)
    assert r.mfu is None and r.hfu is None and "exceeds" in r.note
    assert r.achieved_flops_per_s == 7.65e9 / 0.0737  # the achieved rate itself is still right


def test_model_flops_that_cannot_fit_the_trace_give_no_mfu():
    from perfdoctor.analysis.work.roofline import Roofs

    roofs = Roofs("H100", {"bf16": 989.5e12}, 3.35e12, "spec: test")
    # 16.6% MFU on a device busy 7% of the step: it would have had to run at 237% of its peak while busy
    r = compute_mfu(
        ModelFlops(0.166 * 989.5e12 * 4.43e-3, "transformer_formula"),
        4.43e-3,
        roofs,
        "bf16",
        True,
        hardware_flops=8.2e9,
        busy_fraction=0.07,
    )
    assert r.mfu is None and r.hfu is None and "busy only 7.0% of the step" in r.note and "237%" in r.note
    # model FLOPs 10x the op-level FLOPs of a fully costed trace: the inputs describe another run
    r = compute_mfu(
        ModelFlops(8.2e10, "transformer_formula"),
        1.0,
        roofs,
        "bf16",
        True,
        hardware_flops=8.2e9,
        busy_fraction=0.9,
        hardware_flops_complete=True,
    )
    assert r.mfu is None and "10.0x the FLOPs of the ops" in r.note
    # consistent inputs: reported (MFU 5% on a device busy 60% of the step)
    r = compute_mfu(
        ModelFlops(0.05 * 989.5e12, "transformer_formula"),
        1.0,
        roofs,
        "bf16",
        True,
        hardware_flops=0.06 * 989.5e12,
        busy_fraction=0.6,
        hardware_flops_complete=True,
    )
    assert r.mfu == pytest.approx(0.05) and r.hfu == pytest.approx(0.06) and r.note == ""
    # above a datasheet peak: the FLOP count is blamed, not the datasheet
    r = compute_mfu(ModelFlops(2e15, "transformer_formula"), 1.0, roofs, "bf16", True)
    assert r.mfu is None and "FLOP count (transformer_formula) is too high" in r.note and "calibrate" not in r.note


def test_cpu_mfu_without_a_measured_peak_says_how_to_get_one():
    # a CPU run with a known FLOP count read "no model FLOP count or no device peak"
    from perfdoctor.analysis.work.mfu import compute_mfu

    m = compute_mfu(ModelFlops(7_650_410_496, "flop_counter"), 0.06219, None, "fp32", False, None)
    assert m.mfu is None and m.achieved_flops_per_s == 7_650_410_496 / 0.06219
    assert "no measured CPU peak: run `perfdoctor calibrate`" in m.note


def test_memory_efficient_attention_kernels_name_their_dtype_as_a_token():
    """fmha_cutlass kernels (xFormers / PyTorch memory-efficient attention) carry their dtype as a name token; the
    backward has no '<float' template argument, so the luatil RTX 3060 trace's FP32 attention backward (2.50 ms per
    step) counted as no dtype and PD203 saved 1.25 ms too little (checked from the raw JSON).
    A token inside a word is not one."""
    from perfdoctor.analysis.timing.kernel_dtype import kernel_math_dtype

    assert kernel_math_dtype("fmha_cutlassB_f32_aligned_64x64_k65536_dropout_sm80") == "fp32"
    assert kernel_math_dtype("fmha_cutlassF_f16_aligned_64x64_rf_sm80") == "fp16"
    assert kernel_math_dtype("fmha_cutlassB_bf16_aligned_64x64_k65536_sm80") == "bf16"
    assert kernel_math_dtype("ampere_tf32_s1688gemm_128x128") == "tf32"
    assert kernel_math_dtype("elementwise_f32x4") is None
