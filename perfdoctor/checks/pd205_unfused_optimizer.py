"""PD205 unfused-optimizer: ``Optimizer.step`` launches many small per-parameter kernels.

The for-loop implementation of an optimizer launches a few kernels per
parameter tensor; the host time to launch them dwarfs their device time. When
the step is host-bound (the device idles), that host time is on the critical
path: the next step's work is queued that much later. ``foreach=True``
launches one ``multi_tensor_apply`` kernel per group of tensors, ``fused=True``
one fused kernel.
"""

from __future__ import annotations

import re

import numpy as np

from perfdoctor.analysis import host
from perfdoctor.analysis import intervals as iv
from perfdoctor.checks.common import pct, steps_over
from perfdoctor.checks.context import Outcome, RankContext, passed, skipped
from perfdoctor.findings import Estimate, Evidence, Hit

CODE = "PD205"
METRICS = {
    "optimizer_kernels_per_step": "kernels launched inside Optimizer.step per step",
    "multi_tensor_share": "fraction of those kernels that are multi-tensor (foreach) or fused kernels",
    "optimizer_host_us": "mean µs per step of host time in Optimizer.step",
    "optimizer_kernel_us": "mean µs per step of device time in the optimizer's kernels",
    "optimizer_saving_us": "mean per step of min(host time − kernel time in Optimizer.step, device idle time)",
    "optimizer_saving_pct": "optimizer_saving_us as % of the mean step time",
}
MULTI_TENSOR = re.compile(r"multi_tensor_apply|fused_adam|FusedAdam|_fused_adamw?|fused_sgd|foreach", re.I)


def check(ctx: RankContext) -> Outcome:
    opt = host.named(ctx.tables, host.OPTIMIZER_STEP)
    if opt[0].size == 0:
        return skipped("no Optimizer.step annotations in the trace (no torch.optim optimizer, or it ran outside the profiler)")
    ws, we = ctx.windows()
    k = ctx.kernels()
    j = np.searchsorted(opt[0], k.launch_us, side="right") - 1
    inside = (j >= 0) & (k.launch_us < opt[1][np.maximum(j, 0)]) & (k.step >= 0)
    names = ctx.tables.name_array()
    ids = np.unique(k.name_id[inside])
    multi_ids = [i for i in ids.tolist() if MULTI_TENSOR.search(names[i])]
    multi = np.isin(k.name_id[inside], multi_ids)
    n_per_step = float(inside.sum() / max(ctx.n_steps, 1))
    share = float(multi.mean()) if multi.size else 0.0
    host_us = iv.per_window(opt, ws, we)
    kern_us = np.bincount(k.step[inside], weights=k.dur_us[inside], minlength=ctx.n_steps)
    dev_idle = ctx.per_step(lambda s: s.idle_us)
    per_step = np.minimum(np.maximum(host_us - kern_us, 0.0), dev_idle)
    saving = float(per_step.mean())
    metrics = {"optimizer_kernels_per_step": n_per_step, "multi_tensor_share": share,
               "optimizer_host_us": float(host_us.mean()), "optimizer_kernel_us": float(kern_us.mean()),
               "optimizer_saving_us": saving, "optimizer_saving_pct": pct(saving, ctx.step_us)}
    th = ctx.th
    if (n_per_step < th["min_kernels_per_step"] or share > th["max_multi_tensor_share"]
            or metrics["optimizer_saving_pct"] < th["min_saving_pct"]):
        return passed(**metrics)
    dur = k.dur_us[inside]
    ev = Evidence(values={
        "optimizer_kernels_per_step": n_per_step, "median_kernel_us": float(np.median(dur)) if dur.size else 0.0,
        "optimizer_host_ms": metrics["optimizer_host_us"] / 1000, "optimizer_kernel_ms": float(kern_us.mean()) / 1000,
        "optimizer_saving_ms": saving / 1000, "optimizer_saving_pct": metrics["optimizer_saving_pct"],
        "multi_tensor_pct": 100 * share},
        steps=steps_over(per_step, ctx.per_step(lambda s: s.dur_us), th["min_saving_pct"], ctx.step_numbers))
    method = ("per step: host time in Optimizer.step − its kernels' device time (what a fused step still takes), "
              "at most the step's device idle time; mean over steps")
    return Outcome(metrics=metrics, hit=Hit(evidence=ev, estimate=Estimate(saving, ctx.step_us, method)))
