"""Rules on real CPU training runs of examples/ recorded with `perfdoctor profile`.

Each problem flag must make its rule fire, the fixed variant must keep it
silent and be measurably faster (both step times are printed: run with -s).
"""

from __future__ import annotations

import importlib.util
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from perfdoctor import pipeline
from perfdoctor.checks import engine
from perfdoctor.checks.catalogue import load_catalogue

REPO = Path(__file__).resolve().parents[1]
HAVE_PROFILE = importlib.util.find_spec("perfdoctor.capture.runner") is not None
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not HAVE_PROFILE, reason="`perfdoctor profile` (perfdoctor.capture.runner) not available"),
]
_CACHE: dict[str, tuple] = {}
# One intra-op thread per process: with two OpenMP threads on two cores, any other busy process makes every
# parallel region wait for a descheduled thread (seen: 0.3 ms steps at 78 ms), and the timing comparisons
# below measure the neighbour, not the fix. The DDP runs then use one core per rank.
ONE_THREAD = {"OMP_NUM_THREADS": "1"}


def profile(tmp_root: Path, name: str, flags: list[str], steps: int = 30, env: dict | None = None):
    """Run examples/mlp.py under `perfdoctor profile` (``env``: extra environment variables); returns
    (findings by code, skipped, median step s, samples/step)."""
    if name in _CACHE:
        return _CACHE[name]
    out = tmp_root / name
    cmd = [
        sys.executable,
        "-m",
        "perfdoctor",
        "profile",
        str(REPO / "examples" / "mlp.py"),
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
    analysis = pipeline.analyze_paths(
        [str(p) for p in sorted(out.glob("trace.rank*.pt.trace.json.gz"))], hash_inputs=False
    )
    analysis.run = run
    cat = load_catalogue()
    res = engine.run_checks(analysis, cat, engine.select_codes(cat, None, None)).to_report()
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


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("runs")


@pytest.fixture(autouse=True)
def quiet_machine():
    """Shares of a step are meaningless when other jobs make steps 100x slower (seen: load 7 on 2 cores)."""
    if _overloaded():  # only when other heavy jobs share the machine; CI runs the suite alone
        pytest.skip(f"load average {os.getloadavg()[0]:.1f} > {os.cpu_count()} cores: step shares not meaningful")


def _overloaded() -> bool:
    """Three times more runnable work than cores: step times (and waits) are then not meaningful."""
    return os.getloadavg()[0] > 3 * (os.cpu_count() or 1)


def _faster(slow, fast, what, per_sample=False, min_gain=0.10):
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


def test_pd101_slow_getitem_without_workers(root):
    slow = profile(root, "dl_slow", [*BIG, "--slow-getitem-ms", "2", "--num-workers", "0"])
    fixed = profile(root, "dl_fixed", [*BIG, "--slow-getitem-ms", "2", "--num-workers", "2"])
    assert "PD101" in slow[0] and slow[0]["PD101"]["severity"] == "high"
    wait_slow = slow[0]["PD101"]["saving_us_per_step"]
    wait_fixed = fixed[0]["PD101"]["saving_us_per_step"] if "PD101" in fixed[0] else 0.0
    assert wait_fixed < 0.3 * wait_slow
    # without the problem (a fast Dataset) the rule is silent; with 2 workers on a 2-core box the workers
    # still compete with training for the cores, so some wait remains: the fix is judged by the wait and the time
    healthy = profile(root, "healthy", [*BIG, "--num-workers", "0"])
    assert "PD101" not in healthy[0]
    print(f"\nPD101 wait: problem {wait_slow / 1e3:.2f} ms per step, 2 workers {wait_fixed / 1e3:.2f} ms per step")
    _faster(slow, fixed, "PD101 slow __getitem__")


def test_pd201_tiny_batch(root):
    slow = profile(root, "bs1", [*BIG, "--batch-size", "1", "--num-workers", "0"])
    fixed = profile(root, "healthy", [*BIG, "--num-workers", "0"])
    assert slow[0]["PD201"]["evidence"]["gemm_m_median"] == 1
    assert "PD201" not in fixed[0]
    _faster(slow, fixed, "PD201 batch 1 vs 64", per_sample=True)


def test_pd202_unfused_chain(root):
    slow = profile(root, "chain", [*SMALL, "--unfused-chain", "32"])
    fixed = profile(root, "small", SMALL)
    assert "PD202" in slow[0] and "PD202" not in fixed[0]
    _faster(slow, fixed, "PD202 elementwise chain")


# oneDNN without its bf16 instructions: a real run of a CPU that has no bf16 matrix units in effect
NO_BF16_UNITS = {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE"}


def test_pd204_bf16_autocast_without_bf16_units(root):
    slow = profile(root, "bf16_capped", [*SMALL, "--bf16-autocast"], env=NO_BF16_UNITS)
    fixed = profile(root, "fp32_capped", SMALL, env=NO_BF16_UNITS)
    assert "PD204" in slow[0] and "PD204" not in fixed[0]
    assert (
        "ONEDNN_MAX_CPU_ISA=AVX512_CORE" in slow[0]["PD204"]["message"]
        or "no bf16 matrix instructions" in slow[0]["PD204"]["message"]
    )
    # emulated bf16 GEMMs: measured 2.4x the fp32 step on an AMX Xeon capped at AVX512_CORE
    _faster(slow, fixed, "PD204 bf16 autocast, no bf16 units", min_gain=0.25)


def test_pd204_silent_where_bf16_runs_natively(root):
    native = profile(root, "bf16", [*SMALL, "--bf16-autocast"])
    run = json.loads((root / "bf16" / "run.json").read_text())
    # on a CPU with AMX-BF16 / AVX512-BF16, bf16 autocast was 3% faster on one day and 3% slower on
    # another: no run-time evidence that it costs more, so no finding (a wrong finding is worse than none)
    assert ("PD204" in native[0]) == (not run["cpu"]["bf16_matrix_units"])


def test_pd401_item_every_step_is_not_a_device_sync_on_cpu(root):
    slow = profile(root, "item", [*SMALL, "--item-every-step"])
    # .item() on a CPU tensor waits for no device: the rule is skipped with the reason, never fired
    assert "PD401" not in slow[0] and "CPU-only" in slow[1]["PD401"]


def test_pd302_grad_accum_without_no_sync(root):
    slow = profile(root, "ddp_sync", ["--ddp", "--grad-accum", "4", "--sync-every-microbatch"], steps=20)
    fixed = profile(root, "ddp_nosync", ["--ddp", "--grad-accum", "4"], steps=20)
    assert slow[0]["PD302"]["evidence"]["early_allreduce_calls_per_update"] > 0
    assert "PD302" not in fixed[0]
    _faster(slow, fixed, "PD302 all-reduce every micro-batch")


def test_healthy_run_has_no_medium_or_high_finding(root):
    healthy = profile(root, "healthy", [*BIG, "--num-workers", "0"])
    assert [c for c, f in healthy[0].items() if f["severity"] in ("medium", "high")] == []


def test_pd105_python_bookkeeping_between_ops(root):
    slow = profile(root, "pymetrics", [*SMALL, "--python-metrics-ms", "10"])
    fixed = profile(root, "small", SMALL)
    f = slow[0]["PD105"]
    # 10 ms of pure Python per step: the rule's estimate is that time (the loop's own Python adds a little)
    assert 10_000 <= f["saving_us_per_step"] <= 13_000
    assert "PD105" not in fixed[0]
    _faster(slow, fixed, "PD105 Python metrics in the loop")
