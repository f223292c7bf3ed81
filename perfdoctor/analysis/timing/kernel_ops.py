"""Kernel categories that need the launching host op, not only the kernel's name.

:func:`perfdoctor.analysis.timing.classify.classify_kernel` reads a kernel's name. Two kinds of device work
cannot be told from the name alone, and are recognised here from the host op the kernel was launched in
(the runtime call's thread and time, joined by correlation id):

- **communication named by its op**: a kernel the name table does not know (category ``other``) launched
  inside a c10d / functional-collective op (``c10d::allreduce_``, ``_c10d_functional::all_to_all_single``),
  a ``record_param_comms`` annotation or a ``nccl:``/``gloo:`` range is communication; its collective is
  read from the enclosing op names (custom all-to-all kernels, NVSHMEM-based libraries with plain names).
- **unfused attention**: the batched GEMMs and the softmax of an attention block that was not fused
  (``aten::softmax`` with an ``aten::bmm``/``matmul``/``baddbmm``/``einsum`` right before and right after it
  on the same thread, only elementwise ops between: scale, mask, dropout), and every kernel launched inside
  ``scaled_dot_product_attention``'s math fallback (``aten::_scaled_dot_product_attention_math``). Their
  kernels are GEMM, reduction and elementwise kernels by name; here they count as ``attention``. The same
  pattern in the backward pass (``aten::_softmax_backward_data`` between the ``bmm`` of ``BmmBackward0``)
  is attention backward.

Only kernels whose name-based category is generic are relabelled (``other`` for communication;
``matmul``/``reduction_norm``/``elementwise``/``other`` for attention): a copy kernel inside a c10d op stays
elementwise, an NCCL kernel stays communication.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from perfdoctor.analysis.timing.classify import classify_kernel, collective_of
from perfdoctor.trace import intervals as iv
from perfdoctor.trace.join import launch_rows
from perfdoctor.trace.tables import TraceTables

COMM_OP = re.compile(r"^record_param_comms$|^c10d::|^_?c10d_functional::|^nccl:|^gloo:|^mpi:|^ProcessGroup")
SDPA_MATH = re.compile(r"^aten::_scaled_dot_product_attention_math")
SOFTMAX_OP = re.compile(r"^aten::(_safe_softmax|_?softmax|_softmax_backward_data)$")
GEMM_OP = re.compile(r"^aten::(bmm|matmul|baddbmm|einsum)$")
# ops that end an attention block: a projection, a norm, an embedding or a convolution between the two GEMMs
BLOCKER_OP = re.compile(
    r"^aten::(linear|addmm|mm|_?convolution|conv\w*|(native_)?layer_norm|group_norm|batch_norm"
    r"|embedding|rms_norm)$"
)
_ATTENTION_FROM = frozenset({"matmul", "reduction_norm", "elementwise", "other"})


@dataclass(frozen=True)
class KernelLabels:
    """Per row of the ``kernels`` table (same order): the category and collective the breakdown uses.

    Attributes:
        category: object array of category names (:data:`perfdoctor.analysis.timing.classify.CATEGORIES`).
        collective: object array, the collective of communication kernels, else "".
        triton: bool array, Triton-generated kernels.
        relabelled: bool array, True where the launching op changed the name-based category.
    """

    category: np.ndarray
    collective: np.ndarray
    triton: np.ndarray
    relabelled: np.ndarray


def kernel_labels(tables: TraceTables) -> KernelLabels:
    """Categories of every kernel of ``tables`` (cached on the tables object; see the module docstring)."""
    cached = tables.__dict__.get("_kernel_labels")
    if isinstance(cached, KernelLabels):
        return cached
    tab = tables.kernels
    ids = tab["name_id"] if len(tab) else np.empty(0, dtype=np.int64)
    uniq, inv = np.unique(ids, return_inverse=True)
    classes = [classify_kernel(tables.names[i]) for i in uniq.tolist()]
    category = np.array([c.category for c in classes] or [""], dtype=object)[inv] if ids.size else np.empty(0, object)
    collective = (
        np.array([c.collective for c in classes] or [""], dtype=object)[inv] if ids.size else np.empty(0, object)
    )
    triton = np.array([c.triton for c in classes] or [False], dtype=bool)[inv] if ids.size else np.empty(0, bool)
    relabelled = np.zeros(ids.size, dtype=bool)
    if ids.size and len(tables.cpu_ops):
        launch_ts, launch_tid = _launch_points(tables)
        comm, comm_coll = _inside(tables, launch_ts, launch_tid, _comm_windows(tables))
        m = comm & (category == "other")
        category[m], collective[m], relabelled[m] = "communication", comm_coll[m], True
        attn, _ = _inside(tables, launch_ts, launch_tid, _attention_windows(tables))
        m = attn & np.isin(category, list(_ATTENTION_FROM))
        category[m], relabelled[m] = "attention", True
    labels = KernelLabels(category, collective, triton, relabelled)
    tables.__dict__["_kernel_labels"] = labels
    return labels


def _launch_points(tables: TraceTables) -> tuple[np.ndarray, np.ndarray]:
    """Host time (µs) and thread of each kernel's launching runtime call (NaN / -1 when not recorded)."""
    k, rt = tables.kernels, tables.runtime
    ts = np.full(len(k), np.nan)
    tid = np.full(len(k), -1, dtype=np.int64)
    if len(rt) == 0:
        return ts, tid
    rows = launch_rows(tables, "kernels")
    hit = rows >= 0
    ts[hit] = rt["ts_us"][rows[hit]]
    tid[hit] = rt["tid"][rows[hit]].astype(np.int64)
    return ts, tid


# a window: (tid, start µs, end µs, label)
_Window = tuple[int, float, float, str]


def _inside(
    tables: TraceTables, ts: np.ndarray, tid: np.ndarray, windows: list[_Window]
) -> tuple[np.ndarray, np.ndarray]:
    """Which launch points fall in a window of their own thread, and that window's label ("" if none)."""
    hit = np.zeros(ts.size, dtype=bool)
    label = np.full(ts.size, "", dtype=object)
    by_tid: dict[int, list[_Window]] = {}
    for w in windows:
        by_tid.setdefault(w[0], []).append(w)
    for t, ws in by_tid.items():
        ws.sort(key=lambda w: w[1])
        starts = np.array([w[1] for w in ws])
        ends = np.maximum.accumulate(np.array([w[2] for w in ws]))
        rows = np.flatnonzero(tid == t)
        k = iv.containing(ts[rows], (starts, ends))
        ok = k >= 0
        hit[rows[ok]] = True
        # the innermost (latest-starting) window that still holds the launch names it
        for r, kk in zip(rows[ok].tolist(), k[ok].tolist()):
            j = kk
            while j >= 0 and ws[j][2] <= ts[r]:
                j -= 1
            label[r] = ws[max(j, 0)][3]
    return hit, label


def _ops(tables: TraceTables, rx: re.Pattern[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Rows of ``cpu_ops`` whose name matches ``rx``: (tid, ts_us, end_us, name_id)."""
    ops = tables.cpu_ops
    m = tables.names_matching(rx)[ops["name_id"]]
    return ops["tid"][m].astype(np.int64), ops["ts_us"][m], ops["end_us"][m], ops["name_id"][m]


def _comm_windows(tables: TraceTables) -> list[_Window]:
    """c10d / record_param_comms / nccl: / gloo: ranges, labelled with their collective."""
    out: list[_Window] = []
    for tname in ("cpu_ops", "annotations"):
        tab = tables.tables[tname]
        if len(tab) == 0:
            continue
        m = tables.names_matching(COMM_OP)[tab["name_id"]]
        # record_param_comms names its collective in its args ("Collective name"): read it where recorded
        named = tab["collective"][m].tolist() if "collective" in tab else [None] * int(m.sum())
        for t, s, e, n, c in zip(
            tab["tid"][m].tolist(),
            tab["ts_us"][m].tolist(),
            tab["end_us"][m].tolist(),
            tab["name_id"][m].tolist(),
            named,
        ):
            coll = collective_of(str(c) if c else tables.names[n])
            out.append((int(t), float(s), float(e), "" if coll == "other" else coll))
    # record_param_comms does not name its collective: take the enclosing c10d op's
    out.sort(key=lambda w: (w[0], w[1]))
    filled: list[_Window] = []
    for w in out:
        label = w[3] or next((o[3] for o in reversed(filled) if o[0] == w[0] and o[1] <= w[1] < o[2] and o[3]), "other")
        filled.append((w[0], w[1], w[2], label))
    return filled


def _attention_windows(tables: TraceTables) -> list[_Window]:
    """SDPA math-fallback ops and unfused GEMM → softmax → GEMM blocks (see the module docstring)."""
    out: list[_Window] = [(t, s, e, "attention") for t, s, e, _ in zip(*_ops(tables, SDPA_MATH))]
    sm_tid, sm_ts, sm_end, _ = _ops(tables, SOFTMAX_OP)
    if sm_ts.size == 0:
        return out
    g_tid, g_ts, g_end, _ = _ops(tables, GEMM_OP)
    b_tid, b_ts, _, _ = _ops(tables, BLOCKER_OP)
    for t, s, e in zip(sm_tid.tolist(), sm_ts.tolist(), sm_end.tolist()):
        mine = g_tid == t
        before = mine & (g_end <= s)
        after = mine & (g_ts >= e)
        if not before.any() or not after.any():
            continue
        prev_end = float(g_end[before].max())
        lo = float(g_ts[before & (g_end == prev_end)].min())
        nxt_start = float(g_ts[after].min())
        hi = float(g_end[after & (g_ts == nxt_start)].max())
        others = (sm_tid == t) & (sm_ts > prev_end) & (sm_ts < nxt_start) & ((sm_ts < s) | (sm_ts >= e))  # not nested
        blocked = (b_tid == t) & (b_ts >= prev_end) & (b_ts < nxt_start)
        if others.any() or blocked.any():
            continue
        out.append((t, lo, hi, "attention"))
    return out


# bytes per element of record_param_comms' "dtype" (c10 ScalarType names)
_DTYPE_BYTES = {
    "Float": 4,
    "Double": 8,
    "Half": 2,
    "BFloat16": 2,
    "Int": 4,
    "Long": 8,
    "Short": 2,
    "Char": 1,
    "Byte": 1,
    "Bool": 1,
    "Float8_e4m3fn": 1,
    "Float8_e5m2": 1,
    "ComplexFloat": 8,
}


def collective_messages(tables: TraceTables, start_us: float, end_us: float) -> list[dict[str, object]]:
    """What the ``record_param_comms`` ops in ``[start_us, end_us)`` say about each collective they name:
    ``{collective, calls, bytes_per_call (input message, None when the dtype is unknown), group_size}``,
    most bytes first. ``wait`` / ``barrier`` records carry no message and are left out."""
    ops = tables.cpu_ops
    if len(ops) == 0 or "collective" not in ops:
        return []
    m = (ops["ts_us"] >= start_us) & (ops["ts_us"] < end_us)
    groups: dict[tuple[str, int | None, int], int] = {}
    for i in np.flatnonzero(m).tolist():
        coll = ops["collective"][i]
        if not coll or coll in ("wait", "barrier"):
            continue
        size = _DTYPE_BYTES.get(str(ops["dtype"][i]))
        nel = int(ops["in_nelems"][i])
        nbytes = nel * size if size is not None and nel >= 0 else None
        key = (str(coll), nbytes, int(ops["group_size"][i]))
        groups[key] = groups.get(key, 0) + 1
    rows: list[dict[str, object]] = [
        {"collective": c, "calls": n, "bytes_per_call": b, "group_size": g} for (c, b, g), n in groups.items()
    ]
    rows.sort(key=lambda r: -(int(str(r["bytes_per_call"] or 0)) * int(str(r["calls"]))))
    return rows
