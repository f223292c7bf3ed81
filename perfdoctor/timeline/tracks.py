"""One rank's annotated timeline, made while its trace and replay are loaded: typed data, no file format.

For the chosen steps (default: the rank's median and slowest analysed step) it keeps

- the recorded events of those steps (every host op, annotation, runtime call and device activity that overlaps
  the step's window), as perfdoctor's tables hold them;
- the primary device's idle gaps split by cause: :func:`perfdoctor.analysis.timing.breakdown.idle_by_cause`, the split
  the breakdown's ``idle_causes_us`` adds up per step, so a step's slices of one cause sum to its value there;
- the replay's critical path (:mod:`perfdoctor.replay.attribution`), merged where one label continues;
- the step replayed with the rank's fix plan (:meth:`perfdoctor.replay.rank.RankReplay.fixed_step_times` of the
  plan's what-ifs, the fix-all the plan's last ``step_after_us`` is the mean of): its device activities placed
  from the recorded step's start, and its length.

:mod:`perfdoctor.render.timeline` turns these into a Chrome-trace file with the report's findings.
"""

from __future__ import annotations

import msgspec
import numpy as np

from perfdoctor.analysis.rank import RankAnalysis
from perfdoctor.trace import intervals as iv
from perfdoctor.trace.tables import TraceTables

# perfdoctor's tables → the Kineto category their events carry
EVENT_TABLES = {
    "cpu_ops": "cpu_op",
    "annotations": "user_annotation",
    "gpu_annotations": "gpu_user_annotation",
    "python_functions": "python_function",
    "runtime": "cuda_runtime",
    "syncs": "cuda_sync",
    "kernels": "kernel",
    "memcpy": "gpu_memcpy",
    "memset": "gpu_memset",
}
# table column → the Kineto arg it came from (kept on the events written back)
_ARG_COLUMNS = (
    ("correlation", "correlation"),
    ("external_id", "External id"),
    ("device", "device"),
    ("stream", "stream"),
)


class Event(msgspec.Struct, array_like=True, frozen=True):
    """One complete event (Chrome ``ph: X``): name, category, start and duration (µs), process, thread, args."""

    name: str
    cat: str
    ts_us: float
    dur_us: float
    pid: int
    tid: int
    args: dict[str, int] = {}


class Slice(msgspec.Struct, array_like=True, frozen=True):
    """One perfdoctor slice on a named row (``row``) of the rank's own tracks (µs)."""

    row: str
    name: str
    ts_us: float
    dur_us: float
    args: dict[str, int | float | str] = {}


class StepSpan(msgspec.Struct, frozen=True):
    """A chosen step: its number, why it was chosen ("median", "slowest", "asked"), its recorded window (µs)."""

    step: int
    why: str
    start_us: float
    end_us: float


class RankTimeline(msgspec.Struct):
    """The timeline data of one rank (see the module docstring).

    ``steps``: the chosen steps; ``events``: their recorded events; ``slices``: perfdoctor's rows (idle by cause,
    critical path, after the fix plan); ``process_names`` / ``thread_names``: the trace's own names (pid → name,
    "pid/tid" → name); ``plan_codes``: the fix plan replayed; ``after_plan_step_us``: the replayed step after the
    plan for every analysed step (by step number, µs; empty without a plan); ``recorded_step_us``: the analysed
    steps' recorded lengths (µs); ``notes``: what is absent and why.
    """

    rank: int
    steps: list[StepSpan] = []
    events: list[Event] = []
    slices: list[Slice] = []
    process_names: dict[int, str] = {}
    thread_names: dict[str, str] = {}
    plan_codes: list[str] = []
    after_plan_step_us: dict[int, float] = {}
    recorded_step_us: dict[int, float] = {}
    device: int = -1
    notes: list[str] = []


MISSING_STEPS_NOTE = "not among this rank's analysed steps"
"""The start of the note naming the asked step numbers (``--timeline-steps``) a rank did not analyse."""


def choose_steps(numbers: np.ndarray, dur_us: np.ndarray, asked: list[int]) -> list[tuple[int, str]]:
    """(index, why) of the steps to show: the ``asked`` step numbers that were analysed, else the median step
    (the lower median of the lengths ``dur_us``) and the slowest; one entry when they are the same step."""
    if asked:
        where = {int(n): i for i, n in enumerate(numbers.tolist())}
        return [(where[n], "asked") for n in asked if n in where]
    if dur_us.size == 0:
        return []
    order = np.argsort(dur_us, kind="stable")
    med, slow = int(order[(dur_us.size - 1) // 2]), int(order[-1])
    return [(med, "median")] if med == slow else sorted([(med, "median"), (slow, "slowest")])


def rank_timeline(ra: RankAnalysis, asked: list[int]) -> RankTimeline:
    """The timeline data of the analysed rank ``ra`` (:class:`perfdoctor.analysis.rank.RankAnalysis`, its checks
    already run so its replay's ``fired`` holds the fix plan) for the step numbers ``asked`` (empty: median and
    slowest)."""
    steps = ra.steps
    ws, we = np.asarray(steps.start_us, dtype=np.float64), np.asarray(steps.end_us, dtype=np.float64)
    out = RankTimeline(rank=int(ra.rank) if ra.rank is not None else -1)
    out.recorded_step_us = {int(n): float(e - s) for n, s, e in zip(steps.numbers.tolist(), ws, we, strict=True)}
    chosen = choose_steps(np.asarray(steps.numbers), we - ws, asked)
    out.steps = [StepSpan(int(steps.numbers[i]), why, float(ws[i]), float(we[i])) for i, why in chosen]
    missing = sorted(set(asked) - {s.step for s in out.steps})
    if missing:
        out.notes.append(f"{MISSING_STEPS_NOTE}: {', '.join(map(str, missing))}")
    if not out.steps:
        return out
    idx = [i for i, _ in chosen]
    tabs = ra.tables
    out.events = _events(tabs, ws[idx], we[idx])
    out.process_names = {int(k): str(v) for k, v in tabs.process_names.items()}
    out.thread_names = {f"{p}/{t}": str(v) for (p, t), v in tabs.thread_names.items()}
    out.slices = _idle_slices(ra, out, idx) + _critical_path(ra, out, idx) + _after_plan(ra, out, idx)
    return out


def _events(tabs: TraceTables, lo: np.ndarray, hi: np.ndarray) -> list[Event]:
    """The recorded events overlapping any window ``[lo[k], hi[k])`` (µs), table by table."""
    names = tabs.name_array()
    out: list[Event] = []
    for tname, cat in EVENT_TABLES.items():
        tab = tabs.tables.get(tname)
        if tab is None or len(tab) == 0:
            continue
        ts, dur = tab["ts_us"], tab["dur_us"]
        end = ts + np.maximum(dur, 0.0)
        m = np.zeros(len(tab), dtype=bool)
        for a, b in zip(lo.tolist(), hi.tolist(), strict=True):
            m |= (ts < b) & ((end > a) | ((ts >= a) & (end >= ts)))
        rows = np.flatnonzero(m)
        cols = [(key, tab[col][rows].tolist()) for col, key in _ARG_COLUMNS if col in tab]
        driver = tab["is_driver"][rows].tolist() if "is_driver" in tab else None
        fields = zip(
            names[tab["name_id"][rows]].tolist(),
            ts[rows].tolist(),
            dur[rows].tolist(),
            tab["pid"][rows].tolist(),
            tab["tid"][rows].tolist(),
            strict=True,
        )
        for k, (n, t, d, p, th) in enumerate(fields):
            args = {key: int(v[k]) for key, v in cols if int(v[k]) != -1}
            c = "cuda_driver" if driver is not None and driver[k] else cat
            out.append(Event(str(n), c, float(t), max(float(d), 0.0), int(p), int(th), args))
    return out


def _idle_slices(ra: RankAnalysis, out: RankTimeline, idx: list[int]) -> list[Slice]:
    """The primary device's idle gaps in each chosen step, one slice per gap and cause (the breakdown's split)."""
    from perfdoctor.analysis.timing.breakdown import device_busy, idle_by_cause

    prim = ra.primary
    if prim.kind != "gpu" or ra.attribution is None:
        out.notes.append("device idle by cause: no GPU activity on this rank (a host-only breakdown)")
        return []
    out.device = int(prim.device)
    ws, we = ra.steps.start_us, ra.steps.end_us
    sets = idle_by_cause(device_busy(ra.tables, prim.device), float(ws[0]), float(we[-1]), ra.attribution)
    row = f"GPU {prim.device} idle, by cause"
    slices = []
    for i in idx:
        for cause, ints in sets.items():
            s, e = iv.clip(ints, float(ws[i]), float(we[i]))
            for a, b in zip(s.tolist(), e.tolist(), strict=True):
                slices.append(Slice(row, cause, a, b - a, {"step": int(ra.steps.numbers[i]), "cause": cause}))
    return slices


def _critical_path(ra: RankAnalysis, out: RankTimeline, idx: list[int]) -> list[Slice]:
    """The replay's critical path in each chosen step (its time is the replayed recording's), one slice per
    stretch of one label."""
    att = ra.attribution
    if att is None or att.start_us.size == 0:
        out.notes.append("critical path: this rank has no replay to read it from")
        return []
    ws, we = ra.steps.start_us, ra.steps.end_us
    slices = []
    for i in idx:
        lo, hi = float(ws[i]), float(we[i])
        m = (att.end_us > lo) & (att.start_us < hi)
        s, e, lab = np.maximum(att.start_us[m], lo), np.minimum(att.end_us[m], hi), att.label[m]
        k = 0
        while k < s.size:
            j = k
            while j + 1 < s.size and lab[j + 1] == lab[k] and s[j + 1] - e[j] <= 1e-6:
                j += 1
            step = int(ra.steps.numbers[i])
            slices.append(Slice("critical path", str(lab[k]), float(s[k]), float(e[j] - s[k]), {"step": step}))
            k = j + 1
    return slices


def _after_plan(ra: RankAnalysis, out: RankTimeline, idx: list[int]) -> list[Slice]:
    """Each chosen step replayed with the rank's fix plan: its length (the plan's fix-all for that step) and its
    device activities, placed from the recorded step's start (scaled as the step is, for a profile run's
    unprofiled step)."""
    from perfdoctor.replay.windows import replayed_windows

    rr = ra.replay
    if rr is None:
        out.notes.append("after the fix plan: this rank has no replay")
        return []
    codes = [c for c in rr.fired if c in rr.whatifs]
    out.plan_codes = codes
    if not codes:
        out.notes.append("after the fix plan: no replayed fix is in this rank's plan")
        return []
    parts = [rr.whatifs[c] for c in codes]
    after = rr.fixed_step_times(parts)
    numbers = ra.steps.numbers.tolist()
    out.after_plan_step_us = {int(n): float(a) for n, a in zip(numbers, after.tolist(), strict=True)}
    both = rr.fixed_whatif(parts)
    if both is None:  # parts holds the plan's codes: never empty here
        return []
    res = rr.replayed(both.scenario)
    rs, _ = replayed_windows(res, rr.windows)
    scale = rr.step_scale
    g, names = rr.graph, ra.tables.name_array()
    from perfdoctor.replay.activities import ACT_TABLES

    name_ids = [ra.tables.tables[t]["name_id"] for t in ACT_TABLES]
    slices = []
    label = ", ".join(codes)
    for i in idx:
        step, t0 = int(numbers[i]), float(ra.steps.start_us[i])
        slices.append(
            Slice(
                "step after the fix plan",
                f"step {step} after {label}",
                t0,
                float(after[i]),
                {"step": step, "plan": label, "recorded_step_us": out.recorded_step_us[step]},
            )
        )
        a0, a1 = float(rs[i]), float(rs[i]) + float(after[i]) / scale
        m = np.flatnonzero((res.act_start_us >= a0) & (res.act_start_us < a1))
        for a in m.tolist():
            nid = int(name_ids[int(g.act_table[a])][int(g.act_row[a])])
            row = f"after the fix plan: GPU {int(g.act_device[a])} stream {int(g.act_stream[a])}"
            st, en = float(res.act_start_us[a]), float(res.act_end_us[a])
            slices.append(Slice(row, str(names[nid]), t0 + (st - a0) * scale, (en - st) * scale, {"step": step}))
    return slices
