"""Load trace files and run the per-rank analyses: steps, device breakdowns, roofline and MFU.

:func:`analyze_paths` is the analysis stage of ``perfdoctor report``: one :class:`RankAnalysis` per trace
file (rank), gathered in an :class:`Analysis` that the checks read and the report model is built from.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from perfdoctor.analysis.breakdown import DeviceBreakdown, device_ids, gpu_breakdown
from perfdoctor.analysis.cpu_breakdown import cpu_breakdown
from perfdoctor.analysis.missing import MissingReason
from perfdoctor.analysis.steps import Steps, find_steps
from perfdoctor.errors import PerfDoctorError
from perfdoctor.replay.attribution import Attribution, critical_path
from perfdoctor.replay.rank import RankReplay, replay_rank
from perfdoctor.trace import load_trace, trace_files_in
from perfdoctor.trace.tables import TraceTables

if TYPE_CHECKING:
    from perfdoctor.analysis.collective_wait import CollectiveWait
    from perfdoctor.analysis.mfu import MfuResult
    from perfdoctor.analysis.roofline import RooflineResult, Roofs
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
    # a profile run's allocator counts over the whole run, as evidence values (a rank summary's worker gets them
    # from SummaryOptions.run_allocator_by_rank: perfdoctor.analysis.run_memory.run_allocator_values)
    run_allocator: dict[str, Any] | None = None


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


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def analyze_paths(
    paths: list[str],
    step_marker: str | None = None,
    on_progress: Callable[[int], None] | None = None,
    hash_inputs: bool = True,
    model_flops_per_step: float | None = None,
    flops_source: str = "flop_counter",
    measured_roofs: Roofs | None = None,
    step_time_s_by_rank: dict[int, float] | None = None,
) -> Analysis:
    """Load and analyse trace files and directories (one trace per rank).

    Runs steps, breakdowns and :func:`perfdoctor.analysis.mfu.add_efficiency` (roofline, MFU); see there for
    ``model_flops_per_step`` / ``measured_roofs`` / ``step_time_s_by_rank``.

    Raises:
        TraceFormatError: a path is missing or not a trace.
        PerfDoctorError: two traces of the same rank (two runs mixed in one report).
    """
    from perfdoctor.analysis.mfu import add_efficiency

    files: list[str] = []
    for p in paths:
        files.extend(trace_files_in(p))
    ranks: list[RankAnalysis] = []
    inputs: list[InputFile] = []
    seen: dict[int, str] = {}
    for i, f in enumerate(files):
        tables = load_trace(f, on_progress)
        if tables.rank is None:
            tables.rank = i
        if tables.rank in seen:
            raise PerfDoctorError(
                f"{f}: rank {tables.rank} is also the rank of {seen[tables.rank]}: one report covers one job, one "
                "trace per rank; to compare two runs, report each file separately"
            )
        seen[tables.rank] = f
        ranks.append(analyze_tables(tables, step_marker))
        inputs.append(
            InputFile(
                f, os.path.getsize(f), _sha256(f) if hash_inputs else None, tables.n_events, tables.uncompressed_bytes
            )
        )
    ranks.sort(key=lambda r: r.rank if r.rank is not None else 0)
    analysis = Analysis(ranks=ranks, inputs=inputs)
    add_efficiency(ranks, model_flops_per_step, flops_source, measured_roofs, step_time_s_by_rank=step_time_s_by_rank)
    analysis.warnings = [w for r in ranks for w in r.warnings]
    gpu = [r for r in ranks if r.primary.kind == "gpu" and r.primary.steps]
    if len(gpu) > 1:
        from perfdoctor.analysis import collective_wait
        from perfdoctor.analysis.warmup import job_cold_steps

        steps = {int(r.rank or 0): [int(s.step) for s in r.primary.steps] for r in gpu}
        cold = job_cold_steps(steps, {int(r.rank or 0): r.steps.cold_steps() for r in gpu})[0]
        analysis.collective_wait, analysis.collective_wait_note = collective_wait.compute(
            [collective_wait.timeline(r) for r in gpu], cold_steps=cold
        )
    return analysis
