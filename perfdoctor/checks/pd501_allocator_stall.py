"""PD501 allocator-stall: ``cudaMalloc`` / ``cudaFree`` inside steady-state steps.

PyTorch's caching allocator serves steady-state allocations from its cache;
a ``cudaMalloc`` after the first step means a cache miss (new shapes,
fragmentation, ``torch.cuda.empty_cache()``), and ``cudaFree`` synchronizes
the device (it is also what an allocator retry does: free the cache, then
malloc again). The first ``skip_first_steps`` steps are left out: they fill the cache. Every per-step figure
(calls, host time, idle) is per analysed step, the report's one denominator: the calls of the steady-state steps
summed and divided by all analysed steps (the steps left out count none), so the host time in the calls can never
exceed the mean step it is compared with.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from perfdoctor.analysis import intervals as iv
from perfdoctor.analysis.run_memory import run_allocator_evidence
from perfdoctor.checks.common import pct, peak_reserved_pct, step_list_text, top_names
from perfdoctor.checks.context import Outcome, RankContext, passed, skipped
from perfdoctor.findings import Estimate, Evidence, Hit

CODE = "PD501"
METRICS = {
    "allocator_calls_per_step": "cudaMalloc/cudaFree (hipMalloc/hipFree) calls in the steady-state steps, per "
    "analysed step",
    "allocator_host_us": "µs the host spends in them in the steady-state steps, per analysed step",
    "idle_us": "µs of device idle that begins during them in the steady-state steps, per analysed step",
    "idle_pct": "idle_us as % of the mean step time",
    "peak_reserved_pct": "peak reserved memory ÷ device memory, % (when memory was profiled)",
}

# what a hit's evidence/fields add to METRICS for the TOML message (its placeholders are checked at load)
MESSAGE_FIELDS = ("allocator_host_ms", "idle_ms", "steady_steps", "n_steps", "alloc_api")


def _rocm_words(text: str) -> str:
    """``text`` (the rule's fix or example) as it reads on ROCm, whose trace holds hipMalloc/hipFree and whose
    allocator reads ``PYTORCH_HIP_ALLOC_CONF`` (PyTorch's HIP caching allocator; the CUDA name is the
    fallback, new-user review: PD501 told an MI300X run to set the CUDA variable)."""
    for cuda, hip in (
        ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_HIP_ALLOC_CONF"),
        ("cudaMalloc", "hipMalloc"),
        ("cudaFree", "hipFree"),
    ):
        text = text.replace(cuda, hip)
    return text


@dataclass(frozen=True)
class Thresholds:
    """``[thresholds]`` of rules/PD501.toml: names and types checked when the catalogue loads."""

    skip_first_steps: int
    min_calls_per_step: float
    min_saving_pct: float


ALLOC = re.compile(r"^(cuda|hip)(Malloc|Free|MallocAsync|FreeAsync|MallocManaged)$|^cuMem(Alloc|Free|Create|Release)")


def check(ctx: RankContext) -> Outcome:
    first = int(ctx.th["skip_first_steps"])
    if ctx.n_steps <= first:
        return skipped(f"only {ctx.n_steps} step(s): the first {first} fill the allocator's cache")
    rt = ctx.tables.runtime
    m = ctx.tables.names_matching(ALLOC)[rt["name_id"]] if len(rt) else np.zeros(0, bool)
    step = ctx.step_of(rt["ts_us"][m]) if m.any() else np.empty(0, dtype=np.int64)
    steady = step >= first
    rows = np.flatnonzero(m)[steady]
    calls = iv.union(rt["ts_us"][rows], rt["end_us"][rows])
    ws, we = ctx.windows()
    idle = ctx.idle_after(calls)[first:]
    # all three per analysed step, like every saving (the steps left out count nothing): a mean over the steady
    # steps beside the mean of all steps said the host spent 1,045.6 ms per step in hipFree/hipMalloc in an
    # 818.7 ms step (MI300X ResNet18: 3 steady of 4 analysed steps)
    saving = float(idle.sum()) / ctx.n_steps
    host_us = float(iv.per_window(calls, ws, we)[first:].sum()) / ctx.n_steps
    peak = peak_reserved_pct(ctx)
    metrics = {
        "allocator_calls_per_step": rows.size / ctx.n_steps,
        "allocator_host_us": host_us,
        "idle_us": saving,
        "idle_pct": pct(saving, ctx.step_us),
    }
    if peak is not None:
        metrics["peak_reserved_pct"] = peak
    # the detection asks how often a warm cache misses: calls per steady-state step (the first steps fill it)
    if (
        rows.size / (ctx.n_steps - first) < ctx.th["min_calls_per_step"]
        or saving <= 0  # min_saving_pct: the engine's, on the report's denominator (perfdoctor.checks.after)
    ):
        return passed(**metrics)
    names = ctx.tables.name_array()[rt["name_id"][rows]]
    hip = bool(np.char.startswith(names.astype(str), "hip").mean() > 0.5) if names.size else False
    api = "hipMalloc/hipFree" if hip else "cudaMalloc/cudaFree"
    ev = Evidence(
        values={
            "allocator_calls_per_step": metrics["allocator_calls_per_step"],
            "allocator_host_ms": host_us / 1000,
            "idle_ms": saving / 1000,
            "idle_pct": metrics["idle_pct"],
            "peak_reserved_pct": peak if peak is not None else "unknown (profile_memory=False)",
            **run_allocator_evidence(ctx.analysis),
        },
        steps=sorted({int(ctx.step_numbers[i]) for i in step[steady].tolist()}),
        events=top_names(names, rt["dur_us"][rows]),
    )
    steady_text = step_list_text(ctx.step_numbers[first:])
    method = (
        f"device idle while the step's critical path is on the host inside {api} in the steady-state steps "
        f"({steady_text}), summed and divided by the {ctx.n_steps} analysed steps"
    )
    fields = {"steady_steps": steady_text, "n_steps": str(ctx.n_steps), "alloc_api": api}
    spec = ctx.spec
    advice = (
        {k: _rocm_words(getattr(spec, k)) for k in ("fix", "example_before", "example_after")}
        if hip and spec is not None
        else {}
    )
    return Outcome(
        metrics=metrics,
        hit=Hit(
            evidence=ev,
            estimate=Estimate(saving, method),
            fields=fields,
            advice=advice,
            min_saving_pct=ctx.th["min_saving_pct"],
        ),
    )
