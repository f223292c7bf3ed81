"""The ops that dominate a bf16-autocast CPU step, timed again in fp32 on the recorded shapes (PD204's measurement).

A replay of recorded durations cannot say how fast a GEMM would run in another dtype: that depends on the CPU's
instructions (AVX512-BF16 / AMX, or none: oneDNN then converts through fp32). So, after a ``perfdoctor profile``
run whose script trained under CPU bf16 autocast, the runner reads its own trace, takes the GEMM ops with bf16
inputs that took the most time (by name and input shapes, :data:`TOP_OPS`) and times each with bf16 and with fp32
inputs of those shapes on this machine, in the same process and thread count, for at most :data:`PER_OP_S` seconds
a dtype. ``run.json``'s rank entry keeps the result (``op_probe``); PD204 replays the step with the ratio.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

TOP_OPS = 3  # the (name, shapes) groups timed, by recorded time
PER_OP_S = 0.3  # seconds of timing per op and dtype, at most
MIN_REPS, MAX_REPS = 3, 200
GEMM_NAMES = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::linear", "aten::matmul")


def bf16_gemm_groups(trace_path: Path) -> list[tuple[str, list[list[int]], float]]:
    """(op name, input shapes, recorded µs in the trace) of the GEMM ops with bf16 inputs, the most time first.

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
        if types is None or dims is None or b"BFloat16" not in types:
            continue
        outer_end = float(ops["end_us"][i])
        key = (name, dims.decode() if isinstance(dims, bytes) else str(dims))
        groups[key] = groups.get(key, 0.0) + float(ops["dur_us"][i])
    out = [(n, json.loads(d), us) for (n, d), us in groups.items()]
    return sorted(out, key=lambda g: -g[2])


def _time_us(fn: Any) -> float:
    """Median µs of ``fn()`` over repeats within :data:`PER_OP_S` (after one warm-up call)."""
    fn()
    times: list[float] = []
    t_end = time.perf_counter() + PER_OP_S
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
            out.append(_time_us(lambda args=args: op(*args)))
        except (RuntimeError, TypeError):
            return None
    return out[0], out[1]


def probe_bf16(trace_path: Path) -> dict[str, Any] | None:
    """``run.json``'s ``op_probe`` for a bf16-autocast run: each timed op (``name``, ``shapes``, ``recorded_us`` in
    the trace, ``bf16_us``, ``fp32_us`` measured here) and ``bf16_over_fp32`` = Σ bf16 ÷ Σ fp32 weighted by the
    recorded time; None when the trace has no bf16 GEMM."""
    groups = bf16_gemm_groups(trace_path)[:TOP_OPS]
    timed: list[dict[str, Any]] = []
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
