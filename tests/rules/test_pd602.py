"""PD602 step-time-phase-change: synthetic inputs with answers worked out by hand.

Moved from tests/test_rules_run_and_mfu.py (issue 9: one test file per rule).
"""

from types import SimpleNamespace

import numpy as np
import pytest
from rules_helpers import job, run_analysis, run_job, series

from perfdoctor.analysis.steps.steady_state import analyze
from perfdoctor.checks import pd602_step_time_phase_change as pd602
from perfdoctor.checks.context import JobContext


def test_pd602_fires_on_a_phase_change_like_the_field_report():
    # fast for 280 steps, then 26% slower for good: 2.34 s -> 2.94 s
    ss = analyze(series([(280, 2.34), (220, 2.94)]))
    out = pd602.check(job(ss, min_shift=0.10, min_steps=50))
    assert out.hit is not None
    v = out.hit.evidence.values
    assert abs(v["change_step"] - 280) <= 5
    assert v["first_ms"] == pytest.approx(2340, rel=0.01) and v["last_ms"] == pytest.approx(2940, rel=0.01)
    assert out.hit.estimate.saving_us == pytest.approx(600e3, rel=0.03)


def test_pd602_growing_step_time_and_flat_series():
    grow = analyze(np.linspace(0.100, 0.150, 400))
    hit = pd602.check(job(grow, min_shift=0.10, min_steps=50)).hit
    assert hit is not None and "keeps growing" in hit.evidence.values["what"]
    flat = analyze(series([(400, 0.1)]))
    assert pd602.check(job(flat, min_shift=0.10, min_steps=50)).hit is None


def test_pd602_jump_is_a_level_change_not_a_trend():
    d = series([(10, 0.02), (70, 0.0049), (70, 0.0089)], noise=0.03)  # warm-up, then a 2x slowdown at step 80
    ss = analyze(d)
    analysis = run_analysis(
        SimpleNamespace(steady_state=ss, run={}, steps={"duration_s": d, "profiler_phase": np.full(d.size, "none")})
    )
    hit = pd602.check(JobContext(analysis, [], SimpleNamespace(thresholds={"min_shift": 0.10, "min_steps": 50}))).hit
    assert hit is not None
    v = hit.evidence.values
    assert abs(v["change_step"] - 80) <= 2 and "changes level" in v["what"]
    assert v["first_ms"] == pytest.approx(4.9, rel=0.05) and v["last_ms"] == pytest.approx(8.9, rel=0.05)


def test_pd602_silent_when_the_run_recovers_from_a_slow_stretch():
    # train-only step times (ms) of a real `perfdoctor profile examples/mlp.py --steps 60 -- --slow-getitem-ms 5`
    # run on a shared 2-core box: 356 ms, a stretch at 659 ms, then 336 ms (the later state is the start's, -6%)
    ms = [
        130,
        393,
        668,
        433,
        659,
        564,
        391,
        345,
        342,
        356,
        353,
        346,
        406,
        571,
        658,
        660,
        660,
        551,
        665,
        587,
        661,
        663,
        360,
        422,
        353,
        383,
        365,
        661,
        652,
        514,
        673,
        652,
        390,
        342,
        345,
        352,
        343,
        340,
        343,
        339,
        338,
        340,
        337,
        336,
        334,
        336,
        337,
        336,
        336,
        337,
        334,
        334,
        334,
        333,
        337,
        335,
        337,
        335,
        336,
        334,
    ]
    d = np.array(ms, float) / 1e3
    profiled = np.zeros(d.size, bool)
    profiled[[1, *range(24, 39)]] = True  # the FLOPs-counting step, the profiler's warm-up and active steps
    window = np.zeros(d.size, bool)
    window[29:39] = True
    ss = analyze(d, exclude=profiled, window=window)
    assert len(ss.phases) == 3 and ss.phases[1].median_s == pytest.approx(0.659, abs=0.001)
    assert ss.phases[-1].median_s / ss.phases[0].median_s - 1 == pytest.approx(-0.055, abs=0.01)
    out = pd602.check(run_job(d, ss, min_shift=0.10, min_steps=50))
    assert out.hit is None and not out.skip


def test_pd602_share_is_of_the_steps_its_us_come_from():
    """µs and share from one set of steps (issue 10): 2.34 s -> 2.94 s costs 600 ms of the 2.94 s steady step
    (20.4%); on a report whose denominator is another step (a 3.5 s profiled window) the saving is the same
    20.4% of it, 714.3 ms, with both figures in its method; on the steady step itself it is unchanged."""
    from perfdoctor.checks.restate import on_denominator

    ss = analyze(series([(280, 2.34), (220, 2.94)], noise=0.0))
    out = pd602.check(job(ss, min_shift=0.10, min_steps=50))
    assert out.hit is not None and out.hit.estimate is not None
    est = out.hit.estimate
    assert ss.median_s == pytest.approx(2.94) and est.basis.step_us == pytest.approx(2.94e6)
    assert out.hit.fields["cost"] == (
        "; it costs 600.0 ms per step, 20.4% of the run's median unprofiled steady step (2,940.0 ms)"
    )
    same = on_denominator(out, 2.94e6).hit.estimate
    assert same.saving_us == pytest.approx(600e3) and same.method == est.method
    other = on_denominator(out, 3.5e6).hit.estimate
    assert other.saving_us == pytest.approx(600e3 * 3.5 / 2.94)
    assert "measured as 600.00 ms of the run's median unprofiled steady step (2,940.00 ms)" in other.method
    assert "same share (20.4%) of the report's step (3,500.00 ms)" in other.method
