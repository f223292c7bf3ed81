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
from dataclasses import asdict, dataclass, field
from typing import Any, cast

import numpy as np

from perfdoctor.analysis.hardware import DeviceSpec
from perfdoctor.analysis.kernel_dtype import is_gemm_kernel, kernel_math_dtype
from perfdoctor.analysis.op_flops import OpCost, Uncosted, cost_op
from perfdoctor.trace.join import external_id_rows, launch_rows

LATENCY_FRACTION = 0.10  # below this share of the attainable roof an op is latency/launch-bound
ABOVE_ROOF = "above_roof"  # the bound of a row achieving more than its roof: a count or a roof is wrong for it
_TENSOR_KINDS = ("matmul", "conv", "attention")


@dataclass
class Roofs:
    """The ceilings one analysis uses. ``peak_flops`` FLOP/s per dtype key,
    ``hbm_bytes_per_s`` B/s (None if unknown), ``source`` says where they come from
    (``"spec: ..."`` datasheet or ``"measured: ..."`` calibration)."""

    device: str
    peak_flops: dict[str, float]
    hbm_bytes_per_s: float | None
    source: str
    kind: str = "spec"  # "spec" or "measured"

    def peak(self, dtype: str | None) -> float | None:
        return self.peak_flops.get(dtype) if dtype else None

    def ridge_point(self, dtype: str | None) -> float | None:
        peak = self.peak(dtype)
        return None if peak is None or not self.hbm_bytes_per_s else peak / self.hbm_bytes_per_s

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def roofs_from_spec(spec: DeviceSpec) -> Roofs:
    """Datasheet roofs of ``spec`` (dense peaks)."""
    srcs = sorted({spec.source_of(d) for d in spec.peak_flops} | {spec.source_of("bandwidth")})
    return Roofs(spec.name, dict(spec.peak_flops), spec.hbm_bytes_per_s, "spec: " + "; ".join(srcs), "spec")


@dataclass
class RooflineRow:
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
    achieved_flops_per_s: float
    achieved_bytes_per_s: float | None
    pct_of_attainable: float | None
    bound: str  # compute | bandwidth | latency | unknown | above_roof (``note`` says which assumption broke)
    formula: str
    note: str = ""


@dataclass
class RooflineResult:
    """``ops``: top rows by time; ``uncosted``: [{name, count, time_us, reason}] by time;
    ``chart``: [{name, dtype, ai, achieved_flops_per_s, time_us, bound}];
    ``roofs``: Roofs.to_dict() or None; ``time_basis``: "device" or "cpu_op"."""

    ops: list[RooflineRow]
    uncosted: list[dict[str, Any]]
    chart: list[dict[str, Any]]
    roofs: dict[str, Any] | None
    time_basis: str
    costed_time_us: float
    uncosted_time_us: float
    total_flops: float
    latency_fraction: float
    n_groups: int
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def op_parents(cpu_ops: Any) -> np.ndarray:
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


def _costs(tables: Any) -> list[OpCost | Uncosted]:
    ops, names = tables.cpu_ops, tables.name_array()
    concrete = ops["concrete_inputs"] if "concrete_inputs" in ops else [None] * len(ops)
    return [
        cost_op(names[nid], d, t, c)
        for nid, d, t, c in zip(ops["name_id"].tolist(), ops["input_dims"], ops["input_type"], concrete)
    ]


def _nest_order(cpu_ops: Any) -> np.ndarray:
    """Ops by thread, start time, longest first: every parent comes before its children."""
    return np.lexsort((-cpu_ops["dur_us"], cpu_ops["ts_us"], cpu_ops["tid"], cpu_ops["pid"]))


def _resolve(
    cpu_ops: Any, parent: np.ndarray, costed: np.ndarray, is_aten: np.ndarray
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


def _enclosing_op(cpu_ops: Any, parent: np.ndarray, pid: np.ndarray, tid: np.ndarray, ts: np.ndarray) -> np.ndarray:
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


def _device_events(tables: Any, parent: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[str]]:
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
        t = getattr(tables, tname)
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


def _op_times(
    tables: Any, parent: np.ndarray, chosen: np.ndarray, top: np.ndarray
) -> tuple[dict[int, float], dict[int, dict[str, float]], dict[Any, float], str]:
    """Per chosen op: time µs and math-dtype seconds; per uncosted group: time and count."""
    ops = tables.cpu_ops
    time_by_op: dict[int, float] = defaultdict(float)
    dtype_time: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    uncosted: dict[Any, float] = defaultdict(float)
    if not tables.has_device_activity:
        parent_free = [i for i in range(len(ops)) if chosen[i] == i]
        for i in parent_free:
            time_by_op[i] += float(ops["dur_us"][i])
        for i in range(len(ops)):
            if chosen[i] < 0 and top[i] == i:
                uncosted[("op", i)] += float(ops["dur_us"][i])
        return time_by_op, dtype_time, uncosted, "cpu_op"
    op_of, dur, knames = _device_events(tables, parent)
    for k, (i, d) in enumerate(zip(op_of.tolist(), dur.tolist())):
        c = chosen[i] if i >= 0 else -1
        if c >= 0:
            time_by_op[c] += d
            if is_gemm_kernel(knames[k]):
                dtype_time[c][kernel_math_dtype(knames[k]) or "?"] += d
        elif i >= 0:
            uncosted[("op", top[i] if top[i] >= 0 else i)] += d
        else:
            uncosted[("kernel", knames[k])] += d
    return time_by_op, dtype_time, uncosted, "device"


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


def _row(key: tuple[Any, ...], g: dict[str, Any], roofs: Roofs | None, latency_fraction: float) -> RooflineRow:
    name, shapes, cost = key[0], key[1], g["cost"]
    time_s = g["time_us"] * 1e-6
    flops, nbytes = cost.flops * g["count"], None if cost.bytes is None else cost.bytes * g["count"]
    math = _math_dtype(cost, g["dtypes"])
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
        name,
        shapes,
        cost.dtype,
        math,
        cost.kind,
        g["count"],
        g["time_us"],
        flops,
        nbytes,
        ai,
        ridge,
        peak,
        attainable,
        achieved,
        achieved_bw,
        pct,
        ABOVE_ROOF if note else _bound(ai, ridge, pct, latency_fraction),
        cost.formula,
        note,
    )


def _shapes(raw: Any) -> str:
    if raw is None:
        return ""
    text = raw.decode() if isinstance(raw, (bytes, bytearray)) else str(raw)
    return " ".join(text.split())


def roofline_table(
    tables: Any, roofs: Roofs | None, top: int = 20, latency_fraction: float = LATENCY_FRACTION, chart_points: int = 200
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
    time_by_op, dtype_time, unc, basis = _op_times(tables, parent, chosen, topmost)
    groups: dict[tuple[Any, ...], dict[str, Any]] = {}
    for i, t_us in time_by_op.items():
        cost = cast(OpCost, costs[i])  # time_by_op's keys are chosen ops, and _resolve chooses only costed ones
        key = (names[ops["name_id"][i]], _shapes(ops["input_dims"][i]), cost.dtype)
        g = groups.setdefault(key, {"cost": cost, "count": 0, "time_us": 0.0, "dtypes": defaultdict(float)})
        g["count"] += 1
        g["time_us"] += t_us
        for d, v in dtype_time.get(i, {}).items():
            g["dtypes"][d] += v
    rows = sorted((_row(k, g, roofs, latency_fraction) for k, g in groups.items()), key=lambda r: -r.time_us)
    # a row above its roof has a wrong count or roof: shown with the reason, in no aggregate (its time is
    # uncosted, so MFU's op-level sum knows what it lacks)
    trusted = [r for r in rows if r.bound != ABOVE_ROOF]
    unc_rows = _uncosted_rows(unc, costs, names, ops, [r for r in rows if r.bound == ABOVE_ROOF])
    chart = [
        {
            "name": r.name,
            "dtype": r.math_dtype,
            "ai": r.arithmetic_intensity,
            "achieved_flops_per_s": r.achieved_flops_per_s,
            "time_us": r.time_us,
            "bound": r.bound,
        }
        for r in trusted[:chart_points]
        if r.arithmetic_intensity is not None and r.flops > 0
    ]
    warnings = []
    if not any(x is not None for x in ops["input_dims"]):
        warnings.append("no input shapes recorded (profile with record_shapes=True): no op could be costed")
    if roofs is None:
        warnings.append("device peaks unknown: attainable FLOP/s and bound class not computed")
    return RooflineResult(
        rows[:top],
        unc_rows,
        chart,
        roofs.to_dict() if roofs else None,
        basis,
        float(sum(r.time_us for r in trusted)),
        float(sum(u["time_us"] for u in unc_rows)),
        float(sum(r.flops for r in trusted)),
        latency_fraction,
        len(rows),
        warnings,
    )


def _uncosted_rows(
    unc: dict[Any, float], costs: list[OpCost | Uncosted], names: np.ndarray, ops: Any, above: list[RooflineRow]
) -> list[dict[str, Any]]:
    merged: dict[Any, dict[str, Any]] = {}
    for r in above:  # costed, but the count or the roof is wrong for it: its time counts as uncosted
        m = merged.setdefault(
            (ABOVE_ROOF, r.name),
            {"name": r.name, "count": 0, "time_us": 0.0, "reason": "achieved above its roof (see its roofline row)"},
        )
        m["count"] += r.count
        m["time_us"] += r.time_us
    for (kind, ref), t_us in unc.items():
        if kind == "op":
            name = names[ops["name_id"][ref]]
            c = costs[ref]
            reason = c.reason if isinstance(c, Uncosted) else "no costable op"
        else:
            name, reason = str(ref), "kernel not linked to any recorded op"
        m = merged.setdefault(name, {"name": name, "count": 0, "time_us": 0.0, "reason": reason})
        m["count"] += 1
        m["time_us"] += t_us
    return sorted(merged.values(), key=lambda m: -m["time_us"])
