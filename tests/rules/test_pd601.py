"""PD601 transient-measurement: synthetic inputs with answers worked out by hand.

Moved from tests/test_rules_run_and_mfu.py (issue 9: one test file per rule).
"""

from types import SimpleNamespace

import numpy as np
import pytest
from rules_helpers import job, series

from perfdoctor.analysis.steady_state import analyze
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
    analysis = SimpleNamespace(
        run=SimpleNamespace(
            steady_state=ss, run={}, steps={"duration_s": d, "profiler_phase": np.where(window, "active", "none")}
        )
    )
    out = pd601.check(JobContext(analysis, [], SimpleNamespace(thresholds={"max_deviation": 0.10})))
    assert out.hit is None
