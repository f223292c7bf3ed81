"""First-call (cold-start) work in a trace: what a steady-state step does not pay again.

A trace of the first iterations is dominated by one-off costs that no fix of the training loop removes:
``torch.compile`` (Dynamo/Inductor ``(dynamo_timed)`` ranges, autotuning), cuDNN/MIOpen algorithm search and
other first calls of an op (the first ``aten::convolution`` runs 10-600 ms, later ones under 1 ms), lazy
initialisation (module loading, device queries) and the caching allocator's growth (``cudaMalloc`` in the first
step). Judging launch overhead or synchronization on such a step describes the warm-up, not the loop.

Kinds (:data:`KINDS`), each a set of host intervals (µs):

- ``compile``: annotations or ops named like Dynamo/Inductor/AOTAutograd compilation or autotuning.
- ``first_call``: the first call of an op name whose later calls are all at least :data:`FIRST_CALL_RATIO`
  times shorter, and :data:`FIRST_CALL_MIN_US` longer than the longest later one (needs ≥ 2 calls).
- ``lazy_init``: CUDA/HIP module loading and device/context initialisation calls, and a kernel's *first launch*
  that took at least :data:`FIRST_CALL_MIN_US` while the device's queue was short (fewer than
  :data:`FULL_QUEUE_PENDING` activities launched and not yet started): with lazy loading
  (``CUDA_MODULE_LOADING=LAZY``, the default since CUDA 12.2) the first launch of a kernel loads its module inside
  the launch call. Measured on the ykcai MoE traces: the AccumulateGrad ``add_`` kernel's first launch takes
  10.7-13.1 ms in the process's first step and 19-34 µs in a later one. A launch into a full queue (1,024
  entries on CUDA) also blocks, but with the queue full, so it is not counted.
- ``allocator_growth``: ``cudaMalloc``/``hipMalloc`` calls in the first analysed window.

The union of all kinds is the warm-up time of a window; a window is *cold* when it holds at least
:data:`COLD_SHARE` of its duration in warm-up.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from perfdoctor.trace import intervals as iv
from perfdoctor.trace.join import launch_rows
from perfdoctor.trace.tables import TraceTables

KINDS = ("compile", "first_call", "lazy_init", "allocator_growth")
COMPILE = re.compile(
    r"\(dynamo_timed\)|compile_fx|OutputGraph|_compile\.|inductor|async_compile|autotun"
    r"|select_algorithm|bytecode_tracing|build_guards|aot_dispatch|create_aot|CachingAutotuner"
    r"|benchmark_(kernel|fused)",
    re.IGNORECASE,
)
LAZY_INIT = re.compile(
    r"^(cuInit|cuModuleLoad\w*|cuLibraryLoad\w*|cuModuleGetFunction|cuLibraryGetKernel"
    r"|cuDevicePrimaryCtxRetain|cuCtxCreate\w*|cudaGetDeviceCount|hipInit|hipModuleLoad\w*"
    r"|cudaGetSymbolAddress|hipGetSymbolAddress)$"
)
ALLOC = re.compile(r"^(cuda|hip)Malloc$|^cuMemAlloc")
LAUNCH = re.compile(r"Launch", re.IGNORECASE)
FULL_QUEUE_PENDING = 256  # a launch blocked by a full queue has ~1,024 activities pending; a short queue is < 256
FIRST_CALL_RATIO = 3.0
FIRST_CALL_MIN_US = 1000.0
COLD_SHARE = 0.25


@dataclass
class Warmup:
    """Warm-up time of analysed windows (µs).

    Attributes:
        per_window_us: union of all kinds inside each window, shape (n_windows,).
        by_kind_us: each kind's union over all windows (kinds overlap: they do not add up to the total).
        first_call_ops: op names whose first call was an outlier, longest excess first (at most 5).
        cold: per window, warm-up ≥ :data:`COLD_SHARE` of its duration.
    """

    per_window_us: np.ndarray
    by_kind_us: dict[str, float] = field(default_factory=dict)
    first_call_ops: list[str] = field(default_factory=list)
    cold: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))


def warmup(tables: TraceTables, start_us: np.ndarray, end_us: np.ndarray) -> Warmup:
    """Warm-up time of each window ``[start_us[i], end_us[i])`` (see the module docstring)."""
    first_ops, first_iv = _first_calls(tables)
    sets = {
        "compile": _named(tables, COMPILE, ("annotations", "cpu_ops")),
        "first_call": first_iv,
        "lazy_init": iv.union_of(_named(tables, LAZY_INIT, ("runtime",)), _first_launches(tables)),
        "allocator_growth": iv.intersect(
            _named(tables, ALLOC, ("runtime",)), (start_us[:1], end_us[:1]) if start_us.size else iv.EMPTY
        ),
    }
    everything = iv.union_of(*sets.values())
    per_window = iv.per_window(everything, start_us, end_us) if start_us.size else np.zeros(0)
    span = (np.asarray([start_us.min()]), np.asarray([end_us.max()])) if start_us.size else iv.EMPTY
    by_kind = {k: iv.total(iv.intersect(v, span)) for k, v in sets.items()}
    cold = per_window >= COLD_SHARE * np.maximum(end_us - start_us, 1e-9)
    return Warmup(per_window, by_kind, first_ops, cold)


def _named(tables: TraceTables, rx: re.Pattern[str], where: tuple[str, ...]) -> iv.Intervals:
    parts = []
    for tname in where:
        tab = tables.tables[tname]
        if len(tab):
            m = tables.names_matching(rx)[tab["name_id"]]
            parts.append(iv.union(tab["ts_us"][m], tab["end_us"][m]))
    return iv.union_of(*parts)


def _first_calls(tables: TraceTables) -> tuple[list[str], iv.Intervals]:
    """Op names whose first call is an outlier against all later calls, and those first calls' intervals."""
    ops = tables.cpu_ops
    if len(ops) < 2:
        return [], iv.EMPTY
    ids, dur, ts = ops["name_id"], ops["dur_us"], ops["ts_us"]
    order = np.lexsort((ts, ids))  # by name, then time
    ids_s, dur_s = ids[order], dur[order]
    first = np.ones(ids_s.size, dtype=bool)
    first[1:] = ids_s[1:] != ids_s[:-1]
    starts = np.flatnonzero(first)
    # longest later call of each name (-inf when the name has one call)
    later_max = np.full(starts.size, -np.inf)
    rest = ~first
    if rest.any():
        group = np.cumsum(first) - 1
        np.maximum.at(later_max, group[rest], dur_s[rest])
    d0 = dur_s[starts]
    hit = (later_max > -np.inf) & (d0 >= FIRST_CALL_RATIO * later_max) & (d0 - later_max >= FIRST_CALL_MIN_US)
    rows = order[starts[hit]]
    excess = (d0 - later_max)[hit]
    names = [tables.names[int(ids[r])] for r in rows[np.argsort(-excess)][:5]]
    return names, iv.union(ops["ts_us"][rows], ops["end_us"][rows])


def _first_launches(tables: TraceTables) -> iv.Intervals:
    """Launch calls of at least :data:`FIRST_CALL_MIN_US` that are the first launch of their kernel's name in the
    trace, made while fewer than :data:`FULL_QUEUE_PENDING` activities were launched and not yet started (µs
    intervals of the calls; see the module docstring)."""
    rt, kern = tables.runtime, tables.kernels
    if len(rt) == 0 or len(kern) == 0:
        return iv.EMPTY
    long_rows = np.flatnonzero(tables.names_matching(LAUNCH)[rt["name_id"]] & (rt["dur_us"] >= FIRST_CALL_MIN_US))
    if long_rows.size == 0:
        return iv.EMPTY
    rows = launch_rows(tables, "kernels")
    joined = rows >= 0
    k_launch = np.where(joined, rt["ts_us"][np.maximum(rows, 0)], kern["ts_us"])  # each kernel's launch (or start)
    first_launch: dict[int, float] = {}
    for nid, t in zip(kern["name_id"].tolist(), k_launch.tolist()):
        first_launch[nid] = min(first_launch.get(nid, np.inf), t)
    by_row = dict(zip(rows[joined].tolist(), kern["name_id"][joined].tolist()))  # launch call -> its kernel's name
    keep = []
    for r in long_rows.tolist():
        nid = by_row.get(r)
        t = float(rt["ts_us"][r])
        if nid is None or first_launch[nid] < t:
            continue
        pending = int(((k_launch < t) & (kern["ts_us"] > t)).sum())
        if pending < FULL_QUEUE_PENDING:
            keep.append(r)
    rows = np.asarray(keep, dtype=np.int64)
    return iv.union(rt["ts_us"][rows], rt["end_us"][rows])


def job_cold_steps(steps_by_rank: dict[int, list[int]], cold_by_rank: dict[int, list[int]]) -> tuple[set[int], str]:
    """The steps cross-rank statistics leave out, and why they cannot be drawn at all ("" when they can).

    ``steps_by_rank``: each rank's analysed step numbers; ``cold_by_rank``: its cold steps (PD902:
    :meth:`perfdoctor.analysis.steps.steps.Steps.cold_steps`). A step cold on any rank is left out on every rank: the
    others wait in their collectives for its first-call work, so their time in it is no steady state either.
    When that leaves a rank no step, the reason names it ("every analysed step is a cold start (PD902)" when no
    rank has a warm step); a straggler or a wait cannot be told from first-call work there.
    """
    cold = {int(n) for c in cold_by_rank.values() for n in c}
    bare = sorted(r for r, steps in steps_by_rank.items() if steps and not set(steps) - cold)
    if not bare:
        return cold, ""
    if len(bare) == len([s for s in steps_by_rank.values() if s]):
        own = all(set(steps_by_rank[r]) <= set(cold_by_rank.get(r, [])) for r in bare)
        return cold, "every analysed step is a cold start (PD902)" + ("" if own else " on at least one rank")
    names = ", ".join(str(r) for r in bare)
    return cold, f"every analysed step of rank(s) {names} is a cold start on some rank (PD902)"
