"""Is the change in mean step time real? Welch's t interval of the log ratio of means, and the verdict.

Method (stated in every diff): the change is ``mean_after ÷ mean_before − 1``. The interval is computed on the
log ratio ``L = ln(mean_after ÷ mean_before)`` and reported back as ``100 (e^(L ± h) − 1)`` %, so it is never
below −100% (a step cannot take less than no time) and it is asymmetric where the change is large. The standard
error of ``L`` comes from the delta method on the two sample means (Welch: unequal variances,
``var(mean_a) ÷ ma² + var(mean_b) ÷ mb²``), with Welch–Satterthwaite degrees of freedom and Student's t 97.5%
quantile (scipy). Step times drift (a busy neighbour slows minutes of steps, not one: measured on a shared
2-core machine, the quarter means of one run went 79 → 54 ms), so treating steps as independent makes the
interval too narrow. With at least :data:`MIN_STEPS_FOR_BATCHES` steps a side, the variance of its mean comes
from the **method of batch means**: the series is cut into ``k = ⌊√n⌋`` consecutive batches,
``var(mean) = var(batch means) ÷ k`` with ``k − 1`` degrees of freedom (Law & Kelton, *Simulation Modeling and
Analysis*, §9.5.3; batch size ⌊√n⌋ as in Flegal & Jones, Ann. Statist. 38 (2010)). Below that, steps are taken
as independent (``s² ÷ n``, ``n − 1`` degrees of freedom). ``effective_steps`` reports ``s² ÷ var(mean)``: the
number of independent steps with the same information.

Two terms do not shrink with more steps (``fixed``), because one run per side cannot see them (several runs per
side measure them instead: :mod:`perfdoctor.diff.runs`):

- run-to-run noise ``σ_run`` (the standard deviation of ``L`` between two runs of the same code on the same
  machine, ×100): ``1.96 σ_run`` joins the within-run half-width in quadrature. It is a property of the machine,
  given by the caller (:data:`CPU_RUN_NOISE_PCT` is this project's measurement on a shared 2-core box);
- a run's level shift (its step time changed level mid-run, ``drift_pct``): a machine that moved X% within one
  run can move X% between two runs, so ``ln(1 + X/100)`` of each side (in quadrature) is added. An identical pair
  recorded on a shared 2-core machine read +16% (95% CI +9% to +23%) when one run's level had shifted by about
  that much mid-run.

Verdict (criterion.rs's model of a noise threshold, made explicit):

- the interval excludes 0 and ``|change| ≥ noise``: ``faster`` / ``slower``;
- the interval excludes 0 but ``|change| < noise``: ``no-change`` (a real but negligible shift);
- the interval includes 0 and lies within ``±noise``: ``no-change``;
- otherwise ``inconclusive``. More steps shrink only the within-run term (as 1/√n): when the fixed terms alone
  reach the half-width that would decide (``g = max(|L|, ln(1 + noise/100) − |L|)``), more steps cannot decide
  and the advice is to repeat each side's run; else the steps per side for the half-width to reach ``g``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

DEFAULT_NOISE_PCT = 2.0
# Run-to-run noise of CPU training runs on a shared machine: the standard deviation of ln(mean_after ÷
# mean_before) (×100) between two runs of the same script with the same settings (or a change that does nothing
# on the CPU), recorded at the same time. Measured in this project on a shared 2-core machine (examples/mlp.py,
# 250 steps, 16 pairs that changed nothing: +16.0, −4.6, +9.8, +10.5, −13.4, +6.1, +4.5, +4.8, −0.6, +13.0, +11.3,
# +11.7, −17.1, −6.4, −28.6, −24.6%; RMS of ln(1 + change) 0.146, the last three recorded while another test
# suite ran). A property of that machine, not of CPUs: an assumption wherever it is applied, stated in the diff;
# a dedicated runner measures its own (two runs of the same commit) and passes it.
CPU_RUN_NOISE_PCT = 14.6
MIN_STEPS_FOR_BATCHES = 20


def signed_pct(x: float | None) -> str:
    """``+1.2%`` / ``−1.2%`` with the minus sign U+2212, the one sign every diff text uses (``–`` for None)."""
    return "–" if x is None else f"{x:+.1f}%".replace("-", "−")


def method_text(run_noise_pct: float) -> str:
    """The interval method in words, naming the run-to-run term only where it was applied."""
    text = (
        "Welch t interval (95%) of ln(mean_after ÷ mean_before), delta method, Welch–Satterthwaite degrees of "
        f"freedom, reported as % (e^x − 1); the variance of each side's mean from ⌊√n⌋ batch means when it has "
        f"≥ {MIN_STEPS_FOR_BATCHES} steps (step times drift), else from independent steps; widened by the level "
        "shift of a run whose step time changed level mid-run"
    )
    if run_noise_pct > 0:
        return text + f" and by the run-to-run noise (1.96 × σ_run = 1.96 × {run_noise_pct:g}%, in quadrature)"
    return text + "; no run-to-run term"


@dataclass(frozen=True)
class Comparison:
    """Result of :func:`compare_means`. Means and std in µs; change and interval in %."""

    mean_before_us: float
    mean_after_us: float
    std_before_us: float
    std_after_us: float
    n_before: int
    n_after: int
    n_eff_before: float
    n_eff_after: float
    change_pct: float
    ci95_pct: tuple[float, float] | None
    dof: float | None
    verdict: str
    more_steps_needed: int | None
    reason: str
    # several runs on a side (perfdoctor.diff.runs): runs per side, each side's spread of run means (SD ÷ mean
    # × 100, None with one run), σ_run measured from them (%) and the runs per side that would decide
    runs: tuple[int, int] = (1, 1)
    run_cv_pct: tuple[float | None, float | None] = (None, None)
    measured_run_noise_pct: float | None = None
    runs_needed: int | None = None


def mean_variance(x: np.ndarray) -> tuple[float, float]:
    """(variance of the mean of ``x``, its degrees of freedom): batch means from MIN_STEPS_FOR_BATCHES steps up
    (never below ``s² ÷ n``), else ``s² ÷ n`` with ``n − 1`` (0, 0 for fewer than 2 steps)."""
    n = int(x.size)
    if n < 2:
        return 0.0, 0.0
    if n < MIN_STEPS_FOR_BATCHES:
        return float(x.var(ddof=1)) / n, float(n - 1)
    k = math.isqrt(n)
    means = np.array([b.mean() for b in np.array_split(x, k)])
    # never more information than n independent steps (equal batch means would claim a zero variance)
    return max(float(means.var(ddof=1)) / k, float(x.var(ddof=1)) / n), float(k - 1)


def effective_n(x: np.ndarray) -> float:
    """Independent steps with the same information as ``x``: ``s² ÷ var(mean)`` (``n`` when var(mean) is 0)."""
    var_mean, _ = mean_variance(x)
    if x.size < 2 or var_mean <= 0:
        return float(x.size)
    return float(x.var(ddof=1)) / var_mean


def _t975(dof: float) -> float:
    from scipy.stats import t  # type: ignore[import-untyped]

    return float(t.ppf(0.975, dof))


def log_half_width(
    rel_var: tuple[float, float], dof: tuple[float, float], fixed_log: float
) -> tuple[float, float, float | None]:
    """(within-run half-width, total half-width, Welch dof) of the log ratio, in natural-log units.

    ``rel_var``: each side's ``var(mean) ÷ mean²``; ``dof``: their degrees of freedom; ``fixed_log``: the
    step-count-independent run-to-run half-width (``1.96 σ_run``), joined in quadrature. The level shift is
    added by the caller.
    """
    c_b, c_a = rel_var
    se = math.sqrt(c_a + c_b)
    if se == 0:
        return 0.0, fixed_log, None
    welch = (c_a + c_b) ** 2 / ((c_a * c_a / dof[1] if c_a else 0.0) + (c_b * c_b / dof[0] if c_b else 0.0))
    within = _t975(welch) * se
    return within, math.hypot(within, fixed_log), welch


def compare_means(
    before_us: np.ndarray,
    after_us: np.ndarray,
    noise_pct: float = DEFAULT_NOISE_PCT,
    drift_pct: tuple[float, float] = (0.0, 0.0),
    run_noise_pct: float = 0.0,
) -> Comparison:
    """Compare two step-time series (µs, one value per step); see the module docstring.

    ``drift_pct``: each side's mid-run level shift (%, :attr:`perfdoctor.diff.steps.StepSeries.level_shift_pct`).
    ``run_noise_pct``: ``σ_run``, the standard deviation (×100) of the log ratio between two runs that changed
    nothing on this machine (0: none assumed).

    Raises:
        ValueError: a side has no step or a non-positive mean (the caller checks first).
    """
    b = np.asarray(before_us, dtype=float)
    a = np.asarray(after_us, dtype=float)
    if b.size == 0 or a.size == 0:
        raise ValueError("a side has no steps")
    mb, ma = float(b.mean()), float(a.mean())
    if mb <= 0 or ma <= 0:
        raise ValueError("a side's mean step time is not positive")
    change = 100.0 * (ma / mb - 1.0)
    sb = float(b.std(ddof=1)) if b.size > 1 else 0.0
    sa = float(a.std(ddof=1)) if a.size > 1 else 0.0
    (vb, dof_b), (va, dof_a) = mean_variance(b), mean_variance(a)
    n = (int(b.size), int(a.size))

    def result(
        ci: tuple[float, float] | None, dof: float | None, verdict: str, more: int | None, why: str
    ) -> Comparison:
        return Comparison(mb, ma, sb, sa, *n, effective_n(b), effective_n(a), change, ci, dof, verdict, more, why)

    if min(n) < 2:
        return result(None, None, "inconclusive", 2 - min(n), "at least 2 steps per side are needed for an interval")
    log_ratio = math.log(ma / mb)
    fixed = 1.96 * run_noise_pct / 100.0
    within, half, dof = log_half_width((vb / mb**2, va / ma**2), (dof_b, dof_a), fixed)
    drift = math.hypot(*(math.log1p(d / 100.0) for d in drift_pct))
    half += drift  # a machine that moved within a run can move as much between runs
    ci = (100.0 * math.expm1(log_ratio - half), 100.0 * math.expm1(log_ratio + half))
    verdict, why = decide(change, ci, noise_pct)
    more = None
    if verdict == "inconclusive":
        more, why = steps_needed(log_ratio, (within, fixed, drift), noise_pct, n)
    return result(ci, dof, verdict, more, why)


def decide(change: float, ci: tuple[float, float], noise_pct: float) -> tuple[str, str]:
    """(verdict, reason) from the change and its 95% interval (%); see the module docstring."""
    lo, hi = ci
    direction = "faster" if change < 0 else "slower"
    if lo > 0 or hi < 0:
        if abs(change) >= noise_pct:
            return direction, f"the 95% interval excludes 0 and the change is ≥ the {noise_pct:g}% threshold"
        return "no-change", f"the 95% interval excludes 0 but the change is below the {noise_pct:g}% noise threshold"
    if lo >= -noise_pct and hi <= noise_pct:
        return "no-change", f"the 95% interval includes 0 and lies within ±{noise_pct:g}%"
    return "inconclusive", f"the 95% interval includes 0 and reaches beyond ±{noise_pct:g}%"


def steps_needed(
    log_ratio: float, halves: tuple[float, float, float], noise_pct: float, n: tuple[int, int]
) -> tuple[int | None, str]:
    """(more steps per side, or None when more steps cannot decide; the reason) for an inconclusive interval.

    ``halves``: the log-ratio half-widths (within-run, run-to-run, level shift); only the first shrinks, as
    ``1/√n``. The interval decides once its half-width reaches ``g = max(|L|, ln(1 + noise/100) − |L|)``.
    """
    within, fixed, drift = halves
    g = max(abs(log_ratio), math.log1p(noise_pct / 100.0) - abs(log_ratio))
    base = f"the 95% interval includes 0 and reaches beyond ±{noise_pct:g}%"
    if fixed + drift >= g or within == 0:
        parts = [f"run-to-run noise 1.96 σ_run = {100 * fixed:.1f}"] if fixed else []
        parts += [f"level shift within a run {100 * drift:.1f}"] if drift else []
        return None, (
            f"{base}; more steps cannot decide: what no step count shrinks ({', '.join(parts)}) already reaches "
            f"the half-width that would decide ({100 * g:.1f}; half-widths of the log ratio ×100); repeat each "
            "side's run"
        )
    target = math.sqrt((g - drift) ** 2 - fixed**2)
    factor = (within / target) ** 2
    more = max(max(math.ceil(k * (factor - 1)) for k in n), 1)
    return more, f"{base}: the step-to-step noise is larger than the change"
