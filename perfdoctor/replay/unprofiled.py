"""The step a ``perfdoctor profile`` run's savings are stated for: the unprofiled one, not the profiled window.

The profiler costs the host time on every event it records (an op's RecordFunction callbacks, a runtime call's CUPTI
callback, an annotation, an allocation's or a free's ``[memory]`` event), so an op-heavy step runs longer inside the
window than outside it (a CPU script of many tiny ops: 3.5 ms per step unprofiled, 7.0 ms profiled). A run directory
measures both steps:

- ``W``: the mean of the analysed (profiled) steps of the trace (µs);
- ``S``: the median of the run's unprofiled steady-state steps (``steps.csv``, µs:
  :func:`perfdoctor.capture.run_data.rank_inputs`).

**Per-event overhead removed** (:func:`unprofiled`, method ``"overhead"``): with ``N`` recorded host events (CPU
ops, annotations, runtime calls, ``[memory]`` events) of the step's process per analysed step, each costs ``o = (W −
S) / N`` µs. The unprofiled step is the recording replayed with ``o`` cut from the host timeline at each recorded
event (:func:`remove_overhead`), and a fix's saving is that step − the same step replayed with the fix as well. Time
the profiler does not inflate (a sleep, a DataLoader fetch, Python between ops) keeps its recorded length.

**Page faults** (a run that counted them: ``steps.csv`` ``minor_faults``, ``run.json`` ``fault_probe``): the
profiler also changes how the C allocator reuses memory, so the window's steps can take many more minor page faults
than the unprofiled ones (a fresh page mapped and zeroed on first write: examples/mlp.py --norm hand, 1 MB
activations: 15,000-27,000 faults per profiled step, 0-256 in the warm-up steps before it, a 69 ms window for a 30
ms step). Those ``ΔF`` extra faults per step (the window's beyond the steps just before it, :func:`page_faults`)
cost ``c`` µs each (the slope of the window's own steps' time on their faults where they spread enough, else the
run's unprofiled steps' slope, else the runner's probe, :mod:`perfdoctor.capture.fault_probe`). Each profiled step's
own count is used (``ΔF_k``: the same window's steps took 1,544 to 22,275), at most that step's excess over ``S``,
and in all at most the window's whole excess: ``F = Σ_k min(ΔF_k·c, W_k − S, E_k) / n ≤ W − S``. Step ``k``'s faults
are cut from its ops that allocate a page or more in proportion to each one's excess (its self time less the
shortest of the same op on the same shapes in the window, :func:`op_excess`; ``E_k`` the step's total: an op that
faulted ran longer than its siblings that did not), each at most its own, and the per-event overhead takes the rest:
``o = (W − S − F) / N``. Without the counts, ``F = 0``.

**The inflation, per category of time** (stated with every saving): the step ``W / S``; host op time (the union of
the process's CPU ops and runtime calls in the analysed steps) recorded vs with the per-event overhead cut from it,
``H_w / H_u``; device kernels ×1 (the profiler records them from the device's own timestamps: CUPTI activity, no
callback on the device's timeline), and host time outside ops keeps its length but for the cuts at annotations.

**Scaled** (method ``"scaled"``, the fallback): where ``o`` cannot be estimated (the window is not slower than the
unprofiled steps, or no host event is recorded), each replayed step is scaled by ``S / W``, which scales the time
the profiler does not inflate too; the report says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from perfdoctor.replay.simulate import Intervals, Scenario
from perfdoctor.replay.transforms import WhatIf
from perfdoctor.trace import intervals as iv
from perfdoctor.trace.signatures import op_keys
from perfdoctor.trace.tables import TraceTables

if TYPE_CHECKING:
    from perfdoctor.replay.rank import RankReplay

# the tables whose events the profiler records on the host, each at a cost to the step: an allocation's or a free's
# ``[memory]`` event too (profile_memory=True; examples below, 2026-12-07, the 2-core VM, torch 2.13.0 CPU: a loop of
# 1 MB ``a * b`` cost 3.0 µs more per op profiled, a loop of ``x.select`` 0.9 µs more per recorded op)
HOST_EVENT_TABLES = ("cpu_ops", "annotations", "runtime", "memory")
# a page of the C allocator's fresh memory (4 KiB: x86-64 and arm64 Linux): an allocation smaller than one may be
# carved from a page already mapped
PAGE_BYTES = 4096


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
        faults: the extra page faults the window took (:class:`PageFaults`), None where not counted.
        fault_us: ``F``, the page faults' time cut per analysed step (µs; 0 without ``faults``).
    """

    method: str
    window_step_us: float
    steady_step_us: float
    events_per_step: float
    per_event_us: float
    whatif: WhatIf | None = None
    host_op_window_us: float = 0.0
    host_op_unprofiled_us: float = 0.0
    faults: PageFaults | None = None
    fault_us: float = 0.0

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

    def _faults_text(self) -> str:
        """The page faults' part of the removed overhead, as a clause ending in "and " ("" without one)."""
        f = self.faults
        if f is None or self.fault_us <= 0:
            return ""
        capped = (
            " (each step's at most its time over the unprofiled step and its ops' excess)"
            if f.extra_per_step * f.us_per_fault > self.fault_us * 1.0001
            else ""
        )
        return (
            f"{self.fault_us / 1000:.2f} ms per step of page faults{capped} ({f.extra_per_step:,.0f} more minor "
            f"faults per profiled step than per unprofiled one × {f.us_per_fault:.2f} µs each, {f.source}) cut from "
            "the ops that allocate a page or more and ran longer than the same op on the same shapes at its fastest, "
            "by that excess, and "
        )

    def text(self, step_us: float) -> str:
        """One clause for a saving's method: which method, the overhead per event and the steps it comes from;
        ``step_us``: the unprofiled mean step the savings are taken from (µs)."""
        w, s = self.window_step_us / 1000, self.steady_step_us / 1000
        if self.method == "overhead":
            return (
                f"for the unprofiled step ({step_us / 1000:.2f} ms; {self.inflation_text()}): the profiler's "
                "overhead removed in the replay, "
                + self._faults_text()
                + f"{self.per_event_us:.2f} µs per recorded host event (the profiled window's {w:.2f} ms mean step − "
                f"the run's {s:.2f} ms median unprofiled steady step"
                + (f" − {self.fault_us / 1000:.2f} ms of page faults" if self.fault_us > 0 else "")
                + f", over {self.events_per_step:,.0f} recorded events per step), and the saving is that step − that "
                "step with the fix"
            )
        return (
            f"for the unprofiled step ({step_us / 1000:.2f} ms; {self.inflation_text()}): the replayed steps "
            "scaled by the run's median "
            f"unprofiled steady step ÷ the profiled window's mean step ({s:.2f} ÷ {w:.2f} ms); the profiler's "
            "per-event overhead could not be estimated (the window is not slower than the unprofiled steps), so "
            "time it does not inflate (sleeps, Python) is scaled too"
        )


@dataclass(frozen=True)
class PageFaults:
    """The minor page faults the profiled window added: ``extra_per_step`` faults per profiled step beyond an
    unprofiled one's, ``us_per_fault`` µs each, measured as ``source`` says; ``by_step``: each profiled step's own
    extra faults by its step number (the runner's, ``ProfilerStep#N``'s N), empty where not known."""

    extra_per_step: float
    us_per_fault: float
    source: str
    by_step: Mapping[int, float] = field(default_factory=dict)


# the unprofiled steps must spread this many faults (10th to 90th percentile) over at least MIN_FIT_STEPS
# steps for their own slope of step time on faults to measure a fault's cost (else the runner's probe's)
MIN_FIT_SPREAD = 1000.0
MIN_FIT_STEPS = 8


def page_faults(
    series: Mapping[str, object] | None, run_json: Mapping[str, object] | None, rank: int
) -> PageFaults | None:
    """Rank ``rank``'s extra page faults per profiled step (:class:`PageFaults`) from its CPU series
    (:data:`perfdoctor.capture.run_data.CPU_SERIES`: ``minor_faults``, ``duration_s`` and ``profiler_phase`` per
    step, ``steady_start_step``) and its ``fault_probe`` in ``run_json`` (run.json's ``ranks``,
    :func:`perfdoctor.capture.fault_probe.probe_faults`): the mean over the profiled ("active") steps less the
    median over the steps just before the window (its warm-up steps, else the last five unprofiled ones, else the
    unprofiled steady ones), at a cost per fault measured in the run where it can be: the Theil–Sen
    slope of the profiled steps' time on their faults, else of the unprofiled steps' (all but the first two), each
    where its steps spread at least :data:`MIN_FIT_SPREAD` faults over :data:`MIN_FIT_STEPS` steps and the slope is
    positive (examples/mlp.py --head-loop 96: unprofiled steps of 3,500 faults took 27.3 ms, of none 21.8 ms: 1.6 µs
    a fault, where the probe's fresh mapping reads 2.6; --norm hand: 1.5-1.9 µs in ten windows, the probe 2.5-2.7),
    the window's at most the probe's (a fault in isolation), else the probe's. None where the counts, or both
    costs, are missing or the window took no more faults."""
    ranks = run_json.get("ranks") if run_json is not None else None
    entry = (
        next((r for r in ranks if isinstance(r, Mapping) and r.get("rank") == rank), None)
        if isinstance(ranks, list)
        else None
    )
    probe = entry.get("fault_probe") if entry is not None else None
    if series is None:
        return None
    faults, phases, durations = series.get("minor_faults"), series.get("profiler_phase"), series.get("duration_s")
    start = series.get("steady_start_step")
    if not isinstance(faults, list) or not isinstance(phases, list) or len(phases) != len(faults):
        return None
    first = start if isinstance(start, int) else 0
    active = [float(f) for f, ph in zip(faults, phases, strict=True) if ph == "active" and isinstance(f, (int, float))]
    steady = [
        i
        for i, (f, ph) in enumerate(zip(faults, phases, strict=True))
        if i >= first and ph == "none" and isinstance(f, (int, float))
    ]
    if not active or not steady:
        return None
    # the faults the recording adds: beyond those of the steps just before the window (the profiler's warm-up
    # steps, else the last unprofiled ones), where the allocator is in the window's state; a state the run leaves
    # later (examples/mlp.py --head-loop 96: 3,500 faults a step until the window ended, none after) is no cost of
    # the profiler's, and stays in the per-event figure
    first_active = next(i for i, ph in enumerate(phases) if ph == "active")
    before = [i for i in range(first_active) if phases[i] == "warmup" and isinstance(faults[i], (int, float))]
    if len(before) < 3:
        before = [i for i in range(first_active) if phases[i] == "none" and isinstance(faults[i], (int, float))][-5:]
    base = before if len(before) >= 3 else steady
    baseline = float(np.median([float(faults[i]) for i in base]))
    extra = float(np.mean(active)) - baseline
    if not extra > 0:
        return None
    # each profiled step's own count: the window's steps differ (examples/mlp.py --norm hand: 1,544 to 22,275 faults
    # in one window), and a step's faults are cut from that step's ops
    numbers = series.get("step")
    number = numbers if isinstance(numbers, list) and len(numbers) == len(faults) else list(range(len(faults)))
    by_step = {
        int(n): max(float(f) - baseline, 0.0)
        for n, f, ph in zip(number, faults, phases, strict=True)
        if ph == "active" and isinstance(f, (int, float)) and isinstance(n, (int, float))
    }
    # a fault's cost in the window itself, where its steps spread their faults: the slope of their time on their
    # faults (examples/mlp.py --norm hand, four runs: 1.8-2.1 µs a fault in the window, where the probe read 2.4-2.7
    # and left the per-event figure at 0.02-0.23 µs: the faults took the profiler's whole overhead)
    window = [i for i, ph in enumerate(phases) if ph == "active" and isinstance(faults[i], (int, float))]
    in_window = _fitted_cost(
        np.array([float(faults[i]) for i in window]),
        [durations[i] for i in window] if isinstance(durations, list) else None,
    )
    probed = probe.get("us_per_fault") if isinstance(probe, Mapping) else None
    if in_window is not None:
        # at most the probe's: a fault in isolation (a slope above it is something else in the window that came
        # with the faults: examples/mlp.py --unfused-chain 32, 644 extra faults a step, read 5.3 µs where the probe
        # read 2.5)
        if isinstance(probed, (int, float)) and 0 < probed < in_window:
            return PageFaults(
                extra,
                float(probed),
                f"the runner's fault probe (the window's own slope, {in_window:.2f}, is more)",
                by_step,
            )
        return PageFaults(
            extra, in_window, f"the slope of the profiled window's {len(window)} steps' time on their faults", by_step
        )
    # the fit reads every unprofiled step but the first two (the allocator's state can change within the run: its
    # early steps may fault where the steady ones do not, which is the spread the slope needs)
    unprofiled = [i for i, (f, ph) in enumerate(zip(faults, phases, strict=True)) if i >= 2 and ph == "none"]
    fit = [i for i in unprofiled if isinstance(faults[i], (int, float))]
    fitted = _fitted_cost(
        np.array([float(faults[i]) for i in fit]), [durations[i] for i in fit] if isinstance(durations, list) else None
    )
    if fitted is not None:
        return PageFaults(
            extra, fitted, f"the slope of the run's {len(fit)} unprofiled steps' time on their faults", by_step
        )
    if not isinstance(probed, (int, float)) or not probed > 0:
        return None
    return PageFaults(extra, float(probed), "the runner's fault probe", by_step)


def _fitted_cost(faults: np.ndarray, durations: list[object] | None) -> float | None:
    """µs per fault: the Theil–Sen slope of step time (s) on faults over steps, or None where the steps do not
    spread enough faults (:data:`MIN_FIT_SPREAD`, :data:`MIN_FIT_STEPS`) or the slope is not positive."""
    from scipy.stats import theilslopes  # type: ignore[import-untyped]

    if durations is None:
        return None
    ok = np.array([isinstance(d, (int, float)) and d == d for d in durations])
    if ok.sum() < MIN_FIT_STEPS:
        return None
    x = faults[ok]
    y = np.array([float(d) for d, k in zip(durations, ok, strict=True) if k])  # type: ignore[arg-type]
    if float(np.percentile(x, 90) - np.percentile(x, 10)) < MIN_FIT_SPREAD:
        return None
    slope = float(theilslopes(y * 1e6, x)[0])
    return slope if slope > 0 else None


def op_excess(tables: TraceTables, pid: int, span: Intervals) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(start µs, end µs, excess µs) of process ``pid``'s CPU ops that start inside ``span``, sorted by start: each
    op's self time (its time less its direct children's, :func:`perfdoctor.analysis.work.roofline.op_parents`) less
    the shortest self time of an op of the same name and recorded input shapes there (0 for one seen once;
    :func:`perfdoctor.trace.signatures.op_keys`), for an op that allocates a page or more itself (a ``[memory]``
    event of at least :data:`PAGE_BYTES` made in it, :func:`perfdoctor.analysis.memory.memory_steps.allocating_op_rows`;
    every op where the trace has no ``[memory]`` events), else 0.

    An op that ran longer than the same op on the same shapes at its fastest in the window was held up by
    something its sibling was not: a page fault on its output's fresh pages (examples/mlp.py --norm hand: the
    ops' excess per profiled step 19.5-68.9 ms where the steps ran 12.3-62.2 ms over the unprofiled one). Only an
    op that allocates writes fresh pages; a matmul or a DataLoader's ``select`` that ran long waited for something
    else (its cache refilled after another op's faults), which the per-event figure covers (the same script, ten
    runs on the 2-core VM, 2026-12-07, the fault cost the window's: the saving of fusing its chains replayed 8.75 ms
    mean with every op's excess eligible, 7.23 with allocating ops' only, 6.96 with ``[memory]`` events among the
    host events too, against 6.01 measured; docs/benchmarks.md)."""
    from perfdoctor.analysis.memory.memory_steps import allocating_op_rows
    from perfdoctor.analysis.work.roofline import op_parents

    cpu = tables.cpu_ops
    if len(cpu) == 0:
        return np.empty(0), np.empty(0), np.empty(0)
    rows = np.flatnonzero((cpu["pid"] == pid) & (iv.containing(cpu["ts_us"], span) >= 0))
    ops = cpu.take(rows)
    if len(ops) == 0:
        return np.empty(0), np.empty(0), np.empty(0)
    dur = ops["end_us"] - ops["ts_us"]
    parent = op_parents(ops)
    child = parent >= 0
    self_us = dur - np.bincount(parent[child], weights=dur[child], minlength=len(ops))
    sig = op_keys(ops, np.arange(len(ops)))
    fastest = np.full(int(sig.max()) + 1, np.inf)
    np.minimum.at(fastest, sig, self_us)
    seen = np.bincount(sig, minlength=fastest.size)
    excess = np.where(seen[sig] >= 2, np.maximum(self_us - fastest[sig], 0.0), 0.0)
    mem = tables.tables["memory"]
    if len(mem):
        made_in = allocating_op_rows(tables)[mem["mem_bytes"] >= PAGE_BYTES]
        excess = np.where(np.isin(rows, made_in), excess, 0.0)
    order = np.argsort(ops["ts_us"], kind="stable")
    return ops["ts_us"][order], ops["end_us"][order], excess[order]


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


def overhead_cut(starts_us: np.ndarray, per_event_us: float | np.ndarray) -> Intervals:
    """Host time (µs intervals) that ``per_event_us`` (one figure, or one per event) at each event starting at
    ``starts_us`` (sorted) occupies.

    Each event's overhead is cut from its start on; where events start closer together than that (an op and the
    op it calls), the next cut begins where the previous one ended, so every event loses exactly its ``d_i``: cut
    ``i`` ends at ``c_i = max(ts_i, c_{i-1}) + d_i = D_i + max_{j≤i}(ts_j − D_{j-1})``, ``D_i = Σ_{j≤i} d_j``.
    """
    d = np.broadcast_to(np.asarray(per_event_us, dtype=np.float64), starts_us.shape)
    if starts_us.size == 0 or not (d > 0).any():
        return iv.EMPTY
    cum = np.cumsum(d)
    ends = cum + np.maximum.accumulate(starts_us - (cum - d))
    # each cut starts at its event or where the previous one ended (the same float, so touching cuts merge)
    begins = np.maximum(starts_us, np.concatenate([[-np.inf], ends[:-1]]))
    keep = d > 0
    return iv.union(begins[keep], ends[keep])


def remove_overhead(pid: int, cut: Intervals, per_event_us: float, fault_us: float = 0.0) -> WhatIf:
    """The profiled steps without the profiler: ``cut`` (µs intervals, :func:`overhead_cut` of the recorded host
    events at ``per_event_us`` each and, where the run counted page faults, of the allocating ops that ran long at
    their share of ``fault_us``, µs over the analysed steps) removed from process ``pid``'s host timeline.

    Assumption: every recorded event costs the host the same time, measured as (W − S − F) / N, and the window's
    extra page faults cost the ops that allocate a page or more in proportion to their excess over the same op on
    the same shapes at its fastest; device work is not inflated. Source: the run's own steps (window mean W,
    unprofiled steady median S, N events per step, F of page faults).
    """
    what = f"the profiler's {per_event_us:.2f} µs per recorded host event removed"
    if fault_us > 0:
        what += (
            f", and its extra page faults ({fault_us / 1000:.2f} ms over the analysed steps) from the allocating ops "
            "that ran long"
        )
    return WhatIf(
        "remove-profiler-overhead",
        Scenario("remove-profiler-overhead", host_cut={pid: cut} if cut[0].size else {}, peers_move=True),
        what,
        "the run's profiled window vs its unprofiled steady steps",
    )


def _step_fault_us(
    rr: RankReplay, faults: PageFaults, step_numbers: np.ndarray | None, steady_step_us: float
) -> np.ndarray:
    """The page faults' time in each analysed step (µs, shape ``(n_steps,)``): its own extra faults (``by_step``,
    where ``step_numbers`` names the analysed steps; else the window's mean ``extra_per_step``) × ``us_per_fault``,
    at most that step's excess over the unprofiled step ``steady_step_us`` (a step's faults cannot have cost more
    than the time it ran over)."""
    n = int(rr.recorded_step_us.size)
    extra = np.full(n, faults.extra_per_step)
    if step_numbers is not None and len(step_numbers) == n and faults.by_step:
        extra = np.array([faults.by_step.get(int(s), faults.extra_per_step) for s in step_numbers], dtype=np.float64)
    return np.minimum(extra * faults.us_per_fault, np.maximum(rr.recorded_step_us - steady_step_us, 0.0))


def unprofiled(
    rr: RankReplay,
    tables: TraceTables,
    steady_step_us: float,
    faults: PageFaults | None = None,
    step_numbers: np.ndarray | None = None,
) -> Unprofiled | None:
    """How ``rr``'s (:class:`~perfdoctor.replay.rank.RankReplay`) savings are stated for the unprofiled step of
    median ``steady_step_us`` (µs, ``S``); None without analysed steps or without ``S``. ``faults``: the extra page
    faults the window took (:func:`page_faults`), each analysed step's own (``step_numbers``: the analysed steps'
    numbers, ``ProfilerStep#N``'s N, in order) cut from that step's ops (the module docstring).

    ``"overhead"`` when the window is slower than ``S`` and the step's process recorded host events, else
    ``"scaled"`` (the module docstring).
    """
    from perfdoctor.replay.transforms.cpu import step_span

    n_steps = int(rr.recorded_step_us.size)
    if n_steps == 0 or not steady_step_us > 0:
        return None
    window = float(rr.recorded_step_us.mean())
    span = step_span(rr)
    pid = rr.windows.pid
    starts = host_events(tables, pid, span)
    per_step = starts.size / n_steps
    ops = host_op_time(tables, pid, span)
    ops_us = float((ops[1] - ops[0]).sum()) / n_steps
    if window <= steady_step_us or per_step == 0:
        return Unprofiled("scaled", window, steady_step_us, per_step, 0.0, None, ops_us, ops_us)
    fault_us, fault_cut = 0.0, None
    op_start, op_end, excess = op_excess(tables, pid, span) if faults is not None else (np.empty(0),) * 3
    if faults is not None and excess.sum() > 0:
        # each step's faults shared by that step's ops by their excess, each op at most its own
        k = np.clip(np.searchsorted(rr.windows.host_start_us, op_start, side="right") - 1, 0, n_steps - 1)
        step_excess = np.bincount(k, weights=excess, minlength=n_steps)
        step_faults = np.minimum(_step_fault_us(rr, faults, step_numbers, steady_step_us), step_excess)
        total = float(step_faults.sum())
        if total > n_steps * (window - steady_step_us):  # at most the window's whole excess
            step_faults *= n_steps * (window - steady_step_us) / total
        fault_us = float(step_faults.sum()) / n_steps
        shares = excess / np.where(step_excess > 0, step_excess, 1.0)[k] * step_faults[k]
        # each op's share cut at its end (after the per-event overhead cut at its start)
        at = np.maximum(op_end - shares, op_start)[shares > 0]
        order = np.argsort(np.concatenate([starts, at]), kind="stable")
        fault_cut = np.concatenate([np.zeros(starts.size), shares[shares > 0]])[order]
        starts = np.concatenate([starts, at])[order]
    per_event = (window - steady_step_us - fault_us) / per_step
    d = per_event if fault_cut is None else np.where(fault_cut > 0, fault_cut, per_event)
    whole = overhead_cut(starts, d)
    cut = iv.intersect(whole, ops)
    removed_us = float((cut[1] - cut[0]).sum()) / n_steps
    return Unprofiled(
        "overhead",
        window,
        steady_step_us,
        per_step,
        per_event,
        remove_overhead(pid, whole, per_event, fault_us * n_steps),
        ops_us,
        ops_us - removed_us,
        faults if fault_cut is not None else None,
        fault_us,
    )
