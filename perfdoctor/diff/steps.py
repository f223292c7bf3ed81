"""The per-step times each side's verdict is computed from (µs), and where they come from.

- A ``perfdoctor profile`` run directory (or its report JSON, which keeps the ``run`` section): the steady-state
  train-only step times of the whole run on rank 0 (``run.steps.train_s`` of the steps at or after
  ``steady_state.steady_start_step`` and outside the profiler's warm-up/active steps: the steps the run's
  throughput is computed from), so hundreds of steps without profiler overhead.
- A trace: each profiled step's time on the primary device (report-schema "step time"); on a multi-rank job
  those of the rank whose mean step is the job's step (the longest of the ranks' mean steps, the report's
  denominator: ranks move in lock-step), so the verdict's mean, the category table's step and the report agree.

A side of several runs gives one series per run, every run of both sides from the same kind of source
(:func:`side_series`); :mod:`perfdoctor.diff.runs` compares their means.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from perfdoctor.errors import PerfDoctorError
from perfdoctor.model import Report
from perfdoctor.model.report import Denominator, DeviceSection, RankSection, RunSection


@dataclass(frozen=True)
class StepSeries:
    """Step times (µs, one per step), their source in words, remarks, and the run's level change (%).

    ``level_shift_pct``: the largest change between consecutive steady phases' median step times of the run
    (``|m₂ ÷ m₁ − 1| × 100``; 0 without a phase change): how far this machine moved during one run, which
    bounds nothing the step-to-step interval can see (see :func:`perfdoctor.diff.stats.compare_means`).
    """

    values_us: np.ndarray
    source: str
    notes: list[str] = field(default_factory=list)
    level_shift_pct: float = 0.0
    steady_start_step: int | None = None  # a run series' first steady step (None: trace steps)


def is_cpu(model: Report) -> bool:
    """Every rank was analysed on the host only (no GPU activity): a CPU trace, run or report; a run without a
    trace (it crashed or was interrupted before its profiled window): run.json says CUDA was not available."""
    if not model.ranks:
        run = run_of(model)
        return run is not None and run.device == "CPU"
    devices = [primary_device(r) for r in model.ranks]
    return all(d is not None and d.kind == "cpu" for d in devices)


def level_shift_pct(model: Report) -> float:
    """The largest relative change (%) between consecutive steady phases' medians of a run (0 without phases)."""
    run = run_of(model)
    ss = run.steady_state if run is not None else None
    if ss is None or not ss.phase_change or not ss.phases or len(ss.phases) < 2:
        return 0.0
    medians = [p.median_s for p in ss.phases]
    shifts = [abs(b / a - 1.0) * 100.0 for a, b in zip(medians, medians[1:]) if a > 0]
    return max(shifts, default=0.0)


def primary_device(rank: RankSection) -> DeviceSection | None:
    """The rank's primary device breakdown (report ``primary_device``), None when it has none."""
    for d in rank.devices:
        if d.device == rank.primary_device:
            return d
    return rank.devices[0] if rank.devices else None


def run_of(model: Report) -> RunSection | None:
    return model.run if isinstance(model.run, RunSection) else None


def run_step_times(model: Report) -> np.ndarray | None:
    """Steady-state train-only step times (µs) of a run's rank 0, None without a run step series."""
    run = run_of(model)
    if run is None or not run.steps.train_s:
        return None
    t = np.array([np.nan if v is None else float(v) for v in run.steps.train_s], dtype=float)
    phase = run.steps.profiler_phase or ["none"] * t.size
    start = run.steady_state.steady_start_step if run.steady_state is not None else 0
    idx = np.arange(t.size)
    mask = (idx >= start) & np.array([p == "none" for p in phase]) & np.isfinite(t)
    out: np.ndarray = t[mask] * 1e6
    return out


UNSTABLE_SPREAD = 2.0  # p90 ÷ p10 of the steady steps above this: no single level (analysis.steady_state's bar)


def steady_state_notes(model: Report, side: str, path: str, widened: bool = True) -> list[str]:
    """Warnings on a run's steady state: a level change during the run (the steady state is then its last phase,
    so the two sides may compare different stretches of time) and steps without one level (p90 ÷ p10 > 2).
    ``widened``: the interval adds the level shift (one run per side); else the spread of several runs' means
    covers it."""
    run = run_of(model)
    ss = run.steady_state if run is not None else None
    if ss is None:
        return []
    out = []
    if ss.phase_change and ss.phases:
        starts = ", ".join(str(p.start_step) for p in ss.phases[1:])
        out.append(
            f"{side} ({path}): the step time changed level during the run (at step {starts}); its steady "
            f"state is the last phase from step {ss.steady_start_step}: a machine that got busier or quieter "
            "mid-run makes the two sides compare different stretches of time, "
            + (
                f"so the interval is widened by the level shift ({level_shift_pct(model):.1f}%)"
                if widened
                else f"a level shift ({level_shift_pct(model):.1f}%) the spread of the run means measures"
            )
        )
    if ss.p10_s > 0 and ss.p90_s / ss.p10_s > UNSTABLE_SPREAD:
        out.append(
            f"{side} ({path}): steady-state steps vary {ss.p90_s / ss.p10_s:.1f}x (p90 ÷ p10): other work on "
            "the machine or steps of different sizes; the interval widens accordingly"
        )
    return out


def _mean_step_us(rank: RankSection) -> float:
    dev = primary_device(rank)
    if dev is None or not dev.steps:
        return 0.0
    return float(dev.totals.dur_us) / float(dev.totals.n_steps or len(dev.steps))


def job_rank(model: Report) -> RankSection | None:
    """The rank whose mean analysed step is the job's step: the report's denominator rank
    (:mod:`perfdoctor.checks.denominator`: the longest of the ranks' mean steps, ranks moving in lock-step), else
    the rank with the longest mean step; None when no rank has steps."""
    ranks = [r for r in model.ranks if _mean_step_us(r) > 0]
    denom = model.denominator if isinstance(model.denominator, Denominator) else None
    named = [r for r in ranks if denom is not None and denom.rank is not None and r.rank == denom.rank]
    if named:
        return named[0]
    return max(ranks, key=_mean_step_us, default=None)


def trace_step_times(model: Report, path: str) -> StepSeries:
    """Profiled step times (µs) of the trace(s): on a multi-rank job, those of the rank whose mean step is the
    job's step (:func:`job_rank`), so the verdict's mean is the report's denominator.

    A trace without step markers (the report's one whole-trace window) is one step: such a pair is compared
    window against window (the GPU puzzles' per-element copies and their fix), one step a side, so the verdict is
    inconclusive and the prediction is set against the measured change without an interval; a note says so.

    Raises:
        PerfDoctorError: no rank has a step or a whole-trace window with device or host time.
    """
    ranks = [r for r in model.ranks if r.steps_source != "whole-trace" and _mean_step_us(r) > 0]
    whole = [r for r in model.ranks if r.steps_source == "whole-trace" and _mean_step_us(r) > 0]
    if not ranks and whole:  # the longest window, as job_rank takes the longest mean step
        dev = primary_device(max(whole, key=_mean_step_us))
        assert dev is not None
        return StepSeries(
            np.array([float(dev.totals.dur_us)]),
            "the whole trace as one window (no step markers)",
            [
                f"{path}: no step markers: the whole trace is one window, compared as one step; the change means "
                "something only if both sides recorded the same work"
            ],
        )
    if not ranks:
        raise PerfDoctorError(
            f"{path}: no training steps (no ProfilerStep#N annotations, and no run step series): "
            "nothing to compare per step (record with torch.profiler's schedule and "
            "prof.step(), or pass --step-marker)"
        )
    rank = job_rank(model) if len(ranks) > 1 else ranks[0]
    dev = primary_device(rank) if rank is not None else None
    if rank is None or dev is None or rank not in ranks:
        rank, dev = ranks[0], primary_device(ranks[0])
    assert dev is not None
    values = np.array([s.dur_us for s in sorted(dev.steps, key=lambda s: s.step)])
    if len(ranks) == 1:
        return StepSeries(values, "profiled steps of the trace")
    return StepSeries(values, f"profiled steps of {job_step_words(model, rank)}")


def job_step_words(model: Report, rank: RankSection) -> str:
    """``rank R, the job's step (the longest of N ranks' mean steps, as the report's denominator)``."""
    who = rank.rank if rank.rank is not None else model.ranks.index(rank)
    n = len(model.ranks)
    return f"rank {who}, the job's step (the longest of {n} ranks' mean steps, as the report's denominator)"


RUN_SOURCE = "steady-state train-only step times of the whole run (rank 0, profiled and warm-up steps left out)"


def _side_words(side: str, path: str, index: int, several: bool) -> tuple[str, str]:
    """(label, path) naming one run in a remark: ``BEFORE`` or, with several runs, ``BEFORE run 2``."""
    return (f"{side} run {index + 1}" if several else side), path


def side_series(
    before: list[tuple[Report, str]], after: list[tuple[Report, str]]
) -> tuple[list[StepSeries], list[StepSeries]]:
    """Every run's step times from the same kind of source: each run's whole-run series when every run of both
    sides has one (a run directory or its report JSON), else each run's profiled trace steps (like with like).
    ``before``/``after``: (report, path) per run, one or more a side.

    Raises:
        PerfDoctorError: a run has no steps at all.
    """
    several = len(before) > 1 or len(after) > 1
    sides = (("BEFORE", before), ("AFTER", after))
    series = {side: [run_step_times(m) for m, _ in runs] for side, runs in sides}
    if all(x is not None and x.size >= 2 for xs in series.values() for x in xs):
        out = {
            side: [
                StepSeries(
                    x,
                    RUN_SOURCE,
                    steady_state_notes(m, *_side_words(side, p, i, several), widened=not several),
                    level_shift_pct(m),
                    steady_start_step(m),
                )
                for i, ((m, p), x) in enumerate(zip(runs, series[side]))
                if x is not None
            ]
            for side, runs in sides
        }
        return out["BEFORE"], out["AFTER"]
    notes = []
    have = [x is not None for xs in series.values() for x in xs]
    if any(have) and not all(have):
        notes.append(
            "not every run is a perfdoctor profile run: every run is compared on its profiled trace steps "
            "(like with like)"
            if several
            else "only one side is a perfdoctor profile run: both sides are compared on their profiled "
            "trace steps (like with like)"
        )
    for side, runs in sides:
        for (model, path), x in zip(runs, series[side]):
            if not model.ranks and x is not None and x.size < 2:
                raise PerfDoctorError(
                    f"{path}: fewer than 2 steady-state steps in the run and no trace: nothing to compare"
                )
    b = [trace_step_times(m, p) for m, p in before]
    a = [trace_step_times(m, p) for m, p in after]
    b[0] = StepSeries(b[0].values_us, b[0].source, notes + b[0].notes)
    return b, a


def steady_start_step(model: Report) -> int | None:
    """The first step of a run's steady state (0-based), None without a run section."""
    run = run_of(model)
    if run is None:
        return None
    return run.steady_state.steady_start_step if run.steady_state is not None else 0
