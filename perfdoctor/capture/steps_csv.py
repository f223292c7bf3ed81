"""A rank's ``steps.csv`` (:mod:`perfdoctor.capture.step_log` writes it) read back as column arrays, and the steady
state of its step times."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import TypeAlias

import numpy as np

from perfdoctor.analysis.steps.steady_state import SteadyState, analyze
from perfdoctor.capture.step_record import STEP_FIELDS
from perfdoctor.errors import PerfDoctorError

# column -> one value per step: ``start_s``/``duration_s``/``train_s`` in seconds, counts and bytes as float with
# NaN = not measured, ``profiler_phase`` as str ("none", "warmup", "active", ...)
StepColumns: TypeAlias = dict[str, np.ndarray]

_REQUIRED = ("step", "start_s", "duration_s")


def read_steps_csv(path: Path, warnings: list[str] | None = None) -> StepColumns:
    """``steps.csv`` as column arrays (:data:`StepColumns`), plus the derived ``train_s`` (:func:`with_train_time`).

    Rows that cannot be read are left out, each with a one-line warning appended to ``warnings`` naming the
    file and line: a row with fewer fields than the header (what a run killed while writing it leaves, e.g.
    by SIGKILL or the out-of-memory killer), more fields, or a field that is not a number. A file with no
    step row warns that the step series is empty.

    Raises:
        PerfDoctorError: the file cannot be read.
    """
    warn = warnings if warnings is not None else []
    rows = _read_rows(path, warn)
    if not rows:
        warn.append(f"{path}: no step rows, so the run has no step series (no steady state, no throughput)")
    cols: StepColumns = {}
    for name in STEP_FIELDS:
        values = [r.get(name) or "" for r in rows]
        if name == "profiler_phase":
            cols[name] = np.array([v or "none" for v in values], dtype=object)
        else:
            cols[name] = np.array([float(v) if v != "" else np.nan for v in values], dtype=float)
    return with_train_time(cols)


def _read_rows(path: Path, warn: list[str]) -> list[dict[str, str]]:
    """The readable rows of a ``steps.csv`` as header -> text, a warning in ``warn`` for each row left out.

    Raises:
        PerfDoctorError: the file cannot be read.
    """
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
    return rows


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


def with_train_time(cols: StepColumns) -> StepColumns:
    """Add ``train_s`` (s) = duration − evaluation − checkpoint time of each step (files written before
    those columns existed: NaN → 0, so ``train_s`` = ``duration_s``)."""
    d = cols["duration_s"]
    other = np.nan_to_num(cols.get("eval_s", np.zeros_like(d))) + np.nan_to_num(
        cols.get("checkpoint_s", np.zeros_like(d))
    )
    cols["train_s"] = np.maximum(d - other, 0.0)
    return cols


def empty_steps() -> StepColumns:
    """The columns of a run without a ``steps.csv``: every column, no step."""
    return with_train_time(
        {name: np.array([], dtype=object if name == "profiler_phase" else float) for name in STEP_FIELDS}
    )


def steady_state_of(steps: StepColumns) -> SteadyState | None:
    """Steady state of a steps table's train-only times; profiler warm-up/active and FLOPs steps excluded."""
    d = steps["train_s"] if "train_s" in steps else steps["duration_s"]
    if d.size == 0:
        return None
    phase = steps["profiler_phase"]
    return analyze(d, exclude=phase != "none", window=phase == "active")
