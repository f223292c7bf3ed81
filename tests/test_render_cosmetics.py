"""Numbers a reader sees printed sensibly: no "#1–#1", no e-notation, no "0.0%" for a positive share."""

from __future__ import annotations

import io

from rich.console import Console
from tracebuilder import TraceBuilder

from perfdoctor import pipeline
from perfdoctor.checks.pd206_low_mfu import mfu_texts
from perfdoctor.render.terminal import render_terminal
from perfdoctor.render.view import evidence_value, pct


def test_one_analysed_step_reads_as_one_step(tmp_path):
    tb = TraceBuilder()
    tb.step(1, 0, 1000)
    tb.launch("sm80_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x32", launch_ts=1, start=2, dur=900)
    rep = pipeline.build_report([str(tb.write(tmp_path / "t.json"))])
    buf = io.StringIO()
    render_terminal(rep, Console(file=buf, width=200, color_system=None))
    text = buf.getvalue()
    assert "steps analysed: 1 (ProfilerStep #1)" in text and "#1–#1" not in text


def test_large_evidence_numbers_have_thousands_separators_not_e_notation():
    assert evidence_value("model_flops_per_step", 19_270_000.0) == "19,270,000"
    assert evidence_value("assumed_speedup", 7.961783) == "7.962"


def test_a_tiny_positive_share_is_not_printed_as_zero():
    assert pct(0.0002) == "< 0.1%" and pct(0.0) == "0.0%" and pct(0.123) == "12.3%"


def test_pd206_mfu_and_rate_keep_their_digits():
    # 3.2e9 FLOP/s against a 19.5e12 peak: 0.016% -> "< 0.1%", and 3.20 GFLOP/s, not "0.00 TFLOP/s"
    assert mfu_texts(3.2e9 / 19.5e12, 3.2e9) == ("< 0.1%", "3.20 GFLOP/s")
    assert mfu_texts(0.37, 9.1e12) == ("37.0%", "9.10 TFLOP/s")
