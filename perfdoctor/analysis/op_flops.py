"""FLOPs and bytes moved by one aten op, from its recorded input shapes and dtypes.

Inputs are what Kineto records with ``record_shapes=True``: ``Input Dims`` (one
list per argument; ``[]`` for scalars and lists), ``Input type`` (``"float"``,
``"c10::BFloat16"``, ``"Scalar"``, ...) and, in PyTorch ≥ 2.1, ``Concrete Inputs``
(the values of int-list / scalar arguments as strings, ``""`` for tensors).

FLOP conventions follow ``torch.utils.flop_counter`` (FlopCounterMode) so that
op sums agree with ``perfdoctor profile``'s measured model FLOPs: one multiply-add
= 2 FLOPs; matmul bias adds are not counted. Bytes are the *minimum* traffic: each
tensor input read once and each output written once (the roofline's Q).

An op that has no formula, or whose shapes do not determine the cost (e.g. a
forward convolution without its stride/padding recorded), returns
:class:`Uncosted` with the reason: never a guess.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable

import orjson

# Kineto "Input type" strings -> (dtype key, bytes per element). Source: c10 ScalarType
# names as printed by torch.profiler (c10::toString / demangled C++ type names).
_TYPES: dict[str, tuple[str, int]] = {
    "double": ("fp64", 8), "float": ("fp32", 4), "c10::Half": ("fp16", 2), "c10::BFloat16": ("bf16", 2),
    "c10::Float8_e4m3fn": ("fp8", 1), "c10::Float8_e5m2": ("fp8", 1), "c10::Float8_e4m3fnuz": ("fp8", 1),
    "c10::Float8_e5m2fnuz": ("fp8", 1), "long int": ("int64", 8), "long": ("int64", 8), "int": ("int32", 4),
    "short int": ("int16", 2), "short": ("int16", 2), "signed char": ("int8", 1), "unsigned char": ("uint8", 1),
    "bool": ("bool", 1), "c10::complex<float>": ("complex64", 8), "c10::complex<double>": ("complex128", 16),
}
FLOAT_DTYPES = ("fp64", "fp32", "bf16", "fp16", "fp8")


@dataclass(frozen=True)
class OpCost:
    """Cost of one op call. ``flops`` in FLOP, ``bytes`` in bytes (None when a tensor's
    dtype was not recorded), ``dtype`` the first floating input's dtype key,
    ``kind`` one of matmul / conv / attention / elementwise / reduction / norm / memory."""

    flops: float
    bytes: float | None
    dtype: str | None
    kind: str
    formula: str


@dataclass(frozen=True)
class Uncosted:
    """Why an op could not be costed (one line)."""

    reason: str


@dataclass(frozen=True)
class Args:
    """Parsed arguments: ``dims[i]`` list of ints (``[]`` for non-tensors), ``types[i]``
    Kineto type string, ``concrete[i]`` string value or ``""``."""

    dims: tuple[tuple[int, ...], ...]
    types: tuple[str, ...]
    concrete: tuple[str, ...]
    tensor_lists: tuple[tuple[int, tuple[tuple[int, ...], ...]], ...] = ()

    def tensor(self, i: int) -> tuple[int, ...] | None:
        """Shape of argument ``i`` if it is a tensor (``()`` for a 0-dim tensor), else None."""
        if i >= len(self.dims):
            return None
        if i < len(self.types):
            return self.dims[i] if self.types[i] in _TYPES else None
        return self.dims[i] or None  # old traces without "Input type": non-empty dims = tensor

    def elem_bytes(self, i: int) -> int | None:
        return _TYPES[self.types[i]][1] if i < len(self.types) and self.types[i] in _TYPES else None

    def nbytes(self, i: int) -> float | None:
        shape, size = self.tensor(i), self.elem_bytes(i)
        return None if shape is None or size is None else float(math.prod(shape) * size)

    def dtype(self) -> str | None:
        for t in self.types:
            if t in _TYPES and _TYPES[t][0] in FLOAT_DTYPES:
                return _TYPES[t][0]
        return None

    def int_list(self, i: int) -> list[int] | None:
        if i >= len(self.concrete) or not self.concrete[i]:
            return None
        try:
            value = orjson.loads(self.concrete[i])
        except orjson.JSONDecodeError:
            return None
        if isinstance(value, int):
            return [value]
        return value if isinstance(value, list) and all(isinstance(v, int) for v in value) else None

    def flag(self, i: int) -> bool | None:
        value = self.concrete[i] if i < len(self.concrete) else ""
        return {"True": True, "False": False, "1": True, "0": False}.get(value.strip())


def parse_args(input_dims: Any, input_type: Any, concrete_inputs: Any = None) -> Args | None:
    """Args from Kineto's raw JSON (bytes/str) or already-decoded lists; None if unusable."""

    def load(raw: Any) -> Any:
        if raw is None:
            return None
        if isinstance(raw, (bytes, bytearray, memoryview, str)):
            try:
                return orjson.loads(raw)
            except orjson.JSONDecodeError:
                return None
        return raw

    dims, types, concrete = load(input_dims), load(input_type), load(concrete_inputs)
    if not isinstance(dims, list):
        return None
    dims_l: list[tuple[int, ...]] = []
    lists: list[tuple[int, tuple[tuple[int, ...], ...]]] = []
    for i, d in enumerate(dims):
        if isinstance(d, list) and all(isinstance(x, int) for x in d):
            dims_l.append(tuple(d))
        elif isinstance(d, list) and all(isinstance(x, list) and all(isinstance(y, int) for y in x) for x in d):
            dims_l.append(())  # a TensorList argument: shapes kept in tensor_lists
            lists.append((i, tuple(tuple(x) for x in d)))
        else:
            dims_l.append(())
    dims_t = tuple(dims_l)
    types_t = tuple(str(t) for t in types) if isinstance(types, list) else ()
    concrete_t = tuple(str(c) for c in concrete) if isinstance(concrete, list) else ()
    return Args(dims_t, types_t, concrete_t, tuple(lists))


def _sum_bytes(args: Args, idx: list[int], out_elems: float | None = None, out_size: int | None = None) -> float | None:
    total = 0.0
    for i in idx:
        b = args.nbytes(i)
        if b is None:
            return None
        total += b
    if out_elems is not None:
        if out_size is None:
            return None
        total += out_elems * out_size
    return total


# ---- matmul family. Source: torch/utils/flop_counter.py (mm_flop, bmm_flop, addmm_flop) ----

def _mm(args: Args, a: int, b: int, extra: list[int], name: str) -> OpCost | Uncosted:
    x, w = args.tensor(a), args.tensor(b)
    if x is None or w is None or len(x) < 1 or len(w) < 1:
        return Uncosted(f"{name}: operand shapes not recorded")
    if len(x) == 1:
        x = (1, *x)
    vec_out = len(w) == 1
    if vec_out:
        w = (*w, 1)
    *bx, m, k = x
    *bw, k2, n = w
    if k != k2:
        return Uncosted(f"{name}: inner dimensions differ ({k} vs {k2})")
    try:
        batch = math.prod(_broadcast(tuple(bx), tuple(bw)))
    except ValueError:
        return Uncosted(f"{name}: batch dimensions do not broadcast")
    flops = 2.0 * batch * m * n * k
    out = batch * m * n
    nbytes = _sum_bytes(args, [a, b, *extra], out, args.elem_bytes(a))
    return OpCost(flops, nbytes, args.dtype(), "matmul", f"2·B·M·N·K = 2·{batch}·{m}·{n}·{k}")


def _broadcast(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    out = []
    for i in range(1, max(len(a), len(b)) + 1):
        da = a[-i] if i <= len(a) else 1
        db = b[-i] if i <= len(b) else 1
        if da != db and 1 not in (da, db):
            raise ValueError
        out.append(max(da, db))
    return tuple(reversed(out))


def _linear(args: Args) -> OpCost | Uncosted:
    x, w = args.tensor(0), args.tensor(1)
    if x is None or w is None or len(w) != 2:
        return Uncosted("linear: input/weight shapes not recorded")
    rows = math.prod(x[:-1])
    n, k = w
    flops = 2.0 * rows * n * k
    extra = [2] if args.tensor(2) else []
    nbytes = _sum_bytes(args, [0, 1, *extra], rows * n, args.elem_bytes(0))
    return OpCost(flops, nbytes, args.dtype(), "matmul", f"2·rows·N·K = 2·{rows}·{n}·{k}")


def _einsum(args: Args) -> OpCost | Uncosted:
    eq = args.concrete[0].strip().strip('"') if args.concrete else ""
    if "->" not in eq:
        return Uncosted("einsum: equation not recorded (needs Concrete Inputs)")
    lhs, _ = eq.replace(" ", "").split("->")
    terms = lhs.split(",")
    shapes = list(dict(args.tensor_lists).get(1, ())) or [d for d in args.dims[1:] if d]
    if len(terms) != 2 or len(shapes) != 2 or any(len(t) != len(s) for t, s in zip(terms, shapes)) or "." in lhs:
        return Uncosted("einsum: only two-operand equations without ellipsis are costed")
    sizes: dict[str, int] = {}
    for term, shape in zip(terms, shapes):
        for ch, n in zip(term, shape):
            sizes[ch] = max(sizes.get(ch, 1), n)
    out = math.prod(sizes[c] for c in eq.split("->")[1])
    flops = 2.0 * math.prod(sizes.values())
    size = next((_TYPES[t][1] for t in args.types if t in _TYPES), None)
    dtype = next((_TYPES[t][0] for t in args.types if t in _TYPES), None)
    in_bytes = sum(math.prod(s) for s in shapes) * size if size else None
    nbytes = None if in_bytes is None else in_bytes + out * size
    return OpCost(flops, nbytes, dtype, "matmul", f"2·∏(index sizes) for '{eq}'")


# ---- convolution. Source: torch/utils/flop_counter.py conv_flop_count: 2·N·K·(C/g)·∏kernel·∏out ----
# argument positions from aten's native_functions.yaml: input, weight, stride, padding, dilation, transposed, groups
_CONV_ARGS: dict[str, tuple[int, int, int, int, int, int | None]] = {
    "conv1d": (0, 1, 3, 4, 5, None), "conv2d": (0, 1, 3, 4, 5, None), "conv3d": (0, 1, 3, 4, 5, None),
    "convolution": (0, 1, 3, 4, 5, 6), "_convolution": (0, 1, 3, 4, 5, 6),
    "cudnn_convolution": (0, 1, 3, 2, 4, None), "miopen_convolution": (0, 1, 4, 3, 5, None),
    "mkldnn_convolution": (0, 1, 4, 3, 5, None),
}


def _conv_out(spatial: tuple[int, ...], kernel: tuple[int, ...], stride, padding, dilation) -> tuple[int, ...] | None:
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
        return Uncosted(f"{name}: stride/padding/dilation not recorded (Kineto records them as Concrete Inputs "
                        "only from PyTorch 2.1), so the output size is unknown")
    n, k = x[0], w[0]
    flops = 2.0 * n * math.prod(w) * math.prod(out)
    extra = [2] if name in ("conv1d", "conv2d", "conv3d", "convolution", "_convolution") and args.tensor(2) else []
    nbytes = _sum_bytes(args, [xi, wi, *extra], n * k * math.prod(out), args.elem_bytes(xi))
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
    reads = _sum_bytes(args, [gi, xi, wi])
    writes = (math.prod(x) * grads[0] + math.prod(w) * grads[1]) * size if size else None
    nbytes = None if reads is None or writes is None else reads + writes
    return OpCost(flops, nbytes, args.dtype(), "conv",
                  f"{sum(grads)} × forward conv (2·N·∏weight·∏out = 2·{go[0]}·{math.prod(w)}·{math.prod(go[2:])})")


def _conv_backward_input(args: Args) -> OpCost | Uncosted:
    go, w = args.tensor(1), args.tensor(2)
    if go is None or w is None or len(go) < 3:
        return Uncosted("cudnn_convolution_backward_input: shapes not recorded")
    flops = 2.0 * go[0] * math.prod(w) * math.prod(go[2:])
    size_list = args.int_list(0)
    out = math.prod(size_list) if size_list else None
    nbytes = _sum_bytes(args, [1, 2], out, args.elem_bytes(1)) if out else None
    return OpCost(flops, nbytes, args.dtype(), "conv", "1 × forward conv (grad_input)")


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
    io = _sum_bytes(args, [qi, ki, vi], b * h * lq * dv, args.elem_bytes(qi))
    nbytes = None if io is None else io * (2 if backward else 1)  # backward reads q,k,v,o,dO, writes dq,dk,dv
    formula = f"2·B·H·Lq·Lk·(D+Dv) = 2·{b}·{h}·{lq}·{lk}·{d + dv}" + (f" ({', '.join(notes)})" if notes else "")
    return OpCost(flops, nbytes, args.dtype(), "attention", formula)


# ---- elementwise / reductions / norms: per-element counts (stated in each formula) ----
_ELEMENTWISE_1 = {
    "add", "sub", "mul", "div", "rsub", "pow", "neg", "relu", "gelu", "silu", "sigmoid", "tanh", "exp", "log",
    "sqrt", "rsqrt", "abs", "clamp", "clamp_min", "clamp_max", "threshold", "threshold_backward", "gelu_backward",
    "silu_backward", "sigmoid_backward", "tanh_backward", "where", "maximum", "minimum", "reciprocal", "hardtanh",
    "leaky_relu", "masked_fill", "sign", "square", "mish", "elu", "softplus", "hardtanh_backward", "sin", "cos",
}
_ELEMENTWISE_2 = {"addcmul", "addcdiv", "lerp"}
_COMPARE = {"eq", "ne", "lt", "gt", "le", "ge", "logical_and", "logical_or", "logical_not", "isnan", "isinf"}
_REDUCE = {"sum", "mean", "amax", "amin", "max", "min", "prod", "all", "any", "argmax", "argmin", "norm",
           "linalg_vector_norm", "nansum", "logsumexp"}
_SOFTMAX = {"softmax", "_softmax", "log_softmax", "_log_softmax"}
_NORM = {"layer_norm", "native_layer_norm", "batch_norm", "native_batch_norm", "cudnn_batch_norm",
         "_batch_norm_impl_index", "group_norm", "native_group_norm", "instance_norm"}
_RMS = {"rms_norm", "_fused_rms_norm"}
_MEMORY = {"copy_", "clone", "contiguous", "fill_", "zero_", "zeros_like", "ones_like", "index_select", "embedding",
           "_to_copy"}


def _tensor_idx(args: Args) -> list[int]:
    return [i for i in range(len(args.dims)) if args.tensor(i) is not None]


def _elementwise(base: str, args: Args, per_elem: int, out_bool: bool = False) -> OpCost | Uncosted:
    idx = _tensor_idx(args)
    if not idx:
        return Uncosted(f"{base}: tensor shapes not recorded")
    try:
        shape: tuple[int, ...] = ()
        for i in idx:
            shape = _broadcast(shape, args.tensor(i))
    except ValueError:
        return Uncosted(f"{base}: input shapes do not broadcast")
    n = math.prod(shape)
    out_size = 1 if out_bool else args.elem_bytes(idx[0])
    nbytes = _sum_bytes(args, idx, n, out_size)
    return OpCost(float(per_elem * n), nbytes, args.dtype(), "elementwise", f"{per_elem} FLOP × {n} output elements")


def _reduction(base: str, args: Args, per_elem: int, kind: str, write_out: bool) -> OpCost | Uncosted:
    x = args.tensor(0)
    if x is None:
        return Uncosted(f"{base}: input shape not recorded")
    n = math.prod(x)
    idx = _tensor_idx(args)
    nbytes = _sum_bytes(args, idx, n if write_out else None, args.elem_bytes(0))
    what = "input read, output of the same size written" if write_out else "input read (reduced output not counted)"
    return OpCost(float(per_elem * n), nbytes, args.dtype(), kind, f"{per_elem} FLOP × {n} elements; bytes: {what}")


def _memory(base: str, args: Args) -> OpCost | Uncosted:
    if base in ("index_select", "embedding"):
        table, index = (args.tensor(0), args.tensor(2)) if base == "index_select" else (args.tensor(0), args.tensor(1))
        if table is None or index is None or len(table) < 1:
            return Uncosted(f"{base}: shapes not recorded")
        row = math.prod(table[1:])
        rows = math.prod(index)
        size = args.elem_bytes(0)
        idx_bytes = args.nbytes(2 if base == "index_select" else 1)
        nbytes = None if size is None or idx_bytes is None else 2.0 * rows * row * size + idx_bytes
        return OpCost(0.0, nbytes, args.dtype(), "memory", f"gather {rows} rows × {row}: read + write")
    x = args.tensor(0)
    if x is None:
        return Uncosted(f"{base}: shape not recorded")
    n = math.prod(x)
    if base in ("fill_", "zero_"):
        size = args.elem_bytes(0)
        return OpCost(0.0, None if size is None else float(n * size), args.dtype(), "memory", f"write {n} elements")
    if base == "copy_" and args.tensor(1) is not None:
        nbytes = _sum_bytes(args, [0, 1])  # read src, write dst (each once)
    else:
        nbytes = None if args.nbytes(0) is None else 2 * args.nbytes(0)
    return OpCost(0.0, nbytes, args.dtype(), "memory", f"read + write {n} elements")


def _cost_parsed(base: str, args: Args) -> OpCost | Uncosted:
    if base in ("mm",):
        return _mm(args, 0, 1, [], base)
    if base in ("bmm", "matmul"):
        return _mm(args, 0, 1, [], base)
    if base in ("addmm", "baddbmm", "addbmm"):
        return _mm(args, 1, 2, [0], base)
    if base == "linear":
        return _linear(args)
    if base == "einsum":
        return _einsum(args)
    if base in _CONV_ARGS:
        return _conv(base, args)
    if base in _CONV_BWD_ARGS:
        return _conv_backward(base, args)
    if base == "cudnn_convolution_backward_input":
        return _conv_backward_input(args)
    if base in _ATTN:
        return _attention(base, args)
    inplace = base[:-1] if base.endswith("_") and base not in _MEMORY else base
    if inplace in _ELEMENTWISE_1:
        return _elementwise(base, args, 1)
    if inplace in _ELEMENTWISE_2:
        return _elementwise(base, args, 2)
    if inplace in _COMPARE:
        return _elementwise(base, args, 1, out_bool=True)
    if base in _REDUCE:
        return _reduction(base, args, 1, "reduction", write_out=False)
    if base in _SOFTMAX:  # max, subtract, exp, sum, divide (log_softmax: log instead of divide)
        return _reduction(base, args, 5, "reduction", write_out=True)
    if base in _NORM:  # mean 1, variance 3 (sub, square, add), normalise 2, affine 2
        return _reduction(base, args, 8, "norm", write_out=True)
    if base in _RMS:  # square 1, mean 1, normalise 1, scale 1
        return _reduction(base, args, 4, "norm", write_out=True)
    if base in _MEMORY:
        return _memory(base, args)
    return Uncosted(f"{base}: no FLOP formula for this op")


@lru_cache(maxsize=65536)
def _cost_cached(name: str, dims: Any, types: Any, concrete: Any) -> OpCost | Uncosted:
    if not name.startswith("aten::"):
        return Uncosted(f"{name}: not an aten op")
    base = name[len("aten::"):]
    args = parse_args(dims, types, concrete)
    if args is None:
        return Uncosted(f"{name}: input shapes not recorded (profile with record_shapes=True)")
    return _cost_parsed(base, args)


def cost_op(name: str, input_dims: Any, input_type: Any = None, concrete_inputs: Any = None) -> OpCost | Uncosted:
    """FLOPs and bytes of one call of aten op ``name``.

    Args:
        name: Kineto op name, e.g. ``"aten::addmm"``.
        input_dims / input_type / concrete_inputs: Kineto's ``Input Dims``, ``Input type``
            and ``Concrete Inputs`` args as raw JSON bytes/str (as in ``TraceTables.cpu_ops``)
            or decoded lists; None when not recorded.

    Returns:
        :class:`OpCost` (``flops`` FLOP, ``bytes`` B or None, ``dtype``, ``kind``,
        ``formula``) or :class:`Uncosted` (``reason``). Never raises on bad input.
    """
    def key(v: Any) -> Any:
        if isinstance(v, (list, dict)):
            return orjson.dumps(v)
        return bytes(v) if isinstance(v, (bytearray, memoryview)) else v

    return _cost_cached(name, key(input_dims), key(input_type), key(concrete_inputs))


COSTED_OPS: tuple[str, ...] = tuple(sorted(
    {"mm", "bmm", "matmul", "addmm", "baddbmm", "addbmm", "linear", "einsum", "cudnn_convolution_backward_input"}
    | set(_CONV_ARGS) | set(_CONV_BWD_ARGS) | set(_ATTN) | _ELEMENTWISE_1 | _ELEMENTWISE_2 | _COMPARE | _REDUCE
    | _SOFTMAX | _NORM | _RMS | _MEMORY))

Formula = Callable[[Args], "OpCost | Uncosted"]
