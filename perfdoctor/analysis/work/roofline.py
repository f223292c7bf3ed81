"""Per-op roofline: FLOPs, bytes, arithmetic intensity, attainable vs achieved FLOP/s.

Roofline model (Williams, Waterman, Patterson, "Roofline: an insightful visual
performance model", CACM 2009): attainable FLOP/s = min(peak, AI × bandwidth), with
arithmetic intensity AI = FLOPs ÷ bytes moved and ridge point = peak ÷ bandwidth.

Each GPU kernel (and memcpy/memset) is tied to the aten op that launched it through
its ``external_id`` (falling back to ``correlation`` → runtime call → its external id),
then to the *outermost costable* ancestor of that op on the same thread (so
``aten::linear`` → ``aten::addmm`` is costed once, and an ``aten::einsum`` whose
equation was not recorded falls through to the ``aten::bmm`` it calls). An op's time
is the sum of its kernels' device durations; in a CPU-only trace it is the op's own
(inclusive) duration.

Compute roof per op: matmul / conv / attention use the peak at the dtype the math
ran in (from the kernel names: FP32 inputs may have run as TF32); other ops run on
SIMT/vector units and use the FP32 (FP64 for double) peak, never the tensor-core peak.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import cast

import msgspec
import numpy as np

from perfdoctor.analysis.timing.kernel_dtype import is_gemm_kernel, kernel_math_dtype
from perfdoctor.analysis.work.hardware import DeviceSpec
from perfdoctor.analysis.work.op_flops import OpCost, Uncosted, cost_op
from perfdoctor.trace.join import external_id_rows, launch_rows
from perfdoctor.trace.tables import Table, TraceTables

LATENCY_FRACTION = 0.10  # below this share of the attainable roof an op is latency/launch-bound
ABOVE_ROOF = "above_roof"  # the bound of a row achieving more than its roof: a count or a roof is wrong for it
_TENSOR_KINDS = ("matmul", "conv", "attention")


class Roofs(msgspec.Struct):
    """The ceilings one analysis uses (the report's ``roofs``). ``peak_flops`` FLOP/s per dtype key,
    ``hbm_bytes_per_s`` B/s (None if unknown), ``source`` says where they come from
    (``"spec: ..."`` datasheet or ``"measured: ..."`` calibration), ``kind`` "spec" or "measured"."""

    device: str
    peak_flops: dict[str, float]
    hbm_bytes_per_s: float | None
    source: str
    kind: str = "spec"

    def peak(self, dtype: str | None) -> float | None:
        """Peak FLOP/s at ``dtype`` (None: no dtype, or no peak known for it)."""
        return self.peak_flops.get(dtype) if dtype else None

    def ridge_point(self, dtype: str | None) -> float | None:
        """FLOP/B where ``dtype``'s peak meets the bandwidth roof (None without either)."""
        peak = self.peak(dtype)
        return None if peak is None or not self.hbm_bytes_per_s else peak / self.hbm_bytes_per_s


def roofs_from_spec(spec: DeviceSpec) -> Roofs:
    """Datasheet roofs of ``spec`` (dense peaks)."""
    srcs = sorted({spec.source_of(d) for d in spec.peak_flops} | {spec.source_of("bandwidth")})
    return Roofs(spec.name, dict(spec.peak_flops), spec.hbm_bytes_per_s, "spec: " + "; ".join(srcs), "spec")


class RooflineRow(msgspec.Struct, kw_only=True):
    """One (op name, input shapes, dtype) group. Times µs, flops FLOP, bytes B,
    arithmetic_intensity FLOP/B, *_flops_per_s FLOP/s, pct_of_attainable 0-100 (None without roofs, and for a
    row above its roof: an achieved rate over the hardware's means a count or a roof is wrong for it, so no share
    of it is true; ``bound`` is then ``above_roof`` and ``note`` names the broken assumption with both numbers)."""

    name: str
    shapes: str
    dtype: str | None
    math_dtype: str | None
    kind: str
    count: int
    time_us: float
    flops: float
    bytes: float | None
    arithmetic_intensity: float | None
    ridge_point: float | None
    peak_flops_per_s: float | None
    attainable_flops_per_s: float | None
    achieved_flops_per_s: float | None  # None only in a report whose JSON held a non-finite rate
    achieved_bytes_per_s: float | None
    pct_of_attainable: float | None
    bound: str  # compute | bandwidth | latency | unknown | above_roof (``note`` says which assumption broke)
    formula: str
    note: str = ""


class UncostedOp(msgspec.Struct, kw_only=True):
    """Ops whose FLOPs could not be computed from their shapes, grouped by name (µs, ``count`` ops)."""

    name: str
    count: int
    time_us: float
    reason: str


class ChartPoint(msgspec.Struct, kw_only=True):
    """One op group drawn on the roofline chart (``ai`` FLOP/B, FLOP/s, µs)."""

    name: str
    dtype: str | None
    ai: float | None
    achieved_flops_per_s: float | None
    time_us: float
    bound: str


class RooflineResult(msgspec.Struct, kw_only=True):
    """The roofline of one rank (the report's ``roofline``): ``ops``, the top rows by time; ``uncosted`` by time;
    ``chart``, the points drawn; ``roofs`` used (None: unknown); ``time_basis`` "device" or "cpu_op";
    ``costed_time_us`` / ``uncosted_time_us`` (µs) and ``total_flops`` (FLOP) over the rows within their roofs;
    ``latency_fraction`` the latency class's threshold; ``n_groups`` rows before the cut to the top."""

    ops: list[RooflineRow]
    uncosted: list[UncostedOp]
    chart: list[ChartPoint]
    roofs: Roofs | None
    time_basis: str
    costed_time_us: float
    uncosted_time_us: float
    total_flops: float
    latency_fraction: float | None  # None only in a report whose JSON held a non-finite value
    n_groups: int
    warnings: list[str] = []


def op_parents(cpu_ops: Table) -> np.ndarray:
    """Index of each cpu_op's enclosing cpu_op on the same (pid, tid), -1 for roots.

    Ops nest by time on one thread (Kineto records them as complete events)."""
    n = len(cpu_ops)
    parent = np.full(n, -1, dtype=np.int64)
    if n == 0:
        return parent
    order = _nest_order(cpu_ops)
    pid, tid, ts, end = (cpu_ops[c].tolist() for c in ("pid", "tid", "ts_us", "end_us"))
    stack: list[int] = []
    thread = None
    for i in order.tolist():
        if (pid[i], tid[i]) != thread:
            stack, thread = [], (pid[i], tid[i])
        while stack and end[stack[-1]] <= ts[i]:
            stack.pop()
        if stack:
            parent[i] = stack[-1]
        stack.append(i)
    return parent


def _costs(tables: TraceTables) -> list[OpCost | Uncosted]:
    ops, names = tables.cpu_ops, tables.name_array()
    concrete = ops["concrete_inputs"] if "concrete_inputs" in ops else [None] * len(ops)
    return [
        cost_op(names[nid], d, t, c)
        for nid, d, t, c in zip(ops["name_id"].tolist(), ops["input_dims"], ops["input_type"], concrete)
    ]


def _nest_order(cpu_ops: Table) -> np.ndarray:
    """Ops by thread, start time, longest first: every parent comes before its children."""
    return np.lexsort((-cpu_ops["dur_us"], cpu_ops["ts_us"], cpu_ops["tid"], cpu_ops["pid"]))


def _resolve(
    cpu_ops: Table, parent: np.ndarray, costed: np.ndarray, is_aten: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(outermost costed ancestor-or-self, outermost aten ancestor-or-self) per op, -1 if none."""
    n = len(parent)
    chosen = np.full(n, -1, dtype=np.int64)
    top = np.full(n, -1, dtype=np.int64)
    for i in _nest_order(cpu_ops).tolist():
        p = parent[i]
        chosen[i] = chosen[p] if p >= 0 and chosen[p] >= 0 else (i if costed[i] else -1)
        top[i] = top[p] if p >= 0 and top[p] >= 0 else (i if is_aten[i] else -1)
    return chosen, top


def _enclosing_op(cpu_ops: Table, parent: np.ndarray, pid: np.ndarray, tid: np.ndarray, ts: np.ndarray) -> np.ndarray:
    """Innermost cpu_op on the same (pid, tid) whose span contains each ``ts``; -1 if none."""
    out = np.full(len(ts), -1, dtype=np.int64)
    if not len(cpu_ops) or not len(ts):
        return out
    end = cpu_ops["end_us"]
    keys: dict[tuple[int, int], list[int]] = {}
    for k, (p, t) in enumerate(zip(cpu_ops["pid"].tolist(), cpu_ops["tid"].tolist())):
        keys.setdefault((p, t), []).append(k)
    for (p, t), members in keys.items():
        idx = np.asarray(members)
        idx = idx[np.argsort(cpu_ops["ts_us"][idx], kind="stable")]
        q = np.flatnonzero((pid == p) & (tid == t))
        if not len(q):
            continue
        pos = np.searchsorted(cpu_ops["ts_us"][idx], ts[q], side="right") - 1
        for qi, pi in zip(q.tolist(), pos.tolist()):
            j = int(idx[pi]) if pi >= 0 else -1
            while j >= 0 and end[j] < ts[qi]:  # started before but already ended: climb to the enclosing op
                j = int(parent[j])
            out[qi] = j
    return out


def _device_events(tables: TraceTables, parent: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(launching cpu_op index or -1, dur_us, name) of every kernel, memcpy and memset.

    The launching op is the innermost cpu_op enclosing the runtime call with the same
    ``correlation`` (on the same thread); without a runtime call, the cpu_op with the
    event's ``external_id`` if it started before the event. External ids alone are not
    trusted: some Kineto versions write the correlation id there, which collides with
    op ids. Both joins are :mod:`perfdoctor.trace.join`'s."""
    ops, rt, names = tables.cpu_ops, tables.runtime, tables.name_array()
    rt_op = _enclosing_op(ops, parent, rt["pid"], rt["tid"], rt["ts_us"]) if len(rt) else np.zeros(0, np.int64)
    launch, dur, nm = [], [], []
    for tname in ("kernels", "memcpy", "memset"):
        t = tables.tables[tname]
        if not len(t):
            continue
        rows = launch_rows(tables, tname)  # the runtime call (by correlation), -1 without one
        via_rt = np.where(rows >= 0, rt_op[np.maximum(rows, 0)], -2) if len(rt) else np.full(len(t), -2, np.int64)
        cand = external_id_rows(tables, t["external_id"])
        ok = (cand >= 0) & (ops["ts_us"][np.maximum(cand, 0)] <= t["ts_us"]) if len(ops) else cand >= 0
        via_ext = np.where(ok, cand, -1)
        launch.append(np.where(via_rt != -2, via_rt, via_ext))
        dur.append(t["dur_us"])
        nm.extend(names[t["name_id"]].tolist())
    if not launch:
        return np.zeros(0, np.int64), np.zeros(0), []
    return np.concatenate(launch), np.concatenate(dur), nm


# an op group the FLOPs of which are unknown: ("op", index of its outermost aten op) or ("kernel", kernel name)
UncostedKey = tuple[str, int] | tuple[str, str]


@dataclass
class OpTimes:
    """Where one trace's op time went (µs): ``time_by_op`` per chosen (costed) op; ``dtype_time`` per chosen op and
    GEMM math dtype ("?" when the kernel name does not say); ``uncosted`` per group of time no costed op explains;
    ``basis`` "device" (kernel time) or "cpu_op" (a CPU-only trace: the ops' own durations)."""

    time_by_op: dict[int, float]
    dtype_time: dict[int, dict[str, float]]
    uncosted: dict[UncostedKey, float]
    basis: str


def _op_times(tables: TraceTables, parent: np.ndarray, chosen: np.ndarray, top: np.ndarray) -> OpTimes:
    """Per chosen op: time µs and math-dtype µs; per uncosted group: time."""
    ops = tables.cpu_ops
    time_by_op: dict[int, float] = defaultdict(float)
    dtype_time: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    uncosted: dict[UncostedKey, float] = defaultdict(float)
    if not tables.has_device_activity:
        parent_free = [i for i in range(len(ops)) if chosen[i] == i]
        for i in parent_free:
            time_by_op[i] += float(ops["dur_us"][i])
        for i in range(len(ops)):
            if chosen[i] < 0 and top[i] == i:
                uncosted[("op", i)] += float(ops["dur_us"][i])
        return OpTimes(time_by_op, dtype_time, uncosted, "cpu_op")
    op_of, dur, knames = _device_events(tables, parent)
    for k, (i, d) in enumerate(zip(op_of.tolist(), dur.tolist())):
        c = chosen[i] if i >= 0 else -1
        if c >= 0:
            time_by_op[c] += d
            if is_gemm_kernel(knames[k]):
                dtype_time[c][kernel_math_dtype(knames[k]) or "?"] += d
        elif i >= 0:
            uncosted[("op", int(top[i]) if top[i] >= 0 else i)] += d
        else:
            uncosted[("kernel", knames[k])] += d
    return OpTimes(time_by_op, dtype_time, uncosted, "device")


def _bound(ai: float | None, ridge: float | None, pct: float | None, latency_fraction: float) -> str:
    if pct is None:
        return "unknown"
    if pct < 100 * latency_fraction:
        return "latency"
    if ai is None or ridge is None:
        return "bandwidth"
    return "compute" if ai >= ridge else "bandwidth"


def _math_dtype(cost: OpCost, shares: dict[str, float]) -> str | None:
    if cost.kind not in _TENSOR_KINDS:
        return "fp64" if cost.dtype == "fp64" else "fp32"
    known = {k: v for k, v in shares.items() if k != "?"}
    if known:
        return max(known, key=lambda dt: known[dt])
    return cost.dtype


def _above_roof(
    cost: OpCost, math: str | None, achieved: float, achieved_bw: float | None, peak: float | None, bw: float | None
) -> str:
    """Which assumption a figure above the hardware's roof breaks: the FLOP count or the peak when FLOP/s exceed
    the peak, the byte count or the bandwidth when B/s exceed HBM's (no kernel beats its hardware)."""
    broken = []
    if peak and achieved > peak:
        algo = " (direct-algorithm count: cuDNN's Winograd/FFT do fewer)" if cost.kind == "conv" else ""
        broken.append(
            f"{achieved / 1e12:,.1f} TFLOP/s is above the {math} peak of {peak / 1e12:,.1f}: the FLOP count "
            f"({cost.formula}){algo} or the {math} peak (faster math, clocks above the datasheet) is wrong for it"
        )
    if achieved_bw is not None and bw and achieved_bw > bw:
        broken.append(
            f"{achieved_bw / 1e9:,.0f} GB/s is above the {bw / 1e9:,.0f} GB/s of HBM: the byte count (each input "
            "and output moved once through HBM; data served from cache moves less) or the bandwidth is wrong for it"
        )
    return "; ".join(broken) + "; left out of the FLOP sum, MFU and the bound classes" if broken else ""


GroupKey = tuple[str, str, str | None]  # (op name, input shapes, input dtype)


@dataclass
class OpGroup:
    """The costed ops of one (name, shapes, dtype): their cost (each op's), ``count``, ``time_us`` (µs) and GEMM
    math-dtype time (µs per dtype)."""

    cost: OpCost
    count: int = 0
    time_us: float = 0.0
    dtypes: dict[str, float] = field(default_factory=lambda: defaultdict(float))


def _row(key: GroupKey, g: OpGroup, roofs: Roofs | None, latency_fraction: float) -> RooflineRow:
    name, shapes, cost = key[0], key[1], g.cost
    time_s = g.time_us * 1e-6
    flops, nbytes = cost.flops * g.count, None if cost.bytes is None else cost.bytes * g.count
    math = _math_dtype(cost, g.dtypes)
    ai = flops / nbytes if nbytes else None
    achieved = flops / time_s if time_s > 0 else 0.0
    achieved_bw = nbytes / time_s if nbytes is not None and time_s > 0 else None
    peak = roofs.peak(math) if roofs else None
    bw = roofs.hbm_bytes_per_s if roofs else None
    ridge = roofs.ridge_point(math) if roofs else None
    attainable = pct = None
    if peak is not None and bw and ai is not None:
        attainable = min(peak, ai * bw)
        pct = (
            100.0 * achieved / attainable
            if attainable > 0
            else (100.0 * achieved_bw / bw if achieved_bw is not None else None)
        )
    elif flops == 0 and bw and achieved_bw is not None:
        pct = 100.0 * achieved_bw / bw  # pure data movement: judged against the bandwidth roof
    note = _above_roof(cost, math, achieved, achieved_bw, peak, bw) if pct is not None and pct > 100 else ""
    if note:
        pct = None  # no share of a roof the row breaks: the note says which count or roof is wrong
    return RooflineRow(
        name=name,
        shapes=shapes,
        dtype=cost.dtype,
        math_dtype=math,
        kind=cost.kind,
        count=g.count,
        time_us=g.time_us,
        flops=flops,
        bytes=nbytes,
        arithmetic_intensity=ai,
        ridge_point=ridge,
        peak_flops_per_s=peak,
        attainable_flops_per_s=attainable,
        achieved_flops_per_s=achieved,
        achieved_bytes_per_s=achieved_bw,
        pct_of_attainable=pct,
        bound=ABOVE_ROOF if note else _bound(ai, ridge, pct, latency_fraction),
        formula=cost.formula,
        note=note,
    )


def _shapes(raw: object) -> str:
    if raw is None:
        return ""
    text = raw.decode() if isinstance(raw, (bytes, bytearray)) else str(raw)
    return " ".join(text.split())


def _op_groups(tables: TraceTables, costs: list[OpCost | Uncosted], times: OpTimes) -> dict[GroupKey, OpGroup]:
    """The chosen ops grouped by (name, input shapes, dtype), their times and math-dtype times added up (µs)."""
    ops, names = tables.cpu_ops, tables.name_array()
    groups: dict[GroupKey, OpGroup] = {}
    for i, t_us in times.time_by_op.items():
        cost = cast(OpCost, costs[i])  # time_by_op's keys are chosen ops, and _resolve chooses only costed ones
        key = (str(names[ops["name_id"][i]]), _shapes(ops["input_dims"][i]), cost.dtype)
        g = groups.setdefault(key, OpGroup(cost))
        g.count += 1
        g.time_us += t_us
        for d, v in times.dtype_time.get(i, {}).items():
            g.dtypes[d] += v
    return groups


def _chart(trusted: list[RooflineRow], chart_points: int) -> list[ChartPoint]:
    """The first ``chart_points`` rows within their roofs that have an arithmetic intensity and FLOPs, as points."""
    return [
        ChartPoint(
            name=r.name,
            dtype=r.math_dtype,
            ai=r.arithmetic_intensity,
            achieved_flops_per_s=r.achieved_flops_per_s,
            time_us=r.time_us,
            bound=r.bound,
        )
        for r in trusted[:chart_points]
        if r.arithmetic_intensity is not None and r.flops > 0
    ]


def _warnings(ops: Table, roofs: Roofs | None) -> list[str]:
    """What the roofline could not do: no shapes recorded, no device peaks."""
    warnings = []
    if not any(x is not None for x in ops["input_dims"]):
        warnings.append("no input shapes recorded (profile with record_shapes=True): no op could be costed")
    if roofs is None:
        warnings.append("device peaks unknown: attainable FLOP/s and bound class not computed")
    return warnings


def roofline_table(
    tables: TraceTables,
    roofs: Roofs | None,
    top: int = 20,
    latency_fraction: float = LATENCY_FRACTION,
    chart_points: int = 200,
) -> RooflineResult:
    """Roofline rows of one trace (one rank).

    Args:
        tables: a :class:`~perfdoctor.trace.tables.TraceTables` recorded with ``record_shapes=True``.
        roofs: ceilings from :func:`roofs_from_spec` or calibration; None gives FLOPs,
            bytes and achieved FLOP/s only (bound ``"unknown"``).
        top: rows kept in ``ops`` (by time, descending).
        latency_fraction: an op achieving less than this share of its attainable FLOP/s
            (or of bandwidth, for pure data movement) is classed ``"latency"``
            (latency- or launch-bound: far below both roofs).
        chart_points: points kept in ``chart``.

    Returns:
        :class:`RooflineResult`; never raises on traces without shapes (everything
        then lands in ``uncosted`` with the reason).
    """
    ops, names = tables.cpu_ops, tables.name_array()
    costs = _costs(tables)
    costed = np.fromiter((isinstance(c, OpCost) for c in costs), bool, len(costs))
    is_aten = np.fromiter((names[n].startswith("aten::") for n in ops["name_id"].tolist()), bool, len(ops))
    parent = op_parents(ops)
    chosen, topmost = _resolve(ops, parent, costed, is_aten)
    times = _op_times(tables, parent, chosen, topmost)
    groups = _op_groups(tables, costs, times)
    rows = sorted((_row(k, g, roofs, latency_fraction) for k, g in groups.items()), key=lambda r: -r.time_us)
    # a row above its roof has a wrong count or roof: shown with the reason, in no aggregate (its time is
    # uncosted, so MFU's op-level sum knows what it lacks)
    trusted = [r for r in rows if r.bound != ABOVE_ROOF]
    unc_rows = _uncosted_rows(times.uncosted, costs, names, ops, [r for r in rows if r.bound == ABOVE_ROOF])
    return RooflineResult(
        ops=rows[:top],
        uncosted=unc_rows,
        chart=_chart(trusted, chart_points),
        roofs=roofs,
        time_basis=times.basis,
        costed_time_us=float(sum(r.time_us for r in trusted)),
        uncosted_time_us=float(sum(u.time_us for u in unc_rows)),
        total_flops=float(sum(r.flops for r in trusted)),
        latency_fraction=latency_fraction,
        n_groups=len(rows),
        warnings=_warnings(ops, roofs),
    )


def _uncosted_rows(
    unc: dict[UncostedKey, float],
    costs: list[OpCost | Uncosted],
    names: np.ndarray,
    ops: Table,
    above: list[RooflineRow],
) -> list[UncostedOp]:
    """The uncosted groups and the rows above their roofs merged by name (µs), longest first."""
    merged: dict[tuple[str, str] | str, UncostedOp] = {}
    for r in above:  # costed, but the count or the roof is wrong for it: its time counts as uncosted
        m = merged.setdefault(
            (ABOVE_ROOF, r.name),
            UncostedOp(name=r.name, count=0, time_us=0.0, reason="achieved above its roof (see its roofline row)"),
        )
        m.count += r.count
        m.time_us += r.time_us
    for (_, ref), t_us in unc.items():
        if isinstance(ref, int):  # ("op", its index); else ("kernel", its name)
            name = str(names[ops["name_id"][ref]])
            c = costs[ref]
            reason = c.reason if isinstance(c, Uncosted) else "no costable op"
        else:
            name, reason = ref, "kernel not linked to any recorded op"
        m = merged.setdefault(name, UncostedOp(name=name, count=0, time_us=0.0, reason=reason))
        m.count += 1
        m.time_us += t_us
    return sorted(merged.values(), key=lambda m: -m.time_us)
