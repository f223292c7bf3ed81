"""Training steps: host ``ProfilerStep#N`` windows mapped onto device time.

Definitions (all µs):

- host window of step *i*: the ``ProfilerStep#N`` annotation ``[ts, ts+dur)``
  (or another annotation chosen with ``--step-marker``).
- the GPU work of step *i*: every kernel / memcpy / memset whose launching
  CUDA/HIP runtime call (joined by correlation id) starts inside the host
  window, even if it runs after the host has moved on.
- the step window ``[start_i, end_i)``: ``start_1`` is the first host step's
  start, ``start_i = max(host start_i, end_{i-1})`` and
  ``end_i = max(host end_i, end of step i's last GPU activity, end_{i-1})``,
  as the TensorBoard profiler plugin cuts them (kineto tb_plugin
  ``event_parser._update_steps_duration``). Step time = ``end_i - start_i``;
  the windows do not overlap, and busy + idle = step time in each; host time
  between one step's window end and the next step's annotation (when the
  device finished first) belongs to no step.

Unlike HolisticTraceAnalysis, which always drops the last ProfilerStep, every
step is kept unless it is incomplete (a stub the profiler stopped inside, or
events lost to a truncated file: see :mod:`perfdoctor.analysis.steps.step_completeness`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

import numpy as np

from perfdoctor.analysis.steps.step_completeness import incomplete_mask
from perfdoctor.analysis.steps.step_markers import derive_steps
from perfdoctor.analysis.steps.warmup import Warmup, warmup
from perfdoctor.errors import PerfDoctorError
from perfdoctor.trace import intervals as iv
from perfdoctor.trace.join import launch_rows
from perfdoctor.trace.tables import TraceTables

PROFILER_STEP = r"^ProfilerStep#(\d+)$"


STOPPED_INSIDE = "the profiler stopped recording inside it"  # a step cut at the recording's end (the verdict reads it)


@dataclass
class Steps:
    """Step windows of one trace (arrays of equal length, µs).

    Attributes:
        numbers: the N of ``ProfilerStep#N`` (or 0..k-1 for other markers).
        names: marker names.
        host_start_us / host_end_us: host annotation windows.
        start_us / end_us: step windows on the device-aware timeline.
        device_end_us: end of each step's last GPU activity (NaN if none).
        marker: the regex used (for derived steps: what they were derived from); source: "ProfilerStep",
            "marker" (``--step-marker``), "derived" (:mod:`perfdoctor.analysis.steps.step_markers`) or "whole-trace".
        warnings: e.g. no markers found.
        warmup: first-call work in each analysed window (:mod:`perfdoctor.analysis.steps.warmup`).
        cold_dropped: leading steps left out because first-call work filled them while later steps are warm:
            (step number, step µs, warm-up µs) each; cold_dropped_warmup: their first-call work by kind.
        cut: every marker the windows were cut from, left-out steps included (a replay cuts its windows the
            same way, so a left-out step's work ends the next window as it does here); None when the analysed
            steps are all of them.
    """

    numbers: np.ndarray
    names: list[str]
    host_start_us: np.ndarray
    host_end_us: np.ndarray
    start_us: np.ndarray
    end_us: np.ndarray
    device_end_us: np.ndarray
    marker: str
    source: str
    pid: int = -1
    tid: int = -1
    warnings: list[str] = field(default_factory=list)
    warmup: Warmup | None = None
    cold_dropped: list[tuple[int, float, float]] = field(default_factory=list)
    cold_dropped_warmup: Warmup | None = None
    cut: StepCut | None = None

    def __len__(self) -> int:
        return int(self.numbers.size)

    @property
    def dur_us(self) -> np.ndarray:
        return np.asarray(self.end_us - self.start_us)

    @property
    def host_dur_us(self) -> np.ndarray:
        return np.asarray(self.host_end_us - self.host_start_us)

    def step_of(self, ts_us: np.ndarray) -> np.ndarray:
        """Index of the step window holding each time (µs, any shape; -1 outside every window). Host times between
        the first step's host start and its device-timeline start (which waits for inherited device work) are
        step 0's: the first step's own launches happen there."""
        ws, we = self.start_us, self.end_us
        if ws.size and self.host_start_us.size and self.host_start_us[0] < ws[0]:
            ws = ws.copy()
            ws[0] = self.host_start_us[0]
        step: np.ndarray = iv.containing(ts_us, (ws, we))
        return step

    def activity_step(self, tables: TraceTables, table: str) -> np.ndarray:
        """Step index of each row of a GPU table (``kernels``, ``memcpy``, ``memset``; int64, -1 in none): by the
        host time of its launch call (:meth:`step_of`), so the work a step launches is the step's even when it
        runs past the window; a row with no launch call in the trace (queued before the recording) by its own
        device start in the unextended windows, so work inherited from before the first step is in none."""
        gpu = tables.tables[table]
        if len(gpu) == 0:
            return np.empty(0, dtype=np.int64)
        rows = launch_rows(tables, table)
        hit = rows >= 0
        step = np.asarray(iv.containing(gpu["ts_us"], (self.start_us, self.end_us)), dtype=np.int64)
        if hit.any():
            step[hit] = self.step_of(tables.runtime["ts_us"][rows[hit]])
        return step

    def warmup_by_step(self) -> dict[int, float]:
        """First-call work of each step (µs; :mod:`perfdoctor.analysis.steps.warmup`): the analysed windows' and the
        left-out leading cold steps' (``cold_dropped``), by step number; {} when it was not measured."""
        out: dict[int, float] = {}
        if self.warmup is not None and self.warmup.per_window_us.size == self.numbers.size:
            out = {int(n): float(w) for n, w in zip(self.numbers.tolist(), self.warmup.per_window_us.tolist())}
        out.update({int(c[0]): float(c[2]) for c in self.cold_dropped})
        return out

    def cold_steps(self) -> list[int]:
        """Step numbers whose window first-call work fills (PD902's cold start: at least
        :data:`perfdoctor.analysis.steps.warmup.COLD_SHARE` of it), the left-out leading ones included, ascending."""
        cold = {int(c[0]) for c in self.cold_dropped}
        if self.warmup is not None and self.warmup.cold.size == self.numbers.size:
            cold.update(int(n) for n in self.numbers[self.warmup.cold].tolist())
        return sorted(cold)


@dataclass(frozen=True)
class StepCut:
    """The markers the step windows were cut from (µs arrays of shape ``(n_markers,)``) and which of them are
    analysed (``analysed``: int64 positions, ascending). ``first_start_us``: start of the first window;
    ``last_end_cap_us``: end of the last window when it was cut at the recording's end, else NaN."""

    host_start_us: np.ndarray
    host_end_us: np.ndarray
    analysed: np.ndarray
    first_start_us: float
    last_end_cap_us: float


def gpu_launch_times(tables: TraceTables, table: str) -> np.ndarray:
    """Host launch time (µs) of each row of a GPU table, via correlation id.

    Rows whose correlation has no runtime call (or no correlation) get their
    own ``ts_us`` (a launch can't be later than the start on the device).
    """
    gpu = tables.tables[table]
    if len(gpu) == 0:
        return np.empty(0)
    launch = np.array(gpu["ts_us"], dtype=np.float64)
    rows = launch_rows(tables, table)
    hit = rows >= 0
    launch[hit] = tables.runtime["ts_us"][rows[hit]]
    return launch


def _host_markers(tables: TraceTables, marker: str) -> tuple[np.ndarray, list[str], np.ndarray, np.ndarray, int, int]:
    rx = re.compile(marker)
    ann = tables.annotations
    cands = []
    for tname in ("annotations", "cpu_ops"):
        tab = tables.tables[tname]
        if len(tab) == 0:
            continue
        match = tables.names_matching(rx)[tab["name_id"]]
        if match.any():
            cands.append(tab.take(match))
            break
    if not cands:
        return np.empty(0, dtype=np.int64), [], np.empty(0), np.empty(0), -1, -1
    tab = cands[0]
    del ann
    names = tables.name_array()[tab["name_id"]].tolist()
    nums = []
    for k, n in enumerate(names):
        m = rx.search(n)
        try:
            num = int(m.group(1)) if m and m.groups() else k
            nums.append(num if -(2**63) <= num < 2**63 else k)  # a step number beyond int64 is not one
        except (ValueError, TypeError):
            nums.append(k)
    numbers = np.asarray(nums, dtype=np.int64)
    # one thread owns the steps: the one with most markers
    tids = tab["tid"]
    vals, counts = np.unique(tids, return_counts=True)
    main_tid = vals[np.argmax(counts)]
    keep = tids == main_tid
    order = np.argsort(tab["ts_us"][keep], kind="stable")
    idx = np.flatnonzero(keep)[order]
    pid = int(tab["pid"][idx[0]])
    return numbers[idx], [names[i] for i in idx], tab["ts_us"][idx], tab["end_us"][idx], pid, int(main_tid)


@dataclass(frozen=True)
class _Windows:
    """Step windows while they are cut and chosen: one entry per step in every field (µs; ``analysed``: each
    window's position among the markers it was cut from)."""

    numbers: np.ndarray
    names: list[str]
    host_start_us: np.ndarray
    host_end_us: np.ndarray
    start_us: np.ndarray
    end_us: np.ndarray
    device_end_us: np.ndarray
    analysed: np.ndarray

    def select(self, keep: np.ndarray) -> _Windows:
        """The windows at ``keep`` (a boolean mask or ascending int positions), every field alike."""
        idx = np.arange(self.numbers.size)[keep]
        return _Windows(
            numbers=self.numbers[idx],
            names=[self.names[i] for i in idx.tolist()],
            host_start_us=self.host_start_us[idx],
            host_end_us=self.host_end_us[idx],
            start_us=self.start_us[idx],
            end_us=self.end_us[idx],
            device_end_us=self.device_end_us[idx],
            analysed=self.analysed[idx],
        )


@dataclass
class _Markers:
    """The step markers found on the host (µs), the thread that owns them, the regex used and the source
    (see :attr:`Steps.source`)."""

    numbers: np.ndarray
    names: list[str]
    host_start_us: np.ndarray
    host_end_us: np.ndarray
    pid: int
    tid: int
    marker: str
    source: str


def find_steps(tables: TraceTables, marker: str | None = None) -> Steps:
    """Find the training steps of a trace and map them onto device time.

    Args:
        tables: one trace's tables.
        marker: regex for step annotations (default ``ProfilerStep#N``); a
            capturing group, if any, gives the step number.

    Returns:
        :class:`Steps`. With no ProfilerStep found, steps derived from the trace's repeating structure
        (:func:`perfdoctor.analysis.steps.step_markers.derive_steps`) and a warning naming the marker; when
        there is none, one whole-trace window and a warning.

    Raises:
        PerfDoctorError: ``marker`` is not a valid regex, or matches nothing.
        TraceFormatError: no step is completely recorded (truncated file).
    """
    warnings: list[str] = []
    found = _markers(tables, marker, warnings)
    if found.numbers.size == 0:
        return _whole_trace(tables, found.marker, marker is not None, warnings)
    gpu_tabs = [t for t in ("kernels", "memcpy", "memset") if len(tables.tables[t])]
    windows, cut = _cut_windows(tables, found, gpu_tabs, warnings)
    # windows are cut from all steps first, so leaving a step out never widens its neighbour
    drop, notes = incomplete_mask(
        tables, windows.host_start_us, windows.host_end_us, windows.device_end_us, windows.end_us
    )
    warnings.extend(notes)
    if drop.any():
        windows = windows.select(~drop)
    windows, warm, cold_dropped, dropped_warmup = _leave_out_cold_lead(tables, windows, warnings)
    cut = replace(cut, analysed=windows.analysed)
    return Steps(
        numbers=windows.numbers,
        names=windows.names,
        host_start_us=windows.host_start_us,
        host_end_us=windows.host_end_us,
        start_us=windows.start_us,
        end_us=windows.end_us,
        device_end_us=windows.device_end_us,
        marker=found.marker,
        source=found.source,
        pid=found.pid,
        tid=found.tid,
        warnings=warnings,
        warmup=warm,
        cold_dropped=cold_dropped,
        cold_dropped_warmup=dropped_warmup,
        cut=cut if windows.analysed.size < cut.host_start_us.size else None,
    )


def _markers(tables: TraceTables, marker: str | None, warnings: list[str]) -> _Markers:
    """The step markers: those matching ``marker`` (default ``ProfilerStep#N``), else, without a ``marker``,
    steps derived from the trace's repeating structure (a warning says so); none found: empty arrays.

    Raises:
        PerfDoctorError: ``marker`` is not a valid regex, or matches nothing.
    """
    rx = marker or PROFILER_STEP
    try:
        re.compile(rx)
    except re.error as exc:
        raise PerfDoctorError(f"--step-marker {rx!r}: not a valid regular expression ({exc})") from None
    numbers, names, h_start, h_end, pid, tid = _host_markers(tables, rx)
    if marker and numbers.size == 0:
        raise PerfDoctorError(f"{tables.path}: no annotation or op matches --step-marker {rx!r}")
    found = _Markers(numbers, names, h_start, h_end, pid, tid, rx, "ProfilerStep" if marker is None else "marker")
    derived = derive_steps(tables) if numbers.size == 0 and marker is None else None
    if derived is None:
        return found
    n = derived.host_start_us.size
    warnings.append(
        f"{tables.path}: no ProfilerStep#N annotations; {n} step(s) derived from "
        f"{derived.marker} (--step-marker REGEX chooses another marker)"
    )
    return _Markers(
        np.arange(n, dtype=np.int64),
        derived.names,
        derived.host_start_us,
        derived.host_end_us,
        derived.pid,
        derived.tid,
        derived.marker,
        "derived",
    )


def _whole_trace(tables: TraceTables, rx: str, given: bool, warnings: list[str]) -> Steps:
    """One window over the whole trace (no step marker found; ``given``: the user chose the marker ``rx``)."""
    lo, hi = _trace_span(tables)
    what = f"step marker /{rx}/" if given else "ProfilerStep#N annotations"
    warnings.append(
        f"{tables.path}: no {what} found; analysing the whole trace as one window (per-step numbers are not available)"
    )
    return Steps(
        numbers=np.array([0]),
        names=["whole trace"],
        host_start_us=np.array([lo]),
        host_end_us=np.array([hi]),
        start_us=np.array([lo]),
        end_us=np.array([hi]),
        device_end_us=np.array([np.nan]),
        marker=rx,
        source="whole-trace",
        warnings=warnings,
        warmup=warmup(tables, np.array([lo]), np.array([hi])),
    )


def _device_ends(tables: TraceTables, gpu_tabs: list[str], h_start: np.ndarray, h_end: np.ndarray) -> np.ndarray:
    """End (µs) of the last device activity each host window launched (NaN: none)."""
    dev_end = np.full(h_start.size, np.nan)
    for t in gpu_tabs:
        launch = gpu_launch_times(tables, t)
        k = iv.containing(launch, (h_start, h_end))
        inside = k >= 0
        if inside.any():
            ends = tables.tables[t]["end_us"][inside]
            cur = np.full(h_start.size, -np.inf)
            np.maximum.at(cur, k[inside], ends)
            cur[cur == -np.inf] = np.nan
            dev_end = np.fmax(dev_end, cur)
    return dev_end


def _cut_windows(
    tables: TraceTables, found: _Markers, gpu_tabs: list[str], warnings: list[str]
) -> tuple[_Windows, StepCut]:
    """Every marker's window on the device-aware timeline, and the cut they were made from.

    A window ends at the later of its host end and its last device activity; it starts at its host start or
    where the previous one ended, whichever is later (TensorBoard's plugin: kineto tb_plugin
    event_parser._update_steps_duration; host time between two steps belongs to neither). The first starts after
    device work inherited from before the recording; the last is cut at the last recorded event when its
    annotation runs on long after (the profiler stopped recording inside it; a warning says so).
    """
    h_start, h_end = found.host_start_us, found.host_end_us
    dev_end = _device_ends(tables, gpu_tabs, h_start, h_end)
    end = np.maximum.accumulate(np.fmax(h_end, dev_end))
    start = np.maximum(h_start, np.concatenate([[h_start[0]], end[:-1]]))
    first = _after_inherited_work(tables, gpu_tabs, float(h_start[0]), float(h_end[0]))
    if first > start[0] and first < end[0]:
        start = start.copy()
        start[0] = first
    horizon = _recorded_until(tables)
    overrun = end[-1] - horizon
    typical = float(np.median(end[:-1] - start[:-1])) if end.size > 1 else 20 * max(horizon - start[-1], 0.0)
    if overrun > max(5 * typical, 100_000.0 if end.size == 1 else 0.0) and overrun > 0:
        # the last step's annotation runs on long after anything else was recorded (more than 5 typical steps,
        # or, alone, over 20x its recorded part and 100 ms): the profiler stopped recording inside it, and the
        # unrecorded rest is not idle time; the window ends at the last event
        warnings.append(
            f"{tables.path}: step {found.numbers[-1]}'s annotation runs {(end[-1] - horizon) / 1000:,.1f} ms past "
            f"the last recorded event ({STOPPED_INSIDE}); its window is cut there"
        )
        end = end.copy()
        end[-1] = max(horizon, start[-1])
    # the cut before any step is left out: a replay cuts its windows from the same markers
    capped = end[-1] < np.fmax(h_end[-1], dev_end[-1])
    positions = np.arange(found.numbers.size)
    cut = StepCut(h_start, h_end, positions, float(start[0]), float(end[-1]) if capped else np.nan)
    windows = _Windows(found.numbers, found.names, h_start, h_end, start, end, dev_end, positions)
    return windows, cut


def _leave_out_cold_lead(
    tables: TraceTables, windows: _Windows, warnings: list[str]
) -> tuple[_Windows, Warmup, list[tuple[int, float, float]], Warmup | None]:
    """The windows without their leading cold steps (first-call work fills them while a warm step follows:
    compilation, algorithm search and lazy init are not the loop), a warning naming them; with the kept windows'
    first-call work, the left-out steps' (step number, step µs, warm-up µs) and their first-call work by kind."""
    warm = warmup(tables, windows.start_us, windows.end_us)
    lead = int(np.argmin(warm.cold)) if not warm.cold.all() else 0  # leading cold steps, when a warm one follows
    if not lead:
        return windows, warm, [], None
    start, end = windows.start_us, windows.end_us
    cold_dropped = [
        (int(windows.numbers[i]), float(end[i] - start[i]), float(warm.per_window_us[i])) for i in range(lead)
    ]
    warnings.append(
        f"{tables.path}: step(s) {', '.join(str(c[0]) for c in cold_dropped)} left out: "
        f"{sum(c[2] for c in cold_dropped) / 1000:,.1f} of their "
        f"{sum(c[1] for c in cold_dropped) / 1000:,.1f} ms are first-call work (PD902)"
    )
    dropped_warmup = warmup(tables, start[:lead], end[:lead])
    kept = windows.select(np.arange(lead, windows.numbers.size))
    return kept, warmup(tables, kept.start_us, kept.end_us), cold_dropped, dropped_warmup


def _after_inherited_work(tables: TraceTables, gpu_tabs: list[str], h_start: float, h_end: float) -> float:
    """Where the first step starts on the device timeline (µs): the end of device work inherited from before
    the recording (activities with no launch in the trace, or launched before the step) that still runs after
    the step's host start, when it ends before the step's own first device activity; else ``h_start``.

    As TensorBoard's plugin and HTA do: the first step does not absorb the previous,
    unrecorded step's kernels.
    """
    inherited_end, own_first = -np.inf, np.inf
    for t in gpu_tabs:
        tab = tables.tables[t]
        launch = gpu_launch_times(tables, t)
        unlaunched = launch == tab["ts_us"]  # no runtime call joined (see gpu_launch_times)
        old = (unlaunched | (launch < h_start)) & (tab["end_us"] > h_start)
        if old.any():
            inherited_end = max(inherited_end, float(tab["end_us"][old].max()))
        own = ~unlaunched & (launch >= h_start) & (launch < h_end)
        if own.any():
            own_first = min(own_first, float(tab["ts_us"][own].min()))
    if inherited_end == -np.inf or inherited_end > own_first:
        return h_start
    return inherited_end


def _recorded_until(tables: TraceTables) -> float:
    """End (µs) of the last recorded op, runtime call, device activity or Python function (annotations such as
    ``ProfilerStep#N`` are left out: they are what may run past the recording)."""
    ends = [
        float(tables.tables[t]["end_us"].max())
        for t in ("cpu_ops", "runtime", "kernels", "memcpy", "memset", "python_functions")
        if len(tables.tables[t])
    ]
    return max(ends) if ends else np.inf


def _trace_span(tables: TraceTables) -> tuple[float, float]:
    lo, hi = np.inf, -np.inf
    for name in ("cpu_ops", "annotations", "kernels", "memcpy", "memset", "runtime", "python_functions"):
        tab = tables.tables[name]
        if len(tab):
            lo = min(lo, float(tab["ts_us"].min()))
            hi = max(hi, float(tab["end_us"].max()))
    if lo == np.inf:
        return 0.0, 0.0
    return lo, hi
