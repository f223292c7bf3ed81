"""FLOPs and bytes of convolutions (forward and backward), from recorded shapes.

Source: ``torch/utils/flop_counter.py`` (``conv_flop_count``); see
:mod:`perfdoctor.analysis.work.op_flops` for the conventions (FLOP = 2 per multiply-add,
bytes = minimum traffic).
"""

from __future__ import annotations

import math
import re

from perfdoctor.analysis.work.op_args import Args, OpCost, Uncosted, sum_bytes

# ---- convolution. Source: torch/utils/flop_counter.py conv_flop_count: 2·N·K·(C/g)·∏kernel·∏out ----
# argument positions from aten's native_functions.yaml: input, weight, stride, padding, dilation, transposed, groups
_CONV_ARGS: dict[str, tuple[int, int, int, int, int, int | None]] = {
    "conv1d": (0, 1, 3, 4, 5, None),
    "conv2d": (0, 1, 3, 4, 5, None),
    "conv3d": (0, 1, 3, 4, 5, None),
    "convolution": (0, 1, 3, 4, 5, 6),
    "_convolution": (0, 1, 3, 4, 5, 6),
    "cudnn_convolution": (0, 1, 3, 2, 4, None),
    "miopen_convolution": (0, 1, 4, 3, 5, None),
    "mkldnn_convolution": (0, 1, 4, 3, 5, None),
}


def _conv_out(
    spatial: tuple[int, ...],
    kernel: tuple[int, ...],
    stride: list[int] | None,
    padding: list[int] | None,
    dilation: list[int] | None,
) -> tuple[int, ...] | None:
    n = len(spatial)

    def expand(v: list[int] | None, default: int) -> list[int] | None:
        if v is None:
            return None
        return v * n if len(v) == 1 else v if len(v) == n else None

    s, p, d = expand(stride, 1), expand(padding, 0), expand(dilation, 1)
    if s is None or p is None or d is None:
        return None
    # output size: PyTorch Conv2d docs, H_out = ⌊(H + 2p − d(k−1) − 1)/s⌋ + 1
    return tuple((spatial[i] + 2 * p[i] - d[i] * (kernel[i] - 1) - 1) // s[i] + 1 for i in range(n))


def _conv(name: str, args: Args) -> OpCost | Uncosted:
    xi, wi, si, pi, di, ti = _CONV_ARGS[name]
    x, w = args.tensor(xi), args.tensor(wi)
    if x is None or w is None or len(x) < 3 or len(w) != len(x):
        return Uncosted(f"{name}: input/weight shapes not recorded")
    if ti is not None and args.flag(ti) is not False:
        return Uncosted(f"{name}: transposed flag not recorded or transposed convolution")
    out = _conv_out(x[2:], w[2:], args.int_list(si), args.int_list(pi), args.int_list(di))
    if out is None:
        return Uncosted(
            f"{name}: stride/padding/dilation not recorded (Kineto records them as Concrete Inputs "
            "only from PyTorch 2.1), so the output size is unknown"
        )
    n, k = x[0], w[0]
    flops = 2.0 * n * math.prod(w) * math.prod(out)
    extra = [2] if name in ("conv1d", "conv2d", "conv3d", "convolution", "_convolution") and args.tensor(2) else []
    nbytes = sum_bytes(args, [xi, wi, *extra], n * k * math.prod(out), args.elem_bytes(xi))
    return OpCost(flops, nbytes, args.dtype(), "conv", f"2·N·∏weight·∏out = 2·{n}·{math.prod(w)}·{math.prod(out)}")


# grad_output, input, weight, output_mask positions
_CONV_BWD_ARGS = {"convolution_backward": (0, 1, 2, 10), "cudnn_convolution_backward": (1, 0, 2, 10)}


def _conv_backward(name: str, args: Args) -> OpCost | Uncosted:
    gi, xi, wi, mi = _CONV_BWD_ARGS[name]
    go, x, w = args.tensor(gi), args.tensor(xi), args.tensor(wi)
    if go is None or x is None or w is None or len(go) < 3 or len(w) != len(go):
        return Uncosted(f"{name}: grad_output/input/weight shapes not recorded")
    if name == "convolution_backward" and args.flag(7) is True:
        return Uncosted(f"{name}: transposed convolution backward is not costed")
    mask = args.concrete[mi] if mi < len(args.concrete) else ""
    flags = re.findall(r"True|False", mask)
    grads = [flag == "True" for flag in flags[:2]] if len(flags) >= 2 else [True, True]
    fwd = 2.0 * go[0] * math.prod(w) * math.prod(go[2:])
    # torch flop_counter conv_backward_flop: grad_input and grad_weight each cost one forward convolution
    flops = fwd * sum(grads)
    size = args.elem_bytes(gi)
    reads = sum_bytes(args, [gi, xi, wi])
    writes = (math.prod(x) * grads[0] + math.prod(w) * grads[1]) * size if size else None
    nbytes = None if reads is None or writes is None else reads + writes
    return OpCost(
        flops,
        nbytes,
        args.dtype(),
        "conv",
        f"{sum(grads)} × forward conv (2·N·∏weight·∏out = 2·{go[0]}·{math.prod(w)}·{math.prod(go[2:])})",
    )


def _conv_backward_input(args: Args) -> OpCost | Uncosted:
    go, w = args.tensor(1), args.tensor(2)
    if go is None or w is None or len(go) < 3:
        return Uncosted("cudnn_convolution_backward_input: shapes not recorded")
    flops = 2.0 * go[0] * math.prod(w) * math.prod(go[2:])
    size_list = args.int_list(0)
    out = math.prod(size_list) if size_list else None
    nbytes = sum_bytes(args, [1, 2], out, args.elem_bytes(1)) if out else None
    return OpCost(flops, nbytes, args.dtype(), "conv", "1 × forward conv (grad_input)")
