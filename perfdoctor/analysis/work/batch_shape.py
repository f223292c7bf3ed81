"""The input batch of a trace's steps, read from the shapes the profiler recorded: samples and tokens per step.

``torch.profiler(record_shapes=True)`` writes each cpu_op's ``Input Dims`` and ``Input type``. The batch is the
tensor that carries the model's input; in each analysed step, the first op of the first kind below that has one
tells (the kinds are tried in this order, so the model's input is preferred to a layer deeper in):

1. ``aten::embedding``: its indices (input 1), the token ids of a language model;
2. ``CompiledFunction``: ``torch.compile``'s AOTAutograd forward of the whole model, whose first input is the
   model's first input; read only when it is an integer tensor (a floating first input may be a parameter);
3. the first forward GEMM or convolution: ``aten::linear`` (input 0), ``aten::conv1d`` / ``conv2d`` / ``conv3d`` /
   ``aten::convolution`` (input 0): a floating activation ``(B, ...)``.

The tensor is read with the rule of the runner's batch probe (:func:`perfdoctor.capture.batch_probe.batch_size_of`):
an integer tensor ``(B, T, ...)`` is ``B`` samples and ``B × T`` tokens; a floating tensor ``(B, ...)`` is ``B``
samples, tokens unknown; an integer tensor of one dimension tells nothing (a position index).

Limits, stated wherever the figure is used: one forward per step is assumed (gradient accumulation over ``k``
micro-batches in one step reads one micro-batch); a model whose first embedding call is of positions ``(1, T)``
reads 1 sample. ``--samples-per-step`` / ``--tokens-per-step`` of ``perfdoctor diff`` override it.

:func:`input_shapes` keeps, for each op name, the ``Input Dims`` of its first call in the first analysed step: two
traces whose common ops were called with different shapes do different work per step, even when no batch could be
read.
"""

from __future__ import annotations

import hashlib
import json
from typing import TypeAlias

import msgspec
import numpy as np

from perfdoctor.analysis.steps.steps import Steps
from perfdoctor.analysis.work.op_args import parse_args
from perfdoctor.trace import intervals as iv
from perfdoctor.trace.tables import TraceTables

INTEGER_TYPES = frozenset({"long int", "int", "short int", "signed char", "unsigned char", "long", "int64", "int32"})
# (op names, the input read, whether a floating tensor is read too)
CANDIDATES: tuple[tuple[tuple[str, ...], int, bool], ...] = (
    (("aten::embedding",), 1, False),
    (("CompiledFunction",), 0, False),
    (("aten::linear", "aten::conv1d", "aten::conv2d", "aten::conv3d", "aten::convolution"), 0, True),
)
WHY = {
    "aten::embedding": "the indices of the step's first aten::embedding call (the token ids)",
    "CompiledFunction": "the first input of the step's CompiledFunction (torch.compile's forward of the model)",
}
MAX_SHAPE_NAMES = 64  # op names kept by input_shapes: enough to compare two traces, small in a summary
MAX_SHAPE_CHARS = 160  # a longer Input Dims (a compiled graph's every parameter) is kept cut, with its digest


class BatchShape(msgspec.Struct, frozen=True):
    """The batch one step of a trace reads: ``samples`` and ``tokens`` per step (None: unknown), from the tensor
    ``shape`` (its ``dtype`` as Kineto writes it) of input ``arg`` of ``op``; ``why``: that choice in words;
    ``steps``: the analysed steps it was read in; ``varies``: the steps disagree (``samples``/``tokens`` are then
    the median step's)."""

    samples: float | None
    tokens: float | None
    op: str
    arg: int
    shape: list[int]
    dtype: str
    why: str
    steps: int
    varies: bool = False


def _read(dims: tuple[int, ...], dtype: str, floating_ok: bool) -> tuple[float | None, float | None] | None:
    """(samples, tokens) of one tensor by the batch probe's rule; None when it tells nothing."""
    if not dims or any(d <= 0 for d in dims):
        return None
    if dtype in INTEGER_TYPES:
        return (float(dims[0]), float(dims[0] * dims[1])) if len(dims) >= 2 else None
    if floating_ok and dtype in ("float", "c10::Half", "c10::BFloat16", "double", "c10::Float8_e4m3fn"):
        return float(dims[0]), None
    return None


# one step's reading: ((samples, tokens), the op read, its argument's dims, its dtype)
_Reading: TypeAlias = tuple[tuple[float | None, float | None], str, tuple[int, ...], str]


def _rows_by_step(tables: TraceTables, steps: Steps) -> tuple[np.ndarray, np.ndarray]:
    """(cpu_op rows inside analysed steps with recorded shapes, their step index), in time order."""
    ops = tables.cpu_ops
    if len(ops) == 0 or "input_dims" not in ops or len(steps) == 0:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    # the host windows: a step's forward is launched inside its ProfilerStep annotation, while its device window
    # may start later (CUDA graphs: a whole step behind), so the device-aware windows would miss it
    step = iv.containing(ops["ts_us"], (steps.host_start_us, steps.host_end_us))
    has = np.not_equal(ops["input_dims"], None)  # type: ignore[call-overload]
    rows = np.flatnonzero((step >= 0) & has)
    rows = rows[np.argsort(ops["ts_us"][rows], kind="stable")]
    return rows, step[rows]


def batch_shape(tables: TraceTables, steps: Steps) -> BatchShape | None:
    """The batch of the analysed steps (module docstring), None when no step has an op that tells.

    ``tables``: :class:`perfdoctor.trace.tables.TraceTables`; ``steps``: :class:`perfdoctor.analysis.steps.steps.Steps`.
    """
    rows, step = _rows_by_step(tables, steps)
    if rows.size == 0:
        return None
    ops, names = tables.cpu_ops, tables.name_array()
    for op_names, arg, floating_ok in CANDIDATES:
        ids = [i for i, n in enumerate(names) if n in op_names]
        pick = rows[np.isin(ops["name_id"][rows], ids)]
        pick_step = step[np.isin(ops["name_id"][rows], ids)]
        found: dict[int, _Reading] = {}
        for row, s in zip(pick.tolist(), pick_step.tolist()):
            if s in found:
                continue
            args = parse_args(ops["input_dims"][row], ops["input_type"][row])
            if args is None or arg >= len(args.dims):
                continue
            dtype = args.types[arg] if arg < len(args.types) else ""
            got = _read(args.dims[arg], dtype, floating_ok)
            if got is not None:
                found[s] = (got, str(names[ops["name_id"][row]]), args.dims[arg], dtype)
        if found:
            return _summarise(list(found.values()), arg)
    return None


def _summarise(per_step: list[_Reading], arg: int) -> BatchShape:
    """One BatchShape from each step's reading: the median step's (by samples) when they disagree."""
    per_step.sort(key=lambda x: (x[0][0] or 0.0, x[0][1] or 0.0))
    (samples, tokens), op, dims, dtype = per_step[len(per_step) // 2]
    varies = len({x[0] for x in per_step}) > 1
    if op in WHY:
        why = WHY[op]
    else:
        why = (
            f"the input of the step's first {op} (no aten::embedding or integer CompiledFunction input recorded; "
            "a floating activation gives samples, not tokens)"
        )
    return BatchShape(samples, tokens, op, arg, list(dims), dtype, why, len(per_step), varies)


def _compact(text: str) -> str:
    """``text`` itself, or cut to :data:`MAX_SHAPE_CHARS` with a digest of the whole (so two long shapes that
    differ anywhere still differ): a summary of thousands of ranks keeps each one small."""
    if len(text) <= MAX_SHAPE_CHARS:
        return text
    digest = hashlib.blake2b(text.encode(), digest_size=6).hexdigest()
    return f"{text[: MAX_SHAPE_CHARS - 16]}…#{digest}"


def input_shapes(tables: TraceTables, steps: Steps) -> dict[str, str]:
    """For each op name (the first :data:`MAX_SHAPE_NAMES` called), the ``Input Dims`` (compact JSON) of its first
    call in the first analysed step that has shapes (longer than :data:`MAX_SHAPE_CHARS`: cut, with a digest of
    the whole); empty without recorded shapes."""
    rows, step = _rows_by_step(tables, steps)
    if rows.size == 0:
        return {}
    rows = rows[step == step[0]]
    ops, names = tables.cpu_ops, tables.name_array()
    out: dict[str, str] = {}
    for row in rows.tolist():
        name = str(names[ops["name_id"][row]])
        if name in out:
            continue
        raw = ops["input_dims"][row]
        try:
            dims = json.loads(raw)
        except (ValueError, TypeError):
            continue
        if not any(isinstance(d, list) and d for d in dims) if isinstance(dims, list) else True:
            continue  # scalars only: nothing that sizes the work
        out[name] = _compact(json.dumps(dims, separators=(",", ":")))
        if len(out) >= MAX_SHAPE_NAMES:
            break
    return out
