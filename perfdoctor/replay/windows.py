"""Step windows of a replayed graph, cut the way :mod:`perfdoctor.analysis.steps.steps` cuts the recorded ones (µs).

A step's work is its host annotation ``[host_start, host_end)`` and every device activity launched inside it;
``end_i = max(replayed host end_i, replayed end of its last activity, end_{i-1})`` and
``start_i = max(replayed host start_i, end_{i-1})``;
the first step starts at the replayed time of the recorded first window start (``end_{-1}``), so no window is
shorter than 0.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from perfdoctor.replay.simulate import ReplayResult


@dataclass(frozen=True)
class StepWindows:
    """Host annotations of the analysed steps on the step-owning process ``pid`` (arrays of shape ``(n_steps,)``,
    µs) and the recorded start of the first window. ``last_end_cap_us``: the recorded end of the last window when
    the analysis cut it at the end of the recording (the annotation ran on past it), else NaN. ``whole_trace``:
    no step markers, one window from the first to the last event (its bounds move with the replayed events)."""

    pid: int
    host_start_us: np.ndarray
    host_end_us: np.ndarray
    first_start_us: float
    last_end_cap_us: float = float("nan")
    whole_trace: bool = False
    # when steps were left out (cold or incomplete): every marker the recorded windows were cut from and the
    # positions of the analysed ones among them; first_start_us / last_end_cap_us then refer to this cut
    cut_host_start_us: np.ndarray | None = None
    cut_host_end_us: np.ndarray | None = None
    analysed: np.ndarray | None = None


def replayed_windows(res: ReplayResult, w: StepWindows) -> tuple[np.ndarray, np.ndarray]:
    """``(start_us, end_us)`` of every analysed step in the replay (shape ``(n_steps,)``)."""
    if w.whole_trace:
        return _whole_trace_window(res, w)
    if w.cut_host_start_us is None or w.cut_host_end_us is None or w.analysed is None:
        return _cut(res, w, w.host_start_us, w.host_end_us)
    start, end = _cut(res, w, w.cut_host_start_us, w.cut_host_end_us)
    return start[w.analysed], end[w.analysed]


def _cut(
    res: ReplayResult, w: StepWindows, host_start: np.ndarray, host_end: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Windows cut from the markers ``[host_start, host_end)`` (recorded µs) on the replayed timeline."""
    g = res.graph
    n = host_start.size
    he = res.host_time(w.pid, host_end)
    dev_end = np.full(n, -np.inf)
    if g.n_act and n:
        lt = g.act_launch_ts_us
        k = np.searchsorted(host_start, lt, side="right") - 1
        inside = (k >= 0) & (lt < host_end[np.maximum(k, 0)])
        np.maximum.at(dev_end, k[inside], res.act_end_us[inside])
    if n and w.first_start_us > float(host_start[0]):
        # the first window starts where device work inherited from before the recording ends: that work has no
        # launch in the trace and keeps its recorded times
        first = w.first_start_us
    else:
        first = float(res.host_time(w.pid, np.array([w.first_start_us]))[0])
    # end_{-1} = the first window's start, as in the recorded cut: no window ends before it starts (without this
    # floor a first window that starts after its own host annotation ended replayed to minus that gap)
    end = np.maximum.accumulate(np.maximum(np.maximum(he, dev_end), first))
    if np.isfinite(w.last_end_cap_us) and n:
        # the recording stopped inside the last step: its window ends where the recording's last event ends
        cap = float(res.host_time(w.pid, np.array([w.last_end_cap_us]))[0])
        end[-1] = max(min(end[-1], cap), end[-2] if n > 1 else first)
    # a step starts at its host start or where the previous one ended, whichever is later (TensorBoard's plugin)
    start = np.maximum(
        np.concatenate([[first], end[:-1]]), np.concatenate([[first], res.host_time(w.pid, host_start)[1:]])
    )
    return start, end


def _whole_trace_window(res: ReplayResult, w: StepWindows) -> tuple[np.ndarray, np.ndarray]:
    """One window spanning the recorded host span and every replayed activity."""
    lo = float(res.host_time(w.pid, w.host_start_us[:1])[0])
    hi = float(res.host_time(w.pid, w.host_end_us[-1:])[0])
    if res.graph.n_act:
        lo, hi = min(lo, float(res.act_start_us.min())), max(hi, float(res.act_end_us.max()))
    return np.array([lo]), np.array([hi])
