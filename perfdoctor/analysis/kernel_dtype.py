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

_GEMM_RE = re.compile(
    r"(?<!fb)gemm|Cijk_|xmma|wgmma|tensorop|implicit_gemm|conv|cutlass|matmul|sm\d\d_|[sh]cudnn|winograd", re.I
)

# checked in order: the first that matches wins
_RULES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("fp8", re.compile(r"e4m3|e5m2|fp8|f8f8", re.I)),
    ("bf16", re.compile(r"bf16|bfloat16|_BBS_|_BSS_|_BB_", re.I)),
    ("fp16", re.compile(r"fp16|f16f16|__half|c10::Half|h884|h1688|h16816|hgemm|_HHS_|_HSS_|_HH_|\bhalf\b", re.I)),
    ("tf32", re.compile(r"tf32|xf32|s1688gemm|s16816gemm|_4x4x4x4_XF", re.I)),
    ("fp64", re.compile(r"dgemm|fp64|f64f64|d884|double|_DB_|_DD_", re.I)),
    # cuDNN's "scudnn" kernels (volta_scudnn_128x64_relu_*) are single-precision SIMT, like "sgemm"
    ("fp32", re.compile(r"sgemm|scudnn|f32f32_f32f32|_SB_|_SS_|<float|fp32", re.I)),
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
