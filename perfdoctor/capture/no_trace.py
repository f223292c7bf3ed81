"""Why a run directory holds no trace, and what its report then covers, from ``run.json`` and ``steps.csv``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from perfdoctor.capture.run_data import RunData
from perfdoctor.trace.json_value import JsonValue

ONLY = "this report covers the run's step series and throughput only"


def window_of(run: RunData) -> tuple[int, int] | None:
    """(first, last) active step of the run's first profiled window: as recorded in ``run.json``'s ranks, else
    from its ``profiler`` settings (``wait + warmup`` … ``+ active − 1``, :meth:`Schedule.window_steps`)."""
    windows = [w for r in run.facts.ranks or [] for w in r.windows]
    if windows and windows[0].first_step is not None and windows[0].last_step is not None:
        return windows[0].first_step, windows[0].last_step
    prof = run.run.get("profiler")
    if not isinstance(prof, dict):
        return None
    try:
        first = _int(prof["wait"]) + _int(prof["warmup"])
        return first, first + _int(prof["active"]) - 1
    except (KeyError, TypeError, ValueError):
        return None


def _int(value: JsonValue) -> int:
    """``int()`` of a JSON number or numeric string (ValueError for another string); TypeError for a list, an
    object or null."""
    if isinstance(value, (int, float, str)):
        return int(value)
    raise TypeError(f"not a number: {value!r}")


def missing_traces(path: str | Path, run: RunData) -> list[str]:
    """The trace files ``run.json`` lists for completed windows that are not in the run directory (one
    ``DIR/FILE`` each)."""
    out = []
    for r in run.facts.ranks or []:
        for w in r.windows:
            if w.complete and w.path and not (Path(path) / w.path).exists():
                out.append(str(Path(path) / w.path))
    return out


@dataclass(frozen=True)
class _End:
    """How the run ended, as ``run.json`` and ``steps.csv`` say: its exit ``code`` and ``reason``
    (``stop_reason``), perfdoctor's ``error``, the profiled ``window`` (first, last step), the ``done`` training
    steps, and whether the script ``raised`` or ``exited`` with a non-zero status."""

    code: int | None
    reason: str
    error: str | None
    window: tuple[int, int] | None
    done: int
    raised: bool
    exited: bool

    @property
    def steps(self) -> str:
        return f" (steps {self.window[0]}–{self.window[1]})" if self.window else ""

    @property
    def where(self) -> str:
        return f" (profiled window at steps {self.window[0]}–{self.window[1]})" if self.window else ""


def _end_of(run: RunData) -> _End:
    code, reason = run.facts.exit_code, run.facts.stop_reason or ""
    error = run.run.get("error")
    return _End(
        code=code,
        reason=reason,
        error=error if isinstance(error, str) else None,
        window=window_of(run),
        done=run.facts.steps_completed or 0,
        raised=code == 1 and reason.startswith("script raised "),
        exited=code not in (None, 0) and reason.startswith("script exited "),
    )


def no_trace_reason(path: str, run: RunData) -> str:
    """Why the run directory ``path`` has no trace, and what the report then covers, from ``run.json`` and
    ``steps.csv``: the run was killed (``status`` still ``running``: SIGKILL, the out-of-memory killer) before
    or inside its profiled window; the script raised or exited, or perfdoctor stopped it (``error``), before
    or inside the window; the trace files ``run.json`` lists are missing; the script finished without a
    training step; or the run stopped before the window."""
    end = _end_of(run)
    if run.facts.status == "running":
        return _killed(path, run, end)
    if not end.done:
        return _before_first_step(path, end)
    return _after_steps(path, run, end)


def _killed(path: str, run: RunData, end: _End) -> str:
    """A run whose ``run.json`` still says ``running``: killed (or still running) before its first step or at
    the last step ``steps.csv`` holds."""
    seen = run.steps["step"][~np.isnan(run.steps["step"])] if run.steps["step"].size else run.steps["step"]
    if not seen.size:
        return (
            f"{path}: run.json still says the run is running and steps.csv has no step: the run was killed "
            "(SIGKILL, e.g. the out-of-memory killer) before its first training step, or is still running, "
            "so there is no trace and no step series"
        )
    last = int(seen.max())
    at = "inside" if end.window and end.window[0] <= last <= end.window[1] else "before"
    return (
        f"{path}: run.json still says the run is running and steps.csv stops at step {last} "
        f"({seen.size} steps): the run was killed (SIGKILL, e.g. the out-of-memory killer) {at} its "
        f"profiled window{end.steps}, or is still running, so there is no trace: {ONLY}"
    )


def _before_first_step(path: str, end: _End) -> str:
    """A run that ended before its first training step: the script raised or exited, perfdoctor stopped it, or
    it finished without a step perfdoctor saw."""
    if end.raised or end.exited:
        what = f"raised {end.reason[len('script raised ') :]}" if end.raised else f"exited with status {end.code}"
        return (
            f"{path}: the script {what} before its first training step, so there is no trace and no step "
            "series (its traceback or usage message is above, and the traceback in run.json's script_traceback)"
        )
    if end.error or (end.code not in (None, 0) and end.reason):
        return (
            f"{path}: the run stopped before its first training step ({end.error or end.reason}), so there is no "
            "trace and no step series"
        )
    return (
        f"{path}: the script finished and no training step was seen, so there is no trace and no step series: "
        "perfdoctor counts optimizer.step() calls of torch.optim optimizers; a loop without one must call "
        "perfdoctor.step() once per step (import perfdoctor)"
    )


def _after_steps(path: str, run: RunData, end: _End) -> str:
    """A run that ended after some training steps: the script raised, exited or was stopped before or inside the
    window, its trace files are missing, or it stopped before the window completed."""
    if end.raised or end.exited or end.error:
        what = "raised" if end.raised else f"exited with status {end.code}" if end.exited else "was stopped"
        inside = end.window is not None and end.window[0] <= end.done <= end.window[1]
        at = "inside its profiled window" if inside else "before its profiled window completed"
        tb = "see the script's traceback, also in run.json's script_traceback"
        why = f"{end.reason}; {tb}" if end.raised else end.error or end.reason
        return (
            f"{path}: the script {what} after {end.done} training steps, {at}{end.where}, so there is no trace "
            f"({why}): {ONLY}"
        )
    gone = missing_traces(path, run)
    if gone:
        more = f" and {len(gone) - 1} more" if len(gone) > 1 else ""
        return f"{gone[0]}{more}: listed in run.json but missing (moved or deleted?): {ONLY}"
    return (
        f"{path}: the run stopped after {end.done} steps, before its profiled window completed{end.where}: there is "
        f"no trace, so {ONLY} (profile again with fewer --steps or a smaller --wait to get a trace)"
    )
