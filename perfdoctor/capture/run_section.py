"""The report's ``run`` section of a ``perfdoctor profile`` run directory (:class:`~perfdoctor.model.report.RunSection`)
from its :class:`~perfdoctor.capture.run_data.RunData`: facts, step series, steady state, throughput, non-training
time, memory; and the run's warnings about its profiled steps."""

from __future__ import annotations

from typing import TypedDict

import msgspec
import numpy as np

from perfdoctor.analysis.steps.steady_state import SteadyState
from perfdoctor.capture.run_data import RunData, RunEnvironment
from perfdoctor.capture.steps_csv import StepColumns
from perfdoctor.model.report import RunSection

_SERIES = ("step", "duration_s", "train_s", "eval_s", "checkpoint_s", "tokens", "samples", "profiler_phase")


class Rate(TypedDict, total=False):
    """One rate of :func:`throughput`: ``value`` (tokens/s or samples/s; None when ``seconds`` is 0), its numerator
    (``tokens`` or ``samples``), ``seconds``, the ``steps`` counted, and for a train-only rate ``excluded_s``
    (evaluation and checkpoint time inside those steps, s)."""

    value: float | None
    tokens: float
    samples: float
    seconds: float
    steps: int
    excluded_s: float


def throughput(steps: StepColumns, ss: SteadyState | None, wall_s: float | None) -> dict[str, Rate]:
    """Train-only and wall rates, each with numerator and denominator; a rate is left out when its numerator is
    unknown.

    ``train_{unit}_per_s``: tokens (or samples) of the steady-state steps / the sum of their train-only durations
    (s). ``wall_{unit}_per_s``: all steps' tokens / the run's wall time (script start to stop, s), which includes
    set-up, evaluation and compilation. Units: tokens/s and samples/s.
    """
    out: dict[str, Rate] = {}
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
        rate: Rate = {"value": num / den if den > 0 else None}
        rate.update(_numerator(unit, num))
        rate.update({"seconds": den, "steps": int(steady.sum()), "excluded_s": excluded})
        out[f"train_{unit}_per_s"] = rate
        if wall_s:
            total = float(np.nansum(c))
            wall: Rate = {"value": total / wall_s}
            wall.update(_numerator(unit, total))
            wall.update({"seconds": float(wall_s), "steps": int(d.size)})
            out[f"wall_{unit}_per_s"] = wall
    return out


def _numerator(unit: str, amount: float) -> Rate:
    """A rate's numerator under its unit's key."""
    return {"tokens": amount} if unit == "tokens" else {"samples": amount}


def run_device(env: RunEnvironment | None) -> str | None:
    """The device the run ran on, from ``run.json``'s environment: ``"CPU"`` when CUDA was not available, the
    first device's name when it was (``"GPU"`` without a name), None when run.json does not say."""
    if env is None or env.cuda_available is None:
        return None
    if not env.cuda_available:
        return "CPU"
    return env.device_name or "GPU"


def run_section(run: RunData) -> RunSection:
    """The report's ``run`` section of a ``perfdoctor profile`` run directory.

    ``steps``: the whole run's series (``step``, ``duration_s`` in s, NaN → None); ``steady_state``: warm-up,
    phases and trend (:mod:`perfdoctor.analysis.steps.steady_state`); ``throughput``: train-only and wall rates,
    each with its numerator and denominator in words; ``non_training``: :func:`non_training`.

    Raises:
        PerfDoctorError: a value does not have the section's shape (a bug, named with the field's path).
    """
    from perfdoctor.model.build import plain

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
        "throughput": _throughput_words(throughput(run.steps, ss, run.facts.wall_s)),
        "non_training": non_training(run.steps),
        "memory": memory_section(run),
    }
    return plain(section, RunSection, f"{run.path}: run section")


def memory_section(run: RunData) -> dict[str, object] | None:
    """The ``run.memory`` section's values: :attr:`RunData.memory` (series growth and peaks, allocator counts per
    steady step) and one row per device of each readable snapshot (:attr:`RunData.snapshot_reports`,
    :func:`perfdoctor.snapshot.report.run_snapshots`); None when the run measured no memory column and holds no
    snapshot."""
    from perfdoctor.snapshot.report import run_snapshots

    mem = run.memory
    snaps = [msgspec.to_builtins(row) for name, rep in run.snapshot_reports for row in run_snapshots(name, rep)]
    if mem is None and not snaps:
        return None
    series = [msgspec.to_builtins(g) for g in (mem.series if mem is not None else [])]
    alloc = msgspec.to_builtins(mem.allocator) if mem is not None and mem.allocator is not None else None
    return {"series": series, "allocator": alloc, "snapshots": snaps}


def _throughput_words(rates: dict[str, Rate]) -> dict[str, dict[str, str | float | None]]:
    """Each rate of :func:`throughput` as ``{value, unit, numerator, denominator}`` (the parts in words)."""
    out: dict[str, dict[str, str | float | None]] = {}
    for key, v in rates.items():
        unit = "tokens" if "tokens" in key else "samples"
        amount = v["tokens"] if unit == "tokens" else v["samples"]
        if key.startswith("train"):
            num = f"{amount:,.0f} {unit} in the {v['steps']} steady-state steps (warm-up and profiled steps excluded)"
            den = f"{v['seconds']:.3f} s, the sum of those steps' times"
            if v.get("excluded_s"):
                den = (
                    f"{v['seconds']:.3f} s, the sum of those steps' train-only times (their "
                    f"{v['seconds'] + v['excluded_s']:.3f} s less {v['excluded_s']:.3f} s of evaluation and "
                    "checkpoint saving inside them)"
                )
        else:
            num = f"{amount:,.0f} {unit} in all {v['steps']} steps"
            den = f"{v['seconds']:.3f} s of wall time (script start to stop: includes set-up, evaluation, compilation)"
        out[key] = {"value": v["value"], "unit": f"{unit}/s", "numerator": num, "denominator": den}
    return out


def non_training(steps: StepColumns) -> dict[str, float | int]:
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


def section_warnings(run: RunData) -> list[str]:
    """The run's warnings for the report: profiled steps that held evaluation or checkpoint saving
    (:func:`profiled_non_training`), then each memory snapshot that cannot be read."""
    return profiled_non_training(run) + run.snapshot_warnings
