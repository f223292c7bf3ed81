"""PD501 allocator-stall: ``cudaMalloc`` / ``cudaFree`` inside steady-state steps, the cause, and the replayed fix.

PyTorch's caching allocator serves steady-state allocations from its cache; a driver call after the first steps is
a cache miss, and ``cudaFree`` synchronizes the device. :func:`perfdoctor.analysis.memory.allocator.allocator_calls`
tells the cause from where the frees fall (caching off, allocator retries, ``empty_cache()`` in the loop, or new
shapes); the rule's ``[advice.CAUSE]`` text gives that cause's fix. The saving is the step replayed with those
calls served from the cache (:func:`perfdoctor.replay.transforms.memory.serve_from_cache`). The first
``skip_first_steps`` steps are left out: they fill the cache. The calls and their host time are per steady-state
step (the steps after those: a count divided by the steps it was counted in); the saving is per analysed step, the
report's one denominator (the replay's gain summed over the steady-state steps, divided by all analysed steps).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from perfdoctor.analysis.memory.allocator import CAUSES, AllocatorCalls, allocator_calls
from perfdoctor.analysis.memory.run_memory import run_allocator_evidence
from perfdoctor.checks.common import (
    pct,
    peak_reserved_pct,
    replay_fields,
    replayed_estimate,
    step_list_text,
    top_names,
)
from perfdoctor.checks.context import Outcome, RankContext, passed, skipped
from perfdoctor.findings import Evidence, Hit
from perfdoctor.replay.transforms.memory import serve_from_cache
from perfdoctor.trace import intervals as iv

CODE = "PD501"
METRICS = {
    "allocator_calls_per_step": "cudaMalloc/cudaFree (hipMalloc/hipFree) calls per steady-state step (the steps "
    "after the first skip_first_steps)",
    "allocator_host_us": "µs the host spends in them per steady-state step (the union of the calls)",
    "idle_us": "mean µs per step the replayed step gets shorter with those calls served from the cache (the saving)",
    "idle_pct": "idle_us as % of the mean step time",
    "peak_reserved_pct": "peak reserved memory ÷ device memory, % (when memory was profiled)",
}

# every field a hit gives the TOML message and headline (its evidence values and fields; checked at load)
MESSAGE_FIELDS = (
    "allocator_host_ms",
    "idle_ms",
    "steady_steps",
    "n_steps",
    "n_steady",
    "alloc_api",
    "cause_text",
    "recorded_ms",
    "n_frees",
    "n_mallocs",
    "allocator_calls_per_step",
)


# the causes the check tells apart, each with its phrase and advice in the TOML
ADVICE = CAUSES


def _rocm_words(text: str) -> str:
    """``text`` (the rule's fix or example) as it reads on ROCm, whose trace holds hipMalloc/hipFree and whose
    allocator reads ``PYTORCH_HIP_ALLOC_CONF`` (PyTorch's HIP caching allocator; the CUDA name is the
    fallback, PD501 told an MI300X run to set the CUDA variable)."""
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


def _advice(ctx: RankContext, cause: str, hip: bool) -> tuple[str, dict[str, str]]:
    """The cause's phrase and fix (``cause_<cause>``, ``fix_<cause>`` and its examples in rules/PD501.toml), in
    ROCm's words on a HIP trace."""
    spec = ctx.spec
    phrase = spec.variants.get(f"cause_{cause}", cause.replace("_", " ")) if spec is not None else cause
    words = ctx.advice(cause)
    if hip:
        phrase, words = _rocm_words(phrase), {k: _rocm_words(v) for k, v in words.items()}
    return phrase, words


def check(ctx: RankContext) -> Outcome:
    th = ctx.thresholds(Thresholds)
    first = int(th.skip_first_steps)
    if ctx.n_steps <= first:
        return skipped(f"only {ctx.n_steps} step(s): the first {first} fill the allocator's cache")
    calls_of = allocator_calls(ctx.tables, ctx.steps, first)
    rows = calls_of.rows
    metrics, peak = _counts(ctx, calls_of, first)
    # the detection asks how often a warm cache misses: calls per steady-state step (the first steps fill it)
    if metrics["allocator_calls_per_step"] < th.min_calls_per_step:
        return passed(**metrics)
    whatif = serve_from_cache(ctx.replay(), ctx.tables, rows)
    saving, per_step, method = ctx.replayed_saving(whatif)
    metrics["idle_us"], metrics["idle_pct"] = saving, pct(saving, ctx.base_step_us)
    if saving <= 0:  # min_saving_pct: the engine's, on the report's denominator (perfdoctor.checks.after)
        return passed(**metrics)
    rt = ctx.tables.runtime
    names = ctx.tables.name_array()[rt["name_id"][rows]]
    hip = bool(np.char.startswith(names.astype(str), "hip").mean() > 0.5) if names.size else False
    api = "hipMalloc/hipFree" if hip else "cudaMalloc/cudaFree"
    phrase, advice = _advice(ctx, calls_of.cause, hip)
    step = calls_of.step
    ev = Evidence(
        values={
            "allocator_calls_per_step": metrics["allocator_calls_per_step"],
            "allocator_host_ms": metrics["allocator_host_us"] / 1000,
            "idle_ms": saving / 1000,
            "idle_pct": metrics["idle_pct"],
            "alloc_api": api,
            "cause": calls_of.cause,
            **{f"frees_{c}": calls_of.count(c) for c in CAUSES[:3]},
            "calls_in_first_steps": calls_of.n_calls_first,
            "peak_reserved_pct": peak if peak is not None else _peak_unknown(ctx),
            **run_allocator_evidence(ctx.analysis),
        },
        steps=sorted({int(ctx.step_numbers[i]) for i in step[per_step[step] > 0].tolist()}),
        events=top_names(names, rt["dur_us"][rows]),
    )
    fields = _message_fields(ctx, calls_of, first, api, phrase)
    return Outcome(
        metrics=metrics,
        hit=Hit(
            evidence=ev,
            estimate=replayed_estimate(saving, method, fields),
            fields=fields,
            advice=advice,
            min_saving_pct=th.min_saving_pct,
        ),
    )


def _counts(ctx: RankContext, calls_of: AllocatorCalls, first: int) -> tuple[dict[str, float], float | None]:
    """(the rule's metrics before the replay: calls and host µs per steady-state step, the first ``first`` steps
    left out; the peak reserved memory, % of the device's, None when unknown)."""
    rt = ctx.tables.runtime
    calls = iv.union(rt["ts_us"][calls_of.rows], rt["end_us"][calls_of.rows])
    ws, we = ctx.windows()
    n_steady = ctx.n_steps - first
    # a count is divided by the steps it was counted in: the steady-state steps (the saving below is per analysed
    # step, the report's denominator, and says so)
    host_us = float(iv.per_window(calls, ws, we)[first:].sum()) / n_steady
    peak = peak_reserved_pct(ctx)
    metrics = {
        "allocator_calls_per_step": calls_of.rows.size / n_steady,
        "allocator_host_us": host_us,
        "idle_us": 0.0,
        "idle_pct": 0.0,
    }
    if peak is not None:
        metrics["peak_reserved_pct"] = peak
    return metrics, peak


def _peak_unknown(ctx: RankContext) -> str:
    """Why the peak reserved memory is unknown, as the evidence says it."""
    return "unknown (" + ("no device capacity" if len(ctx.tables.memory) else "profile_memory=False") + ")"


def _message_fields(
    ctx: RankContext, calls_of: AllocatorCalls, first: int, api: str, phrase: str
) -> dict[str, str | float]:
    """The hit's fields for the message: the steady-state steps, the calls' API and cause, the replay's."""
    n_frees = int(calls_of.is_free.sum())
    return {
        "steady_steps": step_list_text(ctx.step_numbers[first:]),
        "n_steps": str(ctx.n_steps),
        "n_steady": str(ctx.n_steps - first),
        "alloc_api": api,
        "cause_text": phrase,
        "n_frees": str(n_frees),
        "n_mallocs": str(calls_of.rows.size - n_frees),
        **replay_fields(ctx),
    }
