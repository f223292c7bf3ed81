"""PD306 fsdp-all-gather-not-prefetched: FSDP units whose all-gather waits until the unit itself starts.

From the FSDP labels of the trace (:mod:`perfdoctor.analysis.parallel.sharding`): per analysed step, each unit's
all-gathers (forward and backward) and reduce-scatters, their exposed time, and whether each all-gather was
prefetched (issued inside a prefetch label while the previous unit still computed). Fires when all-gathers after
the first of their pass are not prefetched; the saving is the replay of
:func:`perfdoctor.replay.transforms.sharding.prefetch_all_gathers` (each issued when the previous unit's ends),
at most the exposed all-gather time of those units. Silent when every all-gather after the first is prefetched.
"""

from __future__ import annotations

from dataclasses import dataclass

from perfdoctor.analysis.parallel.sharding import ShardedComm, flavour, sharded_comm
from perfdoctor.checks.common import pct
from perfdoctor.checks.context import Outcome, RankContext, passed, skipped
from perfdoctor.findings import Estimate, Evidence, Hit

CODE = "PD306"
METRICS = {
    "all_gather_us": "mean µs per step of the FSDP units' all-gathers (device kernels' union, or the host call)",
    "all_gather_exposed_us": "mean µs per step of that time with no compute running",
    "reduce_scatter_exposed_us": "mean µs per step of the units' reduce-scatter time with no compute running",
    "late_gathers": "all-gathers per step issued only when their unit started (the first of each pass not counted)",
    "late_exposed_us": "mean µs per step of the late all-gathers' exposed time",
    "saving_us": "mean µs per step the replayed step gets shorter with each all-gather prefetched one unit ahead",
    "saving_pct": "saving_us as % of the mean step time",
}
# every field a hit gives the TOML message and headline (its evidence values and fields; checked at load)
MESSAGE_FIELDS = (
    "late_exposed_ms",
    "all_gather_exposed_ms",
    "reduce_scatter_exposed_ms",
    "units",
    "passes",
    "flavour",
    "late_gathers",
)
ADVICE = ("fsdp1", "fsdp2")


@dataclass(frozen=True)
class Thresholds:
    """``[thresholds]`` of rules/PD306.toml: names and types checked when the catalogue loads."""

    min_saving_pct: float


_FLAVOUR = {"fsdp1": "FullyShardedDataParallel", "fsdp2": "fully_shard (FSDP2)"}


def check(ctx: RankContext) -> Outcome:
    th = ctx.thresholds(Thresholds)
    comm = _sharded(ctx)
    if isinstance(comm, str):
        return skipped(comm)
    units = comm.per_unit()
    n = max(comm.n_steps, 1)
    late = comm.late_gathers()
    late_exposed = sum(c.exposed_us for _, c in late) / n
    metrics = {
        "all_gather_us": sum(float(u["all_gather_us"]) for u in units.values()),
        "all_gather_exposed_us": sum(float(u["all_gather_exposed_us"]) for u in units.values()),
        "reduce_scatter_exposed_us": sum(float(u["reduce_scatter_exposed_us"]) for u in units.values()),
        "late_gathers": len(late) / n,
        "late_exposed_us": late_exposed,
        "saving_us": 0.0,
        "saving_pct": 0.0,
    }
    if not late:
        return passed(**metrics)
    from perfdoctor.replay.transforms.sharding import prefetch_all_gathers

    replayed, _, method = ctx.replayed_saving(prefetch_all_gathers(ctx.replay(), ctx.tables, comm))
    saving = min(max(replayed, 0.0), late_exposed)
    metrics |= {"saving_us": saving, "saving_pct": pct(saving, ctx.base_step_us)}
    if saving <= 0:
        return passed(**metrics)
    ev = _evidence(ctx, comm, metrics, sorted({c.phase for _, c in late}))
    method += "; at most the late all-gathers' exposed time"
    return Outcome(
        metrics=metrics,
        hit=Hit(
            evidence=ev,
            estimate=Estimate(saving, method),
            advice=ctx.advice(comm.flavour),
            min_saving_pct=th.min_saving_pct,
        ),
    )


def _sharded(ctx: RankContext) -> ShardedComm | str:
    """The rank's FSDP collectives by unit over the analysed steps, or why there are none to judge."""
    if not ctx.has_trace:
        return "re-run from a rank summary: the FSDP labels are read where the rank was analysed"
    ws, we = ctx.windows()
    comm = sharded_comm(ctx.tables, ws, we)
    if comm is None:
        return (
            "DeepSpeed ZeRO records no per-module label torch.profiler keeps: its units cannot be told apart"
            if flavour(ctx.tables) == "zero"
            else "no FSDP labels (FSDP:: or FullyShardedDataParallel.): not an FSDP run"
        )
    if not comm.gathers():
        return "FSDP labels but no all-gather call in the analysed steps"
    return comm


def _evidence(ctx: RankContext, comm: ShardedComm, metrics: dict[str, float], passes: list[str]) -> Evidence:
    """The hit's evidence (ms per step): the late all-gathers' exposed time, and each unit's collectives in
    first-issue order; ``passes``: the passes (forward, backward) the late all-gathers are in."""
    units = comm.per_unit()
    return Evidence(
        values={
            "flavour": _FLAVOUR[comm.flavour],
            "units": len(units),
            "passes": " and ".join(passes),
            "late_exposed_ms": metrics["late_exposed_us"] / 1000,
            "all_gather_exposed_ms": metrics["all_gather_exposed_us"] / 1000,
            "reduce_scatter_exposed_ms": metrics["reduce_scatter_exposed_us"] / 1000,
            "late_gathers": metrics["late_gathers"],
            # per unit, in first-issue order (mean per step)
            "all_gather_ms_by_unit": {k: float(u["all_gather_us"]) / 1000 for k, u in units.items()},
            "all_gather_exposed_ms_by_unit": {k: float(u["all_gather_exposed_us"]) / 1000 for k, u in units.items()},
            "reduce_scatter_ms_by_unit": {k: float(u["reduce_scatter_us"]) / 1000 for k, u in units.items()},
            "reduce_scatter_exposed_ms_by_unit": {
                k: float(u["reduce_scatter_exposed_us"]) / 1000 for k, u in units.items()
            },
            "not_prefetched_by_unit": {k: float(u["not_prefetched"]) for k, u in units.items()},
        },
        steps=ctx.step_numbers,
    )
