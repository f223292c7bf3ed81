"""Steady state of a step-time series: warm-up, phases, growth, the profiled window.

Pure functions on numpy arrays of step durations in **seconds**. The answers:

- **warm-up**: the leading steps that are slower than the first phase's level
  (compilation, allocator growth, caches); the steady state starts after them.
  A first segment that is slower than the next and at most half the run is
  warm-up too, not a phase.
- **phases**: permanent level shifts, found by binary segmentation on block
  medians (blocks of ``ceil(n/200)`` steps, so cost stays ~O(200^2) for any run
  length). A split is kept when both sides have at least ``min_segment`` steps,
  the medians differ by at least ``min_shift`` (10%) and by more than 4x the
  noise (1.4826 * MAD of the block medians around their side's median). The
  last phase is what a long run will see, so it defines the steady state.
- **trend**: a step time that keeps growing (a per-step cost rising with the
  step number, which a cumulative-average rate hides). Theil-Sen slope over the
  steady span; "detected" when the fitted rise over the span is >= 10% of the
  median and Spearman's rank correlation with the step number is >= 0.5. A
  series that is a trend is not also cut into phases: change points are kept
  only when piecewise-constant levels fit better (sum of absolute deviations)
  than a Theil-Sen line.
- **stability**: ``spread`` = p90 ÷ p10 of the steady span. Above
  :data:`UNSTABLE_SPREAD` (2x) the steps do not have one level (other work on
  the machine, data-dependent steps): ``unstable`` is set, and a median, a
  phase or a window comparison of such a series describes the noise, not the run.
- **cycle**: a steady span whose steps repeat a pattern of ``k`` steps (2 ≤ k ≤
  :data:`MAX_CYCLE`), such as DataLoader workers handing over their batches
  together (with 2 workers on a slow ``__getitem__``: 64 ms, 9 ms, 64 ms, ...),
  has no single level step by step, but one per cycle: when the single steps'
  spread exceeds :data:`UNSTABLE_SPREAD` and the lag-``k`` autocorrelation is
  at least :data:`CYCLE_MIN_ACF` and that much above every shorter lag's (a
  level shift or a trend correlates at every lag alike), the level, p10 and
  p90 are those of the means
  of ``k`` consecutive steps (a moving window, so a slip of the pattern does not
  matter; the median of one mode of the steps would state neither mode's
  throughput): the smallest such ``k`` whose means spread at most
  :data:`UNSTABLE_SPREAD`, else the smallest such ``k`` (its spread then sets
  ``unstable``). ``cycle_steps`` = k, 1 without a cycle.
- **window**: the profiled steps' median and its ratio to the steady-state
  median (profiler overhead included), and the same for the unprofiled steps
  next to the window (a transient around the window shows there).

Steps flagged in ``exclude`` (profiler warm-up/active steps, the FLOPs-counting
step) are left out of every statistic except the window figures.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import msgspec
import numpy as np
import numpy.typing as npt

MIN_SHIFT = 0.10
TREND_MIN_RISE = 0.10
TREND_MIN_RHO = 0.5
NOISE_FACTOR = 4.0
UNSTABLE_SPREAD = 2.0  # p90 / p10 of the steady span above this: no single level to report
MAX_CYCLE = 8  # longest step cycle looked for (steps): DataLoader worker counts up to 8
# lag-k autocorrelation of a cycle: independent noise gives ~0 (|r| < 0.15 over 200 lognormal steps); an
# alternating 64 / 9 ms series of a 2-worker DataLoader run gives 0.87 at lag 2 (examples/mlp.py
# --slow-getitem-ms 1 --num-workers 2, 2-core VM, 2026-12-07)
CYCLE_MIN_ACF = 0.5


class Phase(msgspec.Struct, frozen=True):
    """A steady phase of the run: steps ``[start_step, end_step)`` (0-based), median step time (s)."""

    start_step: int  # first step (0-based) of the phase
    end_step: int  # one past its last step
    median_s: float


class SteadyState(msgspec.Struct, frozen=True, kw_only=True):
    """Result of :func:`analyze` (the report's ``run.steady_state``). Durations in seconds; slope in µs per step.

    ``phase_change``: more than one phase; ``steady_start_step``: the first step of the last phase (the warm-up's
    end when there is one phase)."""

    n_steps: int
    warmup_steps: int
    phases: list[Phase]
    median_s: float
    p10_s: float
    p90_s: float
    trend_us_per_step: float
    trend_rise_ratio: float
    trend_detected: bool
    window_median_s: float | None = None
    window_ratio: float | None = None
    window_neighbor_median_s: float | None = None
    window_neighbor_ratio: float | None = None
    notes: list[str] = []
    phase_change: bool
    steady_start_step: int
    cycle_steps: int = 1

    @property
    def spread(self) -> float:
        """p90 ÷ p10 of the steady-state step times (1.0 = perfectly even)."""
        return self.p90_s / self.p10_s if self.p10_s > 0 else float("inf")

    @property
    def unstable(self) -> bool:
        """The steady span has no single level: p90 is more than :data:`UNSTABLE_SPREAD` times p10."""
        return self.spread > UNSTABLE_SPREAD


def _mad_sigma(x: np.ndarray) -> float:
    return float(1.4826 * np.median(np.abs(x - np.median(x)))) if x.size else 0.0


def _split_cost(x: np.ndarray, t: int) -> float:
    a, b = x[:t], x[t:]
    return float(np.abs(a - np.median(a)).sum() + np.abs(b - np.median(b)).sum())


def _segment(x: np.ndarray, min_len: int, depth: int = 0) -> list[int]:
    """Change points (indices into ``x``) by recursive binary segmentation on medians."""
    n = x.size
    if n < 2 * min_len or depth > 4:
        return []
    candidates = range(min_len, n - min_len + 1)
    t = min(candidates, key=lambda i: _split_cost(x, i))
    left, right = x[:t], x[t:]
    ml, mr = float(np.median(left)), float(np.median(right))
    noise = _mad_sigma(np.concatenate([left - ml, right - mr]))
    shift = abs(mr - ml)
    if shift < MIN_SHIFT * min(ml, mr) or shift <= NOISE_FACTOR * noise:
        return []
    return _segment(left, min_len, depth + 1) + [t] + [t + c for c in _segment(right, min_len, depth + 1)]


def _blocks(x: np.ndarray) -> tuple[np.ndarray, int]:
    size = max(1, math.ceil(x.size / 200))
    usable = (x.size // size) * size
    return np.median(x[:usable].reshape(-1, size), axis=1), size


def find_change_points(x: np.ndarray, min_segment: int) -> list[int]:
    """Change points of ``x`` (indices of the first element of each new level)."""
    if x.size < 2 * min_segment:
        return []
    blocks, size = _blocks(x)
    return [c * size for c in _segment(blocks, max(2, math.ceil(min_segment / size)))]


def theil_sen(x: np.ndarray, y: np.ndarray, max_points: int = 1500) -> float:
    """Median of pairwise slopes dy/dx (robust to outliers); subsampled above ``max_points``."""
    if x.size < 3:
        return 0.0
    if x.size > max_points:
        idx = np.linspace(0, x.size - 1, max_points).astype(int)
        x, y = x[idx], y[idx]
    i, j = np.triu_indices(x.size, k=1)
    dx = x[j] - x[i]
    ok = dx != 0
    return float(np.median((y[j] - y[i])[ok] / dx[ok])) if ok.any() else 0.0


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman's rank correlation (ties ranked by order; fine for timing series)."""
    if x.size < 3:
        return 0.0
    rx, ry = np.argsort(np.argsort(x)), np.argsort(np.argsort(y))
    c = np.corrcoef(rx, ry)[0, 1]
    return 0.0 if np.isnan(c) else float(c)


def detect_warmup(x: np.ndarray, level: float, noise: float, window: int = 5) -> int:
    """Number of leading steps of ``x`` that are warm-up relative to ``level`` seconds.

    Warm-up ends at the first step whose forward rolling median (``window``
    steps) is not slower than ``level`` by more than ``band``, and which is not
    itself that slow; band = max(10%, 3 x noise / level). Slow stretches after
    that are transients (or phases), not warm-up.
    """
    if x.size == 0 or level <= 0:
        return 0
    band = max(MIN_SHIFT, 3.0 * noise / level)
    k = max(1, min(window, x.size // 4 or 1))
    roll = np.array([np.median(x[i : i + k]) for i in range(x.size - k + 1)])
    # warm-up is a *leading* run of slow steps; a slow stretch later on is a transient, not warm-up
    good = np.nonzero(roll <= (1 + band) * level)[0]
    i = int(good[0]) if good.size else x.size
    while i < x.size and abs(x[i] - level) > band * level and x[i] > level:
        i += 1
    return min(i, x.size)


class _Window(NamedTuple):
    """The profiled window's median step (s) and its ratio to the steady median, and the same for the unprofiled
    steps next to it (None without a window)."""

    median_s: float | None = None
    ratio: float | None = None
    neighbor_median_s: float | None = None
    neighbor_ratio: float | None = None


class _Trend(NamedTuple):
    """Theil–Sen slope of the steady span (s per step), its rise over the span ÷ the median, and whether it is a
    trend (:data:`TREND_MIN_RISE`, :data:`TREND_MIN_RHO`)."""

    slope_s: float
    rise: float
    detected: bool


def analyze(
    duration_s: npt.ArrayLike,
    exclude: npt.ArrayLike | None = None,
    window: npt.ArrayLike | None = None,
    min_segment: int | None = None,
) -> SteadyState:
    """Steady state of a step-time series.

    Args:
        duration_s: step durations in seconds, shape (n,), step i at index i.
        exclude: bool mask (n,) of steps left out of the statistics (profiled, FLOPs step).
        window: bool mask (n,) of the profiled (active) steps, for the window figures.
        min_segment: shortest phase in steps (default max(10, n // 10)).
    Raises:
        ValueError: an empty series or masks of another length.
    """
    d, excl, win = _series(duration_s, exclude, window)
    n = d.size
    steps = np.nonzero(~excl)[0]
    x = d[steps]
    if x.size < 3:
        med = float(np.median(x)) if x.size else float(np.median(d))
        return _steady_state(
            n, 0, [Phase(0, n, med)], StepLevel(med, med, med, 1), _Trend(0.0, 0.0, False), _Window(),
            ["too few steps for a steady-state analysis"],
        )  # fmt: skip
    warm, phases = _warmup_and_phases(steps, x, min_segment or max(10, n // 10), n)
    notes = [f"warm-up: first {int(steps[warm]) if warm < steps.size else n} steps discarded"] if warm else []
    last = phases[-1]
    sel = (steps >= last.start_step) & (steps < last.end_step) & (np.arange(steps.size) >= warm)
    ss_steps, ss = steps[sel], x[sel]
    level = step_level(ss)
    med = level.median_s
    if level.cycle_steps > 1:
        notes.append(
            f"steps repeat in a cycle of {level.cycle_steps} (single steps {np.percentile(ss, 10) * 1e3:.3g}–"
            f"{np.percentile(ss, 90) * 1e3:.3g} ms): the level is the median mean of {level.cycle_steps} "
            "consecutive steps"
        )
    first_step = int(steps[warm]) if warm < steps.size else n
    return _steady_state(n, first_step, phases, level, _trend(ss_steps, ss, med), _window(d, win, excl, med), notes)


class StepLevel(NamedTuple):
    """The level of a steady span (s): median, p10, p90 of its steps, or of its ``cycle_steps``-step means."""

    median_s: float
    p10_s: float
    p90_s: float
    cycle_steps: int


def step_level(x: npt.ArrayLike) -> StepLevel:
    """The level of the steady step times ``x`` (s, shape (n,), in step order): their median, p10 and p90, or
    those of the means of ``k`` consecutive steps when the steps repeat in a cycle of ``k`` (module docstring).

    Raises:
        ValueError: ``x`` is empty."""
    a = np.asarray(x, dtype=float)
    if a.size == 0:
        raise ValueError("empty step-time series")
    plain = StepLevel(float(np.median(a)), float(np.percentile(a, 10)), float(np.percentile(a, 90)), 1)
    if plain.p10_s <= 0 or plain.p90_s / plain.p10_s <= UNSTABLE_SPREAD or np.ptp(a) == 0:
        return plain
    first: StepLevel | None = None
    for k in range(2, MAX_CYCLE + 1):
        if a.size < 4 * k:
            break
        r = _autocorrelation(a, k)
        # the pattern repeats at k and not sooner: a level shift or a trend correlates at every lag alike
        if r < CYCLE_MIN_ACF or any(_autocorrelation(a, j) > r - CYCLE_MIN_ACF for j in range(1, k)):
            continue
        means = np.convolve(a, np.ones(k) / k, "valid")
        level = StepLevel(float(np.median(means)), float(np.percentile(means, 10)), float(np.percentile(means, 90)), k)
        if level.p10_s > 0 and level.p90_s / level.p10_s <= UNSTABLE_SPREAD:
            return level
        first = first or level
    # a cycle whose means still spread (a stretch of the run off the pattern, e.g. a queue of batches the workers
    # filled while the profiled steps ran): its level, and ``unstable`` from its spread
    return first or plain


def _autocorrelation(a: np.ndarray, k: int) -> float:
    """Pearson correlation of ``a`` with itself ``k`` steps later (0 when either part is constant)."""
    u, v = a[:-k], a[k:]
    if np.ptp(u) == 0 or np.ptp(v) == 0:
        return 0.0
    return float(np.corrcoef(u, v)[0, 1])


def _series(
    duration_s: npt.ArrayLike, exclude: npt.ArrayLike | None, window: npt.ArrayLike | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The durations (s) and the exclude and window masks as arrays of one length (absent masks all False).

    Raises:
        ValueError: an empty series or masks of another length."""
    d = np.asarray(duration_s, dtype=float)
    n = d.size
    if n == 0:
        raise ValueError("empty step-time series")
    excl = np.zeros(n, bool) if exclude is None else np.asarray(exclude, bool)
    win = np.zeros(n, bool) if window is None else np.asarray(window, bool)
    if excl.size != n or win.size != n:
        raise ValueError("exclude/window masks must have the length of duration_s")
    return d, excl, win


def _warmup_and_phases(steps: np.ndarray, x: np.ndarray, min_seg: int, n: int) -> tuple[int, list[Phase]]:
    """(warm-up length in kept steps, phases) of the kept steps ``steps`` with durations ``x`` (s): the leading steps
    slower than the first stretch's level, then the level shifts of the rest; a first phase slower than the next
    and at most half the run becomes warm-up."""
    # level of the first stretch after the first few steps: the warm-up reference
    head = x[min(x.size - 1, max(1, x.size // 20)) : max(2, x.size // 3)] if x.size >= 6 else x[1:]
    level0 = float(np.median(head))
    warm = detect_warmup(x[: max(3, x.size // 2)], level0, _mad_sigma(head))
    phases, _ = _phases(steps[warm:], x[warm:], min_seg, n)
    # a first "phase" slower than the next and at most half the run is a long warm-up, not a phase
    if (
        len(phases) > 1
        and phases[0].median_s > phases[1].median_s * (1 + MIN_SHIFT)
        and phases[0].end_step - phases[0].start_step <= n // 2
    ):
        warm_step = phases[1].start_step
        warm = int(np.searchsorted(steps, warm_step))
        phases = [Phase(warm_step, phases[1].end_step, phases[1].median_s)] + phases[2:]
    return warm, phases


def _trend(ss_steps: np.ndarray, ss: np.ndarray, med: float) -> _Trend:
    """The steady span's trend (steps ``ss_steps``, durations ``ss`` in s, median ``med``); none under 10 steps."""
    if ss.size < 10:
        return _Trend(0.0, 0.0, False)
    slope = theil_sen(ss_steps.astype(float), ss)
    rise = slope * (ss_steps[-1] - ss_steps[0]) / med if med > 0 else 0.0
    rho = spearman(ss_steps.astype(float), ss)
    return _Trend(slope, float(rise), bool(rise >= TREND_MIN_RISE and rho >= TREND_MIN_RHO))


def _window(d: np.ndarray, win: np.ndarray, excl: np.ndarray, med: float) -> _Window:
    """The profiled window's figures against the steady median ``med`` (s)."""
    if not win.any():
        return _Window()
    wmed = float(np.median(d[win]))
    nmed = _neighbor_median(d, win, excl)
    return _Window(wmed, wmed / med if med > 0 else None, nmed, nmed / med if nmed is not None and med > 0 else None)


def _steady_state(
    n: int,
    warmup_steps: int,
    phases: list[Phase],
    levels: StepLevel,
    trend: _Trend,
    window: _Window,
    notes: list[str],
) -> SteadyState:
    """The :class:`SteadyState` of its parts (``levels``: the steady span's level, :func:`step_level`)."""
    return SteadyState(
        n_steps=n,
        warmup_steps=warmup_steps,
        phases=phases,
        median_s=levels.median_s,
        p10_s=levels.p10_s,
        p90_s=levels.p90_s,
        trend_us_per_step=trend.slope_s * 1e6,
        trend_rise_ratio=trend.rise,
        trend_detected=trend.detected,
        window_median_s=window.median_s,
        window_ratio=window.ratio,
        window_neighbor_median_s=window.neighbor_median_s,
        window_neighbor_ratio=window.neighbor_ratio,
        notes=notes,
        phase_change=len(phases) > 1,
        steady_start_step=phases[-1].start_step if phases else warmup_steps,
        cycle_steps=levels.cycle_steps,
    )


def _phases(body_steps: np.ndarray, body: np.ndarray, min_seg: int, n: int) -> tuple[list[Phase], list[int]]:
    """Phases of the post-warm-up series; a pure linear trend yields one phase."""
    if body.size == 0:
        return [Phase(0, n, float("nan"))], []
    cps = find_change_points(body, min_seg)
    bounds = [0, *cps, body.size]
    if cps:
        # a steady climb also yields change points: keep them only if levels fit better than a line
        slope = theil_sen(body_steps.astype(float), body)
        line = slope * (body_steps - body_steps[0])
        cost_line = float(np.abs(body - line - np.median(body - line)).sum())
        cost_levels = sum(
            float(np.abs(body[a:b] - np.median(body[a:b])).sum()) for a, b in zip(bounds[:-1], bounds[1:])
        )
        if cost_line <= cost_levels:
            cps, bounds = [], [0, body.size]
    phases = []
    for a, b in zip(bounds[:-1], bounds[1:]):
        start = int(body_steps[a])
        end = int(body_steps[b]) if b < body.size else n
        phases.append(Phase(start, end, float(np.median(body[a:b]))))
    phases = _merge_close(phases)
    return phases, cps


def _merge_close(phases: list[Phase]) -> list[Phase]:
    out = [phases[0]]
    for p in phases[1:]:
        q = out[-1]
        if abs(p.median_s - q.median_s) < MIN_SHIFT * min(p.median_s, q.median_s):
            w = (q.end_step - q.start_step, p.end_step - p.start_step)
            m = (q.median_s * w[0] + p.median_s * w[1]) / max(1, sum(w))
            out[-1] = Phase(q.start_step, p.end_step, m)
        else:
            out.append(p)
    return out


def _neighbor_median(d: np.ndarray, win: np.ndarray, excl: np.ndarray) -> float | None:
    idx = np.nonzero(win)[0]
    span = max(5, idx.size)
    lo, hi = max(0, idx[0] - 2 * span), min(d.size, idx[-1] + 1 + 2 * span)
    near = np.arange(lo, hi)
    near = near[~excl[near] & ~win[near]]
    return float(np.median(d[near])) if near.size else None
