"""Step boundaries for traces recorded without ``ProfilerStep#N`` (``torch.profiler.profile()`` with no schedule,
or user annotations only).

Tried in order; the first that finds a step wins, and :attr:`DerivedSteps.marker` says which:

1. ``Optimizer.step#…`` annotations (torch.optim records one per ``optimizer.step()``): a step runs from the
   end of one optimizer step to the end of the next (where the first step began cannot be told from set-up,
   so that time is left out); a single optimizer step makes one step from its thread's first top-level op.
2. A repeated top-level user annotation (``record_function("train_step")`` ...) on one thread: each occurrence
   is one step's host window. One occurrence counts when its name says it is a step (``step``, ``iter``,
   ``train``, ``batch``). Library ranges (``nccl:``, Dynamo, DataLoader, compiled-graph calls, profiler
   internals) are never step markers.
3. Repeated forward/backward blocks: each backward pass is a run of ``autograd::engine::evaluate_function``
   ops with no top-level op of the main thread (the thread that called ``backward()``) starting between them;
   step *i* runs from the first top-level main-thread op after backward *i−1* to the next step's start (the
   last step to its last top-level main-thread op or its backward's end, whichever is later).

All times µs. ``--step-marker`` (a regex) bypasses this module.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from perfdoctor.trace.tables import TraceTables

OPTIMIZER_STEP = re.compile(r"^Optimizer\.step#")
STEP_LIKE = re.compile(r"step|iter|train|batch", re.IGNORECASE)
LIBRARY_RANGE = re.compile(
    r"^(nccl:|gloo:|mpi:|record_param_comms|c10d|TorchDynamo|Torch-Compiled|## |CompiledFunction|Optimizer\."
    r"|enumerate\(DataLoader\)|DataLoader|autograd::|Lazy|Activity Buffer|PyTorch Profiler|cuda|hip|Memcpy|Memset"
    r"|ProfilerStep)|\(dynamo_timed\)|compile",
    re.IGNORECASE,
)
BACKWARD_OP = re.compile(r"^autograd::engine::evaluate_function")


@dataclass(frozen=True)
class DerivedSteps:
    """Host windows of derived steps (µs arrays of equal length, time-sorted).

    Attributes:
        host_start_us / host_end_us: each step's host window.
        names: one label per step (the marker's name).
        marker: what the steps were derived from, for the report ("Optimizer.step#SGD.step annotations").
        pid / tid: the thread that owns the steps.
    """

    host_start_us: np.ndarray
    host_end_us: np.ndarray
    names: list[str]
    marker: str
    pid: int
    tid: int


def derive_steps(tables: TraceTables) -> DerivedSteps | None:
    """Step windows from the first source in the module docstring that finds any, or None."""
    return _from_optimizer(tables) or _from_user_annotation(tables) or _from_backward_blocks(tables)


def _top_level(ts: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Mask of intervals (sorted by start) not inside an earlier one."""
    if ts.size == 0:
        return np.zeros(0, dtype=bool)
    running = np.maximum.accumulate(end)
    top = np.ones(ts.size, dtype=bool)
    top[1:] = ts[1:] >= running[:-1]
    return top


def _thread_ops(tables: TraceTables, tid: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-level cpu_ops of one thread: (ts_us, end_us), time-sorted."""
    ops = tables.cpu_ops
    m = ops["tid"] == tid
    ts, end = ops["ts_us"][m], ops["end_us"][m]
    top = _top_level(ts, end)
    return ts[top], end[top]


def _from_optimizer(tables: TraceTables) -> DerivedSteps | None:
    for tname in ("annotations", "cpu_ops"):
        tab = tables.tables[tname]
        if len(tab) == 0:
            continue
        m = tables.names_matching(OPTIMIZER_STEP)[tab["name_id"]]
        if not m.any():
            continue
        tids, counts = np.unique(tab["tid"][m], return_counts=True)
        tid = int(tids[np.argmax(counts)])
        sel = m & (tab["tid"] == tid)
        ts, end = tab["ts_us"][sel], tab["end_us"][sel]
        top = _top_level(ts, end)
        ts, end = ts[top], end[top]
        name = str(tables.names[int(tab["name_id"][sel][0])])
        pid = int(tab["pid"][sel][0])
        if end.size >= 2:
            # where the first step began is unknown (set-up, warm-up and the first step look alike): the steps
            # are the windows between consecutive optimizer steps, the time before the first one is left out
            return DerivedSteps(
                end[:-1].astype(np.float64),
                end[1:].astype(np.float64),
                [name] * (end.size - 1),
                f"{name} annotations (a step runs from one optimizer step's end to the next's; "
                "the time before the first is not analysed)",
                pid,
                tid,
            )
        op_ts, _ = _thread_ops(tables, tid)
        first = min(float(op_ts[0]), float(ts[0])) if op_ts.size else float(ts[0])
        return DerivedSteps(
            np.array([first]),
            end.astype(np.float64),
            [name],
            f"{name} annotations (one step: from the thread's first op to the end of the optimizer step)",
            pid,
            tid,
        )
    return None


def _from_user_annotation(tables: TraceTables) -> DerivedSteps | None:
    tab = tables.annotations
    if len(tab) == 0:
        return None
    names = tables.name_array()
    best: tuple[int, int, int] | None = None  # (count, name_id, tid)
    for tid in np.unique(tab["tid"]).tolist():
        m = tab["tid"] == tid
        top = _top_level(tab["ts_us"][m], tab["end_us"][m])
        ids, counts = np.unique(tab["name_id"][m][top], return_counts=True)
        for nid, c in zip(ids.tolist(), counts.tolist()):
            name = str(names[nid])
            if LIBRARY_RANGE.search(name) or (c < 2 and not STEP_LIKE.search(name)):
                continue
            if best is None or c > best[0]:
                best = (c, nid, tid)
    if best is None:
        return None
    _, nid, tid = best
    m = (tab["tid"] == tid) & (tab["name_id"] == nid)
    ts, end = tab["ts_us"][m], tab["end_us"][m]
    top = _top_level(ts, end)
    name = str(names[nid])
    return DerivedSteps(
        ts[top], end[top], [name] * int(top.sum()), f"the user annotation '{name}'", int(tab["pid"][m][0]), int(tid)
    )


def _from_backward_blocks(tables: TraceTables) -> DerivedSteps | None:
    ops = tables.cpu_ops
    if len(ops) == 0:
        return None
    bwd = tables.names_matching(BACKWARD_OP)[ops["name_id"]]
    if not bwd.any():
        return None
    # the main thread: most non-backward ops (it may run some backward nodes itself, e.g. while compiling);
    # the backward passes are read from the autograd engine's other threads
    best = (0, -1)
    for t in np.unique(ops["tid"]).tolist():
        m = ops["tid"] == t
        top = _top_level(ops["ts_us"][m], ops["end_us"][m])
        best = max(best, (int((top & ~bwd[m]).sum()), int(t)))  # top-level ops other than backward nodes
    if best[0] == 0:
        return None
    tid = best[1]
    bwd &= ops["tid"] != tid
    if not bwd.any():
        return None
    m_ts, m_end = _thread_ops(tables, tid)
    b_ts, b_end = ops["ts_us"][bwd], ops["end_us"][bwd]
    order = np.argsort(b_ts, kind="stable")
    b_ts, b_end = b_ts[order], np.maximum.accumulate(b_end[order])
    # a new backward pass begins when a main-thread op started since the previous backward op ended
    between = np.searchsorted(m_ts, b_ts[1:], side="left") - np.searchsorted(m_ts, b_end[:-1], side="left")
    new_block = np.concatenate([[True], between > 0])
    block = np.cumsum(new_block) - 1
    n = int(block[-1]) + 1
    bwd_end = np.full(n, -np.inf)
    np.maximum.at(bwd_end, block, b_end)
    bwd_start = b_ts[new_block]
    starts = np.empty(n)
    for i in range(n):
        lo = bwd_end[i - 1] if i else -np.inf
        cand = m_ts[(m_ts >= lo) & (m_ts < bwd_start[i])]
        starts[i] = float(cand[0]) if cand.size else float(bwd_start[i])
    last_end = max(float(bwd_end[-1]), float(m_end[m_ts >= starts[-1]].max()) if (m_ts >= starts[-1]).any() else 0)
    ends = np.concatenate([starts[1:], [last_end]])
    pid = int(ops["pid"][ops["tid"] == tid][0])
    return DerivedSteps(
        starts,
        ends,
        [f"forward/backward block {i + 1}" for i in range(n)],
        "repeated forward/backward blocks (each ends where the next forward begins)",
        pid,
        tid,
    )
