"""The ranks' collective kernels matched, their clocks aligned, and the time each rank waits inside them.

A collective kernel (NCCL/RCCL) starts on a rank when that rank launches it
and finishes only after every participant has arrived and the data has moved,
so on the ranks that arrive early it runs longer. Matching the k-th
collective kernel of every rank (launch order inside the analysed steps; the
same program issues the same collectives in the same order), the shortest of
the N copies is the transfer itself and each rank's excess over it is wait:

    wait[r, k] = dur[r, k] − min over ranks of dur[·, k]        (µs)

Only durations are compared, so clock offsets between hosts do not matter.
The rank whose copy is the shortest arrived last; when several ranks share the
shortest duration (identical copies, e.g. every rank arrived together) the
collective has no last arrival: none of them is singled out. Nothing is matched (the
result is None with the reason) when the traces are not the whole job
(``distributedInfo.world_size`` larger than the ranks given: the shortest of
a few copies is not the transfer), when the ranks ran different numbers of
collective kernels in their analysed steps, or when the k-th copies do not end
together (after one clock offset per rank, the median over all pairs): copies
of one collective end within ``END_TOLERANCE_US`` (or 5% of the shortest) of
each other, so pairs that don't are different collectives.

The matching reads only each rank's :class:`CollectiveTimeline` (a few numbers
per collective kernel), so it runs on rank summaries without the raw events.
"""

from __future__ import annotations

from dataclasses import dataclass

import msgspec
import numpy as np

from perfdoctor.analysis.rank import RankAnalysis
from perfdoctor.analysis.steps.steps import gpu_launch_times
from perfdoctor.analysis.timing.classify import classify_kernel
from perfdoctor.trace import intervals as iv
from perfdoctor.trace.json_value import member, number
from perfdoctor.trace.tables import Table

END_TOLERANCE_US = 100.0
# bytes per element of the dtypes NCCL's record_param_comms names (PyTorch's ScalarType names)
_DTYPE_BYTES = {
    "Float": 4,
    "Half": 2,
    "BFloat16": 2,
    "Double": 8,
    "Int": 4,
    "Long": 8,
    "Byte": 1,
    "Char": 1,
    "Bool": 1,
    "Short": 2,
    "Float8_e4m3fn": 1,
    "Float8_e5m2": 1,
}


class CollectiveTimeline(msgspec.Struct, frozen=True):
    """One rank's collective kernels on its primary device inside its analysed step windows, in launch order.

    Shapes: every list has one entry per collective kernel (n,). ``kind``: the kernel's ``Collective name`` when
    the trace records it (``all_to_allv``), else from the kernel name (all_reduce, …; "other" when it does not
    say); ``bytes``: message size (``In msg nelems`` × dtype size, -1 unknown);
    ``launch_us`` (the rank's arrival: the host launch), ``start_us``, ``end_us``, ``dur_us``: µs on the rank's
    own clock; ``window``: index of the step window the launch falls in. ``window_steps``: the step number of
    each window; ``analysed_steps``: the steps of the rank's breakdown (incomplete windows are left out there),
    whose order the per-step wait follows; ``world_size``: ``distributedInfo.world_size`` (0 unknown).
    """

    rank: int
    world_size: int
    window_steps: list[int]
    analysed_steps: list[int]
    kind: list[str]
    bytes: list[int]
    launch_us: list[float]
    start_us: list[float]
    end_us: list[float]
    dur_us: list[float]
    window: list[int]


@dataclass
class CollectiveWait:
    """Per rank (dict keys: trace rank): ``wait_us`` per analysed step (shape (n_steps,), µs);
    ``last_arrivals``: how many of the matched collectives this rank arrived last to (alone: a collective
    whose shortest duration several ranks share counts for none of them); ``n_collectives``:
    matched collective kernels per rank (all steps); ``tied_collectives``: how many of them have no single
    last arrival; ``kinds``: the kind of each matched collective (n,);
    ``wait_by_collective_us``: each rank's wait in each matched collective (shape (n,), µs);
    ``n_counted``: the collectives ``last_arrivals`` and ``tied_collectives`` count, those outside cold-start
    steps (PD902; all ``n_collectives`` when no step is cold)."""

    wait_us: dict[int, np.ndarray]
    last_arrivals: dict[int, int]
    n_collectives: int
    kinds: list[str] | None = None
    wait_by_collective_us: dict[int, np.ndarray] | None = None
    tied_collectives: int = 0
    n_counted: int | None = None


def timeline(rank: RankAnalysis) -> CollectiveTimeline:
    """The :class:`CollectiveTimeline` of ``rank``."""
    tab = rank.tables.kernels
    world = int(number(member(rank.tables.metadata.get("distributedInfo"), "world_size")) or 0)
    windows = [int(n) for n in rank.steps.numbers]
    analysed = [int(s.step) for s in rank.primary.steps]
    if len(tab) == 0 or rank.primary.kind != "gpu":
        return CollectiveTimeline(int(rank.rank or 0), world, windows, analysed, [], [], [], [], [], [], [])
    names = rank.tables.names
    ids = np.unique(tab["name_id"])
    classes = {i: classify_kernel(names[i]) for i in ids.tolist()}
    comm_ids = [i for i, c in classes.items() if c.category == "communication"]
    m = (tab["device"] == rank.primary.device) & np.isin(tab["name_id"], comm_ids)
    launch = gpu_launch_times(rank.tables, "kernels")[m]
    ws, we = rank.steps.start_us, rank.steps.end_us
    step = iv.containing(launch, (ws, we))
    inside = step >= 0
    order = np.flatnonzero(inside)[np.argsort(launch[inside], kind="stable")]
    sel = np.flatnonzero(m)[order]
    nelems = tab["in_nelems"][sel] if "in_nelems" in tab else np.full(sel.size, -1)
    dtypes = tab["dtype"][sel] if "dtype" in tab else np.full(sel.size, None, dtype=object)
    nbytes = [
        int(n) * _DTYPE_BYTES[d] if n is not None and n >= 0 and d in _DTYPE_BYTES else -1
        for n, d in zip(nelems.tolist(), dtypes.tolist())
    ]
    return CollectiveTimeline(
        rank=int(rank.rank or 0),
        world_size=world,
        window_steps=windows,
        analysed_steps=analysed,
        kind=[
            str(c) if c else (classes[int(i)].collective or "other")  # the trace's own name when it has one
            for i, c in zip(tab["name_id"][sel].tolist(), _column(tab, "collective", sel))
        ],
        bytes=nbytes,
        launch_us=launch[order].tolist(),
        start_us=tab["ts_us"][sel].tolist(),
        end_us=tab["end_us"][sel].tolist(),
        dur_us=tab["dur_us"][sel].tolist(),
        window=step[order].astype(int).tolist(),
    )


def _column(tab: Table, name: str, sel: np.ndarray) -> list[str | None]:
    """``tab[name][sel]`` as a list, or Nones when the table lacks the column."""
    return tab[name][sel].tolist() if name in tab else [None] * int(sel.size)


def clock_offsets(ends_us: np.ndarray) -> np.ndarray:
    """Clock offset of each rank against the first (µs, shape ``(ranks,)``): the median over matched collectives of
    ``end[r, k] − end[0, k]`` (``ends_us``: shape ``(ranks, collectives)``; the copies of one collective end
    together)."""
    return np.asarray(np.median(ends_us - ends_us[0], axis=1))


def copies_end_together(ends_us: np.ndarray, durs_us: np.ndarray) -> bool:
    """Whether the k-th copies (``ends_us``, ``durs_us``: shape ``(ranks, collectives)``) are the same collectives:
    after one clock offset per rank (the median), at most 10% of them end more than ``END_TOLERANCE_US`` (or 5% of
    the shortest copy) apart."""
    rel = ends_us - ends_us[0]
    rel -= np.median(rel, axis=1, keepdims=True)  # one clock offset per rank
    tol = np.maximum(END_TOLERANCE_US, 0.05 * durs_us.min(axis=0))
    return bool((np.abs(rel) > tol).any(axis=0).mean() <= 0.1)


def compute(
    timelines: list[CollectiveTimeline], n_ranks: int | None = None, cold_steps: set[int] | None = None
) -> tuple[CollectiveWait | None, str]:
    """Match the ranks' collective kernels; returns (result, "") or (None, why not).

    ``timelines``: one per GPU rank of the job (two or more); ``n_ranks``: the ranks given (default: as many as
    timelines), compared with the job's world size; ``cold_steps``: step numbers whose collectives the last
    arrivals do not count (cold starts, :func:`perfdoctor.analysis.steps.warmup.job_cold_steps`: who arrives last
    there is who did the least first-call work). Every collective is still matched and its wait measured.
    """
    if len(timelines) < 2:
        return None, "single rank"
    given = n_ranks if n_ranks is not None else len(timelines)
    world = max((t.world_size for t in timelines), default=0)
    if world > given:
        return None, (
            f"the job has {world} ranks but {given} traces were given: the shortest copy of a "
            "collective among some ranks is not its transfer time"
        )
    per = {t.rank: t for t in timelines}
    counts = {r: len(t.dur_us) for r, t in per.items()}
    if not any(counts.values()):
        return None, "no collective kernels"
    if len(set(counts.values())) > 1:
        return None, (
            "the ranks ran different numbers of collective kernels in their analysed steps "
            f"({', '.join(f'rank {r}: {c}' for r, c in sorted(counts.items()))}), so they cannot be matched"
        )
    order = sorted(per)
    durs = np.array([per[r].dur_us for r in order], dtype=np.float64)  # (ranks, collectives)
    floor = durs.min(axis=0)
    ends = np.array([per[r].end_us for r in order], dtype=np.float64)
    if not copies_end_together(ends, durs):
        return None, (
            "the k-th collective kernels of the ranks do not end together, so they are not the same "
            "collectives (different collectives or streams interleave differently per rank)"
        )
    shortest = durs == floor  # (ranks, collectives): the copies as short as the shortest
    alone = shortest.sum(axis=0) == 1  # argmin would name the first rank (rank 0) of a tie
    step_of = np.array([[per[r].window_steps[w] for w in per[r].window] for r in order], dtype=np.int64)
    counted = ~np.isin(step_of, sorted(cold_steps or ())).any(axis=0)
    last = shortest[:, alone & counted].sum(axis=1)
    waits, by_coll = {}, {}
    for i, r in enumerate(order):
        t = per[r]
        excess = durs[i] - floor
        by_coll[r] = excess
        per_window = np.bincount(np.asarray(t.window, dtype=np.int64), weights=excess, minlength=len(t.window_steps))
        window_of = {n: k for k, n in enumerate(t.window_steps)}
        # the breakdown's analysed steps (incomplete ones are left out there): the same order as primary.steps
        waits[r] = np.array([per_window[window_of[s]] if s in window_of else 0.0 for s in t.analysed_steps])
    return CollectiveWait(
        waits,
        {r: int(last[i]) for i, r in enumerate(order)},
        int(durs.shape[1]),
        kinds=list(per[order[0]].kind),
        wait_by_collective_us=by_coll,
        tied_collectives=int((~alone & counted).sum()),
        n_counted=int(counted.sum()),
    ), ""
