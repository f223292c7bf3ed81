"""PD206 low-mfu, PD601 transient-measurement, PD602 phase change, PD104 oversubscription.

Synthetic inputs with answers worked out by hand.
"""

from types import SimpleNamespace

import numpy as np
import pytest
from tracebuilder import TraceBuilder

from perfdoctor import pipeline
from perfdoctor.analysis.steady_state import analyze
from perfdoctor.checks import pd104_cpu_thread_oversubscription as pd104
from perfdoctor.checks import pd206_low_mfu as pd206
from perfdoctor.checks import pd601_transient_measurement as pd601
from perfdoctor.checks import pd602_step_time_phase_change as pd602
from perfdoctor.checks.context import JobContext, RankContext


def mm_trace(tmp_path, n: int, name="t.json"):
    """One 1000 µs step on an A100 with one fp32 mm of n×n×n whose kernel runs 800 µs."""
    tb = TraceBuilder(device_name="NVIDIA A100-SXM4-80GB")
    tb.step(1, 0, 1000)
    tb.cpu_op("aten::mm", 10, 50, input_dims=[[n, n], [n, n]], input_type=["float", "float"])
    tb.launch("ampere_sgemm_128x64_nn", launch_ts=20, start=100, dur=800)
    return str(tb.write(tmp_path / name))


def rank_ctx(path, thresholds):
    a = pipeline.analyze_paths([path])
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
    ctx = rank_ctx(mm_trace(tmp_path, 2048), {"mfu_threshold": 0.20})
    assert ctx.rank.mfu.mfu == pytest.approx(2 * 2048**3 / 1e-3 / 19.5e12)  # 88%
    assert pd206.check(ctx).hit is None


def test_pd206_skips_without_shapes(tmp_path):
    tb = TraceBuilder()
    tb.step(1, 0, 1000)
    tb.launch("ampere_sgemm_128x64_nn", launch_ts=20, start=100, dur=800)
    ctx = rank_ctx(str(tb.write(tmp_path / "noshape.json")), {"mfu_threshold": 0.20})
    out = pd206.check(ctx)
    assert out.hit is None and "record_shapes" in out.skip


def job(ss, run_json=None, **th):
    analysis = SimpleNamespace(run=SimpleNamespace(steady_state=ss, run=run_json or {}))
    return JobContext(analysis, [], SimpleNamespace(thresholds=th))


def series(levels, noise=0.01, seed=0):
    rng = np.random.default_rng(seed)
    d = np.concatenate([np.full(n, v) for n, v in levels])
    return d * (1 + noise * rng.standard_normal(d.size))


def test_pd602_phase_change_like_the_field_report():
    # fast for 280 steps, then 26% slower for good: 2.34 s -> 2.94 s
    ss = analyze(series([(280, 2.34), (220, 2.94)]))
    out = pd602.check(job(ss, min_shift=0.10))
    assert out.hit is not None
    v = out.hit.evidence.values
    assert abs(v["change_step"] - 280) <= 5
    assert v["first_ms"] == pytest.approx(2340, rel=0.01) and v["last_ms"] == pytest.approx(2940, rel=0.01)
    assert out.hit.estimate.saving_us == pytest.approx(600e3, rel=0.03)


def test_pd602_growing_step_time_and_flat_series():
    grow = analyze(np.linspace(0.100, 0.150, 400))
    hit = pd602.check(job(grow, min_shift=0.10)).hit
    assert hit is not None and "keeps growing" in hit.evidence.values["what"]
    flat = analyze(series([(400, 0.1)]))
    assert pd602.check(job(flat, min_shift=0.10)).hit is None


def test_pd601_window_off_steady_state():
    d = series([(300, 0.10)])
    d[120:180] = 0.13  # a 60-step transient, 30% slower, around the profiled window
    window = np.zeros(d.size, bool)
    window[145:155] = True
    ss = analyze(d, exclude=window, window=window)
    out = pd601.check(job(ss, max_deviation=0.10))
    assert out.hit is not None and out.hit.evidence.values["deviation_pct"] == pytest.approx(30, abs=2)
    calm = analyze(series([(300, 0.10)]), exclude=window, window=window)
    assert pd601.check(job(calm, max_deviation=0.10)).hit is None


def test_pd104_oversubscription():
    run = {"world_size": 2, "launcher": "torchrun", "environment": {"torch_threads": 2}, "cpu": {"logical_cpus": 2},
           "ranks": [{"rank": 0, "torch_threads": 2}, {"rank": 1, "torch_threads": 2}]}
    analysis = SimpleNamespace(run=run)
    th = SimpleNamespace(thresholds={"max_threads_per_core": 1.0})
    out = pd104.check(JobContext(analysis, [], th))
    assert out.hit is not None and out.hit.evidence.values["busy_threads"] == 4
    assert out.hit.evidence.values["suggested_threads"] == 1
    # each rank set torch.set_num_threads(1) after start-up: the parent's count (2) must not be used
    for r in run["ranks"]:
        r["torch_threads"] = 1
    assert pd104.check(JobContext(analysis, [], th)).hit is None
    # an older run directory without per-rank counts: skipped, never guessed
    del run["ranks"]
    assert "thread count" in pd104.check(JobContext(analysis, [], th)).skip


def test_pd602_jump_is_a_level_change_not_a_trend():
    d = series([(10, 0.02), (70, 0.0049), (70, 0.0089)], noise=0.03)  # warm-up, then a 2x slowdown at step 80
    ss = analyze(d)
    analysis = SimpleNamespace(run=SimpleNamespace(steady_state=ss, run={},
                                                   steps={"duration_s": d, "profiler_phase": np.full(d.size, "none")}))
    hit = pd602.check(JobContext(analysis, [], SimpleNamespace(thresholds={"min_shift": 0.10}))).hit
    assert hit is not None
    v = hit.evidence.values
    assert abs(v["change_step"] - 80) <= 2 and "changes level" in v["what"]
    assert v["first_ms"] == pytest.approx(4.9, rel=0.05) and v["last_ms"] == pytest.approx(8.9, rel=0.05)


def test_pd601_silent_inside_the_runs_own_noise():
    d = series([(300, 0.10)], noise=0.15, seed=3)
    window = np.zeros(d.size, bool)
    window[145:155] = True
    d[125:145] *= 1.12  # neighbours 12% slow: above 10%, but well inside 3 sigma of a 15%-noise run
    ss = analyze(d, exclude=window, window=window)
    analysis = SimpleNamespace(run=SimpleNamespace(steady_state=ss, run={},
                                                   steps={"duration_s": d, "profiler_phase": np.where(window, "active", "none")}))
    out = pd601.check(JobContext(analysis, [], SimpleNamespace(thresholds={"max_deviation": 0.10})))
    assert out.hit is None


def _job(d, ss, window=None, **th):
    phase = np.where(window, "active", "none") if window is not None else np.full(d.size, "none")
    analysis = SimpleNamespace(run=SimpleNamespace(steady_state=ss, run={}, steps={"duration_s": d, "profiler_phase": phase}))
    return JobContext(analysis, [], SimpleNamespace(thresholds=th))


def test_interfered_series_is_pd603_not_a_phase_change():
    # a job sharing its cores: steps flip between ~80 ms and ~1.7 s (seen on a 2-core box with a neighbour)
    rng = np.random.default_rng(5)
    d = np.where(rng.random(300) < 0.5, 0.08, 1.7) * (1 + 0.05 * rng.standard_normal(300))
    window = np.zeros(300, bool)
    window[120:130] = True
    ss = analyze(d, exclude=window, window=window)
    assert ss.unstable and ss.spread > 10
    assert "no single level" in pd601.check(_job(d, ss, window, max_deviation=0.10)).skip
    assert "PD603" in pd602.check(_job(d, ss, window, min_shift=0.10, min_steps=50)).skip
    from perfdoctor.checks import pd603_step_time_instability as pd603

    out = pd603.check(_job(d, ss, window, max_spread=2.0, min_steps=20, min_spread_ms=1.0))
    v = out.hit.evidence.values
    steady = d[ss.steady_start_step:][~window[ss.steady_start_step:]]
    assert v["p10_ms"] == pytest.approx(1e3 * np.percentile(steady, 10))
    assert v["spread"] == pytest.approx(np.percentile(steady, 90) / np.percentile(steady, 10))
    assert out.hit.estimate.saving_us == pytest.approx(1e6 * (np.median(steady) - np.percentile(steady, 10)))
    # an even series: PD603 passes
    even = series([(200, 0.01)], noise=0.05)
    assert pd603.check(_job(even, analyze(even), max_spread=2.0, min_steps=20, min_spread_ms=1.0)).hit is None
    # sub-millisecond steps jittering 0.27–0.61 ms (a real tiny script's p10/p90): scheduler noise, not a finding
    tiny = series([(100, 0.0004)], noise=0.3, seed=3)
    ss_tiny = analyze(tiny)
    assert ss_tiny.spread > 2 and pd603.check(_job(tiny, ss_tiny, max_spread=2.0, min_steps=20,
                                                   min_spread_ms=1.0)).hit is None


def test_pd602_silent_when_the_run_recovers_from_a_slow_stretch():
    # train-only step times (ms) of a real `perfdoctor profile examples/mlp.py --steps 60 -- --slow-getitem-ms 5`
    # run on a shared 2-core box: 356 ms, a stretch at 659 ms, then 336 ms (the later state is the start's, -6%)
    ms = [130, 393, 668, 433, 659, 564, 391, 345, 342, 356, 353, 346, 406, 571, 658, 660, 660, 551, 665, 587, 661,
          663, 360, 422, 353, 383, 365, 661, 652, 514, 673, 652, 390, 342, 345, 352, 343, 340, 343, 339, 338, 340,
          337, 336, 334, 336, 337, 336, 336, 337, 334, 334, 334, 333, 337, 335, 337, 335, 336, 334]
    d = np.array(ms, float) / 1e3
    profiled = np.zeros(d.size, bool)
    profiled[[1, *range(24, 39)]] = True  # the FLOPs-counting step, the profiler's warm-up and active steps
    window = np.zeros(d.size, bool)
    window[29:39] = True
    ss = analyze(d, exclude=profiled, window=window)
    assert len(ss.phases) == 3 and ss.phases[1].median_s == pytest.approx(0.659, abs=0.001)
    assert ss.phases[-1].median_s / ss.phases[0].median_s - 1 == pytest.approx(-0.055, abs=0.01)
    out = pd602.check(_job(d, ss, min_shift=0.10, min_steps=50))
    assert out.hit is None and not out.skip
