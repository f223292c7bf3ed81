"""Transformations of sharded data parallelism (FSDP): each unit's all-gather prefetched one unit ahead."""

from __future__ import annotations

import numpy as np

from perfdoctor.analysis.parallel.sharding import Collective, ShardedComm
from perfdoctor.replay.rank import RankReplay
from perfdoctor.replay.simulate import Scenario
from perfdoctor.replay.transforms import WhatIf
from perfdoctor.trace import intervals as iv
from perfdoctor.trace.tables import TraceTables

_SOURCE = "FSDP forward/backward prefetch (torch.distributed.fsdp: forward_prefetch, BackwardPrefetch.BACKWARD_PRE)"


Pairs = list[tuple[Collective, Collective]]


def _kernel_activities(rr: RankReplay, tables: TraceTables) -> np.ndarray:
    """Graph activity index of each kernel row of ``tables`` (-1: not in the graph)."""
    g = rr.graph
    act_of_row = np.full(len(tables.kernels), -1, dtype=np.int64)
    k = np.flatnonzero(g.act_table == 0)
    act_of_row[g.act_row[k]] = k
    return act_of_row


def _on_device(rr: RankReplay, tables: TraceTables, comm: ShardedComm, late: Pairs) -> tuple[Scenario, str]:
    """The prefetch on a device, and what it moved: each late all-gather's kernels launched at the host time of the
    previous all-gather's first kernel, their waits for non-communication kernels dropped."""
    g = rr.graph
    act_of_row = _kernel_activities(rr, tables)
    launch = np.full(g.n_act, np.nan)
    moved = np.zeros(g.n_act, dtype=bool)
    for p, c in late:
        src = act_of_row[list(p.kernels)] if p.kernels else np.empty(0, dtype=np.int64)
        dst = act_of_row[list(c.kernels)] if c.kernels else np.empty(0, dtype=np.int64)
        src, dst = src[src >= 0], dst[dst >= 0]
        if src.size and dst.size:
            launch[dst] = float(g.act_launch_ts_us[src].min())
            moved[dst] = True
    comm_act = np.zeros(g.n_act, dtype=bool)
    rows = np.array([r for c in comm.collectives for r in c.kernels], dtype=np.int64)
    comm_act[act_of_row[rows][act_of_row[rows] >= 0]] = True
    dep_drop = moved & (g.act_dep >= 0) & ~comm_act[np.maximum(g.act_dep, 0)]
    xdrop = moved[g.xdep_dst] & ~comm_act[g.xdep_src]
    n = int(moved.sum())
    sc = Scenario(
        "prefetch-all-gathers",
        act_dep_removed=dep_drop,
        xdep_removed=xdrop,
        act_launch_ts_us=launch if n else None,
        peers_move=True,
    )
    return sc, f"{n} all-gather kernel(s) of {len(late)} unit all-gather(s) launched with the previous unit's"


def _on_host(rr: RankReplay, comm: ShardedComm, late: Pairs) -> tuple[Scenario, str]:
    """The prefetch on a CPU-only trace, and what it moved: each late all-gather's call ends ``min(exposed,
    compute)`` µs earlier, the compute being the host time between the previous all-gather's return and this one's
    issue less the collective calls in it (cut from the training thread's timeline)."""
    calls = [(c.issue_us, c.call_end_us) for c in comm.collectives]
    starts = np.array([s for s, _ in calls]) if calls else np.empty(0)
    ends = np.array([e for _, e in calls]) if calls else np.empty(0)
    blocked = iv.union(starts, ends)
    cs, ce = [], []
    for p, c in late:
        between = iv.total(iv.clip(blocked, p.call_end_us, c.issue_us))
        compute = max(c.issue_us - p.call_end_us - between, 0.0)
        cut = min(c.exposed_us, compute)
        if cut > 0:
            cs.append(c.call_end_us - cut)
            ce.append(c.call_end_us)
    cut_iv = iv.union(np.array(cs), np.array(ce)) if cs else iv.EMPTY
    sc = Scenario("prefetch-all-gathers", host_cut={rr.windows.pid: cut_iv} if cs else {}, peers_move=True)
    return (
        sc,
        f"{len(cs)} of {len(late)} unit all-gather(s) wait only for the part longer than the previous unit's compute",
    )


def prefetch_all_gathers(rr: RankReplay, tables: TraceTables, comm: ShardedComm) -> WhatIf:
    """Each FSDP unit's all-gather that was issued only when its unit started (not prefetched) is issued instead when
    the previous unit's all-gather of the same pass ends, so it runs while the previous unit computes.

    On a device: its communication kernels are launched at the host time of the previous all-gather's first kernel
    (they queue behind it on the communication stream and so start when it ends), and their waits for compute
    kernels (cross-stream dependencies on non-communication kernels) are dropped; the compute that needs the
    gathered parameters still waits for them. On a CPU-only trace (gloo, the training thread inside the call until
    the collective ends): the thread waits only for the part of the all-gather longer than the previous unit's
    compute, the host time from the previous all-gather's return to this one's issue less the collective calls in
    it (cut from the training thread's timeline: ``min(call, compute)`` per all-gather).

    Assumption: the all-gather runs asynchronously (its own stream, or the collective's thread) and the memory of
    one more unit's gathered parameters is available; every rank prefetches alike, so the wait for peers inside the
    call moves with them. Source: FSDP's forward and backward prefetch (``forward_prefetch=True``,
    ``BackwardPrefetch.BACKWARD_PRE``; ``fully_shard``'s ``set_modules_to_forward_prefetch``).
    """
    late = comm.late_gathers()
    sc, what = _on_device(rr, tables, comm, late) if comm.on_device else _on_host(rr, comm, late)
    return WhatIf(
        "prefetch-all-gathers",
        sc,
        f"each unit's all-gather issued when the previous unit's ends (one unit ahead): {what}; the all-gather runs "
        "asynchronously, memory holds one more gathered unit, every rank prefetches alike",
        _SOURCE,
    )
