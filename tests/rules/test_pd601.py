"""PD601 transient-measurement: synthetic inputs with answers worked out by hand.

Moved from tests/test_rules_run_and_mfu.py (issue 9: one test file per rule).
"""

from types import SimpleNamespace

import numpy as np
import pytest
from rules_helpers import job, run_analysis, series

from perfdoctor.analysis.steps.steady_state import analyze
from perfdoctor.checks import pd601_transient_measurement as pd601
from perfdoctor.checks.context import JobContext


def test_pd601_fires_when_the_window_is_off_steady_state():
    d = series([(300, 0.10)])
    d[120:180] = 0.13  # a 60-step transient, 30% slower, around the profiled window
    window = np.zeros(d.size, bool)
    window[145:155] = True
    ss = analyze(d, exclude=window, window=window)
    out = pd601.check(job(ss, max_deviation=0.10))
    assert out.hit is not None and out.hit.evidence.values["deviation_pct"] == pytest.approx(30, abs=2)
    calm = analyze(series([(300, 0.10)]), exclude=window, window=window)
    assert pd601.check(job(calm, max_deviation=0.10)).hit is None


def test_pd601_silent_inside_the_runs_own_noise():
    d = series([(300, 0.10)], noise=0.15, seed=3)
    window = np.zeros(d.size, bool)
    window[145:155] = True
    d[125:145] *= 1.12  # neighbours 12% slow: above 10%, but well inside 3 sigma of a 15%-noise run
    ss = analyze(d, exclude=window, window=window)
    analysis = run_analysis(
        SimpleNamespace(
            steady_state=ss, run={}, steps={"duration_s": d, "profiler_phase": np.where(window, "active", "none")}
        )
    )
    out = pd601.check(JobContext(analysis, [], SimpleNamespace(thresholds={"max_deviation": 0.10})))
    assert out.hit is None


def _unstable_run(window_s, neighbours_s=None):
    """400 steps drawn evenly from 8-27 ms (p90/p10 ≈ 2.5: no single level, PD603); steps 200-207 profiled at
    ``window_s``; the 16 steps on each side (the neighbours steady_state compares: 2 × the window) at
    ``neighbours_s`` when given (a num_workers=2 run: steady 8-27 ms, profiled 1.7-5.2 ms)."""
    rng = np.random.default_rng(7)
    d = rng.uniform(0.008, 0.027, 400)
    window = np.zeros(d.size, bool)
    window[200:208] = True
    d[window] = window_s
    if neighbours_s is not None:
        d[184:200] = neighbours_s
        d[208:224] = neighbours_s
    return analyze(d, exclude=window, window=window)


def test_pd601_fires_on_an_unstable_run_when_the_window_lies_outside_its_p10_p90_band():
    ss = _unstable_run(0.0023)
    assert ss.unstable and ss.window_median_s == pytest.approx(0.0023)
    out = pd601.check(job(ss, max_deviation=0.10))
    # the profiled steps (2.3 ms, with the profiler's overhead) are faster than 90% of the unprofiled steps
    assert out.hit is not None and 0.0023 < ss.p10_s
    v = out.hit.evidence.values
    assert v["window_ms"] == pytest.approx(2.3) and v["direction"] == "faster"
    assert v["deviation_pct"] == pytest.approx(100 * abs(0.0023 / ss.median_s - 1))
    assert "below the steady state's p10-p90 band" in v["basis"]
    # slow unprofiled neighbours (60 ms, above p90) are a transient too, whatever the profiled steps did
    ss = _unstable_run(0.012, neighbours_s=0.060)
    assert ss.unstable and ss.p90_s < 0.060
    out = pd601.check(job(ss, max_deviation=0.10))
    assert out.hit is not None and out.hit.evidence.values["window_ms"] == pytest.approx(60.0)
    assert out.hit.evidence.values["direction"] == "slower"


def test_pd601_skips_an_unstable_run_whose_window_is_inside_its_band():
    out = pd601.check(job(_unstable_run(0.015, neighbours_s=0.016), max_deviation=0.10))
    assert out.hit is None and out.skip and "inside their p10-p90 band" in out.skip


def test_pd601_fires_when_the_window_lies_in_a_phase_the_run_left():
    """examples/mlp.py --slowdown-at 200 --slowdown-factor 3 profiled steps 125-134 (31.8 ms)
    while the run settled at 59.2 ms from step 202; PD601 passed because the slow phase's noise (3 robust sigmas
    39 ms, on a loaded machine) covered the 31 ms gap. Here: 200 steps at 25 ms (1% noise), 100 at 60 ms with
    30% noise, steps 125-134 profiled. The neighbours' median is ~25 ms: 58% faster than the last phase's ~60 ms,
    a gap inside that phase's 3 sigma, yet the window is in the phase the run left at step 200."""
    from rules_helpers import run_job

    rng = np.random.default_rng(11)
    d = np.concatenate([0.025 * (1 + 0.01 * rng.standard_normal(200)), 0.060 * (1 + 0.30 * rng.standard_normal(100))])
    window = np.zeros(d.size, bool)
    window[125:135] = True
    ss = analyze(d, exclude=window, window=window)
    assert ss.phase_change and ss.steady_start_step == 200  # the input is what the test says
    q75, q25 = np.percentile(d[200:], [75, 25])
    assert abs(ss.window_neighbor_median_s - ss.median_s) <= 3 * (q75 - q25) / 1.349  # the old noise gate excused it
    out = pd601.check(run_job(d, ss, window, max_deviation=0.10))
    assert out.hit is not None
    v = out.hit.evidence.values
    neighbours = np.median(np.concatenate([d[105:125], d[135:155]]))  # 2 × the window's 10 steps on each side
    assert v["window_ms"] == pytest.approx(neighbours * 1e3, rel=0.02) and v["direction"] == "faster"
    assert v["steady_ms"] == pytest.approx(np.median(d[200:]) * 1e3, rel=1e-9)
    assert "in the phase of steps 0–199 (median 25.0 ms) that the run left at step 200" in v["basis"]
    # the same window in the last phase is judged by the noise gate as before
    window2 = np.zeros(d.size, bool)
    window2[250:260] = True
    assert pd601._phase_left(SimpleNamespace(steps={"profiler_phase": np.where(window2, "active", "none")}), ss) is None
