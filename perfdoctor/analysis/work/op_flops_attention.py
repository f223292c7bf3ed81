"""FLOPs and bytes of scaled-dot-product / flash / memory-efficient attention, from recorded shapes.

Source: ``torch/utils/flop_counter.py`` (``sdpa_flop_count``) for the forward;
see :mod:`perfdoctor.analysis.work.op_flops` for the conventions.
"""

from __future__ import annotations

from perfdoctor.analysis.work.op_args import Args, OpCost, Uncosted, sum_bytes

# ---- attention. Forward: 2·B·H·Lq·Lk·(D + Dv) (QKᵀ and PV), as torch flop_counter sdpa_flop_count;
# backward 2.5 × forward: FlashAttention recomputes QKᵀ (Dao, "FlashAttention-2", 2023, §4.1: 5 matmuls vs 2);
# causal masking halves the work (only the lower triangle is computed by flash/efficient kernels).
# (layout, q, k, v, causal arg, causal arg is a mask type, backward)
_ATTN: dict[str, tuple[str, int, int, int, int, bool, bool]] = {
    "scaled_dot_product_attention": ("bhld", 0, 1, 2, 5, False, False),
    "_scaled_dot_product_flash_attention": ("bhld", 0, 1, 2, 4, False, False),
    "_scaled_dot_product_flash_attention_for_cpu": ("bhld", 0, 1, 2, 4, False, False),
    "_scaled_dot_product_efficient_attention": ("bhld", 0, 1, 2, 6, False, False),
    "_scaled_dot_product_cudnn_attention": ("bhld", 0, 1, 2, 6, False, False),
    "_flash_attention_forward": ("blhd", 0, 1, 2, 8, False, False),
    "_efficient_attention_forward": ("blhd", 0, 1, 2, 9, True, False),
    "_scaled_dot_product_flash_attention_backward": ("bhld", 1, 2, 3, 11, False, True),
    "_scaled_dot_product_flash_attention_for_cpu_backward": ("bhld", 1, 2, 3, 7, False, True),
    "_scaled_dot_product_efficient_attention_backward": ("bhld", 1, 2, 3, 11, False, True),
    "_scaled_dot_product_cudnn_attention_backward": ("bhld", 1, 2, 3, 14, False, True),
    "_flash_attention_backward": ("blhd", 1, 2, 3, 11, False, True),
    "_efficient_attention_backward": ("blhd", 1, 2, 3, 14, True, True),
}


def _attention(name: str, args: Args) -> OpCost | Uncosted:
    layout, qi, ki, vi, ci, mask_type, backward = _ATTN[name]
    q, k, v = args.tensor(qi), args.tensor(ki), args.tensor(vi)
    if q is None or k is None or v is None or len(q) != 4 or len(k) != 4 or len(v) != 4:
        return Uncosted(f"{name}: q/k/v are not 4-D (variable-length batches are not costed)")
    if layout == "bhld":
        b, h, lq, d = q
        lk, dv = k[2], v[3]
    else:
        b, lq, h, d = q
        lk, dv = k[1], v[3]
    flops = 2.0 * b * h * lq * lk * (d + dv)
    raw = args.concrete[ci].strip() if ci < len(args.concrete) else ""
    causal = (raw not in ("", "0", "None")) if mask_type else (args.flag(ci) is True)
    notes = []
    if causal:
        flops *= 0.5
        notes.append("causal ÷ 2")
    elif not raw:
        notes.append("causal flag not recorded: counted as full attention")
    if backward:
        flops *= 2.5
        notes.append("backward = 2.5 × forward")
    io = sum_bytes(args, [qi, ki, vi], b * h * lq * dv, args.elem_bytes(qi))
    nbytes = None if io is None else io * (2 if backward else 1)  # backward reads q,k,v,o,dO, writes dq,dk,dv
    formula = f"2·B·H·Lq·Lk·(D+Dv) = 2·{b}·{h}·{lq}·{lk}·{d + dv}" + (f" ({', '.join(notes)})" if notes else "")
    return OpCost(flops, nbytes, args.dtype(), "attention", formula)
