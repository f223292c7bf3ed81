"""The typed report model: one msgspec Struct per section of the report JSON.

The JSON written by ``perfdoctor report`` (schema ``perfdoctor.report``, version
:data:`SCHEMA_VERSION`, documented in ``docs/report-schema.md``) is exactly these
types encoded by :func:`perfdoctor.model.codec.to_json`; reading it back with
:func:`perfdoctor.model.codec.from_json` gives an equal :class:`Report`.

The sections an analysis produces whole are that analysis's own Structs, imported here rather than defined twice:
the step breakdown (:mod:`perfdoctor.analysis.timing.breakdown`), the roofline
(:mod:`perfdoctor.analysis.work.roofline`), MFU
(:mod:`perfdoctor.analysis.work.mfu`), the run's steady state (:mod:`perfdoctor.analysis.steps.steady_state`), memory
(:mod:`perfdoctor.analysis.memory.run_memory`) and a multi-rank job's cross-rank ``job`` section
(:mod:`perfdoctor.crossrank.job_section`).

Conventions: every time is µs and ends in ``_us`` (``_s`` for seconds), bytes end in
``_bytes``; a field that is absent from the JSON when its analysis did not run has
the default :data:`msgspec.UNSET`; a value that is ``null`` in the JSON is ``None``
(non-finite floats are written as ``null``, so a float that can be NaN is
``float | None``).
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec
from msgspec import UNSET, UnsetType

from perfdoctor.analysis.memory.run_memory import AllocatorCounts as AllocatorCounts
from perfdoctor.analysis.memory.run_memory import Growth as Growth
from perfdoctor.analysis.memory.run_memory import RunMemory
from perfdoctor.analysis.missing import MissingReason
from perfdoctor.analysis.steps.steady_state import Phase as Phase
from perfdoctor.analysis.steps.steady_state import SteadyState as SteadyState
from perfdoctor.analysis.timing.breakdown import Communication as Communication
from perfdoctor.analysis.timing.breakdown import StepBreakdown as StepBreakdown
from perfdoctor.analysis.timing.breakdown import StepTotals as StepTotals
from perfdoctor.analysis.work.mfu import MfuResult as MfuResult
from perfdoctor.analysis.work.roofline import ChartPoint as ChartPoint
from perfdoctor.analysis.work.roofline import RooflineResult as RooflineResult
from perfdoctor.analysis.work.roofline import RooflineRow as RooflineRow
from perfdoctor.analysis.work.roofline import Roofs as Roofs
from perfdoctor.analysis.work.roofline import UncostedOp as UncostedOp
from perfdoctor.crossrank.job_section import BreakdownOutlier as BreakdownOutlier
from perfdoctor.crossrank.job_section import CollectivesFree as CollectivesFree
from perfdoctor.crossrank.job_section import FailedRank as FailedRank
from perfdoctor.crossrank.job_section import JobCollectiveWait as JobCollectiveWait
from perfdoctor.crossrank.job_section import JobSection as JobSection
from perfdoctor.crossrank.job_section import Straggler as Straggler
from perfdoctor.crossrank.job_section import WorstCollective as WorstCollective

SCHEMA = "perfdoctor.report"
SCHEMA_VERSION = 2  # v2: the fix plan (``plan``; each finding's headline, method, plan_position, step_after_us)

# Evidence of a finding: named numbers (units in the names), short lists and small maps. Typed as the JSON
# values a check may write; msgspec unions allow one list and one dict type per union, hence the nesting.
Scalar = bool | int | float | str | None
EventValue = bool | int | float | str | None | list[Scalar]
EvidenceItem = bool | int | float | str | None | dict[str, EventValue]
EvidenceValue = bool | int | float | str | None | list[EvidenceItem] | dict[str, EventValue]


class Section(msgspec.Struct, kw_only=True):
    """Base of every section: keyword construction, unknown JSON keys ignored (newer minor writers)."""


class Tool(Section, kw_only=True):
    """The program that wrote the report."""

    name: str
    version: str


class InputFile(Section, kw_only=True):
    """One trace file read: ``bytes`` on disk, ``uncompressed_bytes`` of JSON text, ``events`` decoded."""

    path: str
    bytes: int
    sha256: str | None
    events: int
    uncompressed_bytes: int


class DeviceProperties(Section, kw_only=True):
    """One entry of the trace's ``deviceProperties`` (every GPU of the node, used or not); ``identified``: what a
    generic ``name`` stands for, identified from the architecture and CU count, with the basis."""

    id: int | None
    name: str | None
    memory_bytes: int | None
    compute_capability: str | None
    sm_count: int | None
    # the product a generic name ("AMD Radeon Graphics") stands for, with the basis
    # (:func:`perfdoctor.analysis.work.hardware.identified_name`); absent when the name is specific
    identified: str | UnsetType = UNSET


class Distribution(Section, kw_only=True):
    """A series' summary (unit of the series: µs for step times); ``n`` values."""

    median: float
    mean: float
    min: float
    max: float
    p10: float
    p90: float
    std: float
    n: int


class DeviceSection(Section, kw_only=True):
    """One device's breakdown: ``device`` -1 and ``kind`` "cpu" for the host of a CPU-only trace.

    ``utilization`` = Σ busy ÷ Σ step time (fraction; None when the steps have no length)."""

    device: int
    kind: str
    utilization: float | None
    step_time_us: Distribution
    totals: StepTotals
    steps: list[StepBreakdown]
    notes: list[str]


class TopKernel(Section, kw_only=True):
    """GPU activity grouped by name inside the steps; ``share`` of all GPU activity time (fraction)."""

    name: str
    category: str
    count: int
    total_us: float
    mean_us: float
    share: float


class TopCpuOp(Section, kw_only=True):
    """Host ops of the stepping process grouped by name (inclusive µs)."""

    name: str
    category: str
    count: int
    total_us: float
    mean_us: float


class MemoryDevice(Section, kw_only=True):
    """Peak memory of one device from the ``[memory]`` events (bytes); capacity from deviceProperties."""

    device_type: str
    device: int
    label: str
    peak_allocated_bytes: int
    peak_reserved_bytes: int
    capacity_bytes: int | None
    peak_reserved_fraction: float | None
    n_events: int


class MemoryContributor(Section, kw_only=True):
    """Allocations live at a step's high-water mark, grouped by the innermost ``cpu_op`` enclosing each when it was
    made (bytes; ``n_allocations`` of them). ``op`` "(allocated before the trace)": bytes live at the peak that no
    recorded allocation explains (0 allocations); "(outside any op)": allocations made outside every op."""

    op: str
    bytes: int
    n_allocations: int


class MemoryStepPeak(Section, kw_only=True):
    """One step's high-water mark on one device (bytes, µs); see docs/report-schema.md "Memory over the step"."""

    step: int
    name: str
    peak_allocated_bytes: int
    peak_event_bytes: int
    reserved_bytes: int
    start_allocated_bytes: int
    allocated_in_step_bytes: int
    freed_in_step_bytes: int
    n_allocations: int
    peak_ts_us: float
    peak_offset_us: float
    phase: str
    op: str | None
    reserved_unallocated_bytes: int | None
    contributors: list[MemoryContributor]


class MemoryPhaseSpan(Section, kw_only=True):
    """A phase's span inside the charted step (µs from the step's host start)."""

    phase: str
    start_us: float
    end_us: float


class MemoryChart(Section, kw_only=True):
    """Allocated and reserved bytes over the step with the highest high-water mark (``step``, ``dur_us`` long):
    one point per ``[memory]`` event (the totals after it; the first point is the step's start), binned by time
    to at most 401 points, each bin holding its largest totals."""

    step: int
    dur_us: float
    offsets_us: list[float]
    allocated_bytes: list[int]
    reserved_bytes: list[int]
    phases: list[MemoryPhaseSpan]


class MemoryOverStep(Section, kw_only=True):
    """One device's memory over the analysed steps (:mod:`perfdoctor.analysis.memory.memory_steps`)."""

    device_type: str
    device: int
    label: str
    capacity_bytes: int | None
    peak_step: int
    steps: list[MemoryStepPeak]
    chart: MemoryChart


class MemorySection(Section, kw_only=True):
    """Memory peaks per device, allocator runtime calls by name, and why ``devices`` is empty (``note``);
    ``over_step``: each device's memory over the steps, absent without ``[memory]`` events carrying totals."""

    devices: list[MemoryDevice]
    allocator_calls: dict[str, int]
    note: str
    over_step: list[MemoryOverStep] | UnsetType = UNSET


class FixAllSection(Section, kw_only=True):
    """The rank's findings' what-ifs replayed together: the mean step before and after (µs). Before is the step the
    savings are taken from: the recorded mean of the analysed steps, or, with ``replay.unprofiled``, the unprofiled
    step of a ``perfdoctor profile`` run (:class:`UnprofiledSection`)."""

    codes: list[str]
    recorded_mean_step_us: float
    replayed_mean_step_us: float


class UnprofiledSection(Section, kw_only=True):
    """A ``perfdoctor profile`` run's savings stated for its unprofiled step (:mod:`perfdoctor.replay.unprofiled`):
    ``method`` ``"overhead"`` (the profiler's ``per_event_us`` removed at each of ``events_per_step`` recorded host
    events per step, ``per_event_us = (window_step_us − steady_step_us) / events_per_step``) or ``"scaled"``
    (replayed steps × ``steady_step_us / window_step_us``); ``step_us``: the unprofiled mean step the savings are
    taken from; ``text``: the sentence the report shows; ``host_op_window_us`` / ``host_op_unprofiled_us``: host op
    time per analysed step (CPU ops ∪ runtime calls) as recorded / with the overhead cut (their ratio is the host ops'
    inflation; device kernels are not inflated); ``fault_us``: the window's extra minor page faults' time cut per
    analysed step from the allocating ops that ran long (µs; then ``per_event_us = (window − steady − fault_us) /
    events``), from ``extra_faults_per_step`` more faults than an unprofiled step's at ``us_per_fault`` each (0 where
    not counted)."""

    method: str
    per_event_us: float
    events_per_step: float
    window_step_us: float
    steady_step_us: float
    step_us: float
    text: str
    host_op_window_us: float = 0.0
    host_op_unprofiled_us: float = 0.0
    fault_us: float = 0.0
    extra_faults_per_step: float = 0.0
    us_per_fault: float = 0.0


class ReplaySection(Section, kw_only=True):
    """:meth:`perfdoctor.replay.rank.RankReplay.to_dict`: recorded vs replayed mean step (µs), relative errors,
    graph size, the replay's assumptions, and why its savings are not trusted (``fallback``, None when they are)."""

    recorded_mean_step_us: float
    replayed_mean_step_us: float
    mean_error: float
    max_step_error: float
    n_activities: int
    n_blocking_calls: int
    assumptions: list[str]
    fallback: str | None
    fix_all: FixAllSection | None | UnsetType = UNSET
    unprofiled: UnprofiledSection | None | UnsetType = UNSET


class GemmDtype(Section, kw_only=True):
    """Math dtype of the GEMM/conv kernels weighted by time (µs per dtype); ``dominant`` None when none says."""

    dominant: str | None
    time_us: dict[str, float]


class RankSection(Section, kw_only=True):
    """One trace file (rank); see docs/report-schema.md "ranks"."""

    rank: int | None
    path: str
    device_properties: list[DeviceProperties]
    steps_source: str
    step_marker: str
    primary_device: int
    devices: list[DeviceSection]
    top_kernels: list[TopKernel]
    top_cpu_ops: list[TopCpuOp]
    memory: MemorySection
    profiler: dict[str, str]
    roofline: RooflineResult | None
    mfu: MfuResult | None
    mfu_missing: MissingReason | UnsetType = UNSET
    gemm_dtype: GemmDtype
    replay: ReplaySection | None
    warnings: list[str]

    @property
    def primary(self) -> DeviceSection:
        """The device the summary uses (the busiest GPU, or the host)."""
        return next(d for d in self.devices if d.device == self.primary_device)


class Summary(Section, kw_only=True):
    """Cross-rank spread of the median step time (µs, %); only ``n_ranks`` when no rank has steps."""

    n_ranks: int
    slowest_rank: int | UnsetType = UNSET
    fastest_rank: int | UnsetType = UNSET
    median_step_us: dict[int, float] | UnsetType = UNSET
    spread_pct: float | UnsetType = UNSET


class SourceSection(Section, kw_only=True):
    """The line of the user's code a finding's time starts at
    (:class:`perfdoctor.analysis.timing.source_lines.SourceLine`:
    ``location`` "file:line", ``exact`` False when it is the function's first line, the user's ``frames`` outwards,
    the library frames ``skipped``, the ``share_pct`` of the finding's time starting there, the ``nn.Module``)."""

    location: str
    function: str
    exact: bool
    calls: str = ""
    frames: list[str] = []
    skipped: int = 0
    share_pct: float = 100.0
    module: str = ""


class FindingSection(Section, kw_only=True):
    """One ranked finding (shape owned by :mod:`perfdoctor.findings`): saving µs per step and % of step."""

    code: str
    name: str
    category: str
    severity: str
    position: int | None
    rank: int | None
    message: str
    saving_us_per_step: float
    saving_pct_of_step: float
    saving_method: str
    # the saving once the fixes of the higher-ranked findings that fired are in (replayed together: µs, % of the
    # report's denominator, and their codes); None / [] when not replayed or none fired (perfdoctor.checks.after)
    saving_after_us_per_step: float | None = None
    saving_after_pct_of_step: float | None = None
    saving_after_codes: list[str] = []
    # the mean step (µs) the saving is taken from where the message names it ("takes it from A ms to B ms": the
    # rank's recorded step, or the step replayed with a higher-ranked fix it is measured on top of); None: the
    # report's denominator (perfdoctor.findings.Estimate.from_us)
    saving_from_us_per_step: float | None = None
    # the saving alone (µs) of a finding stated by its marginal saving (in the fix plan, or on top of it); None:
    # the stated saving is the saving alone
    saving_alone_us_per_step: float | None = None
    # 1-based place in the fix plan (perfdoctor.checks.after.plan); None off the plan
    plan_position: int | None = None
    # the mean step (µs) predicted once this fix and every fix above it in the plan are in; None off the plan
    step_after_us: float | None = None
    # why a finding with a replayed saving is off the plan ("no further saving once PD101, PD103 are fixed")
    plan_note: str = ""
    # the finding's three layers: headline (one sentence, ≤ 120 characters: the claim with its key number, the
    # rule's headline template), evidence (below: measured values), method (how the saving was computed, its
    # assumptions and sources)
    headline: str = ""
    method: str = ""
    evidence: dict[str, EvidenceValue]
    # the user's line where the time starts (read from the trace's Python stacks), or without stacks, what would
    # name it (perfdoctor.findings.Evidence.source / source_hint)
    source: SourceSection | None = None
    source_hint: str = ""
    steps: list[int]
    fix: str
    example_before: str
    example_after: str
    references: list[str]

    @property
    def replayed(self) -> bool:
        """True when the saving is the replay's point estimate, False for an upper bound
        (:func:`perfdoctor.text.is_replayed`)."""
        from perfdoctor.text import is_replayed

        return is_replayed(self.saving_method)

    @property
    def ranks(self) -> list[int]:
        """The trace ranks the rule fired on (``evidence["ranks"]``)."""
        ranks = self.evidence.get("ranks")
        return [r for r in ranks if isinstance(r, int)] if isinstance(ranks, list) else []

    @property
    def events(self) -> list[dict[str, EventValue]]:
        """The top events involved (``evidence["events"]``), each ``{name, ...numbers}``."""
        events = self.evidence.get("events")
        return [e for e in events if isinstance(e, dict)] if isinstance(events, list) else []


class PlanEntry(Section, kw_only=True):
    """One step of the fix plan: fix ``code``; it saves ``saving_us_per_step`` (µs, marginal: on top of the entries
    above it, replayed together; ``saving_pct_of_step`` % of the report's denominator) and leaves a predicted mean
    step of ``step_after_us`` (µs: the last entry's is every plan fix replayed together). ``n_ranks``: the ranks the
    finding fires on (a job's plan is its slowest rank's)."""

    code: str
    headline: str
    saving_us_per_step: float
    saving_pct_of_step: float
    step_after_us: float
    n_ranks: int


class Denominator(Section, kw_only=True):
    """The step time every finding's ``saving_pct_of_step`` is a share of (µs), what it is in words, and the trace
    rank it comes from (None when not one rank's): :mod:`perfdoctor.checks.denominator`."""

    value_us: float
    definition: str
    rank: int | None


class SkippedCheck(Section, kw_only=True):
    """A selected check that lacked the data it needs, and why."""

    code: str
    name: str
    reason: str


class RunSteps(Section, kw_only=True):
    """The whole run's step series of rank 0 (``perfdoctor profile``): s, counts; ``None`` = not measured."""

    step: list[float | None]
    duration_s: list[float | None]
    train_s: list[float | None]
    eval_s: list[float | None]
    checkpoint_s: list[float | None]
    tokens: list[float | None]
    samples: list[float | None]
    profiler_phase: list[str]


class Throughput(Section, kw_only=True):
    """A rate (``unit`` tokens/s or samples/s; None when its denominator is 0) with its parts in words."""

    value: float | None
    unit: str
    numerator: str
    denominator: str


class NonTraining(Section, kw_only=True):
    """Evaluation and checkpoint time found inside training steps (s), and in how many steps."""

    eval_s: float
    eval_steps: int
    checkpoint_s: float
    checkpoint_steps: int


class RunSnapshot(Section, kw_only=True):
    """A memory snapshot in the run directory (``perfdoctor profile --memory-snapshot``), one device's figures
    from :mod:`perfdoctor.snapshot` (bytes; made from its report by :func:`perfdoctor.snapshot.report.run_snapshots`):
    ``path`` relative to the run directory; ``top_site`` the call site holding most at the peak ("" when none is
    recorded); the full report: ``perfdoctor report <path>``."""

    path: str
    device: int
    peak_allocated_bytes: int
    peak_reserved_bytes: int
    reserved_at_snapshot_bytes: int
    fragmentation: float | None
    cuda_malloc_calls: int
    cache_flushes_then_malloc: int
    ooms: int
    top_site: str
    top_site_bytes: int


class RunMemorySection(RunMemory, frozen=True, kw_only=True):
    """The run's memory from ``steps.csv`` (:class:`~perfdoctor.analysis.memory.run_memory.RunMemory`: growth and
    peak of
    each recorded series, allocator counts per step) and its memory snapshots."""

    snapshots: list[RunSnapshot]


class RunSection(Section, kw_only=True):
    """A ``perfdoctor profile`` run directory: facts from ``run.json``, step series, steady state, throughput."""

    path: str
    partial: bool
    stop_reason: str | None
    steps_completed: int | None
    wall_s: float | None
    flops_per_step: int | float | None
    parameter_count: int | None
    tokens_per_step: int | float | None
    samples_per_step: int | float | None
    steps: RunSteps
    steady_state: SteadyState | None
    throughput: dict[str, Throughput]
    non_training: NonTraining
    device: str | None = None  # run.json environment: "CPU", the GPU's name, "GPU"; None when it does not say
    memory: RunMemorySection | None = None  # None: no memory column measured and no snapshot


class Report(Section, kw_only=True):
    """The whole report. Sections of analyses that did not run are UNSET (absent from the JSON)."""

    schema: str = SCHEMA
    schema_version: int = SCHEMA_VERSION
    tool: Tool
    inputs: list[InputFile]
    warnings: list[str]
    ranks: Sequence[RankSection]  # a list, or the encoded sections of a many-rank job (model.sections)
    summary: Summary
    findings: list[FindingSection] | UnsetType = UNSET
    plan: list[PlanEntry] | UnsetType = UNSET
    skipped_checks: list[SkippedCheck] | UnsetType = UNSET
    passed_checks: list[str] | UnsetType = UNSET
    findings_note: str | UnsetType = UNSET
    denominator: Denominator | None | UnsetType = UNSET
    verdict: str | UnsetType = UNSET
    run: RunSection | UnsetType = UNSET
    no_trace: str | UnsetType = UNSET
    partial: bool | UnsetType = UNSET
    job: JobSection | UnsetType = UNSET
