"""PD302 accumulation-without-no-sync: gradients all-reduced on every micro-batch of an accumulation.

Micro-batches = ``DistributedDataParallel.forward`` annotations between two
``Optimizer.step`` calls; gradient all-reduces = DDP's ``c10d::allreduce_``
(or ``nccl:all_reduce`` / ``gloo:all_reduce``) issued in each. Under
``model.no_sync()`` only the last micro-batch all-reduces; here earlier ones do.
The time of those extra collectives is measured on the collective's own thread
(``gloo:all_reduce``) or as all_reduce kernels on the device.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from perfdoctor.analysis import host
from perfdoctor.analysis import intervals as iv
from perfdoctor.checks.context import Outcome, RankContext, passed, skipped
from perfdoctor.findings import Estimate, Evidence, Hit

CODE = "PD302"
METRICS = {
    "micro_batches_per_update": "DDP forwards per optimizer step",
    "allreduce_calls_per_update": "gradient all-reduce calls per optimizer step",
    "early_allreduce_calls_per_update": "all-reduce calls issued before the last micro-batch of an optimizer step",
    "early_allreduce_us": "mean µs per optimizer step of all-reduce work issued before the last micro-batch",
}

# what a hit's evidence/fields add to METRICS for the TOML message (its placeholders are checked at load)
MESSAGE_FIELDS = ("early_allreduce_ms",)


@dataclass(frozen=True)
class Thresholds:
    """``[thresholds]`` of rules/PD302.toml: none (a key there fails when the catalogue loads)."""


DDP_FORWARD = r"^DistributedDataParallel\.forward$"
ALLREDUCE_CALL = r"^c10d::allreduce_$|^nccl:all_reduce$"
ALLREDUCE_WORK = r"^gloo:all_reduce$|^nccl:all_reduce$"


def check(ctx: RankContext) -> Outcome:
    t = ctx.tables
    fwd = np.sort(host.ranges_named(t, DDP_FORWARD)[0])
    if fwd.size == 0:
        return skipped("no DistributedDataParallel.forward annotations: not a DDP run")
    opt = host.named(t, host.OPTIMIZER_STEP)
    if opt[0].size == 0:
        return skipped("no Optimizer.step annotations: optimizer steps unknown")
    calls = np.sort(host.ranges_named(t, ALLREDUCE_CALL, ("cpu_ops", "annotations"))[0])
    work = host.ranges_named(t, ALLREDUCE_WORK, ("annotations", "cpu_ops"))
    # the micro-batches of update j: forwards between the end of update j-1 and the start of update j
    bounds = np.concatenate([[-np.inf], opt[1]])
    n_micro, n_calls, n_early, early_us = [], [], [], []
    for j in range(opt[0].size):
        f = fwd[(fwd >= bounds[j]) & (fwd < opt[0][j])]
        if f.size == 0:
            continue
        c = calls[(calls >= f[0]) & (calls < opt[0][j])]
        early = c[c < f[-1]]
        n_micro.append(f.size)
        n_calls.append(c.size)
        n_early.append(early.size)
        wm = (work[0] >= f[0]) & (work[0] < f[-1])
        early_us.append(iv.total(iv.union(work[0][wm], work[1][wm])))
    if not n_micro:
        return skipped("no DDP forward inside an optimizer step window")
    metrics = {
        "micro_batches_per_update": float(np.mean(n_micro)),
        "allreduce_calls_per_update": float(np.mean(n_calls)),
        "early_allreduce_calls_per_update": float(np.mean(n_early)),
        "early_allreduce_us": float(np.mean(early_us)),
    }
    saving = metrics["early_allreduce_us"]
    if metrics["micro_batches_per_update"] < 2 or metrics["early_allreduce_calls_per_update"] < 1:
        return passed(**metrics)
    ev = Evidence(
        values={k: v for k, v in metrics.items() if k != "early_allreduce_us"} | {"early_allreduce_ms": saving / 1000},
        steps=ctx.step_numbers,
    )
    method = "all-reduce work (on the collective's thread) issued before the last micro-batch, per optimizer step"
    return Outcome(metrics=metrics, hit=Hit(evidence=ev, estimate=Estimate(saving, method)))
