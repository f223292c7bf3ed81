"""The comparison of two reports as typed data (schema ``perfdoctor.diff``, documented in docs/diff-schema.md).

Every renderer (terminal, Markdown, HTML, JSON) reads these Structs; nothing
below computes. Units: times in µs per step (names end in ``_us``), changes in %
(``_pct``, after vs before, negative = faster), bytes in ``_bytes``, fractions 0–1.
"""

from __future__ import annotations

import msgspec

from perfdoctor.errors import PerfDoctorError

SCHEMA = "perfdoctor.diff"
SCHEMA_VERSION = 4  # v4: the verdict per sample / per token when the work per step differs (work); v3: several
# runs per side (runs, run_cv_pct, measured run-to-run noise); v2: one prediction row
VERDICTS = ("faster", "slower", "no-change", "inconclusive")


class Pair(msgspec.Struct, frozen=True):
    """One quantity on both sides (``None`` where a side does not have it)."""

    before: float | None
    after: float | None


class RunInfo(msgspec.Struct, frozen=True):
    """One run of a side: its path and kind, the steps compared from it and their mean (µs); ``steady_start_step``
    the first step of its steady state when its steps are a run's step series (None for trace steps);
    ``partial``: why a run that did not complete stopped (run.json's ``stop_reason``, e.g. "script raised
    RuntimeError: boom at step 30", "interrupted (Ctrl-C)"), None for a complete run or a trace;
    ``steps_completed``: the training steps it ran (run.json)."""

    path: str
    kind: str
    steps: int
    mean_step_us: float
    steady_start_step: int | None = None
    partial: str | None = None
    steps_completed: int | None = None


class SideInfo(msgspec.Struct, frozen=True):
    """What one side was: ``kind`` is ``"trace"``, ``"run"`` (perfdoctor profile run dir), ``"report"`` (a
    report JSON) or ``"mixed"`` (runs of several kinds); ``device``: the primary device name (``"CPU"`` for
    host-only traces); ``path``: the path(s) as given; ``runs``: one row per run (one for a single run). Ranks,
    device and parameter count are the first run's."""

    path: str
    kind: str
    n_ranks: int
    device: str
    parameter_count: int | None = None
    runs: list[RunInfo] = msgspec.field(default_factory=list)


class Statistics(msgspec.Struct, frozen=True):
    """How the verdict was reached: ``method`` in words, the step-time source, steps and effective steps per side
    (autocorrelation-corrected), degrees of freedom, the noise threshold, the steps still needed, and the
    run-to-run noise σ_run (%) the interval includes with where that figure comes from.

    Several runs on a side (schema v3): ``runs`` per side, ``run_cv_pct`` the spread of each side's run means
    (standard deviation ÷ mean × 100; None with one run), ``run_noise_measured`` True when the interval comes
    from the runs' means (σ_run then is √(cv_before² + cv_after²), measured, not assumed), ``runs_needed`` the
    runs per side that would decide an inconclusive verdict (None when decided or when no count can)."""

    method: str
    source: str
    steps: Pair
    effective_steps: Pair
    std_us: Pair
    dof: float | None
    noise_threshold_pct: float
    more_steps_needed: int | None
    reason: str
    run_noise_pct: float = 0.0
    run_noise_source: str = ""
    runs: Pair = Pair(1, 1)
    run_cv_pct: Pair = Pair(None, None)
    run_noise_measured: bool = False
    runs_needed: int | None = None


class Throughput(msgspec.Struct, frozen=True):
    """A rate of a run directory (``key`` e.g. ``train_tokens_per_s``) before and after."""

    key: str
    unit: str
    before: float | None
    after: float | None
    change_pct: float | None


class WorkSide(msgspec.Struct, frozen=True):
    """The work one step of a side does: ``samples`` and ``tokens`` per step of one rank (None: unknown), the
    ranks doing it (``ranks``; the job's work per step is their sum, ``job_samples`` / ``job_tokens``), ``origin``
    (``run.json``, ``trace``, ``flag`` or ``unknown``) and ``source``: where the figures come from, in words."""

    samples: float | None
    tokens: float | None
    ranks: int
    job_samples: float | None
    job_tokens: float | None
    origin: str
    source: str


class RateRow(msgspec.Struct, frozen=True):
    """A throughput (``unit`` ``samples/s`` or ``tokens/s``) before and after: ``rank`` None for the job (its work
    per step ÷ the verdict's mean step), else one rank's work per step ÷ its mean profiled step; ``change_pct``
    after ÷ before − 1 (×100, positive = more work per second)."""

    rank: int | None
    unit: str
    before: float | None
    after: float | None
    change_pct: float | None


class WorkComparison(msgspec.Struct, frozen=True):
    """Per step or per unit of work (schema v4; :mod:`perfdoctor.diff.work`).

    ``basis``: ``per-step`` (the work per step is the same on both sides, or unknown and the steps alike: the
    verdict is the step time's), ``per-token`` / ``per-sample`` (the job's work per step differs: the verdict is
    the time per token / sample, i.e. the throughput's) or ``cannot-tell`` (the work per step is unknown on a side
    and the two sides' ops were called with different input shapes: the verdict is ``inconclusive``);
    ``reason``: why, in words. ``unit``: ``token`` / ``sample`` (None per step). ``mean_us_per_unit``: the
    verdict's mean step ÷ the job's work per step (µs per token or sample); ``change_pct`` / ``ci95_pct``: its
    change and 95% interval (the step interval's log half-width, centred on the per-unit log ratio: the work per
    step is a count, exact); ``throughput_change_pct`` / ``throughput_ci95_pct``: the same as throughput
    (``100 (1 ÷ (1 + c) − 1)``, positive = faster); ``step_verdict``: the per-step verdict, shown beside;
    ``rates``: samples/s and tokens/s of the job and of each rank both sides have; ``shapes_differ``: op names
    whose first call's ``Input Dims`` differ between the sides' first traces (at most 5, with both shapes);
    ``verdict_reason``: why the per-unit verdict (empty per step: ``statistics.reason`` says it)."""

    basis: str
    reason: str
    before: WorkSide
    after: WorkSide
    step_verdict: str
    unit: str | None = None
    mean_us_per_unit: Pair = Pair(None, None)
    change_pct: float | None = None
    ci95_pct: list[float] | None = None
    throughput_change_pct: float | None = None
    throughput_ci95_pct: list[float] | None = None
    rates: list[RateRow] = msgspec.field(default_factory=list)
    shapes_differ: list[str] = msgspec.field(default_factory=list)
    verdict_reason: str = ""


class CategoryRow(msgspec.Struct, frozen=True):
    """Time per step in one category (µs). ``group``: ``"busy"`` or ``"idle"`` (these add up to the step) or
    ``"detail"`` (a breakdown of a busy row, not in the sum)."""

    key: str
    label: str
    group: str
    before_us: float
    after_us: float
    delta_us: float


class Mover(msgspec.Struct, frozen=True):
    """A kernel or CPU op whose time per step changed. ``match``: ``exact``, ``normalised`` (``how`` says what
    differed: template arguments, architecture prefix, dtype), ``appeared``, ``disappeared`` or ``unlisted``
    (absent from the other side's top list, which is truncated: its time there is below ``bound_us``)."""

    name_before: str | None
    name_after: str | None
    key: str
    category: str
    before_us: float | None
    after_us: float | None
    delta_us: float | None
    match: str
    how: str
    bound_us: float | None = None


class FindingDelta(msgspec.Struct, frozen=True):
    """A rule's finding on both sides. ``status``: ``resolved``, ``new``, ``persisting`` or ``not-checked``
    (it fired on one side and the other side skipped the check, ``note`` says why). Several runs on a side: the
    finding is on a side when it fired in any of its runs, its saving is the mean over the runs that ran the rule
    (0 in a run where it passed), ``runs_fired`` counts the runs it fired in
    (:mod:`perfdoctor.diff.findings`)."""

    code: str
    name: str
    status: str
    saving_before_us: float | None
    saving_after_us: float | None
    severity_before: str | None
    severity_after: str | None
    note: str = ""
    runs_fired: Pair = Pair(None, None)


class PredictedPart(msgspec.Struct, frozen=True):
    """One resolved BEFORE finding's own predicted saving (µs/step): ``predicted_kind`` ``replayed`` (its rule
    replayed the step's dependency graph with the fix applied) or ``upper-bound`` (an interval rule's estimate)."""

    code: str
    name: str
    predicted_us: float
    predicted_kind: str


class Prediction(msgspec.Struct, frozen=True):
    """Predicted vs measured for the BEFORE findings resolved in AFTER, scored together (schema v2).

    The measured change is the whole step's, so it can check only the fixes that were applied: the findings that
    were resolved. ``codes``/``parts``: those findings (largest predicted saving first); ``predicted_us``: their
    saving together (µs/step); ``predicted_kind``: ``replayed`` / ``upper-bound`` (one finding: its own saving),
    ``replayed-together`` (BEFORE's replay of exactly these findings' fixes applied together,
    ``ranks[0].replay.fix_all``) or ``sum`` (the parts added up: time two fixes both remove is counted twice);
    ``measured_us``: mean step before − after (µs, positive = faster), shared by every finding in ``codes``
    (``shared``) and by any other change between the runs; ``measured_ci95_us``: its 95% interval;
    ``within_ci95``: the prediction lies inside that interval (None without one); ``error_us`` = measured −
    predicted; ``error_pct`` = error ÷ predicted × 100.
    """

    codes: list[str]
    parts: list[PredictedPart]
    predicted_us: float
    predicted_kind: str
    measured_us: float
    measured_ci95_us: list[float] | None
    within_ci95: bool | None
    error_us: float
    error_pct: float
    shared: bool


class Shrunk(msgspec.Struct, frozen=True):
    """A finding on both sides whose saving shrank (µs/step): "persisting, smaller". Its fix may have been applied
    in part, or other changes shrank it (e.g. host overhead hidden behind a DataLoader wait that went away); the
    diff cannot tell which, so no error is scored against it."""

    code: str
    name: str
    saving_before_us: float
    saving_after_us: float
    shrink_us: float


class RankEfficiency(msgspec.Struct, frozen=True):
    """Per rank (``rank`` None = job level: mean utilization and MFU over ranks, largest memory peak)."""

    rank: int | None
    utilization: Pair
    mfu: Pair
    memory_peak_bytes: Pair
    median_step_us: Pair


class ScalingPart(msgspec.Struct, frozen=True):
    """One bar of the scaling waterfall: ``key`` (``communication``, ``waiting``, ``data_loading``, ``host``,
    ``compute``), its label, the smaller run's µs per step scaled to the larger run's work per rank
    (``smaller_us``), the larger run's (``larger_us``) and the time lost to it per step (``lost_us`` = larger −
    smaller; negative: gained)."""

    key: str
    label: str
    smaller_us: float
    larger_us: float
    lost_us: float


class Scaling(msgspec.Struct, frozen=True):
    """Scaling efficiency of two sides with different rank counts (:mod:`perfdoctor.diff.scaling`).

    ``ranks``: (BEFORE, AFTER); ``smaller``: ``before`` or ``after``, the side with fewer ranks; ``unit``:
    ``token``, ``sample`` or ``step`` (work per step unknown: each rank assumed to do the same work per step on
    both sides); ``work_per_rank``: units per step of one rank; ``throughput_per_rank`` / ``job_throughput``:
    units per second (per rank: work per step of one rank ÷ the job's mean step); ``speedup`` and ``ideal_speedup``
    (the rank ratio) of the job's throughput, larger ÷ smaller; ``efficiency_pct``: throughput per rank, larger ÷
    smaller × 100; ``ideal_step_us``: the smaller run's step scaled to the larger run's work per rank (the larger
    run's step at 100%); ``lost_us``: the larger run's step − that ideal; ``parts``: where it went (they add up to
    ``lost_us``); ``method``: how, in words."""

    ranks: Pair
    smaller: str
    unit: str
    work_per_rank: Pair
    throughput_per_rank: Pair
    job_throughput: Pair
    speedup: float
    ideal_speedup: float
    efficiency_pct: float
    step_us: Pair
    ideal_step_us: float
    lost_us: float
    parts: list[ScalingPart]
    method: str


class Straggler(msgspec.Struct, frozen=True):
    """Rank with the longest median step and the spread (slowest − fastest) ÷ fastest × 100, both sides."""

    slowest_rank_before: int | None
    slowest_rank_after: int | None
    spread_pct: Pair


class Diff(msgspec.Struct, frozen=True):
    """The whole comparison (schema ``perfdoctor.diff`` v4). ``verdict``/``headline`` are per step or per unit of
    work (``work.basis``); ``mean_step_us``, ``change_pct``, ``ci95_pct`` and ``statistics`` are the step's."""

    schema: str
    schema_version: int
    tool: dict[str, str]
    before: SideInfo
    after: SideInfo
    verdict: str
    headline: str
    mean_step_us: Pair
    change_pct: float | None
    ci95_pct: list[float] | None
    statistics: Statistics
    throughput: list[Throughput]
    categories: list[CategoryRow]
    category_step_us: Pair
    kernels: list[Mover]
    cpu_ops: list[Mover]
    findings: list[FindingDelta]
    predicted_vs_measured: Prediction | None
    shrunk: list[Shrunk]
    predicted_note: str
    efficiency: list[RankEfficiency]
    straggler: Straggler | None
    warnings: list[str]
    work: WorkComparison
    category_step_source: str = ""
    scaling: Scaling | None = None

    def to_json(self) -> bytes:
        """Stable bytes: sorted keys, 2-space indent, NaN/inf as null, trailing newline."""
        raw = msgspec.json.encode(self, order="sorted")
        return msgspec.json.format(raw, indent=2) + b"\n"

    @classmethod
    def from_json(cls, data: bytes, path: str = "<diff>") -> Diff:
        """Decode a diff JSON written by :meth:`to_json`.

        Raises:
            PerfDoctorError: not a ``perfdoctor.diff`` document of this version, or malformed.
        """
        try:
            head = msgspec.json.decode(data)
        except msgspec.DecodeError as exc:
            raise PerfDoctorError(f"{path}: not valid JSON ({exc})") from None
        if not isinstance(head, dict) or head.get("schema") != SCHEMA:
            raise PerfDoctorError(f"{path}: not a perfdoctor diff (schema {SCHEMA!r})")
        if head.get("schema_version") != SCHEMA_VERSION:
            raise PerfDoctorError(
                f"{path}: diff schema version {head.get('schema_version')!r}; this perfdoctor "
                f"reads version {SCHEMA_VERSION}"
            )
        try:
            return msgspec.json.decode(data, type=cls)
        except msgspec.ValidationError as exc:
            raise PerfDoctorError(f"{path}: malformed perfdoctor diff ({exc})") from None
