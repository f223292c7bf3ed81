"""Transformations of device kernels: tensor cores for FP32 GEMMs/convolutions, fused elementwise chains,
communication overlapped with the compute it follows."""

from __future__ import annotations

import numpy as np

from perfdoctor.replay.kernel_classes import kernel_classes
from perfdoctor.replay.rank import RankReplay
from perfdoctor.replay.simulate import Scenario
from perfdoctor.replay.transforms import WhatIf
from perfdoctor.trace.join import external_id_ranges, external_id_rows
from perfdoctor.trace.tables import TraceTables


def tensor_cores(rr: RankReplay, tables: TraceTables, spec: object) -> WhatIf:
    """Each FP32 GEMM/convolution kernel takes the roofline floor of its op at the tensor-core peak:
    ``max(FLOPs ÷ tensor peak, bytes ÷ memory bandwidth)`` (never more than its recorded time).

    FLOPs and bytes come from the op's recorded shapes (``record_shapes``; :func:`perfdoctor.analysis.work.op_flops.
    cost_op`), split over the op's FP32 GEMM kernels by their time; kernels whose op has no shapes keep their time
    (counted in the assumption). The tensor dtype is TF32 where the device has it, else its 16-bit AMP dtype.
    Source: the device's datasheet peaks (:mod:`perfdoctor.analysis.work.hardware`); a floor, so the saving is an upper
    bound for this fix.
    """
    from perfdoctor.analysis.work.op_args import OpCost
    from perfdoctor.analysis.work.op_flops import cost_op

    g = rr.graph
    cat, dt, _ = kernel_classes(tables, rr.graph)
    target = ("tf32" if getattr(spec, "has_tf32", False) else spec.best_16bit_dtype()) if spec else None  # type: ignore[attr-defined]
    peak = spec.peak(target) if spec and target else None  # type: ignore[attr-defined]
    dur = g.act_dur_us.copy()
    sel = np.isin(cat, ["matmul", "conv"]) & (dt == "fp32") & (g.act_table == 0)
    if not sel.any() or not peak:
        return WhatIf(
            "tensor-cores",
            Scenario("tensor-cores", act_dur_us=dur, peers_move=True),
            "no FP32 GEMM/convolution kernel, or no tensor-core peak for this device",
            "datasheet",
        )
    hbm = float(spec.hbm_bytes_per_s)  # type: ignore[attr-defined]
    ext = tables.kernels["external_id"][g.act_row[sel]]
    ops = tables.cpu_ops
    op_row = external_id_rows(tables, ext)  # each kernel's op (the first with its external id), -1 none
    idx = np.flatnonzero(sel)
    by_ext: dict[int, list[int]] = {}
    for j, e in enumerate(ext.tolist()):
        if op_row[j] >= 0:
            by_ext.setdefault(int(e), []).append(j)
    costed = 0
    for js in by_ext.values():
        row = int(op_row[js[0]])
        c = cost_op(tables.names[int(ops["name_id"][row])], ops["input_dims"][row], ops["input_type"][row])
        if not isinstance(c, OpCost) or c.flops <= 0:
            continue
        acts = idx[js]
        share = g.act_dur_us[acts] / max(float(g.act_dur_us[acts].sum()), 1e-9)
        floor_us = np.maximum(c.flops * share / peak, (c.bytes or 0.0) * share / hbm) * 1e6
        dur[acts] = np.minimum(dur[acts], floor_us)
        costed += len(js)
    return WhatIf(
        "tensor-cores",
        Scenario("tensor-cores", act_dur_us=dur, peers_move=True),
        f"{costed} of {int(sel.sum())} FP32 GEMM/conv kernels at their roofline floor at the {target} "
        f"tensor-core peak ({peak / 1e12:.0f} TFLOP/s; FLOPs from recorded shapes; the rest keep their time)",
        f"{getattr(spec, 'name', 'device')} datasheet peaks",
    )


def fused_elementwise(rr: RankReplay, tables: TraceTables) -> WhatIf:
    """Each run of consecutive elementwise/normalization kernels on a stream becomes one kernel: the run takes the
    time of its longest kernel (one pass over the largest tensor: the chain's memory-traffic floor when every
    kernel reads and writes tensors of about the same size), and the host time of all but the first goes: the CPU
    op that launched each (joined by external id), else its launch call. Source: operator fusion as
    torch.compile/Inductor does it (one kernel, one call per fusible chain).
    """
    from perfdoctor.replay.transforms import merge_cuts

    g = rr.graph
    cat, _, _ = kernel_classes(tables, rr.graph)
    ew = np.isin(cat, ["elementwise", "reduction_norm"])
    dur = g.act_dur_us.copy()
    prev = g.act_prev
    # a chain continues when the previous activity on the stream is elementwise too
    cont = ew & (prev >= 0) & ew[np.maximum(prev, 0)]
    head = np.where(ew & ~cont)[0]
    chain = np.full(g.n_act, -1, dtype=np.int64)
    chain[head] = head
    # propagate chain ids along streams in start order (activities are sorted by start)
    for i in np.flatnonzero(cont).tolist():
        chain[i] = chain[prev[i]]
    members = chain >= 0
    longest = np.zeros(g.n_act)
    np.maximum.at(longest, chain[members], g.act_dur_us[members])
    dur[members] = 0.0
    dur[head] = longest[head]
    rt = tables.runtime
    later = np.flatnonzero(cont & (g.act_launch >= 0))
    cut: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    if later.size and len(rt):
        rows = g.act_launch[later]
        s, e, pids = rt["ts_us"][rows].copy(), rt["end_us"][rows].copy(), rt["pid"][rows]
        ops = tables.cpu_ops
        op_row = external_id_rows(tables, rt["external_id"][rows])  # the launch's op: its whole span goes
        hit = op_row >= 0
        s[hit], e[hit] = ops["ts_us"][op_row[hit]], ops["end_us"][op_row[hit]]
        for pid in np.unique(pids).tolist():
            m = pids == pid
            cut = merge_cuts(cut, {int(pid): (s[m], e[m])})
    n_chains = int((np.bincount(chain[members], minlength=g.n_act) > 1).sum()) if members.any() else 0
    return WhatIf(
        "fused-elementwise",
        Scenario("fused-elementwise", act_dur_us=dur, host_cut=cut, peers_move=True),
        f"{n_chains} chains of back-to-back elementwise/norm kernels fused: each takes its longest kernel's "
        "time, and its other launch calls go",
        "operator fusion (torch.compile / Inductor)",
    )


def overlap_communication(rr: RankReplay, tables: TraceTables) -> WhatIf:
    """Compute no longer waits for communication: every cross-stream wait of a non-communication activity on a
    communication kernel is dropped, so collectives run concurrently with the compute issued after them.

    Assumption: the data a collective produces is not needed by the compute right after it (its consumer can be
    scheduled later, as bucketed DDP all-reduce or a reordered MoE all-to-all does). Source: DDP gradient bucketing;
    torch.compile/FX reordering of collectives.
    """
    g = rr.graph
    cat, _, _ = kernel_classes(tables, rr.graph)
    comm = cat == "communication"
    drop = (g.act_dep >= 0) & comm[np.maximum(g.act_dep, 0)] & ~comm
    xdrop = comm[g.xdep_src] & ~comm[g.xdep_dst]
    return WhatIf(
        "overlap-communication",
        Scenario("overlap-communication", act_dep_removed=drop, xdep_removed=xdrop, peers_move=True),
        f"{int(drop.sum() + xdrop.sum())} waits of compute on a collective dropped: communication overlaps the compute "
        "after it",
        "DDP bucketing / collective reordering",
    )


_MATMUL = ("aten::mm", "aten::addmm", "aten::bmm", "aten::matmul", "aten::baddbmm")
_REDUCTION = ("aten::sum", "aten::mean")


def _output_shape(name: str, args: object) -> tuple[int, ...] | None:
    """Output shape of a matmul (``(..., M, N)`` from its last two matrix inputs) or of a sum/mean over recorded
    dims (``Concrete Inputs``: dims, keepdim); None for any other op or when the trace does not say."""
    dims = [args.tensor(i) for i in range(len(args.dims))]  # type: ignore[attr-defined]
    if name in _MATMUL:
        mats = [d for d in dims if d is not None and len(d) >= 2][-2:]
        return (*mats[0][:-1], mats[1][-1]) if len(mats) == 2 else None
    if name in _REDUCTION and dims and dims[0]:
        red, keep = args.int_list(1), args.flag(2)  # type: ignore[attr-defined]
        if red is None or keep is None:
            return None
        n = len(dims[0])
        axes = {r % n for r in red}
        return tuple(1 if i in axes else d for i, d in enumerate(dims[0]) if keep or i not in axes)
    return None


def _kernel_op_shapes(tables: TraceTables, rr: RankReplay) -> list[tuple[int, ...] | None]:
    """Output shape (:func:`_output_shape`) of the CPU op of every activity, joined by external id (None unknown):
    the first op with the kernel's id whose shape the trace says (:func:`perfdoctor.trace.join.external_id_ranges`);
    for a collective kernel, the shape of its op's first tensor (``record_param_comms``: what it sends)."""
    from perfdoctor.analysis.work.op_args import parse_args

    g, ops, kern = rr.graph, tables.cpu_ops, tables.kernels
    out: list[tuple[int, ...] | None] = [None] * g.n_act
    if len(ops) == 0 or len(kern) == 0:
        return out
    cat, _, _ = kernel_classes(tables, rr.graph)
    acts = np.flatnonzero(g.act_table == 0)
    order, lo, hi = external_id_ranges(tables, kern["external_id"][g.act_row[acts]])  # every op with its id
    for a, first, end in zip(acts.tolist(), lo.tolist(), hi.tolist()):
        for row in order[first:end].tolist():
            args = parse_args(ops["input_dims"][row], ops["input_type"][row], ops["concrete_inputs"][row])
            if args is None:
                continue
            name = tables.names[int(ops["name_id"][row])]
            out[a] = args.tensor(0) if cat[a] == "communication" else _output_shape(name, args)
            if out[a] is not None:
                break
    return out


def issue_collectives_early(rr: RankReplay, tables: TraceTables) -> WhatIf:
    """Each collective is issued right after the op that produces its input, so the compute the program ran
    between that op and the collective (weight-gradient matmuls, bias sums) overlaps the transfer instead of
    delaying it: the collective's recorded wait for the last kernel another stream launched before it waits
    instead for the producer's last kernel. Walking back along that stream, kernels whose op's output shape is
    known (matmuls, sums over recorded dims; ``record_shapes``) and differs from the collective's input cannot
    produce it and are passed over; the first with the same shape is the producer; one of unknown shape stops
    the walk (it may be the producer: nothing moves). The recorded wait latency (the collective's start after the
    kernel it waited for) is kept after the producer. The host issues the collective right after the producer's
    launch call returns (when it was issued later; the host time of the ops in between does not move).

    Assumption: an op with another output shape does not feed the collective. Source: torch.compile/FX
    reordering of collectives (the ykcai MoE pair: each backward all_to_all moved before the weight-gradient
    matmul and bias sum that followed its input-gradient matmul).
    """
    g = rr.graph
    cat, _, _ = kernel_classes(tables, rr.graph)
    comm = cat == "communication"
    new_src = np.full(g.xdep_src.size, -1, dtype=np.int64)
    edges = np.flatnonzero(comm[g.xdep_dst] & ~comm[g.xdep_src])
    shapes = _kernel_op_shapes(tables, rr) if edges.size else []
    dep_removed = np.zeros(g.n_act, dtype=bool)
    new_gap = np.full(g.xdep_src.size, np.nan)
    for e in edges.tolist():
        c, k = int(g.xdep_dst[e]), int(g.xdep_src[e])
        passed: set[int] = set()
        while shapes[c] is not None and k >= 0 and shapes[k] is not None and shapes[k] != shapes[c]:
            passed.add(k)
            k = int(g.act_prev[k])
        if passed and k >= 0 and shapes[k] == shapes[c]:
            new_src[e] = k
            # the start-time dependency the recording suggested on a passed-over kernel goes too; its latency (the
            # recorded start after that kernel's end: the event wait) stays, after the producer instead
            if int(g.act_dep[c]) in passed:
                dep_removed[c] = True
                new_gap[e] = max(float(g.act_dep_gap_us[c]), float(g.xdep_gap_us[e]))
    moved = int(np.unique(g.xdep_dst[new_src >= 0]).size)
    launch = np.full(g.n_act, np.nan)
    rt_end = tables.runtime["end_us"] if len(tables.runtime) else np.empty(0)
    for e in np.flatnonzero(new_src >= 0).tolist():
        c, k = int(g.xdep_dst[e]), int(new_src[e])
        row = int(g.act_launch[k])
        if row >= 0 and g.act_launch[c] >= 0 and float(rt_end[row]) < float(g.act_launch_ts_us[c]):
            launch[c] = np.fmin(launch[c], float(rt_end[row]))
    return WhatIf(
        "issue-collectives-early",
        Scenario(
            "issue-collectives-early",
            xdep_src_moved=new_src,
            act_dep_removed=dep_removed,
            peers_move=True,
            act_launch_ts_us=launch if not np.isnan(launch).all() else None,
            xdep_gap_us=new_gap if not np.isnan(new_gap).all() else None,
        ),
        f"{moved} collective(s) issued right after the op producing their input (matched by shape): the "
        "matmuls/sums of other shapes launched between them overlap the transfer (assumed not to feed it); "
        f"{int((~np.isnan(launch)).sum())} of them launched right after their producer's launch call (the host "
        "time of the ops in between not moved)",
        "torch.compile/FX reordering of collectives",
    )
