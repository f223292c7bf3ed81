"""Time each rank waits inside collectives for the other ranks to arrive.

A collective kernel (NCCL/RCCL) starts on a rank when that rank launches it
and finishes only after every participant has arrived and the data has moved,
so on the ranks that arrive early it runs longer. Matching the k-th
collective kernel of every rank (launch order inside the analysed steps; the
same program issues the same collectives in the same order), the shortest of
the N copies is the transfer itself and each rank's excess over it is wait:

    wait[r, k] = dur[r, k] − min over ranks of dur[·, k]        (µs)

Only durations are compared, so clock offsets between hosts do not matter.
The rank whose copy is the shortest arrived last. Nothing is matched (the
result is None with the reason) when the traces are not the whole job
(``distributedInfo.world_size`` larger than the ranks given: the shortest of a
few copies is not the transfer), when the ranks ran different numbers of
collective kernels in their analysed steps, or when the k-th copies do not end
together (after one clock offset per rank, the median over all pairs): copies
of one collective end within ``END_TOLERANCE_US`` (or 5% of the shortest) of
each other, so pairs that don't are different collectives.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from perfdoctor.analysis.classify import classify_kernel
from perfdoctor.analysis.steps import gpu_launch_times

END_TOLERANCE_US = 100.0


@dataclass
class CollectiveWait:
    """Per rank (dict keys: trace rank): ``wait_us`` per analysed step (shape (n_steps,), µs);
    ``last_arrivals``: how many of the matched collectives this rank arrived last to; ``n_collectives``:
    matched collective kernels per rank (all steps)."""

    wait_us: dict[int, np.ndarray]
    last_arrivals: dict[int, int]
    n_collectives: int


def _collectives(rank) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(duration µs, step index, end µs) of the rank's collective kernels on its primary device, in launch
    order, inside its analysed step windows."""
    tab = rank.tables.kernels
    if len(tab) == 0:
        return np.empty(0), np.empty(0, dtype=np.int64), np.empty(0)
    names = rank.tables.names
    ids = np.unique(tab["name_id"])
    comm_ids = [i for i in ids.tolist() if classify_kernel(names[i]).category == "communication"]
    m = (tab["device"] == rank.primary.device) & np.isin(tab["name_id"], comm_ids)
    launch = gpu_launch_times(rank.tables, "kernels")[m]
    ws, we = rank.steps.start_us, rank.steps.end_us
    step = np.searchsorted(ws, launch, side="right") - 1
    inside = (step >= 0) & (launch < we[np.maximum(step, 0)])
    order = np.argsort(launch[inside], kind="stable")
    return tab["dur_us"][m][inside][order], step[inside][order], tab["end_us"][m][inside][order]


def compute(ranks: list) -> tuple[CollectiveWait | None, str]:
    """Match the ranks' collective kernels; returns (result, "") or (None, why not).

    ``ranks``: :class:`perfdoctor.pipeline.RankAnalysis` objects of one job (two or more, GPU traces).
    """
    if len(ranks) < 2:
        return None, "single rank"
    world = max((int((r.tables.metadata.get("distributedInfo") or {}).get("world_size") or 0) for r in ranks),
                default=0)
    if world > len(ranks):
        return None, (f"the job has {world} ranks but {len(ranks)} traces were given: the shortest copy of a "
                      "collective among some ranks is not its transfer time")
    per = {r.rank: _collectives(r) for r in ranks}
    counts = {r: d.size for r, (d, _, _) in per.items()}
    if not any(counts.values()):
        return None, "no collective kernels"
    if len(set(counts.values())) > 1:
        return None, ("the ranks ran different numbers of collective kernels in their analysed steps "
                      f"({', '.join(f'rank {r}: {c}' for r, c in sorted(counts.items()))}), so they cannot be matched")
    order = sorted(per)
    durs = np.vstack([per[r][0] for r in order])  # (ranks, collectives)
    floor = durs.min(axis=0)
    ends = np.vstack([per[r][2] for r in order])
    rel = ends - ends[0]
    rel -= np.median(rel, axis=1, keepdims=True)  # one clock offset per rank
    tol = np.maximum(END_TOLERANCE_US, 0.05 * floor)
    if (np.abs(rel) > tol).any(axis=0).mean() > 0.1:
        return None, ("the k-th collective kernels of the ranks do not end together, so they are not the same "
                      "collectives (different collectives or streams interleave differently per rank)")
    last = np.bincount(durs.argmin(axis=0), minlength=len(order))
    waits = {}
    by_rank = {x.rank: x for x in ranks}
    for i, r in enumerate(order):
        rank = by_rank[r]
        per_window = np.bincount(per[r][1], weights=durs[i] - floor, minlength=len(rank.steps.numbers))
        window_of = {int(n): k for k, n in enumerate(rank.steps.numbers)}
        # the breakdown's analysed steps (incomplete ones are left out there): the same order as primary.steps
        waits[r] = np.array([per_window[window_of[s.step]] if s.step in window_of else 0.0
                             for s in rank.primary.steps])
    return CollectiveWait(waits, {r: int(last[i]) for i, r in enumerate(order)}, int(durs.shape[1])), ""
