"""GPU architecture inferred from kernel names when deviceProperties is missing (issue 11 item 4)."""

import pytest
from conftest import SHARED_TRACES
from rules_helpers import run_tb
from tracebuilder import TraceBuilder

from perfdoctor import pipeline
from perfdoctor.analysis.timing.arch import infer_arch
from perfdoctor.analysis.work.mfu import roofs_for_trace
from perfdoctor.trace import load_trace


@pytest.mark.parametrize(
    "names,family,cc,spec",
    [
        (["volta_sgemm_128x64_nn", "volta_scudnn_128x64_relu_interior_nn_v1"], "volta", (7, 0), "v100-sxm2"),
        (["turing_fp16_s1688gemm_fp16_128x128_ldg8_f2f_nn", "volta_sgemm_128x64_nn"], "turing", (7, 5), None),
        (["ampere_sgemm_32x128_tn"], "ampere", (8, 0), "a100-40gb"),
        (
            ["sm86_xmma_fprop_implicit_gemm_f32f32_tf32f32_f32_nhwckrsc_nchw", "ampere_sgemm_64x64_nn"],
            "ampere-ga10x",
            (8, 6),
            None,
        ),
        (
            ["sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize64x64x64", "cutlass_80_tensorop_bf16_s16816gemm"],
            "hopper",
            (9, 0),
            "h100-sxm",
        ),
        (["nvjet_tst_128x64_64x8_1x2_h_bz_coopA_NNT"], "hopper", (9, 0), "h100-sxm"),
        (["sm100_xmma_gemm_bf16bf16_bf16f32"], "blackwell", (10, 0), "b200"),
        (["Cijk_Ailk_Bljk_SB_MT64x64x16_SN_1LDSB0_ISA942_IU1"], "cdna3", (9, 4), "mi300x"),
    ],
)
def test_newest_architecture_named_wins(names, family, cc, spec):
    g = infer_arch(names)
    assert (g.family, g.compute_capability, g.spec_key) == (family, cc, spec)


def test_no_architecture_in_names():
    assert infer_arch(["triton_poi_fused_add_0", "void at::native::vectorized_elementwise_kernel<4>"]) is None


def _volta_trace(tmp_path):
    tb = TraceBuilder(device_name=None)  # no deviceProperties
    tb.step(1, 0, 1000)
    tb.launch("volta_sgemm_128x64_nn", launch_ts=10, start=100, dur=400)
    return tb


def test_pd203_on_inferred_volta(tmp_path):
    r = run_tb(_volta_trace(tmp_path), tmp_path, ["PD203"])
    f = r.findings["PD203"]
    # V100 SXM2 datasheet: 125 / 15.7 = 7.96x; saving = 400 µs × (1 − 1/7.96) = 349.8 µs
    assert f["saving_us_per_step"] == pytest.approx(400 * (1 - 15.7 / 125), rel=1e-6)
    assert "Volta GPU" in f["message"] and "7.0, inferred from kernel names" in f["message"]


def test_roofs_and_warning_say_the_assumption(tmp_path):
    t = load_trace(str(_volta_trace(tmp_path).write(tmp_path / "t.json")))
    roofs = roofs_for_trace(t)
    assert roofs.peak("fp32") == 15.7e12 and "assumed from kernel names" in roofs.source
    w = pipeline.analyze_tables(t).warnings
    assert any("architecture inferred from kernel names: volta" in x for x in w)


@pytest.mark.skipif(not SHARED_TRACES.exists(), reason="../shared/traces is absent")
def test_kineto2020_volta_gets_pd203():
    from rules_helpers import run_rules

    r = run_rules([SHARED_TRACES / "kineto2020__volta_resnet50_num_workers_4.pt.trace.json.gz"], ["PD203"])
    assert "Volta GPU" in r.findings["PD203"]["message"]
