"""The step a ``perfdoctor profile`` run's savings are stated for: the unprofiled one, not the profiled window.

The profiler costs the host time on every event it records (an op's RecordFunction callbacks, a runtime call's
CUPTI callback, an annotation), so an op-heavy step runs longer inside the window than outside it (a CPU script of
many tiny ops: 3.5 ms per step unprofiled, 7.0 ms profiled). A run directory measures both steps:

- ``W``: the mean of the analysed (profiled) steps of the trace (µs);
- ``S``: the median of the run's unprofiled steady-state steps (``steps.csv``, µs:
  :func:`perfdoctor.capture.run_data.rank_inputs`).

**Per-event overhead removed** (:func:`unprofiled`, method ``"overhead"``): with ``N`` recorded host events (CPU ops,
annotations, runtime calls) of the step's process per analysed step, each costs ``o = (W − S) / N`` µs. The
unprofiled step is the recording replayed with ``o`` cut from the host timeline at each recorded event
(:func:`remove_overhead`), and a fix's saving is that step − the same step replayed with the fix as well. Time the
profiler does not inflate (a sleep, a DataLoader fetch, Python between ops) keeps its recorded length.

**The inflation, per category of time** (stated with every saving): the step ``W / S``; host op time (the union of
the process's CPU ops and runtime calls in the analysed steps) recorded vs with the per-event overhead cut from it,
``H_w / H_u``; device kernels ×1 (the profiler records them from the device's own timestamps: CUPTI activity, no
callback on the device's timeline), and host time outside ops keeps its length but for the cuts at annotations.

**Scaled** (method ``"scaled"``, the fallback): where ``o`` cannot be estimated (the window is not slower than the
unprofiled steps, or no host event is recorded), each replayed step is scaled by ``S / W``, which scales the time
the profiler does not inflate too; the report says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from perfdoctor.replay.simulate import Intervals, Scenario
from perfdoctor.replay.transforms import WhatIf
from perfdoctor.trace import intervals as iv
from perfdoctor.trace.tables import TraceTables

if TYPE_CHECKING:
    from perfdoctor.replay.rank import RankReplay

# the tables whose events the profiler records on the host, each at a cost to the step
HOST_EVENT_TABLES = ("cpu_ops", "annotations", "runtime")


@dataclass(frozen=True)
class Unprofiled:
    """How a profile run's replayed savings are stated for its unprofiled step (see the module docstring).

    Attributes:
        method: ``"overhead"`` (the per-event overhead removed in the replay) or ``"scaled"`` (steps × S / W).
        window_step_us: ``W``, the mean recorded analysed step (µs).
        steady_step_us: ``S``, the median unprofiled steady-state step of the run (µs).
        events_per_step: ``N``, recorded host events of the step's process per analysed step.
        per_event_us: ``o = (W − S) / N`` (µs; 0 for ``"scaled"``).
        whatif: the overhead's removal (:func:`remove_overhead`; None for ``"scaled"``).
        host_op_window_us: ``H_w``, host op time per analysed step as recorded (µs; CPU ops ∪ runtime calls).
        host_op_unprofiled_us: ``H_u``, the same with the per-event overhead cut from it (µs; ``H_w`` when
            ``"scaled"``).
    """

    method: str
    window_step_us: float
    steady_step_us: float
    events_per_step: float
    per_event_us: float
    whatif: WhatIf | None = None
    host_op_window_us: float = 0.0
    host_op_unprofiled_us: float = 0.0

    @property
    def step_inflation(self) -> float:
        """``W / S``: how much longer the profiled window's step is than the unprofiled one (1 without S)."""
        return self.window_step_us / self.steady_step_us if self.steady_step_us > 0 else 1.0

    @property
    def host_op_inflation(self) -> float:
        """``H_w / H_u``: how much longer the host ops ran under the profiler (1 when not measured)."""
        if self.host_op_unprofiled_us > 0:
            return self.host_op_window_us / self.host_op_unprofiled_us
        return 1.0

    def inflation_text(self) -> str:
        """One clause: how large the profiler's inflation was, per category of time."""
        w, s = self.window_step_us / 1000, self.steady_step_us / 1000
        if self.method != "overhead":
            return (
                f"the profiled window's step ({w:.2f} ms) is not longer than the unprofiled one ({s:.2f} ms): no "
                "inflation by the profiler measured"
            )
        return (
            f"the profiler inflated the step {self.step_inflation:.2f}× ({w:.2f} ms profiled vs {s:.2f} ms "
            f"unprofiled): host op time {self.host_op_inflation:.2f}× ({self.host_op_window_us / 1000:.2f} → "
            f"{self.host_op_unprofiled_us / 1000:.2f} ms per step), device kernels 1.00× (not inflated)"
        )

    @property
    def ratio(self) -> float:
        """``S / W``: the scale of the ``"scaled"`` method (1 without a window)."""
        return self.steady_step_us / self.window_step_us if self.window_step_us > 0 else 1.0

    def text(self, step_us: float) -> str:
        """One clause for a saving's method: which method, the overhead per event and the steps it comes from;
        ``step_us``: the unprofiled mean step the savings are taken from (µs)."""
        w, s = self.window_step_us / 1000, self.steady_step_us / 1000
        if self.method == "overhead":
            return (
                f"for the unprofiled step ({step_us / 1000:.2f} ms; {self.inflation_text()}): the profiler's "
                "overhead removed in the replay, "
                f"{self.per_event_us:.2f} µs per recorded host event (the profiled window's {w:.2f} ms mean step − "
                f"the run's {s:.2f} ms median unprofiled steady step, over {self.events_per_step:,.0f} recorded "
                "events per step), and the saving is that step − that step with the fix"
            )
        return (
            f"for the unprofiled step ({step_us / 1000:.2f} ms; {self.inflation_text()}): the replayed steps "
            "scaled by the run's median "
            f"unprofiled steady step ÷ the profiled window's mean step ({s:.2f} ÷ {w:.2f} ms); the profiler's "
            "per-event overhead could not be estimated (the window is not slower than the unprofiled steps), so "
            "time it does not inflate (sleeps, Python) is scaled too"
        )


def host_events(tables: TraceTables, pid: int, span: Intervals) -> np.ndarray:
    """Start times (µs, sorted) of the host events the profiler recorded on process ``pid`` inside ``span``
    (the analysed steps' windows): CPU ops, annotations and runtime calls (:data:`HOST_EVENT_TABLES`)."""
    parts = []
    for name in HOST_EVENT_TABLES:
        tab = tables.tables[name]
        if len(tab):
            ts = tab["ts_us"][tab["pid"] == pid]
            parts.append(ts[iv.containing(ts, span) >= 0])
    return np.sort(np.concatenate(parts)) if parts else np.empty(0)


def host_op_time(tables: TraceTables, pid: int, span: Intervals) -> Intervals:
    """Host op time of process ``pid`` inside ``span`` (µs intervals): the union of its CPU ops and runtime calls,
    the host time the profiler's per-event callbacks lengthen."""
    parts = []
    for name in ("cpu_ops", "runtime"):
        tab = tables.tables[name]
        if len(tab):
            m = tab["pid"] == pid
            parts.append(iv.union(tab["ts_us"][m], tab["end_us"][m]))
    return iv.intersect(iv.union_of(*parts), span) if parts else iv.EMPTY


def overhead_cut(starts_us: np.ndarray, per_event_us: float) -> Intervals:
    """Host time (µs intervals) that ``per_event_us`` at each event starting at ``starts_us`` (sorted) occupies.

    Each event's overhead is cut from its start on; where events start closer together than that (an op and the
    op it calls), the next cut begins where the previous one ended, so every event loses exactly
    ``per_event_us``: cut ``i`` ends at ``c_i = max(ts_i, c_{i-1}) + o = (i + 1)·o + max_{j≤i}(ts_j − j·o)``.
    """
    if starts_us.size == 0 or per_event_us <= 0:
        return iv.EMPTY
    k = np.arange(starts_us.size, dtype=np.float64)
    ends = (k + 1) * per_event_us + np.maximum.accumulate(starts_us - k * per_event_us)
    return iv.union(ends - per_event_us, ends)


def remove_overhead(pid: int, starts_us: np.ndarray, per_event_us: float) -> WhatIf:
    """The profiled steps without the profiler: ``per_event_us`` cut from process ``pid``'s host timeline at each
    recorded host event (:func:`overhead_cut`).

    Assumption: every recorded event costs the host the same time, measured as (W − S) / N; device work is not
    inflated. Source: the run's own steps (window mean W, unprofiled steady median S, N events per step).
    """
    cut = overhead_cut(starts_us, per_event_us)
    return WhatIf(
        "remove-profiler-overhead",
        Scenario("remove-profiler-overhead", host_cut={pid: cut} if cut[0].size else {}, peers_move=True),
        f"the profiler's {per_event_us:.2f} µs per recorded host event removed",
        "the run's profiled window vs its unprofiled steady steps",
    )


def unprofiled(rr: RankReplay, tables: TraceTables, steady_step_us: float) -> Unprofiled | None:
    """How ``rr``'s (:class:`~perfdoctor.replay.rank.RankReplay`) savings are stated for the unprofiled step of
    median ``steady_step_us`` (µs, ``S``); None without analysed steps or without ``S``.

    ``"overhead"`` when the window is slower than ``S`` and the step's process recorded host events, else
    ``"scaled"`` (the module docstring).
    """
    from perfdoctor.replay.transforms.cpu import step_span

    n_steps = int(rr.recorded_step_us.size)
    if n_steps == 0 or not steady_step_us > 0:
        return None
    window = float(rr.recorded_step_us.mean())
    span = step_span(rr)
    starts = host_events(tables, rr.windows.pid, span)
    per_step = starts.size / n_steps
    ops = host_op_time(tables, rr.windows.pid, span)
    ops_us = float((ops[1] - ops[0]).sum()) / n_steps
    if window <= steady_step_us or per_step == 0:
        return Unprofiled("scaled", window, steady_step_us, per_step, 0.0, None, ops_us, ops_us)
    per_event = (window - steady_step_us) / per_step
    cut = iv.intersect(overhead_cut(starts, per_event), ops)
    removed_us = float((cut[1] - cut[0]).sum()) / n_steps
    return Unprofiled(
        "overhead",
        window,
        steady_step_us,
        per_step,
        per_event,
        remove_overhead(rr.windows.pid, starts, per_event),
        ops_us,
        ops_us - removed_us,
    )
