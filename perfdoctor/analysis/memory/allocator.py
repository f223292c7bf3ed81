"""Allocator calls in the steady-state steps and why the caching allocator made them.

PyTorch's caching allocator (``c10/cuda/CUDACachingAllocator.cpp``; hipified on ROCm) calls the driver only on a
cache miss: ``cudaMalloc`` when no cached block fits, ``cudaFree`` when it gives cached blocks back. After the
first steps have filled the cache, a driver call in a step has one of four causes, told apart by where the frees
fall (the host thread's order of allocator calls and the innermost ``cpu_op`` around each):

- ``no_caching``: a free at the end of an op's allocator calls, not followed by a malloc in the same op: a tensor
  freed straight to the driver, which only the uncached allocator does (``PYTORCH_NO_CUDA_MEMORY_CACHING=1``,
  ``PYTORCH_NO_HIP_MEMORY_CACHING=1`` on ROCm: every tensor is its own ``cudaMalloc`` and ``cudaFree``);
- ``retry``: a run of frees inside one op followed by a malloc in that op: an allocation that did not fit
  released cached blocks (``release_cached_blocks``) and asked the driver again;
- ``empty_cache``: frees outside every op (``torch.cuda.empty_cache()`` is called from Python, not an op);
- ``shape_change``: mallocs with no free in the steady steps: the cache grows with sizes it has not held before
  (variable shapes).

The cause named is the one holding most of the steady-state frees (ties in the order above); ``shape_change``
when there are none.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from perfdoctor.analysis.memory.memory_steps import innermost_ops
from perfdoctor.analysis.steps.steps import Steps
from perfdoctor.trace.tables import TraceTables

ALLOC = re.compile(r"^(cuda|hip)(Malloc|Free|MallocAsync|FreeAsync|MallocManaged)$|^cuMem(Alloc|Free|Create|Release)")
FREE = re.compile(r"Free|Release")
CAUSES = ("no_caching", "retry", "empty_cache", "shape_change")


@dataclass(frozen=True)
class AllocatorCalls:
    """The allocator calls of the steady-state steps (steps ``first`` on) and their causes.

    Attributes:
        rows: runtime-table rows of the calls, in time order.
        step: index of the analysed step each call is in (all ``>= first``).
        is_free: whether each call gives memory back (``cudaFree`` and kin).
        free_cause: per call, the cause its free shows (one of :data:`CAUSES` but ``shape_change``; "" for a
            malloc).
        cause: the cause of the steady-state calls (module docstring).
        n_calls_first: calls in the analysed steps before ``first`` (what filling the cache cost).
    """

    rows: np.ndarray
    step: np.ndarray
    is_free: np.ndarray
    free_cause: np.ndarray
    cause: str
    n_calls_first: int

    def count(self, cause: str) -> int:
        """Frees showing ``cause``; for ``shape_change``, the mallocs."""
        if cause == "shape_change":
            return int((~self.is_free).sum())
        return int((self.free_cause == cause).sum())


def _thread_keys(pid: np.ndarray, tid: np.ndarray) -> np.ndarray:
    return pid.astype(np.int64) * (1 << 32) + (tid.astype(np.int64) & 0xFFFFFFFF)


def _free_causes(tables: TraceTables, rows: np.ndarray, is_free: np.ndarray) -> np.ndarray:
    """Per call in ``rows`` (time order): the cause its free shows ("" for a malloc)."""
    rt, ops = tables.runtime, tables.cpu_ops
    thread = _thread_keys(rt["pid"][rows], rt["tid"][rows])
    if len(ops):
        op = innermost_ops(ops["ts_us"], ops["end_us"], _thread_keys(ops["pid"], ops["tid"]), rt["ts_us"][rows], thread)
    else:
        op = np.full(rows.size, -1, dtype=np.int64)
    out = np.full(rows.size, "", dtype=object)
    for key in np.unique(thread).tolist():
        idx = np.flatnonzero(thread == key)  # this thread's calls, in time order
        # the call after each run of frees in one op: a malloc in the same op makes the run a retry
        nxt_malloc_same_op = np.zeros(idx.size, dtype=bool)
        follow, nxt_op = False, -1
        for j in range(idx.size - 1, -1, -1):
            i = idx[j]
            if not is_free[i]:
                follow = True
                nxt_op = op[i]
            else:
                nxt_malloc_same_op[j] = follow and op[i] >= 0 and op[i] == nxt_op
                follow = nxt_malloc_same_op[j]
        for j, i in enumerate(idx.tolist()):
            if not is_free[i]:
                continue
            out[i] = "empty_cache" if op[i] < 0 else ("retry" if nxt_malloc_same_op[j] else "no_caching")
    return out


def allocator_calls(tables: TraceTables, steps: Steps, first: int) -> AllocatorCalls:
    """The allocator calls in the analysed steps ``first`` on and their cause (module docstring).

    ``first``: the steps that fill the cache (PD501's ``skip_first_steps``). Calls outside every step window are
    left out.
    """
    rt = tables.runtime
    if len(rt) == 0:
        e = np.empty(0, dtype=np.int64)
        return AllocatorCalls(e, e, np.empty(0, bool), np.empty(0, object), "shape_change", 0)
    m = np.flatnonzero(tables.names_matching(ALLOC)[rt["name_id"]])
    m = m[np.argsort(rt["ts_us"][m], kind="stable")]
    step = steps.step_of(rt["ts_us"][m]) if m.size else np.empty(0, dtype=np.int64)
    n_first = int(((step >= 0) & (step < first)).sum())
    rows, step = m[step >= first], step[step >= first]
    is_free = tables.names_matching(FREE)[rt["name_id"][rows]] if rows.size else np.empty(0, bool)
    causes = _free_causes(tables, rows, is_free)
    counts = [int((causes == c).sum()) for c in CAUSES[:3]]
    cause = CAUSES[int(np.argmax(counts))] if max(counts, default=0) > 0 else "shape_change"
    return AllocatorCalls(rows, step, np.asarray(is_free, dtype=bool), causes, cause, n_first)
