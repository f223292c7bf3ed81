"""Is the change in mean step time real? Welch's t interval of the relative change, and the verdict.

Method (stated in every diff): the change is ``mean_after ÷ mean_before − 1``. Its
standard error comes from the delta method on the two sample means (Welch: unequal
variances, ``var(mean_a) ÷ mb² + ma²·var(mean_b) ÷ mb⁴``), with Welch–Satterthwaite
degrees of freedom and Student's t 97.5% quantile (scipy). Step times drift (a busy
neighbour slows minutes of steps, not one: measured on a shared 2-core machine, the
quarter means of one run went 79 → 54 ms), so treating steps as independent makes the
interval too narrow. With at least :data:`MIN_STEPS_FOR_BATCHES` steps a side, the
variance of its mean comes from the **method of batch means**: the series is cut into
``k = ⌊√n⌋`` consecutive batches, ``var(mean) = var(batch means) ÷ k`` with ``k − 1``
degrees of freedom (Law & Kelton, *Simulation Modeling and Analysis*, §9.5.3; batch
size ⌊√n⌋ as in Flegal & Jones, Ann. Statist. 38 (2010)). Below that, steps are taken
as independent (``s² ÷ n``, ``n − 1`` degrees of freedom). ``effective_steps`` reports
``s² ÷ var(mean)``: the number of independent steps with the same information.

Verdict (criterion.rs's model of a noise threshold, made explicit):

- the interval excludes 0 and ``|change| ≥ noise``: ``faster`` / ``slower``;
- the interval excludes 0 but ``|change| < noise``: ``no-change`` (a real but negligible shift);
- the interval includes 0 and lies within ``±noise``: ``no-change``;
- otherwise ``inconclusive``, with the steps per side needed for the interval's half-width to reach
  ``max(|change|, noise − |change|)`` (either outcome then decides), assuming the half-width shrinks as 1/√n.

The interval covers the noise within each run; a machine that changed between two runs (other jobs starting) is a
real difference between them that no interval of one run per side can see. Where a run shows the machine moving
(its step time changed level mid-run: ``drift_pct``, the largest shift between its steady phases), the interval is
widened by that shift on each side (combined in quadrature): a machine that moved X% within one run can move X%
between two runs, and an identical pair recorded on a shared 2-core machine read +16% (95% CI +9% to +23%) when
one run's level had shifted by about that much mid-run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

DEFAULT_NOISE_PCT = 2.0
# Run-to-run noise of CPU training runs on a shared machine: the standard deviation (%) of the change in mean
# step time between two runs of the same script with the same settings (or a change that does nothing on the
# CPU), recorded at the same time. Measured in this project on a shared 2-core machine (examples/mlp.py, 250
# steps, 16 pairs that changed nothing: +16.0, −4.6, +9.8, +10.5, −13.4, +6.1, +4.5, +4.8, −0.6, +13.0, +11.3,
# +11.7, −17.1, −6.4, −28.6, −24.6%; RMS 13.5%, the last three recorded while another test suite ran). One run
# per side cannot see it, so for CPU runs the interval includes it; GPU runs have no such measurement here
# (their interval is within-run only).
CPU_RUN_NOISE_PCT = 13.5
MIN_STEPS_FOR_BATCHES = 20
METHOD = (
    "Welch t interval (95%) of mean_after ÷ mean_before − 1, delta method, Welch–Satterthwaite degrees of "
    f"freedom; the variance of each side's mean from ⌊√n⌋ batch means when it has ≥ {MIN_STEPS_FOR_BATCHES} "
    "steps (step times drift), else from independent steps; widened by the level shift of a run whose step time "
    "changed level mid-run, and for CPU runs by the measured run-to-run noise (1.96 × "
    f"{CPU_RUN_NOISE_PCT:g}%, in quadrature)"
)


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


def compare_means(
    before_us: np.ndarray,
    after_us: np.ndarray,
    noise_pct: float = DEFAULT_NOISE_PCT,
    drift_pct: tuple[float, float] = (0.0, 0.0),
    run_noise_pct: float = 0.0,
) -> Comparison:
    """Compare two step-time series (µs, one value per step).

    ``drift_pct``: each side's mid-run level shift (%, :attr:`perfdoctor.diff.steps.StepSeries.level_shift_pct`);
    the interval's half-width grows by ``√(drift_b² + drift_a²)`` (see the module docstring).
    ``run_noise_pct``: the standard deviation (%) of the change between two runs that changed nothing
    (:data:`CPU_RUN_NOISE_PCT` for CPU runs); ``1.96 ×`` it joins the within-run half-width in quadrature, and
    when it alone reaches past the noise threshold, more steps cannot decide (``more_steps_needed`` None: repeat
    the runs instead).

    Raises:
        ValueError: a side has no step or a non-positive mean (the caller checks first).
    """
    b = np.asarray(before_us, dtype=float)
    a = np.asarray(after_us, dtype=float)
    if b.size == 0 or a.size == 0:
        raise ValueError("a side has no steps")
    mb, ma = float(b.mean()), float(a.mean())
    if mb <= 0:
        raise ValueError("the BEFORE mean step time is not positive")
    change = 100.0 * (ma / mb - 1.0)
    sb = float(b.std(ddof=1)) if b.size > 1 else 0.0
    sa = float(a.std(ddof=1)) if a.size > 1 else 0.0
    (vb, dof_b), (va, dof_a) = mean_variance(b), mean_variance(a)
    nb, na = effective_n(b), effective_n(a)

    def result(
        ci: tuple[float, float] | None, dof: float | None, verdict: str, more: int | None, reason: str
    ) -> Comparison:
        return Comparison(mb, ma, sb, sa, int(b.size), int(a.size), nb, na, change, ci, dof, verdict, more, reason)

    if b.size < 2 or a.size < 2:
        return result(
            None,
            None,
            "inconclusive",
            max(2 - int(b.size), 2 - int(a.size)),
            "at least 2 steps per side are needed for an interval",
        )
    c_a = va / (mb * mb)
    c_b = ma * ma * vb / mb**4
    se = math.sqrt(c_a + c_b)
    if se == 0:
        dof, half = None, 0.0
    else:
        dof = (c_a + c_b) ** 2 / (c_a * c_a / dof_a + c_b * c_b / dof_b)
        half = 100.0 * _t975(dof) * se
    floor = 1.96 * run_noise_pct
    half = math.hypot(half, floor)
    half += math.hypot(*drift_pct)  # a machine that moved within a run can move as much between runs
    ci = (change - half, change + half)
    verdict, more, reason = decide(change, ci, noise_pct, (int(b.size), int(a.size)))
    if verdict == "inconclusive" and floor > 0 and floor >= max(abs(change), noise_pct - abs(change)):
        more = None
        reason = (
            f"the 95% interval includes 0: the change is within the run-to-run noise of CPU runs "
            f"(±{floor:.1f}%); more steps cannot decide, repeat each side's run"
        )
    return result(ci, dof, verdict, more, reason)


def decide(change: float, ci: tuple[float, float], noise_pct: float, n: tuple[int, int]) -> tuple[str, int | None, str]:
    """(verdict, more steps per side or None, reason) from the change and its interval (%); see the module doc."""
    lo, hi = ci
    direction = "faster" if change < 0 else "slower"
    if lo > 0 or hi < 0:
        if abs(change) >= noise_pct:
            return direction, None, f"the 95% interval excludes 0 and the change is ≥ the {noise_pct:g}% threshold"
        return (
            "no-change",
            None,
            (f"the 95% interval excludes 0 but the change is below the {noise_pct:g}% noise threshold"),
        )
    if lo >= -noise_pct and hi <= noise_pct:
        return "no-change", None, f"the 95% interval includes 0 and lies within ±{noise_pct:g}%"
    half = (hi - lo) / 2
    target = max(abs(change), noise_pct - abs(change))
    factor = (half / target) ** 2
    more = max(math.ceil(k * (factor - 1)) for k in n)
    return (
        "inconclusive",
        max(more, 1),
        (f"the 95% interval includes 0 and reaches beyond ±{noise_pct:g}%: the noise is larger than the change"),
    )
