"""`perfdoctor diff` with several runs per side: the run-to-run noise measured from the runs, worked by hand.

The runs are copies of the bundled CPU run (its report JSON, or its run directory) with every step time scaled by
a factor, so each run's mean is that factor × the bundled run's mean (computed here from the raw JSON) and the
interval follows by hand. Real runs recorded with `perfdoctor profile` are in tests/test_diff_examples.py (slow).
"""

from __future__ import annotations

import csv
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import t as student_t

from perfdoctor.cli import main
from perfdoctor.diff.model import Diff
from perfdoctor.render.diff_html import render_diff_html
from perfdoctor.render.diff_markdown import render_diff_markdown

REPO = Path(__file__).resolve().parents[1]
RUN_DIR = REPO / "sample_traces" / "tiny_gpt_cpu_run"
RUN_REPORT = REPO / "reports" / "tiny_gpt_cpu_run.json"


def _base_mean_us() -> float:
    """The bundled run's steady-state train-only mean step (µs), from its report JSON's raw step series."""
    run = json.loads(RUN_REPORT.read_text())["run"]
    start = run["steady_state"]["steady_start_step"]
    steady = [
        t
        for i, (t, p) in enumerate(zip(run["steps"]["train_s"], run["steps"]["profiler_phase"]))
        if i >= start and p == "none"
    ]
    return 1e6 * sum(steady) / len(steady)


def _finding(code: str, saving_us: float) -> dict:
    """A complete finding dict of the report schema (docs/report-schema.md#findings)."""
    return {
        "code": code,
        "name": f"rule-{code}",
        "category": "c",
        "severity": "high",
        "position": 1,
        "rank": 0,
        "message": "x",
        "saving_us_per_step": saving_us,
        "saving_pct_of_step": 0.0,
        "saving_method": "m",
        "evidence": {},
        "steps": [],
        "fix": "",
        "example_before": "",
        "example_after": "",
        "references": [],
    }


def _report(tmp_path: Path, name: str, factor: float, edits: dict | None = None) -> Path:
    """The bundled run's report JSON with every step time × ``factor`` (and top-level keys replaced)."""
    doc = json.loads(RUN_REPORT.read_text())
    steps = doc["run"]["steps"]
    for key in ("train_s", "duration_s"):
        steps[key] = [None if v is None else v * factor for v in steps[key]]
    doc.update(edits or {})
    out = tmp_path / f"{name}.json"
    out.write_text(json.dumps(doc))
    return out


def _run_dir(parent: Path, name: str, factor: float) -> Path:
    """A copy of the bundled run directory with every steps.csv duration × ``factor``."""
    out = parent / name
    shutil.copytree(RUN_DIR, out)
    with open(out / "steps.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    for r in rows:
        r["duration_s"] = repr(float(r["duration_s"]) * factor)
    with open(out / "steps.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return out


def _diff(capsys, *argv: str) -> tuple[int, dict]:
    capsys.readouterr()
    code = main(["diff", *argv, "--format", "json"])
    out = capsys.readouterr()
    assert out.out, out.err
    return code, json.loads(out.out)


BEFORE_F = [1.00, 1.02, 0.98]
AFTER_F = [1.10, 1.13, 1.07]


def test_three_runs_a_side_interval_from_the_run_means_by_hand(tmp_path, capsys):
    b = [str(_report(tmp_path, f"b{i}", f)) for i, f in enumerate(BEFORE_F)]
    a = [str(_report(tmp_path, f"a{i}", f)) for i, f in enumerate(AFTER_F)]
    code, d = _diff(capsys, *b, "--vs", *a, "--fail-on-regression", "5")
    m0 = _base_mean_us()
    # by hand: run means f × m0; M_b = m0, M_a = 1.10 m0 → +10%. cv_b = sd(1.00, 1.02, 0.98) ÷ 1 = 0.02,
    # cv_a = sd(1.10, 1.13, 1.07) ÷ 1.10 = 0.03 ÷ 1.10 = 0.027273; c = cv² ÷ 3: 1.3333e-4, 2.4793e-4;
    # se = √(3.8126e-4) = 0.019526; Welch–Satterthwaite (c_a + c_b)² ÷ (c_a² ÷ 2 + c_b² ÷ 2) = 3.6686;
    # t = 2.8782, h = 0.056200; interval 100 (1.1 e^(∓h) − 1) = +3.99% to +16.36%
    c_b, c_a = 0.02**2 / 3, (0.03 / 1.10) ** 2 / 3
    dof = (c_a + c_b) ** 2 / (c_a**2 / 2 + c_b**2 / 2)
    h = student_t.ppf(0.975, dof) * math.sqrt(c_a + c_b)
    assert dof == pytest.approx(3.6686, abs=1e-4) and h == pytest.approx(0.056200, abs=1e-6)
    assert d["mean_step_us"]["before"] == pytest.approx(m0) and d["mean_step_us"]["after"] == pytest.approx(1.1 * m0)
    assert d["change_pct"] == pytest.approx(10.0)
    assert d["ci95_pct"] == pytest.approx([100 * (1.1 * math.exp(-h) - 1), 100 * (1.1 * math.exp(h) - 1)])
    assert d["ci95_pct"] == pytest.approx([3.99, 16.36], abs=0.01)
    assert d["verdict"] == "slower" and code == 1  # +10% > 5% and the interval excludes 0: the gate fires
    st = d["statistics"]
    assert st["dof"] == pytest.approx(dof)
    assert st["runs"] == {"before": 3, "after": 3} and st["run_noise_measured"] is True
    assert st["run_cv_pct"]["before"] == pytest.approx(2.0) and st["run_cv_pct"]["after"] == pytest.approx(300 / 110)
    sigma = 100 * math.hypot(0.02, 0.03 / 1.10)  # σ_run of one run against one: 3.38%
    assert st["run_noise_pct"] == pytest.approx(sigma) and sigma == pytest.approx(3.382, abs=1e-3)
    assert "run-to-run noise measured from 6 runs: 3.4%" in d["headline"] and "3 vs 3 runs" in d["headline"]
    assert st["run_noise_source"].startswith("measured from 6 runs: 3.4% (3 BEFORE, 3 AFTER runs")
    assert [r["mean_step_us"] for r in d["before"]["runs"]] == pytest.approx([f * m0 for f in BEFORE_F])
    assert [r["path"] for r in d["after"]["runs"]] == a and d["after"]["path"] == ", ".join(a)
    # the assumed 14.6% of one run a side is gone: with it the +10% could not be called (test_diff.py)
    assert "assumed" not in st["run_noise_source"] and "14.6" not in st["method"]
    # --run-noise-pct has no part in a measured interval: said, and the numbers are the same
    code2, d2 = _diff(capsys, *b, "--vs", *a, "--run-noise-pct", "14.6")
    assert d2["ci95_pct"] == d["ci95_pct"] and any("--run-noise-pct 14.6 not used" in w for w in d2["warnings"])
    # the same runs without --vs: BEFORE AFTER takes two paths only
    assert main(["diff", *b]) == 2 and "--vs" in capsys.readouterr().err


def test_one_run_against_three_borrows_the_measured_spread(tmp_path, capsys):
    b = str(_report(tmp_path, "b", 1.0))
    a = [str(_report(tmp_path, f"a{i}", f)) for i, f in enumerate(AFTER_F)]
    code, d = _diff(capsys, b, "--vs", *a, "--fail-on-regression", "5")
    # by hand: the lone BEFORE run varies as AFTER's runs do: se² = cv_a² (1/3 + 1), cv_a = 0.027273, exactly
    # 2 degrees of freedom: se = 0.031492, t(2) = 4.3027, h = 0.13550 → +10% in (−3.94%, +25.96%)
    cv = 0.03 / 1.10
    h = student_t.ppf(0.975, 2) * cv * math.sqrt(1 / 3 + 1)
    assert h == pytest.approx(0.13550, abs=1e-5)
    assert d["ci95_pct"] == pytest.approx([100 * (1.1 * math.exp(-h) - 1), 100 * (1.1 * math.exp(h) - 1)])
    assert d["statistics"]["dof"] == pytest.approx(2.0)
    assert d["verdict"] == "inconclusive" and code == 0
    st = d["statistics"]
    assert st["runs"] == {"before": 1, "after": 3} and st["run_cv_pct"]["before"] is None
    assert st["run_noise_pct"] == pytest.approx(100 * math.hypot(cv, cv))  # the lone side borrows AFTER's spread
    assert "BEFORE has one run" in st["method"]
    # runs per side that would decide: the smallest k with t(2k − 2) √(2 cv² ÷ k) ≤ g = ln 1.1 (equal spreads:
    # Welch–Satterthwaite gives 2(k − 1)); k = 2: 4.303 × 0.02727 = 0.117 > 0.0953; k = 3: 2.776 × 0.02227 = 0.0618
    g = math.log(1.1)
    by_hand = next(k for k in range(2, 50) if student_t.ppf(0.975, 2 * k - 2) * math.sqrt(2 * cv**2 / k) <= g)
    assert by_hand == 3 and st["runs_needed"] == 3 and "3 runs per side would decide" in d["headline"]


def test_findings_pooled_over_the_runs(tmp_path, capsys):
    """PD101 fired in 2 of 3 BEFORE runs (150 and 90 µs, passed in the third) and in no AFTER run: resolved, with
    the mean saving over the runs that ran it, (150 + 90 + 0) ÷ 3 = 80 µs, scored against the measured change.
    PD103 fired in every BEFORE run (60 µs) and in 1 of 3 AFTER runs (30 µs): persisting, AFTER 30 ÷ 3 = 10 µs.
    PD205 fired in one BEFORE run and every AFTER run skipped it: not-checked."""
    passed = ["PD101", "PD103", "PD205"]

    def edits(found: list[dict], skipped: list[dict] | None = None) -> dict:
        codes = {f["code"] for f in found} | {s["code"] for s in skipped or []}
        return {
            "findings": found,
            "passed_checks": [c for c in passed if c not in codes],
            "skipped_checks": skipped or [],
        }

    b = [
        _report(tmp_path, "b0", 1.00, edits([_finding("PD101", 150.0), _finding("PD103", 60.0)])),
        _report(tmp_path, "b1", 1.02, edits([_finding("PD101", 90.0), _finding("PD103", 60.0)])),
        _report(tmp_path, "b2", 0.98, edits([_finding("PD103", 60.0), _finding("PD205", 5.0)])),
    ]
    skip = [{"code": "PD205", "name": "rule-PD205", "reason": "no GPU"}]
    a = [
        _report(tmp_path, "a0", 0.90, edits([_finding("PD103", 30.0)], skip)),
        _report(tmp_path, "a1", 0.92, edits([], skip)),
        _report(tmp_path, "a2", 0.88, edits([], skip)),
    ]
    _, d = _diff(capsys, *map(str, b), "--vs", *map(str, a))
    rows = {f["code"]: f for f in d["findings"]}
    assert rows["PD101"]["status"] == "resolved" and rows["PD101"]["saving_before_us"] == pytest.approx(80.0)
    assert rows["PD101"]["runs_fired"] == {"before": 2, "after": 0}
    assert rows["PD101"]["note"] == "fired in 2 of 3 BEFORE runs"
    assert rows["PD103"]["status"] == "persisting" and rows["PD103"]["saving_after_us"] == pytest.approx(10.0)
    assert rows["PD103"]["saving_before_us"] == pytest.approx(60.0) and rows["PD103"]["note"] == (
        "fired in 1 of 3 AFTER runs"
    )
    assert rows["PD205"]["status"] == "not-checked"
    assert rows["PD205"]["note"].endswith("AFTER skipped the check in 3 of its 3 runs: no GPU")
    p = d["predicted_vs_measured"]
    m0 = _base_mean_us()
    # measured: M_b − M_a = m0 (1.00 − 0.90) per step
    assert p["codes"] == ["PD101"] and p["predicted_us"] == pytest.approx(80.0)
    assert p["measured_us"] == pytest.approx(0.1 * m0)
    assert [(s["code"], s["shrink_us"]) for s in d["shrunk"]] == [("PD103", pytest.approx(50.0))]


def test_directories_of_runs_and_every_render(tmp_path, capsys):
    before, after = tmp_path / "before", tmp_path / "after"
    before.mkdir(), after.mkdir()
    for i, f in enumerate([1.00, 1.04]):
        _run_dir(before, f"run{i}", f)
    for i, f in enumerate([1.50, 1.56]):
        _run_dir(after, f"run{i}", f)
    # one call writes the JSON and prints the terminal render; the Markdown and HTML are rendered from that JSON
    out = tmp_path / "d.json"
    capsys.readouterr()
    code = main(["diff", str(before), str(after), "--fail-on-regression", "5", "-o", str(out), "--width", "200"])
    term = capsys.readouterr().out
    d = json.loads(out.read_text())
    diff = Diff.from_json(out.read_bytes())
    md, html = render_diff_markdown(diff), render_diff_html(diff)
    assert [r["path"] for r in d["before"]["runs"]] == [str(before / "run0"), str(before / "run1")]
    assert d["before"]["kind"] == "run" and d["statistics"]["runs"] == {"before": 2, "after": 2}
    # by hand: M_b = 1.02 m, M_a = 1.53 m (+50%); cv = sd ÷ mean: 0.028284 ÷ 1.02 and 0.042426 ÷ 1.53, both
    # 0.027730; c = cv² ÷ 2 each, Welch–Satterthwaite dof 2 (equal terms, 1 each), se = cv, t(2) = 4.3027
    cv = (0.04 / math.sqrt(2)) / 1.02
    assert cv == pytest.approx((0.06 / math.sqrt(2)) / 1.53)
    h = student_t.ppf(0.975, 2.0) * cv
    assert d["change_pct"] == pytest.approx(50.0) and d["statistics"]["dof"] == pytest.approx(2.0)
    assert d["ci95_pct"] == pytest.approx([100 * (1.5 * math.exp(-h) - 1), 100 * (1.5 * math.exp(h) - 1)])
    assert d["verdict"] == "slower" and code == 1
    assert "run-to-run noise measured from 4 runs: 3.9%" in d["headline"]  # 100 √2 cv = 3.92
    # the runs and the measured noise in every render
    for text in (term, html, md):
        assert "Runs (mean step of each)" in text and "run-to-run noise measured from 4 runs: 3.9%" in text
        assert "2 runs: " in text and "2 before, 2 after" in text
    run1 = next(r for r in d["after"]["runs"] if r["path"].endswith("run1"))
    # AFTER's run1 is 1.56 ÷ 1.53 − 1 = +2.0% of its side's mean
    assert run1["mean_step_us"] / d["mean_step_us"]["after"] == pytest.approx(1.56 / 1.53)
    assert "+2.0%" in term


def test_runs_input_errors_are_one_line(tmp_path, capsys):
    b = str(_report(tmp_path, "b", 1.0))
    a = str(_report(tmp_path, "a", 1.1))
    assert main(["diff", b, b, "--vs", a]) == 2
    assert "given twice on the BEFORE side" in capsys.readouterr().err
    assert main(["diff", b, a, b]) == 2
    err = capsys.readouterr().err
    assert "got 3 paths and no --vs" in err and len(err.strip().splitlines()) == 1
    runs = tmp_path / "runs"
    runs.mkdir()
    _run_dir(runs, "r0", 1.0)
    shutil.copy(RUN_DIR / "trace.rank0.pt.trace.json.gz", runs / "stray.pt.trace.json.gz")
    assert main(["diff", str(runs), a]) == 2
    err = capsys.readouterr().err
    assert "holds 1 run directories and also" in err and "stray.pt.trace.json.gz" in err
    assert main(["diff", b, "--vs", str(tmp_path / "missing")]) == 2


def test_same_runs_on_both_sides_no_change(tmp_path, capsys):
    """Identical sides of two runs each: change 0, an interval symmetric on the log scale around it."""
    runs = [str(_report(tmp_path, f"r{i}", f)) for i, f in enumerate([1.0, 1.03])]
    code, d = _diff(capsys, *runs, "--vs", *runs, "--fail-on-regression", "5")
    lo, hi = d["ci95_pct"]
    assert code == 0 and d["change_pct"] == pytest.approx(0.0) and lo < 0 < hi
    assert (1 + lo / 100) * (1 + hi / 100) == pytest.approx(1.0)
    assert np.isclose(d["statistics"]["run_cv_pct"]["before"], d["statistics"]["run_cv_pct"]["after"])


@pytest.mark.parametrize(
    ("k_before", "k_after", "sd_before", "sd_after", "low", "high"),
    [(3, 3, 50.0, 50.0, 0.93, 0.985), (1, 3, 50.0, 50.0, 0.925, 0.975)],
)
def test_interval_covers_no_change_95_percent_of_simulated_runs(k_before, k_after, sd_before, sd_after, low, high):
    """Seeded simulation, independent of the formulas: run means drawn from one normal law on both sides (the same
    code), the share of intervals that hold the true change 0. Measured with 4,000 draws: 3 vs 3 96.8% (Welch's
    interval is conservative with few equal runs), 1 vs 3 95.5% (exact t with 2 degrees of freedom), 3 vs 3 with
    spreads 20 and 80 µs 94.5%, 2 vs 2 97.9%. With 3 runs a side a standard normal quantile in place of Student's t
    covers 88.3%, a variance of the mean not divided by k 99.4% (20,000 draws)."""
    from perfdoctor.diff.runs import compare_runs

    rng = np.random.default_rng(7)
    draws, covered = 600, 0
    for _ in range(draws):
        before = [np.array([v]) for v in rng.normal(1000.0, sd_before, k_before)]
        after = [np.array([v]) for v in rng.normal(1000.0, sd_after, k_after)]
        lo, hi = compare_runs(before, after, 2.0).ci95_pct or (0.0, 0.0)
        covered += lo <= 0 <= hi
    assert low <= covered / draws <= high


@pytest.mark.parametrize("true_change", [0.0, 0.10])
def test_paired_runs_interval_covers_the_true_change(true_change):
    """Seeded simulation of how the several-runs tests record (3 runs a side, each BEFORE run recorded at once with
    an AFTER run): each pair shares the machine's load (a level factor, log-normal, SD 15%), each run adds its own
    level (SD 5%), each step its noise (SD 10%, 80 steps). The share of 95% intervals (``compare_runs`` on the
    step arrays) holding the true change must be at least 95%: the load a pair shares enters both sides' spread
    of run means, so the interval is wider than it needs to be, never narrower. Measured with 1,000 draws: 99.5%
    for a true change of 0 and of +10%; 97.1% and 97.5% with no shared load (Welch's interval with few runs).
    This is the guarantee a same-settings comparison of real runs relies on; the real runs' verdicts on this
    machine are measured by ``benchmarks/diff_same_settings.py``."""
    from perfdoctor.diff.runs import compare_runs

    rng = np.random.default_rng(5)
    draws, covered = 600, 0
    for _ in range(draws):
        load = np.exp(rng.normal(0.0, 0.15, 3))
        level_b = 7000.0 * load * np.exp(rng.normal(0.0, 0.05, 3))
        level_a = 7000.0 * (1.0 + true_change) * load * np.exp(rng.normal(0.0, 0.05, 3))
        before = [lv * np.exp(rng.normal(0.0, 0.10, 80)) for lv in level_b]
        after = [lv * np.exp(rng.normal(0.0, 0.10, 80)) for lv in level_a]
        # a noise threshold of 100% decides every draw at once (no search for the runs that would decide): the
        # interval does not depend on it; a verdict of "slower" needs an interval above 0, so coverage bounds the
        # gate's false alarms on runs that changed nothing
        lo, hi = compare_runs(before, after, 100.0).ci95_pct or (0.0, 0.0)
        covered += lo <= 100.0 * true_change <= hi
    assert covered / draws >= 0.95


def _window_us() -> float:
    """The bundled run's profiled window mean step (µs) from its report JSON: the trace's step total ÷ steps."""
    totals = json.loads(RUN_REPORT.read_text())["ranks"][0]["devices"][0]["totals"]
    return totals["dur_us"] / totals["n_steps"]


def _steady(tmp_path: Path, name: str, **fields: float) -> Path:
    """The bundled run's report JSON with ``run.steady_state`` fields replaced (seconds)."""
    doc = json.loads(RUN_REPORT.read_text())
    doc["run"]["steady_state"].update(fields)
    out = tmp_path / f"{name}.json"
    out.write_text(json.dumps(doc))
    return out


def _window_warnings(d: dict) -> list[str]:
    return [w for w in d["warnings"] if "profiled window's mean step" in w]


def test_window_that_disagrees_with_its_run_is_warned_in_every_output(tmp_path, capsys):
    """F8: the category and mover tables are the profiled window's; a run whose window ran at another speed than its
    steady state gets a warning saying the tables describe that window (checked against the raw JSON's numbers)."""
    w = _window_us()
    assert w == pytest.approx(83059.4, abs=0.1)  # 830,593.99 µs over 10 profiled steps
    base = str(RUN_REPORT)
    # the bundled run as it is: window 83.06 ms, 1.34x the steady median 62.19 ms and above p90 78.73 ms, but the
    # unprofiled steps next to it (67.24 ms) are inside the band: the profiler's overhead, no warning
    _, d = _diff(capsys, base, base)
    assert _window_warnings(d) == []
    # AFTER's window faster than its run: median 3w, band 2w-4w → 0.33x, a transient
    fast = _steady(tmp_path, "fast", median_s=3 * w / 1e6, p10_s=2 * w / 1e6, p90_s=4 * w / 1e6)
    _, d = _diff(capsys, base, str(fast))
    (warn,) = _window_warnings(d)
    assert warn.startswith(f"AFTER ({fast}): its profiled window's mean step, 83.06 ms")
    assert "is 0.33× its run's steady-state median (249.18 ms)" in warn and "(166.12–332.24 ms)" in warn
    assert "describe AFTER's profiled window, a transient, not the run the verdict measures" in warn
    assert d["warnings"][0] == warn  # first, before the other warnings
    for fmt in ("md", "terminal"):
        capsys.readouterr()
        main(["diff", base, str(fast), "--format", fmt, "--width", "400"])
        assert "0.33× its run's steady-state median" in capsys.readouterr().out
    diff = Diff.from_json(json.dumps(d).encode())
    assert "0.33× its run" in render_diff_html(diff) and "0.33× its run" in render_diff_markdown(diff)
    # faster but within 10% of the median (0.95x), though below p10: the run's own noise, no warning
    near = _steady(tmp_path, "near", median_s=w / 0.95 / 1e6, p10_s=1.02 * w / 1e6, p90_s=1.3 * w / 1e6)
    assert _window_warnings(_diff(capsys, base, str(near))[1]) == []
    # slower (1.34x) with the unprofiled neighbours outside the band too (100 ms > p90 78.73 ms): a transient
    slow = _steady(tmp_path, "slow", window_neighbor_median_s=0.1)
    (warn,) = _window_warnings(_diff(capsys, str(slow), base)[1])
    assert warn.startswith(f"BEFORE ({slow}):") and "is 1.34× its run's steady-state median (62.19 ms)" in warn
    assert "a transient (the unprofiled steps next to it are outside the band too)" in warn
    # slower by 2.5x with neighbours at the median: the profiler's overhead more than doubled the step
    big = _steady(
        tmp_path,
        "big",
        median_s=w / 2.5 / 1e6,
        p10_s=0.9 * w / 2.5 / 1e6,
        p90_s=1.1 * w / 2.5 / 1e6,
        window_neighbor_median_s=w / 2.5 / 1e6,
    )
    (warn,) = _window_warnings(_diff(capsys, base, str(big))[1])
    assert "is 2.50× its run's" in warn and "a step the profiler's own overhead at least doubled" in warn
    # several runs a side: the run is named
    _, d = _diff(capsys, base, str(near), "--vs", str(fast), base)
    (warn,) = _window_warnings(d)
    assert warn.startswith(f"AFTER run 1 ({fast}):")


PARTIAL = REPO / "tests" / "partial_runs"


def _steady_mean_us(run: Path, start: int) -> float:
    """Mean train-only step (µs) of a run's steps.csv rows from ``start`` outside the profiler's phases."""
    with open(run / "steps.csv", newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if int(r["step"]) >= start and r["profiler_phase"] == "none"]
    times = [float(r["duration_s"]) - float(r["eval_s"]) - float(r["checkpoint_s"]) for r in rows]
    return 1e6 * sum(times) / len(times)


@pytest.mark.parametrize(
    "name, reason, completed",
    [
        ("crashed", "script raised RuntimeError: boom at step 30", 31),
        ("interrupted", "interrupted (Ctrl-C)", 355),
    ],
)
def test_run_without_a_trace_keeps_its_cpu_and_is_said_partial(tmp_path, capsys, name, reason, completed):
    """F22: a run that crashed / was interrupted before its window has no trace; its device comes from run.json
    (cuda_available false: CPU), so the CPU run-to-run noise applies; every output says it is partial; and
    --fail-on-regression cannot pass on it, though AFTER is not slower."""
    run = PARTIAL / name
    env = json.loads((run / "run.json").read_text())["environment"]
    assert env["cuda_available"] is False and json.loads((run / "run.json").read_text())["partial"] is True
    code, d = _diff(capsys, str(RUN_DIR), str(run))
    assert code == 0
    assert d["after"]["device"] == "CPU" and d["before"]["device"] == "CPU"
    assert (
        d["statistics"]["run_noise_pct"] == 14.6
        and "none assumed for GPU runs" not in d["statistics"]["run_noise_source"]
    )
    assert not any(w.startswith("different devices") or w.startswith("different rank counts") for w in d["warnings"])
    (r,) = d["after"]["runs"]
    assert (r["partial"], r["steps_completed"]) == (reason, completed)
    assert d["before"]["runs"][0]["partial"] is None
    assert r["mean_step_us"] == pytest.approx(_steady_mean_us(run, r["steady_start_step"]))
    warn = f"AFTER ({run}) is partial: {reason} (after {completed} training steps)"
    assert d["warnings"][0].startswith(warn)
    diff = Diff.from_json(json.dumps(d).encode())
    tail = f"is partial: {reason} (after {completed} training steps)"
    assert tail in render_diff_markdown(diff) and tail in render_diff_html(diff).replace("&#39;", "'")
    capsys.readouterr()
    assert main(["diff", str(RUN_DIR), str(run), "--fail-on-regression", "5"]) == 1
    err = capsys.readouterr().err
    assert "regression gate not passed: AFTER" in err and f"is a partial run ({reason})" in " ".join(err.split())
    # a report JSON of the partial run keeps its device (report-schema run.device) and its stop reason
    report = tmp_path / "r.json"
    assert main(["report", str(run), "-o", str(report)]) == 0
    assert json.loads(report.read_text())["run"]["device"] == "CPU"
    code, d = _diff(capsys, str(RUN_DIR), str(report), "--fail-on-regression", "50")
    assert code == 1 and d["after"]["device"] == "CPU" and d["statistics"]["run_noise_pct"] == 14.6
    assert d["after"]["runs"][0]["partial"] == reason
