"""PD203 fp32-matmul-without-tensor-cores: FP32 GEMM/convolution kernels on a GPU with tensor cores.

Tensor cores exist from compute capability 7.0 (Volta: FP16), TF32 and BF16
from 8.0 (Ampere) — NVIDIA CUDA C++ Programming Guide, "Warp Matrix Functions"
and the Ampere architecture whitepaper. The kernel's math is read from its
name (:mod:`perfdoctor.analysis.timing.kernel_dtype`: ``volta_sgemm``, ``<float``...).
AMD GPUs are skipped: rocBLAS already runs FP32 GEMMs on matrix cores.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from perfdoctor.analysis.timing.arch import ArchGuess
from perfdoctor.analysis.timing.kernel_dtype import gemm_mask, kernel_math_dtype
from perfdoctor.analysis.work.hardware import DeviceSpec, match_device
from perfdoctor.checks.common import pct, top_names
from perfdoctor.checks.context import Outcome, RankContext, passed, skipped
from perfdoctor.findings import Estimate, Evidence, Hit
from perfdoctor.trace.json_value import number

CODE = "PD203"
METRICS = {
    "fp32_gemm_us": "mean µs per step in FP32 (SIMT) GEMM / convolution kernels",
    "fp32_gemm_share_pct": "fp32_gemm_us as % of all GEMM / convolution kernel time",
    "compute_capability": "the GPU's compute capability (major + minor / 10)",
}

# every field a hit gives the TOML message and headline (its evidence values and fields; checked at load)
MESSAGE_FIELDS = (
    "advice",
    "fp32_gemm_ms",
    "fp32_gemm_pct_of_step",
    "gpu",
    "compute_capability",
)
# the GPU's situations, each with its fix_<situation> in the TOML: fp16 only (compute capability 7.x), bf16 only
# (TF32 no faster than FP32: GeForce Ampere/Ada), bf16 or TF32 (datacenter Ampere and later)
ADVICE = ("fp16", "bf16", "tf32")


@dataclass(frozen=True)
class Thresholds:
    """``[thresholds]`` of rules/PD203.toml: names and types checked when the catalogue loads."""

    min_fp32_share_pct: float
    min_saving_pct: float
    max_speedup: float
    default_speedup: float


AMD = re.compile(r"AMD|Radeon|Instinct|MI\d{3}", re.I)


@dataclass(frozen=True)
class Gpu:
    """The rank's GPU as the trace describes it: its name ("" when unknown), compute capability, the hardware
    table's entry (:func:`perfdoctor.analysis.work.hardware.match_device`; None when unknown) and, for a trace without
    deviceProperties, the architecture its kernel names name
    (:func:`perfdoctor.analysis.timing.arch.infer_from_tables`)."""

    name: str
    cc: tuple[int, int] | None
    spec: DeviceSpec | None
    guess: ArchGuess | None


def _device(ctx: RankContext) -> Gpu:
    if not ctx.tables.device_properties:
        from perfdoctor.analysis.timing.arch import infer_from_tables

        guess = infer_from_tables(ctx.tables)  # old traces: the architecture the kernel names name
        if guess is not None and guess.vendor == "nvidia":
            return Gpu(f"{guess.family.capitalize()} GPU", guess.compute_capability, guess.spec, guess)
    for p in ctx.tables.device_properties:
        if isinstance(p, dict) and p.get("id", 0) == ctx.device.device:
            major, minor = number(p.get("computeMajor")), number(p.get("computeMinor", 0))
            cc = (int(major), int(minor or 0)) if major is not None else None
            return Gpu(str(p.get("name", "")), cc, match_device(p) if p else None, None)
    return Gpu("", None, None, None)


def _situation(cc: tuple[int, int], spec: DeviceSpec | None, name: str) -> str:
    """Which of :data:`ADVICE` fits this GPU. TF32 is offered only where its tensor rate beats the FP32 CUDA-core
    rate: on GeForce Ampere/Ada cards the TF32 tensor peak equals the FP32 peak (GA102 whitepaper v2.0 and Ada
    whitepaper v1.1, Appendix A: RTX 3090 35.6 vs 35.6, RTX 4090 82.6 vs 82.6 TFLOP/s), so only bf16/fp16 gain
    there. Below compute capability 8.0 there is neither bf16 nor TF32: fp16 with a loss scaler."""
    if cc < (8, 0):
        return "fp16"
    tf32, fp32 = (spec.peak("tf32"), spec.peak("fp32")) if spec is not None else (None, None)
    if (tf32 and fp32 and tf32 <= fp32) or (spec is None and "geforce" in name.lower()):
        return "bf16"
    return "tf32"


# the message's one-line advice for each situation (the finding's fix is the TOML's fix_<situation>)
_BF16 = 'bf16 autocast (torch.autocast("cuda", dtype=torch.bfloat16))'
_SHORT = {
    "fp16": 'fp16 mixed precision (torch.autocast("cuda", dtype=torch.float16) with torch.amp.GradScaler); '
    "this GPU has no bf16 or TF32 tensor cores",
    "bf16": f"{_BF16}; TF32 gives nothing on this GPU (its TF32 tensor rate equals its FP32 rate)",
    "tf32": f'{_BF16}, or TF32 for the FP32 matmuls (torch.set_float32_matmul_precision("high"))',
}


def _peak_ratio(spec: DeviceSpec | None, cc: tuple[int, int]) -> float | None:
    """Dense tensor-core ÷ FP32 peak of the matched device (hardware.py datasheet figures), or None."""
    fp32 = spec.peak("fp32") if spec is not None else None
    if spec is None or not fp32:
        return None
    tc = (spec.peak("bf16") or spec.peak("tf32")) if cc >= (8, 0) else spec.peak("fp16")
    return tc / fp32 if tc else None


def _replayed(ctx: RankContext, spec: DeviceSpec | None) -> tuple[float, str] | None:
    """(saving µs, method) from the replay with each FP32 GEMM/conv at its roofline floor at the tensor-core peak
    of ``spec``, or None without a matched device or any costed (shape-recorded) kernel."""
    from perfdoctor.replay.transforms.kernels import tensor_cores

    if spec is None:
        return None
    whatif = tensor_cores(ctx.replay(), ctx.tables, spec)
    if whatif.assumption.startswith("0 of") or whatif.assumption.startswith("no FP32"):
        return None
    saving, _, method = ctx.replayed_saving(whatif)
    return max(saving, 0.0), method


def check(ctx: RankContext) -> Outcome:
    th = ctx.thresholds(Thresholds)
    gpu = _device(ctx)
    name, cc = gpu.name, gpu.cc
    if AMD.search(name) or ctx.tables.names_matching(r"^hip").any():
        return skipped("AMD GPU: rocBLAS/MIOpen run FP32 GEMMs on matrix cores; the rule is about NVIDIA tensor cores")
    if cc is None:
        return skipped(
            "GPU compute capability unknown (no deviceProperties in the trace, and no kernel name names "
            "the architecture)"
        )
    is32, fp32_us, share = _fp32_gemms(ctx)
    metrics = {"fp32_gemm_us": fp32_us, "fp32_gemm_share_pct": share, "compute_capability": cc[0] + cc[1] / 10}
    if cc < (7, 0):
        return passed(**metrics)
    ratio = _peak_ratio(gpu.spec, cc)
    speedup = min(ratio or th.default_speedup, th.max_speedup)
    replayed = _replayed(ctx, gpu.spec)
    saving, method = replayed if replayed is not None else (fp32_us * (1.0 - 1.0 / speedup), "")
    if share < th.min_fp32_share_pct or saving <= 0:
        return passed(**metrics)  # min_saving_pct is the engine's: alone or after the higher-ranked fixes
    situation = _situation(cc, gpu.spec, name)
    k, names = ctx.kernels(), ctx.tables.name_array()
    ev = Evidence(
        values={
            "gpu": name or "this GPU",
            "compute_capability": f"{cc[0]}.{cc[1]}"
            + (", inferred from kernel names" if gpu.guess is not None else ""),
            "fp32_gemm_ms": fp32_us / 1000,
            "fp32_gemm_pct_of_step": pct(fp32_us, ctx.step_us),
            "fp32_share_of_gemm_pct": share,
            "assumed_speedup": speedup,
            "advice": _SHORT[situation],
        },
        steps=ctx.step_numbers,
        events=top_names(names[k.name_id[is32]], k.dur_us[is32]),
    )
    if replayed is None:
        method = _bound_method(speedup, ratio, gpu.guess)
    hit = Hit(
        evidence=ev,
        estimate=Estimate(saving, method),
        advice=ctx.advice(situation),
        min_saving_pct=th.min_saving_pct,
    )
    return Outcome(metrics=metrics, hit=hit)


def _fp32_gemms(ctx: RankContext) -> tuple[np.ndarray, float, float]:
    """(mask over :meth:`RankContext.kernels`: the GEMM/conv kernels in the steps whose math runs in FP32; their µs
    per step; their share of all GEMM/conv kernel time, %)."""
    k = ctx.kernels()
    names = ctx.tables.name_array()
    gemm = gemm_mask(ctx.tables.names, k.name_id, k.category) & (k.step >= 0)
    fp32_ids = [i for i in np.unique(k.name_id[gemm]).tolist() if kernel_math_dtype(names[i]) == "fp32"]
    is32 = gemm & np.isin(k.name_id, fp32_ids)
    all_gemm_us = float(k.dur_us[gemm].sum())
    fp32_us = float(k.dur_us[is32].sum()) / max(ctx.n_steps, 1)
    return is32, fp32_us, pct(fp32_us * max(ctx.n_steps, 1), all_gemm_us)


def _bound_method(speedup: float, ratio: float | None, guess: ArchGuess | None) -> str:
    """The method of the upper bound used when the fix cannot be replayed: FP32 time × (1 − 1/``speedup``), the
    speedup from the datasheets' peak ``ratio`` (None: the default) and, without deviceProperties, the ``guess``
    of the architecture."""
    src = "datasheet tensor-core ÷ FP32 peak" if ratio else "default speedup (GPU not in the hardware table)"
    if guess is not None:
        src += f"; no deviceProperties: architecture inferred from {guess.evidence!r}" + (
            f", {guess.assumption}" if ratio else ""
        )
    return (
        f"FP32 GEMM/conv kernel time per step × (1 − 1/{speedup:.1f}), {src}, capped at max_speedup "
        "(an upper bound: no op shapes or no device in the hardware table to replay the fix with)"
    )
