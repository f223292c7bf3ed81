"""PD302 accumulation-without-no-sync: gradients all-reduced on every micro-batch of an accumulation.

The micro-batches of each optimizer step are its backward passes, found from the autograd engine's ops whatever
the model's annotations (:mod:`perfdoctor.analysis.parallel.accumulation`); gradient all-reduces are the all-reduce
calls
issued inside them, one bucket set per synchronized pass. Under ``model.no_sync()`` only the last micro-batch's
pass all-reduces; here earlier ones do. The saving is replayed
(:func:`perfdoctor.replay.transforms.accumulation.skip_early_allreduces`: those calls, the collectives they
launched and the Reducer's copies around them removed); the all-reduce work issued before the last micro-batch
(``gloo:all_reduce`` on the collective's thread, ``nccl:all_reduce``) is reported beside it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from perfdoctor.analysis.parallel.accumulation import accumulation
from perfdoctor.checks.context import Outcome, RankContext, passed, skipped
from perfdoctor.findings import Estimate, Evidence, EvidenceValue, Hit
from perfdoctor.trace import intervals as iv

CODE = "PD302"
METRICS = {
    "micro_batches_per_update": "backward passes (micro-batches) per optimizer step",
    "allreduce_calls_per_update": "gradient all-reduce calls per optimizer step",
    "allreduce_sets_per_update": "backward passes per optimizer step that issued gradient all-reduces (bucket sets)",
    "early_allreduce_calls_per_update": "all-reduce calls issued before the last micro-batch of an optimizer step",
    "early_allreduce_us": "mean µs per optimizer step of all-reduce work issued before the last micro-batch",
}

# every field a hit gives the TOML message and headline (its evidence values and fields; checked at load)
MESSAGE_FIELDS = (
    "early_allreduce_ms",
    "micro_source",
    "micro_batches_per_update",
    "allreduce_calls_per_update",
    "allreduce_sets_per_update",
    "early_allreduce_calls_per_update",
)


@dataclass(frozen=True)
class Thresholds:
    """``[thresholds]`` of rules/PD302.toml: none (a key there fails when the catalogue loads)."""


def check(ctx: RankContext) -> Outcome:
    from perfdoctor.replay.transforms.accumulation import skip_early_allreduces

    acc = accumulation(ctx.tables, ctx.windows())
    if not acc.updates:
        return skipped("no autograd backward ops inside the analysed steps: micro-batches unknown")
    ups = acc.updates
    if not any(u.calls[0].size for u in ups):
        return skipped("no all-reduce call inside a backward pass: not a data-parallel (DDP) run")
    early_us = []
    for u in ups:
        if u.micro_batches < 2:
            early_us.append(0.0)
            continue
        w = acc.work
        m = (w[0] >= u.pass_start_us[0]) & (w[0] < u.last_start_us)
        early_us.append(iv.total((w[0][m], w[1][m])))
    metrics = {
        "micro_batches_per_update": float(np.mean([u.micro_batches for u in ups])),
        "allreduce_calls_per_update": float(np.mean([u.calls[0].size for u in ups])),
        "allreduce_sets_per_update": float(np.mean([u.synced_passes for u in ups])),
        "early_allreduce_calls_per_update": float(np.mean([u.early.sum() for u in ups])),
        "early_allreduce_us": float(np.mean(early_us)),
    }
    if metrics["micro_batches_per_update"] < 2 or metrics["early_allreduce_calls_per_update"] < 1:
        return passed(**metrics)
    saving, _, method = ctx.replayed_saving(skip_early_allreduces(ctx.replay(), acc))
    values: dict[str, EvidenceValue] = {k: v for k, v in metrics.items() if k != "early_allreduce_us"}
    ev = Evidence(values=values | {"early_allreduce_ms": metrics["early_allreduce_us"] / 1000}, steps=ctx.step_numbers)
    sources = sorted({u.micro_source for u in ups})
    fields = {"micro_source": " and ".join(sources)}
    return Outcome(metrics=metrics, hit=Hit(evidence=ev, estimate=Estimate(max(saving, 0.0), method), fields=fields))
