"""Classify GPU activity names into the categories of the step breakdown.

The classification is one table of data (:data:`KERNEL_RULES`): the first
pattern that matches (``re.search``, case-insensitive) wins. Patterns were
written from the kernel names in real Kineto traces (V100, A100, H100, MI250,
MI300X; cuBLAS, cutlass, cuDNN, xmma/wgmma, nvjet, rocBLAS/Tensile/hipBLASLt,
MIOpen/composable_kernel, NCCL/RCCL, Triton) and are unit-tested on them.

Categories (``CATEGORIES``): matmul, attention, conv, elementwise,
reduction_norm, optimizer, communication, memcpy, memset, other.
Communication kernels (NCCL/RCCL, MSCCL, NVSHMEM, DeepEP, oneCCL, symmetric-memory and
custom all-reduce/all-to-all kernels) also get a collective (all_reduce, all_gather,
reduce_scatter, broadcast, send_recv, all_to_all, reduce, other); memcpy gets
a direction (h2d, d2h, d2d, h2h, p2p) and whether the host side is pageable or pinned.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

CATEGORIES = (
    "matmul",
    "attention",
    "conv",
    "elementwise",
    "reduction_norm",
    "optimizer",
    "communication",
    "memcpy",
    "memset",
    "other",
)

# (category, pattern). Order matters: communication before everything (NCCL names
# contain "Sum", "Reduce"), attention before matmul (flash kernels contain "gemm"),
# conv before matmul (implicit-GEMM convolutions contain "gemm").
KERNEL_RULES: tuple[tuple[str, str], ...] = (
    ("memcpy", r"^(memcpy|dma)"),
    ("memset", r"^memset"),
    # NCCL/RCCL; MSCCL/MSCCL++; NVSHMEM; DeepEP expert-parallel all-to-all (dpsk::ep / deep_ep); oneCCL; torch
    # symmetric-memory and custom all-reduce / all-to-all kernels (vLLM, SGLang, MoE libraries)
    (
        "communication",
        r"^nccl|^rccl|nccl(dev)?kernel|ncclKernel|rccl|msccl|nvshmem|dpsk::ep::|deep_?ep::|oneccl|\bccl::"
        r"|all_?reduce_kernel|cross_device_reduce|one_shot_all_reduce|two_shot_all_reduce"
        r"|symmetric_memory::|multimem_all|custom_?all_?reduce|all_?to_?all|alltoall",
    ),
    # cuDNN's BatchNorm kernels (bn_fw_tr_1C11_*, bn_bw_1C11_*) live in the cudnn:: namespace: before conv
    ("reduction_norm", r"cudnn::bn_|\bbn_fw|\bbn_bw|batch_?norm|BatchNorm"),
    ("elementwise", r"cudnn::ops::scalePackedTensor|cudnn::ops::(add|scale|copy)"),
    # FlashAttention 2/3 (flash_fwd_kernel, flash::FlashAttnFwdSm90), memory-efficient (fmha_cutlassF/B), cuDNN SDPA
    # (cudnn_generated_fort_native_sdpa_*), CK / aiter on AMD (ck_tile::FmhaFwdKernel), Triton (_attn_fwd,
    # flex_attention templates), TransformerEngine fused_attn, paged/decode attention
    (
        "attention",
        r"flash|fmha|attn_fwd|attn_bwd|_attention|attention_|efficient_attention|mem_eff|sdpa"
        r"|fused_multihead|softmax_attention|flex_attention|fused_attn|paged_attention|decode_attention"
        r"|xformers",
    ),
    (
        "conv",
        r"conv|scudnn|cudnn::|cudnn_|wgrad|dgrad|fprop|winograd|implicit_gemm|implicit_convolve|igemm_(fwd|bwd|wrw)|miopen|naive_conv|im2col|col2im|nchwToNhwc|nhwcToNchw|cask_cudnn|ck::tensor_operation.*grouped_conv",
    ),
    (
        "matmul",
        r"gemm|gemv|sgemm|hgemm|cublas|cutlass|xmma|wgmma|nvjet|^Cijk_|Tensile|hipblaslt|rocblas|matmul|_mm_|triton_tem_fused.*(mm|addmm|bmm)|splitKreduce|dot_kernel|gemmk1|gemmSN|scal_kernel|reduce_1Block_kernel|epilogue::impl|ck::tensor_operation.*gemm|_bmm|bmm_",
    ),
    (
        "optimizer",
        r"multi_tensor_apply|fused_adam|FusedAdam|adam_kernel|_fused_adamw?|fused_sgd|\blamb_|_lamb\b|adagrad|optimizer|_amp_foreach|foreach_tensor",
    ),
    (
        "reduction_norm",
        r"reduce_kernel|reduction|layer_?norm|LayerNorm|batch_?norm|BatchNorm|group_?norm|rms_?norm|RMSNorm|GammaBeta|RowwiseMoments|bn_fw|bn_bw|softmax|logsoftmax|cunn_SoftMax|nll_loss|NLLCriterion|cross_entropy|welford|norm_kernel|triton_(red|per)_|sum_kernel|mean_kernel|max_pool|avg_pool|pooling|cumsum|scan|topk|argmax|sort",
    ),
    (
        "elementwise",
        r"elementwise|vectorized|unrolled|triton_poi_|pointwise|copy_kernel|direct_copy|CatArray|cat_|fill_kernel|index|scatter|gather|where|relu|gelu|silu|sigmoid|tanh|dropout|add_kernel|mul_kernel|BinaryFunctor|UnaryFunctor|transpose|permute|embedding|SubTensorOp|cast|clamp|masked|arange|triu|tril|bernoulli|philox|random|distribution|_to_copy|batched_transpose|lookup",
    ),
)

COLLECTIVE_RULES: tuple[tuple[str, str], ...] = (
    ("all_reduce", r"all_?reduce"),
    ("all_gather", r"all_?gather"),
    ("reduce_scatter", r"reduce_?scatter"),
    # DeepEP's dispatch/combine (and their notify_* count exchange) are expert-parallel all-to-all
    ("all_to_all", r"all_?to_?all|alltoall|dpsk::ep::|deep_?ep::"),
    ("broadcast", r"broadcast|bcast"),
    ("send_recv", r"send|recv|sendrecv"),
    ("reduce", r"reduce"),
)

_KERNEL_RX = tuple((cat, re.compile(rx, re.IGNORECASE)) for cat, rx in KERNEL_RULES)
_COLL_RX = tuple((c, re.compile(rx, re.IGNORECASE)) for c, rx in COLLECTIVE_RULES)
_TRITON_RX = re.compile(r"^triton_|triton", re.IGNORECASE)
_MEMCPY_DIR = (
    ("h2d", re.compile(r"HtoD|Host to Device|H2D|CopyHostToDevice", re.IGNORECASE)),
    ("d2h", re.compile(r"DtoH|Device to Host|D2H|CopyDeviceToHost", re.IGNORECASE)),
    ("d2d", re.compile(r"DtoD|Device to Device|D2D|CopyDeviceToDevice", re.IGNORECASE)),
    ("p2p", re.compile(r"PtoP|Peer", re.IGNORECASE)),
    ("h2h", re.compile(r"HtoH|Host to Host", re.IGNORECASE)),
)


@dataclass(frozen=True)
class KernelClass:
    """Classification of one GPU activity name.

    Attributes:
        category: one of :data:`CATEGORIES`.
        collective: for communication, the collective (``all_reduce``...), else "".
        direction: for memcpy, ``h2d``/``d2h``/``d2d``/``p2p``/``h2h`` or "unknown"; else "".
        pageable: for memcpy, True/False when the name says ``Pageable``/``Pinned``, else None.
        triton: True for Triton-generated kernels (``triton_poi_``, ``triton_red_``...).
    """

    category: str
    collective: str = ""
    direction: str = ""
    pageable: bool | None = None
    triton: bool = False


@functools.lru_cache(maxsize=1 << 16)  # once per distinct name: the result is frozen, so sharing it is safe
def classify_kernel(name: str) -> KernelClass:
    """Classify one kernel / memcpy / memset name (see module docstring)."""
    category = _first_match(_KERNEL_RX, name, "other")
    triton = bool(_TRITON_RX.search(name))
    if category == "communication":
        return KernelClass(category, collective=collective_of(name), triton=False)
    if category == "memcpy":
        direction = _first_match(_MEMCPY_DIR, name, "unknown")
        pageable = True if "pageable" in name.lower() else False if "pinned" in name.lower() else None
        return KernelClass(category, direction=direction, pageable=pageable)
    return KernelClass(category, triton=triton)


def classify_names(names: list[str]) -> list[KernelClass]:
    """Classify a whole string table (one call per distinct name)."""
    return [classify_kernel(n) for n in names]


def collective_of(name: str) -> str:
    """The collective a communication op/annotation name refers to, or "other"."""
    return _first_match(_COLL_RX, name, "other")


def _first_match(rules: tuple[tuple[str, re.Pattern[str]], ...], name: str, default: str) -> str:
    """Label of the first (label, regex) rule whose regex is found in ``name``, else ``default``."""
    return next((label for label, rx in rules if rx.search(name)), default)
