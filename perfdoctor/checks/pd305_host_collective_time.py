"""PD305 host-collective-time: collectives run by the CPU (gloo) fill much of a CPU-only step.

From the CPU breakdown (:mod:`perfdoctor.analysis.timing.cpu_breakdown`): per step, the union of host collective
ranges (``gloo:all_reduce``, ``c10d::``, ``record_param_comms``) and its *exposed* part, when no other op of
the process runs. The evidence lists each collective's message size (from the range's recorded input shape
and dtype), count per step, mean duration and algorithm bandwidth (bytes ÷ duration; NCCL-tests' "algbw"): a duration
includes any wait for other ranks, which one rank's trace cannot separate, so a low algbw alone does not show the
transport is the limit. Saving:
the exposed time, an upper bound (overlap could hide it; the transfer itself still takes its time).

The advice follows the parallelism the trace's labels show (:func:`perfdoctor.analysis.parallel.sharding.flavour`):
DDP's
knobs (buckets, comm hooks) for a data-parallel run; FSDP's (prefetch, unit size, a mixed-precision reduce) for a
``fully_shard`` / ``FullyShardedDataParallel`` run; DeepSpeed's config keys for ZeRO.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from perfdoctor.analysis.parallel.sharding import flavour
from perfdoctor.analysis.timing.classify import collective_of
from perfdoctor.analysis.timing.cpu_breakdown import HOST_COMMUNICATION
from perfdoctor.analysis.work.op_args import parse_args
from perfdoctor.checks.common import pct, steps_over
from perfdoctor.checks.context import Outcome, RankContext, passed
from perfdoctor.findings import Estimate, Evidence, Hit

CODE = "PD305"
METRICS = {
    "collective_us": "mean µs per step inside host collectives (union)",
    "collective_pct": "collective_us as % of the mean step",
    "exposed_us": "mean µs per step of host collective time with no other op of the process running",
    "exposed_pct": "exposed_us as % of the mean step",
}
# every field a hit gives the TOML message and headline (its evidence values and fields; checked at load)
MESSAGE_FIELDS = (
    "advice",
    "collective_ms",
    "sizes",
    "collective_pct",
    "exposed_pct",
)


@dataclass(frozen=True)
class Thresholds:
    """``[thresholds]`` of rules/PD305.toml: names and types checked when the catalogue loads."""

    min_saving_pct: float


# the sharded runs whose fix_<situation> in the TOML replaces the rule's DDP-worded fix
ADVICE = ("fsdp", "zero")

# per parallelism: how to coalesce, how to halve the bytes, what overlaps the collectives with compute
_KNOBS = {
    "ddp": (
        "DDP bucket_cap_mb, or coalesce tensors before all_reduce",
        "halve the bytes with a DDP comm hook (bf16_compress_hook)",
        "overlap them with the backward pass (DDP launches each bucket's all_reduce as its gradients are ready; a "
        "manual all_reduce after backward() cannot overlap)",
    ),
    "fsdp": (
        "wrap larger FSDP units, each unit is one all-gather and one reduce-scatter",
        "halve the bytes with MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16)",
        "overlap them with compute (forward_prefetch=True and backward_prefetch=BACKWARD_PRE issue the next unit's "
        "all-gather while this one computes)",
    ),
    "zero": (
        'raise "reduce_bucket_size" and "allgather_bucket_size"',
        'halve the bytes with bf16 training ("bf16": {"enabled": true})',
        'overlap them with compute ("overlap_comm": true; ZeRO-3: "stage3_prefetch_bucket_size")',
    ),
}

SMALL_BYTES = 1 << 20  # below 1 MiB a collective's fixed latency dominates: bucket or coalesce
LATENCY_US = 1000.0  # a sub-MiB gloo call beyond 1 ms is not its fixed latency (tens of µs on one host)
SLOW_BYTES_PER_S = 1e9  # below 1 GB/s of algorithm bandwidth the transport (TCP, one NIC) may be the limit


def _sizes(ctx: RankContext) -> list[dict[str, float | str]]:
    """Each (collective, message bytes) in the analysed windows: count, mean duration (µs), algbw (B/s)."""
    ws, we = ctx.windows()
    groups: dict[tuple[str, float], list[float]] = {}
    for tname in ("annotations", "cpu_ops"):
        tab = ctx.tables.tables[tname]
        if len(tab) == 0 or "input_dims" not in tab:
            continue
        m = ctx.tables.names_matching(HOST_COMMUNICATION)[tab["name_id"]]
        m &= (tab["ts_us"] >= ws[0]) & (tab["ts_us"] < we[-1])
        for i in np.flatnonzero(m).tolist():
            args = parse_args(tab["input_dims"][i], tab["input_type"][i])
            nbytes = args.nbytes(0) if args is not None and args.dims else None
            if not nbytes:
                continue
            key = (collective_of(ctx.tables.names[int(tab["name_id"][i])]), float(nbytes))
            groups.setdefault(key, []).append(float(tab["dur_us"][i]))
    rows: list[dict[str, float | str]] = []
    for (coll, nbytes), durs in sorted(groups.items(), key=lambda kv: -sum(kv[1])):
        mean = float(np.mean(durs))
        rows.append(
            {
                "collective": coll,
                "bytes": nbytes,
                "count": float(len(durs)),
                "mean_us": mean,
                "algbw_bytes_per_s": nbytes / (mean / 1e6) if mean > 0 else 0.0,
            }
        )
    return rows


def _situation(ctx: RankContext) -> str | None:
    """``"fsdp"`` or ``"zero"`` when the trace's labels show a sharded run, else None (the rule's DDP fix)."""
    sharded = flavour(ctx.tables)
    return None if sharded is None else "zero" if sharded == "zero" else "fsdp"


def _advice(
    rows: list[dict[str, float | str]], exposed_share: float, n_steps: int = 1, situation: str | None = None
) -> str:
    """The fixes the collectives' sizes, rates and exposure point to. Coalescing ("fewer, larger collectives")
    only when there are several calls per step to coalesce and their mean duration is of a call's fixed latency
    (under :data:`LATENCY_US`): one call per step has nothing to coalesce, and a small call that takes
    milliseconds is waiting for its peers (one 0.27 MB all_reduce of 15.5 ms per step). The knobs named are the
    ``situation``'s (:data:`_KNOBS`: DDP's when None)."""
    coalesce, halve, overlap = _KNOBS[situation or "ddp"]
    tips = []
    calls = sum(float(r["count"]) for r in rows) / max(n_steps, 1)
    small = rows and all(float(r["bytes"]) < SMALL_BYTES for r in rows)
    if small and calls > 1 and all(float(r["mean_us"]) < LATENCY_US for r in rows):
        tips.append(
            f"the messages are small, so each call pays gloo's fixed latency: fewer, larger collectives ({coalesce})"
        )
    if rows and min(float(r["algbw_bytes_per_s"]) for r in rows) < SLOW_BYTES_PER_S:
        # a rank's own trace cannot split a call's duration into the wait for its peers and the transfer, so a low
        # bytes ÷ duration does not show the transport is the limit
        tips.append(
            "bytes ÷ duration is below 1 GB/s, but one rank's trace cannot separate the wait for other ranks from "
            "the transfer: report on every rank's trace (PD303 names a straggler) before blaming the "
            "transport; if the transfer itself is slow, check the NIC gloo uses (GLOO_SOCKET_IFNAME), fewer ranks "
            f"per host, or {halve}"
        )
    if exposed_share > 0.5:
        tips.append(f"nothing computes while they run: {overlap}")
    return "; ".join(tips) or "overlap them with compute or move the job to GPUs with NCCL"


def check(ctx: RankContext) -> Outcome:
    th = ctx.thresholds(Thresholds)
    total = ctx.per_step(lambda s: s.communication.total_us)
    exposed = ctx.per_step(lambda s: s.communication.exposed_us)
    mean_total, mean_exposed = float(total.mean()), float(exposed.mean())
    metrics = {
        "collective_us": mean_total,
        "collective_pct": pct(mean_total, ctx.step_us),
        "exposed_us": mean_exposed,
        "exposed_pct": pct(mean_exposed, ctx.step_us),
    }
    if mean_exposed <= 0:  # min_saving_pct is the engine's, on the report's denominator (perfdoctor.checks.after)
        return passed(**metrics)
    rows, situation = _sizes(ctx), _situation(ctx)
    sizes = (
        ", ".join(
            f"{r['collective']} of {float(r['bytes']) / 1e6:,.2f} MB "
            f"×{float(r['count']) / max(ctx.n_steps, 1):,.3g} per step "
            f"({float(r['mean_us']) / 1000:,.1f} ms each, {float(r['algbw_bytes_per_s']) / 1e9:.3f} GB/s)"
            for r in rows[:4]
        )
        + " (a duration includes any wait for other ranks)"
        if rows
        else "message sizes not recorded (record_shapes=True)"
    )
    ev = Evidence(
        values={
            "collective_ms": mean_total / 1000,
            "collective_pct": metrics["collective_pct"],
            "exposed_ms": mean_exposed / 1000,
            "exposed_pct": metrics["exposed_pct"],
            "sizes": sizes,
            "collectives": rows,
            "advice": _advice(rows, mean_exposed / mean_total if mean_total else 0.0, ctx.n_steps, situation),
        },
        steps=steps_over(exposed, ctx.per_step(lambda s: s.dur_us), th.min_saving_pct, ctx.step_numbers),
    )
    method = "mean host collective time per step with no other op of the process running (CPU breakdown)"
    return Outcome(
        metrics=metrics,
        hit=Hit(
            evidence=ev,
            estimate=Estimate(mean_exposed, method),
            min_saving_pct=th.min_saving_pct,
            advice=ctx.advice(situation) if situation else {},
        ),
    )
