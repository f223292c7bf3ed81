"""The ops that dominate a bf16-autocast CPU step, timed again in fp32 on the recorded shapes (PD204's measurement).

A replay of recorded durations cannot say how fast a GEMM would run in another dtype: that depends on the CPU's
instructions (AVX512-BF16 / AMX, or none: oneDNN then converts through fp32). So, after a ``perfdoctor profile``
run whose script trained under CPU bf16 autocast, the runner reads its own trace, takes the GEMM ops with bf16
inputs that took the most time (by name and input shapes, :data:`TOP_OPS`) and times each with bf16 and with fp32
inputs of those shapes on this machine, in the same process and thread count, for at most :data:`PER_OP_S` seconds
a dtype. ``run.json``'s rank entry keeps the result (``op_probe``); PD204 replays the step with the ratio.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

TOP_OPS = 3  # the (name, shapes) groups timed, by recorded time
PER_OP_S = 0.3  # seconds of timing per op and dtype, at most
MIN_REPS, MAX_REPS = 3, 200
GEMM_NAMES = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::linear", "aten::matmul")


def bf16_gemm_groups(trace_path: Path, bf16_only: bool = True) -> list[tuple[str, list[list[int]], float]]:
    """(op name, input shapes, recorded µs in the trace) of the GEMM ops with bf16 inputs (``bf16_only`` False:
    with fp32 inputs), the most time first.

    Only top-level calls of :data:`GEMM_NAMES` count (``aten::linear`` calls ``aten::addmm``: its time is
    counted once, under the outer op)."""
    from perfdoctor.trace import load_trace

    t = load_trace(str(trace_path))
    ops = t.cpu_ops
    if len(ops) == 0:
        return []
    names = t.name_array()[ops["name_id"]]
    order = np.argsort(ops["ts_us"], kind="stable")
    groups: dict[tuple[str, str], float] = {}
    outer_end = -np.inf
    for i in order.tolist():
        name = str(names[i])
        if name not in GEMM_NAMES or ops["ts_us"][i] < outer_end:
            continue
        types, dims = ops["input_type"][i], ops["input_dims"][i]
        if types is None or dims is None or (b"BFloat16" in types) != bf16_only:
            continue
        if not bf16_only and b"float" not in types:
            continue
        outer_end = float(ops["end_us"][i])
        key = (name, dims.decode() if isinstance(dims, bytes) else str(dims))
        groups[key] = groups.get(key, 0.0) + float(ops["dur_us"][i])
    out = [(n, json.loads(d), us) for (n, d), us in groups.items()]
    return sorted(out, key=lambda g: -g[2])


# the scalar types of a recorded op input (``Input type``) and the value given where ``Concrete Inputs`` holds none
_SCALARS: dict[str, Callable[[str], object]] = {
    "double": lambda c: float(c) if c else 0.9,
    "Scalar": lambda c: float(c) if c else 1.0,
    "long int": lambda c: int(c) if c else 1,
    "int": lambda c: int(c) if c else 1,
    "bool": lambda c: c == "True",
}
ArgSpec = dict[str, object]  # {"tensor": shape} (fp32, random), {"scalar": value} or {"none": True}


def op_args(dims: object, types: object, concrete: object) -> list[ArgSpec] | None:
    """The inputs of one recorded op call, rebuilt for timing: a float tensor of each recorded shape (a 0-dim one for
    ``[]`` with a float type), each scalar its ``Concrete Inputs`` value (else a neutral one: 0.9, 1, False), an
    absent input None; None when an input is anything else (an integer tensor, a list, a string), or without
    ``Input Dims``/``Input type`` (``record_shapes=False``)."""
    try:
        d = json.loads(dims) if isinstance(dims, (bytes, str)) else dims
        t = json.loads(types) if isinstance(types, (bytes, str)) else types
        c = json.loads(concrete) if isinstance(concrete, (bytes, str)) else concrete
    except ValueError:
        return None
    if not isinstance(d, list) or not isinstance(t, list) or len(d) != len(t):
        return None
    c = c if isinstance(c, list) and len(c) == len(d) else [""] * len(d)
    out: list[ArgSpec] = []
    for shape, typ, val in zip(d, t, c, strict=True):
        if not isinstance(shape, list) or not all(isinstance(x, int) for x in shape):
            return None
        if typ in ("float", "c10::Half", "c10::BFloat16"):
            out.append({"tensor": shape})
        elif typ in _SCALARS and not shape:
            try:
                out.append({"scalar": _SCALARS[typ](str(val))})
            except ValueError:
                return None
        elif typ == "" and not shape:
            out.append({"none": True})
        else:
            return None
    return out if any("tensor" in a for a in out) else None


def other_op_groups(trace_path: Path) -> list[tuple[str, list[ArgSpec], float]]:
    """(op name, rebuilt inputs, recorded µs in the trace) of the top-level ``aten::`` ops that are not GEMMs
    (:data:`GEMM_NAMES`) whose inputs :func:`op_args` can rebuild, grouped by name and inputs, the most time first.

    Top-level: not inside another ``aten::`` op on the same thread (``aten::linear``'s ``aten::addmm``,
    ``aten::sqrt``'s ``aten::empty``); an ``autograd::engine::evaluate_function`` is no ``aten::`` op, so the
    backward's elementwise ops count."""
    from perfdoctor.trace import load_trace

    t = load_trace(str(trace_path))
    ops = t.cpu_ops
    if len(ops) == 0:
        return []
    names = t.name_array()[ops["name_id"]]
    concrete = ops["concrete_inputs"] if "concrete_inputs" in ops else [None] * len(ops)
    groups: dict[tuple[str, str], tuple[list[ArgSpec], float]] = {}
    outer_end: dict[int, float] = {}
    for i in np.argsort(ops["ts_us"], kind="stable").tolist():
        name = str(names[i])
        if not name.startswith("aten::"):
            continue
        tid = int(ops["tid"][i])
        if ops["ts_us"][i] < outer_end.get(tid, -np.inf):
            continue
        outer_end[tid] = float(ops["end_us"][i])
        if name in GEMM_NAMES:
            continue
        args = op_args(ops["input_dims"][i], ops["input_type"][i], concrete[i])
        if args is None:
            continue
        key = (name, json.dumps(args))
        prev = groups.get(key, (args, 0.0))
        groups[key] = (args, prev[1] + float(ops["dur_us"][i]))
    out = [(n, a, us) for (n, _), (a, us) in groups.items()]
    return sorted(out, key=lambda g: -g[2])


def _time_us(fn: Callable[[], object], seconds: float = PER_OP_S) -> float:
    """Median µs of ``fn()`` over repeats within ``seconds`` (after one warm-up call)."""
    fn()
    times: list[float] = []
    t_end = time.perf_counter() + seconds
    while len(times) < MIN_REPS or (len(times) < MAX_REPS and time.perf_counter() < t_end):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e6)
    return float(np.median(times))


def time_dtypes(name: str, shapes: list[list[int]]) -> tuple[float, float] | None:
    """(bf16 µs, fp32 µs) of aten op ``name`` on random inputs of ``shapes`` (the tensor inputs; scalars and absent
    inputs, recorded as ``[]``, are left to the op's defaults), or None when the op does not take them."""
    op = getattr(torch.ops.aten, name.split("::", 1)[1])
    tensor_shapes = [s for s in shapes if isinstance(s, list) and s]
    if len(tensor_shapes) < 2:
        return None
    out = []
    for dtype in (torch.bfloat16, torch.float32):
        args = [torch.randn(*s).to(dtype) for s in tensor_shapes]
        try:
            out.append(_time_us(functools.partial(op, *args)))
        except (RuntimeError, TypeError):
            return None
    return out[0], out[1]


def probe_bf16(trace_path: Path) -> dict[str, object] | None:
    """``run.json``'s ``op_probe`` for a bf16-autocast run: each timed op (``name``, ``shapes``, ``recorded_us`` in
    the trace, ``bf16_us``, ``fp32_us`` measured here) and ``bf16_over_fp32`` = Σ bf16 ÷ Σ fp32 weighted by the
    recorded time; None when the trace has no bf16 GEMM."""
    groups = bf16_gemm_groups(trace_path)[:TOP_OPS]
    timed: list[dict[str, object]] = []
    rec, bf16, fp32 = [], [], []
    with torch.no_grad():
        for name, shapes, rec_us in groups:
            got = time_dtypes(name, shapes)
            if got is not None:
                timed.append(
                    {"name": name, "shapes": shapes, "recorded_us": rec_us, "bf16_us": got[0], "fp32_us": got[1]}
                )
                rec.append(rec_us)
                bf16.append(got[0])
                fp32.append(got[1])
    if not timed:
        return None
    w, ratio = np.array(rec), np.array(bf16) / np.array(fp32)
    return {
        "ops": timed,
        "bf16_over_fp32": float((w * ratio).sum() / w.sum()),
        "threads": torch.get_num_threads(),
        "seconds": PER_OP_S,
    }


ROUNDS = 2  # alternating child processes per thread count: both counts meet the same load on a shared machine


Spec = tuple[str, list[Any]]  # (aten op name, its inputs: GEMM shapes, or op_args' ArgSpecs)


def _build(inputs: list[Any]) -> list[object] | None:
    """The call's arguments: a GEMM's tensor shapes (``[]``, an absent or scalar input, left to the op's default),
    or :func:`op_args`' specs position by position; None without two GEMM tensors or any tensor at all."""
    if all(isinstance(x, list) for x in inputs):
        gemm: list[object] = [torch.randn(*x) for x in inputs if x]
        return gemm if len(gemm) >= 2 else None
    args: list[object] = []
    for a in inputs:
        if not isinstance(a, dict):
            return None
        # values in [0.5, 1.5): no NaN from a sqrt or a log, no inf from a division (both slow paths on some CPUs:
        # sqrt of a 512×512 randn tensor 3.8 ms, of a positive one 0.27 ms, here)
        args.append(torch.rand(list(a["tensor"])) + 0.5 if "tensor" in a else a.get("scalar"))
    return args


def time_ops(specs: list[Spec], seconds: float = PER_OP_S) -> list[float]:
    """Median µs of each (aten op name, inputs) on fp32 random inputs, in this process at its thread count, over at
    most ``seconds`` each (NaN for an op that does not take them). Denormals are flushed: an in-place op repeated
    on its own output (``mul_``) drifts towards them, which real training values do not."""
    out = []
    torch.set_flush_denormal(True)
    with torch.no_grad():
        for name, inputs in specs:
            args = _build(inputs)
            call = _bound_call(name, args) if args is not None else None
            try:
                out.append(_time_us(call, seconds) if call is not None else float("nan"))
            except (RuntimeError, TypeError, ValueError, IndexError):
                out.append(float("nan"))
    return out


def _bound_call(name: str, args: list[object]) -> Callable[[], object] | None:
    """``aten`` op ``name`` bound to ``args`` in the profiler's order (every schema argument, keyword-only ones
    too: ``add_(self, other, *, alpha)``): the first overload whose schema takes them and that runs; None when
    none does. A GEMM's shapes (no keyword-only arguments recorded) bind positionally."""
    packet = getattr(torch.ops.aten, name.split("::", 1)[1], None)
    if packet is None:
        return None
    for overload in packet.overloads():
        op = getattr(packet, overload)
        schema = op._schema.arguments
        if len(args) > len(schema):
            continue
        pos = [v for a, v in zip(schema, args, strict=False) if not a.kwarg_only]
        kw = {a.name: v for a, v in zip(schema, args, strict=False) if a.kwarg_only}
        call = functools.partial(op, *pos, **kw)
        try:
            call()
        except (RuntimeError, TypeError, ValueError, IndexError):
            continue
        return call
    return None


def _alternating(specs: list[Spec], recorded: int, suggested: int, seconds: float = PER_OP_S) -> list[list[float]]:
    """Per thread count (recorded, suggested): each op's median µs over :data:`ROUNDS` fresh child processes run
    in alternation. A fresh process, because a pool shrunk in place leaves its extra threads spinning on the
    cores for a while (measured here: a 64×512×512 linear at 40 ms with 2 of 4 threads left, 0.25 ms in a fresh
    2-thread process)."""
    import subprocess

    got: dict[int, list[list[float]]] = {recorded: [], suggested: []}
    for _ in range(ROUNDS):
        for n in (recorded, suggested):
            env = {**os.environ, "OMP_NUM_THREADS": str(n), "MKL_NUM_THREADS": str(n)}
            proc = subprocess.run(
                [sys.executable, "-m", "perfdoctor.capture.op_probe", str(n), json.dumps(specs), str(seconds)],
                capture_output=True,
                text=True,
                timeout=120,
                env=env,
                check=True,
            )
            got[n].append(json.loads(proc.stdout.strip().splitlines()[-1]))
    return [np.median(np.array(got[n], dtype=np.float64), axis=0).tolist() for n in (recorded, suggested)]


THREAD_PROBE_S = 0.1  # seconds of timing per op in each child (6 ops, 2 counts, ROUNDS: about 2.4 s plus 4 starts)


def probe_threads(trace_path: Path, recorded: int, suggested: int) -> dict[str, object] | None:
    """``run.json``'s ``thread_probe``: the trace's dominant ops of each kind (:data:`TOP_OPS` each: fp32 GEMMs,
    and the top-level ops that are not, :func:`other_op_groups`: the optimizer's and the backward's elementwise
    ops), on their recorded inputs, timed with ``recorded`` intra-op threads and with ``suggested`` (the cores' fair
    share), alternating. Per kind (``kinds``: ``gemm``, ``other``), ``suggested_over_recorded`` = Σ suggested ÷ Σ
    recorded weighted by recorded time, and the recorded µs of the ops timed; the same over every op at the top.
    None without a timed op.

    The kinds differ because oversubscription costs an op per barrier: a GEMM of a few hundred µs waits once for a
    descheduled thread, a 20 µs elementwise op as often, so it loses a larger share (examples/mlp.py, 4 threads on
    2 cores vs 2: GEMMs keep 0.48-0.68 of their time, the optimizer's elementwise ops 0.22-0.32).
    Each count is timed in fresh child processes (:func:`_alternating`). In a multi-process run every rank probes
    as it closes, so the ranks' probes overlap as their training did (the contention that makes the recorded count
    slow)."""
    gemm = [(n, sh, us, "gemm") for n, sh, us in bf16_gemm_groups(trace_path, bf16_only=False)[:TOP_OPS]]
    other = [(n, a, us, "other") for n, a, us in other_op_groups(trace_path)[:TOP_OPS]]
    groups: list[tuple[str, list[Any], float, str]] = [*gemm, *other]
    if not groups:
        return None
    at_rec, at_sug = _alternating([(n, a) for n, a, _, _ in groups], recorded, suggested, THREAD_PROBE_S)
    timed: list[dict[str, object]] = []
    kept: list[tuple[str, float, float]] = []  # (kind, recorded µs, suggested ÷ recorded) of each timed op
    for (name, inputs, rec_us, kind), a, b in zip(groups, at_rec, at_sug, strict=True):
        if np.isfinite(a) and np.isfinite(b) and a > 0:
            timed.append(
                {
                    "name": name,
                    "kind": kind,
                    "shapes": inputs,
                    "recorded_us": rec_us,
                    "at_recorded_us": a,
                    "at_suggested_us": b,
                }
            )
            kept.append((kind, rec_us, b / a))
    if not timed:
        return None

    def weighted(rows: list[tuple[str, float, float]]) -> dict[str, float]:
        w, r = np.array([x[1] for x in rows]), np.array([x[2] for x in rows])
        return {"suggested_over_recorded": float((w * r).sum() / w.sum()), "recorded_us": float(w.sum())}

    kinds = {k: weighted([x for x in kept if x[0] == k]) for k in ("gemm", "other") if any(x[0] == k for x in kept)}
    return {
        "ops": timed,
        "recorded_threads": recorded,
        "suggested_threads": suggested,
        "suggested_over_recorded": weighted(kept)["suggested_over_recorded"],
        "kinds": kinds,
        "seconds": THREAD_PROBE_S,
    }


BATCH_GROWTHS = (2, 4, 8)  # the larger batches a small-batch CPU run's GEMMs are timed at (PD201's growths)
BATCH_PROBE_MAX_ROWS = 16  # rules/PD201.toml max_m: the batches PD201 calls small, the only ones probed
BATCH_PROBE_S = 0.1  # seconds of timing per op and size, at most (4 sizes of 3 ops: 1.2 s)


def grown_shapes(shapes: list[list[int]], rows: int, growth: int) -> list[list[int]] | None:
    """``shapes`` with the batch dimension ``growth``× larger: in each tensor shape, every dimension equal to
    ``rows`` (the step's samples, or tokens: a GEMM's M, or the inner dimension of a weight-gradient GEMM); None
    when no shape holds one."""
    out, hit = [], False
    for s in shapes:
        if isinstance(s, list) and s and rows in s:
            out.append([d * growth if d == rows else d for d in s])
            hit = True
        else:
            out.append(s)
    return out if hit else None


def probe_batch(trace_path: Path, rows: int) -> dict[str, object] | None:
    """``run.json``'s ``batch_probe`` for a CPU run with small GEMMs: the trace's dominant fp32 GEMMs
    (:data:`TOP_OPS`, recorded shapes) whose shapes hold the batch dimension ``rows``, timed here at the recorded
    shapes and with that dimension × each of :data:`BATCH_GROWTHS`; ``per_sample`` maps each growth to Σ (time at
    that growth ÷ growth) ÷ Σ time at the recorded shapes, weighted by recorded time: the share of today's GEMM
    time a sample keeps in a larger batch (1: the GEMMs scale with the batch; 1/growth: they cost the same). None
    without such ops."""
    groups = [g for g in bf16_gemm_groups(trace_path, bf16_only=False) if grown_shapes(g[1], rows, 2)][:TOP_OPS]
    if not groups:
        return None
    specs: list[tuple[str, list[list[int]]]] = []
    for name, shapes, _ in groups:
        specs.append((name, shapes))
        for g in BATCH_GROWTHS:
            specs.append((name, grown_shapes(shapes, rows, g) or shapes))
    times = time_ops(specs, BATCH_PROBE_S)
    k = 1 + len(BATCH_GROWTHS)
    ops: list[dict[str, object]] = []
    rec: list[float] = []
    now: list[float] = []
    later: dict[int, list[float]] = {g: [] for g in BATCH_GROWTHS}
    for i, (name, shapes, rec_us) in enumerate(groups):
        t = times[i * k : (i + 1) * k]
        if all(np.isfinite(t)) and t[0] > 0:
            grown = {str(g): v for g, v in zip(BATCH_GROWTHS, t[1:], strict=True)}
            ops.append(
                {"name": name, "shapes": shapes, "recorded_us": rec_us, "at_recorded_us": t[0], "grown_us": grown}
            )
            rec.append(rec_us)
            now.append(t[0])
            for g, v in zip(BATCH_GROWTHS, t[1:], strict=True):
                later[g].append(v)
    if not ops:
        return None
    w = np.array(rec)
    per_sample = {str(g): float((w * np.array(later[g]) / g / np.array(now)).sum() / w.sum()) for g in BATCH_GROWTHS}
    return {
        "ops": ops,
        "rows": rows,
        "per_sample": per_sample,
        "threads": torch.get_num_threads(),
        "seconds": BATCH_PROBE_S,
    }


if __name__ == "__main__":  # a child of _alternating: ``python -m perfdoctor.capture.op_probe THREADS SPECS_JSON``
    torch.set_num_threads(int(sys.argv[1]))
    print(json.dumps(time_ops([(str(n), list(a)) for n, a in json.loads(sys.argv[2])], float(sys.argv[3]))))
