"""Load trace files and run the per-rank analyses: steps, device breakdowns, roofline and MFU.

:func:`analyze_tables` is the analysis of one rank's trace (:func:`perfdoctor.jobs.task.analyse_rank`, the per-rank
stage of ``perfdoctor report``, runs it): a :class:`RankAnalysis`, held in an :class:`Analysis` that the checks read
and the report model is built from.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from perfdoctor.analysis.breakdown import DeviceBreakdown, device_ids, gpu_breakdown
from perfdoctor.analysis.cpu_breakdown import cpu_breakdown
from perfdoctor.analysis.missing import MissingReason
from perfdoctor.analysis.steps import Steps, find_steps
from perfdoctor.replay.attribution import Attribution, critical_path
from perfdoctor.replay.rank import RankReplay, replay_rank
from perfdoctor.trace.tables import TraceTables

if TYPE_CHECKING:
    from perfdoctor.analysis.collective_wait import CollectiveWait
    from perfdoctor.analysis.mfu import MfuResult
    from perfdoctor.analysis.roofline import RooflineResult
    from perfdoctor.capture.run_data import RunData
    from perfdoctor.checks.engine import CheckResults


@dataclass
class GemmDtype:
    """The math dtype of the GEMM/conv kernels weighted by their time: ``time_us`` µs per dtype."""

    dominant: str | None = None
    time_us: dict[str, float] = field(default_factory=dict)


@dataclass
class InputFile:
    """One trace file read: size on disk and of its JSON text (bytes), SHA-256 (None when not hashed), events."""

    path: str
    bytes: int
    sha256: str | None
    events: int
    uncompressed_bytes: int


@dataclass
class RankAnalysis:
    """Everything computed for one trace file (one rank).

    ``primary`` is the device breakdown the summary uses: the GPU with the most
    busy time, or the host breakdown for a CPU-only trace. ``mfu_missing`` says
    why ``mfu`` is None (set by :func:`perfdoctor.analysis.mfu.add_efficiency`).
    """

    tables: TraceTables
    steps: Steps
    devices: list[DeviceBreakdown]
    warnings: list[str] = field(default_factory=list)
    roofline: RooflineResult | None = None
    mfu: MfuResult | None = None
    mfu_missing: MissingReason | None = None
    gemm_dtype: GemmDtype = field(default_factory=GemmDtype)
    replay: RankReplay | None = None  # the step's dependency graph, replayed
    attribution: Attribution | None = None  # the replay's critical path, labelled: the one attribution

    @property
    def rank(self) -> int | None:
        return self.tables.rank

    @property
    def primary(self) -> DeviceBreakdown:
        return max(self.devices, key=lambda d: sum(s.busy_us for s in d.steps))


@dataclass
class Analysis:
    """All ranks of one report, plus what the later stages add: run data from ``perfdoctor profile``
    (``run``), why a run directory has no trace (``no_trace``), the check results (``checks``), and the
    collective matching of a multi-rank GPU job (``collective_wait``, or why not in ``collective_wait_note``)."""

    ranks: list[RankAnalysis]
    inputs: Sequence[InputFile | Mapping[str, object]]  # mappings: rank summaries made in another process
    warnings: list[str] = field(default_factory=list)
    run: RunData | Mapping[str, object] | None = None  # run.json alone in a rank summary's worker
    no_trace: str | None = None
    checks: CheckResults | None = None
    partial: bool = False
    collective_wait: CollectiveWait | None = None
    collective_wait_note: str = ""


def analyze_tables(tables: TraceTables, step_marker: str | None = None) -> RankAnalysis:
    """Steps and per-device breakdowns of one loaded trace."""
    steps = find_steps(tables, step_marker)
    replayed = replay_rank(tables, steps)
    attribution = critical_path(tables, replayed)
    devs = [gpu_breakdown(tables, steps, d, attribution) for d in device_ids(tables)]
    if not devs:
        devs = [cpu_breakdown(tables, steps)]
    warnings = list(tables.warnings) + list(steps.warnings)
    from perfdoctor.analysis.device_kinds import unread_device_categories

    unread = unread_device_categories(tables)
    if unread:  # an accelerator perfdoctor does not read: said by name, never analysed silently as CPU training
        warnings.append(
            f"{tables.path}: events in categories perfdoctor does not read: {', '.join(unread)} (device "
            "activity of an accelerator it does not analyse?); the breakdown and findings cover only the "
            + ("device activity it reads" if tables.has_device_activity else "host side, not a CPU-only run")
        )
    if devs and devs[0].kind == "gpu" and not tables.device_properties:
        from perfdoctor.analysis.arch import infer_from_tables

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
