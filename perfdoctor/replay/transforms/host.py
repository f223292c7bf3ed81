"""Transformations that take host time away: a removed sync, a prefetched DataLoader, a fused optimizer,
CUDA graphs (fewer launches)."""

from __future__ import annotations

import re

import numpy as np

from perfdoctor.replay.graph import QUEUE_CALL
from perfdoctor.replay.rank import RankReplay
from perfdoctor.replay.simulate import Intervals, Scenario
from perfdoctor.replay.transforms import WhatIf, merge_cuts
from perfdoctor.trace.tables import TraceTables

DATALOADER = re.compile(r"^enumerate\(DataLoader\)#.*__next__|DataLoader.*__next__|^DataLoader")
OPTIMIZER_STEP = re.compile(r"^Optimizer\.step#")
# launches a fused (``fused=True``) or foreach optimizer step issues per parameter group and dtype: torch's
# _fused_adam/_foreach_* kernels are launched per tensor-list chunk; 10 per step is a generous allowance
FUSED_OPTIMIZER_LAUNCHES = 10
GRAPH_LAUNCH_US = 10.0  # one cudaGraphLaunch (µs): luatil trace_05 (RTX 3060), median cudaGraphLaunch ≈ 10 µs


def _named(tables: TraceTables, rx: re.Pattern[str], pid: int) -> Intervals:
    from perfdoctor.analysis import intervals as iv

    ok = tables.names_matching(rx)
    parts = []
    for tname in ("annotations", "cpu_ops"):
        tab = tables.tables[tname]
        if len(tab):
            m = ok[tab["name_id"]] & ((tab["pid"] == pid) if pid >= 0 else True)
            parts.append(iv.union(tab["ts_us"][m], tab["end_us"][m]))
    return iv.union_of(*parts) if parts else iv.EMPTY


def _overlaps(s: np.ndarray, e: np.ndarray, by: Intervals) -> np.ndarray:
    """Whether each ``[s, e)`` overlaps the sorted disjoint intervals ``by``."""
    if by[0].size == 0:
        return np.zeros(s.size, dtype=bool)
    k = np.searchsorted(by[0], e, side="left") - 1  # last interval starting before e
    return (k >= 0) & (by[1][np.maximum(k, 0)] > s)


def remove_syncs(rr: RankReplay, calls: Intervals) -> WhatIf:
    """The blocking calls that overlap ``calls`` (sorted, disjoint µs intervals) no longer wait, and their host
    time goes.

    Assumption: the value the host waited for is not needed at once (logged every N steps, or read from a
    non-blocking copy later), so the host runs on. Source: the recorded graph; nothing else changes.
    """
    g = rr.graph
    hit = _overlaps(g.blk_ts_us, g.blk_end_us, calls)
    cut: dict[int, Intervals] = {}
    for pid in np.unique(g.blk_pid[hit]).tolist():
        m = hit & (g.blk_pid == pid)
        cut = merge_cuts(cut, {pid: (g.blk_ts_us[m], g.blk_end_us[m])})
    return WhatIf(
        "remove-sync",
        Scenario("remove-sync", host_cut=cut, blk_removed=hit),
        f"the {int(hit.sum())} synchronizing call(s) no longer block: the host runs on without the value",
        "replay of the recorded graph",
    )


def prefetch_dataloader(rr: RankReplay, tables: TraceTables, residual_us: float = 0.0) -> WhatIf:
    """Every DataLoader ``__next__`` on the step's process takes ``residual_us`` instead of its recorded time.

    Assumption: enough worker processes (``num_workers``) prepare batches ahead, so a fetch is a queue hand-off;
    the workers run on other cores and do not slow the main process. Source: PyTorch DataLoader docs
    (multi-process data loading); residual 0 µs unless given.
    """
    pid = rr.windows.pid
    s, e = _named(tables, DATALOADER, pid)
    s2 = np.minimum(s + residual_us, e)
    cut = {pid: (s2[e > s2], e[e > s2])} if s.size else {}
    return WhatIf(
        "prefetch-dataloader",
        Scenario("prefetch-dataloader", host_cut=cut),
        f"batches prefetched by DataLoader workers: each __next__ takes {residual_us:.0f} µs",
        "PyTorch DataLoader multi-process loading (num_workers > 0)",
    )


def _launch_calls(tables: TraceTables, pid: int) -> tuple[np.ndarray, np.ndarray]:
    rt = tables.runtime
    if len(rt) == 0:
        return np.empty(0), np.empty(0)
    m = tables.names_matching(QUEUE_CALL)[rt["name_id"]] & ((rt["pid"] == pid) if pid >= 0 else True)
    return rt["ts_us"][m], rt["end_us"][m]


def fused_optimizer(rr: RankReplay, tables: TraceTables) -> WhatIf:
    """``Optimizer.step`` host time shrinks to :data:`FUSED_OPTIMIZER_LAUNCHES` launches at this trace's median
    launch-call cost; the optimizer's device kernels keep their recorded time (the same bytes move; a fused kernel
    saves their per-kernel gaps, not counted: a lower bound on the saving).

    Source: torch.optim ``foreach``/``fused`` implementations (one kernel per tensor list chunk); per-launch cost
    measured in this trace.
    """
    pid = rr.windows.pid
    s, e = _named(tables, OPTIMIZER_STEP, pid)
    ls, le = _launch_calls(tables, pid)
    per_launch = float(np.median(le - ls)) if ls.size else 5.0
    keep = FUSED_OPTIMIZER_LAUNCHES * per_launch
    s2 = np.minimum(s + keep, e)
    cut = {pid: (s2[e > s2], e[e > s2])} if s.size else {}
    return WhatIf(
        "fused-optimizer",
        Scenario("fused-optimizer", host_cut=cut),
        f"a foreach/fused optimizer: Optimizer.step host time becomes {FUSED_OPTIMIZER_LAUNCHES} launches "
        f"× {per_launch:.1f} µs (median launch call here); its device kernels keep their time",
        "torch.optim foreach/fused implementations; launch cost measured in this trace",
    )


def cuda_graphs(rr: RankReplay, tables: TraceTables) -> WhatIf:
    """Each step's host time between its first and last kernel launch collapses to one ``cudaGraphLaunch``
    (:data:`GRAPH_LAUNCH_US`), except DataLoader fetches and blocking calls, which a graph cannot capture.

    Assumption: the step's launch sequence is static (capturable); kernels keep their durations and queue back to
    back. Source: CUDA Graphs (torch.cuda.graphs / ``torch.compile(mode="reduce-overhead")``).
    """
    from perfdoctor.analysis import intervals as iv

    pid = rr.windows.pid
    ls, le = _launch_calls(tables, pid)
    w = rr.windows
    spans_s, spans_e = [], []
    for a, b in zip(w.host_start_us.tolist(), w.host_end_us.tolist(), strict=True):
        m = (ls >= a) & (ls < b)
        if m.sum() > 1:
            spans_s.append(float(ls[m].min()) + GRAPH_LAUNCH_US)
            spans_e.append(float(le[m].max()))
    cut = iv.union(np.asarray(spans_s), np.asarray(spans_e))
    keep = iv.union_of(_named(tables, DATALOADER, pid), iv.union(rr.graph.blk_ts_us, rr.graph.blk_end_us))
    cut = iv.subtract(cut, keep)
    return WhatIf(
        "cuda-graphs",
        Scenario("cuda-graphs", host_cut={pid: cut} if cut[0].size else {}),
        f"the step's launches replayed as one CUDA graph ({GRAPH_LAUNCH_US:.0f} µs); DataLoader and "
        "synchronizing calls stay",
        "CUDA Graphs; graph launch cost from luatil trace_05 (RTX 3060)",
    )


PER_ELEMENT_COPIES = 64  # blocking device→host copies per step above which they are read as a per-element loop


def batch_copies(rr: RankReplay, calls: Intervals) -> WhatIf:
    """A loop of blocking device→host copies (``tensor[i].item()`` / ``.cpu()`` per element) becomes one copy of
    the whole tensor: per step with at least :data:`PER_ELEMENT_COPIES` blocking calls inside ``calls``, the host
    time from the first such call's end to the last one's end (the loop: its calls, waits and the Python between
    them) is cut; the first copy and its wait stay.

    Assumption: the loop does nothing but read the elements (the GPUPuzzlers d2h_sync puzzle's fix: one ``.cpu()``
    of the tensor, then the loop on the host copy, whose cost on a CPU tensor is left out). Source: the recorded
    graph.
    """
    from perfdoctor.analysis import intervals as iv

    g = rr.graph
    hit = _overlaps(g.blk_ts_us, g.blk_end_us, calls)
    w = rr.windows
    pid = w.pid
    spans_s, spans_e = [], []
    for a, b in zip(w.host_start_us.tolist(), w.host_end_us.tolist(), strict=True):
        m = hit & (g.blk_ts_us >= a) & (g.blk_ts_us < b) & ((g.blk_pid == pid) if pid >= 0 else True)
        if int(m.sum()) >= PER_ELEMENT_COPIES:
            spans_s.append(float(g.blk_end_us[m].min()))
            spans_e.append(float(g.blk_end_us[m].max()))
    cut = iv.union(np.asarray(spans_s), np.asarray(spans_e))
    in_cut = _overlaps(g.blk_ts_us, g.blk_end_us, cut) if cut[0].size else np.zeros(g.n_blk, bool)
    target = pid if pid >= 0 else (int(g.blk_pid[hit][0]) if hit.any() else -1)
    return WhatIf(
        "batch-copies",
        Scenario("batch-copies", host_cut={target: cut} if cut[0].size else {}, blk_removed=in_cut),
        f"per-element device→host copies in {len(spans_s)} step(s) done as one copy of the tensor: the "
        "loop's host time goes",
        "replay of the recorded graph (GPUPuzzlers d2h_sync puzzle's fix)",
    )
