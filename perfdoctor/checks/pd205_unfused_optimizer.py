"""PD205 unfused-optimizer: ``Optimizer.step`` launches many small per-parameter kernels.

The for-loop implementation of an optimizer launches a few kernels per
parameter tensor; the host time to launch them dwarfs their device time. When
the step is host-bound (the device idles), that host time is on the critical
path: the next step's work is queued that much later. ``foreach=True``
launches one ``multi_tensor_apply`` kernel per group of tensors, ``fused=True``
one fused kernel.

The advice names the optimizer class found in the trace (``Optimizer.step#SGD.step``
-> ``torch.optim.SGD``) and offers ``fused=True`` only where that class takes it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from perfdoctor.analysis.timing import host
from perfdoctor.checks.common import name_line_of, pct, steps_over
from perfdoctor.checks.context import Outcome, RankContext, passed, skipped
from perfdoctor.findings import Estimate, Evidence, Hit
from perfdoctor.replay.transforms.host import fused_optimizer
from perfdoctor.trace import intervals as iv

CODE = "PD205"
METRICS = {
    "optimizer_kernels_per_step": "kernels launched inside Optimizer.step per step",
    "multi_tensor_share": "fraction of those kernels that are multi-tensor (foreach) or fused kernels",
    "optimizer_host_us": "mean µs per step of host time in Optimizer.step",
    "optimizer_kernel_us": "mean µs per step of device time in the optimizer's kernels",
    "optimizer_saving_us": "mean µs per step the replayed step gets shorter with a foreach/fused optimizer step",
    "optimizer_saving_pct": "optimizer_saving_us as % of the mean step time",
}

# every field a hit gives the TOML message and headline (its evidence values and fields; checked at load)
MESSAGE_FIELDS = (
    "advice",
    "median_kernel_us",
    "optimizer_host_ms",
    "optimizer_kernel_ms",
    "optimizer_step",
    "optimizer_kernels_per_step",
)


@dataclass(frozen=True)
class Thresholds:
    """``[thresholds]`` of rules/PD205.toml: names and types checked when the catalogue loads."""

    min_kernels_per_step: int
    max_multi_tensor_share: float
    min_saving_pct: float


STEP_CLASS = re.compile(r"^Optimizer\.step#(\w+)\.step")
# torch.optim classes by what their constructor takes, from the signatures of PyTorch 2.13
# (inspect.signature(torch.optim.X)): ``fused`` appears in Adam, AdamW, SGD, Adagrad only;
# every class here but LBFGS, SparseAdam and Muon takes ``foreach``.
FUSED = ("Adam", "AdamW", "SGD", "Adagrad")
FOREACH_ONLY = ("ASGD", "Adadelta", "Adafactor", "Adamax", "NAdam", "RAdam", "RMSprop", "Rprop")
MULTI_TENSOR = re.compile(r"multi_tensor_apply|fused_adam|FusedAdam|_fused_adamw?|fused_sgd|foreach", re.I)


def optimizer_class(ctx: RankContext, opt_kernel_ts: np.ndarray) -> str | None:
    """The optimizer class whose ``Optimizer.step#<Class>.step`` spans hold the most of these kernel launches
    (µs times); among nested wrappers (``EMAOptimizer`` around ``Shampoo``) the innermost, i.e. shortest.
    None when the annotation names no class."""
    best: tuple[int, float, str] | None = None
    for name in sorted({n for n in ctx.tables.name_array() if STEP_CLASS.match(str(n))}):
        spans = host.named(ctx.tables, "^" + re.escape(str(name)) + "$")
        n = int((iv.containing(opt_kernel_ts, spans) >= 0).sum())
        key = (-n, iv.total(spans), str(name))
        best = key if best is None or key < best else best
    m = STEP_CLASS.match(best[2]) if best else None
    return m.group(1) if m else None


def advice(cls: str | None) -> tuple[str, dict[str, str]]:
    """(the message's one-line advice, the finding's fix / examples) for optimizer class ``cls``."""
    if cls in FUSED or cls in FOREACH_ONLY:
        fused = cls in FUSED
        short = f"torch.optim.{cls}(..., foreach=True)" + (" or fused=True" if fused else "")
        fix = (
            f"Use {cls}'s multi-tensor implementation: `torch.optim.{cls}(params, ..., foreach=True)`"
            + (
                f", or the fused one: `torch.optim.{cls}(params, ..., fused=True)` (CUDA floating-point "
                "parameters; no sparse gradients)"
                if fused
                else f" ({cls} has no fused implementation)"
            )
            + ". `foreach` is already the default (PyTorch 2.x) when every parameter is a CUDA tensor, so a "
            "for-loop step means `foreach=False` was passed or some parameters are not on the GPU. "
            "Checked against the PyTorch 2.13 signatures; older versions may lack `fused`."
        )
        after = f"opt = torch.optim.{cls}(model.parameters(), lr=1e-3, {'fused' if fused else 'foreach'}=True)\n"
        return short, {
            "fix": fix,
            "example_before": f"opt = torch.optim.{cls}(model.parameters(), lr=1e-3, foreach=False)\n",
            "example_after": after,
        }
    if cls is None:
        return "a torch.optim optimizer with foreach=True (or fused=True where it has one)", {}
    fix = (
        f"{cls} is not a torch.optim optimizer perfdoctor knows: use its multi-tensor (`foreach`) or fused "
        "implementation if it has one (torch._foreach_* ops), or batch its per-parameter updates."
    )
    return f"a multi-tensor (foreach) or fused implementation of {cls}", {"fix": fix}


def check(ctx: RankContext) -> Outcome:
    opt = host.named(ctx.tables, host.OPTIMIZER_STEP)
    if opt[0].size == 0:
        return skipped(
            "no Optimizer.step annotations in the trace (no torch.optim optimizer, or it ran outside the profiler)"
        )
    ws, we = ctx.windows()
    k = ctx.kernels()
    inside = (iv.containing(k.launch_us, opt) >= 0) & (k.step >= 0)
    names = ctx.tables.name_array()
    ids = np.unique(k.name_id[inside])
    multi_ids = [i for i in ids.tolist() if MULTI_TENSOR.search(names[i])]
    multi = np.isin(k.name_id[inside], multi_ids)
    n_per_step = float(inside.sum() / max(ctx.n_steps, 1))
    share = float(multi.mean()) if multi.size else 0.0
    host_us = iv.per_window(opt, ws, we)
    kern_us = np.bincount(k.step[inside], weights=k.dur_us[inside], minlength=ctx.n_steps)
    saving, per_step, method = ctx.replayed_saving(fused_optimizer(ctx.replay(), ctx.tables))
    saving, per_step = max(saving, 0.0), np.maximum(per_step, 0.0)
    metrics = {
        "optimizer_kernels_per_step": n_per_step,
        "multi_tensor_share": share,
        "optimizer_host_us": float(host_us.mean()),
        "optimizer_kernel_us": float(kern_us.mean()),
        "optimizer_saving_us": saving,
        "optimizer_saving_pct": pct(saving, ctx.base_step_us),
    }
    th = ctx.thresholds(Thresholds)
    if (
        n_per_step < th.min_kernels_per_step
        or share > th.max_multi_tensor_share
        or saving <= 0  # min_saving_pct: the engine's, on the report's denominator (perfdoctor.checks.after)
    ):
        return passed(**metrics)
    dur = k.dur_us[inside]
    ev = Evidence(
        values={
            "optimizer_kernels_per_step": n_per_step,
            "median_kernel_us": float(np.median(dur)) if dur.size else 0.0,
            "optimizer_host_ms": metrics["optimizer_host_us"] / 1000,
            "optimizer_kernel_ms": float(kern_us.mean()) / 1000,
            "optimizer_saving_ms": saving / 1000,
            "optimizer_saving_pct": metrics["optimizer_saving_pct"],
            "multi_tensor_pct": 100 * share,
        },
        steps=steps_over(per_step, ctx.per_step(lambda s: s.dur_us), th.min_saving_pct, ctx.step_numbers),
    )
    cls = optimizer_class(ctx, k.launch_us[inside])
    short, fix = advice(cls)
    ev.values["optimizer"] = cls or "unknown"
    name_line_of(ev, ctx.tables, host.OPTIMIZER_STEP)  # the optimizer call
    hit = Hit(
        evidence=ev,
        estimate=Estimate(saving, method),
        advice=fix,
        min_saving_pct=th.min_saving_pct,
        fields={"optimizer_step": f"{cls}.step" if cls else "Optimizer.step", "advice": short},
    )
    return Outcome(metrics=metrics, hit=hit)
