"""PD902 cold-start: first-call work (compilation, algorithm search, lazy init, allocator growth) in the trace.

Reads :attr:`perfdoctor.analysis.steps.steps.Steps.warmup` (:mod:`perfdoctor.analysis.steps.warmup`): leading steps
dominated by it were left out of the analysis (``cold_dropped``); when every analysed step is cold, the
report describes the warm-up and the verdicts about the training loop (PD103, PD106, PD201, PD206, PD401) are
skipped.
No saving: the fix is to profile steady-state steps.
"""

from __future__ import annotations

from dataclasses import dataclass

from perfdoctor.checks.common import pct
from perfdoctor.checks.context import Outcome, RankContext, passed
from perfdoctor.findings import Evidence, Hit

CODE = "PD902"
METRICS = {
    "warmup_us": "mean µs per analysed step of first-call work (union of compile, first calls, lazy init, "
    "allocator growth)",
    "warmup_pct": "warmup_us as % of the mean step time",
    "n_cold_dropped": "leading steps left out because first-call work filled them",
}

# every field a hit gives the TOML message and headline (its evidence values and fields; checked at load)
MESSAGE_FIELDS = ("cold_claim", "first_call_ops", "kinds", "where")


@dataclass(frozen=True)
class Thresholds:
    """``[thresholds]`` of rules/PD902.toml: none (a key there fails when the catalogue loads)."""


_KIND_TEXT = {
    "compile": "torch.compile (Dynamo/Inductor) compilation",
    "first_call": "first calls of ops",
    "lazy_init": "lazy CUDA/HIP initialisation (module loading, first kernel launches)",
    "allocator_growth": "allocator growth (cudaMalloc)",
}


def check(ctx: RankContext) -> Outcome:
    steps = ctx.steps
    warm = steps.warmup
    if warm is None or warm.per_window_us.size == 0:
        return passed(warmup_us=0.0, warmup_pct=0.0, n_cold_dropped=0.0)
    mean_us = float(warm.per_window_us.mean())
    metrics = {
        "warmup_us": mean_us,
        "warmup_pct": pct(mean_us, ctx.step_us),
        "n_cold_dropped": float(len(steps.cold_dropped)),
    }
    all_cold = bool(warm.cold.all())
    if not steps.cold_dropped and not all_cold:
        return passed(**metrics)
    about = warm if all_cold or steps.cold_dropped_warmup is None else steps.cold_dropped_warmup
    # all cold: the kinds per analysed step, as the union "held per step" below (by_kind_us is over all windows);
    # else over the steps left out, as the total "held" there
    per = max(warm.per_window_us.size, 1) if about is warm else 1
    union_us = mean_us if all_cold else sum(c[2] for c in steps.cold_dropped)
    shown = {k: v / per for k, v in about.by_kind_us.items() if v / per >= 1.0}
    kinds = [f"{_KIND_TEXT[k]} {v / 1000:,.1f} ms" for k, v in sorted(shown.items(), key=lambda kv: -kv[1])]
    if len(kinds) > 1 and sum(shown.values()) > union_us + 50.0:  # overlapping kinds (PD902's rule text)
        # a first call that triggers lazy initialisation counts in both: say so beside the parts (a reader read
        # 440.6 + 143.7 + 34.1 ms read as exceeding the 496.7 ms held)
        kinds[-1] += f"; these overlap (one first call can also initialise), their union is {union_us / 1000:,.1f} ms"
    if all_cold:
        claim = (
            f"The analysed steps are warm-up: first-call work holds {mean_us / 1000:,.1f} ms per step "
            f"({metrics['warmup_pct']:.0f}%)"
        )
        where = (
            f"the analysed step(s) hold {mean_us / 1000:,.1f} ms of it per step ({metrics['warmup_pct']:.0f}%): "
            "this trace shows the warm-up, not the training loop, and no launch-bound, synchronization, "
            "batch-size or MFU verdict is drawn from it"
        )
    else:
        dropped_ms = sum(c[2] for c in steps.cold_dropped) / 1000
        n = len(steps.cold_dropped)
        claim = (
            f"First-call work filled {n} step{'s' if n > 1 else ''} ({dropped_ms:,.1f} ms), left out of the analysis"
        )
        where = (
            f"step(s) {', '.join(str(c[0]) for c in steps.cold_dropped)} held {dropped_ms:,.1f} ms of it and "
            "were left out; the other steps are analysed"
        )
    ev = Evidence(
        values={
            "where": where,
            "kinds": "; ".join(kinds) or "first-call work",
            "first_call_ops": ", ".join(about.first_call_ops) or "none",
            "warmup_ms": mean_us / 1000,
            "warmup_pct": metrics["warmup_pct"],
            "n_cold_dropped": len(steps.cold_dropped),
            "all_analysed_steps_cold": bool(all_cold),
        },
        steps=[c[0] for c in steps.cold_dropped] or ctx.step_numbers,
    )
    return Outcome(metrics=metrics, hit=Hit(evidence=ev, estimate=None, fields={"cold_claim": claim}))
