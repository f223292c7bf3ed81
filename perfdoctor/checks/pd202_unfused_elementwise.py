"""PD202 unfused-elementwise: much of the step in short elementwise / normalization kernels (or ops).

Eager PyTorch runs every elementwise op as its own kernel that reads and
writes the whole tensor; a chain of them is memory-bound and launch-bound.
A compiler (``torch.compile``: Triton kernels on GPU, C++/OpenMP loops on CPU)
fuses the chain into one pass. Traces that already contain Triton kernels or
compiled regions pass: the model is already compiled.

GPU: kernels classified ``elementwise`` / ``reduction_norm`` and shorter than
``short_kernel_us``. CPU-only traces: host time in elementwise and
normalization aten ops (:mod:`perfdoctor.analysis.timing.cpu_breakdown`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from perfdoctor.checks.common import pct, steps_over, top_names
from perfdoctor.checks.context import Outcome, RankContext, passed
from perfdoctor.findings import Estimate, Evidence, Hit
from perfdoctor.replay.transforms.cpu_fusion import Bandwidth

CODE = "PD202"
METRICS = {
    "elementwise_us": "mean µs per step in short elementwise/normalization kernels (GPU) or ops (CPU)",
    "elementwise_pct": "elementwise_us as % of the mean step time",
    "elementwise_per_step": "such kernels / ops per step",
    "compiled": "1 when the trace has Triton kernels or torch.compile regions",
}

# every field a hit gives the TOML message and headline (its evidence values and fields; checked at load)
MESSAGE_FIELDS = (
    "elementwise_ms",
    "what",
    "elementwise_pct",
    "elementwise_per_step",
)


@dataclass(frozen=True)
class Thresholds:
    """``[thresholds]`` of rules/PD202.toml: names and types checked when the catalogue loads."""

    min_share_pct: float
    min_saving_pct: float
    short_kernel_us: float
    max_fused_fraction: float
    assumed_cpu_gbps: float


COMPILED = r"^triton_|Torch-Compiled Region|CompiledFunction|^inductor|TorchDynamo"


def _gpu(ctx: RankContext) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    th = ctx.thresholds(Thresholds)
    k = ctx.kernels()
    m = np.isin(k.category, ["elementwise", "reduction_norm"]) & (k.dur_us < th.short_kernel_us) & (k.step >= 0)
    per_step = np.bincount(k.step[m], weights=k.dur_us[m], minlength=ctx.n_steps)
    count = np.bincount(k.step[m], minlength=ctx.n_steps)
    return per_step, count, ctx.tables.name_array()[k.name_id[m]], k.dur_us[m]


def _cpu(ctx: RankContext) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    from perfdoctor.analysis.timing import host
    from perfdoctor.analysis.timing.cpu_breakdown import classify_cpu_op
    from perfdoctor.checks.common import COPY_OPS
    from perfdoctor.trace import intervals as iv

    ops = ctx.tables.cpu_ops
    pid = ctx.steps.pid
    names = ctx.tables.name_array()
    uniq = np.unique(ops["name_id"]) if len(ops) else np.empty(0, dtype=np.int64)
    copy_rx = re.compile(COPY_OPS)  # dtype casts are PD204's (autocast), not fusion candidates
    ew = [
        i
        for i in uniq.tolist()
        if classify_cpu_op(names[i]) in ("elementwise", "reduction_norm") and not copy_rx.match(names[i])
    ]
    m = np.isin(ops["name_id"], ew) & ((ops["pid"] == pid) if pid >= 0 else True) if len(ops) else np.zeros(0, bool)
    step = ctx.step_of(ops["ts_us"][m]) if len(ops) else np.empty(0, dtype=np.int64)
    count = np.bincount(step[step >= 0], minlength=ctx.n_steps)
    ws, we = ctx.windows()
    # the optimizer's and the DataLoader's own ops belong to those phases (cpu_breakdown's priority)
    other = iv.union_of(host.named(ctx.tables, host.OPTIMIZER_STEP), host.dataloader(ctx.tables))
    ew_iv = iv.subtract(iv.union(ops["ts_us"][m], ops["end_us"][m]), other) if len(ops) else iv.EMPTY
    per_step = iv.per_window(ew_iv, ws, we)
    return per_step, count, names[ops["name_id"][m]], ops["dur_us"][m]


def _bandwidth(ctx: RankContext, th: Thresholds) -> Bandwidth:
    """This machine's measured memory bandwidth (``perfdoctor calibrate`` on the machine that recorded the run: the
    rank's measured roofs), else ``assumed_cpu_gbps`` stated as an assumption."""
    roofs = ctx.traced.roofline.roofs if ctx.traced.roofline is not None else None
    bw = roofs.hbm_bytes_per_s if roofs is not None and roofs.kind == "measured" else None
    if roofs is not None and bw is not None and bw > 0:
        return Bandwidth(bw, roofs.source, True)
    return Bandwidth(
        th.assumed_cpu_gbps * 1e9,
        "assumed, not measured: `perfdoctor calibrate` on the machine that ran the trace, on idle cores, measures it",
        False,
    )


def _cpu_replayed(ctx: RankContext, th: Thresholds) -> tuple[float, str] | None:
    """(saving µs, method) of the CPU fused-chains replay, or None when no chain has recorded shapes."""
    from perfdoctor.analysis.timing import host
    from perfdoctor.replay.transforms.cpu_fusion import fuse_elementwise_chains
    from perfdoctor.trace import intervals as iv

    keep_out = iv.union_of(host.named(ctx.tables, host.OPTIMIZER_STEP), host.dataloader(ctx.tables))
    fusion = fuse_elementwise_chains(ctx.replay(), ctx.tables, _bandwidth(ctx, th), keep_out)
    if fusion.fused == 0 and fusion.uncosted > 0:
        return None
    saving, _, method = ctx.replayed_saving(fusion.whatif)
    return max(saving, 0.0), method


def check(ctx: RankContext) -> Outcome:
    th = ctx.thresholds(Thresholds)
    compiled = bool(ctx.tables.names_matching(COMPILED).any())
    per_step, count, names, durs = _gpu(ctx) if ctx.is_gpu else _cpu(ctx)
    ew_us = float(per_step.mean())
    share = pct(ew_us, ctx.step_us)
    saving = ew_us * th.max_fused_fraction
    replayed_method = None
    if ctx.is_gpu:
        from perfdoctor.replay.transforms.kernels import fused_elementwise

        saving, _, replayed_method = ctx.replayed_saving(fused_elementwise(ctx.replay(), ctx.tables))
        saving = max(saving, 0.0)
    elif not compiled and share >= th.min_share_pct:
        replayed = _cpu_replayed(ctx, th)
        if replayed is not None:
            saving, replayed_method = replayed
    metrics = {
        "elementwise_us": ew_us,
        "elementwise_pct": share,
        "elementwise_per_step": float(count.mean()),
        "compiled": float(compiled),
    }
    if compiled or share < th.min_share_pct or saving <= 0:  # min_saving_pct: the engine's (after.py)
        return passed(**metrics)
    what = "kernels" if ctx.is_gpu else "ops"
    ev = Evidence(
        values={
            "elementwise_ms": ew_us / 1000,
            "elementwise_pct": share,
            "elementwise_per_step": float(count.mean()),
            "what": what,
            "max_fused_fraction": th.max_fused_fraction,
        },
        steps=steps_over(per_step, ctx.per_step(lambda s: s.dur_us), th.min_share_pct, ctx.step_numbers),
        events=top_names(names, durs),
    )
    method = replayed_method or (
        f"elementwise/normalization {what} time per step × max_fused_fraction "
        f"({th.max_fused_fraction}): the share a fused pass removes at most (an upper bound: the trace has no "
        "recorded shapes; `record_shapes=True` lets the fused chains be replayed from the bytes they move)"
    )
    return Outcome(
        metrics=metrics,
        hit=Hit(evidence=ev, estimate=Estimate(saving, method), min_saving_pct=th.min_saving_pct),
    )
