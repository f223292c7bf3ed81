"""Transformations of allocator behaviour: driver allocator calls served from the caching allocator's cache."""

from __future__ import annotations

import numpy as np

from perfdoctor.replay.rank import RankReplay
from perfdoctor.replay.simulate import Intervals, Scenario
from perfdoctor.replay.transforms import WhatIf, merge_cuts
from perfdoctor.trace.tables import TraceTables


def serve_from_cache(rr: RankReplay, tables: TraceTables, rows: np.ndarray) -> WhatIf:
    """The runtime calls ``rows`` (``cudaMalloc``/``cudaFree`` and kin, rows of the runtime table) become cache hits:
    each call's host time goes, and a call the recording shows waiting for the device (a ``cudaFree``
    synchronizes it) no longer waits.

    A cache hit makes no driver call: the caching allocator looks up a free block of the size and returns it
    (a free puts the block back on the free list), and that lookup already ran in the recorded op around the
    call, before the allocator decided to ask the driver; so the hit's cost is the recorded op time outside the
    call, and nothing of the call is kept. Source: PyTorch's caching allocator (``c10/cuda/CUDACachingAllocator.cpp``:
    ``malloc`` calls ``cudaMalloc`` only when no cached block fits, ``cudaFree`` only from
    ``release_cached_blocks``: ``empty_cache()`` or a retry; the uncached allocator frees every tensor with
    ``cudaFree``).
    """
    rt = tables.runtime
    g = rr.graph
    s, e, pid = rt["ts_us"][rows], rt["end_us"][rows], rt["pid"][rows]
    blocked = np.isin(g.blk_row, rows)
    cut: dict[int, Intervals] = {}
    for p in np.unique(pid).tolist():
        m = pid == p
        cut = merge_cuts(cut, {int(p): (s[m], e[m])})
    return WhatIf(
        "serve-from-cache",
        Scenario("serve-from-cache", host_cut=cut, blk_removed=blocked, peers_move=True),
        f"the {rows.size} allocator call(s) of the steady-state steps served from the caching allocator's cache: "
        f"no driver call (the cache lookup is the recorded op time around it), and none of the "
        f"{int(blocked.sum())} that waited for the device (a free synchronizes it) waits",
        "PyTorch's caching allocator (CUDACachingAllocator.cpp); replay of the recorded graph",
    )
