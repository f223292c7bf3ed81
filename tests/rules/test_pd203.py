"""PD203 fp32-matmul-without-tensor-cores: a firing and a silent case (and skips), answers worked out by hand (µs).

Moved from tests/test_rules_synthetic.py (issue 9: one test file per rule).
"""

import pytest
from rules_helpers import HGEMM, SGEMM, run_tb
from tracebuilder import TraceBuilder


def _gemm_trace(name, device_name, cc, sms=80, memory=34_089_730_048):
    tb = TraceBuilder(device_name=device_name, compute_capability=cc, total_memory=memory)
    tb.meta["deviceProperties"][0]["numSms"] = sms
    tb.step(1, 0, 1000)
    tb.launch(name, launch_ts=5, start=100, dur=600)
    return tb


def test_pd203_fires_on_v100_with_fp16_advice(tmp_path):
    from perfdoctor.analysis.work.hardware import match_device

    tb = _gemm_trace(SGEMM, "Tesla V100-SXM2-32GB", (7, 0))
    r = run_tb(tb, tmp_path, ["PD203"])
    f = r.findings["PD203"]
    spec = match_device(tb.meta["deviceProperties"][0])
    ratio = min(spec.peak("fp16") / spec.peak("fp32"), 8.0) if spec else 2.0
    assert f["saving_us_per_step"] == pytest.approx(600 * (1 - 1 / ratio), abs=1e-3)
    assert "float16" in f["message"] and "GradScaler" in f["message"]
    assert "set_float32_matmul_precision" not in f["message"] and "bfloat16" not in f["message"]
    assert f["evidence"]["events"][0]["name"] == SGEMM
    # the fix below the finding says the same: fp16 with a scaler, neither bf16 nor TF32 (compute capability 7.0)
    assert "GradScaler" in f["fix"] and "bfloat16" not in f["fix"] and "set_float32_matmul_precision" not in f["fix"]
    assert "torch.float16" in f["example_after"] and "bfloat16" not in f["example_after"]


def test_pd203_advice_on_a100_is_bf16_or_tf32(tmp_path):
    tb = _gemm_trace("ampere_sgemm_128x64_tn", "NVIDIA A100-SXM4-80GB", (8, 0), sms=108, memory=85_899_345_920)
    f = run_tb(tb, tmp_path, ["PD203"]).findings["PD203"]
    assert "bfloat16" in f["message"] and "set_float32_matmul_precision" in f["message"]
    assert "bfloat16" in f["fix"] and 'set_float32_matmul_precision("high")' in f["fix"]
    assert 'set_float32_matmul_precision("high")' in f["example_after"]


def test_pd203_silent_on_tensor_core_kernels(tmp_path):
    r = run_tb(_gemm_trace(HGEMM, "Tesla V100-SXM2-32GB", (7, 0)), tmp_path, ["PD203"])
    assert "PD203" in r.passed and r.metrics("PD203")["fp32_gemm_us"] == 0


def test_pd203_silent_without_tensor_cores(tmp_path):
    r = run_tb(_gemm_trace(SGEMM, "Quadro GP100", (6, 0), sms=56), tmp_path, ["PD203"])
    assert "PD203" in r.passed and r.metrics("PD203")["fp32_gemm_us"] == 600


def test_pd203_skipped_on_amd(tmp_path):
    r = run_tb(_gemm_trace("Cijk_Alik_Bljk_SB_MT64x16x32", "AMD Instinct MI300X", (9, 4)), tmp_path, ["PD203"])
    assert "AMD" in r.skipped["PD203"]


def test_pd203_advice_on_geforce_ampere_leaves_tf32_out(tmp_path):
    # GA102 whitepaper, Appendix A: the RTX 3090's TF32 tensor peak equals its FP32 peak (35.6 TFLOP/s)
    tb = _gemm_trace("ampere_sgemm_128x64_tn", "NVIDIA GeForce RTX 3090", (8, 6), sms=82, memory=25_769_803_776)
    f = run_tb(tb, tmp_path, ["PD203"]).findings["PD203"]
    assert "bfloat16" in f["message"] and "set_float32_matmul_precision" not in f["message"]
    assert "TF32 gives nothing" in f["message"]
    # and its fix does not recommend what the message rules out
    assert "bfloat16" in f["fix"] and "set_float32_matmul_precision" not in f["fix"] and "allow_tf32" not in f["fix"]
    assert "bfloat16" in f["example_after"] and "float32_matmul" not in f["example_after"]


def test_pd203_fix_on_the_rtx3060_leaves_tf32_out_as_its_message_does(shared):
    """RTX 3060 (GA106, compute capability 8.6, not in the hardware table: a GeForce card): the message says TF32
    gives nothing; the fix and the example after it must not turn around and recommend TF32."""
    from rules_helpers import run_rules

    f = run_rules([shared("luatil__rtx3060_compile_default__trace_04.json")], ["PD203"]).findings["PD203"]
    assert "GeForce RTX 3060" in f["message"] and "TF32 gives nothing on this GPU" in f["message"]
    assert "bfloat16" in f["fix"] and "set_float32_matmul_precision" not in f["fix"] and "allow_tf32" not in f["fix"]
    assert "float32_matmul" not in f["example_after"]


def test_pd203_leaves_out_gemms_inherited_from_before_the_first_step(tmp_path):
    # a 400 µs SGEMM with no launch call in the trace (queued before the recording) ends at 500, before step 1's
    # own first kernel at 600; the step's host annotation starts at 0. Only the step's own 300 µs SGEMM counts.
    tb = TraceBuilder(device_name="Tesla V100-SXM2-32GB", compute_capability=(7, 0), total_memory=34_089_730_048)
    tb.meta["deviceProperties"][0]["numSms"] = 80
    tb.step(1, 0, 1000)
    tb.kernel(SGEMM, start=100, dur=400)
    tb.launch(SGEMM, launch_ts=50, start=600, dur=300)
    r = run_tb(tb, tmp_path, ["PD203"])
    assert r.metrics("PD203")["fp32_gemm_us"] == 300


def test_pd203_fp32_time_on_rtx3060_is_the_analysed_windows():
    # luatil trace_04 (RTX 3060, not in the hardware table): 83,468.3 µs of FP32 GEMM kernels in the file, of which
    # 7,971.1 µs were queued before the first analysed window; 75,497.1 µs over its 5 analysed steps, summed from
    # the raw JSON with code independent of perfdoctor = 15,099.4 µs per step; plus
    # the FP32 attention backward, fmha_cutlassB_f32_aligned_* (no '<float' in its name, read by its _f32_ token
    # by its dtype token): 24 kernels, 14,863.4 µs in the file, the last 20 (the analysed steps') 12,502.2 µs, summed
    # from the raw JSON: 87,999.3 µs, 17,599.9 µs per step (17.60 ms)
    from conftest import shared_trace
    from rules_helpers import run_rules

    path = shared_trace("luatil__rtx3060_compile_default__trace_04.json")
    from analysed import rank_analysis

    analysis = rank_analysis(path)
    assert analysis.ranks[0].gemm_dtype.time_us["fp32"] == pytest.approx(75_497.1 + 12_502.2, abs=0.1)
    r = run_rules([path], ["PD203"])
    f = r.findings["PD203"]
    assert r.metrics("PD203")["fp32_gemm_us"] == pytest.approx((75_497.1 + 12_502.2) / 5, abs=0.1)
    assert "TF32 gives nothing" in f["message"]
    # and its fix does not recommend what the message rules out
    assert "bfloat16" in f["fix"] and "set_float32_matmul_precision" not in f["fix"] and "allow_tf32" not in f["fix"]
    assert "bfloat16" in f["example_after"] and "float32_matmul" not in f["example_after"]
