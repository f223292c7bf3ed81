"""PD603 step-time-instability: synthetic inputs with answers worked out by hand.

Moved from tests/test_rules_run_and_mfu.py (issue 9: one test file per rule).
"""

import numpy as np
import pytest
from rules_helpers import run_job, series

from perfdoctor.analysis.steps.steady_state import analyze
from perfdoctor.checks import pd601_transient_measurement as pd601
from perfdoctor.checks import pd602_step_time_phase_change as pd602


def test_pd603_fires_on_an_interfered_series_not_a_phase_change():
    # a job sharing its cores: steps flip between ~80 ms and ~1.7 s (seen on a 2-core box with a neighbour)
    rng = np.random.default_rng(5)
    d = np.where(rng.random(300) < 0.5, 0.08, 1.7) * (1 + 0.05 * rng.standard_normal(300))
    window = np.zeros(300, bool)
    window[120:130] = True
    ss = analyze(d, exclude=window, window=window)
    assert ss.unstable and ss.spread > 10
    assert "no single level" in pd601.check(run_job(d, ss, window, max_deviation=0.10)).skip
    assert "PD603" in pd602.check(run_job(d, ss, window, min_shift=0.10, min_steps=50)).skip
    from perfdoctor.checks import pd603_step_time_instability as pd603

    out = pd603.check(run_job(d, ss, window, max_spread=2.0, min_steps=20, min_spread_ms=1.0))
    v = out.hit.evidence.values
    steady = d[ss.steady_start_step :][~window[ss.steady_start_step :]]
    assert v["p10_ms"] == pytest.approx(1e3 * np.percentile(steady, 10))
    assert v["spread"] == pytest.approx(np.percentile(steady, 90) / np.percentile(steady, 10))
    # a dispersion statistic, not a saving: no estimate, the coefficient of variation (population SD ÷ mean)
    assert out.hit.estimate is None
    assert v["cv_pct"] == pytest.approx(100 * np.sqrt(np.mean((steady - steady.mean()) ** 2)) / steady.mean())
    # an even series: PD603 passes
    even = series([(200, 0.01)], noise=0.05)
    assert pd603.check(run_job(even, analyze(even), max_spread=2.0, min_steps=20, min_spread_ms=1.0)).hit is None
    # sub-millisecond steps jittering 0.27–0.61 ms (a real tiny script's p10/p90): scheduler noise, not a finding
    tiny = series([(100, 0.0004)], noise=0.3, seed=3)
    ss_tiny = analyze(tiny)
    assert (
        ss_tiny.spread > 2
        and pd603.check(run_job(tiny, ss_tiny, max_spread=2.0, min_steps=20, min_spread_ms=1.0)).hit is None
    )


def test_pd603_silent_on_an_even_series():
    from perfdoctor.checks import pd603_step_time_instability as pd603

    # 200 steps of 10 ms ± 5% (seeded): p90 / p10 ≈ (1 + 1.28·0.05) / (1 − 1.28·0.05) ≈ 1.14, under the limit of 2
    even = series([(200, 0.01)], noise=0.05)
    ss = analyze(even)
    out = pd603.check(run_job(even, ss, max_spread=2.0, min_steps=20, min_spread_ms=1.0))
    assert out.hit is None and ss.spread == pytest.approx(1.14, abs=0.05)


def test_pd603_names_a_machine_load_above_the_cores():
    # the same interfered series; run.json recorded load averages 3.1 at the start and 9.3 at the end of the run
    # on 2 logical CPUs (the cause must not sit only in the fix text)
    from perfdoctor.checks import pd603_step_time_instability as pd603

    rng = np.random.default_rng(5)
    d = np.where(rng.random(300) < 0.5, 0.08, 1.7) * (1 + 0.05 * rng.standard_normal(300))
    ss = analyze(d)
    job = run_job(d, ss, max_spread=2.0, min_steps=20, min_spread_ms=1.0)
    job.analysis.run.run = {"cpu": {"logical_cpus": 2}, "load_avg": {"start": [3.1, 2.0, 1.0], "end": [9.3, 8.8, 7.0]}}
    v = pd603.check(job).hit.evidence.values
    assert v["machine_load"] == (
        "; the machine's load average was 9.3 on 2 logical CPUs during the run: processes competed for the cores"
    )
    job.analysis.run.run["load_avg"] = {"start": [1.2, 1.0, 1.0], "end": [1.9, 1.0, 1.0]}  # under the cores: silent
    assert pd603.check(job).hit.evidence.values["machine_load"] == ""
