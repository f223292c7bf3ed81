"""PD101 dataloader-starvation: the step waits while the host is inside DataLoader ``__next__``.

The saving is the replay's: the step's dependency graph replayed with every
``__next__`` a queue hand-off (:func:`perfdoctor.replay.transforms.host.prefetch_dataloader`),
on GPU and CPU-only traces alike: fetch time hidden behind queued device work saves nothing. For a
``perfdoctor profile`` run the machine's cores bound it: the fetch's work moves to workers on the same cores
(:mod:`perfdoctor.replay.machine`); a bare trace's saving states the cores it needs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from perfdoctor.analysis.timing import host
from perfdoctor.checks.common import (
    idle_cause_ms,
    name_line_of,
    pct,
    replay_fields,
    replayed_estimate,
    steps_over,
)
from perfdoctor.checks.context import Outcome, RankContext, passed, run_core_budget, skipped
from perfdoctor.findings import Evidence, Hit
from perfdoctor.replay.transforms.host import prefetch_dataloader
from perfdoctor.trace import intervals as iv

CODE = "PD101"
METRICS = {
    "dataloader_wait_us": "mean µs per step the replayed step gets shorter with prefetched batches (the saving)",
    "dataloader_wait_pct": "dataloader_wait_us as % of the mean step time",
    "dataloader_host_us": "mean µs per step the host spends inside DataLoader __next__",
}

# every field a hit gives the TOML message and headline (its evidence values and fields; checked at load)
MESSAGE_FIELDS = ("measured", "recorded_ms", "stalled", "stall_ms", "stall_pct")
# the advice for a CPU-only run (fix_cpu of its TOML: no pinned memory, no copy to the device, cores for workers)
ADVICE = ("cpu",)


@dataclass(frozen=True)
class Thresholds:
    """``[thresholds]`` of rules/PD101.toml: names and types checked when the catalogue loads."""

    min_saving_pct: float


def check(ctx: RankContext) -> Outcome:
    th = ctx.thresholds(Thresholds)
    fetches = host.ranges_named(ctx.tables, host.DATALOADER)
    if fetches[0].size == 0:
        return skipped(
            "no DataLoader __next__ events in the trace (no torch DataLoader, or it ran outside the profiler)"
        )
    ws, we = ctx.windows()
    host_us = iv.per_window(iv.union(*fetches), ws, we)
    whatif = prefetch_dataloader(ctx.replay(), ctx.tables, budget=run_core_budget(ctx))
    saving, wait, method = ctx.replayed_saving(whatif)
    wait = np.maximum(wait, 0.0)
    step_us = ctx.per_step(lambda s: s.dur_us)
    share = pct(saving, ctx.base_step_us)
    metrics = {"dataloader_wait_us": saving, "dataloader_wait_pct": share, "dataloader_host_us": float(host_us.mean())}
    if saving <= 0:  # min_saving_pct is the engine's, on the report's denominator (perfdoctor.checks.after)
        return passed(**metrics)
    n_fetch = np.bincount(np.clip(ctx.step_of(fetches[0]), -1, None) + 1, minlength=ctx.n_steps + 1)[1:]
    ev = Evidence(
        values={
            "dataloader_wait_ms": saving / 1000,
            "dataloader_wait_pct": share,
            "dataloader_host_ms": float(host_us.mean()) / 1000,
            "fetches_per_step": float(n_fetch.mean()),
            "step_ms": ctx.step_us / 1000,
            "max_step_wait_ms": float(wait.max()) / 1000,
        },
        steps=steps_over(wait, step_us, th.min_saving_pct, ctx.step_numbers),
    )
    name_line_of(ev, ctx.tables, host.DATALOADER)  # the loop line that fetches the batch
    host_ms = float(host_us.mean()) / 1000
    # the headline's claim, measured: the device's idle on the DataLoader (GPU), the loop's time in it (CPU-only)
    stall_ms = host_ms
    if ctx.is_gpu:  # the breakdown's idle cause: measured, and a different quantity from the replayed saving
        stall_ms = ev.values["dataloader_idle_ms"] = idle_cause_ms(ctx, "dataloader")
        measured = (
            f"The device idles {stall_ms:.1f} ms per step waiting for the DataLoader "
            f"(measured; the host spends {host_ms:.1f} ms per step inside __next__)"
        )
    else:
        measured = f"The training loop spends {host_ms:.1f} ms per step inside DataLoader __next__ (measured)"
    fields = {
        "measured": measured,
        "stalled": "the GPU" if ctx.is_gpu else "the training loop",
        "stall_ms": stall_ms,
        "stall_pct": pct(stall_ms * 1000, ctx.step_us),
        **replay_fields(ctx),
    }
    return Outcome(
        metrics=metrics,
        hit=Hit(
            evidence=ev,
            estimate=replayed_estimate(saving, method, fields),
            fields=fields,
            advice={} if ctx.is_gpu else ctx.advice("cpu"),
            min_saving_pct=th.min_saving_pct,
        ),
    )
