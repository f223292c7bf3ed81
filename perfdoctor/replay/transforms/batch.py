"""A larger batch: fixed per-step costs amortised over more samples, per-sample costs scaling with the batch."""

from __future__ import annotations

import numpy as np

from perfdoctor.replay.rank import RankReplay
from perfdoctor.replay.simulate import Intervals, Scenario
from perfdoctor.replay.transforms import WhatIf
from perfdoctor.replay.transforms.host import DATALOADER, OPTIMIZER_STEP, _named
from perfdoctor.trace.tables import TraceTables


def larger_batch(
    rr: RankReplay,
    tables: TraceTables,
    growth: float,
    cpu_ops_per_sample: bool = True,
    rows: int = 0,
    per_sample: dict[str, float] | None = None,
) -> WhatIf:
    """A ``growth``× larger batch, expressed per step of today's batch (the replayed step ÷ ``growth``).

    Max-plus schedules scale linearly, so the larger step ÷ growth is the replay in which per-sample costs keep
    their time and fixed per-step costs shrink by 1/growth. GPU trace: the host's time outside DataLoader fetches
    (Python, op dispatch and launches: one per op whatever the batch) and the optimizer's kernels (their work
    follows the parameter count) shrink; the DataLoader fetch (``__getitem__`` per sample) and every other kernel
    (its work follows the batch; a latency-bound small kernel would grow less, so this is conservative) keep
    theirs. CPU-only trace (no device activity): the ops execute on the host, so the host time inside ops (their
    compute follows the batch, as a kernel's does) keeps its time, except the optimizer's ops (inside
    ``Optimizer.step#``: their work follows the parameter count); the host time outside any op (Python, dispatch
    gaps) and outside fetches shrinks. With ``rows`` (the GEMMs' row count today: the batch dimension) each op's
    time instead grows as its roofline time does (:func:`perfdoctor.replay.transforms.cpu_fusion.batch_growth_cuts`:
    FLOPs and the bytes of its tensors with a batch dimension grow, its weights' bytes do not, at the best rates the
    trace's ops reached), so a GEMM with few rows that waits on reading its weights grows less than the batch; with
    ``per_sample`` (``run.json``'s ``batch_probe``: the share of today's GEMM time a sample keeps at each probed
    growth, measured on the run's machine, :func:`perfdoctor.capture.op_probe.probe_batch`) the GEMMs with a batch
    dimension keep that share instead (interpolated in log growth). An
    op's dispatch overhead is inside it, so this is still a lower bound for small ops; ``cpu_ops_per_sample=False``
    gives the upper bound (every op's time independent of the batch, the GPU rule).
    Source: the recorded graph; the split into fixed and per-sample costs stated above (a 4-layer 1024-wide MLP on
    1 CPU thread, batch 8 → 64 per 8 samples, ``benchmarks/cpu_pairs.py`` on a 2-core VM, 2026-12-07: predicted
    24.7 and 29.0 ms with the runner's batch probe against 25.4 and 32.2 ms measured; without the probe's shares
    the roofline at the trace's best rates predicted 22.4 and 22.8 ms against 28.9 and 32.6).
    """
    from perfdoctor.replay.kernel_classes import kernel_classes
    from perfdoctor.trace import intervals as iv

    g = rr.graph
    keep = 1.0 / max(growth, 1.0)
    pid = rr.windows.pid
    rt = tables.runtime
    m = (rt["pid"] == pid) if (len(rt) and pid >= 0) else np.ones(len(rt), dtype=bool)
    fetch = _named(tables, DATALOADER, pid)
    opt = _named(tables, OPTIMIZER_STEP, pid)
    cpu_only = cpu_ops_per_sample and not tables.has_device_activity
    per_sample_ops = iv.subtract(_op_union(tables, pid), opt) if cpu_only else iv.EMPTY
    bounds = [rt["ts_us"][m], rt["end_us"][m], rr.windows.host_start_us, rr.windows.host_end_us, fetch[0], fetch[1]]
    if cpu_only:  # stretches never straddle an op's edge, so cutting a stretch's tail cuts only non-op time
        bounds += [per_sample_ops[0], per_sample_ops[1]]
    pts = np.sort(np.concatenate(bounds))
    # cut (1 - 1/growth) of every host stretch between two consecutive boundaries, outside fetches (CPU: and ops)
    s, e = pts[:-1], pts[1:]
    ok = e > s
    cut: Intervals = iv.union(s[ok] + (e[ok] - s[ok]) * keep, e[ok])
    cut = iv.subtract(cut, iv.union_of(fetch, per_sample_ops))
    inside = iv.union(rr.windows.host_start_us, rr.windows.host_end_us)
    cut = iv.intersect(cut, inside)
    roofline = ""
    if cpu_only and rows > 0:
        from perfdoctor.replay.transforms.cpu_fusion import batch_growth_cuts

        gemm_keep = measured_keep(per_sample, growth)
        op_cuts, rates = batch_growth_cuts(tables, pid, rows, growth, inside, opt, gemm_keep)
        cut = iv.union_of(cut, op_cuts)
        gemms = (
            f"the GEMMs with a {rows}-row batch dimension keep {gemm_keep:.2f} of their time per sample (measured by "
            "the runner on this machine at the recorded shapes and larger batches), the other ops' time grows"
            if gemm_keep is not None
            else "each op's time grows"
        )
        roofline = (
            f", except that {gemms} as its roofline time does ({rates.flop_per_us / 1e3:.1f} GFLOP/s, "
            f"{rates.bytes_per_us / 1e3:.1f} GB/s: the best rates of the trace's ops; the FLOPs and the bytes of "
            f"tensors with a {rows}-row batch dimension grow, weights' bytes do not)"
        )
    cat, _, _ = kernel_classes(tables, rr.graph)
    lt = g.act_launch_ts_us
    j = np.searchsorted(opt[0], lt, side="right") - 1 if opt[0].size else np.full(g.n_act, -1)
    in_opt = (j >= 0) & (lt < opt[1][np.maximum(j, 0)]) if opt[0].size else np.zeros(g.n_act, bool)
    dur = np.where(in_opt | (cat == "optimizer"), g.act_dur_us * keep, g.act_dur_us)
    what = (
        "host time outside ops and DataLoader fetches (Python, dispatch gaps) and the optimizer's ops are per-step "
        "costs (÷ growth); the other ops' time (their compute follows the batch on a CPU) and fetches are per-sample"
        + roofline
        if cpu_only
        else "host time outside DataLoader and the optimizer's kernels are per-step costs (÷ growth); fetches and "
        "other kernels are per-sample"
    )
    return WhatIf(
        "larger-batch",
        Scenario("larger-batch", act_dur_us=dur, host_cut={pid: cut}, peers_move=True),
        f"a {growth:.1f}× larger batch, per step of today's batch: {what}",
        "replay of the recorded graph (max-plus schedules scale linearly)",
    )


def measured_keep(per_sample: dict[str, float] | None, growth: float) -> float | None:
    """The share of today's GEMM time a sample keeps at ``growth`` from a ``batch_probe``'s ``per_sample``
    (growth → share): linear in log growth between the probed growths (share 1 at growth 1), the last share beyond
    them; None without a probe."""
    if not per_sample or growth <= 1.0:
        return None
    pts = sorted((float(g), float(v)) for g, v in per_sample.items() if float(g) > 1.0 and float(v) > 0)
    if not pts:
        return None
    xs = np.log([1.0] + [g for g, _ in pts])
    ys = np.array([1.0] + [v for _, v in pts])
    return float(np.interp(np.log(growth), xs, ys))


def fixed_cost_words(tables: TraceTables) -> str:
    """What the larger-batch what-if treats as fixed per step (PD201's message), for ``tables``' kind of trace."""
    if tables.has_device_activity:
        return "host time outside DataLoader fetches and the optimizer's kernels"
    return "host time outside ops and DataLoader fetches, and the optimizer's ops"


def _op_union(tables: TraceTables, pid: int) -> Intervals:
    """Union of the ``cpu_ops`` intervals (µs) of process ``pid`` (every process when ``pid`` < 0)."""
    from perfdoctor.trace import intervals as iv

    ops = tables.tables["cpu_ops"]
    if not len(ops):
        return iv.EMPTY
    m = (ops["pid"] == pid) if pid >= 0 else np.ones(len(ops), dtype=bool)
    return iv.union(ops["ts_us"][m], ops["end_us"][m])
