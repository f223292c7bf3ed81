"""PD204 cpu-bf16-autocast: bf16 autocast on a CPU without bf16 matrix instructions.

bf16 GEMMs are fast on CPUs with AVX512-BF16 or AMX-BF16 (Intel Cooper Lake,
Sapphire Rapids and later; AMD Zen 4): oneDNN runs them natively. Without
those instructions (or with them hidden by ``ONEDNN_MAX_CPU_ISA``) the bf16
kernels convert to fp32 and back, and autocast's casts come on top: slower
than plain fp32 (measured on examples/mlp.py with ``ONEDNN_MAX_CPU_ISA=AVX512_CORE``:
2.4x the fp32 step). On CPUs that have them the rule stays silent: whether
the casts cost more than native bf16 GEMMs win cannot be told from one run
(on an AMX machine the same run was 3% faster in bf16 on one day, 3% slower
on another). The CPU's facts must come from the run (``run.json`` of
``perfdoctor profile``, recorded on the machine that ran the training): the
flags of the machine reading a trace say nothing about the machine that
recorded it, so without run data the rule is skipped. A ``perfdoctor profile`` run also measures the fix: the
runner times the step's dominant bf16 GEMMs again in fp32 on the recorded shapes
(:mod:`perfdoctor.capture.op_probe`), and the saving uses that ratio; then the measurement decides, on CPUs
with bf16 units too.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from perfdoctor.checks.common import pct, top_names
from perfdoctor.checks.context import Outcome, RankContext, passed, skipped
from perfdoctor.checks.run_facts import number, table, tables
from perfdoctor.findings import Estimate, Evidence, Hit
from perfdoctor.trace import intervals as iv

CODE = "PD204"
METRICS = {
    "bf16_gemm_us": "mean µs per step in GEMM/linear/conv ops with bf16 inputs",
    "cast_us": "mean µs per step in dtype casts (aten::to / _to_copy)",
    "has_bf16_isa": (
        "1 when the run's bf16 GEMMs could use avx512_bf16 / amx_bf16 (present and not capped by ONEDNN_MAX_CPU_ISA)"
    ),
}

# every field a hit gives the TOML message and headline (its evidence values and fields; checked at load)
MESSAGE_FIELDS = ("bf16_gemm_ms", "cast_ms", "cpu", "cpu_flags", "reason")


@dataclass(frozen=True)
class Thresholds:
    """``[thresholds]`` of rules/PD204.toml: names and types checked when the catalogue loads."""

    min_saving_pct: float
    emulated_slowdown: float


GEMM_OPS = re.compile(
    r"^aten::(mm|addmm|bmm|baddbmm|matmul|linear|_?convolution|conv\dd|mkldnn_\w+|_addmm_activation)$"
)
CAST_OPS = re.compile(r"^aten::(to|_to_copy)$")
BF16_ISA = ("avx512_bf16", "amx_bf16")


@dataclass(frozen=True)
class OpProbe:
    """A rank's ``op_probe`` of ``run.json`` (:mod:`perfdoctor.capture.op_probe`): the step's dominant bf16 GEMMs
    timed in bf16 and fp32 on this machine; ``bf16_over_fp32`` the time-weighted ratio (> 0), ``ops`` each op's
    record (name, shapes, bf16_us, fp32_us)."""

    bf16_over_fp32: float
    threads: object
    ops: list[Mapping[str, object]]


def op_probe(run: Mapping[str, object]) -> OpProbe | None:
    """The first rank's ``op_probe`` of ``run.json`` with a ratio above 0, or None."""
    for r in tables(run, "ranks"):
        probe = table(r, "op_probe")
        ratio = number(probe, "bf16_over_fp32")
        if ratio is not None and ratio > 0:
            return OpProbe(ratio, probe.get("threads"), tables(probe, "ops"))
    return None


def _op_text(op: Mapping[str, object]) -> str:
    """One probed op as the method lists it: its name, its first input's shape, its bf16 and fp32 times (µs)."""
    shapes = op.get("shapes")
    first = shapes[0] if isinstance(shapes, list) and shapes and isinstance(shapes[0], list) else None
    shape = "×".join(str(d) for d in first) if first is not None else "?"
    return (
        f"{op.get('name')} {shape}…: bf16 {number(op, 'bf16_us') or 0:.0f} µs, fp32 {number(op, 'fp32_us') or 0:.0f} µs"
    )


def probe_method(probe: OpProbe) -> str:
    """The saving's method from a measured bf16/fp32 ratio: the formula and each op timed."""
    ops = "; ".join(_op_text(o) for o in probe.ops)
    return (
        "autocast's cast time per step + bf16 GEMM time × (1 − 1/r), r = bf16 ÷ fp32 GEMM time = "
        f"{probe.bf16_over_fp32:.2f} measured on this machine after the run ({probe.threads} "
        f"thread(s), the recorded shapes, weighted by their recorded time: {ops})"
    )


def _per_step(ctx: RankContext, mask: np.ndarray) -> float:
    ops = ctx.tables.cpu_ops
    ws, we = ctx.windows()
    return float(iv.per_window(iv.union(ops["ts_us"][mask], ops["end_us"][mask]), ws, we).mean())


def check(ctx: RankContext) -> Outcome:
    th = ctx.thresholds(Thresholds)
    ops = ctx.tables.cpu_ops
    if len(ops) == 0:
        return skipped("no cpu_op events in the trace")
    bf16 = _bf16_gemms(ctx)
    bf16_us = _per_step(ctx, bf16)
    cast_us = _per_step(ctx, ctx.tables.names_matching(CAST_OPS)[ops["name_id"]])
    metrics = {"bf16_gemm_us": bf16_us, "cast_us": cast_us}
    if not bf16.any():
        return passed(**metrics)
    run = ctx.analysis.run_json() or {}
    cpu_facts = run.get("cpu") or {}
    flags = cpu_facts.get("flags")
    if flags is None:
        return skipped(
            "bf16 GEMMs found, but the recording CPU's instruction set is unknown and the GEMMs' fp32 speed on it "
            "unmeasured (record with `perfdoctor profile`: its run.json has the CPU flags, and it times the step's "
            "bf16 GEMMs again in fp32 on the recorded shapes)",
            **metrics,
        )
    has_isa = cpu_facts.get("bf16_matrix_units", any(f in flags for f in BF16_ISA))
    metrics["has_bf16_isa"] = float(has_isa)
    probe = op_probe(run)
    # measured on this machine, the ratio decides, whatever the flags say; else the spec's slowdown, without the ISA
    ratio = probe.bf16_over_fp32 if probe is not None else th.emulated_slowdown
    saving = cast_us + bf16_us * (1.0 - 1.0 / ratio)
    if saving <= 0 or (probe is None and has_isa):  # min_saving_pct: the engine's, on the report's denominator
        return passed(**metrics)
    names = ctx.tables.name_array()
    ev = Evidence(
        values={
            "cpu": cpu_facts.get("model") or "the CPU",
            "cpu_flags": ", ".join(flags) or "none of interest",
            "reason": _reason(probe, ratio, cpu_facts.get("onednn_max_cpu_isa"), flags),
            "cast_pct": pct(cast_us, ctx.step_us),
            "bf16_gemm_ms": bf16_us / 1000,
            "cast_ms": cast_us / 1000,
            "bf16_gemm_pct": pct(bf16_us, ctx.step_us),
        },
        steps=ctx.step_numbers,
        events=top_names(names[ops["name_id"][bf16]], ops["dur_us"][bf16]),
    )
    method = probe_method(probe) if probe is not None else _spec_method(th.emulated_slowdown)
    estimate = Estimate(saving, method)
    if ratio >= 1.0 and not ctx.is_gpu and ctx.n_steps:  # fp32 makes nothing longer: a host cut replays it
        estimate = _replayed(ctx, bf16, ratio, method)
    return Outcome(
        metrics=metrics,
        hit=Hit(evidence=ev, estimate=estimate, min_saving_pct=th.min_saving_pct),
    )


def _bf16_gemms(ctx: RankContext) -> np.ndarray:
    """Mask over the rank's cpu_ops: the GEMM/linear/conv ops (:data:`GEMM_OPS`) with a bf16 input."""
    ops = ctx.tables.cpu_ops
    gemm = ctx.tables.names_matching(GEMM_OPS)[ops["name_id"]]
    types = ops["input_type"]
    bf16 = np.zeros(len(ops), dtype=bool)
    idx = np.flatnonzero(gemm)
    bf16[idx] = [t is not None and b"BFloat16" in t for t in types[idx]]
    return bf16


def _reason(probe: OpProbe | None, ratio: float, cap: str | None, flags: list[str]) -> str:
    """Why bf16 is slower on this CPU, as the message says it: measured, hidden by ``ONEDNN_MAX_CPU_ISA`` (``cap``)
    or missing from the CPU's ``flags``."""
    if probe is not None:
        return f"its bf16 GEMMs measured at {ratio:.2f}× their fp32 time on the recorded shapes"
    if cap and any(f in flags for f in BF16_ISA):
        return f"ONEDNN_MAX_CPU_ISA={cap} hides its bf16 matrix instructions"
    return "it has no bf16 matrix instructions"


def _spec_method(emulated_slowdown: float) -> str:
    """The method of a saving from the spec's slowdown (no probe measured the GEMMs on this machine)."""
    return (
        "autocast's cast time per step + bf16 GEMM time × (1 − 1/emulated_slowdown); "
        f"emulated_slowdown = {emulated_slowdown}: an estimate from the spec, not measured (a "
        "`perfdoctor profile` run times the step's bf16 GEMMs again in fp32 on the recorded shapes and replaces it)"
    )


def _replayed(ctx: RankContext, bf16: np.ndarray, ratio: float, method: str) -> Estimate:
    """The replayed saving of running the ``bf16`` GEMM ops in fp32 (each ``ratio`` times faster) without the casts
    (:func:`perfdoctor.replay.transforms.cpu.fp32_instead_of_bf16`; ``method``: how the ratio was found)."""
    from perfdoctor.replay.transforms.cpu import fp32_instead_of_bf16

    ops = ctx.tables.cpu_ops
    gemm_iv = iv.union(ops["ts_us"][bf16], ops["end_us"][bf16])
    cast = ctx.tables.names_matching(CAST_OPS)[ops["name_id"]]
    cast_iv = iv.union(ops["ts_us"][cast], ops["end_us"][cast])
    whatif = fp32_instead_of_bf16(ctx.replay(), gemm_iv, cast_iv, ratio, method)
    replayed, _, replay_method = ctx.replayed_saving(whatif)
    return Estimate(max(replayed, 0.0), replay_method)
