"""PD103 host-launch-bound: the device waits for the host to launch work, and kernels
finish sooner than the host launches the next one.

Idle time comes from the breakdown's ``host_launch_bound`` cause (the host is
busy in ops or runtime calls but has queued nothing), minus the idle inside
``Optimizer.step`` (PD205's) and the idle while the host sits in a blocking
runtime call such as ``cudaFree`` (not launch overhead). A kernel is *short* when it runs for less time
than the host takes from its launch to the next kernel launch (the launch
call itself plus the Python, dispatcher and op overhead in between): a
stream of such kernels drains the queue faster than the host fills it.
Comparing with the launch call alone (``cudaLaunchKernel``, ~5–10 µs) misses
the common case where the op overhead between launches dominates (A100 DDP
trace: median kernel 16 µs, launch call 10 µs, but 172 µs between launches).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from perfdoctor.analysis.timing import host
from perfdoctor.checks.after import passes
from perfdoctor.checks.common import cold_reason, name_line, pct, replay_fields, replayed_estimate, steps_over
from perfdoctor.checks.context import Outcome, RankContext, passed, skipped
from perfdoctor.findings import Evidence, Hit
from perfdoctor.replay.transforms import WhatIf, combine
from perfdoctor.replay.transforms.host import cuda_graphs, graph_api, prefetch_dataloader
from perfdoctor.trace import intervals as iv
from perfdoctor.trace.join import launch_rows
from perfdoctor.vocab import IdleCause, idle_label

CODE = "PD103"
METRICS = {
    "launch_idle_us": "mean µs per step the device idles while the host is busy: the breakdown's host_launch_bound "
    "idle less the idle inside Optimizer.step and blocking runtime calls",
    "launch_idle_pct": "launch_idle_us as % of the mean step time",
    "saving_us": "mean µs per step the replayed step gets shorter with its launches in one CUDA graph",
    "saving_pct": "saving_us as % of the mean step time",
    "short_kernel_share": "fraction of kernels shorter than the host time from their launch to the next launch",
    "kernels_per_step": "kernels per step",
    "in_stream_share": "share of the device idle while the host is busy that lies between a step's first kernel "
    "launch and its last kernel's end",
}

# the words of a ROCm trace (HIP graphs) in its fix: fix_rocm of the TOML
ADVICE = ("rocm",)

# every field a hit gives the TOML message and headline (its evidence values and fields; checked at load)
MESSAGE_FIELDS = (
    "graph_api",
    "launch_idle_ms",
    "launch_idle_source",
    "median_kernel_us",
    "median_launch_gap_us",
    "median_launch_us",
    "short_kernel_pct",
    "recorded_ms",
    "replay_base",
    "saving_parts",
    "launch_idle_pct",
    "kernels_per_step",
)


@dataclass(frozen=True)
class Thresholds:
    """``[thresholds]`` of rules/PD103.toml: names and types checked when the catalogue loads."""

    min_saving_pct: float
    min_short_kernel_share: float
    min_in_stream_share: float


def check(ctx: RankContext) -> Outcome:
    th = ctx.thresholds(Thresholds)
    if reason := cold_reason(ctx):
        return skipped(reason)
    launch_idle, idle = _launch_idle(ctx)
    replayed, per_step, method, base, whatifs = _graphs_saving(ctx)
    k = ctx.kernels()
    known = (k.step >= 0) & ~np.isnan(k.launch_gap_us)
    short = known & (k.dur_us < k.launch_gap_us)
    share = float(short.sum() / known.sum()) if known.any() else 0.0
    launch_idle_us = float(idle.mean())
    saving = max(replayed, 0.0)
    metrics = {
        "launch_idle_us": launch_idle_us,
        "launch_idle_pct": pct(launch_idle_us, ctx.step_us),
        "saving_us": saving,
        "saving_pct": pct(saving, ctx.base_step_us),
        "short_kernel_share": share,
        "kernels_per_step": float((k.step >= 0).sum() / max(ctx.n_steps, 1)),
    }
    # judged on shares of time and of kernels, never on a kernel count: a one-layer model with 16 kernels per
    # step can idle half of it waiting for launches; but idle before the step's first launch or after its last
    # kernel is host work of another kind, not a launch rate the device cannot keep up with
    metrics["in_stream_share"] = _in_stream_share(ctx, k)
    if (
        min(metrics["saving_pct"], metrics["launch_idle_pct"]) < th.min_saving_pct
        or share < th.min_short_kernel_share
        or metrics["in_stream_share"] < th.min_in_stream_share
    ):
        return passed(**metrics)
    ev = Evidence(
        values={
            "launch_idle_ms": launch_idle_us / 1000,
            "launch_idle_pct": metrics["launch_idle_pct"],
            "short_kernel_pct": 100 * share,
            "kernels_per_step": metrics["kernels_per_step"],
            "median_kernel_us": float(np.median(k.dur_us[known])),
            "median_launch_gap_us": float(np.median(k.launch_gap_us[known])),
            "median_launch_us": float(np.median(k.launch_dur_us[known])),
            "breakdown_launch_idle_ms": float(launch_idle.mean()) / 1000,
            "launch_idle_source": _source_text(float(launch_idle.mean()), launch_idle_us),
            "graph_api": graph_api(ctx.tables),
        },
        steps=steps_over(
            np.clip(per_step, 0.0, None), ctx.per_step(lambda s: s.dur_us), th.min_saving_pct, ctx.step_numbers
        ),
    )
    _name_short_launches(ctx, ev, short)
    fields = _message_fields(ctx, ev, base, whatifs)
    advice = ctx.advice("rocm") if ev.values["graph_api"] == "HIP" else {}
    hit = Hit(
        evidence=ev,
        estimate=replayed_estimate(saving, method, fields),
        fields=fields,
        advice=advice,
        builds_on=("PD101",) if base is not None else (),
    )
    return Outcome(metrics=metrics, hit=hit)


def _launch_idle(ctx: RankContext) -> tuple[np.ndarray, np.ndarray]:
    """Per analysed step (µs): the breakdown's launch-bound idle, and that idle less what is not launch overhead
    (idle inside Optimizer.step is PD205's; idle while the host sits in a blocking runtime call such as cudaFree or
    cudaMalloc is PD501's when it recurs)."""
    ws, we = ctx.windows()
    launch_idle = ctx.per_step(lambda s: s.idle_causes_us.get("host_launch_bound", 0.0))
    not_launch = iv.union_of(host.named(ctx.tables, host.OPTIMIZER_STEP), host.blocking_runtime_calls(ctx.tables))
    opt_idle = iv.per_window(iv.intersect(ctx.device_gaps(), not_launch), ws, we)
    return launch_idle, np.maximum(launch_idle - opt_idle, 0.0)


def _name_short_launches(ctx: RankContext, ev: Evidence, short: np.ndarray) -> None:
    """Name in ``ev`` the module whose forward launches the most ``short`` kernels (a mask over
    :meth:`RankContext.kernels`), and the line of it."""
    tab = ctx.tables.kernels
    launches = launch_rows(ctx.tables, "kernels")[tab["device"] == ctx.device.device] if len(tab) else np.empty(0)
    short_launch = launches[short] if launches.size == short.size else np.empty(0, dtype=np.int64)
    name_line(ev, ctx.tables, "runtime", short_launch[short_launch >= 0], by_module=True)


def _message_fields(
    ctx: RankContext, ev: Evidence, base: tuple[float, float] | None, whatifs: tuple[WhatIf, WhatIf | None]
) -> dict[str, float | str]:
    """The hit's fields: the replay's, where the saving comes from (read off the replays it is the difference of;
    it can exceed the launch idle: a captured graph also runs none of the Python between launches, PD106's idle),
    and with a ``base`` (PD101's prefetch, :func:`_graphs_saving`) the step the graphs start from."""
    parts = ctx.saving_parts(*whatifs)
    fields: dict[str, float | str] = {
        **replay_fields(ctx),
        "replay_base": "",
        "saving_parts": parts.text(("host_launch_bound", "python")),
    }
    if base is not None:  # the step the graphs start from: batches prefetched
        ev.values["saving_alone_ms"] = base[1] / 1000
        fields["recorded_ms"] = base[0] / 1000
        fields["replay_base"] = (
            f" on top of prefetched DataLoader batches (PD101's fix, with which it replays at {base[0] / 1000:.1f} "
            f"ms; graphs alone would save {base[1] / 1000:.1f} ms, most of it by hiding the DataLoader fetch "
            "behind device work)"
        )
    return fields


def _source_text(breakdown_us: float, launch_idle_us: float) -> str:
    """How the message's launch idle relates to the breakdown's row (µs in, text out): the row itself, or the row
    less what this rule leaves to others (ResNet50 V100 nw0: 16.36 ms in the row, 16.17 ms here)."""
    row = f'the breakdown\'s "{idle_label(IdleCause.HOST_LAUNCH_BOUND)}" row'
    left_out = breakdown_us - launch_idle_us
    if left_out < 5.0:  # under 0.005 ms: the two agree at the message's precision
        return row
    return (
        f"{row}, {breakdown_us / 1000:.2f} ms, less {left_out / 1000:.2f} ms inside Optimizer.step (PD205's) or "
        "blocking runtime calls such as cudaFree"
    )


def _graphs_saving(
    ctx: RankContext,
) -> tuple[float, np.ndarray, str, tuple[float, float] | None, tuple[WhatIf, WhatIf | None]]:
    """The CUDA-graphs what-if's replayed saving ``(mean µs, per step µs, method, base, (graphs, base what-if))``.

    With DataLoader fetches on the step's process, it is measured on top of prefetched batches: graphs free the
    host, which then fetches the next batch while the device computes, so replayed alone they also remove
    DataLoader time, which is not launch overhead and is PD101's (ResNet50 V100, num_workers=0: 63.8 ms alone,
    16.2 ms on top of prefetching = the 16.2 ms of measured launch idle; with num_workers=4 the recording says
    29.2 ms). ``base``: (mean replayed step with prefetched batches, saving of graphs alone) µs, or None. The
    what-if the rank's fix-all and the savings after this one replay (``RankReplay.whatifs``) is then the base and
    the graphs together, so that they add up: the fix-all's saving is the base's plus the listed savings
    (kineto2020 V100 nw4 fix-all 69.04 ms without the base vs 68.10 ms chaining the findings).
    """
    rr, t = ctx.replay(), ctx.tables
    graphs = cuda_graphs(rr, t)
    dl = prefetch_dataloader(rr, t)
    if not _prefetch_reported(ctx) or not dl.changes_anything:
        # PD101 not a finding here (not selected, under its threshold, no fetch): the graphs alone, whose fix-all
        # what-if holds no prefetch that no finding recommends (`--ignore PD101` still replayed
        # it; on the DLRM ranks, where PD101 does not fire, the message said "graphs alone would save 9.4 ms, most
        # of it by hiding the DataLoader fetch" of a prefetch that moved no step)
        saving, per, method = ctx.replayed_saving(graphs)
        return saving, per, method, None, (graphs, None)
    alone = float(np.mean(rr.fixed_step_times([]) - rr.fixed_step_times([graphs])))
    saving, per, method = ctx.replayed_saving(graphs, after=dl, after_text="with prefetched DataLoader batches")
    if ctx.spec is not None:  # the fix-all and the savings after it replay the base this saving is measured on
        g = rr.graph
        rr.whatifs[ctx.spec.code] = combine(
            "prefetch-dataloader + cuda-graphs", [dl, graphs], g.n_act, g.n_blk, g.act_dur_us
        )
    return saving, per, method, (float(np.mean(rr.fixed_step_times([dl]))), alone), (graphs, dl)


def _prefetch_reported(ctx: RankContext) -> bool:
    """Whether PD101 (DataLoader starvation), which runs before this rule, fired on this rank with a replayed
    saving that passes its threshold at the rank's step: the prefetch is then a finding's fix to build on."""
    prefetch = ctx.built_on("PD101")
    hit = prefetch.hit if prefetch is not None else None
    return hit is not None and hit.estimate is not None and hit.estimate.saving_us > 0 and passes(hit, ctx.base_step_us)


def _in_stream_share(ctx: RankContext, k: object) -> float:
    """Share of host-busy device idle inside each step's launch stream (first launch .. last kernel end)."""
    ws, we = ctx.windows()
    busy_idle = iv.intersect(ctx.device_gaps(), host.busy(ctx.tables, ctx.steps.pid if ctx.steps.pid >= 0 else None))
    other_causes = iv.union_of(
        host.dataloader(ctx.tables),
        host.synchronization(ctx.tables),
        host.named(ctx.tables, host.OPTIMIZER_STEP),
        host.blocking_runtime_calls(ctx.tables),
    )
    busy_idle = iv.subtract(busy_idle, other_causes)
    step, launch, end = k.step, k.launch_us, k.ts_us + k.dur_us  # type: ignore[attr-defined]
    ok = (step >= 0) & ~np.isnan(launch)
    if not ok.any() or busy_idle[0].size == 0:
        return 0.0
    lo = np.full(ws.size, np.inf)
    hi = np.full(ws.size, -np.inf)
    np.minimum.at(lo, step[ok], launch[ok])
    np.maximum.at(hi, step[ok], end[ok])
    has = lo < hi
    streams = iv.union(lo[has], hi[has])
    total = iv.total(iv.intersect(busy_idle, iv.union(ws, we)))
    return iv.total(iv.intersect(busy_idle, streams)) / total if total > 0 else 0.0
