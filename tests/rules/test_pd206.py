"""PD206 low-mfu: synthetic inputs with answers worked out by hand.

Moved from tests/test_rules_run_and_mfu.py (issue 9: one test file per rule).
"""

from types import SimpleNamespace

import pytest
from analysed import rank_analysis
from tracebuilder import TraceBuilder

from perfdoctor.checks import pd206_low_mfu as pd206
from perfdoctor.checks.context import RankContext


def mm_trace(tmp_path, n: int, name="t.json"):
    """One 1000 µs step on an A100 with one fp32 mm of n×n×n whose kernel runs 800 µs."""
    tb = TraceBuilder(device_name="NVIDIA A100-SXM4-80GB")
    tb.step(1, 0, 1000)
    tb.cpu_op("aten::mm", 10, 50, input_dims=[[n, n], [n, n]], input_type=["float", "float"])
    tb.launch("ampere_sgemm_128x64_nn", launch_ts=20, start=100, dur=800)
    return str(tb.write(tmp_path / name))


def rank_ctx(path, thresholds):
    a = rank_analysis(path)
    return RankContext(a, a.ranks[0], SimpleNamespace(thresholds=thresholds))


def test_pd206_fires_below_20_percent_with_fp32_reason(tmp_path):
    ctx = rank_ctx(mm_trace(tmp_path, 1024), {"mfu_threshold": 0.20})
    mfu = ctx.rank.mfu
    # 2·1024³ = 2.147e9 FLOP per 1000 µs step = 2.147 TFLOP/s; A100 fp32 dense peak 19.5 TFLOP/s
    assert mfu.model_flops_per_step == 2 * 1024**3 and mfu.dtype == "fp32"
    assert mfu.mfu == pytest.approx(2 * 1024**3 / 1e-3 / 19.5e12)
    out = pd206.check(ctx)
    assert out.hit is not None
    assert out.hit.evidence.values["mfu_pct"] == pytest.approx(11.01, abs=0.01)
    # the GEMM takes 80% of the step and TF32 is 8x the fp32 peak on an A100: that is the reason
    assert out.hit.evidence.values["reason"].startswith("GEMMs in FP32")


def test_pd206_silent_above_threshold(tmp_path):
    # 2·1536³ = 7.25e9 FLOP: 9.1 TFLOP/s in the kernel's 800 µs (47% of the 19.5 TFLOP/s FP32 peak), 37% MFU
    # over the 1000 µs step. (n = 2048 was 21.5 TFLOP/s in the kernel, above the peak: the roofline now leaves
    # such a row out of the FLOP sum, and MFU with it.)
    ctx = rank_ctx(mm_trace(tmp_path, 1536), {"mfu_threshold": 0.20})
    assert ctx.rank.mfu.mfu == pytest.approx(2 * 1536**3 / 1e-3 / 19.5e12)  # 37%
    assert pd206.check(ctx).hit is None


def test_pd206_skips_without_shapes(tmp_path):
    tb = TraceBuilder()
    tb.step(1, 0, 1000)
    tb.launch("ampere_sgemm_128x64_nn", launch_ts=20, start=100, dur=800)
    ctx = rank_ctx(str(tb.write(tmp_path / "noshape.json")), {"mfu_threshold": 0.20})
    out = pd206.check(ctx)
    assert out.hit is None and "record_shapes" in out.skip
