"""PD102 pageable-h2d-copy: host-to-device copies from pageable memory block the host.

A copy from pageable memory is staged by the driver through a pinned bounce
buffer and PyTorch synchronizes the stream after it (``copy_`` from a
non-pinned tensor), so the host waits for the copy and cannot queue work.
Kernel-name evidence: Kineto names the copy ``Memcpy HtoD (Pageable -> Device)``.

Only the host time the copy itself explains is charged (see
:func:`perfdoctor.checks.common.copy_explained`): a sync after a tiny copy that
waits milliseconds is waiting for kernels queued before the copy, and pinning
the source would not shorten it; PD401 reports that wait.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from perfdoctor.checks.common import (
    copy_explained,
    memcpy_mask,
    pageable_h2d,
    pct,
    replay_fields,
    replayed_estimate,
    size_text,
    steps_over,
)
from perfdoctor.checks.context import Outcome, RankContext, passed, skipped
from perfdoctor.findings import Evidence, Hit
from perfdoctor.replay.transforms.copies import pinned_copies
from perfdoctor.trace import intervals as iv

CODE = "PD102"
METRICS = {
    "pageable_h2d_per_step": "pageable host-to-device copies per step",
    "pageable_h2d_bytes_per_step": "bytes copied from pageable memory per step",
    "host_blocked_us": "mean µs per step the host is blocked in those copies (and the syncs after them)",
    "copy_host_us": "mean µs per step of that blocking the copies themselves explain (size at the staging "
    "bandwidth, or the device copy time, plus a per-copy overhead)",
    "idle_us": "mean µs per step the replayed step gets shorter with pinned non_blocking copies (the saving)",
    "idle_pct": "idle_us as % of the mean step time",
}

# every field a hit gives the TOML message and headline (its evidence values and fields; checked at load)
MESSAGE_FIELDS = ("copies_per_step", "copy_host_ms", "host_blocked_ms", "size_per_step", "recorded_ms")


@dataclass(frozen=True)
class Thresholds:
    """``[thresholds]`` of rules/PD102.toml: names and types checked when the catalogue loads."""

    min_saving_pct: float
    sync_adjacency_us: float
    staging_gb_per_s: float
    per_copy_overhead_us: float


def check(ctx: RankContext) -> Outcome:
    th = ctx.thresholds(Thresholds)
    dev = ctx.device.device
    mask, blocked = pageable_h2d(ctx.tables, dev, th.sync_adjacency_us)
    if not mask.any():
        if memcpy_mask(ctx.tables, dev, "h2d", None).any():
            return skipped("the trace's host-to-device copy names do not say pageable or pinned")
        return passed(pageable_h2d_per_step=0.0, idle_us=0.0, idle_pct=0.0)
    ws, we = ctx.windows()
    mc = ctx.tables.memcpy
    in_step = ctx.step_of(mc["ts_us"][mask])
    n = np.bincount(in_step[in_step >= 0], minlength=ctx.n_steps)
    nbytes = np.bincount(in_step[in_step >= 0], weights=mc["bytes"][mask][in_step >= 0], minlength=ctx.n_steps)
    host_us = iv.per_window(blocked, ws, we)
    explained = copy_explained(ctx.tables, mask, blocked, th.staging_gb_per_s, th.per_copy_overhead_us)
    copy_us = iv.per_window(explained, ws, we)
    saving, idle, method = ctx.replayed_saving(pinned_copies(ctx.replay(), ctx.tables, np.flatnonzero(mask), blocked))
    saving, idle = max(saving, 0.0), np.maximum(idle, 0.0)
    dur = mc["dur_us"][mask]
    gbps = float(mc["bytes"][mask].sum() / dur.sum() / 1e3) if dur.sum() > 0 else 0.0
    metrics = {
        "pageable_h2d_per_step": float(n.mean()),
        "pageable_h2d_bytes_per_step": float(nbytes.mean()),
        "host_blocked_us": float(host_us.mean()),
        "copy_host_us": float(copy_us.mean()),
        "idle_us": saving,
        "idle_pct": pct(saving, ctx.base_step_us),
    }
    if saving <= 0:  # min_saving_pct is the engine's, on the report's denominator (perfdoctor.checks.after)
        return passed(**metrics)
    ev = Evidence(
        values={
            "copies_per_step": float(n.mean()),
            "bytes_per_step": float(nbytes.mean()),
            "copy_host_ms": float(copy_us.mean()) / 1000,
            "host_blocked_ms": float(host_us.mean()) / 1000,
            "copy_gb_per_s": gbps,
        },
        steps=steps_over(idle, ctx.per_step(lambda s: s.dur_us), th.min_saving_pct, ctx.step_numbers),
    )
    fields = {"size_per_step": size_text(float(nbytes.mean())), **replay_fields(ctx)}
    hit = Hit(
        min_saving_pct=th.min_saving_pct,
        evidence=ev,
        estimate=replayed_estimate(saving, method, fields),
        fields=fields,
    )
    return Outcome(metrics=metrics, hit=hit)
