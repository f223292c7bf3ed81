"""Per-step breakdown of CPU-only traces, over host ops.

Definitions (µs, per step window): ops of the process that owns the steps
are classified by name (:data:`CPU_OP_RULES`, first match wins); nested ops
are resolved by priority (DataLoader > host_collective (gloo/NCCL collectives
seen on the host) > optimizer > attention > matmul > conv > reduction_norm >
elementwise > other ops) so categories add up exactly to
the time covered by any op ("busy"). The rest of the step, where no op or
annotation is open, is ``python`` time: interpreter work outside ATen ops,
which the profiler does not see as an op.

Host collectives also fill ``communication``: ``total_us`` their union, ``exposed_us`` the part with no
other op of the process running (nothing computes meanwhile), ``overlapped_us`` the rest; and
``communication_by_collective_us`` per collective (union of each, from the range names).
"""

from __future__ import annotations

import re

import numpy as np

from perfdoctor.analysis.steps.steps import Steps
from perfdoctor.analysis.timing import host
from perfdoctor.analysis.timing.breakdown import DeviceBreakdown, StepColumns, step_rows
from perfdoctor.trace import intervals as iv
from perfdoctor.trace.tables import Table, TraceTables
from perfdoctor.vocab import HOST_PRIORITY

CPU_OP_RULES: tuple[tuple[str, str], ...] = (
    ("attention", r"scaled_dot_product|_flash_attention|_efficient_attention|flash_attn"),
    (
        "matmul",
        r"^aten::(mm|addmm|bmm|baddbmm|matmul|linear|addmv|mv|dot|einsum|_scaled_mm|addbmm)$|^aten::_?mkldnn.*linear",
    ),
    (
        "conv",
        r"^aten::(_?convolution|conv\w*|mkldnn_convolution|_nnpack.*|slow_conv\w*|thnn_conv\w*)$|convolution_backward",
    ),
    (
        "reduction_norm",
        r"^aten::(native_)?(layer_norm|batch_norm|group_norm|rms_norm|_?softmax|_?log_softmax|sum|mean|nll_loss\w*|cross_entropy\w*|norm|max|min|amax|amin|cumsum|var|std|_batch_norm\w*|native_batch_norm\w*|\w*_backward_data)$|Backward.*(Norm|Softmax)",
    ),
    (
        "elementwise",
        r"^aten::(add|sub|mul|div|relu|gelu|silu|tanh|sigmoid|exp|log|pow|sqrt|rsqrt|neg|abs|clamp\w*|where|masked_fill\w*|dropout|native_dropout|copy_|to|_to_copy|fill_|zero_|zeros_like|ones_like|add_|mul_|div_|sub_|addcmul_|addcdiv_|lerp_|threshold\w*|\w*_backward|embedding\w*|cat|stack|index\w*|gather|scatter\w*|triu|tril|erf|cos|sin)$",
    ),
)
# gloo / NCCL collectives as the host sees them (c10d annotations, record_param_comms)
HOST_COMMUNICATION = (
    r"^(gloo|nccl|c10d|mpi)[:_]|record_param_comms|^c10d::|all_?reduce|all_?gather|reduce_?scatter|^broadcast"
)
_RX = tuple((c, re.compile(rx)) for c, rx in CPU_OP_RULES)


def classify_cpu_op(name: str) -> str:
    """Category of one host op name (``other_ops`` when nothing matches)."""
    for cat, rx in _RX:
        if rx.search(name):
            return cat
    return "other_ops"


def _inside_collective(tables: TraceTables, ops: Table) -> np.ndarray:
    """Per row of ``ops``: True for a host collective op (``c10d::allgather_``, ``record_param_comms``...) and for the
    ops it holds on its own thread (its children): the thread's time inside the call is the collective's, not
    compute that overlaps it. Shape (len(ops),), bool."""
    names = tables.names_matching(HOST_COMMUNICATION)
    coll: np.ndarray = np.asarray(names[ops["name_id"]], dtype=bool)
    out = coll.copy()
    if not coll.any():
        return out
    ts, end, tid = ops["ts_us"], ops["end_us"], ops["tid"]
    for t in np.unique(tid[coll]).tolist():
        own_start, own_end = iv.union(ts[coll & (tid == t)], end[coll & (tid == t)])
        rows = np.flatnonzero((tid == t) & ~coll)
        k = np.searchsorted(own_start, ts[rows], side="right") - 1
        ok = k >= 0
        held = np.zeros(rows.size, dtype=bool)
        held[ok] = end[rows[ok]] <= own_end[k[ok]]
        out[rows[held]] = True
    return out


def host_unions(tables: TraceTables, pid: int) -> dict[str, iv.Intervals]:
    """Per category of :data:`~perfdoctor.vocab.HOST_PRIORITY`, the union of the host time it covers (µs): the
    ops of process ``pid`` (every process when ``pid`` < 0) classified by :func:`classify_cpu_op`, DataLoader
    ``__next__``, host collectives and ``Optimizer.step``. Their union is the step's "busy" time; the rest of a
    step window is "python" (outside any op)."""
    ops = tables.cpu_ops
    if pid >= 0 and len(ops):
        ops = ops.take(ops["pid"] == pid)
    cats = np.array([classify_cpu_op(n) for n in tables.names], dtype=object)
    op_cat = cats[ops["name_id"]] if len(ops) else np.empty(0, dtype=object)
    if len(ops):
        op_cat = np.where(_inside_collective(tables, ops), "host_collective", op_cat)
    unions = {c: iv.union(ops["ts_us"][op_cat == c], ops["end_us"][op_cat == c]) for c in HOST_PRIORITY[3:]}
    unions["dataloader"] = host.dataloader(tables)
    unions["host_collective"] = host.named(tables, HOST_COMMUNICATION)
    unions["optimizer"] = host.named(tables, host.OPTIMIZER_STEP)
    return unions


def host_compute(unions: dict[str, iv.Intervals]) -> iv.Intervals:
    """The host time in ops that are not collectives (µs, disjoint): what hides a host collective, from
    :func:`host_unions`' categories after the DataLoader and the collectives themselves."""
    return iv.union_of(*(unions[c] for c in HOST_PRIORITY[2:]))


def cpu_breakdown(tables: TraceTables, steps: Steps) -> DeviceBreakdown:
    """Per-step breakdown of host time for a trace without device activity."""
    ws, we = steps.start_us, steps.end_us
    unions = host_unions(tables, steps.pid)
    compute = host_compute(unions)
    coll_exposed = iv.subtract(unions["host_collective"], compute)
    comm_w = iv.per_window(unions["host_collective"], ws, we)
    exposed_w = iv.per_window(coll_exposed, ws, we)
    by_coll = _by_collective(tables, ws, we)
    exclusive: dict[str, iv.Intervals] = {}
    covered = iv.EMPTY
    for c in HOST_PRIORITY:
        exclusive[c] = iv.subtract(unions[c], covered)
        covered = iv.union_of(covered, unions[c])
    busy_w = iv.per_window(covered, ws, we)
    sync_w = _blocked_outside_ops(tables, steps.pid, covered, ws, we)
    excl_w = {c: iv.per_window(exclusive[c], ws, we) for c in HOST_PRIORITY}
    union_w = {c: iv.per_window(unions[c], ws, we) for c in HOST_PRIORITY}
    phases = host.phases(tables, (steps.host_start_us, steps.host_end_us))
    ph_w = {p: iv.per_window(s, ws, we) for p, s in phases.items()}
    zeros = np.zeros(len(steps))
    idle_w = (we - ws) - busy_w
    idle = {"python": idle_w} if sync_w is None else {"python": idle_w - sync_w, "synchronization": sync_w}
    cols = StepColumns(
        busy=busy_w,
        categories=excl_w,
        category_union=union_w,
        idle_causes=idle,
        communication=(comm_w, comm_w - exposed_w, exposed_w),
        by_collective=by_coll,
        memcpy_by_direction={},
        phases_host=ph_w,
        phases_device={},
        n_kernels=np.zeros(len(steps), dtype=np.int64),  # no kernels: host ops are not kernels
        kernel_sum=zeros,
        triton=zeros,
    )
    out = step_rows(steps, cols)
    note = "CPU-only trace: categories are host ops; idle is time outside any op (Python)"
    if sync_w is not None:
        note = (
            "host side only (the trace holds CUDA/HIP runtime calls but no device activity): categories are host "
            "ops; idle is time outside any op: inside a synchronize call or blocking copy (host synchronization, "
            "whether or not the device work it waited for is in the trace), else Python"
        )
    return DeviceBreakdown(device=-1, kind="cpu", steps=out, notes=[note])


def _blocked_outside_ops(
    tables: TraceTables, pid: int, ops: iv.Intervals, ws: np.ndarray, we: np.ndarray
) -> np.ndarray | None:
    """Per window: host µs inside synchronize calls and blocking copies (of process ``pid`` when >= 0) outside
    every op; None for a trace without runtime calls (a CPU-only run, where the cause does not exist).

    A blocking call waits for the device whether or not the device work it waited for was recorded (an export
    that lost its activity keeps the call): its time is host synchronization, never Python."""
    rt = tables.runtime
    if len(rt) == 0:
        return None
    if pid >= 0:
        rt = rt.take(rt["pid"] == pid)
    m = tables.names_matching(re.compile(host.SYNC_RUNTIME))[rt["name_id"]]
    waits = iv.union_of(iv.union(rt["ts_us"][m], rt["end_us"][m]), host.blocking_memcpy_calls(tables))
    return np.asarray(iv.per_window(iv.subtract(waits, ops), ws, we))


def _by_collective(tables: TraceTables, ws: np.ndarray, we: np.ndarray) -> dict[str, np.ndarray]:
    """Per collective named by host ranges (``gloo:all_reduce`` -> all_reduce): its union in each window (µs)."""
    from perfdoctor.analysis.timing.classify import collective_of

    out: dict[str, list[iv.Intervals]] = {}
    for tname in ("annotations", "cpu_ops"):
        tab = tables.tables[tname]
        if len(tab) == 0:
            continue
        m = tables.names_matching(HOST_COMMUNICATION)[tab["name_id"]]
        for nid in np.unique(tab["name_id"][m]).tolist():
            sel = tab["name_id"] == nid
            out.setdefault(collective_of(tables.names[nid]), []).append(iv.union(tab["ts_us"][sel], tab["end_us"][sel]))
    return {c: iv.per_window(iv.union_of(*parts), ws, we) for c, parts in out.items()}
