"""PD503 memory-growth: memory held by the process climbs step after step over the steady state (a leak).

From the run data of ``perfdoctor profile`` (:mod:`perfdoctor.analysis.memory.run_memory`): the reserved and allocated
device memory (CUDA) and the process's RSS at each step's end, fitted over the longest stretch of steady-state,
unprofiled steps by Theil–Sen with a 95% confidence interval on the slope. Fires on the first series (reserved,
allocated, RSS) whose slope's lower bound is above zero and whose growth over the stretch is at least
``min_growth_mib`` and ``min_growth_pct`` of its level at the stretch's start (a heap that settles, a cache that
fills once, are not leaks). It states the growth, the peak, and how many more steps the series takes to reach its
limit (the device's memory; the host's available memory) at that rate. Where the profiled window's ``[memory]``
events are in the report (each rank's memory over the step), it adds what they say: bytes allocated and not freed
in each profiled step. No time saving: a leak costs the run, not the step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from perfdoctor.analysis.memory.run_memory import Growth
from perfdoctor.checks.context import JobContext, Outcome, passed, skipped
from perfdoctor.findings import Evidence, EvidenceValue, Hit

if TYPE_CHECKING:
    from perfdoctor.analysis.rank import RankResult
    from perfdoctor.model.report import MemoryOverStep

CODE = "PD503"
METRICS = {
    "growth_bytes_per_step": "Theil–Sen slope of the fastest-growing memory series over the steady steps, "
    "bytes per step",
    "growth_pct": "that series' growth over the fitted steps ÷ its level at their start, %",
}

# every field a hit gives the TOML message and headline (its evidence values and fields; checked at load)
MESSAGE_FIELDS = (
    "series_cap",
    "slope_mib_per_step",
    "slope_low_mib_per_step",
    "slope_high_mib_per_step",
    "n_steps",
    "first_step",
    "last_step",
    "growth_mib",
    "start_mib",
    "end_mib",
    "peak_mib",
    "peak_step",
    "limit_text",
    "headline_tail",
    "also",
    "trace_text",
)
MIB = float(1 << 20)


@dataclass(frozen=True)
class Thresholds:
    """``[thresholds]`` of rules/PD503.toml: names and types checked when the catalogue loads."""

    min_steps: int
    min_growth_mib: float
    min_growth_pct: float


def _grows(g: Growth, th: Thresholds) -> bool:
    return (
        g.slope_low_bytes_per_step > 0
        and g.growth_bytes >= th.min_growth_mib * MIB
        and g.growth_bytes >= th.min_growth_pct / 100 * max(g.start_bytes, 0.0)
    )


def check(job: JobContext) -> Outcome:
    th = job.thresholds(Thresholds)
    run = job.analysis.run
    mem = run.memory if run is not None else None
    if mem is None or not mem.series:
        return skipped("no memory series in the run data (steps.csv has no rss_bytes or CUDA memory column)")
    fitted = [g for g in mem.series if g.n_steps >= th.min_steps]
    if not fitted:
        longest = max(g.n_steps for g in mem.series)
        return skipped(f"only {longest} steady-state unprofiled steps in one stretch (needs {th.min_steps})")
    fastest = max(fitted, key=lambda g: g.slope_bytes_per_step)
    metrics = {
        "growth_bytes_per_step": fastest.slope_bytes_per_step,
        "growth_pct": 100 * fastest.growth_bytes / fastest.start_bytes if fastest.start_bytes > 0 else 0.0,
    }
    growing = [g for g in fitted if _grows(g, th)]
    if not growing:
        return passed(**metrics)
    g = growing[0]
    ev = Evidence(values=_values(g, growing[1:], _trace_text(job, g)), steps=list(range(g.first_step, g.last_step + 1)))
    return Outcome(metrics=metrics, hit=Hit(evidence=ev, estimate=None))


def _values(g: Growth, others: list[Growth], trace_text: str) -> dict[str, EvidenceValue]:
    """The evidence of series ``g`` (MiB; GiB for the limit) and the message's text fields."""
    limit_text, tail = "", ""
    if g.steps_to_limit is not None and g.limit_bytes is not None:
        limit_text = (
            f"; at that rate it reaches the {g.limit_bytes / 2**30:,.1f} GiB of {g.limit_source} in about "
            f"{g.steps_to_limit:,.0f} more steps"
        )
        tail = f": out of memory in ~{g.steps_to_limit:,.0f} steps"
    also = "".join(f"; {o.words} grows too, {o.slope_bytes_per_step / MIB:,.2f} MiB per step" for o in others)
    return {
        "series": g.words,
        "series_cap": g.words[0].upper() + g.words[1:],
        "slope_mib_per_step": g.slope_bytes_per_step / MIB,
        "slope_low_mib_per_step": g.slope_low_bytes_per_step / MIB,
        "slope_high_mib_per_step": g.slope_high_bytes_per_step / MIB,
        "n_steps": g.n_steps,
        "first_step": g.first_step,
        "last_step": g.last_step,
        "growth_mib": g.growth_bytes / MIB,
        "start_mib": g.start_bytes / MIB,
        "end_mib": g.end_bytes / MIB,
        "peak_mib": g.peak_bytes / MIB,
        "peak_step": g.peak_step,
        "limit_gib": g.limit_bytes / 2**30 if g.limit_bytes is not None else "unknown (not in run.json)",
        "steps_to_limit": g.steps_to_limit if g.steps_to_limit is not None else "unknown",
        "limit_text": limit_text,
        "headline_tail": tail,
        "also": also,
        "trace_text": trace_text,
    }


def _trace_text(job: JobContext, g: Growth) -> str:
    """What the profiled window's ``[memory]`` events say for the series' device (CPU for the RSS, the GPU for the
    CUDA series): bytes allocated and not freed in each profiled step, the mean over them, from the first rank's
    memory over the step (:mod:`perfdoctor.analysis.memory.memory_steps`); "" when the report has none."""
    kind = "CPU" if g.series == "rss_bytes" else "GPU"
    for ctx in job.ranks[:1]:
        for dev in _over_step(ctx.rank):
            if dev.device_type != kind or not dev.steps:
                continue
            net = [s.allocated_in_step_bytes - s.freed_in_step_bytes for s in dev.steps]
            mean = sum(net) / len(net)
            return (
                f"; the trace's [memory] events agree: in the profiled steps {dev.steps[0].step}–"
                f"{dev.steps[-1].step} on {dev.label}, {mean / MIB:,.2f} MiB per step is allocated and not freed "
                f"(mean of allocated − freed over {len(net)} steps; {sum(n > 0 for n in net)} of them hold more)"
            )
    return ""


def _over_step(rank: RankResult) -> list[MemoryOverStep]:
    """A rank's memory over the step, from the report section of its summary ([] without one)."""
    section = rank.summary.rank_section() if rank.summary is not None else None
    over = section.memory.over_step if section is not None else None
    return list(over) if isinstance(over, list) else []
