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
