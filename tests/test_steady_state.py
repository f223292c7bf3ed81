"""Steady-state analysis on synthetic step-time series whose answers are worked out by hand."""

from __future__ import annotations

import numpy as np
import pytest

from perfdoctor.analysis.steps.steady_state import (
    analyze,
    detect_warmup,
    find_change_points,
    spearman,
    step_level,
    theil_sen,
)
from perfdoctor.capture.hooks import StepCounter
from perfdoctor.capture.schedule import ProfileConfig, Schedule
from perfdoctor.errors import PerfDoctorError


def noisy(level, n, rel=0.02, seed=0):
    return level * (1 + rel * np.random.default_rng(seed).standard_normal(n))


def test_stall_then_slower_phase_is_two_phases():
    # 280 steps at 2.34 s, then 2.94 s for the rest of a 500-step run (+2% noise)
    x = np.r_[noisy(2.34, 280, seed=1), noisy(2.94, 220, seed=2)]
    r = analyze(x)
    assert r.phase_change and len(r.phases) == 2
    assert abs(r.phases[1].start_step - 280) <= 3  # block medians of 3 steps
    assert r.phases[0].median_s == pytest.approx(2.34, rel=0.01)
    assert r.phases[1].median_s == pytest.approx(2.94, rel=0.01)
    assert r.median_s == pytest.approx(2.94, rel=0.01)  # the later phase is what a long run sees
    assert not r.trend_detected


def test_linear_growth_is_a_trend_not_phases():
    # 50 ms + 0.1 ms per step: rises 50 ms (~67% of the 75 ms median) over 500 steps
    x = (0.05 + 1e-4 * np.arange(500)) * (1 + 0.02 * np.random.default_rng(3).standard_normal(500))
    r = analyze(x)
    assert r.trend_detected and not r.phase_change
    assert r.trend_us_per_step == pytest.approx(100, rel=0.1)
    assert r.trend_rise_ratio == pytest.approx(0.0499 / 0.075, rel=0.1)


@pytest.mark.parametrize("rel", [0.02, 0.1, 0.25])
def test_flat_noisy_series_is_one_phase_without_trend(rel):
    r = analyze(noisy(0.05, 500, rel=rel, seed=4))
    assert len(r.phases) == 1 and not r.trend_detected
    assert r.warmup_steps <= 3
    assert r.median_s == pytest.approx(0.05, rel=0.02)


def test_warmup_steps_are_discarded():
    x = noisy(0.05, 300, seed=5)
    x[:4] = [1.2, 0.4, 0.09, 0.07]  # compile, then allocator growth: 4 slow steps
    r = analyze(x)
    assert r.warmup_steps == 4 and len(r.phases) == 1
    assert r.phases[0].start_step == 4


def test_slow_first_third_is_warmup_not_a_phase():
    x = noisy(0.0057, 40, seed=13)
    x[:13] = noisy(0.010, 13, seed=14)  # 13 slow steps of 40: getting faster is warm-up
    r = analyze(x)
    assert r.warmup_steps == 13 and not r.phase_change


def test_a_fast_start_is_not_warmup():
    x = noisy(0.05, 300, seed=11)
    x[:20] = noisy(0.035, 20, seed=12)  # faster first steps (e.g. caches still empty) are kept
    assert analyze(x).warmup_steps == 0


def test_long_warmup_is_not_a_phase():
    x = noisy(0.05, 400, seed=6)
    x[:30] = noisy(0.15, 30, seed=7)
    r = analyze(x)
    assert r.warmup_steps == 30 and not r.phase_change


def test_window_ratio_and_excluded_steps():
    x = noisy(0.05, 200, seed=8)
    window = np.zeros(200, bool)
    window[100:110] = True
    exclude = window.copy()
    exclude[95:100] = True  # profiler warm-up
    x[100:110] *= 1.3  # profiled steps 30% slower (profiler overhead)
    x[1] = 0.5  # FLOPs-counting step, excluded
    exclude[1] = True
    r = analyze(x, exclude=exclude, window=window)
    assert r.warmup_steps == 0
    assert r.window_ratio == pytest.approx(1.3, rel=0.03)
    assert r.window_neighbor_ratio == pytest.approx(1.0, rel=0.03)
    assert r.p90_s < 0.06  # neither the window nor step 1 leak into the statistics


def test_window_in_a_transient_shows_in_neighbor_ratio():
    x = noisy(0.05, 200, seed=9)
    x[90:125] = noisy(0.08, 35, seed=10)  # a transient around the window
    window = np.zeros(200, bool)
    window[100:110] = True
    r = analyze(x, exclude=window, window=window)
    assert r.window_neighbor_ratio == pytest.approx(1.6, rel=0.05)


def test_helpers():
    assert theil_sen(np.arange(10.0), 3 * np.arange(10.0) + 1) == pytest.approx(3)
    assert spearman(np.arange(20.0), np.arange(20.0) ** 2) == pytest.approx(1)
    assert find_change_points(np.r_[np.ones(50), 2 * np.ones(50)], 10) == [50]
    assert find_change_points(np.ones(100), 10) == []
    assert detect_warmup(np.r_[[5.0, 3.0], np.ones(20)], level=1.0, noise=0.0) == 2
    with pytest.raises(ValueError):
        analyze([])


def test_default_schedule_places_window_in_steady_state():
    s = Schedule.resolve(ProfileConfig(steps=500))
    assert (s.wait, s.warmup, s.active, s.repeat) == (200, 5, 10, 1)
    assert s.window_steps(0) == (205, 214)
    assert [s.phase(i) for i in (199, 200, 204, 205, 214, 215)] == [
        "none",
        "warmup",
        "warmup",
        "active",
        "active",
        "none",
    ]
    r = Schedule.resolve(ProfileConfig(steps=500, repeat=3))
    assert r.window_steps(2)[1] < 500 and r.window_steps(0)[0] > 100
    with pytest.raises(PerfDoctorError):
        Schedule.resolve(ProfileConfig(steps=20, wait=15, active=10))


def test_step_counter_counts_the_first_optimizer_and_api_mode():
    seen = []
    c = StepCounter()
    c.add_callback(seen.append)

    class Opt:
        pass

    a, b = Opt(), Opt()
    for _ in range(3):
        c.on_optimizer_step(a)
        c.on_optimizer_step(b)  # a second optimizer in the same step is not another step
    assert seen == [1, 2, 3]
    c.on_mark()  # perfdoctor.step(): from now on only explicit marks count
    c.on_optimizer_step(a)
    assert seen == [1, 2, 3, 4] and c.api_mode


def test_two_worker_dataloader_cycle_is_one_level():
    """A real 2-worker run (tests/data/README.md): the steps alternate ~64 / ~9 ms, so no single step is typical,
    but every pair of consecutive steps takes one worker's batch time."""
    import csv
    from pathlib import Path

    with open(Path(__file__).parent / "data" / "mlp_slow_getitem_2workers.steps.csv") as fh:
        d = np.array([float(r["duration_s"]) for r in csv.DictReader(fh)])
    ss = analyze(d)
    assert ss.cycle_steps == 2 and not ss.unstable
    body = d[ss.steady_start_step :]
    # single steps: two modes, the median one of them; the 2-step level is the steady span's mean step (the
    # throughput) to within 5%, and ~ (64 items x 1 ms + collate) / 2 workers
    assert np.percentile(body, 90) / np.percentile(body, 10) > 5
    assert abs(ss.median_s - body.mean()) < 0.05 * body.mean()
    assert 0.032 < ss.median_s < 0.040
    assert any("cycle of 2" in n for n in ss.notes)


def test_cycle_found_through_a_slip_and_noise_is_no_cycle():
    # a 3-step cycle 30 / 5 / 5 ms whose phase slips by one step halfway: every 3-step mean is 13.33 ms
    pattern = np.tile([0.030, 0.005, 0.005], 20)
    x = np.concatenate([pattern[:30], pattern[31:], [0.005]])
    lv = step_level(x)
    assert lv.cycle_steps == 3 and lv.median_s == pytest.approx(0.040 / 3, rel=1e-9)
    # independent lognormal noise spread 3.7x (p90/p10): no cycle, the plain median
    y = np.random.default_rng(0).lognormal(-4, 0.5, 200)
    lv = step_level(y)
    assert lv.cycle_steps == 1 and lv.median_s == pytest.approx(float(np.median(y)))
    # a level shift (30 steps at 60 ms in noise spread 8-27 ms) correlates at lag 1 as much as at lag 2: no cycle
    w = np.random.default_rng(7).uniform(0.008, 0.027, 200)
    w[80:110] = 0.060
    assert step_level(w).cycle_steps == 1
    # a steady series keeps its median whatever its order
    z = noisy(0.01, 100)
    assert step_level(z) == (float(np.median(z)), float(np.percentile(z, 10)), float(np.percentile(z, 90)), 1)
    with pytest.raises(ValueError):
        step_level([])
