"""The per-rank stage of ``perfdoctor report``: one rank's loaded trace -> its steps, dependency graph replayed, the
replay's critical-path attribution, device breakdowns, roofline and MFU (:func:`analyse_rank`), from which the rank's
checks and summary are made (:mod:`perfdoctor.jobs.task`, in this process or a worker)."""

from __future__ import annotations

from perfdoctor.analysis.rank import Analysis, InputFile, RankAnalysis, add_efficiency
from perfdoctor.analysis.steps.steps import find_steps
from perfdoctor.analysis.timing.breakdown import device_ids, gpu_breakdown
from perfdoctor.analysis.timing.cpu_breakdown import cpu_breakdown
from perfdoctor.jobs.summary import SummaryOptions
from perfdoctor.replay.attribution import critical_path
from perfdoctor.replay.rank import replay_rank
from perfdoctor.trace.tables import TraceTables


def analyze_tables(tables: TraceTables, step_marker: str | None = None) -> RankAnalysis:
    """One loaded trace's steps (``step_marker``: a regular expression naming the step annotation), its replay
    and critical path, and a breakdown per device (the host's for a CPU-only trace), with the warnings a reader
    needs (accelerators not read, the architecture guessed, the replay's fallback, a truncated trace)."""
    steps = find_steps(tables, step_marker)
    replayed = replay_rank(tables, steps)
    attribution = critical_path(tables, replayed)
    devs = [gpu_breakdown(tables, steps, d, attribution) for d in device_ids(tables)]
    if not devs:
        devs = [cpu_breakdown(tables, steps)]
    warnings = list(tables.warnings) + list(steps.warnings)
    from perfdoctor.analysis.timing.device_kinds import unread_device_categories

    unread = unread_device_categories(tables)
    if unread:  # an accelerator perfdoctor does not read: said by name, never analysed silently as CPU training
        warnings.append(
            f"{tables.path}: events in categories perfdoctor does not read: {', '.join(unread)} (device "
            "activity of an accelerator it does not analyse?); the breakdown and findings cover only the "
            + ("device activity it reads" if tables.has_device_activity else "host side, not a CPU-only run")
        )
    if devs and devs[0].kind == "gpu" and not tables.device_properties:
        from perfdoctor.analysis.timing.arch import infer_from_tables

        guess = infer_from_tables(tables)
        if guess is not None:
            warnings.append(
                f"{tables.path}: no deviceProperties; GPU architecture inferred from kernel names: "
                f"{guess.family} (compute capability {guess.compute_capability[0]}."
                f"{guess.compute_capability[1]}, from {guess.evidence!r}); {guess.assumption}"
            )
    if replayed.fallback:
        warnings.append(f"{tables.path}: replay: {replayed.fallback}; savings are upper bounds from interval rules")
    if tables.truncated and steps.source == "whole-trace" and tables.has_device_activity:
        # no step windows to drop: device activity the cut lost cannot be told from idle time
        warnings.append(
            f"{tables.path}: truncated and without step markers: GPU activity written after the cut "
            "is missing and counts as idle, so idle is an upper bound and busy a lower bound"
        )
    return RankAnalysis(
        tables=tables, steps=steps, devices=devs, warnings=warnings, replay=replayed, attribution=attribution
    )


def analyse_rank(
    tables: TraceTables,
    info: InputFile,
    opts: SummaryOptions,
    note: str | None = None,
) -> Analysis[RankAnalysis]:
    """The per-rank stage of ``perfdoctor report``: one rank's loaded trace ``tables`` (its ``rank`` set) ->
    its :class:`perfdoctor.analysis.rank.Analysis` of one :class:`~perfdoctor.analysis.rank.RankAnalysis` (steps,
    breakdown, replay with a profile run's unprofiled step and the peers' bounds of ``opts``, roofline and MFU).
    ``info``: the trace's :class:`~perfdoctor.analysis.rank.InputFile`; ``note``: a warning the rank carries (a
    split merged file). The rank's checks and summary are made from it (:func:`perfdoctor.jobs.summary.rank_summary`).
    """
    from perfdoctor.crossrank.bounds import with_peer_ends
    from perfdoctor.replay.unprofiled import page_faults, unprofiled

    ra = analyze_tables(tables, opts.step_marker)
    rank = int(tables.rank or 0)
    steady_s = opts.step_time_s_by_rank.get(rank)
    if opts.run_json is not None and steady_s and ra.replay is not None:
        faults = page_faults(opts.run_cpu_by_rank.get(rank), opts.run_json, rank)
        # the step the user runs
        ra.replay.unprofiled = unprofiled(ra.replay, tables, steady_s * 1e6, faults, ra.steps.numbers)
    bounds = opts.peer_ends.get(info.path)
    if bounds and ra.replay is not None and ra.replay.peers is not None:
        ra.replay.peers = with_peer_ends(ra.replay.peers, ra.replay.graph.act_ts_us, *bounds)
    analysis = Analysis(ranks=[ra], inputs=[info])
    analysis.run_facts = opts.run_json
    analysis.run_allocator = opts.run_allocator_by_rank.get(int(tables.rank or 0))
    analysis.run_cpu = opts.run_cpu_by_rank.get(int(tables.rank or 0))
    add_efficiency(
        [ra],
        opts.model_flops,
        opts.measured_roofs,
        step_time_s_by_rank=opts.step_time_s_by_rank,
    )
    if note:
        ra.warnings.append(note)
    return analysis
