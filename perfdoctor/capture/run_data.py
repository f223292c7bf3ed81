"""Read a run directory back: ``run.json``, steps as numpy arrays, trace paths, steady state.

The report pipeline calls :func:`load_run_dir` when ``perfdoctor report`` is
given a run directory, so rules see the run data (step series, FLOPs, tokens,
environment) and not only the trace.
"""

from __future__ import annotations

import csv
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from perfdoctor.analysis.steady_state import SteadyState, analyze
from perfdoctor.capture.step_record import STEP_FIELDS
from perfdoctor.errors import PerfDoctorError


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
    """

    path: Path
    run: dict
    steps: dict[str, np.ndarray]
    rank_steps: dict[int, dict[str, np.ndarray]] = field(default_factory=dict)
    traces: list[Path] = field(default_factory=list)
    steady_state: SteadyState | None = None

    @property
    def partial(self) -> bool:
        return bool(self.run.get("partial"))

    def report_section(self) -> dict:
        """JSON-able ``report["run"]``: run facts, the step series, steady state, throughput.

        ``steps`` holds ``step``, ``duration_s`` and ``profiler_phase`` lists (rank 0);
        ``steady_state`` is :class:`SteadyState` as a dict plus ``phase_change``.
        """
        ss = self.steady_state
        steady = None
        if ss is not None:
            steady = {**asdict(ss), "phase_change": ss.phase_change,
                      "steady_start_step": ss.steady_start_step}
        keep = ("status", "partial", "stop_reason", "exit_code", "command", "script", "world_size",
                "launcher", "profiler", "environment", "cpu", "git", "flops_per_step", "parameter_count",
                "param_dtypes", "autocast", "tokens_per_step", "samples_per_step", "wall_s",
                "steps_completed", "traces", "missing_ranks")
        return {
            **{k: self.run.get(k) for k in keep},
            "path": str(self.path),
            "steps": {"step": self.steps["step"].astype(int).tolist(),
                      "duration_s": self.steps["duration_s"].tolist(),
                      "train_s": self.steps["train_s"].tolist(),
                      "profiler_phase": self.steps["profiler_phase"].tolist()},
            "steady_state": steady,
            "throughput": self.throughput(),
        }

    def throughput(self) -> dict:
        """Train-only and wall rates, each with numerator and denominator.

        ``train``: tokens (or samples) of the steady-state steps / the sum of
        their durations (s). ``wall``: all steps' tokens / the run's wall time
        (script start to stop, s), which includes set-up, evaluation and
        compilation. Units: tokens/s and samples/s.
        """
        return throughput(self.steps, self.steady_state, self.run.get("wall_s"))


def read_steps_csv(path: Path) -> dict[str, np.ndarray]:
    """``steps.csv`` as column arrays (see :class:`RunData`). Raises PerfDoctorError if unreadable."""
    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as exc:
        raise PerfDoctorError(f"{path}: cannot read ({exc.strerror})") from None
    cols: dict[str, np.ndarray] = {}
    for name in STEP_FIELDS:
        values = [r.get(name) or "" for r in rows]
        if name == "profiler_phase":
            cols[name] = np.array([v or "none" for v in values], dtype=object)
        else:
            cols[name] = np.array([float(v) if v != "" else np.nan for v in values], dtype=float)
    return with_train_time(cols)


def with_train_time(cols: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Add ``train_s`` (s) = duration − evaluation − checkpoint time of each step (files written before
    those columns existed: NaN → 0, so ``train_s`` = ``duration_s``)."""
    d = cols["duration_s"]
    other = np.nan_to_num(cols.get("eval_s", np.zeros_like(d))) + np.nan_to_num(cols.get("checkpoint_s", np.zeros_like(d)))
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
    for f in sorted(path.glob("steps*.csv")):
        rank = 0 if f.name == "steps.csv" else int(f.name.split(".rank")[1].split(".")[0])
        rank_steps[rank] = read_steps_csv(f)
    steps = rank_steps.get(0) or (rank_steps[min(rank_steps)] if rank_steps else read_empty())
    traces = sorted(path.glob("trace.rank*.pt.trace.json*"))
    return RunData(path, run, steps, rank_steps, traces, steady_state_of(steps))


def read_empty() -> dict[str, np.ndarray]:
    return with_train_time({name: np.array([], dtype=object if name == "profiler_phase" else float)
                            for name in STEP_FIELDS})


def steady_state_of(steps: dict[str, np.ndarray]) -> SteadyState | None:
    """Steady state of a steps table's train-only times; profiler warm-up/active and FLOPs steps excluded."""
    d = steps["train_s"] if "train_s" in steps else steps["duration_s"]
    if d.size == 0:
        return None
    phase = steps["profiler_phase"]
    return analyze(d, exclude=phase != "none", window=phase == "active")


def throughput(steps: dict[str, np.ndarray], ss: SteadyState | None, wall_s: float | None) -> dict:
    """See :meth:`RunData.throughput`; a rate is None when its numerator is unknown."""
    out: dict = {}
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
        out[f"train_{unit}_per_s"] = {"value": num / den if den > 0 else None,
                                      f"{unit}": num, "seconds": den, "steps": int(steady.sum()),
                                      "excluded_s": excluded}
        if wall_s:
            total = float(np.nansum(c))
            out[f"wall_{unit}_per_s"] = {"value": total / wall_s, f"{unit}": total,
                                         "seconds": float(wall_s), "steps": int(d.size)}
    return out
