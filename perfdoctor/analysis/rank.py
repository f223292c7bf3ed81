"""Load trace files and run the per-rank analyses: steps, device breakdowns, roofline and MFU.

The types of one rank's analysis (:class:`RankAnalysis`, held in an :class:`Analysis` that the checks read and the
report model is built from) and its efficiency figures (:func:`add_efficiency`: roofline, GEMM dtype, MFU). The
per-rank stage that makes them, replay included, is :mod:`perfdoctor.jobs.rank_stage`.

:class:`RankResult` is what the rule engine reads of a rank wherever it was analysed: the full
:class:`RankAnalysis` where the rank's trace is (its worker), or the rank read back from its summary where the job's
ranks meet (:class:`perfdoctor.jobs.summary.SummarisedRank`). Both give the analysed steps and the unprofiled step;
``trace`` holds the tables and replay where they are, ``summary`` what the worker carried to the job.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

import numpy as np

from perfdoctor.analysis.memory.run_memory import AllocatorValues
from perfdoctor.analysis.missing import MissingReason
from perfdoctor.analysis.steps.steps import Steps
from perfdoctor.analysis.timing.breakdown import DeviceBreakdown
from perfdoctor.analysis.timing.kernel_dtype import GemmDtype
from perfdoctor.trace.tables import TraceTables

if TYPE_CHECKING:
    from perfdoctor.analysis.work.mfu import MfuResult, ModelFlops
    from perfdoctor.analysis.work.roofline import RooflineResult, Roofs
    from perfdoctor.capture.run_data import RunData
    from perfdoctor.checks.engine import CheckResults
    from perfdoctor.crossrank.collectives import CollectiveWait
    from perfdoctor.jobs.summary import RankSummary
    from perfdoctor.replay.attribution import Attribution
    from perfdoctor.replay.rank import RankReplay


# a rank's steps.csv CPU-time series (plain lists, NaN as None; ``profiler_phase`` as str) and its
# ``steady_start_step`` (:func:`perfdoctor.capture.run_data.rank_inputs`)
CpuSeries = dict[str, list[float | str | None] | int]


@dataclass
class InputFile:
    """One trace file read: size on disk and of its JSON text (bytes), SHA-256 (None when not hashed), events."""

    path: str
    bytes: int
    sha256: str | None
    events: int
    uncompressed_bytes: int


class StepFacts(Protocol):
    """What every stage reads of a rank's analysed steps, wherever it was analysed (:class:`Steps` in the worker):
    ``source`` ("ProfilerStep", "marker", "derived" or "whole-trace"), ``marker`` (the step regex), the cold steps
    (PD902) and their count."""

    @property
    def source(self) -> str: ...

    @property
    def marker(self) -> str: ...

    def cold_steps(self) -> list[int]: ...

    def __len__(self) -> int: ...


@dataclass(frozen=True)
class UnprofiledStep:
    """A ``perfdoctor profile`` run's unprofiled step the rank's savings are stated for (the report's
    ``replay.unprofiled``, :mod:`perfdoctor.replay.unprofiled`): ``step_us`` the unprofiled mean step (µs);
    ``method`` "overhead" (the profiler's ``per_event_us`` removed at ``events_per_step`` host events per step) or
    "scaled" (× ``steady_step_us / window_step_us``, µs); ``fault_us``: the window's extra page faults' time
    removed per step before the per-event overhead (µs; 0 where not counted)."""

    step_us: float
    method: str
    per_event_us: float
    events_per_step: float
    window_step_us: float
    steady_step_us: float
    fault_us: float = 0.0

    @classmethod
    def of(cls, d: Mapping[str, float | str] | None) -> UnprofiledStep | None:
        """From the report's ``replay.unprofiled`` mapping (:meth:`perfdoctor.replay.rank.RankReplay.unprofiled_dict`),
        or None without one."""
        if not d:
            return None
        return cls(
            step_us=float(d["step_us"]),
            method=str(d["method"]),
            per_event_us=float(d["per_event_us"]),
            events_per_step=float(d["events_per_step"]),
            window_step_us=float(d["window_step_us"]),
            steady_step_us=float(d["steady_step_us"]),
            fault_us=float(d.get("fault_us", 0.0) or 0.0),
        )


class RankResult(Protocol):
    """One analysed rank as the rule engine, the job-scope rules and the report's denominator read it.

    ``rank``: its trace rank (None: unknown); ``primary``: the device breakdown its steps come from (µs per step);
    ``steps``: its analysed steps (:class:`StepFacts`); ``warnings``: lines for the report; ``unprofiled``: a
    profile run's unprofiled step its savings are stated for, or None; ``requirement_reasons``: why it lacks what a
    rule ``requires``, as its worker judged (:mod:`perfdoctor.checks.requirements`; {} where the rank is analysed:
    judged from its tables); ``trace``: the whole analysis where the
    rank's tables are (its worker), None once it is read back from its summary; ``summary``: the summary its worker
    made (requirement reasons, joint-replay inputs, the replay's fix-all, its report section), None where the rank
    is analysed."""

    @property
    def rank(self) -> int | None: ...

    @property
    def primary(self) -> DeviceBreakdown: ...

    @property
    def steps(self) -> StepFacts: ...

    @property
    def warnings(self) -> list[str]: ...

    @property
    def unprofiled(self) -> UnprofiledStep | None: ...

    @property
    def requirement_reasons(self) -> Mapping[str, str]: ...

    @property
    def trace(self) -> RankAnalysis | None: ...

    @property
    def summary(self) -> RankSummary | None: ...


@dataclass
class RankAnalysis:
    """Everything computed for one trace file (one rank).

    ``primary`` is the device breakdown the summary uses: the GPU with the most
    busy time, or the host breakdown for a CPU-only trace. ``mfu_missing`` says
    why ``mfu`` is None (set by :func:`perfdoctor.analysis.rank.add_efficiency`).
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

    @property
    def unprofiled(self) -> UnprofiledStep | None:
        """The profile run's unprofiled step the replay states savings for (:attr:`RankReplay.unprofiled`), or None."""
        return UnprofiledStep.of(self.replay.unprofiled_dict()) if self.replay is not None else None

    @property
    def requirement_reasons(self) -> Mapping[str, str]:
        """{}: the requirements are judged from the tables here (:func:`perfdoctor.checks.requirements.missing`)."""
        return {}

    @property
    def trace(self) -> RankAnalysis:
        """Itself: the tables and replay are here."""
        return self

    @property
    def summary(self) -> None:
        """None: the rank is analysed here, not read back from a summary."""
        return None


R_co = TypeVar("R_co", bound=RankResult, covariant=True)


@dataclass
class Analysis(Generic[R_co]):
    """All ranks of one report (each a :class:`RankResult`: a rank's worker holds its :class:`RankAnalysis`, the
    reducer the ranks read back from their summaries), plus what the later stages add: run data from ``perfdoctor
    profile`` (``run``, where the job's ranks meet; ``run_facts``, its ``run.json`` alone, in a rank's worker), why a
    run directory has no trace (``no_trace``), the check results (``checks``), and the collective matching of a
    multi-rank GPU job (``collective_wait``, or why not in ``collective_wait_note``)."""

    ranks: Sequence[R_co]
    inputs: Sequence[InputFile]
    warnings: list[str] = field(default_factory=list)
    run: RunData | None = None
    run_facts: dict[str, Any] | None = None  # run.json alone (a rank's worker, which gets no RunData)
    no_trace: str | None = None
    checks: CheckResults | None = None
    partial: bool = False
    collective_wait: CollectiveWait | None = None
    collective_wait_note: str = ""
    # a profile run's allocator counts over the whole run, as evidence values (a rank summary's worker gets them
    # from SummaryOptions.run_allocator_by_rank: perfdoctor.analysis.memory.run_memory.run_allocator_values)
    run_allocator: AllocatorValues | None = None
    # a profile run's CPU-time series of this rank's steps (SummaryOptions.run_cpu_by_rank), for the core budget
    run_cpu: CpuSeries | None = None

    def run_json(self) -> dict[str, Any] | None:
        """The run facts (``run.json``) recorded by ``perfdoctor profile``: the run data's, else ``run_facts``;
        None for bare traces."""
        return self.run.run if self.run is not None else self.run_facts


def add_efficiency(
    ranks: list[RankAnalysis],
    model_flops: ModelFlops | None = None,
    measured_roofs: Roofs | None = None,
    prefer: str = "spec",
    step_time_s_by_rank: dict[int, float] | None = None,
) -> None:
    """Per-rank roofline, GEMM dtype and MFU (``rank.roofline``, ``.gemm_dtype``, ``.mfu`` or ``.mfu_missing``).

    Roofs are the matched GPU's datasheet figures (``prefer="spec"``) or ``measured_roofs`` (``perfdoctor
    calibrate``); a CPU-only trace only ever gets measured roofs, and only when they were measured on the
    machine that recorded it (the caller decides). MFU = model FLOP per step ÷ median step time of the
    rank's primary device ÷ the peak at the GEMMs' dtype (:func:`perfdoctor.analysis.work.mfu.trace_mfu`).
    ``step_time_s_by_rank`` (from
    a run directory: the median of each rank's steady-state steps outside the profiled window, so without
    profiler overhead) replaces the trace's median step time. A rank without MFU gets a warning
    ``"<path>: MFU not computed: <reason>"`` and the typed reason in ``mfu_missing``.
    """
    from perfdoctor.analysis.work.mfu import gemm_dtype, roofs_for_trace, trace_mfu
    from perfdoctor.analysis.work.roofline import roofline_table

    for r in ranks:
        roofs = roofs_for_trace(r.tables, measured_roofs, prefer)
        ops = r.tables.cpu_ops
        has_shapes = bool(len(ops)) and bool((ops["input_dims"] != None).any())  # noqa: E711 - object array
        r.roofline = roofline_table(r.tables, roofs) if has_shapes else None
        r.gemm_dtype = GemmDtype(*gemm_dtype(r.tables, None if r.steps.source == "whole-trace" else r.steps))
        if r.steps.source == "whole-trace" or not r.primary.steps:
            _missing(r, MissingReason(code="no_steps", message="no training steps in the trace"))
            continue
        step_s = float(np.median([s.dur_us for s in r.primary.steps])) / 1e6
        run_step_s = (step_time_s_by_rank or {}).get(r.rank) if r.rank is not None else None
        if run_step_s:
            step_s = run_step_s
        if step_s <= 0:  # step markers without duration (hostile input): no rate can be computed
            _missing(r, MissingReason(code="zero_step_time", message="the median step time is 0 µs"))
            continue
        busy = min(float(np.mean([s.busy_us for s in r.primary.steps])) / 1e6 / step_s, 1.0)
        out = trace_mfu(
            r.tables,
            roofs,
            step_s,
            len(r.steps),
            model_flops,
            roofline=r.roofline,
            busy_fraction=busy,
        )
        if isinstance(out, MissingReason):
            _missing(r, out)
            continue
        if run_step_s:
            out.note = (
                "step time = median of the run's steady-state steps outside the profiled window "
                "(no profiler overhead); " + out.note
            ).rstrip("; ")
        r.mfu = out


def _missing(r: RankAnalysis, why: MissingReason) -> None:
    r.mfu_missing = why
    r.warnings.append(f"{r.tables.path}: MFU not computed: {why.message}")
