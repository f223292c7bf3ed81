"""The run's memory over its steps, from ``steps.csv``: growth (a leak), peak, and allocator counters per step.

Sources: the per-step columns :mod:`perfdoctor.capture.step_timer` writes at each step's end:
``cuda_allocated_bytes`` / ``cuda_reserved_bytes`` (``torch.cuda.memory_stats()``'s
``allocated_bytes.all.current`` / ``reserved_bytes.all.current``), ``cuda_malloc_count`` / ``cuda_alloc_retries``
(its cumulative ``num_device_alloc`` / ``num_alloc_retries``) and ``rss_bytes`` (the process's resident set,
``/proc/self/statm``). Limits come from ``run.json``'s ``memory`` (the device's ``total_memory``; the host's
``MemAvailable`` plus the process's RSS when the run started).

Growth is fitted over the longest unbroken stretch of steady-state, unprofiled steps (profiler windows hold
event buffers and the FLOPs step its own tensors: they shift the level and are left out), with the
Theil–Sen estimator (the median of the pairwise slopes: robust to a few outlying steps and to the allocator's
stair-steps) and its confidence interval (``scipy.stats.theilslopes``, Sen 1968). Pure functions; no thresholds.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import msgspec
import numpy as np

if TYPE_CHECKING:
    from perfdoctor.analysis.rank import Analysis, RankResult

# Theil–Sen is O(n²) in the steps fitted: past this many, evenly spaced steps of the stretch are fitted
MAX_FIT_STEPS = 2000
CONFIDENCE = 0.95  # two-sided confidence of the slope's interval
SERIES = ("cuda_reserved_bytes", "cuda_allocated_bytes", "rss_bytes")
SERIES_WORDS = {
    "cuda_reserved_bytes": "reserved device memory",
    "cuda_allocated_bytes": "allocated device memory",
    "rss_bytes": "process RSS",
}


class Growth(msgspec.Struct, frozen=True, kw_only=True):
    """One memory series over the run (bytes; steps are the run's 0-based step numbers; the report's
    ``run.memory.series[]``).

    ``series``: its ``steps.csv`` column, ``words`` what it is in words; ``first_step``..``last_step``: the fitted
    stretch (``n_steps`` steps); ``start_bytes`` / ``end_bytes``: the fitted line at its ends;
    ``slope_bytes_per_step`` (Theil–Sen) with ``slope_low_bytes_per_step`` / ``slope_high_bytes_per_step`` its
    :data:`CONFIDENCE` interval; ``growth_bytes`` = slope × (last − first step); ``peak_bytes`` at ``peak_step``:
    the largest value of the whole run; ``limit_bytes``: what the series can reach before it fails (None: not
    recorded), ``limit_source`` says what it is; ``steps_to_limit``: (limit − end) ÷ slope, None when the slope is
    not positive or there is no limit."""

    series: str
    words: str
    first_step: int
    last_step: int
    n_steps: int
    start_bytes: float
    end_bytes: float
    slope_bytes_per_step: float
    slope_low_bytes_per_step: float
    slope_high_bytes_per_step: float
    growth_bytes: float
    peak_bytes: float
    peak_step: int
    limit_bytes: float | None
    limit_source: str
    steps_to_limit: float | None


class AllocatorCounts(msgspec.Struct, frozen=True, kw_only=True):
    """The caching allocator's counters over the steady-state steps (``steps.csv``'s cumulative counts, differenced
    step by step; the report's ``run.memory.allocator``): ``mallocs_per_step`` (cudaMalloc calls,
    ``num_device_alloc``) and ``retries_per_step`` (``num_alloc_retries``: a failed cudaMalloc that freed the cache
    and tried again) per steady step, over ``n_steps`` steady unprofiled steps from ``first_step``;
    ``retry_steps``: the steps with a retry (first 20)."""

    n_steps: int
    first_step: int
    mallocs_per_step: float | None
    retries_per_step: float | None
    retry_steps: list[int]


class RunMemory(msgspec.Struct, frozen=True, kw_only=True):
    """What the run's step series say about memory: each recorded series' :class:`Growth`, the allocator counts
    (None without CUDA counters)."""

    series: list[Growth]
    allocator: AllocatorCounts | None

    def growth(self, name: str) -> Growth | None:
        """The :class:`Growth` of series ``name`` (None: not recorded)."""
        return next((g for g in self.series if g.series == name), None)


def steady_mask(steps: dict[str, np.ndarray], steady_start: int) -> np.ndarray:
    """Steps from ``steady_start`` on outside the profiler's windows and the FLOPs step (``profiler_phase``
    "none")."""
    n = steps["step"].size
    mask: np.ndarray = (np.arange(n) >= steady_start) & (steps["profiler_phase"] == "none")
    return mask


def longest_run(mask: np.ndarray) -> np.ndarray:
    """Indices of the longest stretch of consecutive True in ``mask`` (the later one on a tie; empty if none)."""
    idx: np.ndarray = np.flatnonzero(mask)
    if idx.size == 0:
        return idx
    cuts = np.flatnonzero(np.diff(idx) != 1) + 1
    runs = np.split(idx, cuts)
    best = max(range(len(runs)), key=lambda i: (runs[i].size, i))
    out: np.ndarray = runs[best]
    return out


def theil_sen(x: np.ndarray, y: np.ndarray) -> tuple[float, float, float, float]:
    """(slope, intercept, slope_low, slope_high) of ``y`` over ``x`` by Theil–Sen with its :data:`CONFIDENCE`
    interval (``scipy.stats.theilslopes``; Sen, "Estimates of the regression coefficient based on Kendall's tau",
    JASA 1968). Past :data:`MAX_FIT_STEPS` points, evenly spaced ones are fitted."""
    from scipy import stats  # type: ignore[import-untyped]

    if x.size > MAX_FIT_STEPS:
        keep = np.unique(np.linspace(0, x.size - 1, MAX_FIT_STEPS).round().astype(np.int64))
        x, y = x[keep], y[keep]
    res = stats.theilslopes(y, x, alpha=CONFIDENCE)
    return float(res[0]), float(res[1]), float(res[2]), float(res[3])


def growth_of(
    steps: dict[str, np.ndarray], name: str, fit: np.ndarray, limit: tuple[float | None, str]
) -> Growth | None:
    """:class:`Growth` of column ``name`` fitted over the step indices ``fit`` (None: fewer than 3 measured)."""
    col = steps.get(name)
    if col is None or col.size == 0 or np.isnan(col).all():
        return None
    idx = fit[~np.isnan(col[fit])]
    if idx.size < 3:
        return None
    x, y = steps["step"][idx].astype(float), col[idx].astype(float)
    slope, intercept, low, high = theil_sen(x, y)
    start, end = intercept + slope * x[0], intercept + slope * x[-1]
    peak_i = int(np.nanargmax(col))
    cap, source = limit
    to_limit = (cap - end) / slope if cap is not None and slope > 0 else None
    return Growth(
        series=name,
        words=SERIES_WORDS.get(name, name),
        first_step=int(x[0]),
        last_step=int(x[-1]),
        n_steps=int(idx.size),
        start_bytes=float(start),
        end_bytes=float(end),
        slope_bytes_per_step=slope,
        slope_low_bytes_per_step=low,
        slope_high_bytes_per_step=high,
        growth_bytes=slope * float(x[-1] - x[0]),
        peak_bytes=float(col[peak_i]),
        peak_step=int(steps["step"][peak_i]),
        limit_bytes=cap,
        limit_source=source,
        steps_to_limit=None if to_limit is None else max(float(to_limit), 0.0),
    )


def limits(memory: Mapping[str, object] | None) -> dict[str, tuple[float | None, str]]:
    """Each series' limit (bytes) and what it is, from ``run.json``'s ``memory`` (recorded at the run's start):
    the device's total memory for the CUDA series; the host's available memory plus the process's RSS then
    for the RSS (what it could grow to before the host, or its cgroup, runs out)."""
    m = memory or {}
    dev = _num(m.get("device_total_bytes"))
    avail, rss0 = _num(m.get("host_available_bytes")), _num(m.get("rss_bytes"))
    host = avail + rss0 if avail is not None and rss0 is not None else None
    host_words = "host memory available at the run's start plus the process's RSS then"
    if m.get("host_limit") == "cgroup":
        host_words = "the container's (cgroup's) memory limit left at the run's start plus the process's RSS then"
    return {
        "cuda_reserved_bytes": (dev, "device memory (total_memory)"),
        "cuda_allocated_bytes": (dev, "device memory (total_memory)"),
        "rss_bytes": (host, host_words),
    }


def _num(v: object) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v == v else None


def allocator_counts(steps: dict[str, np.ndarray], mask: np.ndarray) -> AllocatorCounts | None:
    """:class:`AllocatorCounts` of the steps in ``mask`` (each step's count = its cumulative value − the previous
    step's; a step whose previous row is unmeasured is left out). None without CUDA counters."""
    mallocs, retries = steps.get("cuda_malloc_count"), steps.get("cuda_alloc_retries")
    if retries is None or retries.size == 0 or np.isnan(retries).all():
        return None
    idx = np.flatnonzero(mask)
    idx = idx[idx >= 1]

    def per_step(col: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        if col is None or np.isnan(col).all():
            return np.empty(0), np.empty(0, dtype=np.int64)
        d = col[idx] - col[idx - 1]
        ok = ~np.isnan(d)
        return d[ok], idx[ok]

    m, _ = per_step(mallocs)
    r, r_idx = per_step(retries)
    if r.size == 0:
        return None
    hit = r_idx[r > 0]
    return AllocatorCounts(
        n_steps=int(r.size),
        first_step=int(steps["step"][r_idx[0]]),
        mallocs_per_step=float(m.mean()) if m.size else None,
        retries_per_step=float(r.mean()),
        retry_steps=[int(s) for s in steps["step"][hit][:20]],
    )


def run_memory(
    steps: dict[str, np.ndarray], steady_start: int, memory: Mapping[str, object] | None
) -> RunMemory | None:
    """The run's :class:`RunMemory` from its step table (:func:`perfdoctor.capture.steps_csv.read_steps_csv`), the
    first steady-state step (``SteadyState.steady_start_step``) and ``run.json``'s ``memory``; None when no
    memory column was measured."""
    if steps["step"].size == 0:
        return None
    mask = steady_mask(steps, steady_start)
    fit = longest_run(mask)
    lim = limits(memory)
    series = [g for name in SERIES if (g := growth_of(steps, name, fit, lim[name])) is not None]
    counts = allocator_counts(steps, mask)
    if not series and counts is None:
        return None
    return RunMemory(series=series, allocator=counts)


# evidence values of the allocator's counts over the run (:func:`run_allocator_values`)
AllocatorValues = dict[str, float | int | list[int] | None]


def run_allocator_evidence(analysis: Analysis[RankResult]) -> AllocatorValues:
    """:func:`run_allocator_values` of an analysis: the values its rank summary's worker was given
    (``analysis.run_allocator``), else those of its run data (``analysis.run.memory``, rank 0's); {} without (a
    worker's ``run`` is run.json alone)."""
    if analysis.run_allocator is not None:
        return dict(analysis.run_allocator)
    run = analysis.run
    return run_allocator_values(None if run is None or isinstance(run, Mapping) else run.memory)


def run_allocator_values(memory: RunMemory | None) -> AllocatorValues:
    """The allocator's counts over the whole run as evidence values (PD501's, beside the profiled window's
    calls): ``run_mallocs_per_step`` (cudaMalloc calls) and ``run_retries_per_step`` (allocator retries) per
    steady-state unprofiled step, ``run_retry_steps`` (the first 20 steps with a retry) and ``run_steady_steps``
    counted; {} without CUDA counters in the run data."""
    a = memory.allocator if memory is not None else None
    if a is None:
        return {}
    out: AllocatorValues = {"run_retries_per_step": a.retries_per_step, "run_steady_steps": a.n_steps}
    if a.mallocs_per_step is not None:
        out["run_mallocs_per_step"] = a.mallocs_per_step
    if a.retry_steps:
        out["run_retry_steps"] = a.retry_steps
    return out
