"""Gradient accumulation under ``no_sync()``: only the last micro-batch of each optimizer step all-reduces."""

from __future__ import annotations

import numpy as np

from perfdoctor.analysis.parallel.accumulation import Accumulation
from perfdoctor.replay.rank import RankReplay
from perfdoctor.replay.simulate import Scenario
from perfdoctor.replay.transforms import WhatIf
from perfdoctor.trace import intervals as iv


def skip_early_allreduces(rr: RankReplay, acc: Accumulation) -> WhatIf:
    """Every micro-batch but the last of each optimizer step runs under ``model.no_sync()``.

    On the host (the step's process): the gradient all-reduce calls issued before the last micro-batch's backward
    pass go, and so does DDP's Reducer work between the first and the last micro-batch's backward (gradients copied
    into buckets, buckets copied back into ``.grad``), with the wait of each early pass's ``finalize_backward`` for
    its all-reduces (from the pass's end to its last bucket copy: :meth:`Accumulation.early_tails`, host time
    outside any op): the host time they held is cut. On the device: the
    communication activities those calls launched (their launch inside a removed call) take no time. The last
    micro-batch keeps its all-reduces, so the update's gradients are the same. Every rank applies the fix, so the
    peers' arrivals move too.
    Assumption: under ``no_sync`` DDP's autograd hooks return at once and gradients accumulate in ``.grad``
    (``torch.nn.parallel.DistributedDataParallel.no_sync``); the hooks' own bookkeeping outside named ops stays.
    Source: the recorded calls and Reducer ops of this trace (µs).
    """
    g = rr.graph
    pid = rr.windows.pid
    early_calls = iv.union_of(*(iv.union(u.calls[0][u.early], u.calls[1][u.early]) for u in acc.updates))
    spans = acc.early_spans()
    tails = acc.early_tails()
    cut = iv.union_of(early_calls, iv.intersect(acc.reducer, spans), tails)
    dur = g.act_dur_us.copy()
    launched = np.zeros(g.n_act, dtype=bool)
    if early_calls[0].size and g.n_act:
        k = np.searchsorted(early_calls[0], g.act_launch_ts_us, side="right") - 1
        launched = (k >= 0) & (g.act_launch_ts_us <= early_calls[1][np.maximum(k, 0)]) & (g.act_launch >= 0)
        dur[launched] = 0.0
    n_calls = int(sum(int(u.early.sum()) for u in acc.updates))
    return WhatIf(
        "no-sync-accumulation",
        Scenario(
            "no-sync-accumulation",
            act_dur_us=dur if launched.any() else None,
            host_cut={pid: cut} if cut[0].size else {},
            peers_move=True,
        ),
        f"{n_calls} all-reduce call(s) before the last micro-batch of {len(acc.updates)} optimizer step(s) removed "
        f"({iv.total(early_calls) / 1e3:.1f} ms of host calls, {int(launched.sum())} device activities), with the "
        f"Reducer's copies around them and the waits for them after each early backward pass "
        f"({iv.total(iv.union_of(iv.intersect(acc.reducer, spans), tails)) / 1e3:.1f} ms)",
        "DDP no_sync(): the Reducer skips the all-reduce of every micro-batch but the last; recorded call times",
    )
