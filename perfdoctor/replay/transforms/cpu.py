"""Transformations of CPU-only (host-only) graphs: Python outside ops trimmed, threads fitted to the cores, and the
statement that removing a sync saves nothing there.

A CPU-only graph has no device activity: a step is its host timeline on the step-owning process, so each fix is a
host cut (:class:`~perfdoctor.replay.simulate.Scenario` ``host_cut``) that the replay squeezes out of the steps.
A prefetched DataLoader on CPU is :func:`perfdoctor.replay.transforms.host.prefetch_dataloader`, unchanged.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from perfdoctor.replay.rank import RankReplay
from perfdoctor.replay.simulate import Intervals, Scenario
from perfdoctor.replay.transforms import WhatIf
from perfdoctor.trace import intervals as iv
from perfdoctor.trace.tables import TraceTables


def step_span(rr: RankReplay) -> Intervals:
    """The analysed steps' windows on the host as one interval set (µs): on a host-only graph each window runs
    from the previous window's end (the first from the recorded first start) to its host annotation's end, as
    :mod:`perfdoctor.analysis.steps.steps` tiles them."""
    w = rr.windows
    if w.host_end_us.size == 0:
        return iv.EMPTY
    if w.whole_trace:
        return iv.union(w.host_start_us, w.host_end_us)
    ends = np.maximum.accumulate(w.host_end_us)
    return iv.union(np.concatenate([[w.first_start_us], ends[:-1]]), ends)


def _busy(tables: TraceTables, pid: int) -> dict[str, Intervals]:
    from perfdoctor.analysis.timing.cpu_breakdown import host_unions

    return host_unions(tables, pid)


def outside_ops(rr: RankReplay, tables: TraceTables) -> Intervals:
    """The stretches of the analysed steps with no op open on the step's process (µs intervals): PD105's "Python
    outside any op", the complement of :func:`perfdoctor.analysis.timing.cpu_breakdown.host_unions`."""
    return iv.subtract(step_span(rr), iv.union_of(*_busy(tables, rr.windows.pid).values()))


def median_gap_us(gaps: Intervals) -> float:
    """The median length of ``gaps`` (µs; 0 when there is none): the Python that dispatches each op."""
    length = gaps[1] - gaps[0]
    return float(np.median(length)) if length.size else 0.0


def trim_python_outside_ops(rr: RankReplay, tables: TraceTables, exclude: Intervals = iv.EMPTY) -> WhatIf:
    """Every stretch of a step with no op open on the step's process (:func:`outside_ops`) shrinks to the median
    such stretch of the analysed steps, ``residual_us``; shorter ones keep their time. ``exclude`` (µs intervals):
    host time another what-if models (loops of small ops, :mod:`perfdoctor.replay.transforms.cpu_fusion`), not cut.

    Assumption: the per-step bookkeeping (metrics in Python, logging, sleeps, I/O) leaves the loop, while the
    Python that dispatches each op (the typical gap between two ops, measured here as the median gap) stays.
    Source: the recorded host timeline (µs); the residual is this trace's median gap between ops.
    """
    pid = rr.windows.pid
    gaps = outside_ops(rr, tables)
    residual = median_gap_us(gaps)
    long = (gaps[1] - gaps[0]) > residual
    cut = iv.subtract((gaps[0][long] + residual, gaps[1][long]), exclude)
    return WhatIf(
        "trim-python-outside-ops",
        Scenario("trim-python-outside-ops", host_cut={pid: cut} if cut[0].size else {}),
        f"the Python outside ops goes: each of the {int(long.sum())} gap(s) between ops longer than the median "
        f"gap ({residual:.0f} µs, the per-op dispatch that stays) shrinks to it",
        "replay of the recorded host timeline (CPU-only trace)",
    )


def fit_threads_to_cores(
    rr: RankReplay, tables: TraceTables, busy_threads: int, cores: int, measured: dict[str, Any] | None = None
) -> WhatIf:
    """Op time on the step's process shrinks by the oversubscription ``r = busy_threads / cores`` (when above 1):
    every stretch where an op (or ``Optimizer.step``) is open, outside DataLoader fetches and host collectives,
    keeps ``1/r`` of its recorded time.

    ``busy_threads``: intra-op threads of every process on the machine plus DataLoader workers, as PD104 counts
    them from ``run.json`` (each rank's ``torch.get_num_threads()``, ``dataloader_workers``); ``cores``: logical
    CPUs (``os.cpu_count()``). Assumption: with ``r`` threads per core the OS time-slices them and a parallel op
    waits at its barrier for its last, descheduled thread, so each op runs up to ``r``× its time at one thread per
    core; the fix gives each process ``cores / processes`` threads. An upper bound: ops below the intra-op grain
    size run on one thread and gain less, and a fetch (``__getitem__``, sleeps, I/O) or a wait for peers gains
    nothing. Source: PyTorch CPU threading notes (one intra-op pool per process, sized to all cores); the ops'
    recorded times.

    ``measured``: the run's ``thread_probe`` (:func:`perfdoctor.capture.op_probe.probe_threads`: the dominant ops
    of each kind timed on this machine at the recorded thread count and at the cores' fair share, on their recorded
    inputs). GEMM time (the matmul, convolution and attention ops) then keeps the GEMMs' measured
    ``suggested_over_recorded``, the rest of the op time the other ops' (where the probe timed none of a kind, the
    other kind's; a run.json without ``kinds``: its one ratio for all), in place of ``1/r``.
    """
    pid = rr.windows.pid
    ratio = busy_threads / cores if cores > 0 else 1.0
    unions = _busy(tables, pid)
    ops = iv.union_of(*(v for k, v in unions.items() if k not in ("dataloader", "host_collective")))
    ops = iv.subtract(ops, iv.union_of(unions["dataloader"], unions["host_collective"]))
    ops = iv.intersect(ops, step_span(rr))
    s, e = ops
    if measured is not None:
        kinds = _kind_keeps(measured)
        gemm = iv.intersect(ops, iv.union_of(*(unions[k] for k in GEMM_CATEGORIES)))
        parts = {"gemm": gemm, "other": iv.subtract(ops, gemm)}
        cut = iv.union_of(*(_keep_first(parts[k], kinds[k]) for k in parts))
        ops_text = "; ".join(
            f"{o['name']}: {o['at_recorded_us']:.0f} → {o['at_suggested_us']:.0f} µs" for o in measured.get("ops", [])
        )
        n = max(int(rr.recorded_step_us.size), 1)
        share = {k: float((v[1] - v[0]).sum()) / n for k, v in parts.items()}
        return WhatIf(
            "fit-threads-to-cores",
            Scenario("fit-threads-to-cores", host_cut={pid: cut} if cut[0].size else {}),
            f"{busy_threads} busy threads on {cores} cores ({ratio:.2f} per core) cut to "
            f"{measured['suggested_threads']} per process: GEMM time ({share['gemm'] / 1e3:.1f} ms per analysed "
            f"step) keeps {kinds['gemm']:.2f} of it and the other op time ({share['other'] / 1e3:.1f} ms: elementwise, "
            f"optimizer, autograd) {kinds['other']:.2f}, the ratios measured on this machine after the run (the "
            f"dominant ops of each kind at {measured['recorded_threads']} vs {measured['suggested_threads']} "
            f"threads, recorded inputs: {ops_text})",
            "thread and core counts from run.json; the thread probe of perfdoctor profile; op times from the trace",
        )
    keep = 1.0 / ratio if ratio > 1.0 else 1.0
    cut = iv.union(s + (e - s) * keep, e) if ratio > 1.0 else iv.EMPTY
    return WhatIf(
        "fit-threads-to-cores",
        Scenario("fit-threads-to-cores", host_cut={pid: cut} if cut[0].size else {}),
        f"{busy_threads} busy threads on {cores} cores ({ratio:.2f} per core) cut to one per core: every op's time "
        f"÷ {max(ratio, 1.0):.2f} (an upper bound: single-threaded ops gain less; an estimate from the counts, "
        "not measured: `perfdoctor profile` times the dominant ops at both thread counts and replaces it)",
        "PyTorch CPU threading notes; thread and core counts from run.json; op times from the trace",
    )


# the host op categories (perfdoctor.analysis.timing.cpu_breakdown) timed as GEMMs by the thread probe
GEMM_CATEGORIES = ("matmul", "conv", "attention")


def _kind_keeps(measured: dict[str, Any]) -> dict[str, float]:
    """The share of its time each kind of op keeps (``gemm``, ``other``; at most 1: a slower fit saves nothing) from
    a ``thread_probe``: each kind's measured ratio, a kind the probe did not time taking the other's, a probe
    without ``kinds`` (an older run.json) its one ``suggested_over_recorded`` for both."""
    overall = float(measured["suggested_over_recorded"])
    by_kind = measured.get("kinds") or {}
    got = {k: float(v["suggested_over_recorded"]) for k, v in by_kind.items() if k in ("gemm", "other")}
    gemm = got.get("gemm", got.get("other", overall))
    other = got.get("other", gemm)
    return {"gemm": min(gemm, 1.0), "other": min(other, 1.0)}


def _keep_first(spans: Intervals, keep: float) -> Intervals:
    """The part of each span after its first ``keep`` share (µs intervals): what a what-if cuts to keep that share."""
    s, e = spans
    return iv.union(s + (e - s) * keep, e) if keep < 1.0 and s.size else iv.EMPTY


def fp32_instead_of_bf16(rr: RankReplay, gemm: Intervals, casts: Intervals, ratio: float, how: str) -> WhatIf:
    """bf16 autocast dropped on a CPU where bf16 GEMMs run ``ratio`` (≥ 1) × their fp32 time: autocast's casts
    (``casts``, µs intervals) go and each bf16 GEMM (``gemm``) keeps ``1 / ratio`` of its time, on the step's
    process. ``how``: where the ratio comes from (measured on this machine, or the spec's assumption), stated.

    Assumption: the rest of the step (elementwise ops, the optimizer, Python) runs as recorded in fp32. Source:
    the recorded host timeline; the ratio as ``how`` says.
    """
    pid = rr.windows.pid
    s, e = gemm
    keep = 1.0 / ratio if ratio > 1.0 else 1.0
    cut = iv.intersect(iv.union_of(casts, iv.union(s + (e - s) * keep, e)), step_span(rr))
    return WhatIf(
        "fp32-instead-of-bf16",
        Scenario("fp32-instead-of-bf16", host_cut={pid: cut} if cut[0].size else {}),
        f"bf16 autocast dropped: its casts go and each bf16 GEMM keeps 1/{ratio:.2f} of its time ({how})",
        "replay of the recorded host timeline (CPU-only trace)",
    )


def cpu_syncs(rr: RankReplay) -> WhatIf:
    """Removing a host-device sync on a CPU-only graph changes nothing (0 µs).

    Assumption: CPU ops run synchronously on the calling thread, so ``.item()``, ``.cpu()`` and ``.tolist()`` wait
    for no queued work: there is nothing to stop waiting for. What such a call still costs (its own op, the
    printing and formatting around it) is op time and Python outside ops (PD105's), not a sync. Source: PyTorch's
    CPU execution model (eager ops run on the calling thread).
    """
    return WhatIf(
        "remove-sync",
        Scenario("remove-sync"),
        f"CPU-only trace ({rr.graph.n_act} device activities): ops run synchronously on the calling thread, so "
        ".item()/.cpu() wait for nothing and removing them as syncs saves 0 µs",
        "PyTorch CPU eager execution",
    )
