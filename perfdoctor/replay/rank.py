"""One rank's replay: its graph, the replay of the recording, and how closely that reproduces each step (µs).

:func:`replay_rank` builds the graph, replays the recording and compares the replayed step windows with the
analysed ones. The replay is trusted when the mean step is within :data:`MAX_MEAN_ERROR` and every step within
:data:`MAX_STEP_ERROR` of the recording, and at least :data:`MIN_LAUNCH_JOIN` of the device activities join a
launch call; otherwise ``fallback`` says why, and savings derived from it are labelled upper bounds.
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from perfdoctor.replay.collective_floor import CollectiveFloor, recorded_floor
from perfdoctor.replay.graph import ReplayGraph, build_graph
from perfdoctor.replay.simulate import ReplayResult, Scenario, replay
from perfdoctor.replay.transforms import WhatIf
from perfdoctor.replay.windows import StepWindows, replayed_windows
from perfdoctor.trace.tables import TraceTables

if TYPE_CHECKING:
    from perfdoctor.analysis.steps.steps import Steps
    from perfdoctor.replay.unprofiled import Unprofiled

MAX_MEAN_ERROR = 0.02  # mean replayed step within 2% of the recorded one
MAX_STEP_ERROR = 0.05  # and each step within 5%
MIN_LAUNCH_JOIN = 0.5  # below this share of activities with a launch record, the host→device edges are guesses


@dataclass
class RankReplay:
    """The replay of one rank.

    Attributes:
        graph / baseline: the graph and its replay with the recorded durations.
        windows: the analysed steps' host annotations (what a replay's step windows are cut from).
        recorded_step_us / replayed_step_us: per analysed step (shape ``(n_steps,)``).
        fallback: why savings from this replay are not trusted (None when they are).
    """

    graph: ReplayGraph
    baseline: ReplayResult
    windows: StepWindows
    recorded_step_us: np.ndarray
    replayed_step_us: np.ndarray
    fallback: str | None
    whatifs: dict[str, WhatIf] = field(default_factory=dict)  # rule code -> the WhatIf its saving was replayed with
    fired: list[str] = field(default_factory=list)  # codes of the rules that fired with a positive saving
    # the other ranks unchanged: the bounds on this rank's collective kernels in every what-if (collective_floor.py)
    peers: CollectiveFloor | None = None
    # a ``perfdoctor profile`` run's unprofiled step (perfdoctor.replay.unprofiled.Unprofiled): savings are its
    unprofiled: Unprofiled | None = None
    # replayed step times per scenario already replayed (key: _scenario_key; with the peers they were bounded by):
    # several rules ask for the same one
    _replayed: dict[bytes, tuple[CollectiveFloor | None, np.ndarray]] = field(
        default_factory=dict, repr=False, compare=False
    )
    # the last scenario replayed in full (key, peers, result): a rule asks for a what-if's step times and then for
    # the parts of its saving, two reads of one replay (one entry: a 232,023-node replay holds ~7 MB of arrays)
    _last: tuple[bytes, CollectiveFloor | None, ReplayResult] | None = field(default=None, repr=False, compare=False)

    @property
    def step_errors(self) -> np.ndarray:
        """Relative error of each replayed step (replayed − recorded) / recorded."""
        return np.asarray((self.replayed_step_us - self.recorded_step_us) / np.maximum(self.recorded_step_us, 1e-9))

    @property
    def mean_error(self) -> float:
        """Relative error of the mean replayed step."""
        rec = float(self.recorded_step_us.mean()) if self.recorded_step_us.size else 0.0
        rep = float(self.replayed_step_us.mean()) if self.replayed_step_us.size else 0.0
        return (rep - rec) / rec if rec > 0 else 0.0

    def replayed(self, scenario: Scenario) -> ReplayResult:
        """The replay under ``scenario``, the rank's collectives ending no earlier than its peers let them
        (:attr:`peers`, :mod:`perfdoctor.crossrank.bounds`; moved by the program-wide part of a combination).
        The result is shared with later calls for the same scenario: read it, do not edit it."""
        sc, key = self._keyed(scenario)
        return self._replayed_keyed(sc, key)

    def _keyed(self, scenario: Scenario) -> tuple[Scenario, bytes]:
        """``scenario`` with recorded durations given as such (None), and its digest (b"": the recording's own
        replay, nothing edited and no peer bound added); one digest of its arrays per request."""
        if scenario.act_dur_us is not None and np.array_equal(scenario.act_dur_us, self.graph.act_dur_us):
            scenario = dataclasses.replace(scenario, act_dur_us=None)  # the recorded durations (a what-if found none)
        if not scenario.edits_graph and (self.peers is None or scenario.peers_move or self.peers.act.size == 0):
            return scenario, b""
        return scenario, _scenario_key(scenario)

    def _replayed_keyed(self, scenario: Scenario, key: bytes) -> ReplayResult:
        if key == b"":
            return self.baseline
        last = self._last
        if last is not None and last[0] == key and last[1] is self.peers:
            return last[2]
        res = self._replay_bounded(scenario)
        self._last = (key, self.peers, res)
        return res

    def _replay_bounded(self, scenario: Scenario) -> ReplayResult:
        if self.peers is not None:
            moved = None
            if not scenario.peers_move and scenario.peers_with is not None:
                moved = self.baseline.act_end_us - replay(self.graph, scenario.peers_with).act_end_us
            scenario = self.peers.apply(scenario, self.graph.n_act, moved)
        return replay(self.graph, scenario)

    def step_times(self, scenario: Scenario | None = None) -> np.ndarray:
        """Replayed duration of every analysed step under ``scenario`` (µs, shape ``(n_steps,)``; None: the
        recording's replay), as :meth:`replayed` replays it; each distinct scenario is replayed once."""
        sc, key = (None, b"") if scenario is None else self._keyed(scenario)
        known = self._replayed.get(key)
        if known is None or known[0] is not self.peers:
            res = self.baseline if sc is None else self._replayed_keyed(sc, key)
            start, end = replayed_windows(res, self.windows)
            known = self._replayed[key] = (self.peers, np.asarray(end - start))
        return np.array(known[1], copy=True)

    def fixed_step_times(self, parts: list[WhatIf]) -> np.ndarray:
        """Per analysed step (µs, shape ``(n_steps,)``): the step savings are taken from, replayed with the
        what-ifs ``parts`` (:class:`~perfdoctor.replay.transforms.WhatIf`) applied together.

        That step is the recording, or for a ``perfdoctor profile`` run (:attr:`unprofiled`) its unprofiled step:
        the profiler's per-event overhead removed in the replay, or the replayed steps scaled by steady ÷ window
        (:mod:`perfdoctor.replay.unprofiled`). Without ``parts`` and without :attr:`unprofiled`: the recorded steps.
        """
        u = self.unprofiled
        scale = u.ratio if u is not None and u.whatif is None else 1.0
        both = self.fixed_whatif(parts)
        if both is None:
            return np.asarray(self.recorded_step_us * scale, dtype=np.float64)
        return np.asarray(self.step_times(both.scenario) * scale, dtype=np.float64)

    def fixed_whatif(self, parts: list[WhatIf]) -> WhatIf | None:
        """The what-ifs ``parts`` together, with the unprofiled step's own what-if first where there is one (the
        one :meth:`fixed_step_times` replays), or None when that leaves nothing to replay."""
        from perfdoctor.replay.transforms import combine

        u = self.unprofiled
        if u is not None and u.whatif is not None:
            parts = [u.whatif, *parts]
        if not parts:
            return None
        g = self.graph
        return parts[0] if len(parts) == 1 else combine("fix-all", parts, g.n_act, g.n_blk, g.act_dur_us)

    @property
    def base_step_us(self) -> float:
        """Mean of :meth:`fixed_step_times` without a fix (µs): the step every saving of this rank is taken from."""
        return float(self.fixed_step_times([]).mean()) if self.recorded_step_us.size else 0.0

    def fix_all(self, codes: list[str]) -> tuple[float, float] | None:
        """(mean step the savings are taken from, replayed mean step with the what-ifs of ``codes`` applied
        together) in µs (:meth:`fixed_step_times`), or None when none of them was replayed."""
        parts = [self.whatifs[c] for c in codes if c in self.whatifs]
        if not parts:
            return None
        return self.base_step_us, float(self.fixed_step_times(parts).mean())

    def fix_all_scenario(self, codes: list[str]) -> Scenario | None:
        """The what-ifs of ``codes`` together, as :meth:`fixed_step_times` replays them (a ``perfdoctor profile``
        run's unprofiled what-if included), without the peers' bounds; None when none of them was replayed."""
        from perfdoctor.replay.transforms import combine

        parts = [self.whatifs[c] for c in codes if c in self.whatifs]
        if not parts:
            return None
        u = self.unprofiled
        if u is not None and u.whatif is not None:
            parts = [u.whatif, *parts]
        g = self.graph
        return combine("fix-all", parts, g.n_act, g.n_blk, g.act_dur_us).scenario

    def base_scenario(self) -> Scenario | None:
        """The scenario of the step savings are taken from (:meth:`fixed_step_times` without a fix): a
        ``perfdoctor profile`` run's unprofiled what-if, else None (the recording)."""
        u = self.unprofiled
        return u.whatif.scenario if u is not None and u.whatif is not None else None

    @property
    def step_scale(self) -> float:
        """The factor :meth:`fixed_step_times` scales replayed steps by (steady ÷ window of a ``perfdoctor profile``
        run without a per-event overhead what-if; else 1)."""
        u = self.unprofiled
        return float(u.ratio) if u is not None and u.whatif is None else 1.0

    def to_dict(self) -> dict[str, Any]:
        errs = self.step_errors
        both = self.fix_all(self.fired) if self.fired else None
        codes = [c for c in self.fired if c in self.whatifs]
        fix_all = (
            None
            if both is None
            else {
                "codes": codes,
                "recorded_mean_step_us": both[0],
                "replayed_mean_step_us": both[1],
            }
        )
        out = {
            "fix_all": fix_all,
            "recorded_mean_step_us": float(self.recorded_step_us.mean()) if errs.size else 0.0,
            "replayed_mean_step_us": float(self.replayed_step_us.mean()) if errs.size else 0.0,
            "mean_error": self.mean_error,
            "max_step_error": float(np.abs(errs).max()) if errs.size else 0.0,
            "n_activities": self.graph.n_act,
            "n_blocking_calls": self.graph.n_blk,
            "assumptions": list(self.graph.assumptions),
            "fallback": self.fallback,
        }
        if self.unprofiled is not None:  # absent from a trace's report (no run directory)
            out["unprofiled"] = self.unprofiled_dict()
        return out

    def unprofiled_dict(self) -> dict[str, Any] | None:
        """The report's ``replay.unprofiled`` (:class:`perfdoctor.model.report.UnprofiledSection`), or None."""
        u = self.unprofiled
        if u is None:
            return None
        step = self.base_step_us
        return {
            "method": u.method,
            "per_event_us": u.per_event_us,
            "events_per_step": u.events_per_step,
            "window_step_us": u.window_step_us,
            "steady_step_us": u.steady_step_us,
            "step_us": step,
            "text": u.text(step),
            "host_op_window_us": u.host_op_window_us,
            "host_op_unprofiled_us": u.host_op_unprofiled_us,
            "fault_us": u.fault_us,
            "extra_faults_per_step": u.faults.extra_per_step if u.faults is not None else 0.0,
            "us_per_fault": u.faults.us_per_fault if u.faults is not None else 0.0,
        }


def _scenario_key(sc: Scenario) -> bytes:
    """A digest of every field of ``sc`` but its name (what a replay reads): equal digests, equal replays."""
    h = hashlib.blake2b(digest_size=20)
    for f in dataclasses.fields(sc):
        if f.name != "name":
            h.update(f"|{f.name}:".encode())
            _digest(h, getattr(sc, f.name))
    return h.digest()


def _digest(h: hashlib.blake2b, v: object) -> None:
    """Add one scenario value to the digest ``h``: None, a number, a nested scenario, a dict or tuple of them, or
    an array (its dtype, shape and bytes)."""
    if v is None or isinstance(v, (bool, int, float, str)):
        h.update(repr(v).encode())
    elif isinstance(v, Scenario):
        h.update(_scenario_key(v))
    elif isinstance(v, dict):
        for k in sorted(v):
            h.update(f"{k!r}=".encode())
            _digest(h, v[k])
    elif isinstance(v, (tuple, list)):
        h.update(f"({len(v)}".encode())
        for x in v:
            _digest(h, x)
    else:
        a = np.ascontiguousarray(v)
        h.update(f"{a.dtype.str}{a.shape}".encode())
        h.update(a.tobytes())


def _host_span(tables: TraceTables) -> tuple[float, float, int]:
    """(first start, last end, process) of the host's ops, annotations and runtime calls (µs); the process is the
    one with the most runtime calls (-1 without any)."""
    lo, hi = np.inf, -np.inf
    for name in ("cpu_ops", "annotations", "runtime", "python_functions"):
        tab = tables.tables[name]
        if len(tab):
            lo, hi = min(lo, float(tab["ts_us"].min())), max(hi, float(tab["end_us"].max()))
    rt = tables.runtime
    pid = int(np.bincount(rt["pid"] - rt["pid"].min()).argmax() + rt["pid"].min()) if len(rt) else -1
    return lo, hi, pid


def _windows(steps: Steps, tables: TraceTables) -> StepWindows:
    whole = steps.source == "whole-trace"
    if whole:
        lo, hi, pid = _host_span(tables)
        if np.isfinite(lo):
            # the window's bounds move with the host's first/last event and the replayed device activities
            return StepWindows(
                pid=pid, host_start_us=np.array([lo]), host_end_us=np.array([hi]), first_start_us=lo, whole_trace=True
            )
    cut = getattr(steps, "cut", None)
    if cut is not None:  # steps were left out: cut the replay's windows from every marker, as the recording's
        return StepWindows(
            pid=int(steps.pid),
            host_start_us=np.asarray(steps.host_start_us, dtype=np.float64),
            host_end_us=np.asarray(steps.host_end_us, dtype=np.float64),
            first_start_us=cut.first_start_us,
            last_end_cap_us=cut.last_end_cap_us,
            cut_host_start_us=np.asarray(cut.host_start_us, dtype=np.float64),
            cut_host_end_us=np.asarray(cut.host_end_us, dtype=np.float64),
            analysed=np.asarray(cut.analysed, dtype=np.int64),
        )
    cap = float("nan")
    if len(steps) and not whole:
        last_host_end = max(float(steps.host_end_us[-1]), float(np.nan_to_num(steps.device_end_us[-1], nan=-np.inf)))
        if float(steps.end_us[-1]) < last_host_end:
            cap = float(steps.end_us[-1])
    return StepWindows(
        pid=int(steps.pid),
        host_start_us=np.asarray(steps.host_start_us, dtype=np.float64),
        host_end_us=np.asarray(steps.host_end_us, dtype=np.float64),
        first_start_us=float(steps.start_us[0]) if len(steps) else 0.0,
        last_end_cap_us=cap,
        whole_trace=whole,
    )


def _collective_floor(rr: RankReplay, tables: TraceTables, steps: Steps) -> CollectiveFloor | None:
    """The rank's collective kernels bounded by their recorded ends
    (:func:`perfdoctor.replay.collective_floor.recorded_floor`; the peers' arrivals, when known, replace them later:
    :mod:`perfdoctor.jobs.rounds`), with their transfer/wait split keyed by kernel name, ``In msg nelems`` and
    ``dtype``, over the analysed steps (``steps``)."""
    from perfdoctor.replay.activities import ACT_TABLES
    from perfdoctor.replay.kernel_classes import kernel_classes

    dist = tables.metadata.get("distributedInfo")
    world = dist.get("world_size") if isinstance(dist, dict) else None
    cat, _, _ = kernel_classes(tables, rr.graph)
    g = rr.graph
    comm = np.flatnonzero(cat == "communication")
    tab = tables.tables[ACT_TABLES[0]]
    rows = g.act_row[comm]
    kern = g.act_table[comm] == 0
    cols = [tab[c] if c in tab else None for c in ("name_id", "in_nelems", "dtype")]
    key = [
        tuple(col[r] if (col is not None and k) else None for col in cols) + (int(g.act_table[a]),)
        for a, r, k in zip(comm.tolist(), rows.tolist(), kern.tolist())
    ]
    ws = np.asarray(steps.start_us, dtype=np.float64) if len(steps) else np.empty(0)
    we = np.asarray(steps.end_us, dtype=np.float64) if len(steps) else np.empty(0)
    k = np.searchsorted(ws, g.act_ts_us[comm], side="right") - 1
    inside = (k >= 0) & (g.act_ts_us[comm] < we[np.maximum(k, 0)]) if ws.size else np.zeros(comm.size, bool)
    return recorded_floor(
        g.act_end_us, comm, world if isinstance(world, int) else 0, g.act_dur_us, key, (int(ws.size), inside)
    )


def replay_rank(tables: TraceTables, steps: Steps) -> RankReplay:
    """Build and replay one rank; ``steps`` is its :class:`~perfdoctor.analysis.steps.steps.Steps`."""
    graph = build_graph(tables)
    base = replay(graph)
    win = _windows(steps, tables)
    rec = np.asarray(steps.end_us - steps.start_us, dtype=np.float64)
    start, end = replayed_windows(base, win)
    rr = RankReplay(
        graph=graph, baseline=base, windows=win, recorded_step_us=rec, replayed_step_us=end - start, fallback=None
    )
    rr.peers = _collective_floor(rr, tables, steps)
    joined = float((graph.act_launch >= 0).mean()) if graph.n_act else 1.0
    if joined < MIN_LAUNCH_JOIN:
        rr.fallback = (
            f"only {100 * joined:.0f}% of the device activities have a launch call in the trace (missing "
            "correlation ids or a sampled trace): host→device dependencies are unknown"
        )
    elif rec.size and (abs(rr.mean_error) > MAX_MEAN_ERROR or float(np.abs(rr.step_errors).max()) > MAX_STEP_ERROR):
        rr.fallback = (
            f"the replay does not reproduce the recording (mean step {100 * rr.mean_error:+.1f}%, worst "
            f"step {100 * float(np.abs(rr.step_errors).max()):.1f}% off)"
        )
    return rr
