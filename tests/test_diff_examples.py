"""`perfdoctor diff` on CPU runs of examples/mlp.py recorded here with `perfdoctor profile` (slow).

Both runs of a pair are recorded at the same time, so a machine that gets busier between two runs (other jobs
on a shared CI box) loads both sides alike. The interval includes the assumed run-to-run noise of CPU runs on
this shared box (``stats.CPU_RUN_NOISE_PCT``, 14.6%), so assertions stay at that measured noise, never tighter.
"""

from __future__ import annotations

import csv
import json
import math
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from perfdoctor.cli import main
from perfdoctor.diff.compare import compare, regression
from perfdoctor.diff.sides import load_side

REPO = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.slow]
ONE_THREAD = {"OMP_NUM_THREADS": "1"}  # see tests/test_rules_examples.py: one intra-op thread per process
STEPS = 250
_RUNS: dict[str, Path] = {}


def record(root: Path, runs: dict[str, list[str]], steps: int = STEPS) -> dict[str, Path]:
    """Record several `perfdoctor profile examples/mlp.py` runs at once (``steps`` each); name → run directory
    (cached by name)."""
    todo = {name: flags for name, flags in runs.items() if name not in _RUNS}
    procs = []
    for name, flags in todo.items():
        out = root / name
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
        procs.append(
            (
                name,
                out,
                subprocess.Popen(
                    cmd,
                    cwd=root,
                    env={**os.environ, **ONE_THREAD},
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                ),
            )
        )
    for name, out, proc in procs:
        _, err = proc.communicate(timeout=900)
        assert proc.returncode == 0, err[-3000:]
        _RUNS[name] = out
    return {name: _RUNS[name] for name in runs}


def show(capsys, text: str) -> None:
    """Print past pytest's capture (run with -s to see the measured pairs)."""
    with capsys.disabled():
        print(text)


def diff_json(capsys, before: Path, after: Path, *extra: str) -> tuple[int, dict]:
    capsys.readouterr()
    code = main(["diff", str(before), str(after), "--format", "json", *extra])
    return code, json.loads(capsys.readouterr().out)


def diff_runs_json(capsys, before: list[Path], after: list[Path], *extra: str) -> tuple[int, dict]:
    """`perfdoctor diff B1 B2 ... --vs A1 A2 ... --format json`."""
    capsys.readouterr()
    code = main(["diff", *map(str, before), "--vs", *map(str, after), "--format", "json", *extra])
    return code, json.loads(capsys.readouterr().out)


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("diff_runs")


def _overloaded() -> bool:
    """Three times more runnable work than cores (tests/test_rules_examples.py's bar): steps then drift by tens of
    percent within a run (measured: 7 ms steps at 50–110 ms, quarter means 79 → 54 ms), so a timing verdict
    describes the neighbours."""
    return os.getloadavg()[0] > 3 * (os.cpu_count() or 1)


def timing_verdicts_meaningful(capsys) -> bool:
    if _overloaded():
        show(
            capsys, f"  (load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores: timing verdict not asserted)"
        )
        return False
    return True


SMALL = ["--num-workers", "0"]


def test_same_settings_diff_reads_each_runs_whole_steady_state(root, capsys):
    # what two runs that changed nothing read on this machine (verdict, interval, gate) is a measurement of the
    # machine, not of the code: benchmarks/diff_same_settings.py; the interval's coverage is tested on synthetic
    # draws (tests/test_diff_runs.py)
    runs = record(root, {"same_a": SMALL, "same_b": SMALL})
    code, d = diff_json(capsys, runs["same_a"], runs["same_b"], "--fail-on-regression", "5")
    show(capsys, f"same settings (same_a vs same_b): {d['headline']}")
    ci = d["ci95_pct"]
    assert code == (1 if ci is not None and d["change_pct"] > 5 and ci[0] > 0 else 0)  # the gate reads the interval
    assert d["statistics"]["source"].startswith("steady-state train-only step times of the whole run")
    # the whole run's steady state, not the 10-step profiled window (default --active 10); the steady state
    # can be shorter than 100 steps when the run changed level under load (CI once kept 45 of 250)
    assert d["statistics"]["steps"]["before"] > 10 and d["statistics"]["steps"]["after"] > 10


def test_problem_flag_on_is_a_regression(root, capsys):
    # 40 ms of Python bookkeeping per step (PD105) on a ~7 ms step: far beyond 5%
    runs = record(root, {"clean": SMALL, "pymetrics": [*SMALL, "--python-metrics-ms", "40"]})
    code, d = diff_json(capsys, runs["clean"], runs["pymetrics"], "--fail-on-regression", "5")
    show(capsys, f"PD105 flag on: {d['headline']}")
    pd105 = {f["code"]: f for f in d["findings"]}["PD105"]
    # new; or persisting with a far smaller saving where the clean run's own Python time reached PD105's threshold
    # too: seen at load 10-11 on 2 cores, and once at load 1 (the clean small MLP's Python outside ops is ~8% of its
    # step, 15% fires): either way the flag's 40 ms per step is what grew
    assert pd105["status"] == "new" or (
        pd105["status"] == "persisting" and pd105["saving_after_us"] > 2 * pd105["saving_before_us"]
    )
    # the gate fires: 40 ms of Python per step is several times the noise of one run a side (measured at load 12
    # on 2 cores: +49.7%, 95% CI +30.9% to +68.5%); asserted below 3 runnable per core only: at load 5 on 2 cores
    # with other suites running the clean run's step doubled to 41 ms and one run a side read +24.0% (CI -34% to +135%)
    # the gate and the verdict always agree; the verdict itself is asserted when the clean run's step shows the
    # machine ran it at its own speed (~7 ms; under 20 ms) as well as below 3 runnable per core
    ci = d["ci95_pct"]
    assert code == (1 if ci is not None and d["change_pct"] > 5 and ci[0] > 0 else 0)
    if timing_verdicts_meaningful(capsys) and d["mean_step_us"]["before"] < 20_000:
        assert code == 1 and d["verdict"] == "slower" and d["ci95_pct"][0] > 0
    # the reverse direction is the fix: PD105 resolved with its predicted-vs-measured row
    rcode, r = diff_json(capsys, runs["pymetrics"], runs["clean"], "--fail-on-regression", "5")
    assert rcode == 0
    if pd105["status"] == "persisting":  # the loaded-machine case above: PD105 shrank, no prediction scored
        assert "PD105" in {s["code"] for s in r["shrunk"]}
        return
    row = r["predicted_vs_measured"]
    assert "PD105" in row["codes"]
    assert row["predicted_kind"] in ("upper-bound", "replayed", "replayed-together", "sum")
    assert row["measured_us"] == pytest.approx(r["mean_step_us"]["before"] - r["mean_step_us"]["after"])
    show(capsys, f"PD105 fix: predicted {row['predicted_us'] / 1e3:.2f} ms, measured {row['measured_us'] / 1e3:.2f} ms")
    if timing_verdicts_meaningful(capsys):
        # the step grew by most of the 40 ms of Python the flag adds
        assert d["mean_step_us"]["after"] - d["mean_step_us"]["before"] > 20_000
        assert r["verdict"] == "faster"


def test_dataloader_fix_resolves_pd101(root, capsys):
    slow = ["--slow-getitem-ms", "1"]  # 64 items × 1 ms of sleep per batch on a ~7 ms step
    runs = record(root, {"dl_slow": [*slow, "--num-workers", "0"], "dl_fixed": [*slow, "--num-workers", "2"]})
    code, d = diff_json(capsys, runs["dl_slow"], runs["dl_fixed"])
    show(capsys, f"PD101 fix (2 workers): {d['headline']}")
    assert code == 0
    f = {x["code"]: x for x in d["findings"]}["PD101"]
    assert f["status"] in ("resolved", "persisting") and (f["saving_after_us"] or 0) < f["saving_before_us"]
    # resolved: scored against the measured change; persisting with a smaller saving: listed as shrunk, no error
    if f["status"] == "resolved":
        assert "PD101" in d["predicted_vs_measured"]["codes"]
    else:
        assert "PD101" in {s["code"] for s in d["shrunk"]}
    assert {t["key"] for t in d["throughput"]} >= {"train_samples_per_s", "wall_samples_per_s"}
    if timing_verdicts_meaningful(capsys):
        assert d["verdict"] == "faster"
        assert {t["key"]: t for t in d["throughput"]}["train_samples_per_s"]["change_pct"] > 0


# -- several runs per side: the run-to-run noise measured, not assumed ------------------------------------------

MULTI_STEPS = 80  # the extra runs of the several-runs tests: short (a run's mean is what they compare)
PYMETRICS = [*SMALL, "--python-metrics-ms", "40"]


def run_means_from_csv(d: dict, side: str) -> list[float]:
    """Each run's mean step (µs) recomputed from its steps.csv: train-only time (duration − eval − checkpoint) of
    the steps from the run's steady-state start (as the diff reports it) outside the profiler's steps."""
    means = []
    for run in d[side]["runs"]:
        with open(Path(run["path"]) / "steps.csv", newline="") as fh:
            rows = list(csv.DictReader(fh))

        def num(row: dict, key: str) -> float:
            v = row.get(key) or ""
            return float(v) if v and v.lower() != "nan" else 0.0

        start = run["steady_start_step"]
        assert 0 <= start < len(rows)
        kept = [
            max(num(r, "duration_s") - num(r, "eval_s") - num(r, "checkpoint_s"), 0.0)
            for i, r in enumerate(rows)
            if i >= start and r["profiler_phase"] == "none" and r["duration_s"]
        ]
        assert len(kept) == run["steps"]
        means.append(1e6 * sum(kept) / len(kept))
    return means


def welch_over_runs(before: list[float], after: list[float]) -> tuple[float, float, float, tuple[float, float]]:
    """(change %, σ_run %, dof, 95% interval %) of two sides' run means, worked here with scipy's t: the log ratio
    of the means of the run means, its standard error by the delta method from the run means' variances ÷ k,
    Welch–Satterthwaite degrees of freedom."""
    from scipy.stats import t as student_t

    mb, ma = statistics.fmean(before), statistics.fmean(after)
    cv_b, cv_a = statistics.stdev(before) / mb, statistics.stdev(after) / ma
    c_b, c_a = cv_b**2 / len(before), cv_a**2 / len(after)
    dof = (c_a + c_b) ** 2 / (c_a**2 / (len(after) - 1) + c_b**2 / (len(before) - 1))
    h = student_t.ppf(0.975, dof) * math.sqrt(c_a + c_b)
    ratio = ma / mb
    ci = (100 * (ratio * math.exp(-h) - 1), 100 * (ratio * math.exp(h) - 1))
    return 100 * (ratio - 1), 100 * math.hypot(cv_b, cv_a), dof, ci


def test_three_runs_a_side_flag_on_is_slower_from_the_measured_noise(root, capsys):
    """3 runs with 40 ms of Python bookkeeping per step (PD105) against 3 without, each pair recorded at once:
    the verdict and the gate from the spread of the runs' means, recomputed here from their steps.csv."""
    record(root, {"clean": SMALL, "pymetrics": PYMETRICS})
    for i in (2, 3):
        record(root, {f"clean_{i}": SMALL, f"pymetrics_{i}": PYMETRICS}, steps=MULTI_STEPS)
    before = [_RUNS[n] for n in ("clean", "clean_2", "clean_3")]
    after = [_RUNS[n] for n in ("pymetrics", "pymetrics_2", "pymetrics_3")]
    sides_b, sides_a = [load_side(str(p)) for p in before], [load_side(str(p)) for p in after]
    diff = compare(sides_b, sides_a)  # each run loaded once for both directions (the CLI: tests/test_diff_runs.py)
    d = json.loads(diff.to_json())
    show(capsys, f"3 vs 3 runs, PD105 flag on: {d['headline']}")
    st = d["statistics"]
    assert st["runs"] == {"before": 3, "after": 3} and st["run_noise_measured"] is True
    mb, ma = run_means_from_csv(d, "before"), run_means_from_csv(d, "after")
    assert [r["mean_step_us"] for r in d["before"]["runs"]] == pytest.approx(mb, rel=1e-9)
    change, sigma, dof, ci = welch_over_runs(mb, ma)
    assert d["change_pct"] == pytest.approx(change) and st["dof"] == pytest.approx(dof)
    assert d["ci95_pct"] == pytest.approx(list(ci)) and st["run_noise_pct"] == pytest.approx(sigma)
    assert f"run-to-run noise measured from 6 runs: {sigma:.1f}%" in d["headline"]
    # 40 ms of Python on a ~7 ms step: several times the run-to-run noise of a machine that runs little else
    # (measured at load 8-9 on 2 cores: +75.4%, 95% CI +41.4% to +117.6%, σ_run 12.1%; at load 10-11 the runs
    # spread more, +80.6%, CI +3.2% to +216.2%, σ_run 26.1%, so the verdict is asserted below 3 runnable per core)
    assert d["change_pct"] > 20
    # the verdict needs runs that ran at the machine's own speed (clean step ~7 ms; under 20 ms): in the stop's CI
    # run at load ~5 with other suites running the clean runs averaged 28.67 ms, the runs' means spread 52.1%, and
    # 3 vs 3 read +100.9% (CI -25.3% to +440.6%): inconclusive, rightly
    if timing_verdicts_meaningful(capsys) and d["mean_step_us"]["before"] < 20_000:
        assert d["verdict"] == "slower" and d["ci95_pct"][0] > 0 and regression(diff, 5.0)
    pd105 = {f["code"]: f for f in d["findings"]}["PD105"]
    # on every flagged run; on a clean run only when other work inflated its Python time (seen once at load 7.7)
    assert pd105["runs_fired"]["after"] == 3 and pd105["saving_after_us"] > (pd105["saving_before_us"] or 0.0)
    # the reverse is the fix, scored with PD105's saving pooled over the 3 runs against the measured change
    r = json.loads(compare(sides_a, sides_b).to_json())
    pd105 = {f["code"]: f for f in r["findings"]}["PD105"]
    assert pd105["status"] in ("resolved", "persisting") and pd105["runs_fired"]["before"] == 3
    if pd105["status"] == "resolved":
        row = r["predicted_vs_measured"]
        assert "PD105" in row["codes"]
        assert row["measured_us"] == pytest.approx(statistics.fmean(ma) - statistics.fmean(mb))
    else:
        assert "PD105" in {s["code"] for s in r["shrunk"]}
