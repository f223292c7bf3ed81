"""Is the change in mean step time real? Welch's t interval of the relative change, and the verdict.

Method (stated in every diff): the change is ``mean_after ÷ mean_before − 1``. Its
standard error comes from the delta method on the two sample means (Welch: unequal
variances, ``var_a/n_a ÷ mb² + ma²·var_b/n_b ÷ mb⁴``), with Welch–Satterthwaite
degrees of freedom and Student's t 97.5% quantile (scipy). Step times are
autocorrelated (a busy neighbour slows a run of steps, not one), which makes a
naive interval too narrow: with at least :data:`MIN_STEPS_FOR_AUTOCORR` steps a side
each ``n`` is replaced by the effective sample size of an AR(1) series
``n·(1 − ρ₁)/(1 + ρ₁)`` (ρ₁ = lag-1 autocorrelation, clipped to [0, 0.9]; Wilks,
*Statistical Methods in the Atmospheric Sciences*, 3rd ed., eq. 5.12).

Verdict (criterion.rs's model of a noise threshold, made explicit):

- the interval excludes 0 and ``|change| ≥ noise``: ``faster`` / ``slower``;
- the interval excludes 0 but ``|change| < noise``: ``no-change`` (a real but negligible shift);
- the interval includes 0 and lies within ``±noise``: ``no-change``;
- otherwise ``inconclusive``, with the steps per side needed for the interval's half-width to reach
  ``max(|change|, noise − |change|)`` (either outcome then decides), assuming the half-width shrinks as 1/√n.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

DEFAULT_NOISE_PCT = 2.0
MIN_STEPS_FOR_AUTOCORR = 20
MAX_RHO = 0.9
METHOD = ("Welch t interval (95%) of mean_after ÷ mean_before − 1, delta method, Welch–Satterthwaite degrees of "
          "freedom; each side's step count replaced by its AR(1) effective size n·(1−ρ₁)/(1+ρ₁) when it has ≥ "
          f"{MIN_STEPS_FOR_AUTOCORR} steps")


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


def effective_n(x: np.ndarray) -> float:
    """AR(1) effective sample size of the series ``x`` (``n`` itself below MIN_STEPS_FOR_AUTOCORR steps)."""
    n = int(x.size)
    if n < MIN_STEPS_FOR_AUTOCORR:
        return float(n)
    d = x - x.mean()
    denom = float(np.dot(d, d))
    if denom <= 0:
        return float(n)
    rho = min(max(float(np.dot(d[:-1], d[1:])) / denom, 0.0), MAX_RHO)
    return n * (1 - rho) / (1 + rho)


def _t975(dof: float) -> float:
    from scipy.stats import t  # type: ignore[import-untyped]

    return float(t.ppf(0.975, dof))


def compare_means(before_us: np.ndarray, after_us: np.ndarray,
                  noise_pct: float = DEFAULT_NOISE_PCT) -> Comparison:
    """Compare two step-time series (µs, one value per step).

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
    nb, na = effective_n(b), effective_n(a)
    def result(ci: tuple[float, float] | None, dof: float | None, verdict: str, more: int | None,
               reason: str) -> Comparison:
        return Comparison(mb, ma, sb, sa, int(b.size), int(a.size), nb, na, change, ci, dof, verdict, more, reason)

    if b.size < 2 or a.size < 2:
        return result(None, None, "inconclusive", max(2 - int(b.size), 2 - int(a.size)),
                      "at least 2 steps per side are needed for an interval")
    c_a = sa * sa / na / (mb * mb)
    c_b = ma * ma * sb * sb / nb / mb ** 4
    se = math.sqrt(c_a + c_b)
    if se == 0:
        dof, half = None, 0.0
    else:
        den = c_a * c_a / max(na - 1, 1e-9) + c_b * c_b / max(nb - 1, 1e-9)
        dof = (c_a + c_b) ** 2 / den if den > 0 else float(min(na, nb) - 1)
        half = 100.0 * _t975(max(dof, 1.0)) * se
    ci = (change - half, change + half)
    verdict, more, reason = decide(change, ci, noise_pct, (int(b.size), int(a.size)))
    return result(ci, dof, verdict, more, reason)


def decide(change: float, ci: tuple[float, float], noise_pct: float,
           n: tuple[int, int]) -> tuple[str, int | None, str]:
    """(verdict, more steps per side or None, reason) from the change and its interval (%); see the module doc."""
    lo, hi = ci
    direction = "faster" if change < 0 else "slower"
    if lo > 0 or hi < 0:
        if abs(change) >= noise_pct:
            return direction, None, f"the 95% interval excludes 0 and the change is ≥ the {noise_pct:g}% threshold"
        return "no-change", None, (f"the 95% interval excludes 0 but the change is below the {noise_pct:g}% "
                                   "noise threshold")
    if lo >= -noise_pct and hi <= noise_pct:
        return "no-change", None, f"the 95% interval includes 0 and lies within ±{noise_pct:g}%"
    half = (hi - lo) / 2
    target = max(abs(change), noise_pct - abs(change))
    factor = (half / target) ** 2
    more = max(math.ceil(k * (factor - 1)) for k in n)
    return "inconclusive", max(more, 1), (f"the 95% interval includes 0 and reaches beyond ±{noise_pct:g}%: the "
                                          "noise is larger than the change")
