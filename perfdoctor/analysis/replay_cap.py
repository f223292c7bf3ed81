"""Multi-rank bounds on replayed savings: a collective cannot finish before the slowest peer arrives (all µs).

Each rank is replayed alone, with its collective kernels at their recorded durations, which include the time the
rank waited for its peers. A what-if applied to one rank does not move its peers, so its copy of collective ``k``
ends no earlier than the latest peer's recorded arrival plus the transfer:

    T[r, k] = max over peers p ≠ r of (start[p, k] − offset[p] + offset[r]) + min over ranks of dur[·, k]

(``start``: the copy's recorded start on the peer's device, i.e. its arrival; ``offset``: one clock offset per
rank, the median over matched collectives of ``end[p, k] − end[ref, k]``, as
:func:`perfdoctor.analysis.collective_wait.compute` aligns them; the shortest copy is the transfer itself.)
A what-if only removes time, so the rank's step ``w`` starts no later than recorded and lasts at least
``max over k in w of T[r, k] − recorded start of w``; the mean over the analysed steps is the rank's **floor**.
A replayed saving above ``recorded mean step − floor`` is capped there (:func:`cap_outcome`).

Fixing the findings on every rank moves the peers too; the job then steps at the pace of its slowest rank, so the
job's "fixing the top N findings" figure is the slowest rank's replayed step (:func:`job_fix_all`), each rank's
taken with its floor (conservative: the peers' recorded arrivals, which the fixes would also move).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from perfdoctor.analysis.collective_wait import CollectiveTimeline

_PER_SAMPLE = "per step of today's batch"  # the larger-batch what-if's wording (replay/transforms/batch.py)


def earliest_ends(timelines: list[CollectiveTimeline]) -> dict[int, np.ndarray]:
    """``T[r, k]`` (see the module docstring) per rank, in the rank's own clock (µs, shape ``(n_collectives,)``).

    ``timelines`` must be matched (:func:`perfdoctor.analysis.collective_wait.compute` returned a result): the same
    number of collectives on every rank, two ranks or more. Returns {} otherwise.
    """
    if len(timelines) < 2 or len({len(t.dur_us) for t in timelines}) != 1 or not timelines[0].dur_us:
        return {}
    starts = np.array([t.start_us for t in timelines], dtype=np.float64)  # (ranks, collectives)
    ends = np.array([t.end_us for t in timelines], dtype=np.float64)
    durs = np.array([t.dur_us for t in timelines], dtype=np.float64)
    offset = clock_offsets(ends)
    arrival = starts - offset[:, None]  # in the first rank's clock
    transfer = durs.min(axis=0)
    # the latest arrival among each rank's peers: the latest of all, or for the rank that alone arrived latest
    # the second latest (equal to the latest when two ranks tie); O(ranks) where deleting each rank's row was
    # O(ranks²): 0.34 s of the 4,096-rank reduce
    top2 = np.partition(arrival, arrival.shape[0] - 2, axis=0)[-2:]  # (2, collectives): 2nd latest, latest
    peers_latest = np.where(arrival == top2[1], top2[0], top2[1])
    return {int(t.rank): peers_latest[i] + transfer + offset[i] for i, t in enumerate(timelines)}


def clock_offsets(ends_us: np.ndarray) -> np.ndarray:
    """Clock offset of each rank against the first (µs, shape ``(ranks,)``): the median over matched collectives of
    ``end[r, k] − end[0, k]`` (``ends_us``: shape ``(ranks, collectives)``; the copies of one collective end
    together)."""
    return np.asarray(np.median(ends_us - ends_us[0], axis=1))


def step_floor(timeline: CollectiveTimeline, step_starts_us: list[float], ends_us: np.ndarray) -> float:
    """The rank's floor: mean over its analysed steps of ``max T[r, k] − recorded step start`` over the collectives
    launched in the step (0 for a step without one), µs. ``step_starts_us``: the analysed steps' recorded starts,
    in the order of ``timeline.analysed_steps``; ``ends_us``: :func:`earliest_ends` of this rank."""
    n = len(timeline.analysed_steps)
    if n == 0 or ends_us.size == 0:
        return 0.0
    pos = {s: i for i, s in enumerate(timeline.analysed_steps)}
    latest = np.full(n, -np.inf)
    for w, t_end in zip(timeline.window, ends_us.tolist()):
        i = pos.get(timeline.window_steps[w]) if 0 <= w < len(timeline.window_steps) else None
        if i is not None:
            latest[i] = max(latest[i], t_end)
    per = np.where(np.isfinite(latest), latest - np.asarray(step_starts_us, dtype=np.float64), 0.0)
    return float(np.maximum(per, 0.0).mean())


def cap_outcome(outcome: Any, floor_us: float | None, step_us: float) -> Any:
    """``outcome`` (:class:`perfdoctor.checks.context.Outcome`) with a replayed saving capped at ``step_us −
    floor_us`` (``step_us``: the rank's recorded mean analysed step, µs).

    Only savings from the replay are capped (their method says so); the method then states the cap. A larger batch
    (PD201) is left alone: it changes every rank's collectives and is rescaled per sample ("per step of today's
    batch"), so the peers' recorded arrivals do not bound it.
    """
    hit = getattr(outcome, "hit", None)
    est = getattr(hit, "estimate", None)
    if (
        hit is None
        or floor_us is None
        or floor_us <= 0
        or est is None
        or not est.method.startswith("replay of")
        or _PER_SAMPLE in est.method
    ):
        return outcome
    most = max(step_us - floor_us, 0.0)
    if est.saving_us <= most:
        return outcome
    method = (
        f"{est.method}; capped at {most / 1000:,.2f} ms: fixed on this rank alone, its collectives still "
        "end no earlier than the last peer's recorded arrival plus the transfer (the shortest copy), so its "
        f"mean step stays at least {floor_us / 1000:,.2f} ms"
    )
    hit.estimate = dataclasses.replace(est, saving_us=most, method=method)
    return outcome


def rank_floors(ranks: list[tuple[int, CollectiveTimeline | None, list[Any]]]) -> dict[int, float]:
    """{rank: floor µs} for the GPU ranks whose collectives match; {} when they do not. ``ranks``: (rank, its
    :class:`CollectiveTimeline`, its analysed step rows with ``step`` and ``start_us``) per GPU rank."""
    tl = [(r, t, rows) for r, t, rows in ranks if t is not None and rows]
    ends = earliest_ends([t for _, t, _ in tl])
    out: dict[int, float] = {}
    for r, t, rows in tl:
        e = ends.get(int(t.rank))
        if e is None:
            continue
        by_step = {int(row.step): float(row.start_us) for row in rows}
        starts = [by_step.get(int(n), np.nan) for n in t.analysed_steps]
        if any(np.isnan(starts)):
            continue
        out[int(r)] = step_floor(t, starts, e)
    return out


def job_fix_all(sections: dict[int, Any]) -> tuple[list[str], float, float, int] | None:
    """(codes, recorded, replayed, rank) of the job's "fixing the top N findings" figure: the slowest rank's
    recorded mean step and the slowest rank's replayed step with every rank's fixes applied (µs); None without any
    replayed fix. ``sections``: {rank: its report section's ``replay`` dict}."""
    reps = {r: rep for r, rep in sections.items() if isinstance(rep, dict)}
    fixes = {r: rep["fix_all"] for r, rep in reps.items() if rep.get("fix_all")}
    if not fixes:
        return None
    recorded = max(float(rep.get("recorded_mean_step_us") or 0.0) for rep in reps.values())
    # a rank without a replayed fix keeps its replayed (= recorded) step
    after = {
        r: float(fixes[r]["replayed_mean_step_us"]) if r in fixes else float(rep.get("replayed_mean_step_us") or 0.0)
        for r, rep in reps.items()
    }
    slowest = max(after, key=lambda r: after[r])
    codes = sorted({c for f in fixes.values() for c in f["codes"]})
    return codes, recorded, after[slowest], slowest
