"""Several runs per side: the run-to-run noise measured from the runs' means, the interval and the verdict.

One run per side cannot see how far a run's mean moves from one run to the next, so :mod:`perfdoctor.diff.stats`
assumes it (σ_run); several runs measure it. Method:

- each run's mean step ``m_i`` (µs) over its compared steps (a run's steady-state train-only steps, or a trace's
  profiled steps: :mod:`perfdoctor.diff.steps`); a side's mean ``M`` is the mean of its ``k`` run means. Each run
  weighs equally, whatever its step count: the run is the unit that varies between runs.
- ``var(M) = s² ÷ k``, ``s²`` the sample variance (ddof 1) of the run means, with ``k − 1`` degrees of freedom.
  A run mean's variance between runs holds everything that moves it (step-to-step noise, drift and level shifts
  within a run, a machine that changed between runs), so neither the assumed σ_run nor the level-shift term of
  the one-run method is added: that would count them twice.
- On ``L = ln(M_a ÷ M_b)`` the delta method gives ``se² = c_b + c_a``, ``c = var(M) ÷ M²``; Welch–Satterthwaite
  degrees of freedom over the runs, ``(c_a + c_b)² ÷ (c_a² ÷ (k_a − 1) + c_b² ÷ (k_b − 1))`` (Welch,
  Biometrika 34 (1947); Satterthwaite, Biometrics Bulletin 2 (1946)); Student's t 97.5% quantile; reported back
  as ``100 (e^(L ± t·se) − 1)`` % like the one-run interval (never below −100%).
- One run on a side and several on the other: the lone run's mean is taken to vary between runs as the other
  side's run means do (the same machine): ``c = cv²`` with ``cv = s ÷ M`` of the other side, so
  ``se² = cv² (1 ÷ k + 1)`` with exactly ``k − 1`` degrees of freedom (one variance estimate, not two).
- The σ_run measured (the standard deviation of the log ratio of one run against one, the figure
  ``--run-noise-pct`` takes) is ``100 √(cv_b² + cv_a²)``.

The verdict is :func:`perfdoctor.diff.stats.decide`'s. An inconclusive one names the runs per side that would
decide: the smallest ``k'`` with ``t(dof(k')) √(cv_b² ÷ k' + cv_a² ÷ k') ≤ g`` (``g`` the half-width that
decides, as in :func:`perfdoctor.diff.stats.steps_needed`), taking the measured spreads as they are.
"""

from __future__ import annotations

import math

import numpy as np

from perfdoctor.diff import stats

MAX_RUNS = 1000  # no search for a run count beyond this


def spread(means_us: np.ndarray) -> float | None:
    """Coefficient of variation of run means (sample SD, ddof 1, ÷ their mean; a fraction); None below 2 runs."""
    if means_us.size < 2:
        return None
    return float(means_us.std(ddof=1)) / float(means_us.mean())


def _rel_var(cv: tuple[float, float], k: tuple[int, int], lone: tuple[bool, bool]) -> tuple[float, float]:
    """Each side's var(M) ÷ M²; with a lone run on one side (``lone``) both sides' terms are one, from the other
    side's spread: cv² (1 ÷ k + 1)."""
    (cv_b, cv_a), (k_b, k_a) = cv, k
    if lone[0]:  # one BEFORE run: one term, cv_a² (1 ÷ k_a + 1), k_a − 1 degrees of freedom
        return 0.0, cv_a**2 * (1.0 / k_a + 1.0)
    if lone[1]:
        return cv_b**2 * (1.0 / k_b + 1.0), 0.0
    return cv_b**2 / k_b, cv_a**2 / k_a


def _dof(k: tuple[int, int], lone: tuple[bool, bool]) -> tuple[float, float]:
    k_b, k_a = k
    if lone[0]:
        return 1.0, float(k_a - 1)  # BEFORE's term is 0: its degrees of freedom are never read
    if lone[1]:
        return float(k_b - 1), 1.0
    return float(k_b - 1), float(k_a - 1)


def half_width(cv: tuple[float, float], k: tuple[int, int], lone: tuple[bool, bool]) -> tuple[float, float | None]:
    """(half-width of the 95% interval of ``L`` in natural-log units, its degrees of freedom; None when 0)."""
    _, half, dof = stats.log_half_width(_rel_var(cv, k, lone), _dof(k, lone), 0.0)
    return half, dof


def runs_needed(cv: tuple[float, float], k: tuple[int, int], g: float) -> int | None:
    """The fewest runs per side (more than the smaller side has) whose interval half-width reaches ``g``; None
    when none up to :data:`MAX_RUNS` does."""
    for runs in range(min(k) + 1, MAX_RUNS + 1):
        if half_width(cv, (runs, runs), (False, False))[0] <= g:
            return runs
    return None


def compare_runs(before: list[np.ndarray], after: list[np.ndarray], noise_pct: float) -> stats.Comparison:
    """Compare two sides of several runs each (step times in µs, one array per run); see the module docstring.

    Raises:
        ValueError: fewer than 2 runs on both sides (:func:`perfdoctor.diff.stats.compare_means` compares one
            run against one), a run without steps or a non-positive run mean (the caller checks first).
    """
    if max(len(before), len(after)) < 2 or not before or not after:
        raise ValueError("several runs on a side are needed")
    if any(x.size == 0 for x in (*before, *after)):
        raise ValueError("a run has no steps")
    m_b = np.array([float(x.mean()) for x in before])
    m_a = np.array([float(x.mean()) for x in after])
    if (m_b <= 0).any() or (m_a <= 0).any():
        raise ValueError("a run's mean step time is not positive")
    k = (int(m_b.size), int(m_a.size))
    mb, ma = float(m_b.mean()), float(m_a.mean())
    own = (spread(m_b), spread(m_a))
    cv = (own[0] if own[0] is not None else own[1], own[1] if own[1] is not None else own[0])
    assert cv[0] is not None and cv[1] is not None
    cvs = (cv[0], cv[1])
    lone = (own[0] is None, own[1] is None)
    half, dof = half_width(cvs, k, lone)
    log_ratio = math.log(ma / mb)
    change = 100.0 * (ma / mb - 1.0)
    ci = (100.0 * math.expm1(log_ratio - half), 100.0 * math.expm1(log_ratio + half))
    verdict, why = stats.decide(change, ci, noise_pct)
    needed = None
    if verdict == "inconclusive":
        g = max(abs(log_ratio), math.log1p(noise_pct / 100.0) - abs(log_ratio))
        needed = runs_needed(cvs, k, g)
        why += (
            f": the run-to-run noise is larger than the change; {needed} runs per side would decide"
            if needed is not None
            else f": no number of runs up to {MAX_RUNS} per side decides"
        )
    all_b, all_a = np.concatenate(before), np.concatenate(after)
    return stats.Comparison(
        mean_before_us=mb,
        mean_after_us=ma,
        std_before_us=float(all_b.std(ddof=1)) if all_b.size > 1 else 0.0,
        std_after_us=float(all_a.std(ddof=1)) if all_a.size > 1 else 0.0,
        n_before=int(all_b.size),
        n_after=int(all_a.size),
        n_eff_before=sum(stats.effective_n(x) for x in before),
        n_eff_after=sum(stats.effective_n(x) for x in after),
        change_pct=change,
        ci95_pct=ci,
        dof=dof,
        verdict=verdict,
        more_steps_needed=None,
        reason=why,
        runs=k,
        run_cv_pct=(None if own[0] is None else 100.0 * own[0], None if own[1] is None else 100.0 * own[1]),
        measured_run_noise_pct=100.0 * math.hypot(*cvs),
        runs_needed=needed,
    )


def measured_runs(k: tuple[int, int]) -> int:
    """Runs the noise was measured from: those of each side with at least 2 runs."""
    return sum(n for n in k if n >= 2)


def method_text(k: tuple[int, int]) -> str:
    """The several-runs interval method in words."""
    text = (
        "Welch t interval (95%) of ln(M_after ÷ M_before), M the mean of a side's run means (each run weighs "
        "equally), delta method with var(M) = s² ÷ k from the spread s of the k run means (the run-to-run noise, "
        "measured; k − 1 degrees of freedom), Welch–Satterthwaite degrees of freedom over the runs, reported as % "
        "(e^x − 1); no assumed run-to-run or level-shift term (the spread of the run means holds both)"
    )
    for side, other, (n, m) in (("BEFORE", "AFTER", k), ("AFTER", "BEFORE", k[::-1])):
        if n == 1:
            text += (
                f"; {side} has one run: its mean taken to vary between runs as {other}'s run means do "
                f"(cv² (1 ÷ {m} + 1), {m - 1} degrees of freedom)"
            )
    return text


def noise_source(k: tuple[int, int], cv_pct: tuple[float | None, float | None], sigma_pct: float) -> str:
    """``measured from N runs: X% (...)``: the measured σ_run and where it comes from, in words."""
    parts = [
        f"{side} {c:.1f}%" if c is not None else f"{side} (one run) taken as {other}'s"
        for side, other, c in (("BEFORE", "AFTER", cv_pct[0]), ("AFTER", "BEFORE", cv_pct[1]))
    ]
    return (
        f"measured from {measured_runs(k)} runs: {sigma_pct:.1f}% ({k[0]} BEFORE, {k[1]} AFTER runs; their means "
        f"vary by {', '.join(parts)}, standard deviation ÷ mean; σ_run = √(cv_before² + cv_after²) is the noise of "
        "one run against one, the figure to pass as --run-noise-pct when diffing single runs on this machine)"
    )
