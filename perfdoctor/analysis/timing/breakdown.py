"""Where each step's time goes, per device (GPU) or on the host (CPU-only traces).

GPU definitions (µs, per step window from :mod:`perfdoctor.analysis.steps.steps`):

- busy: the union over all streams of kernels, memcpys and memsets; an
  overlap of two streams counts once. idle = step time - busy.
- categories_us: busy time split *exclusively* by category with the priority
  compute (matmul > attention > conv > reduction_norm > elementwise >
  optimizer > other) > communication > memcpy > memset, so the categories
  add up exactly to busy. category_union_us: each category's own union
  (overlapping categories both count; does not add up).
- communication: ``total_us`` = union of communication kernels;
  ``overlapped_us`` = the part that runs while a compute kernel runs;
  ``exposed_us`` = the rest (HTA's comm/comp overlap = overlapped / total).
- idle_causes_us (adds up to idle): each idle µs goes to what the replay's critical path
  (:mod:`perfdoctor.replay.attribution`, the one attribution every rule reads) was doing then:
  ``dataloader`` (the host inside DataLoader ``__next__``), ``synchronization`` (the release
  latency of a blocking call that waited for the device, or a sync call's own time: never the
  host work after it returned), ``host_launch_bound`` (the host inside ops / runtime calls, or
  a launch's latency), ``python`` (the host outside every op: its own Python, I/O, sleeps) and
  ``other`` (work queued before the recording, another device's work on the critical path).
- kernels launched inside ``Optimizer.step`` count as ``optimizer`` unless
  they are GEMMs / convolutions / attention.

CPU-only traces get the same per-step table over host ops (see :mod:`perfdoctor.analysis.timing.cpu_breakdown`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import msgspec
import numpy as np

from perfdoctor.analysis.steps.steps import Steps, gpu_launch_times
from perfdoctor.analysis.timing import host
from perfdoctor.analysis.timing.classify import KernelClass, classify_kernel
from perfdoctor.analysis.timing.kernel_ops import kernel_labels
from perfdoctor.trace import intervals as iv
from perfdoctor.trace.tables import TraceTables
from perfdoctor.vocab import COMPUTE_CATEGORIES, GPU_IDLE_CAUSES, GPU_PRIORITY

PRIORITY = GPU_PRIORITY
IDLE_CAUSES = GPU_IDLE_CAUSES
PHASES = ("forward", "backward", "optimizer")
_OVERRIDABLE = {"elementwise", "reduction_norm", "other", "optimizer"}


class Communication(msgspec.Struct, kw_only=True):
    """Communication kernels of a step (µs): their union, the part overlapped by compute, the rest."""

    total_us: float
    overlapped_us: float
    exposed_us: float


class StepBreakdown(msgspec.Struct, kw_only=True):
    """One step on one device (µs unless named otherwise; the report's step row, see docs/report-schema.md "Step
    breakdown" for each field)."""

    step: int
    name: str
    host_start_us: float
    host_dur_us: float
    start_us: float
    dur_us: float
    busy_us: float
    idle_us: float
    categories_us: dict[str, float]
    category_union_us: dict[str, float]
    idle_causes_us: dict[str, float]
    communication: Communication
    communication_by_collective_us: dict[str, float]
    memcpy_by_direction_us: dict[str, float]
    phases_host_us: dict[str, float]
    phases_device_us: dict[str, float]
    n_kernels: int
    kernel_sum_us: float
    triton_us: float = 0.0  # union of Triton-generated kernels (also counted in their category)


class StepTotals(msgspec.Struct, kw_only=True):
    """The step breakdowns of a device summed field by field (:func:`sum_steps`: µs; ``n_kernels`` a float sum),
    ``n_steps`` of them: every field of :class:`StepBreakdown` but the step's identity and start."""

    n_steps: int
    host_dur_us: float
    dur_us: float
    busy_us: float
    idle_us: float
    categories_us: dict[str, float]
    category_union_us: dict[str, float]
    idle_causes_us: dict[str, float]
    communication: Communication
    communication_by_collective_us: dict[str, float]
    memcpy_by_direction_us: dict[str, float]
    phases_host_us: dict[str, float]
    phases_device_us: dict[str, float]
    n_kernels: float
    kernel_sum_us: float
    triton_us: float


@dataclass
class DeviceBreakdown:
    """All steps of one device (``device = -1`` and ``kind = "cpu"`` for host-only traces)."""

    device: int
    kind: str
    steps: list[StepBreakdown]
    notes: list[str] = field(default_factory=list)


@dataclass
class StepColumns:
    """One value per analysed step window (arrays of shape ``(n_steps,)``; µs unless named otherwise) for every
    field of :class:`StepBreakdown` that is not the window itself; dict fields map a key to such an array.
    ``communication``: (total, overlapped, exposed)."""

    busy: np.ndarray
    categories: dict[str, np.ndarray]
    category_union: dict[str, np.ndarray]
    idle_causes: dict[str, np.ndarray]
    communication: tuple[np.ndarray, np.ndarray, np.ndarray]
    by_collective: dict[str, np.ndarray]
    memcpy_by_direction: dict[str, np.ndarray]
    phases_host: dict[str, np.ndarray]
    phases_device: dict[str, np.ndarray]
    n_kernels: np.ndarray
    kernel_sum: np.ndarray
    triton: np.ndarray


def step_rows(steps: Steps, c: StepColumns) -> list[StepBreakdown]:
    """The :class:`StepBreakdown` of every step window of ``steps`` from its per-window columns (GPU and host
    breakdowns alike): step time = window end - start, idle = step time - busy."""
    ws, we = steps.start_us, steps.end_us
    host_dur = steps.host_dur_us  # once: the property computes the whole array
    total, overlapped, exposed = c.communication

    def at(cols: dict[str, np.ndarray], i: int) -> dict[str, float]:
        return {k: float(v[i]) for k, v in cols.items()}

    out = []
    for i in range(len(steps)):
        dur = float(we[i] - ws[i])
        out.append(
            StepBreakdown(
                step=int(steps.numbers[i]),
                name=steps.names[i],
                host_start_us=float(steps.host_start_us[i]),
                host_dur_us=float(host_dur[i]),
                start_us=float(ws[i]),
                dur_us=dur,
                busy_us=float(c.busy[i]),
                idle_us=dur - float(c.busy[i]),
                categories_us=at(c.categories, i),
                category_union_us=at(c.category_union, i),
                idle_causes_us=at(c.idle_causes, i),
                communication=Communication(
                    total_us=float(total[i]), overlapped_us=float(overlapped[i]), exposed_us=float(exposed[i])
                ),
                communication_by_collective_us=at(c.by_collective, i),
                memcpy_by_direction_us=at(c.memcpy_by_direction, i),
                phases_host_us=at(c.phases_host, i),
                phases_device_us=at(c.phases_device, i),
                n_kernels=int(c.n_kernels[i]),
                kernel_sum_us=float(c.kernel_sum[i]),
                triton_us=float(c.triton[i]),
            )
        )
    return out


def _sum_maps(maps: list[dict[str, float]]) -> dict[str, float]:
    """Key by key sums of ``maps`` (keys in first-seen order)."""
    acc: dict[str, float] = {}
    for d in maps:
        for k, v in d.items():
            acc[k] = acc.get(k, 0.0) + v
    return acc


def sum_steps(steps: list[StepBreakdown]) -> StepTotals:
    """The step breakdowns added up field by field (µs; dict fields key by key; zeros for no step)."""

    def total(get: Callable[[StepBreakdown], float]) -> float:
        return float(sum(get(s) for s in steps))

    return StepTotals(
        n_steps=len(steps),
        host_dur_us=total(lambda s: s.host_dur_us),
        dur_us=total(lambda s: s.dur_us),
        busy_us=total(lambda s: s.busy_us),
        idle_us=total(lambda s: s.idle_us),
        categories_us=_sum_maps([s.categories_us for s in steps]),
        category_union_us=_sum_maps([s.category_union_us for s in steps]),
        idle_causes_us=_sum_maps([s.idle_causes_us for s in steps]),
        communication=Communication(
            total_us=total(lambda s: s.communication.total_us),
            overlapped_us=total(lambda s: s.communication.overlapped_us),
            exposed_us=total(lambda s: s.communication.exposed_us),
        ),
        communication_by_collective_us=_sum_maps([s.communication_by_collective_us for s in steps]),
        memcpy_by_direction_us=_sum_maps([s.memcpy_by_direction_us for s in steps]),
        phases_host_us=_sum_maps([s.phases_host_us for s in steps]),
        phases_device_us=_sum_maps([s.phases_device_us for s in steps]),
        n_kernels=total(lambda s: s.n_kernels),
        kernel_sum_us=total(lambda s: s.kernel_sum_us),
        triton_us=total(lambda s: s.triton_us),
    )


@dataclass
class _GpuEvents:
    ts: np.ndarray
    end: np.ndarray
    launch: np.ndarray
    category: np.ndarray  # object array of category names
    collective: np.ndarray
    direction: np.ndarray
    is_kernel: np.ndarray
    triton: np.ndarray


def _gpu_events(tables: TraceTables, device: int, optimizer: iv.Intervals) -> _GpuEvents:
    # (ts, end, launch, category, collective, direction, triton, is_kernel) per table; names classified once each
    parts: list[tuple[np.ndarray, ...]] = []
    cache: dict[int, KernelClass] = {}
    for tname in ("kernels", "memcpy", "memset"):
        tab = tables.tables[tname]
        if len(tab) == 0:
            continue
        launch = gpu_launch_times(tables, tname)
        m = tab["device"] == device
        if not m.any():
            continue
        uniq, inv = np.unique(tab["name_id"][m], return_inverse=True)
        classes: list[KernelClass] = []
        for nid in uniq.tolist():
            c = cache.get(nid)
            if c is None:
                c = cache[nid] = classify_kernel(tables.names[nid])
            classes.append(c)
        category = np.array([c.category for c in classes], dtype=object)[inv]
        collective = np.array([c.collective for c in classes], dtype=object)[inv]
        direction = np.array([c.direction for c in classes], dtype=object)[inv]
        triton = np.array([c.triton for c in classes], dtype=bool)[inv]
        if tname == "kernels":  # categories that need the launching op (unfused attention, c10d-named comm)
            lab = kernel_labels(tables)
            moved = lab.relabelled[m]
            category = np.where(moved, lab.category[m], category)
            collective = np.where(moved, lab.collective[m], collective)
            direction = np.where(moved, "", direction).astype(object)  # a kernel relabelled has no direction
        kernel = np.full(category.size, tname == "kernels")
        parts.append((tab["ts_us"][m], tab["end_us"][m], launch[m], category, collective, direction, triton, kernel))
    if not parts:
        e = np.empty(0)
        return _GpuEvents(
            e, e, e, np.empty(0, object), np.empty(0, object), np.empty(0, object), np.empty(0, bool), np.empty(0, bool)
        )
    ts, end, launch, category, collective, direction, triton, is_kernel = (
        np.concatenate([p[i] for p in parts]) for i in range(8)
    )
    if optimizer[0].size and category.size:
        in_opt = iv.containing(launch, optimizer) >= 0
        overridable = np.isin(category, list(_OVERRIDABLE))
        category[in_opt & overridable] = "optimizer"
    return _GpuEvents(ts, end, launch, category, collective, direction, is_kernel, triton)


def device_ids(tables: TraceTables) -> list[int]:
    """Devices with GPU activity in this trace, sorted."""
    found: set[int] = set()
    for tname in ("kernels", "memcpy", "memset"):
        tab = tables.tables[tname]
        if len(tab):
            found.update(np.unique(tab["device"]).tolist())
    return sorted(found)


class CauseIntervals(Protocol):
    """What the replay's critical path was doing over time (:class:`~perfdoctor.replay.attribution.Attribution`):
    the intervals (µs) it spent on one idle cause."""

    def intervals(self, label: str) -> iv.Intervals: ...


@dataclass
class _DeviceSets:
    """One device's activity as interval sets (µs) over the whole trace: each category's union and its exclusive
    part (:data:`PRIORITY`), the busy union, communication overlapped by compute and not."""

    unions: dict[str, iv.Intervals]
    exclusive: dict[str, iv.Intervals]
    busy: iv.Intervals
    comm_overlapped: iv.Intervals
    comm_exposed: iv.Intervals


def _device_sets(ev: _GpuEvents) -> _DeviceSets:
    """Category unions, their exclusive split by :data:`PRIORITY` (adding up to busy) and the communication
    overlap of one device's events."""
    unions = {c: iv.union(ev.ts[ev.category == c], ev.end[ev.category == c]) for c in PRIORITY}
    exclusive: dict[str, iv.Intervals] = {}
    covered = iv.EMPTY
    for c in PRIORITY:
        exclusive[c] = iv.subtract(unions[c], covered)
        covered = iv.union_of(covered, unions[c])
    compute = iv.union_of(*(unions[c] for c in COMPUTE_CATEGORIES))
    comm = unions["communication"]
    return _DeviceSets(unions, exclusive, covered, iv.intersect(comm, compute), iv.subtract(comm, compute))


def _named_sets(ev: _GpuEvents) -> tuple[dict[str, iv.Intervals], dict[str, iv.Intervals]]:
    """(communication by collective kind, memcpy by direction) as interval sets (µs), keys sorted."""
    comm, copy = ev.category == "communication", ev.category == "memcpy"
    coll_names = sorted(set(ev.collective[comm].tolist()))
    coll_sets = {c: iv.union(ev.ts[ev.collective == c], ev.end[ev.collective == c]) for c in coll_names}
    dir_names = sorted(set(ev.direction[copy].tolist()))
    dir_sets = {d: iv.union(ev.ts[(ev.direction == d) & copy], ev.end[(ev.direction == d) & copy]) for d in dir_names}
    return coll_sets, dir_sets


def _device_phases(ev: _GpuEvents, host_phases: dict[str, iv.Intervals]) -> dict[str, iv.Intervals]:
    """Each host phase's device time (µs): the union of the device events launched inside it."""
    out = {}
    for name, ph in host_phases.items():
        if ph[0].size == 0 or ev.ts.size == 0:
            out[name] = iv.EMPTY
            continue
        inside = iv.containing(ev.launch, ph) >= 0
        out[name] = iv.union(ev.ts[inside], ev.end[inside])
    return out


def _kernel_counts(ev: _GpuEvents, steps: Steps) -> tuple[np.ndarray, np.ndarray]:
    """(kernels, their summed duration in µs) per step window. A kernel belongs to the window it starts in,
    [start, end): kernels before the first window or in the host gap between two windows belong to none
    (searchsorted on the ends alone charged them to the next step)."""
    ws, we = steps.start_us, steps.end_us
    kstart = ev.ts[ev.is_kernel]
    kdur = (ev.end - ev.ts)[ev.is_kernel]
    kidx = np.searchsorted(we, kstart, side="right")
    inside = kidx < len(steps)
    inside[inside] = kstart[inside] >= ws[kidx[inside]]
    n_k = np.bincount(kidx[inside], minlength=len(steps))[: len(steps)]
    k_sum = np.bincount(kidx[inside], weights=kdur[inside], minlength=len(steps))[: len(steps)]
    return n_k, k_sum


def _launch_note(tables: TraceTables, idle_launch: iv.Intervals, span_us: float) -> list[str]:
    """A note when most of the idle charged to launching (at least 10% of the ``span_us`` analysed) is spent in one
    blocking runtime call (:func:`_dominant_runtime_call`); [] otherwise."""
    blocking = _dominant_runtime_call(tables, idle_launch)
    if not blocking or iv.total(idle_launch) < 0.10 * span_us:
        return []
    name, rt_us = blocking
    return [
        f"{100 * rt_us / iv.total(idle_launch):.0f}% of the idle charged to 'host busy, nothing queued' "
        f"({rt_us / 1000:,.1f} ms) is spent inside {name} calls: a blocking runtime call, not "
        "launch overhead"
    ]


def gpu_breakdown(tables: TraceTables, steps: Steps, device: int, attribution: CauseIntervals) -> DeviceBreakdown:
    """Per-step breakdown of one GPU (see the module docstring for definitions); ``attribution`` is the rank's
    :class:`~perfdoctor.replay.attribution.Attribution` (:func:`perfdoctor.jobs.rank_stage.analyze_tables` makes
    it from the replay)."""
    ws, we = steps.start_us, steps.end_us
    ev = _gpu_events(tables, device, host.named(tables, host.OPTIMIZER_STEP))
    sets = _device_sets(ev)
    span_lo, span_hi = float(ws[0]), float(we[-1])
    idle_sets = idle_by_cause(sets.busy, span_lo, span_hi, attribution)
    coll_sets, dir_sets = _named_sets(ev)
    host_phases = host.phases(tables, (steps.host_start_us, steps.host_end_us))
    dev_phases = _device_phases(ev, host_phases)

    def pw(s: iv.Intervals) -> np.ndarray:
        return iv.per_window(s, ws, we)

    n_k, k_sum = _kernel_counts(ev, steps)
    cols = StepColumns(
        busy=pw(sets.busy),
        categories={c: pw(sets.exclusive[c]) for c in PRIORITY},
        category_union={c: pw(sets.unions[c]) for c in PRIORITY},
        idle_causes={c: pw(x) for c, x in idle_sets.items()},
        communication=(pw(sets.unions["communication"]), pw(sets.comm_overlapped), pw(sets.comm_exposed)),
        by_collective={c: pw(x) for c, x in coll_sets.items()},
        memcpy_by_direction={d: pw(x) for d, x in dir_sets.items()},
        phases_host={p: pw(x) for p, x in host_phases.items()},
        phases_device={p: pw(x) for p, x in dev_phases.items()},
        n_kernels=n_k,
        kernel_sum=k_sum,
        triton=pw(iv.union(ev.ts[ev.triton], ev.end[ev.triton])),
    )
    notes = _launch_note(tables, idle_sets["host_launch_bound"], span_hi - span_lo)
    return DeviceBreakdown(device=device, kind="gpu", steps=step_rows(steps, cols), notes=notes)


def idle_by_cause(
    busy: iv.Intervals, lo_us: float, hi_us: float, attribution: CauseIntervals
) -> dict[str, iv.Intervals]:
    """A device's idle gaps in ``[lo_us, hi_us)`` (the complement of its ``busy`` intervals, µs) split by cause:
    each idle µs goes to what the replay's critical path (``attribution``,
    :class:`~perfdoctor.replay.attribution.Attribution`) was doing at that time, and idle while it was on no cause
    of :data:`IDLE_CAUSES` (another device's work) to ``other``. Disjoint sets that add up to the gaps."""
    gaps = iv.complement(busy, lo_us, hi_us)
    idle_sets = {c: iv.intersect(gaps, attribution.intervals(c)) for c in IDLE_CAUSES}
    on_other = iv.subtract(gaps, iv.union_of(*idle_sets.values()))
    idle_sets["other"] = iv.union_of(idle_sets["other"], on_other)
    return idle_sets


def device_busy(tables: TraceTables, device: int) -> iv.Intervals:
    """The union of the kernels, memcpys and memsets of ``device`` (µs): its busy time, as :func:`gpu_breakdown`
    counts it."""
    ev = _gpu_events(tables, device, iv.EMPTY)
    m = np.isin(ev.category, list(PRIORITY))  # the union of the categories' unions, as busy is there
    return iv.union(ev.ts[m], ev.end[m])


def _dominant_runtime_call(tables: TraceTables, idle: iv.Intervals) -> tuple[str, float] | None:
    """(name, µs) of the non-launch runtime call (cudaFree, hipFree, cudaMalloc, ...) that overlaps at least
    half of ``idle``, else None."""
    rt = tables.runtime
    total = iv.total(idle)
    if len(rt) == 0 or total <= 0:
        return None
    names = tables.name_array()[rt["name_id"]]
    best = None
    for name in set(names.tolist()):
        if host.LAUNCH_CALLS.search(name):
            continue
        m = names == name
        inside = iv.total(iv.intersect(idle, iv.union(rt["ts_us"][m], rt["end_us"][m])))
        if inside >= 0.5 * total and (best is None or inside > best[1]):
            best = (name, inside)
    return best
