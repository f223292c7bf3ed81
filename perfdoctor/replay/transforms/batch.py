"""A larger batch: fixed per-step costs amortised over more samples, per-sample costs scaling with the batch."""

from __future__ import annotations

import numpy as np

from perfdoctor.replay.rank import RankReplay
from perfdoctor.replay.simulate import Intervals, Scenario
from perfdoctor.replay.transforms import WhatIf
from perfdoctor.replay.transforms.host import DATALOADER, OPTIMIZER_STEP, _named
from perfdoctor.trace.tables import TraceTables


def larger_batch(rr: RankReplay, tables: TraceTables, growth: float) -> WhatIf:
    """A ``growth``× larger batch, expressed per step of today's batch (the replayed step ÷ ``growth``).

    Max-plus schedules scale linearly, so the larger step ÷ growth is the replay in which per-sample costs keep
    their time and fixed per-step costs shrink by 1/growth: the host's time outside DataLoader fetches (Python,
    op dispatch and launches: one per op whatever the batch) and the optimizer's kernels (their work follows the
    parameter count) shrink; the DataLoader fetch (``__getitem__`` per sample) and every other kernel (its work
    follows the batch; a latency-bound small kernel would grow less, so this is conservative) keep theirs.
    Source: the recorded graph; the split into fixed and per-sample costs stated above.
    """
    from perfdoctor.analysis import intervals as iv
    from perfdoctor.replay.transforms.kernels import _kernel_classes

    g = rr.graph
    keep = 1.0 / max(growth, 1.0)
    pid = rr.windows.pid
    rt = tables.runtime
    m = (rt["pid"] == pid) if (len(rt) and pid >= 0) else np.ones(len(rt), dtype=bool)
    fetch = _named(tables, DATALOADER, pid)
    pts = np.sort(
        np.concatenate(
            [rt["ts_us"][m], rt["end_us"][m], rr.windows.host_start_us, rr.windows.host_end_us, fetch[0], fetch[1]]
        )
    )
    # cut (1 - 1/growth) of every host stretch between two consecutive runtime-call boundaries, outside fetches
    s, e = pts[:-1], pts[1:]
    ok = e > s
    cut: Intervals = iv.union(s[ok] + (e[ok] - s[ok]) * keep, e[ok])
    cut = iv.subtract(cut, fetch)
    inside = iv.union(rr.windows.host_start_us, rr.windows.host_end_us)
    cut = iv.intersect(cut, inside)
    cat, _, _ = _kernel_classes(tables, rr)
    opt = _named(tables, OPTIMIZER_STEP, pid)
    lt = g.act_launch_ts_us
    j = np.searchsorted(opt[0], lt, side="right") - 1 if opt[0].size else np.full(g.n_act, -1)
    in_opt = (j >= 0) & (lt < opt[1][np.maximum(j, 0)]) if opt[0].size else np.zeros(g.n_act, bool)
    dur = np.where(in_opt | (cat == "optimizer"), g.act_dur_us * keep, g.act_dur_us)
    return WhatIf(
        "larger-batch",
        Scenario("larger-batch", act_dur_us=dur, host_cut={pid: cut}, peers_move=True),
        f"a {growth:.1f}× larger batch, per step of today's batch: host time outside DataLoader and the "
        "optimizer's kernels are per-step costs (÷ growth); fetches and other kernels are per-sample",
        "replay of the recorded graph (max-plus schedules scale linearly)",
    )
