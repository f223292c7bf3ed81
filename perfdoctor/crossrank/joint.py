"""Ranks replayed together: a collective ends when the last rank has arrived and the data has moved (all µs).

Replayed alone, a rank's collective kernels keep their recorded durations, which hold the wait for the last peer:
a what-if that makes the rank arrive earlier then ends its collectives earlier too, though its peers have not
moved. Replayed jointly, the k-th collective kernel of every rank (start order on each rank's device; the same
program issues the same collectives in the same order) takes its transfer time, the shortest recorded copy, and
ends no earlier than

    T_k = max over ranks p of (start[p, k] − offset[p]) + transfer_k       (rank r's clock: T_k + offset[r])

(``offset``: one clock offset per rank, the median over the collectives of ``end[r, k] − end[0, k]``, as
:func:`perfdoctor.crossrank.collectives.clock_offsets` computes it). A what-if on one rank thus moves the others'
waits. The ranks are replayed again with the bounds of the previous round until no bound moves: a round only
delays collectives, and each settles at least the earliest unsettled one, so it ends within n + 1 rounds.

:func:`match` refuses (None and the reason) when the ranks ran different numbers of collective kernels, when the
k-th copies do not end together (:func:`perfdoctor.crossrank.collectives.copies_end_together`), or when the
joint replay of the recording misses a rank's recorded steps by more than
:data:`perfdoctor.replay.rank.MAX_MEAN_ERROR`; each rank is then replayed alone.

**A job's ranks from their summaries.** A job's reducer holds rank summaries, not graphs, so each worker sends
the little a joint replay needs (:func:`joint_inputs`, a :class:`JointInputs`): its collectives' recorded starts and
ends, and per scenario (the recording, and the rank's fixes together) a :class:`Response`: for each collective's
start and each analysed step's window start and end, its time with every collective taking no time and waiting
for no one (``free``), the latest collective whose end it waits for (``up``, -1 none) and the replay's longest path
from that end to it (``d``). A replay is max-plus in the collective ends ``e_j``, so every such time is
``max(c, max_j (e_j + D_j))``; :func:`solve` takes ``max(free, e_up + d)``: exact when the latest collective
upstream dominates the earlier ones (the collectives of one stream run in order), a lower bound otherwise. Walking
the collectives in order, ``T_k`` (above) follows from the ranks' starts, each rank's collective ``k`` ends at
``T_k + offset[r]``, and the step windows follow from those ends. ``up`` and ``d`` come from one replay with the
collective ends pinned ``M`` apart (``e_j = lo + M (j + 1)``, ``M`` four times the free replay's span): the latest
upstream collective then dominates every time downstream, which reads ``lo + M (up + 1) + d``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import msgspec
import numpy as np

from perfdoctor.crossrank.collectives import clock_offsets, copies_end_together
from perfdoctor.replay.rank import MAX_MEAN_ERROR, RankReplay
from perfdoctor.replay.simulate import ReplayResult, Scenario, replay
from perfdoctor.replay.windows import replayed_windows
from perfdoctor.trace.tables import TraceTables


@dataclass
class JointReplay:
    """Matched ranks: ``coll[r]`` the activity indices of rank r's collectives (shape ``(n,)``, the same n for
    every rank), ``offset_us`` (shape ``(n_ranks,)``) and ``transfer_us`` (shape ``(n,)``)."""

    ranks: list[RankReplay]
    coll: list[np.ndarray]
    offset_us: np.ndarray
    transfer_us: np.ndarray

    def replay(self, scenarios: list[Scenario | None] | None = None) -> list[ReplayResult]:
        """Every rank replayed under its scenario (None: the recording), collectives bounded as above."""
        scs = scenarios or [None] * len(self.ranks)
        base: list[Scenario] = []
        for rr, sc, idx in zip(self.ranks, scs, self.coll):
            g = rr.graph
            own = dataclasses.replace(sc) if sc is not None else Scenario()
            dur = (g.act_dur_us if own.act_dur_us is None else np.asarray(own.act_dur_us, dtype=np.float64)).copy()
            dur[idx] = np.minimum(dur[idx], self.transfer_us)
            own.act_dur_us = dur
            base.append(own)
        bound = np.full(self.transfer_us.size, -np.inf)  # T_k on the first rank's clock
        for _ in range(self.transfer_us.size + 2):
            res = []
            for r, (rr, sc, idx) in enumerate(zip(self.ranks, base, self.coll)):
                em = np.full(rr.graph.n_act, -np.inf) if sc.act_end_min_us is None else sc.act_end_min_us.copy()
                em[idx] = np.maximum(em[idx], bound + self.offset_us[r])
                res.append(replay(rr.graph, dataclasses.replace(sc, act_end_min_us=em)))
            arrival = np.array(
                [x.act_start_us[idx] - self.offset_us[r] for r, (x, idx) in enumerate(zip(res, self.coll))]
            )
            new = arrival.max(axis=0) + self.transfer_us
            if np.allclose(new, bound, rtol=0.0, atol=1e-6):
                break
            bound = new
        return res

    def step_times(self, scenarios: list[Scenario | None] | None = None) -> list[np.ndarray]:
        """Replayed duration of every analysed step of each rank (µs, shape ``(n_steps,)`` per rank)."""
        out = []
        for rr, res in zip(self.ranks, self.replay(scenarios)):
            start, end = replayed_windows(res, rr.windows)
            out.append(np.asarray(end - start))
        return out


def _collectives(rr: RankReplay, tables: TraceTables) -> np.ndarray:
    """Activity indices of the rank's collective kernels on its busiest device, in start order."""
    from perfdoctor.replay.kernel_classes import kernel_classes

    g = rr.graph
    cat, _, _ = kernel_classes(tables, rr.graph)
    comm = np.flatnonzero(cat == "communication")
    if comm.size == 0:
        return comm
    dev = int(np.bincount(g.act_device[comm] - g.act_device[comm].min()).argmax() + g.act_device[comm].min())
    comm = comm[g.act_device[comm] == dev]
    return np.asarray(comm[np.argsort(g.act_ts_us[comm], kind="stable")])


def match(ranks: list[RankReplay], tables: list[TraceTables]) -> tuple[JointReplay | None, str]:
    """The ranks' collectives matched for a joint replay, or (None, why not) (see the module docstring)."""
    if len(ranks) < 2:
        return None, "single rank"
    coll = [_collectives(rr, t) for rr, t in zip(ranks, tables)]
    counts = {c.size for c in coll}
    if len(counts) != 1 or 0 in counts:
        return None, f"the ranks ran different numbers of collective kernels ({', '.join(str(c.size) for c in coll)})"
    starts = np.array([rr.graph.act_ts_us[c] for rr, c in zip(ranks, coll)])
    durs = np.array([rr.graph.act_dur_us[c] for rr, c in zip(ranks, coll)])
    ends = starts + durs
    if not copies_end_together(ends, durs):
        return None, "the k-th collective kernels of the ranks do not end together (not the same collectives)"
    jr = JointReplay(ranks, coll, clock_offsets(ends), durs.min(axis=0))
    for rr, rep in zip(ranks, jr.step_times()):
        rec = float(rr.recorded_step_us.mean()) if rr.recorded_step_us.size else 0.0
        off = float(rep.mean()) / rec - 1 if rec > 0 else 0.0
        if abs(off) > MAX_MEAN_ERROR:
            return None, f"the joint replay of the recording misses a rank's mean step by {100 * off:+.1f}%"
    return jr, ""


class Response(msgspec.Struct, frozen=True):
    """One rank under one scenario, for :func:`solve` (see the module docstring; µs on the rank's clock).

    ``coll_*``: per collective (shape ``(n,)``, start order); ``start_*`` / ``end_*``: per analysed step's window
    (shape ``(n_steps,)``). ``*_free_us``: the time with every collective instantaneous and unbounded; ``*_up``:
    the latest collective whose end it waits for (-1: none); ``*_d_us``: the longest path from that end to it.
    """

    coll_free_us: list[float]
    coll_up: list[int]
    coll_d_us: list[float]
    start_free_us: list[float]
    start_up: list[int]
    start_d_us: list[float]
    end_free_us: list[float]
    end_up: list[int]
    end_d_us: list[float]
    # every term, where the rank is small enough (:data:`EXACT_BUDGET`): per time, the collectives it waits for
    # (``*_dep``) and the longest path from each one's end (``*_dep_d_us``); None: the latest one alone (above)
    coll_dep: list[list[int]] | None = None
    coll_dep_d_us: list[list[float]] | None = None
    start_dep: list[list[int]] | None = None
    start_dep_d_us: list[list[float]] | None = None
    end_dep: list[list[int]] | None = None
    end_dep_d_us: list[list[float]] | None = None


class JointInputs(msgspec.Struct):
    """What a rank's summary carries for a joint replay of its job: its collective kernels' recorded starts and ends
    (µs, shape ``(n,)``, :func:`_collectives`' order), its analysed steps' recorded durations (µs), the
    :class:`Response` of the recording and, when the rank has replayed fixes, the codes and the :class:`Response` of
    those fixes together. A ``perfdoctor profile`` run's savings are of its unprofiled step
    (:meth:`perfdoctor.replay.rank.RankReplay.fixed_step_times`): ``base`` is then the :class:`Response` of that
    step's scenario (the profiler's per-event overhead removed; None: the recording), and ``scale`` the factor
    replayed steps are scaled by (steady ÷ window; 1 otherwise)."""

    coll_start_us: list[float]
    coll_end_us: list[float]
    recorded_step_us: list[float]
    recorded: Response
    codes: list[str] = []
    fixed: Response | None = None
    base: Response | None = None
    scale: float = 1.0


def _decode(x: np.ndarray, lo: float, m: float) -> tuple[np.ndarray, np.ndarray]:
    """(up, d) of times ``x`` of the pinned replay: ``x = lo + m (up + 1) + d``, ``|d| < m / 2`` (up -1: none)."""
    k = np.rint((x - lo) / m).astype(np.int64)
    return k - 1, np.where(k > 0, x - lo - m * k, 0.0)


# a rank's Response holds every term (one replay per collective) when collectives × activities stay under this:
# ~1 µs a node and replay, about 2 s at most per scenario; above it, the latest collective alone (module docstring)
EXACT_BUDGET = 2_000_000


def _terms(x: np.ndarray, lo: float, m: float) -> np.ndarray:
    """The longest path from the one pinned collective's end (pinned at ``lo + m``) to each time ``x`` of a replay
    (µs), NaN where ``x`` does not wait for it (``x`` below ``lo + m / 2``: its free time, at most ``lo + m / 4``)."""
    return np.where(x > lo + m / 2, x - lo - m, np.nan)


def _pin_each(
    rr: RankReplay, coll: np.ndarray, sc: Scenario, em: np.ndarray, lo: float, m: float
) -> dict[str, tuple[list[list[int]], list[list[float]]]]:
    """Every term ``D_j`` of each time (the collectives' starts, the windows' starts and ends): one replay per
    collective ``j`` with its end alone pinned at ``lo + m`` (the others take no time and wait for no one), which
    reads ``lo + m + D_j`` where the time waits for it."""
    cols: dict[str, list[np.ndarray]] = {"coll": [], "start": [], "end": []}
    for j in range(coll.size):
        pin = em.copy()
        pin[coll[j]] = lo + m
        res = replay(rr.graph, dataclasses.replace(sc, act_end_min_us=pin))
        ws, we = replayed_windows(res, rr.windows)
        cols["coll"].append(_terms(res.act_start_us[coll], lo, m))
        cols["start"].append(_terms(np.asarray(ws, dtype=np.float64), lo, m))
        cols["end"].append(_terms(np.asarray(we, dtype=np.float64), lo, m))
    out = {}
    for key, per_j in cols.items():
        mat = np.array(per_j).T  # (times, collectives)
        deps = [np.flatnonzero(~np.isnan(row)) for row in mat]
        out[key] = ([d.tolist() for d in deps], [row[d].tolist() for row, d in zip(mat, deps)])
    return out


def response(rr: RankReplay, coll: np.ndarray, scenario: Scenario | None = None) -> Response:
    """``rr``'s :class:`Response` under ``scenario`` (None: the recording) for its collectives ``coll`` (activity
    indices in start order): two replays, one free and one with the collective ends pinned (module docstring).
    Any end bound ``scenario`` puts on a collective is dropped: the joint replay sets them."""
    g = rr.graph
    sc = scenario if scenario is not None else Scenario()
    dur = (g.act_dur_us if sc.act_dur_us is None else np.asarray(sc.act_dur_us, dtype=np.float64)).copy()
    dur[coll] = 0.0
    em = np.full(g.n_act, -np.inf) if sc.act_end_min_us is None else np.array(sc.act_end_min_us, dtype=np.float64)
    em[coll] = -np.inf
    free = replay(g, dataclasses.replace(sc, act_dur_us=dur, act_end_min_us=em))
    fs, fe = replayed_windows(free, rr.windows)
    times = [free.act_start_us, free.act_end_us, free.blk_end_us, fs, fe]
    lo = min(float(t.min()) for t in times if t.size)
    hi = max(float(t.max()) for t in times if t.size)
    m = 4.0 * (hi - lo + 1.0)
    em[coll] = lo + m * (np.arange(coll.size) + 1.0)
    pinned = replay(g, dataclasses.replace(sc, act_dur_us=dur, act_end_min_us=em))
    ps, pe = replayed_windows(pinned, rr.windows)
    cu, cd = _decode(pinned.act_start_us[coll], lo, m)
    su, sd = _decode(ps, lo, m)
    eu, ed = _decode(pe, lo, m)
    em[coll] = -np.inf
    exact = (
        _pin_each(rr, coll, dataclasses.replace(sc, act_dur_us=dur), em, lo, m)
        if (coll.size * max(g.n_act, 1) <= EXACT_BUDGET)
        else {}
    )
    return Response(
        coll_free_us=free.act_start_us[coll].tolist(),
        coll_up=cu.tolist(),
        coll_d_us=cd.tolist(),
        start_free_us=np.asarray(fs, dtype=np.float64).tolist(),
        start_up=su.tolist(),
        start_d_us=sd.tolist(),
        end_free_us=np.asarray(fe, dtype=np.float64).tolist(),
        end_up=eu.tolist(),
        end_d_us=ed.tolist(),
        coll_dep=exact["coll"][0] if exact else None,
        coll_dep_d_us=exact["coll"][1] if exact else None,
        start_dep=exact["start"][0] if exact else None,
        start_dep_d_us=exact["start"][1] if exact else None,
        end_dep=exact["end"][0] if exact else None,
        end_dep_d_us=exact["end"][1] if exact else None,
    )


def joint_inputs(
    rr: RankReplay, tables: TraceTables, fixed: Scenario | None = None, codes: list[str] | None = None
) -> JointInputs | None:
    """The rank's :class:`JointInputs`, with the :class:`Response` of ``fixed`` (the rank's fixes together, named
    by ``codes``) when given; None when the rank has no collective kernel or no analysed step."""
    coll = _collectives(rr, tables)
    if coll.size == 0 or rr.recorded_step_us.size == 0:
        return None
    g = rr.graph
    base = rr.base_scenario()
    return JointInputs(
        coll_start_us=g.act_ts_us[coll].tolist(),
        coll_end_us=(g.act_ts_us[coll] + g.act_dur_us[coll]).tolist(),
        recorded_step_us=rr.recorded_step_us.tolist(),
        recorded=response(rr, coll),
        codes=list(codes or []) if fixed is not None else [],
        fixed=response(rr, coll, fixed) if fixed is not None else None,
        base=response(rr, coll, base) if base is not None else None,
        scale=rr.step_scale,
    )


def rank_inputs(rr: RankReplay, tables: TraceTables) -> JointInputs | None:
    """:func:`joint_inputs` with the rank's fixes: the what-ifs of the rules that fired on it with a replayed
    saving (``rr.fired``, set by :func:`perfdoctor.checks.engine.rank_outcomes`), together."""
    codes = [c for c in rr.fired if c in rr.whatifs]
    return joint_inputs(rr, tables, rr.fix_all_scenario(codes) if codes else None, codes)


def _deps(rs: Response, kind: str) -> tuple[list[list[int]], list[list[float]]]:
    """The terms of a :class:`Response` holding them all: ``kind`` "coll", "start" or "end"."""
    return getattr(rs, f"{kind}_dep") or [], getattr(rs, f"{kind}_dep_d_us") or []


def _time(free_us: float, dep: list[int], dep_d_us: list[float], end_us: np.ndarray) -> float:
    """``max(free, max over the collectives j it waits for of (end_j + D_j))`` (µs)."""
    if not dep:
        return free_us
    return max(free_us, float((end_us[dep] + np.asarray(dep_d_us)).max()))


def solve(
    inputs: list[JointInputs], fixed: list[bool], base: bool = False, pulled: list[bool] | None = None
) -> tuple[list[np.ndarray] | None, str]:
    """Every rank's analysed steps replayed jointly from the ranks' :class:`JointInputs` (µs, shape
    ``(n_steps,)`` per rank, unscaled), each rank under its fixes where ``fixed[r]`` (and it has them), else the
    recording (``base``: the step savings are taken from, where a rank has one); or (None, why not): fewer than two
    ranks, different numbers of collectives, copies that do not end together, or a rank's collective start waiting
    on a later collective (the recording is then not in start order).

    ``pulled[r]``: rank r arrives at each collective no later than the median rank (:func:`median_arrival`), its
    work before the collective shortened to that; collective ``k`` then ends at ``max over ranks of (arrival,
    capped at the median where pulled) + transfer_k``: the median arrival plus the transfer when every rank is
    pulled."""
    if len(inputs) < 2:
        return None, "single rank"
    counts = {len(i.coll_start_us) for i in inputs}
    if len(counts) != 1 or 0 in counts:
        return None, (
            "the ranks ran different numbers of collective kernels "
            f"({', '.join(str(len(i.coll_start_us)) for i in inputs)})"
        )
    starts = np.array([i.coll_start_us for i in inputs], dtype=np.float64)
    ends = np.array([i.coll_end_us for i in inputs], dtype=np.float64)
    durs = ends - starts
    if not copies_end_together(ends, durs):
        return None, "the k-th collective kernels of the ranks do not end together (not the same collectives)"
    off, transfer = clock_offsets(ends), durs.min(axis=0)
    resp = [
        i.fixed if f and i.fixed is not None else (i.base if base and i.base is not None else i.recorded)
        for i, f in zip(inputs, fixed)
    ]
    end = _collective_ends(resp, off, transfer, pulled)
    if end is None:
        return None, "a rank's collective waits for a later one (collectives not in start order)"
    return [_step_times(rs, end[r]) for r, rs in enumerate(resp)], ""


def _collective_ends(
    resp: list[Response], off: np.ndarray, transfer: np.ndarray, pulled: list[bool] | None
) -> np.ndarray | None:
    """Each rank's collective ends (µs on its own clock, shape ``(n_ranks, n)``), walking the collectives in order:
    each rank's arrival from its :class:`Response` and the ends before it, then ``T_k`` (module docstring; with the
    ranks ``pulled`` capped at the median arrival, :func:`solve`); None when a rank's collective waits for a later
    one."""
    n = transfer.size
    free = np.array([r.coll_free_us for r in resp], dtype=np.float64)
    up = np.array([r.coll_up for r in resp], dtype=np.int64)
    d = np.array([r.coll_d_us for r in resp], dtype=np.float64)
    exact = [r for r, rs in enumerate(resp) if rs.coll_dep is not None]
    if (up >= np.arange(n)).any() or any(
        max(dep, default=-1) >= k for r in exact for k, dep in enumerate(_deps(resp[r], "coll")[0])
    ):
        return None
    rows = np.arange(len(resp))
    end = np.zeros((len(resp), n))  # each rank's collective ends, on its own clock
    for k in range(n):
        u = up[:, k]
        x = np.where(u >= 0, np.maximum(free[:, k], end[rows, np.maximum(u, 0)] + d[:, k]), free[:, k])
        for r in exact:
            deps, dds = _deps(resp[r], "coll")
            x[r] = _time(float(free[r, k]), deps[k], dds[k], end[r])
        arrival = x - off
        if pulled is not None:
            arrival = np.where(pulled, np.minimum(arrival, float(np.median(arrival))), arrival)
        end[:, k] = float(arrival.max()) + transfer[k] + off
    return end


def _step_times(rs: Response, end: np.ndarray) -> np.ndarray:
    """One rank's analysed steps (µs, shape ``(n_steps,)``): each window's start and end from its
    :class:`Response` and the rank's collective ends ``end`` (µs, its clock)."""
    n = end.size
    w = []
    for kind, f_, u_, d_ in (
        ("start", rs.start_free_us, rs.start_up, rs.start_d_us),
        ("end", rs.end_free_us, rs.end_up, rs.end_d_us),
    ):
        fa, ua, da = np.asarray(f_, np.float64), np.asarray(u_, np.int64), np.asarray(d_, np.float64)
        if rs.coll_dep is not None:
            deps, dds = _deps(rs, kind)
            w.append(np.array([_time(f, dep, dd, end) for f, dep, dd in zip(fa.tolist(), deps, dds)]))
        else:
            w.append(np.where(ua >= 0, np.maximum(fa, end[np.clip(ua, 0, n - 1)] + da), fa))
    return np.asarray(w[1] - w[0])


@dataclass
class JobFixAll:
    """The job's fixes replayed jointly: ``codes`` (every rank's, sorted), per rank the recorded and the jointly
    replayed mean step (µs, by trace rank), and the job's step before and after: its longest rank's (µs)."""

    codes: list[str]
    recorded_us: dict[int, float]
    replayed_us: dict[int, float]

    @property
    def before(self) -> tuple[int, float]:
        """(rank, µs): the longest recorded mean step."""
        r = max(self.recorded_us, key=lambda k: self.recorded_us[k])
        return r, self.recorded_us[r]

    @property
    def after(self) -> tuple[int, float]:
        """(rank, µs): the longest jointly replayed mean step with the fixes."""
        r = max(self.replayed_us, key=lambda k: self.replayed_us[k])
        return r, self.replayed_us[r]


def job_fix_all(inputs: dict[int, JointInputs], fixed: dict[int, bool]) -> tuple[JobFixAll | None, str]:
    """Every rank with its fixes (where ``fixed[rank]``) replayed jointly (:func:`solve`), from the step savings
    are taken from (the recording; a ``perfdoctor profile`` run's unprofiled step), or (None, why not):
    no rank has a fix, the ranks do not match, or the joint replay of the recording misses a rank's recorded mean
    step by more than :data:`perfdoctor.replay.rank.MAX_MEAN_ERROR` (``inputs``: by trace rank)."""
    ranks = sorted(inputs)
    ins = [inputs[r] for r in ranks]
    on = [bool(fixed.get(r)) and inputs[r].fixed is not None for r in ranks]
    if not any(on):
        return None, "no rank has a replayed fix"
    why = _recording_error(ranks, ins)
    if why:
        return None, why
    after, why = solve(ins, on, base=True)
    if after is None:
        return None, why
    if any(i.base is not None for i in ins):  # a profile run: before is its unprofiled step, replayed jointly
        before, why = solve(ins, [False] * len(ins), base=True)
        if before is None:
            return None, why
        before_us = [float(b.mean()) * i.scale for b, i in zip(before, ins)]
    else:
        before_us = [float(np.mean(i.recorded_step_us)) * i.scale for i in ins]
    codes = sorted({c for i, o in zip(ins, on) if o for c in i.codes})
    return (
        JobFixAll(
            codes,
            dict(zip(ranks, before_us)),
            {r: float(a.mean()) * i.scale for r, a, i in zip(ranks, after, ins)},
        ),
        "",
    )


def _recording_error(ranks: list[int], ins: list[JointInputs]) -> str:
    """Why the ranks cannot be replayed jointly ("" when they can): :func:`solve` refuses them, or its replay of the
    recording misses a rank's recorded mean step by more than :data:`perfdoctor.replay.rank.MAX_MEAN_ERROR`."""
    rec, why = solve(ins, [False] * len(ins))
    if rec is None:
        return why or "the ranks cannot be replayed jointly"
    for r, i, rep in zip(ranks, ins, rec):
        mean = float(np.mean(i.recorded_step_us))
        off = float(rep.mean()) / mean - 1 if mean > 0 else 0.0
        if abs(off) > MAX_MEAN_ERROR:
            return f"the joint replay of the recording misses rank {r}'s mean step by {100 * off:+.1f}%"
    return ""


def median_arrival(inputs: dict[int, JointInputs], pulled: set[int] | None = None) -> tuple[JobFixAll | None, str]:
    """The job replayed jointly (:func:`solve`) with the ranks ``pulled`` (None: every rank) arriving at each
    collective no later than the median rank: per rank, its mean step replayed jointly as recorded (``recorded_us``;
    a ``perfdoctor profile`` run's unprofiled step) and with the ranks pulled in (``replayed_us``), both scaled as
    :func:`job_fix_all` scales them (µs, by trace rank). The saving is the difference of two replays of one model,
    so its error does not hold the replay's error on the recording. (None, why not): the ranks do not match, or the
    joint replay of the recording misses a rank's recorded mean step by more than
    :data:`perfdoctor.replay.rank.MAX_MEAN_ERROR`."""
    ranks = sorted(inputs)
    ins = [inputs[r] for r in ranks]
    why = _recording_error(ranks, ins)
    if why:
        return None, why
    before, why = solve(ins, [False] * len(ins), base=True)
    after, why_after = solve(ins, [False] * len(ins), base=True, pulled=[pulled is None or r in pulled for r in ranks])
    if before is None or after is None:
        return None, why or why_after
    return (
        JobFixAll(
            [],
            {r: float(b.mean()) * i.scale for r, b, i in zip(ranks, before, ins)},
            {r: float(a.mean()) * i.scale for r, a, i in zip(ranks, after, ins)},
        ),
        "",
    )
