"""PD206 low-mfu: model FLOP/s far below the device's peak at the GEMMs' dtype (GPU only).

MFU comes from :func:`perfdoctor.analysis.rank.add_efficiency` (model FLOPs per
step ÷ median step time ÷ dense datasheet peak at the dtype the GEMM kernels
ran in). The dominant reason is the largest non-GEMM share of the step in the
breakdown (idle by cause, exposed communication, memory-bound elementwise /
normalisation kernels, memcpy), or FP32 GEMMs on a device whose tensor cores
are faster, when the GEMMs themselves take most of the step.
"""

from __future__ import annotations

from dataclasses import dataclass

from perfdoctor.analysis.work.roofline import Roofs
from perfdoctor.checks.common import cold_reason, pct
from perfdoctor.checks.context import Outcome, RankContext, passed, skipped
from perfdoctor.findings import Evidence, Hit
from perfdoctor.vocab import IdleCause

CODE = "PD206"
METRICS = {
    "mfu_pct": "model FLOPs utilisation, % of the dense peak at the GEMM dtype",
    "achieved_tflops": "model FLOP per step ÷ median step time, TFLOP/s",
}

# every field a hit gives the TOML message and headline (its evidence values and fields; checked at load)
MESSAGE_FIELDS = ("dtype", "flops_source", "peak_tflops", "reason", "mfu_text", "achieved_text")


@dataclass(frozen=True)
class Thresholds:
    """``[thresholds]`` of rules/PD206.toml: names and types checked when the catalogue loads."""

    mfu_threshold: float


# the idle causes PD206 names as a reason (the host outside any op is PD106's)
_IDLE_LABELS = {
    c.value: c.as_reason
    for c in (IdleCause.DATALOADER, IdleCause.SYNCHRONIZATION, IdleCause.HOST_LAUNCH_BOUND, IdleCause.OTHER)
}


def dominant_reason(ctx: RankContext, dtype: str | None, roofs: Roofs | None) -> tuple[str, float]:
    """(reason text, its share of the step in %) from the step totals."""
    rows = ctx.step_rows
    total = sum(s.dur_us for s in rows) or 1.0
    shares: dict[str, float] = {}
    for cause, label in _IDLE_LABELS.items():
        shares[label] = sum(s.idle_causes_us.get(cause, 0.0) for s in rows)
    shares["communication not overlapped with compute"] = sum(s.communication.exposed_us for s in rows)
    shares["memory-bound elementwise/normalisation kernels"] = sum(
        s.categories_us.get("elementwise", 0.0) + s.categories_us.get("reduction_norm", 0.0) for s in rows
    )
    shares["memcpy"] = sum(s.categories_us.get("memcpy", 0.0) for s in rows)
    gemm = sum(s.categories_us.get(c, 0.0) for s in rows for c in ("matmul", "conv", "attention"))
    peaks = roofs.peak_flops if roofs is not None else {}
    fp32_slow = dtype == "fp32" and any(
        peaks.get(d, 0) > 1.5 * peaks.get("fp32", float("inf")) for d in ("tf32", "bf16", "fp16")
    )
    if fp32_slow:
        shares["GEMMs in FP32 on a device with faster tensor-core dtypes"] = gemm
    label = max(shares, key=lambda k: shares[k])
    return label, pct(shares[label], total)


def mfu_texts(mfu: float, achieved_flops_per_s: float) -> tuple[str, str]:
    """MFU (a fraction) and the achieved rate (FLOP/s) as message text with enough digits to say something: "< 0.1%"
    rather than "0.0%", "12.3 GFLOP/s" rather than "0.01 TFLOP/s"."""
    share = f"{100 * mfu:.1f}%" if mfu >= 0.0005 or mfu <= 0 else "< 0.1%"
    for scale, unit in ((1e12, "TFLOP/s"), (1e9, "GFLOP/s"), (1e6, "MFLOP/s")):
        if achieved_flops_per_s >= scale:
            return share, f"{achieved_flops_per_s / scale:,.2f} {unit}"
    return share, f"{achieved_flops_per_s:,.0f} FLOP/s"


def check(ctx: RankContext) -> Outcome:
    th = ctx.thresholds(Thresholds)
    if reason := cold_reason(ctx):  # a cold step's fixed cost and FLOP rate are the warm-up's
        return skipped(reason)
    mfu = ctx.traced.mfu
    if mfu is None:
        missing = ctx.traced.mfu_missing
        return skipped(missing.message if missing is not None else "MFU was not computed for this trace")
    if not mfu.on_gpu:
        return skipped("CPU-only trace: MFU against a GPU datasheet peak is meaningless")
    if mfu.mfu is None or mfu.peak_flops_per_s is None:  # a peak always comes with an MFU
        return skipped(mfu.note or "no peak FLOP/s known for this device at the GEMM dtype")
    metrics = {"mfu_pct": 100 * mfu.mfu, "achieved_tflops": mfu.achieved_flops_per_s / 1e12}
    if mfu.mfu >= th.mfu_threshold:
        return passed(**metrics)
    roofs = ctx.traced.roofline.roofs if ctx.traced.roofline is not None else None
    reason, share = dominant_reason(ctx, mfu.dtype, roofs)
    ev = Evidence(
        values={
            "mfu_pct": 100 * mfu.mfu,
            "achieved_tflops": mfu.achieved_flops_per_s / 1e12,
            "peak_tflops": mfu.peak_flops_per_s / 1e12,
            "dtype": mfu.dtype or "?",
            "peak_source": mfu.peak_source,
            "model_flops_per_step": mfu.model_flops_per_step,
            "flops_source": mfu.flops_source,
            "step_ms": mfu.step_time_s * 1e3,
            "reason": f"{reason} ({share:.0f}% of the step)",
            "reason_share_pct": share,
        },
        steps=ctx.step_numbers,
    )
    mfu_text, achieved_text = mfu_texts(mfu.mfu, mfu.achieved_flops_per_s)
    fields = {"mfu_text": mfu_text, "achieved_text": achieved_text}
    return Outcome(metrics=metrics, hit=Hit(evidence=ev, estimate=None, fields=fields))
