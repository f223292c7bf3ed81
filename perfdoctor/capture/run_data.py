"""Read a run directory back: ``run.json``, steps as numpy arrays, trace paths, steady state.

The report pipeline calls :func:`load_run_dir` when ``perfdoctor report`` is
given a run directory, so rules see the run data (step series, FLOPs, tokens,
environment) and not only the trace.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
import numpy as np

from perfdoctor.analysis.run_memory import RunMemory, run_memory
from perfdoctor.analysis.steady_state import SteadyState, analyze
from perfdoctor.capture.rundir import SNAPSHOT_STEM, steps_csv_rank
from perfdoctor.capture.step_record import STEP_FIELDS
from perfdoctor.errors import PerfDoctorError

if TYPE_CHECKING:
    from perfdoctor.analysis.roofline import Roofs
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


def run_facts(raw: dict[str, Any], source: str) -> RunFacts:
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
    """A run directory's contents.

    ``steps``: column -> array for rank 0 (``start_s``/``duration_s`` in seconds,
    counts and bytes as float with NaN = not measured, ``profiler_phase`` as str),
    plus the derived ``train_s`` = ``duration_s`` − ``eval_s`` − ``checkpoint_s`` (the
    train-only step time: evaluation and ``torch.save`` inside a step left out).
    ``rank_steps``: the same for every rank that wrote a steps file.
    ``steady_state``: :func:`perfdoctor.analysis.steady_state.analyze` of rank 0's
    train-only step times with profiler/FLOPs steps excluded (None without steps).
    ``run``: ``run.json`` as parsed (the checks read it); ``facts``: the same, typed.
    ``warnings``: one line per ``steps.csv`` row left out (:func:`read_steps_csv`).
    ``snapshots``: the memory snapshots ``perfdoctor profile --memory-snapshot`` wrote (``memory_snapshot*.pickle``).
    """

    path: Path
    run: dict[str, Any]
    facts: RunFacts
    steps: dict[str, np.ndarray]
    rank_steps: dict[int, dict[str, np.ndarray]] = field(default_factory=dict)
    traces: list[Path] = field(default_factory=list)
    steady_state: SteadyState | None = None
    warnings: list[str] = field(default_factory=list)  # steps.csv rows left out, one line each
    snapshots: list[Path] = field(default_factory=list)

    @property
    def partial(self) -> bool:
        return self.facts.partial

    @cached_property
    def memory(self) -> RunMemory | None:
        """Rank 0's memory over the run (:func:`perfdoctor.analysis.run_memory.run_memory`): each recorded
        series' growth and peak, the allocator's counts per steady-state step; None when none was measured."""
        start = self.steady_state.steady_start_step if self.steady_state is not None else 0
        mem = self.facts.memory
        return run_memory(self.steps, start, msgspec.to_builtins(mem) if mem is not None else None)

    @cached_property
    def snapshot_reports(self) -> tuple[list[tuple[str, SnapshotReport]], list[str]]:
        """Each readable memory snapshot of the run directory (its name, its :mod:`perfdoctor.snapshot` report),
        and one warning line per snapshot that cannot be read (the rest of the report stands)."""
        from perfdoctor.snapshot.analysis import analyse
        from perfdoctor.snapshot.reader import read_snapshot

        out, warnings = [], []
        for p in self.snapshots:
            try:
                out.append((p.name, analyse(read_snapshot(str(p)))))
            except PerfDoctorError as exc:
                warnings.append(f"{exc.message}; the memory snapshot is left out of the report")
        return out, warnings

    def throughput(self) -> dict[str, dict[str, Any]]:
        """Train-only and wall rates, each with numerator and denominator.

        ``train``: tokens (or samples) of the steady-state steps / the sum of
        their durations (s). ``wall``: all steps' tokens / the run's wall time
        (script start to stop, s), which includes set-up, evaluation and
        compilation. Units: tokens/s and samples/s.
        """
        return throughput(self.steps, self.steady_state, self.facts.wall_s)


def read_steps_csv(path: Path, warnings: list[str] | None = None) -> dict[str, np.ndarray]:
    """``steps.csv`` as column arrays (see :class:`RunData`).

    Rows that cannot be read are left out, each with a one-line warning appended to ``warnings`` naming the
    file and line: a row with fewer fields than the header (what a run killed while writing it leaves, e.g.
    by SIGKILL or the out-of-memory killer), more fields, or a field that is not a number. A file with no
    step row warns that the step series is empty.

    Raises:
        PerfDoctorError: the file cannot be read.
    """
    warn = warnings if warnings is not None else []
    try:
        with open(path, newline="") as f:
            reader = csv.reader(f)
            header = next(reader, None) or []
            rows: list[dict[str, str]] = []
            for row in reader:
                if not row:
                    continue
                problem = _row_problem(header, row)
                if problem:
                    warn.append(f"{path}: line {reader.line_num}: {problem}; that row is left out")
                    continue
                rows.append(dict(zip(header, row, strict=True)))
    except (OSError, csv.Error, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) else str(exc)
        raise PerfDoctorError(f"{path}: cannot read ({why})") from None
    if not rows:
        warn.append(f"{path}: no step rows, so the run has no step series (no steady state, no throughput)")
    cols: dict[str, np.ndarray] = {}
    for name in STEP_FIELDS:
        values = [r.get(name) or "" for r in rows]
        if name == "profiler_phase":
            cols[name] = np.array([v or "none" for v in values], dtype=object)
        else:
            cols[name] = np.array([float(v) if v != "" else np.nan for v in values], dtype=float)
    return with_train_time(cols)


_REQUIRED = ("step", "start_s", "duration_s")


def _row_problem(header: list[str], row: list[str]) -> str | None:
    """Why one ``steps.csv`` row cannot be read (None: it can): a numeric field is not a number, a required
    field (step, start, duration) is empty, or its field count differs from the header's."""
    for name, value in zip(header, row, strict=False):
        if name == "profiler_phase" or name not in STEP_FIELDS:
            continue
        if value == "":
            if name in _REQUIRED:
                return f"no {name}"
            continue
        try:
            x = float(value)
        except ValueError:
            return f"{name} is not a number ({value[:40]!r})"
        if name in _REQUIRED and x != x:
            return f"{name} is not a number ({value[:40]!r})"
    if len(row) < len(header):
        return f"incomplete row ({len(row)} of {len(header)} fields; the run stopped while writing it?)"
    if len(row) > len(header):
        return f"{len(row)} fields where the header has {len(header)}"
    return None


def with_train_time(cols: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Add ``train_s`` (s) = duration − evaluation − checkpoint time of each step (files written before
    those columns existed: NaN → 0, so ``train_s`` = ``duration_s``)."""
    d = cols["duration_s"]
    other = np.nan_to_num(cols.get("eval_s", np.zeros_like(d))) + np.nan_to_num(
        cols.get("checkpoint_s", np.zeros_like(d))
    )
    cols["train_s"] = np.maximum(d - other, 0.0)
    return cols


def load_run_dir(path: str | Path) -> RunData:
    """Load a run directory written by ``perfdoctor profile``.

    Raises:
        PerfDoctorError: not a directory, or no ``run.json`` in it.
    """
    path = Path(path)
    if not (path / "run.json").is_file():
        raise PerfDoctorError(f"{path}: not a perfdoctor run directory (no run.json)")
    try:
        run = json.loads((path / "run.json").read_text())
    except ValueError as exc:
        raise PerfDoctorError(f"{path / 'run.json'}: not valid JSON ({exc})") from None
    rank_steps = {}
    warnings: list[str] = []
    for f in sorted(path.glob("steps*.csv")):
        rank_steps[steps_csv_rank(f.name)] = read_steps_csv(f, warnings)
    steps = rank_steps.get(0) or (rank_steps[min(rank_steps)] if rank_steps else read_empty())
    traces = sorted(path.glob("trace.rank*.pt.trace.json*"))
    if not isinstance(run, dict):
        raise PerfDoctorError(f"{path / 'run.json'}: not a JSON object")
    facts = run_facts(run, str(path / "run.json"))
    snapshots = sorted(path.glob(f"{SNAPSHOT_STEM}*.pickle"))
    return RunData(path, run, facts, steps, rank_steps, traces, steady_state_of(steps), warnings, snapshots)


def read_empty() -> dict[str, np.ndarray]:
    return with_train_time(
        {name: np.array([], dtype=object if name == "profiler_phase" else float) for name in STEP_FIELDS}
    )


def steady_state_of(steps: dict[str, np.ndarray]) -> SteadyState | None:
    """Steady state of a steps table's train-only times; profiler warm-up/active and FLOPs steps excluded."""
    d = steps["train_s"] if "train_s" in steps else steps["duration_s"]
    if d.size == 0:
        return None
    phase = steps["profiler_phase"]
    return analyze(d, exclude=phase != "none", window=phase == "active")


def throughput(steps: dict[str, np.ndarray], ss: SteadyState | None, wall_s: float | None) -> dict[str, dict[str, Any]]:
    """See :meth:`RunData.throughput`; a rate is None when its numerator is unknown."""
    out: dict[str, dict[str, Any]] = {}
    d = steps["train_s"] if "train_s" in steps else steps["duration_s"]
    if d.size == 0:
        return out
    idx = np.arange(d.size)
    steady = (idx >= (ss.steady_start_step if ss else 0)) & (steps["profiler_phase"] == "none")
    for unit in ("tokens", "samples"):
        c = steps[unit]
        if np.isnan(c).all():
            continue
        num = float(np.nansum(c[steady]))
        den = float(d[steady].sum())
        excluded = float((steps["duration_s"][steady] - d[steady]).sum())
        out[f"train_{unit}_per_s"] = {
            "value": num / den if den > 0 else None,
            f"{unit}": num,
            "seconds": den,
            "steps": int(steady.sum()),
            "excluded_s": excluded,
        }
        if wall_s:
            total = float(np.nansum(c))
            out[f"wall_{unit}_per_s"] = {
                "value": total / wall_s,
                f"{unit}": total,
                "seconds": float(wall_s),
                "steps": int(d.size),
            }
    return out


def run_device(env: RunEnvironment | None) -> str | None:
    """The device the run ran on, from ``run.json``'s environment: ``"CPU"`` when CUDA was not available, the
    first device's name when it was (``"GPU"`` without a name), None when run.json does not say."""
    if env is None or env.cuda_available is None:
        return None
    if not env.cuda_available:
        return "CPU"
    return env.device_name or "GPU"


_SERIES = ("step", "duration_s", "train_s", "eval_s", "checkpoint_s", "tokens", "samples", "profiler_phase")


def run_section(run: RunData) -> dict[str, Any]:
    """The report's ``run`` section of a ``perfdoctor profile`` run directory, as the JSON document's plain values
    (:func:`perfdoctor.model.build.run_section_of` makes the typed section).

    ``steps``: the whole run's series (``step``, ``duration_s`` in s, NaN → None); ``steady_state``: warm-up,
    phases and trend (:mod:`perfdoctor.analysis.steady_state`); ``throughput``: train-only and wall rates,
    each with its numerator and denominator in words; ``non_training``: :func:`non_training`.
    """
    ss = run.steady_state
    steps = {
        k: [None if (isinstance(x, float) and x != x) else x for x in v.tolist()]
        for k, v in run.steps.items()
        if k in _SERIES
    }
    section = {
        "path": str(run.path),
        "partial": run.partial,
        "stop_reason": run.facts.stop_reason,
        "steps_completed": run.facts.steps_completed,
        "wall_s": run.facts.wall_s,
        "flops_per_step": run.facts.flops_per_step,
        "parameter_count": run.facts.parameter_count,
        "tokens_per_step": run.facts.tokens_per_step,
        "samples_per_step": run.facts.samples_per_step,
        "device": run_device(run.facts.environment),
        "steps": steps,
        "steady_state": None if ss is None else msgspec.to_builtins(ss),
        "throughput": _throughput_words(run.throughput()),
        "non_training": non_training(run.steps),
        "memory": memory_section(run),
    }
    return section


def memory_section(run: RunData) -> dict[str, Any] | None:
    """The ``run.memory`` section: :attr:`RunData.memory` (series growth and peaks, allocator counts per steady
    step) and one row per device of each readable snapshot (:attr:`RunData.snapshot_reports`); None when the run
    measured no memory column and holds no snapshot."""
    mem = run.memory
    from perfdoctor.snapshot.report import run_snapshots

    snaps = [msgspec.to_builtins(row) for name, rep in run.snapshot_reports[0] for row in run_snapshots(name, rep)]
    if mem is None and not snaps:
        return None
    series = [msgspec.to_builtins(g) for g in (mem.series if mem is not None else [])]
    alloc = msgspec.to_builtins(mem.allocator) if mem is not None and mem.allocator is not None else None
    return {"series": series, "allocator": alloc, "snapshots": snaps}


def _throughput_words(rates: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each rate of :func:`throughput` as ``{value, unit, numerator, denominator}`` (the parts in words)."""
    out = {}
    for key, v in rates.items():
        unit = "tokens" if "tokens" in key else "samples"
        if key.startswith("train"):
            num = f"{v[unit]:,.0f} {unit} in the {v['steps']} steady-state steps (warm-up and profiled steps excluded)"
            den = f"{v['seconds']:.3f} s, the sum of those steps' times"
            if v.get("excluded_s"):
                den = (
                    f"{v['seconds']:.3f} s, the sum of those steps' train-only times (their "
                    f"{v['seconds'] + v['excluded_s']:.3f} s less {v['excluded_s']:.3f} s of evaluation and "
                    "checkpoint saving inside them)"
                )
        else:
            num = f"{v[unit]:,.0f} {unit} in all {v['steps']} steps"
            den = f"{v['seconds']:.3f} s of wall time (script start to stop: includes set-up, evaluation, compilation)"
        out[key] = {"value": v["value"], "unit": f"{unit}/s", "numerator": num, "denominator": den}
    return out


def non_training(steps: dict[str, np.ndarray]) -> dict[str, float | int]:
    """Evaluation and checkpoint time found inside training steps (``eval_s``, ``checkpoint_s``: s), and in
    how many steps (``eval_steps``, ``checkpoint_steps``)."""
    out: dict[str, float | int] = {}
    for key in ("eval_s", "checkpoint_s"):
        v = np.nan_to_num(np.asarray(steps.get(key, []), dtype=float))
        out[key] = float(v.sum())
        out[key.replace("_s", "_steps")] = int((v > 0).sum())
    return out


def profiled_non_training(run: RunData) -> list[str]:
    """Warnings for profiled steps that held evaluation or checkpoint saving (their trace breakdown counts it)."""
    steps = run.steps
    if "eval_s" not in steps or not len(steps["eval_s"]):
        return []
    other = np.nan_to_num(steps["eval_s"]) + np.nan_to_num(steps["checkpoint_s"])
    hit = np.flatnonzero((steps["profiler_phase"] == "active") & (other > 0.05 * steps["duration_s"]))
    if not hit.size:
        return []
    which = ", ".join(
        f"#{int(steps['step'][i])} ({other[i] * 1e3:,.1f} of {steps['duration_s'][i] * 1e3:,.1f} ms)" for i in hit[:5]
    )
    return [
        f"{run.path}: profiled step(s) {which} held evaluation or checkpoint saving (model.eval() … "
        "model.train(), torch.save); the trace breakdown of those steps counts that work as step time"
    ]


def steady_step_times(run: RunData | None) -> dict[int, float]:
    """Median steady-state step time (s) of each rank of a run directory, outside the profiled window; ranks
    whose steady span is unstable (its median is the noise's) are left out."""
    if run is None:
        return {}
    out = {}
    for rank, steps in run.rank_steps.items():
        ss = steady_state_of(steps)
        if ss is not None and ss.median_s > 0 and not ss.unstable:
            out[int(rank)] = float(ss.median_s)
    return out


def allocator_values_by_rank(run: RunData | None) -> dict[int, dict[str, Any]]:
    """Each rank's CUDA allocator counts per steady-state unprofiled step over the whole run, as evidence values
    (:func:`perfdoctor.analysis.run_memory.run_allocator_values`); ranks without CUDA counters are left out."""
    from perfdoctor.analysis.run_memory import run_allocator_values

    if run is None:
        return {}
    out = {}
    mem = msgspec.to_builtins(run.facts.memory) if run.facts.memory is not None else None
    for rank, steps in run.rank_steps.items():
        ss = steady_state_of(steps)
        values = run_allocator_values(run_memory(steps, ss.steady_start_step if ss is not None else 0, mem))
        if values:
            out[int(rank)] = values
    return out


def measured_cpu_roofs(run: RunData | None) -> Roofs | None:
    """This machine's CPU calibration, if the run was recorded on this machine; else None.

    "This machine" = same hostname and CPU model in the run's ``run.json`` and in the calibration record:
    a CPU peak measured elsewhere says nothing about the machine in the trace.
    """
    from perfdoctor.analysis import calibration

    if run is None:
        return None
    env, cpu = run.facts.environment or RunEnvironment(), run.facts.cpu or RunCpu()
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


def _window_of(run: RunData) -> tuple[int, int] | None:
    """(first, last) active step of the run's first profiled window: as recorded in ``run.json``'s ranks, else
    from its ``profiler`` settings (``wait + warmup`` … ``+ active − 1``, :meth:`Schedule.window_steps`)."""
    windows = [w for r in run.facts.ranks or [] for w in r.windows]
    if windows and windows[0].first_step is not None and windows[0].last_step is not None:
        return windows[0].first_step, windows[0].last_step
    prof = run.run.get("profiler")
    if not isinstance(prof, dict):
        return None
    try:
        first = int(prof["wait"]) + int(prof["warmup"])
        return first, first + int(prof["active"]) - 1
    except (KeyError, TypeError, ValueError):
        return None


def missing_traces(path: str | Path, run: RunData) -> list[str]:
    """The trace files ``run.json`` lists for completed windows that are not in the run directory (one
    ``DIR/FILE`` each)."""
    out = []
    for r in run.facts.ranks or []:
        for w in r.windows:
            if w.complete and w.path and not (Path(path) / w.path).exists():
                out.append(str(Path(path) / w.path))
    return out


def no_trace_reason(path: str, run: RunData) -> str:
    """Why the run directory ``path`` has no trace, and what the report then covers, from ``run.json`` and
    ``steps.csv``: the run was killed (``status`` still ``running``: SIGKILL, the out-of-memory killer) before
    or inside its profiled window; the script raised or exited, or perfdoctor stopped it (``error``), before
    or inside the window; the trace files ``run.json`` lists are missing; the script finished without a
    training step; or the run stopped before the window."""
    only = "this report covers the run's step series and throughput only"
    code, reason = run.facts.exit_code, run.facts.stop_reason or ""
    error = run.run.get("error") if isinstance(run.run.get("error"), str) else None
    window = _window_of(run)
    steps = f" (steps {window[0]}–{window[1]})" if window else ""
    where = f" (profiled window at steps {window[0]}–{window[1]})" if window else ""
    seen = run.steps["step"][~np.isnan(run.steps["step"])] if run.steps["step"].size else run.steps["step"]
    if run.facts.status == "running":
        if not seen.size:
            return (
                f"{path}: run.json still says the run is running and steps.csv has no step: the run was killed "
                "(SIGKILL, e.g. the out-of-memory killer) before its first training step, or is still running, "
                "so there is no trace and no step series"
            )
        last = int(seen.max())
        at = "inside" if window and window[0] <= last <= window[1] else "before"
        return (
            f"{path}: run.json still says the run is running and steps.csv stops at step {last} "
            f"({seen.size} steps): the run was killed (SIGKILL, e.g. the out-of-memory killer) {at} its "
            f"profiled window{steps}, or is still running, so there is no trace: {only}"
        )
    done = run.facts.steps_completed or 0
    raised = code == 1 and reason.startswith("script raised ")
    exited = code not in (None, 0) and reason.startswith("script exited ")
    if not done and (raised or exited):
        what = f"raised {reason[len('script raised ') :]}" if raised else f"exited with status {code}"
        return (
            f"{path}: the script {what} before its first training step, so there is no trace and no step "
            "series (its traceback or usage message is above, and the traceback in run.json's script_traceback)"
        )
    if not done and (error or (code not in (None, 0) and reason)):
        return (
            f"{path}: the run stopped before its first training step ({error or reason}), so there is no trace "
            "and no step series"
        )
    if not done:
        return (
            f"{path}: the script finished and no training step was seen, so there is no trace and no step series: "
            "perfdoctor counts optimizer.step() calls of torch.optim optimizers; a loop without one must call "
            "perfdoctor.step() once per step (import perfdoctor)"
        )
    inside = window is not None and window[0] <= done <= window[1]
    if raised or exited or error:
        what = "raised" if raised else f"exited with status {code}" if exited else "was stopped"
        at = "inside its profiled window" if inside else "before its profiled window completed"
        tb = "see the script's traceback, also in run.json's script_traceback"
        why = f"{reason}; {tb}" if raised else error or reason
        return (
            f"{path}: the script {what} after {done} training steps, {at}{where}, so there is no trace ({why}): {only}"
        )
    gone = missing_traces(path, run)
    if gone:
        more = f" and {len(gone) - 1} more" if len(gone) > 1 else ""
        return f"{gone[0]}{more}: listed in run.json but missing (moved or deleted?): {only}"
    return (
        f"{path}: the run stopped after {done} steps, before its profiled window completed{where}: there is no "
        f"trace, so {only} (profile again with fewer --steps or a smaller --wait to get a trace)"
    )


# the steps.csv columns the core budget reads (perfdoctor.replay.machine.core_budget), handed to each rank's worker
CPU_SERIES = ("duration_s", "cpu_s", "main_cpu_s", "main_wait_s", "profiler_phase")


def cpu_series_by_rank(run: RunData | None) -> dict[int, dict[str, Any]]:
    """Each rank's CPU-time series (:data:`CPU_SERIES`, plain lists: NaN → None) and its steady-state start step
    (``steady_start_step``), for the rank's worker, which receives run.json alone; {} without a run."""
    if run is None:
        return {}
    out: dict[int, dict[str, Any]] = {}
    for rank, steps in run.rank_steps.items():
        cols: dict[str, Any] = {
            k: [None if (isinstance(x, float) and x != x) else x for x in steps[k].tolist()]
            for k in CPU_SERIES
            if k in steps
        }
        ss = steady_state_of(steps)
        cols["steady_start_step"] = int(ss.steady_start_step) if ss is not None else 0
        out[int(rank)] = cols
    return out
