"""Where a replayed saving comes from: the attributions before and after the what-if, subtracted (all µs).

A step window is the device's busy time in it plus its idle time, and the idle time is split by cause by the
critical path (:func:`perfdoctor.replay.attribution.critical_path`: host launch overhead, Python outside ops,
synchronization, DataLoader, other). So the replayed step's change is, exactly,

    Σ_cause (idle_before[cause] − idle_after[cause]) + (busy_before − busy_after)

means over the analysed steps, where the busy term is device work that now overlaps other device work (copies or
collectives on other streams running alongside compute once the host stops holding them back) or is shorter.
"Before" is the recording's replay (or the replay of the base a saving is measured on top of); a saving measured
against the recording also holds the replay's own error, recorded − replayed mean step, stated apart. Nothing here
is a second formula for a saving: the parts are read off the two replays the saving itself is the difference of.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from perfdoctor.replay.attribution import HOST_CAUSES, Attribution, _categories, critical_path
from perfdoctor.replay.rank import RankReplay
from perfdoctor.replay.simulate import ReplayResult, Scenario
from perfdoctor.replay.windows import replayed_windows
from perfdoctor.text import SHOWN_US, WORK_WORDS, saving_parts_text
from perfdoctor.trace import intervals as iv
from perfdoctor.trace.tables import TraceTables


@dataclass
class SavingParts:
    """A replayed saving split into what it removes, means per analysed step (µs).

    Attributes:
        idle_us: per idle cause (:data:`perfdoctor.replay.attribution.HOST_CAUSES`), device idle of that cause
            before − after.
        busy_us: device busy time before − after (device work overlapping more, or shorter).
        work_us: of ``busy_us``, the device work itself before − after (the activities' summed time in the steps:
            fewer or shorter activities); the rest, ``busy_us − work_us``, is device work overlapping more.
        error_us: recorded − replayed mean step (the replay's own error; 0 for a saving on top of a base).
        overlapping: categories whose time alone on the device (no other category running) fell, most first.
    """

    idle_us: dict[str, float]
    busy_us: float
    error_us: float = 0.0
    overlapping: list[str] = field(default_factory=list)
    work_us: float = 0.0

    def scaled(self, ratio: float) -> SavingParts:
        """Every part × ``ratio`` (a saving scaled to the unprofiled step, :mod:`perfdoctor.replay.unprofiled`)."""
        return SavingParts(
            idle_us={c: v * ratio for c, v in self.idle_us.items()},
            busy_us=self.busy_us * ratio,
            error_us=self.error_us * ratio,
            overlapping=list(self.overlapping),
            work_us=self.work_us * ratio,
        )

    @property
    def total_us(self) -> float:
        """The saving the parts add up to."""
        return float(sum(self.idle_us.values())) + self.busy_us + self.error_us

    def text(self, lead: tuple[str, ...] = ()) -> str:
        """The parts as a sum in ms, the causes in ``lead`` first and then by size: "11.41 ms launch idle (…) +
        4.35 ms Python idle (…)" (:func:`perfdoctor.text.saving_parts_text`)."""
        return saving_parts_text(self.idle_us, self.busy_us, self.work_us, self.error_us, self.overlapping, lead)


def _state(
    tables: TraceTables, rr: RankReplay, res: ReplayResult, device: int, cats: np.ndarray, att: Attribution | None
) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray], dict[str, float]]:
    """(busy µs per step, device work µs per step (activities summed), idle µs per step by cause, µs of each
    category alone on the device over the steps) of the replay ``res``; ``att``: its attribution when already
    built (else built here, host times moved)."""
    g = rr.graph
    ws, we = replayed_windows(res, rr.windows)
    on = g.act_device == device
    busy_set = iv.union(res.act_start_us[on], res.act_end_us[on])
    span = iv.union(ws, we)
    busy = iv.per_window(busy_set, ws, we)
    work = _work_per_window(res.act_start_us[on], res.act_end_us[on], ws, we)
    gaps = iv.complement(busy_set, float(ws[0]), float(we[-1])) if ws.size else iv.EMPTY
    att = critical_path(tables, rr, res) if att is None else att
    idle = att.idle_causes(gaps, ws, we)
    return busy, work, idle, _alone(res.act_start_us[on], res.act_end_us[on], cats[on], span)


def _work_per_window(start_us: np.ndarray, end_us: np.ndarray, ws: np.ndarray, we: np.ndarray) -> np.ndarray:
    """Summed time (µs) of the activities ``[start_us, end_us)`` inside each window ``[ws, we)`` (sorted,
    disjoint), overlapping activities counted as often as they run. Each activity is clipped to the windows it
    spans, one window a pass (passes = the most windows one activity spans, usually 1)."""
    out = np.zeros(ws.size)
    if ws.size == 0 or start_us.size == 0:
        return out
    k = np.searchsorted(we, start_us, side="right")  # the first window ending after the activity starts
    idx = np.arange(start_us.size)
    while True:
        live = k < ws.size
        idx, k = idx[live], k[live]
        if idx.size == 0:
            return out
        part = np.minimum(end_us[idx], we[k]) - np.maximum(start_us[idx], ws[k])
        out += np.bincount(k, weights=np.maximum(part, 0.0), minlength=ws.size)
        more = end_us[idx] > we[k]  # runs on past this window's end: the next window may hold more of it
        idx, k = idx[more], k[more] + 1


def _alone(start_us: np.ndarray, end_us: np.ndarray, cats: np.ndarray, span: iv.Intervals) -> dict[str, float]:
    """µs inside ``span`` during which exactly one category of activities runs, per category (activities
    ``start_us``/``end_us``/``cats``, shape ``(n,)``). One sweep over every category's union: where the running
    count of categories is 1, the running sum of their codes names the one."""
    names, code = _codes(cats)
    pts, dn, dc = [], [], []
    for k in range(names.size):
        m = code == k
        s, e = iv.intersect(iv.union(start_us[m], end_us[m]), span)
        pts += [s, e]
        dn += [np.ones(s.size), -np.ones(e.size)]
        dc += [np.full(s.size, float(k)), np.full(e.size, -float(k))]
    if not pts or sum(p.size for p in pts) == 0:
        return {str(c): 0.0 for c in names.tolist()}
    t, n_on, c_on = np.concatenate(pts), np.concatenate(dn), np.concatenate(dc)
    order = np.argsort(t, kind="stable")
    t, count, which = t[order], np.cumsum(n_on[order]), np.cumsum(c_on[order])
    seg = np.diff(t)
    one = (count[:-1] == 1) & (seg > 0)  # a segment's coverage is the count after all points at its start
    per = np.bincount(np.rint(which[:-1][one]).astype(np.int64), weights=seg[one], minlength=names.size)
    return {str(c): float(v) for c, v in zip(names.tolist(), per.tolist(), strict=True)}


def _codes(cats: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sorted distinct category names, each activity's index into them) of an object array of names."""
    first: dict[str, int] = dict.fromkeys(cats.tolist(), 0)
    names = np.array(sorted(first), dtype=object)
    index = {c: i for i, c in enumerate(names.tolist())}
    return names, np.fromiter(map(index.__getitem__, cats.tolist()), dtype=np.int64, count=cats.size)


def saving_parts(
    tables: TraceTables,
    rr: RankReplay,
    scenario: Scenario,
    device: int,
    base: Scenario | None = None,
    recorded: Attribution | None = None,
) -> SavingParts:
    """The parts of the saving of ``scenario`` on ``device`` (the rank's primary device id), against the recording
    (``base`` None: the saving recorded − replayed, the replay's error a part of its own) or against ``base`` (the
    scenario a saving on top of another fix is measured from). Both replays hold the collectives as
    :meth:`perfdoctor.replay.rank.RankReplay.step_times` does. ``recorded``: the recording's attribution
    (:func:`perfdoctor.replay.attribution.critical_path` of ``rr``) when the caller has it."""
    before = rr.baseline if base is None else rr.replayed(base)
    after = rr.replayed(scenario)
    cats = _categories(tables, rr)
    if base is None and recorded is None:
        recorded = critical_path(tables, rr)
    b_busy, b_work, b_idle, b_alone = _state(tables, rr, before, device, cats, recorded if base is None else None)
    a_busy, a_work, a_idle, a_alone = _state(tables, rr, after, device, cats, None)
    n = max(b_busy.size, 1)
    idle_us = {c: float((b_idle[c] - a_idle[c]).sum()) / n for c in HOST_CAUSES}
    busy_us = float((b_busy - a_busy).sum()) / n
    work_us = float((b_work - a_work).sum()) / n
    error = 0.0
    if base is None and rr.recorded_step_us.size:
        ws, we = replayed_windows(before, rr.windows)
        error = float(rr.recorded_step_us.mean() - (we - ws).mean())
    fell = {c: (b_alone.get(c, 0.0) - a_alone.get(c, 0.0)) / n for c in b_alone}
    # copies and collectives first: once they overlap compute, compute's time alone falls by as much
    order = sorted(fell.items(), key=lambda cv: (cv[0] not in WORK_WORDS, -cv[1]))
    overlapping = [c for c, v in order if v > max(SHOWN_US, 0.1 * busy_us)]
    return SavingParts(idle_us=idle_us, busy_us=busy_us, error_us=error, overlapping=overlapping, work_us=work_us)
