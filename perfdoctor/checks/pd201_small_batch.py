"""PD201 small-batch: GEMMs with very few rows (small M), so per-step fixed costs dominate.

M of a GEMM = the rows of its left operand: for ``aten::linear`` the product of
the input's leading dimensions (batch × sequence), for ``aten::addmm`` the rows
of ``mat1``, for ``aten::mm``/``bmm`` the rows of the first input. Only forward
GEMMs (``linear``, else ``addmm``, else ``mm``) are used: backward GEMMs have
the layer widths as M. Arithmetic intensity of an M×K by K×N GEMM grows with M
(2MNK FLOPs over (MK + KN + MN) elements), so a small M sits far below the
ridge point of any device.

On a GPU the rule also needs low device utilization and memory headroom (a
larger batch must fit); on a CPU-only run the Python and dispatch overhead per
step is the fixed cost.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from perfdoctor.analysis.memory.headroom import Headroom, headroom
from perfdoctor.checks.common import cold_reason, pct, peak_reserved_pct
from perfdoctor.checks.context import Outcome, RankContext, passed, skipped
from perfdoctor.findings import Estimate, Evidence, Hit
from perfdoctor.replay.transforms import WhatIf

CODE = "PD201"
METRICS = {
    "gemm_m_median": "median rows (M) of the forward GEMMs",
    "fixed_us": "mean µs per step that does not grow with the batch (the larger-batch what-if's fixed cost; without a "
    "replay, GPU: device idle, CPU: step minus GEMM ops)",
    "saving_us": "fixed_us × (1 - 1/growth): the per-step-equivalent saving of a growth× larger batch",
    "device_util_pct": "device busy ÷ step time, % (GPU)",
}

# every field a hit gives the TOML message and headline (its evidence values and fields; checked at load)
MESSAGE_FIELDS = (
    "fixed_ms",
    "fixed_what",
    "gemm_op",
    "growth",
    "headroom_text",
    "gemm_m_median",
)


@dataclass(frozen=True)
class Thresholds:
    """``[thresholds]`` of rules/PD201.toml: names and types checked when the catalogue loads."""

    max_m: int
    target_m: int
    max_batch_growth: float
    min_saving_pct: float
    max_device_util_pct: float
    max_memory_used_pct: float
    max_fill_pct: float


_FORWARD = (("aten::linear", 0, "lead"), ("aten::addmm", 1, "rows"), ("aten::mm", 0, "rows"), ("aten::bmm", 0, "rows"))


def _m_values(ctx: RankContext) -> tuple[np.ndarray, str]:
    ops = ctx.tables.cpu_ops
    names = ctx.tables.name_array()
    in_step = ctx.step_of(ops["ts_us"]) >= 0
    for op, arg, how in _FORWARD:
        ids = [i for i, n in enumerate(names) if n == op]
        rows = np.flatnonzero(np.isin(ops["name_id"], ids) & in_step)
        ms = []
        for d in ops["input_dims"][rows]:
            try:
                shape = json.loads(d)[arg] if d is not None else None
            except (ValueError, IndexError, TypeError):
                shape = None
            if isinstance(shape, list) and len(shape) >= 2:
                ms.append(int(np.prod(shape[:-1])) if how == "lead" else int(shape[-2]))
        if ms:
            return np.asarray(ms), op
    return np.empty(0, dtype=np.int64), ""


@dataclass(frozen=True)
class Amortised:
    """The per-step fixed cost a larger batch spreads (µs; ``fixed_what`` names it), the saving of the batch
    ``growth`` times larger (µs per step of today's batch) and, where the step was replayed, the replay's method."""

    fixed_us: float
    fixed_what: str
    saving_us: float
    replay_method: str | None


def check(ctx: RankContext) -> Outcome:
    if reason := cold_reason(ctx):  # a cold step's fixed cost and FLOP rate are the warm-up's
        return skipped(reason)
    ms, op = _m_values(ctx)
    if ms.size == 0:
        return skipped("no forward GEMM ops (aten::linear / addmm / mm) with recorded shapes in the steps")
    m_med = float(np.median(ms))
    th = ctx.thresholds(Thresholds)
    growth, hr, fits = _growth(ctx, th, m_med)
    util = pct(float(ctx.per_step(lambda s: s.busy_us).mean()), ctx.step_us) if ctx.is_gpu else None
    cost = _amortised(ctx, growth, int(round(m_med)))
    metrics = {"gemm_m_median": m_med, "fixed_us": cost.fixed_us, "saving_us": cost.saving_us}
    if util is not None:
        metrics["device_util_pct"] = util
    if m_med > th.max_m or cost.saving_us <= 0:  # min_saving_pct: the engine's, on the report's denominator
        return passed(**metrics)
    mem_pct = None
    if util is not None:  # a GPU: the batch grows only on an under-used device with memory to spare
        if util >= th.max_device_util_pct:
            return passed(**metrics)
        mem_pct = peak_reserved_pct(ctx)
        if mem_pct is None:
            return skipped(
                "small GEMMs and an under-used device, but memory headroom is unknown "
                "(record with profile_memory=True)",
                **metrics,
            )
        if mem_pct > th.max_memory_used_pct:
            return passed(**metrics)
    ev = Evidence(
        values={
            "gemm_m_median": m_med,
            "gemm_op": op,
            "n_gemms": int(ms.size),
            "growth": growth,
            "fixed_ms": cost.fixed_us / 1000,
            "fixed_what": cost.fixed_what,
            "saving_ms": cost.saving_us / 1000,
            "device_util_pct": util if util is not None else "n/a (CPU)",
            "memory_used_pct": mem_pct if mem_pct is not None else "n/a",
            **_headroom_values(hr, fits),
        },
        steps=ctx.step_numbers,
    )
    method = cost.replay_method or (
        f"per-step fixed cost ({cost.fixed_what})"
        f" × (1 − 1/{growth:.1f}): spread over a {growth:.1f}× larger batch, per step of "
        "today's batch (an upper bound)"
    )
    if hr is not None:
        method += "; " + _headroom_method(th.max_fill_pct)
    return Outcome(
        metrics=metrics,
        hit=Hit(
            evidence=ev,
            estimate=Estimate(cost.saving_us, method),
            fields={"headroom_text": _headroom_text(hr, fits)},
            min_saving_pct=th.min_saving_pct,
        ),
    )


def _growth(ctx: RankContext, th: Thresholds, m_med: float) -> tuple[float, Headroom | None, float | None]:
    """(the batch growth the what-if assumes: ``target_m`` ÷ the median GEMM M, 1 to ``max_batch_growth``, at most
    the batch that fits; the device's memory headroom, None without memory data or on a CPU; the batch factor that
    fits under ``max_fill_pct``, None when unknown)."""
    growth = float(min(max(th.target_m / max(m_med, 1.0), 1.0), th.max_batch_growth))
    has_trace = ctx.has_trace
    hr = headroom(ctx.tables, ctx.steps, int(ctx.device.device)) if ctx.is_gpu and has_trace else None
    fits = hr.batch_factor(th.max_fill_pct / 100.0) if hr is not None else None
    if fits is not None:  # the what-if never assumes a batch that does not fit
        growth = float(max(min(growth, fits), 1.0))
    return growth, hr, fits


def _amortised(ctx: RankContext, growth: float, rows: int) -> Amortised:
    """The fixed cost a batch ``growth`` times larger spreads and its saving: replayed
    (:func:`perfdoctor.replay.transforms.batch.larger_batch`; ``rows``: the median GEMM M, the batch dimension whose
    tensors grow) where the rank's trace is at hand, else the fixed cost (the device's idle on a GPU, the step
    outside GEMM ops on a CPU) × (1 − 1/growth), an upper bound."""
    if ctx.is_gpu:
        fixed, fixed_what = float(ctx.per_step(lambda s: s.idle_us).mean()), "device idle"
    else:
        fixed = float(ctx.per_step(lambda s: s.dur_us - s.category_union_us.get("matmul", 0.0)).mean())
        fixed_what = "step time outside GEMM ops"
    if not (ctx.has_trace and growth > 1.0):
        return Amortised(fixed, fixed_what, fixed * (1.0 - 1.0 / growth), None)
    from perfdoctor.replay.transforms.batch import fixed_cost_words, larger_batch

    whatif = larger_batch(ctx.replay(), ctx.tables, growth, rows=rows, per_sample=batch_probe(ctx, rows))
    saving, _, replay_method = ctx.replayed_saving(whatif)
    if not ctx.is_gpu:
        replay_method += "; " + _upper_bound_text(ctx, growth)
    return Amortised(_amortised_us(ctx, whatif, growth), fixed_cost_words(ctx.tables), max(saving, 0.0), replay_method)


def _headroom_values(hr: Headroom | None, fits: float | None) -> dict[str, float | str]:
    """The evidence of the headroom (GiB), none without it."""
    if hr is None:
        return {}
    return {
        "peak_allocated_gib": hr.peak_allocated_bytes / 2**30,
        "capacity_gib": hr.capacity_bytes / 2**30,
        "step_start_allocated_gib": hr.fixed_bytes / 2**30,
        "activation_gib": hr.activation_bytes / 2**30,
        "batch_that_fits_x": fits if fits is not None else "unknown (nothing in the peak grows with the batch)",
    }


def _headroom_text(hr: Headroom | None, fits: float | None) -> str:
    """The message's headroom clause: "; peak 21.5 of 79.2 GiB: a batch of ~3.6× fits" ("" without memory)."""
    if hr is None:
        return ""
    text = f"; peak {hr.peak_allocated_bytes / 2**30:.1f} of {hr.capacity_bytes / 2**30:.1f} GiB"
    return text + (f": a batch of ~{fits:.1f}× fits" if fits is not None else "")


def _headroom_method(fill_pct: float) -> str:
    return (
        "the batch that fits: the peak step's allocated level at its start (parameters, optimizer state: fixed) "
        "plus k × what the step allocated up to its peak (activations: grows with the batch) under "
        f"{fill_pct:.0f}% of the device's memory (perfdoctor.analysis.memory.headroom); the growth replayed is at "
        "most that"
    )


def batch_probe(ctx: RankContext, rows: int) -> dict[str, float] | None:
    """The ``per_sample`` shares of the first rank's ``batch_probe`` in ``run.json`` (the runner's timings of the
    step's GEMMs at larger batches, :func:`perfdoctor.capture.op_probe.probe_batch`) when it probed this batch
    dimension ``rows``; None otherwise."""
    for r in (ctx.analysis.run_json() or {}).get("ranks") or []:
        probe = r.get("batch_probe") if isinstance(r, dict) else None
        if isinstance(probe, dict) and probe.get("rows") == rows and isinstance(probe.get("per_sample"), dict):
            shares = {str(k): float(v) for k, v in probe["per_sample"].items() if isinstance(v, (int, float))}
            return shares or None
    return None


def _upper_bound_text(ctx: RankContext, growth: float) -> str:
    """The CPU saving if no op's time grew with the batch (the larger-batch what-if with every op fixed): the bound
    the replayed saving lies under, where each op grows as its roofline time or the runner's batch probe says."""
    from perfdoctor.replay.transforms.batch import larger_batch

    rr = ctx.replay()
    hi = larger_batch(rr, ctx.tables, growth, cpu_ops_per_sample=False)
    upper = float((rr.fixed_step_times([]) - rr.fixed_step_times([hi])).mean())
    return f"if no op's time grew with the batch, the saving would be {upper / 1000:,.2f} ms (the upper bound)"


def _amortised_us(ctx: RankContext, whatif: WhatIf, growth: float) -> float:
    """Mean µs per step of the fixed cost the larger-batch what-if amortises: the host time it cuts (CPU: the
    optimizer's ops included) plus the device time it takes off the optimizer's kernels, ÷ (1 − 1/growth) (the
    what-if keeps 1/growth of each)."""
    from perfdoctor.trace import intervals as iv

    sc = whatif.scenario
    cut = sum(iv.total(c) for c in sc.host_cut.values())
    dev = float((ctx.replay().graph.act_dur_us - sc.act_dur_us).sum()) if sc.act_dur_us is not None else 0.0
    share = 1.0 - 1.0 / growth
    return (cut + dev) / share / max(ctx.n_steps, 1) if share > 0 else 0.0
