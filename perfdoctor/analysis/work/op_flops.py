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
from collections.abc import Callable
from functools import lru_cache
from typing import TypeAlias

import orjson

from perfdoctor.analysis.work.op_args import _TYPES, FLOAT_DTYPES, Args, OpCost, RawArg, Uncosted, parse_args, sum_bytes
from perfdoctor.analysis.work.op_flops_attention import _ATTN, _attention
from perfdoctor.analysis.work.op_flops_conv import (
    _CONV_ARGS,
    _CONV_BWD_ARGS,
    _conv,
    _conv_backward,
    _conv_backward_input,
)

__all__ = ["FLOAT_DTYPES", "Args", "OpCost", "Uncosted", "cost_op", "parse_args", "COSTED_OPS"]


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
    nbytes = sum_bytes(args, [a, b, *extra], out, args.elem_bytes(a))
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
    nbytes = sum_bytes(args, [0, 1, *extra], rows * n, args.elem_bytes(0))
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
    nbytes = None if in_bytes is None or size is None else in_bytes + out * size  # size is set when in_bytes is
    return OpCost(flops, nbytes, dtype, "matmul", f"2·∏(index sizes) for '{eq}'")


# ---- elementwise / reductions / norms: per-element counts (stated in each formula) ----
_ELEMENTWISE_1 = {
    "add",
    "sub",
    "mul",
    "div",
    "rsub",
    "pow",
    "neg",
    "relu",
    "gelu",
    "silu",
    "sigmoid",
    "tanh",
    "exp",
    "log",
    "sqrt",
    "rsqrt",
    "abs",
    "clamp",
    "clamp_min",
    "clamp_max",
    "threshold",
    "threshold_backward",
    "gelu_backward",
    "silu_backward",
    "sigmoid_backward",
    "tanh_backward",
    "where",
    "maximum",
    "minimum",
    "reciprocal",
    "hardtanh",
    "leaky_relu",
    "masked_fill",
    "sign",
    "square",
    "mish",
    "elu",
    "softplus",
    "hardtanh_backward",
    "sin",
    "cos",
}
_ELEMENTWISE_2 = {"addcmul", "addcdiv", "lerp"}
_COMPARE = {"eq", "ne", "lt", "gt", "le", "ge", "logical_and", "logical_or", "logical_not", "isnan", "isinf"}
_REDUCE = {
    "sum",
    "mean",
    "amax",
    "amin",
    "max",
    "min",
    "prod",
    "all",
    "any",
    "argmax",
    "argmin",
    "norm",
    "linalg_vector_norm",
    "nansum",
    "logsumexp",
}
_SOFTMAX = {"softmax", "_softmax", "log_softmax", "_log_softmax"}
_NORM = {
    "layer_norm",
    "native_layer_norm",
    "batch_norm",
    "native_batch_norm",
    "cudnn_batch_norm",
    "_batch_norm_impl_index",
    "group_norm",
    "native_group_norm",
    "instance_norm",
}
_RMS = {"rms_norm", "_fused_rms_norm"}
_MEMORY = {
    "copy_",
    "clone",
    "contiguous",
    "fill_",
    "zero_",
    "zeros_like",
    "ones_like",
    "index_select",
    "embedding",
    "_to_copy",
}


def _tensor_idx(args: Args) -> list[int]:
    return [i for i in range(len(args.dims)) if args.tensor(i) is not None]


def _elementwise(base: str, args: Args, per_elem: int, out_bool: bool = False) -> OpCost | Uncosted:
    idx = _tensor_idx(args)
    if not idx:
        return Uncosted(f"{base}: tensor shapes not recorded")
    try:
        shape: tuple[int, ...] = ()
        for i in idx:
            shape = _broadcast(shape, args.tensor(i) or ())  # idx holds only indices with a recorded shape
    except ValueError:
        return Uncosted(f"{base}: input shapes do not broadcast")
    n = math.prod(shape)
    out_size = 1 if out_bool else args.elem_bytes(idx[0])
    nbytes = sum_bytes(args, idx, n, out_size)
    return OpCost(float(per_elem * n), nbytes, args.dtype(), "elementwise", f"{per_elem} FLOP × {n} output elements")


def _reduction(base: str, args: Args, per_elem: int, kind: str, write_out: bool) -> OpCost | Uncosted:
    x = args.tensor(0)
    if x is None:
        return Uncosted(f"{base}: input shape not recorded")
    n = math.prod(x)
    idx = _tensor_idx(args)
    nbytes = sum_bytes(args, idx, n if write_out else None, args.elem_bytes(0))
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
        nbytes = sum_bytes(args, [0, 1])  # read src, write dst (each once)
    else:
        x_bytes = args.nbytes(0)
        nbytes = None if x_bytes is None else 2 * x_bytes
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


# a shape arg as the cache's key: raw JSON as bytes (decoded lists encoded again), or a scalar as it came
_Key: TypeAlias = bytes | str | int | float | None


@lru_cache(maxsize=65536)
def _cost_cached(name: str, dims: _Key, types: _Key, concrete: _Key) -> OpCost | Uncosted:
    if not name.startswith("aten::"):
        return Uncosted(f"{name}: not an aten op")
    base = name[len("aten::") :]
    args = parse_args(dims, types, concrete)
    if args is None:
        return Uncosted(f"{name}: input shapes not recorded (profile with record_shapes=True)")
    return _cost_parsed(base, args)


def cost_op(
    name: str, input_dims: RawArg, input_type: RawArg = None, concrete_inputs: RawArg = None
) -> OpCost | Uncosted:
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

    def key(v: RawArg) -> _Key:
        if isinstance(v, (list, dict)):
            return orjson.dumps(v)
        return bytes(v) if isinstance(v, (bytearray, memoryview)) else v

    return _cost_cached(name, key(input_dims), key(input_type), key(concrete_inputs))


COSTED_OPS: tuple[str, ...] = tuple(
    sorted(
        {"mm", "bmm", "matmul", "addmm", "baddbmm", "addbmm", "linear", "einsum", "cudnn_convolution_backward_input"}
        | set(_CONV_ARGS)
        | set(_CONV_BWD_ARGS)
        | set(_ATTN)
        | _ELEMENTWISE_1
        | _ELEMENTWISE_2
        | _COMPARE
        | _REDUCE
        | _SOFTMAX
        | _NORM
        | _RMS
        | _MEMORY
    )
)

Formula = Callable[[Args], "OpCost | Uncosted"]
