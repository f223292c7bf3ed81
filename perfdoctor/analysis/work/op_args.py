"""Kineto's recorded op arguments, parsed, and the cost types of :mod:`perfdoctor.analysis.work.op_flops`.

``Input Dims`` (one list per argument), ``Input type`` (``"float"``,
``"c10::BFloat16"``, ``"Scalar"``, ...) and ``Concrete Inputs`` (PyTorch ≥ 2.1:
the values of int-list / scalar arguments as strings) become an :class:`Args`;
a costed op is an :class:`OpCost`, one that can't be costed an :class:`Uncosted`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TypeAlias

import orjson

from perfdoctor.trace.json_value import JsonValue

# Kineto "Input type" strings -> (dtype key, bytes per element). Source: c10 ScalarType
# names as printed by torch.profiler (c10::toString / demangled C++ type names).
_TYPES: dict[str, tuple[str, int]] = {
    "double": ("fp64", 8),
    "float": ("fp32", 4),
    "c10::Half": ("fp16", 2),
    "c10::BFloat16": ("bf16", 2),
    "c10::Float8_e4m3fn": ("fp8", 1),
    "c10::Float8_e5m2": ("fp8", 1),
    "c10::Float8_e4m3fnuz": ("fp8", 1),
    "c10::Float8_e5m2fnuz": ("fp8", 1),
    "long int": ("int64", 8),
    "long": ("int64", 8),
    "int": ("int32", 4),
    "short int": ("int16", 2),
    "short": ("int16", 2),
    "signed char": ("int8", 1),
    "unsigned char": ("uint8", 1),
    "bool": ("bool", 1),
    "c10::complex<float>": ("complex64", 8),
    "c10::complex<double>": ("complex128", 16),
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


# one of Kineto's shape args (``Input Dims``, ``Input type``, ``Concrete Inputs``): its raw JSON text as stored in
# TraceTables.cpu_ops (bytes, str), or the value decoded; None when not recorded
RawArg: TypeAlias = "bytes | bytearray | memoryview | JsonValue"


def _ints(value: JsonValue) -> tuple[int, ...] | None:
    """``value`` as a tuple when it is a list of integers (bools included, as JSON decoding gives none)."""
    if isinstance(value, list) and all(isinstance(x, int) for x in value):
        return tuple(x for x in value if isinstance(x, int))
    return None


def parse_args(input_dims: RawArg, input_type: RawArg, concrete_inputs: RawArg = None) -> Args | None:
    """Args from Kineto's raw JSON (bytes/str) or already-decoded lists; None if unusable."""

    def load(raw: RawArg) -> JsonValue:
        if raw is None:
            return None
        if isinstance(raw, (bytes, bytearray, memoryview, str)):
            try:
                value: JsonValue = orjson.loads(raw)
                return value
            except orjson.JSONDecodeError:
                return None
        return raw

    dims, types, concrete = load(input_dims), load(input_type), load(concrete_inputs)
    if not isinstance(dims, list):
        return None
    dims_l: list[tuple[int, ...]] = []
    lists: list[tuple[int, tuple[tuple[int, ...], ...]]] = []
    for i, d in enumerate(dims):
        shape = _ints(d)
        shapes = [_ints(x) for x in d] if isinstance(d, list) else []
        if shape is not None:
            dims_l.append(shape)
        elif isinstance(d, list) and all(x is not None for x in shapes):
            dims_l.append(())  # a TensorList argument: shapes kept in tensor_lists
            lists.append((i, tuple(x for x in shapes if x is not None)))
        else:
            dims_l.append(())
    dims_t = tuple(dims_l)
    types_t = tuple(str(t) for t in types) if isinstance(types, list) else ()
    concrete_t = tuple(str(c) for c in concrete) if isinstance(concrete, list) else ()
    return Args(dims_t, types_t, concrete_t, tuple(lists))


def sum_bytes(args: Args, idx: list[int], out_elems: float | None = None, out_size: int | None = None) -> float | None:
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
