"""Which math a GEMM/convolution kernel ran in, from its name.

Library kernel names encode the operand types (cuBLAS ``ampere_sgemm_128x64_tn`` =
FP32 SIMT, ``cutlass_80_tensorop_s1688gemm`` = TF32 tensor cores on sm80,
``sm90_xmma_gemm_bf16bf16_bf16f32_f32`` = BF16, ``volta_h884gemm`` = FP16 HMMA;
rocBLAS/Tensile ``Cijk_..._BBS_`` = BF16 in, FP32 compute; MIOpen
``igemm_fwd_gtcx3_nhwc_bf16``). The input dtype of the aten op cannot tell FP32 from
TF32: only the kernel can. Source: the naming seen in the shared traces (V100,
A100, H100, MI250, MI300X) and cuBLAS/CUTLASS/Tensile naming conventions
(CUTLASS ``s1688gemm`` = single-precision in, 16×8×8 TF32 MMA).
"""

from __future__ import annotations

import functools
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np


@dataclass
class GemmDtype:
    """The math dtype of the GEMM/conv kernels weighted by their time: ``time_us`` µs per dtype
    (:func:`perfdoctor.analysis.work.mfu.gemm_dtype` fills it per rank)."""

    dominant: str | None = None
    time_us: dict[str, float] = field(default_factory=dict)


_GEMM_RE = re.compile(
    r"(?<!fb)gemm|Cijk_|xmma|wgmma|tensorop|implicit_gemm|conv|cutlass|matmul|sm\d\d_|[sh]cudnn|winograd", re.I
)

# checked in order: the first that matches wins
_RULES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("fp8", re.compile(r"e4m3|e5m2|fp8|f8f8", re.I)),
    ("bf16", re.compile(r"bf16|bfloat16|_BBS_|_BSS_|_BB_", re.I)),
    (
        "fp16",
        re.compile(
            r"fp16|f16f16|__half|c10::Half|h884|h1688|h16816|hgemm|_HHS_|_HSS_|_HH_|\bhalf\b|(?:^|_)f16(?:_|$)", re.I
        ),
    ),
    ("tf32", re.compile(r"tf32|xf32|s1688gemm|s16816gemm|_4x4x4x4_XF", re.I)),
    ("fp64", re.compile(r"dgemm|fp64|f64f64|d884|double|_DB_|_DD_", re.I)),
    # cuDNN's "scudnn" kernels (volta_scudnn_128x64_relu_*) are single-precision SIMT, like "sgemm"
    # xFormers / PyTorch memory-efficient attention names its dtype as a token (fmha_cutlassF_f16_aligned_*,
    # fmha_cutlassB_f32_aligned_*: the backward carries no "<float" template argument: RTX 3060 trace_04)
    ("fp32", re.compile(r"sgemm|scudnn|f32f32_f32f32|_SB_|_SS_|<float|fp32|(?:^|_)f32(?:_|$)", re.I)),
)


# A trace repeats a few hundred kernel names across ~10^5 kernels: classify each distinct name once.
@functools.lru_cache(maxsize=1 << 16)
def is_gemm_kernel(name: str) -> bool:
    """True for matmul/convolution library kernels (cuBLAS, CUTLASS, cuDNN, rocBLAS, MIOpen, CK)."""
    return bool(_GEMM_RE.search(name))


@functools.lru_cache(maxsize=1 << 16)
def kernel_math_dtype(name: str) -> str | None:
    """``fp8``/``bf16``/``fp16``/``tf32``/``fp64``/``fp32`` from a kernel name, or None if it does not say."""
    for dtype, rx in _RULES:
        if rx.search(name):
            return dtype
    return None


# GEMM/conv-category kernels that are layout, normalisation or split-K helpers, not the GEMM itself
NOT_GEMM = re.compile(r"bn_|batch_?norm|nchwToNhwc|nhwcToNchw|transpose|im2col|col2im|splitKreduce|reduce_", re.I)


@functools.lru_cache(maxsize=1 << 16)
def _is_helper(name: str) -> bool:
    return NOT_GEMM.search(name) is not None


def gemm_mask(names: Sequence[str], name_id: np.ndarray, category: np.ndarray) -> np.ndarray:
    """Which kernels are GEMMs/convolutions (bool, shape of ``name_id``): the breakdown's ``matmul`` and ``conv``
    categories, plus the batched GEMMs of unfused attention (category ``attention`` with a GEMM library name),
    less layout/normalisation/split-K helpers (:data:`NOT_GEMM`). ``names``: the trace's name table;
    ``category``: each kernel's breakdown category (:func:`perfdoctor.analysis.timing.kernel_ops.kernel_labels`).
    The one definition of "GEMM kernel time" behind the report's GEMM dtype and PD203."""
    if name_id.size == 0:
        return np.zeros(0, dtype=bool)
    uniq = np.unique(name_id).tolist()
    gemm_names = [i for i in uniq if not _is_helper(names[i])]
    attn_names = [i for i in gemm_names if is_gemm_kernel(names[i])]
    cat_ok = np.isin(category, ["matmul", "conv"]) | ((category == "attention") & np.isin(name_id, attn_names))
    mask: np.ndarray = cat_ok & np.isin(name_id, gemm_names)
    return mask


def gemm_time_by_dtype(names: Sequence[str], name_id: np.ndarray, dur_us: np.ndarray) -> dict[str, float]:
    """GEMM kernel time (µs) by math dtype (:func:`kernel_math_dtype`) of the given GEMM kernels; kernels whose
    name does not say are left out. One regex test per distinct name."""
    out: dict[str, float] = defaultdict(float)
    if name_id.size == 0:
        return {}
    uniq, inv = np.unique(name_id, return_inverse=True)
    per_name = np.bincount(inv, weights=dur_us)
    for nid, dur in zip(uniq.tolist(), per_name.tolist()):
        d = kernel_math_dtype(names[nid])
        if d:
            out[d] += dur
    return dict(out)
