"""Real CPU training runs of examples/ recorded with `perfdoctor profile`, shared by the rule tests that use them
(tests/test_rules_examples.py and tests/rules/test_pd201.py, test_pd204.py, test_pd302.py).

``profile(name, flags)`` runs examples/mlp.py once per name per session (the runs are cached: the healthy run
serves several rules); ``@example`` marks a test that needs such runs (slow; skipped without
`perfdoctor profile` or on an overloaded machine).
"""

from __future__ import annotations

import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from perfdoctor import pipeline

REPO = Path(__file__).resolve().parents[1]
HAVE_PROFILE = importlib.util.find_spec("perfdoctor.capture.runner") is not None
_CACHE: dict[str, tuple] = {}
_ROOT: list[Path] = []  # one folder of runs per session
# One intra-op thread per process: with two OpenMP threads on two cores, any other busy process makes every
# parallel region wait for a descheduled thread (seen: 0.3 ms steps at 78 ms), and the timing comparisons
# below measure the neighbour, not the fix. The DDP runs then use one core per rank.
ONE_THREAD = {"OMP_NUM_THREADS": "1"}


def runs_root() -> Path:
    """The session's folder of example runs (``runs_root() / name`` is the run directory of ``profile(name)``)."""
    if not _ROOT:
        _ROOT.append(Path(tempfile.mkdtemp(prefix="perfdoctor-example-runs-")))
    return _ROOT[0]


def profile(name: str, flags: list[str], steps: int = 30, env: dict | None = None, script: str = "mlp.py"):
    """Run examples/``script`` under `perfdoctor profile` (``env``: extra environment variables); returns
    (findings by code, skipped, median step s, samples/step)."""
    if name in _CACHE:
        return _CACHE[name]
    tmp_root = runs_root()
    out = tmp_root / name
    cmd = [
        sys.executable,
        "-m",
        "perfdoctor",
        "profile",
        str(REPO / "examples" / script),
        "--steps",
        str(steps),
        "--out",
        str(out),
        "--no-report",
        "--",
        *flags,
    ]
    proc = subprocess.run(
        cmd, capture_output=True, text=True, timeout=600, cwd=tmp_root, env={**os.environ, **ONE_THREAD, **(env or {})}
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    from perfdoctor.capture.run_data import load_run_dir

    run = load_run_dir(out)
    res = pipeline.build([str(out)]).report
    durations = run.steps["duration_s"][steps // 3 :]
    samples = float(statistics.median(run.steps["samples"][steps // 3 :]))
    result = (
        {f["code"]: f for f in res["findings"]},
        {s["code"]: s["reason"] for s in res["skipped_checks"]},
        float(statistics.median(durations)),
        samples,
    )
    _CACHE[name] = result
    return result


@pytest.fixture
def quiet_machine():
    """Shares of a step are meaningless when other jobs make steps 100x slower (seen: load 7 on 2 cores)."""
    if _overloaded():  # only when other heavy jobs share the machine; CI runs the suite alone
        pytest.skip(f"load average {os.getloadavg()[0]:.1f} > {os.cpu_count()} cores: step shares not meaningful")


def _overloaded() -> bool:
    """Three times more runnable work than cores: step times (and waits) are then not meaningful."""
    return os.getloadavg()[0] > 3 * (os.cpu_count() or 1)


def faster(slow, fast, what, per_sample=False, min_gain=0.10):
    """Print both step times; assert the fix is faster by ``min_gain`` (skipped, after the rule checks, on an
    overloaded box)."""
    t_slow = slow[2] / (slow[3] if per_sample else 1)
    t_fast = fast[2] / (fast[3] if per_sample else 1)
    unit = "per sample" if per_sample else "per step"
    print(f"\n{what}: problem {t_slow * 1e3:.3f} ms {unit}, fixed {t_fast * 1e3:.3f} ms {unit}")
    if _overloaded():  # only when other heavy jobs share the machine; CI runs the suite alone
        pytest.skip(f"load average {os.getloadavg()[0]:.1f} > {os.cpu_count()} cores: timing comparison not meaningful")
    assert t_fast < (1 - min_gain) * t_slow


# A model big enough that per-batch data handling is a small share of the step: the healthy baseline.
BIG = ["--hidden", "2048"]
# The default (small) MLP: a ~7 ms step, where even the per-sample collate of a fast Dataset is ~10% of the
# step (PD101 rightly says so); used where the problem under test needs a small model to show.
SMALL = ["--num-workers", "0"]


# oneDNN without its bf16 instructions: a real run of a CPU that has no bf16 matrix units in effect
NO_BF16_UNITS = {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE"}


def real_run(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Mark a test that profiles real example runs and compares no timing: slow, needs `perfdoctor profile`; a
    loaded machine does not matter to it."""
    no_profile = pytest.mark.skipif(
        not HAVE_PROFILE, reason="`perfdoctor profile` (perfdoctor.capture.runner) not available"
    )
    return pytest.mark.slow(no_profile(fn))


def example(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Mark a test that profiles real example runs: slow, needs `perfdoctor profile`, a quiet machine."""
    for mark in (
        pytest.mark.slow,
        pytest.mark.skipif(not HAVE_PROFILE, reason="`perfdoctor profile` (perfdoctor.capture.runner) not available"),
        pytest.mark.usefixtures("quiet_machine"),
    ):
        fn = mark(fn)
    return fn
