"""Cross-rank analyses on rank summaries: stragglers, rank × step matrices, ranks whose breakdown differs.

All inputs are the ranks' analysed step rows (µs) and the matched collective wait; nothing here reads events.

- Straggler: per step, the robust z-score of each rank's compute time (the sum of the compute categories of
  its breakdown) over the ranks, z = 0.6745 (x − median) / MAD (Iglewicz & Hoaglin, "How to Detect and Handle
  Outliers", 1993; when MAD = 0 the mean absolute deviation × 1.253314 stands in); a rank whose median z over
  the steps is at least :data:`Z_OUTLIER`, and whose mean compute per step exceeds the median rank's by
  :data:`MIN_EXCESS` and by at least :data:`MIN_STEP_SHARE` of the job's median step time, is a straggler (on
  a tight job a tiny MAD makes noise look robustly far, and a rank that computes 0.2 ms more in a 20 ms step
  makes nobody wait: on the DLRM 8-rank job such a rank is the one that waits longest in collectives).
- Breakdown outlier: a rank whose share of step time in a category (compute categories, exposed
  communication, idle causes) differs from the job's median share by at least :data:`SHARE_DIFF` and by a
  robust z of at least :data:`Z_OUTLIER` (e.g. one rank DataLoader-bound).
- Missing ranks: ``distributedInfo.world_size`` larger than the ranks given.
- Cold starts: steps PD902 calls cold on any rank (:func:`perfdoctor.analysis.steps.warmup.job_cold_steps`) are left
  out of the straggler, breakdown-outlier and collective-wait statistics (first-call work is no rank's steady
  state); when that leaves a rank no step, none of them is drawn and ``cold_note`` says why. The rank × step
  matrices and ``shares`` still show every analysed step.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING

import msgspec
import numpy as np
from msgspec import UNSET, UnsetType

from perfdoctor.analysis.steps.warmup import job_cold_steps
from perfdoctor.analysis.timing.breakdown import StepBreakdown
from perfdoctor.vocab import COMPUTE_CATEGORIES

if TYPE_CHECKING:
    from perfdoctor.analysis.rank import Analysis, RankResult
    from perfdoctor.jobs.reduce import JobAnalysis

Z_OUTLIER = 3.5  # Iglewicz & Hoaglin's cut-off for the modified z-score
MIN_EXCESS = 0.10  # a straggler also computes at least 10% more per step than the median rank (tight jobs)
MIN_STEP_SHARE = 0.05  # ... and that excess is at least 5% of the job's median step time (material to the job)
SHARE_DIFF = 0.10  # 10 percentage points of step time
WORST_COLLECTIVES = 8  # collectives shown in the collective-wait matrix


class Straggler(msgspec.Struct, kw_only=True):
    """A rank whose compute time per step is an outlier: its median robust ``z`` over the steps, its mean compute per
    step and the median rank's (µs)."""

    rank: int
    z: float
    compute_us: float
    median_compute_us: float


class BreakdownOutlier(msgspec.Struct, kw_only=True):
    """A rank whose share of step time in ``category`` (fraction) is far from the job's median share (robust
    ``z``)."""

    rank: int
    category: str
    share: float
    median_share: float
    z: float


class WorstCollective(msgspec.Struct, kw_only=True):
    """One column of the collective-wait matrix: the ``index``-th collective of the step (its ``kind``) with the
    longest wait of any rank (µs)."""

    index: int
    kind: str
    max_wait_us: float


class JobCollectiveWait(msgspec.Struct, kw_only=True):
    """Collective matching across ranks: unmatched (``note`` says why), or the mean wait per step of each rank
    (µs), how often each rank arrived last, and the worst collectives' ranks × collectives wait matrix (µs)."""

    matched: bool
    note: str | UnsetType = UNSET
    n_collectives: int | UnsetType = UNSET
    wait_us_per_step: list[float] | UnsetType = UNSET
    last_arrivals: list[int] | UnsetType = UNSET
    worst_collectives: list[WorstCollective] | UnsetType = UNSET
    wait_matrix_us: list[list[float]] | UnsetType = UNSET


class FailedRank(msgspec.Struct, kw_only=True):
    """A trace of the job that could not be analysed, and its one-line error."""

    path: str
    error: str | None


class CollectivesFree(msgspec.Struct, kw_only=True):
    """The job's step measured and replayed with every collective free (:func:`collectives_free`): µs, ``ratio`` =
    free ÷ measured."""

    step_us: float
    step_rank: int
    free_step_us: float
    free_rank: int
    ratio: float
    ranks_step_us: list[float | None]
    ranks_free_step_us: list[float | None]
    method: str


class JobSection(msgspec.Struct, kw_only=True):
    """The report's ``job`` section: the cross-rank view of a multi-rank job (:func:`job_section`).

    Matrices are rank × step (rows in ``ranks`` order, columns in ``steps`` order, µs, None where a rank lacks
    the step); ``shares``: per rank, category → share of step time (fraction); ``outliers``: rank → reasons;
    ``cold_steps``: steps left out of the stragglers, breakdown outliers and collective wait as cold starts
    (PD902), ``cold_note``: why none of those is drawn (every step a cold start); both absent when not so;
    ``collectives_free``: the job's step with every collective free (absent without collectives)."""

    n_ranks: int
    world_size: int | None
    missing_ranks: list[int]
    failed: list[FailedRank]
    ranks: list[int]
    steps: list[int]
    step_time_us: list[list[float | None]]
    exposed_comm_us: list[list[float | None]]
    compute_us: list[list[float | None]]
    step_median_us: list[float | None]
    shares: list[dict[str, float]]
    stragglers: list[Straggler]
    breakdown_outliers: list[BreakdownOutlier]
    collective_wait: JobCollectiveWait
    outliers: dict[str, list[str]]
    cold_steps: list[int] | UnsetType = UNSET
    cold_note: str | UnsetType = UNSET
    collectives_free: CollectivesFree | UnsetType = UNSET


FREE_METHOD = (
    "each rank's dependency graph replayed with every collective's transfer free and perfectly overlapped "
    "(communication kernels take no time and no compute waits for them; a gloo rank's exposed host collective "
    "time cut), every rank alike so none waits for a peer; compute and launches as recorded. The job's step is "
    "its longest rank's mean step, measured and replayed; their ratio is the share of the step this run keeps "
    "once communication and the wait for peers cost nothing: an upper bound on what any communication fix gives"
)


def robust_z(x: np.ndarray) -> np.ndarray:
    """Modified z-scores of ``x`` (shape (n,)): 0.6745 (x − median) / MAD; MeanAD × 1.253314 when MAD = 0;
    zeros when all values are equal."""
    med = float(np.median(x))
    dev = np.abs(x - med)
    mad = float(np.median(dev))
    if mad > 0:
        return 0.6745 * (x - med) / mad
    mean_ad = float(dev.mean())
    return (x - med) / (1.253314 * mean_ad) if mean_ad > 0 else np.zeros_like(x)


def _shares(rows: list[StepBreakdown], cpu: bool = False) -> dict[str, float]:
    """Share of step time per category / exposed communication / idle cause, summed over steps: each µs once.

    A GPU rank's device categories, exposed communication (for its ``communication`` category) and idle causes
    partition the step. A CPU-only rank (``cpu``) has no separate exposed share: its host collectives are a
    category of the host partition (``host_collective``, :mod:`perfdoctor.analysis.timing.cpu_breakdown`) and their
    exposed part is a subset of it (counted twice, a gloo job's rows would sum to 111%)."""
    total = sum(s.dur_us for s in rows) or 1.0
    out: dict[str, float] = {}
    for s in rows:
        for k, v in s.categories_us.items():
            if k != "communication":
                out[k] = out.get(k, 0.0) + v / total
        if not cpu:
            out["communication (exposed)"] = (
                out.get("communication (exposed)", 0.0) + s.communication.exposed_us / total
            )
        for k, v in s.idle_causes_us.items():
            out[f"idle: {k}"] = out.get(f"idle: {k}", 0.0) + v / total
    return {k: float(v) for k, v in out.items()}


def _matrix(
    ranks: list[int], rows: dict[int, list[StepBreakdown]], steps: list[int], get: Callable[[StepBreakdown], float]
) -> list[list[float | None]]:
    """Rank × step matrix of ``get`` of each rank's step row (None where the rank lacks the step)."""
    out = []
    for r in ranks:
        by_step = {s.step: s for s in rows[r]}
        out.append([float(get(by_step[n])) if n in by_step else None for n in steps])
    return out


def job_section(job: JobAnalysis) -> JobSection:
    """The report's ``job`` section from a :class:`perfdoctor.jobs.reduce.JobAnalysis` (see module docstring).

    Keys: ``n_ranks``, ``world_size``, ``missing_ranks``, ``failed`` ([{path, error}]), ``ranks`` (rank ids in
    matrix row order), ``steps`` (step numbers, columns), ``step_time_us`` and ``exposed_comm_us`` (rank × step,
    µs, None where a rank lacks the step), ``compute_us`` (same), ``step_median_us`` (per rank), ``shares``
    (per rank: category → share of step time), ``stragglers`` ([{rank, z, compute_us, median_compute_us}]),
    ``breakdown_outliers``, ``collective_wait`` (per-rank mean wait per step, worst collectives matrix),
    ``outliers`` ({rank: [why, ...]}), ``cold_steps`` (steps left out of those statistics as cold starts),
    ``cold_note`` (why none is drawn) and ``collectives_free`` (the job's step with every collective free,
    :func:`collectives_free`), each only when there is one.
    """
    summaries = job.summaries
    ranks = [int(s.rank or 0) for s in summaries]
    rows = {int(s.rank or 0): list(s.step_rows) for s in summaries}
    cpu = {int(s.rank or 0): s.primary_kind == "cpu" for s in summaries}
    steps = sorted({int(s.step) for r in rows.values() for s in r})
    world = max((s.collectives.world_size for s in summaries if s.collectives is not None), default=0)
    cold, note = job_cold_steps(
        {r: [int(s.step) for s in rows[r]] for r in ranks}, {int(s.rank or 0): list(s.cold_steps) for s in summaries}
    )
    stragglers, outliers = _warm_outliers(ranks, rows, cpu, steps, cold) if not note else ([], [])
    free = collectives_free(job)
    return JobSection(
        n_ranks=len(ranks),
        world_size=int(world) or None,
        missing_ranks=sorted(set(range(world)) - set(ranks)) if world > len(ranks) else [],
        failed=[FailedRank(path=s.path, error=s.error) for s in job.failed],
        ranks=ranks,
        steps=steps,
        step_time_us=_matrix(ranks, rows, steps, lambda s: s.dur_us),
        exposed_comm_us=_matrix(ranks, rows, steps, lambda s: s.communication.exposed_us),
        compute_us=_matrix(ranks, rows, steps, _compute_us),
        step_median_us=[float(np.median([s.dur_us for s in rows[r]])) if rows[r] else None for r in ranks],
        shares=[_shares(rows[r], cpu[r]) for r in ranks],
        stragglers=stragglers,
        breakdown_outliers=outliers,
        collective_wait=_collective_wait(job.analysis, ranks, rows, cold),
        outliers=_reasons(stragglers, outliers),
        cold_steps=sorted(cold) if cold else UNSET,
        cold_note=note or UNSET,
        collectives_free=free if free is not None else UNSET,
    )


def collectives_free(job: JobAnalysis) -> CollectivesFree | None:
    """The job's step (µs: the longest of its ranks' mean steps, :attr:`perfdoctor.jobs.summary.RankSummary.
    collectives_free`) measured and replayed with every collective free
    (:func:`perfdoctor.replay.transforms.collectives.free_collectives`), and ``ratio`` = free ÷ measured. A rank
    whose replay ends later than measured (the replay's error) keeps its measured step. A rank without collectives
    has nothing to free: its measured step stands in both. None when no rank has a collective."""
    ranks = [int(s.rank or 0) for s in job.summaries]
    steps: list[float | None] = []
    frees: list[float | None] = []
    for s in job.summaries:
        cf = s.collectives_free
        step = cf.step_us if cf is not None else _mean_step(s.step_rows)
        steps.append(None if step is None else float(step))
        frees.append(None if step is None else float(min(cf.free_step_us, step)) if cf is not None else float(step))
    if all(s.collectives_free is None for s in job.summaries) or not any(x is not None for x in steps):
        return None
    i = max((k for k, x in enumerate(steps) if x is not None), key=lambda k: steps[k] or 0.0)
    j = max((k for k, x in enumerate(frees) if x is not None), key=lambda k: frees[k] or 0.0)
    step, free = float(steps[i] or 0.0), float(frees[j] or 0.0)
    return CollectivesFree(
        step_us=step,
        step_rank=ranks[i],
        free_step_us=free,
        free_rank=ranks[j],
        ratio=free / step if step > 0 else 1.0,
        ranks_step_us=steps,
        ranks_free_step_us=frees,
        method=FREE_METHOD,
    )


def _mean_step(rows: list[StepBreakdown]) -> float | None:
    """Mean analysed step (µs) of a rank's rows; None without one."""
    return float(np.mean([r.dur_us for r in rows])) if rows else None


def _compute_us(s: StepBreakdown) -> float:
    """The step's compute time: the sum of its compute categories (µs)."""
    return float(sum(s.categories_us.get(k, 0.0) for k in COMPUTE_CATEGORIES))


def _warm_outliers(
    ranks: list[int], rows: dict[int, list[StepBreakdown]], cpu: dict[int, bool], steps: list[int], cold: set[int]
) -> tuple[list[Straggler], list[BreakdownOutlier]]:
    """The stragglers and breakdown outliers over the steps outside ``cold`` (module docstring)."""
    warm = {r: [s for s in rows[r] if s.step not in cold] for r in ranks}
    medians = [float(np.median([s.dur_us for s in warm[r]])) for r in ranks if warm[r]]
    job_step = float(np.median(medians)) if medians else None
    compute_warm = np.array(_matrix(ranks, warm, steps, _compute_us), dtype=np.float64)
    return (
        _stragglers(ranks, compute_warm, job_step),
        _breakdown_outliers(ranks, [_shares(warm[r], cpu[r]) for r in ranks]),
    )


def _reasons(stragglers: list[Straggler], outliers: list[BreakdownOutlier]) -> dict[str, list[str]]:
    """{rank: why it is an outlier, one line per reason}: stragglers first, then breakdown outliers."""
    why: dict[str, list[str]] = {}
    for s in stragglers:
        why.setdefault(str(s.rank), []).append(
            f"straggler: compute {s.compute_us / 1000:.2f} ms/step vs median "
            f"{s.median_compute_us / 1000:.2f} (robust z {s.z:.1f})"
        )
    for b in outliers:
        why.setdefault(str(b.rank), []).append(f"{b.category}: {b.share:.0%} of step vs median {b.median_share:.0%}")
    return why


def _stragglers(ranks: list[int], compute: np.ndarray, job_step_us: float | None = None) -> list[Straggler]:
    """Ranks whose median over steps of the per-step robust z of compute time is ≥ :data:`Z_OUTLIER`.

    ``compute``: rank × step compute time (µs, NaN where a rank lacks the step). ``job_step_us``: the job's median
    step time (µs); when given, the excess over the median rank must also be ≥ :data:`MIN_STEP_SHARE` of it.
    """
    if len(ranks) < 3 or compute.size == 0:
        return []
    z = np.full(compute.shape, np.nan)
    for j in range(compute.shape[1]):
        col = compute[:, j]
        ok = ~np.isnan(col)
        if ok.sum() >= 3:
            z[ok, j] = robust_z(col[ok])
    out: list[Straggler] = []
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a rank without steps: its mean is NaN, on purpose
        zr = np.nanmedian(z, axis=1) if not np.isnan(z).all() else np.zeros(len(ranks))
        mean_c = np.nanmean(compute, axis=1)
    med = float(np.nanmedian(mean_c))
    for i in np.argsort(-np.nan_to_num(zr)):
        if not np.isfinite(zr[i]) or zr[i] < Z_OUTLIER:
            break
        if mean_c[i] < (1 + MIN_EXCESS) * med:
            continue
        if job_step_us is not None and mean_c[i] - med < MIN_STEP_SHARE * job_step_us:
            continue
        out.append(Straggler(rank=ranks[i], z=float(zr[i]), compute_us=float(mean_c[i]), median_compute_us=med))
    return out


def _breakdown_outliers(ranks: list[int], shares: list[dict[str, float]]) -> list[BreakdownOutlier]:
    """Ranks whose share of step time in a category differs from the median share by :data:`SHARE_DIFF` and a
    robust z of :data:`Z_OUTLIER` (three ranks or more), the largest difference first."""
    if len(ranks) < 3:
        return []
    keys = sorted({k for s in shares for k in s})
    out: list[BreakdownOutlier] = []
    for k in keys:
        x = np.array([s.get(k, 0.0) for s in shares])
        z = robust_z(x)
        med = float(np.median(x))
        for i in np.flatnonzero((np.abs(x - med) >= SHARE_DIFF) & (np.abs(z) >= Z_OUTLIER)):
            out.append(BreakdownOutlier(rank=ranks[i], category=k, share=float(x[i]), median_share=med, z=float(z[i])))
    return sorted(out, key=lambda b: -abs(b.share - b.median_share))


def _collective_wait(
    analysis: Analysis[RankResult], ranks: list[int], rows: dict[int, list[StepBreakdown]], cold: set[int]
) -> JobCollectiveWait:
    """Mean wait per step per rank over its steps outside ``cold`` (µs; 0 without one) and the ranks ×
    worst-collectives wait matrix (µs, every matched collective)."""
    cw = analysis.collective_wait
    if cw is None:
        return JobCollectiveWait(matched=False, note=analysis.collective_wait_note or "")
    out = JobCollectiveWait(
        matched=True,
        n_collectives=int(cw.n_collectives),
        wait_us_per_step=[_warm_mean_wait(cw.wait_us.get(r), rows[r], cold) for r in ranks],
        last_arrivals=[int(cw.last_arrivals.get(r, 0)) for r in ranks],
    )
    if cw.wait_by_collective_us:
        m = np.array([cw.wait_by_collective_us[r] for r in ranks], dtype=np.float64)
        worst = np.argsort(-m.max(axis=0), kind="stable")[:WORST_COLLECTIVES]
        out.worst_collectives = [
            WorstCollective(index=int(k), kind=str((cw.kinds or [""] * (k + 1))[k]), max_wait_us=float(m[:, k].max()))
            for k in worst
        ]
        out.wait_matrix_us = m[:, worst].round(3).tolist()
    return out


def _warm_mean_wait(wait: np.ndarray | None, rows: list[StepBreakdown], cold: set[int]) -> float:
    """Mean wait per step (µs) over the steps of ``rows`` not in ``cold`` (``wait`` follows ``rows``); 0 without."""
    if wait is None or wait.size != len(rows):
        return 0.0
    keep = [w for s, w in zip(rows, wait.tolist()) if s.step not in cold]
    return float(np.mean(keep)) if keep else 0.0
