"""A run directory read back, once, as one plain value: ``run.json`` (raw and typed), each rank's steps as numpy
arrays with their steady state, the trace paths, the run's memory and its memory snapshots.

The caller that meets a run directory (``perfdoctor report``, ``perfdoctor profile``) loads it with
:func:`load_run_dir` and hands the :class:`RunData` down: the pipeline passes each rank's share to its worker
(:func:`rank_inputs`), the report's ``run`` section is built from it (:mod:`perfdoctor.capture.run_section`), and a
run without a trace says why (:mod:`perfdoctor.capture.no_trace`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias

import msgspec

from perfdoctor.analysis.memory.run_memory import AllocatorValues, RunMemory, run_allocator_values, run_memory
from perfdoctor.analysis.steps.steady_state import SteadyState
from perfdoctor.capture.rundir import SNAPSHOT_STEM, steps_csv_rank
from perfdoctor.capture.steps_csv import StepColumns, empty_steps, read_steps_csv, steady_state_of
from perfdoctor.errors import PerfDoctorError
from perfdoctor.trace.json_value import JsonObject, JsonValue

if TYPE_CHECKING:
    from perfdoctor.analysis.work.roofline import Roofs
    from perfdoctor.snapshot.report import SnapshotReport


class RunEnvironment(msgspec.Struct, kw_only=True):
    """``run.json["environment"]``: the recording machine as perfdoctor reads it (other keys are kept in
    :attr:`RunData.run` only)."""

    hostname: str | None = None
    cuda_available: bool | None = None
    device_name: str | None = None
    torch_threads: int | None = None
    dataloader_workers: int | None = None


class RunCpu(msgspec.Struct, kw_only=True):
    """``run.json["cpu"]`` (:func:`perfdoctor.capture.environment.cpu_info`): model, the flags of interest,
    logical CPUs, ``ONEDNN_MAX_CPU_ISA``, whether it has bf16 matrix units."""

    model: str | None = None
    flags: list[str] | None = None
    logical_cpus: int | None = None
    onednn_max_cpu_isa: str | None = None
    bf16_matrix_units: bool | None = None


class ProfiledWindow(msgspec.Struct, kw_only=True):
    """One profiled window of a rank: steps ``first_step``..``last_step``, its trace file (None: not written)."""

    index: int | None = None
    first_step: int | None = None
    last_step: int | None = None
    complete: bool | None = None
    path: str | None = None


class RunMemoryFacts(msgspec.Struct, kw_only=True):
    """``run.json["memory"]`` (:func:`perfdoctor.capture.environment.memory_info`), read at the run's start (bytes):
    the host's total and available memory (``/proc/meminfo``; ``host_limit`` "cgroup" when the container's memory
    limit left less), the process's RSS, and the first CUDA device's ``total_memory`` (None on CPU)."""

    host_total_bytes: int | None = None
    host_available_bytes: int | None = None
    host_limit: str | None = None
    rss_bytes: int | None = None
    device_total_bytes: int | None = None


class RankFacts(msgspec.Struct, kw_only=True):
    """``run.json["ranks"][i]``: what one rank recorded (``missing``: it wrote nothing)."""

    rank: int | None = None
    missing: bool = False
    torch_threads: int | None = None
    dataloader_workers: int | None = None
    windows: list[ProfiledWindow] = []


class RunFacts(msgspec.Struct, kw_only=True):
    """What ``run.json`` holds that perfdoctor reads, typed (``perfdoctor.capture.runner`` writes it).

    Counts per optimizer step (``flops_per_step`` FLOP from FlopCounterMode, ``tokens_per_step``,
    ``samples_per_step``), ``wall_s`` script start to stop (s), ``steps_completed`` by rank 0."""

    status: str | None = None
    partial: bool = False
    stop_reason: str | None = None
    exit_code: int | None = None
    steps_completed: int | None = None
    wall_s: float | None = None
    world_size: int | None = None
    flops_per_step: int | float | None = None
    parameter_count: int | None = None
    tokens_per_step: int | float | None = None
    samples_per_step: int | float | None = None
    environment: RunEnvironment | None = None
    cpu: RunCpu | None = None
    memory: RunMemoryFacts | None = None
    ranks: list[RankFacts] | None = None


def run_facts(raw: JsonObject, source: str) -> RunFacts:
    """``raw`` (a parsed ``run.json``) as :class:`RunFacts`.

    Raises:
        PerfDoctorError: a field perfdoctor reads has the wrong type (names ``source`` and the field).
    """
    try:
        return msgspec.convert(raw, RunFacts, strict=False)
    except msgspec.ValidationError as exc:
        raise PerfDoctorError(f"{source}: unexpected run.json content ({exc})") from None


@dataclass
class RunData:
    """A run directory's contents, all read and derived when it is loaded (:func:`load_run_dir`).

    ``steps``: rank 0's :data:`~perfdoctor.capture.steps_csv.StepColumns` (the lowest rank's when rank 0 wrote
    none), with ``train_s`` = ``duration_s`` − ``eval_s`` − ``checkpoint_s`` (the train-only step time: evaluation
    and ``torch.save`` inside a step left out). ``rank_steps``: the same for every rank that wrote a steps file,
    ``rank_steady_states`` their steady states. ``steady_state``: :func:`perfdoctor.analysis.steps.steady_state.analyze`
    of ``steps``' train-only times with profiler/FLOPs steps excluded (None without steps). ``run``: ``run.json``
    as parsed (the checks read it); ``facts``: the same, typed. ``warnings``: one line per ``steps.csv`` row left
    out (:func:`~perfdoctor.capture.steps_csv.read_steps_csv`). ``snapshots``: the memory snapshots ``perfdoctor
    profile --memory-snapshot`` wrote (``memory_snapshot*.pickle``); ``snapshot_reports`` each readable one's
    name and :mod:`perfdoctor.snapshot` report, ``snapshot_warnings`` one line per snapshot that cannot be read.
    ``memory``: :func:`perfdoctor.analysis.memory.run_memory.run_memory` of ``steps`` (None when none was measured).
    """

    path: Path
    run: JsonObject
    facts: RunFacts
    steps: StepColumns
    rank_steps: dict[int, StepColumns]
    rank_steady_states: dict[int, SteadyState | None]
    traces: list[Path]
    steady_state: SteadyState | None
    warnings: list[str]
    snapshots: list[Path]
    snapshot_reports: list[tuple[str, SnapshotReport]]
    snapshot_warnings: list[str]
    memory: RunMemory | None

    @property
    def partial(self) -> bool:
        """``run.json``'s ``partial``: the run stopped before all its steps (some data may be missing)."""
        return self.facts.partial


def load_run_dir(path: str | Path) -> RunData:
    """Load a run directory written by ``perfdoctor profile`` (see :class:`RunData`).

    Raises:
        PerfDoctorError: not a directory, no ``run.json`` in it, a ``run.json`` that is not a JSON object or holds
            a field of the wrong type, or a ``steps.csv`` that cannot be read.
    """
    path = Path(path)
    run = _read_run_json(path)
    warnings: list[str] = []
    rank_steps = {steps_csv_rank(f.name): read_steps_csv(f, warnings) for f in sorted(path.glob("steps*.csv"))}
    steps = rank_steps.get(0) or (rank_steps[min(rank_steps)] if rank_steps else empty_steps())
    steady = steady_state_of(steps)
    facts = run_facts(run, str(path / "run.json"))
    snapshots = sorted(path.glob(f"{SNAPSHOT_STEM}*.pickle"))
    reports, snapshot_warnings = _snapshot_reports(snapshots)
    return RunData(
        path=path,
        run=run,
        facts=facts,
        steps=steps,
        rank_steps=rank_steps,
        rank_steady_states={rank: steady_state_of(s) for rank, s in rank_steps.items()},
        traces=sorted(path.glob("trace.rank*.pt.trace.json*")),
        steady_state=steady,
        warnings=warnings,
        snapshots=snapshots,
        snapshot_reports=reports,
        snapshot_warnings=snapshot_warnings,
        memory=_memory(steps, steady, facts),
    )


def _read_run_json(path: Path) -> JsonObject:
    """The run directory's ``run.json`` as parsed.

    Raises:
        PerfDoctorError: no ``run.json``, not valid JSON, or not a JSON object.
    """
    if not (path / "run.json").is_file():
        raise PerfDoctorError(f"{path}: not a perfdoctor run directory (no run.json)")
    try:
        run: JsonValue = json.loads((path / "run.json").read_text())
    except ValueError as exc:
        raise PerfDoctorError(f"{path / 'run.json'}: not valid JSON ({exc})") from None
    if not isinstance(run, dict):
        raise PerfDoctorError(f"{path / 'run.json'}: not a JSON object")
    return run


def _memory(steps: StepColumns, steady: SteadyState | None, facts: RunFacts) -> RunMemory | None:
    """The run's memory over its steps (:func:`perfdoctor.analysis.memory.run_memory.run_memory`) from its steady-state
    start on, with ``run.json``'s memory facts; None when none was measured."""
    start = steady.steady_start_step if steady is not None else 0
    return run_memory(steps, start, msgspec.to_builtins(facts.memory) if facts.memory is not None else None)


def _snapshot_reports(paths: list[Path]) -> tuple[list[tuple[str, SnapshotReport]], list[str]]:
    """Each readable memory snapshot (its name, its :mod:`perfdoctor.snapshot` report), and one warning line per
    snapshot that cannot be read (the rest of the report stands)."""
    from perfdoctor.snapshot.analysis import analyse
    from perfdoctor.snapshot.reader import read_snapshot

    out, warnings = [], []
    for p in paths:
        try:
            out.append((p.name, analyse(read_snapshot(str(p)))))
        except PerfDoctorError as exc:
            warnings.append(f"{exc.message}; the memory snapshot is left out of the report")
    return out, warnings


# the steps.csv columns the core budget (perfdoctor.replay.machine.core_budget) and the unprofiled step's page faults
# (perfdoctor.replay.unprofiled.page_faults) read, handed to each rank's worker
CPU_SERIES = (
    "step",
    "duration_s",
    "cpu_s",
    "main_cpu_s",
    "main_wait_s",
    "machine_cpu_s",
    "minor_faults",
    "profiler_phase",
)

# one rank's CPU-time series for its worker: column -> values (NaN → None), and "steady_start_step" -> the index
CpuSeries: TypeAlias = dict[str, list[float | str | None] | int]


@dataclass(frozen=True)
class RankInputs:
    """What each rank's worker is handed of the run directory (the worker receives run.json alone otherwise), by
    rank: ``step_time_s`` its median steady-state step time (s) outside the profiled window (ranks whose steady
    span is unstable are left out: its median is the noise's); ``allocator`` its CUDA allocator counts per
    steady-state unprofiled step as evidence values (:func:`perfdoctor.analysis.memory.run_memory.run_allocator_values`;
    ranks without CUDA counters left out); ``cpu`` its CPU-time series (:data:`CPU_SERIES`) and steady start."""

    step_time_s: dict[int, float]
    allocator: dict[int, AllocatorValues]
    cpu: dict[int, CpuSeries]


def rank_inputs(run: RunData | None) -> RankInputs:
    """Each rank's share of the run directory (:class:`RankInputs`); all empty without a run."""
    if run is None:
        return RankInputs({}, {}, {})
    mem = msgspec.to_builtins(run.facts.memory) if run.facts.memory is not None else None
    step_time_s, allocator, cpu = {}, {}, {}
    for rank, steps in run.rank_steps.items():
        ss = run.rank_steady_states[rank]
        if ss is not None and ss.median_s > 0 and not ss.unstable:
            step_time_s[int(rank)] = float(ss.median_s)
        start = ss.steady_start_step if ss is not None else 0
        values = run_allocator_values(run_memory(steps, start, mem))
        if values:
            allocator[int(rank)] = values
        cpu[int(rank)] = _cpu_series(steps, ss)
    return RankInputs(step_time_s, allocator, cpu)


def _cpu_series(steps: StepColumns, ss: SteadyState | None) -> CpuSeries:
    """One rank's :data:`CPU_SERIES` as plain lists (NaN → None) and its ``steady_start_step`` (0 without one)."""
    cols: CpuSeries = {
        k: [None if (isinstance(x, float) and x != x) else x for x in steps[k].tolist()]
        for k in CPU_SERIES
        if k in steps
    }
    cols["steady_start_step"] = int(ss.steady_start_step) if ss is not None else 0
    return cols


def measured_cpu_roofs(env: RunEnvironment | None, cpu: RunCpu | None) -> Roofs | None:
    """This machine's CPU calibration, if the run (its ``run.json`` environment and CPU) was recorded on this
    machine; else None.

    "This machine" = same hostname and CPU model in the run's ``run.json`` and in the calibration record:
    a CPU peak measured elsewhere says nothing about the machine in the trace.
    """
    from perfdoctor.analysis.work import calibration

    env, cpu = env or RunEnvironment(), cpu or RunCpu()
    if env.cuda_available or not env.hostname:
        return None
    try:
        record = calibration.load_calibration()
        if record.get("hostname") != env.hostname or record.get("cpu_model") != cpu.model:
            return None
        if record.get("under_load"):  # a peak measured while other work shared the cores would inflate MFU
            return None
        return calibration.roofs_from_calibration(record, "cpu")
    except PerfDoctorError:
        return None
