"""Transformations that take host time away: a removed sync, a prefetched DataLoader, a fused optimizer,
CUDA graphs (fewer launches)."""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from perfdoctor.replay.activities import ACT_TABLES
from perfdoctor.replay.graph import QUEUE_CALL
from perfdoctor.replay.machine import CoreBudget
from perfdoctor.replay.rank import RankReplay
from perfdoctor.replay.simulate import Intervals, Scenario
from perfdoctor.replay.transforms import WhatIf, merge_cuts
from perfdoctor.trace.tables import TraceTables

DATALOADER = re.compile(r"^enumerate\(DataLoader\)#.*__next__|DataLoader.*__next__|^DataLoader")
# a fetch from worker processes (torch's _MultiProcessingDataLoaderIter): its batch already arrives through shared
# memory, so the recording holds the hand-off's costs
WORKER_FETCH = re.compile(r"MultiProcessingDataLoaderIter")
OPTIMIZER_STEP = re.compile(r"^Optimizer\.step#")
# launches a fused (``fused=True``) or foreach optimizer step issues per parameter group and dtype: torch's
# _fused_adam/_foreach_* kernels are launched per tensor-list chunk; 10 per step is a generous allowance
FUSED_OPTIMIZER_LAUNCHES = 10
GRAPH_LAUNCH_US = 10.0  # one cudaGraphLaunch (µs): luatil trace_05 (RTX 3060), median cudaGraphLaunch ≈ 10 µs


def _named(tables: TraceTables, rx: re.Pattern[str], pid: int) -> Intervals:
    from perfdoctor.trace import intervals as iv

    ok = tables.names_matching(rx)
    parts = []
    for tname in ("annotations", "cpu_ops"):
        tab = tables.tables[tname]
        if len(tab):
            m = ok[tab["name_id"]] & ((tab["pid"] == pid) if pid >= 0 else True)
            parts.append(iv.union(tab["ts_us"][m], tab["end_us"][m]))
    return iv.union_of(*parts) if parts else iv.EMPTY


def overlaps(s: np.ndarray, e: np.ndarray, by: Intervals) -> np.ndarray:
    """Whether each ``[s, e)`` overlaps the sorted disjoint intervals ``by``."""
    if by[0].size == 0:
        return np.zeros(s.size, dtype=bool)
    k = np.searchsorted(by[0], e, side="left") - 1  # last interval starting before e
    return (k >= 0) & (by[1][np.maximum(k, 0)] > s)


def remove_syncs(rr: RankReplay, calls: Intervals) -> WhatIf:
    """The blocking calls that overlap ``calls`` (sorted, disjoint µs intervals) no longer wait, and their host
    time goes.

    Assumption: the value the host waited for is not needed at once (logged every N steps, or read from a
    non-blocking copy later), so the host runs on. Source: the recorded graph; nothing else changes.
    """
    g = rr.graph
    hit = overlaps(g.blk_ts_us, g.blk_end_us, calls)
    cut: dict[int, Intervals] = {}
    for pid in np.unique(g.blk_pid[hit]).tolist():
        m = hit & (g.blk_pid == pid)
        cut = merge_cuts(cut, {pid: (g.blk_ts_us[m], g.blk_end_us[m])})
    return WhatIf(
        "remove-sync",
        Scenario("remove-sync", host_cut=cut, blk_removed=hit, peers_move=True),
        f"the {int(hit.sum())} synchronizing call(s) no longer block: the host runs on without the value",
        "replay of the recorded graph",
    )


POOL_PASSES = 4  # replays that add back a worker pool's throughput deficit (a host-bound step converges in one)
# What the training process pays to receive one batch from a DataLoader worker through shared memory, beyond what
# it pays with num_workers=0: benchmarks/dataloader_handoff.py, with a real DataLoader on this project's 2-core
# build machine (torch 2.13 CPU; minimum over 20 batches of 2, 8 and 16 MiB, a line through them, median of 3
# repeats: 0.217-0.254 and 0.059-0.083 ns/byte): constants of that machine, not of the trace's. Per byte of the
# batch: releasing the previous batch's shared-memory segment (munmap, where num_workers=0 frees a heap block),
# host time at the fetch; and the page faults of the first read of the fresh mapping, which the pageable
# ``.to(device)`` copy takes in the CUDA driver's staging memcpy: it stretches that copy (the ResNet50 V100
# num_workers=4 trace shows both: 2.6 ms between __next__ and the copy, where num_workers=0 has 0.06 ms, and the
# 19.3 MB copy at 6.5 GB/s where it ran at 9.9 GB/s). HANDOFF_US, the rest of a batch's hand-off (the __next__ of
# a batch already waiting: queue get, unpickle, map; and the lines' intercepts): about a millisecond there; the
# __next__ from workers takes 0.08, 0.09, 1.25, 1.37, 1.40 and 4.33 ms in the ResNet50 V100 num_workers=4 trace
# (median 1.3 ms) and at least 1.25-1.35 ms (10 per run) in examples/mlp.py runs with 2 workers on the 2-core
# machine (benchmarks/cpu_pairs.py's PD101 pairs): the step's thread pays it in each fetch it keeps. Counted in a
# run that recorded its CPU times (whose core budget charges it as CPU too), stated as not counted on a bare trace.
HANDOFF_US = 1300.0
HANDOFF_FREE_NS_PER_BYTE = 0.25
HANDOFF_READ_NS_PER_BYTE = 0.074
# The share of the cores CPU-bound DataLoader workers and the training loop keep busy together when they outnumber
# the cores: examples/mlp.py with 2 workers on the 2-core build machine (torch 2.13 CPU, 2026-12-07, 0.1, 0.25,
# 0.25 and 0.5 ms of CPU per sample): 1.86, 1.82, 1.65 and 1.88 of 2 cores busy over the unprofiled steps
# (/proc/stat), mean 0.90 of them; the rest idles while the loop's thread waits for a core (run-queue wait 0-6 ms
# per step) and a worker waits for its next index. A constant of that machine's scheduler, stated with the floor.
POOL_CORE_SHARE = 0.9
# what the core budget does not cover, said with every prefetch saving (benchmarks/replay_pairs.py --steps: the
# ResNet50 V100 pair's per-step evidence)
CONTENTION = (
    "not modelled: the workers' competition with the training process for memory bandwidth, caches and clock, "
    "which slows its host work even with cores to spare (ResNet50 V100, 4 workers: host ops 4-11% slower in typical "
    "steps, 21-32% in two, one batch copy stalled 37 ms), so the step can come out longer than replayed"
)
# the same on a CPU-only trace, where the workers compete with the training's own compute threads (the GPU pair's
# figures are of host ops beside a GPU, not of a CPU-only run's math, so they are not quoted)
CONTENTION_CPU = (
    "not modelled, as the trace records neither the machine's cores nor the workers: their competition with the "
    "training's own compute threads for the same cores and memory bandwidth, which slows its ops, so the step can "
    "come out longer than replayed"
)


def _measured_floor(budget: CoreBudget, fetch_us: float, workers: int | None, batches: float) -> tuple[float, str]:
    """:func:`core_floor` with the run's CPU times (``budget.measured``): the process's CPU time per unprofiled
    step, plus :data:`HANDOFF_US` of the training process's CPU per batch (``batches`` per step) received from a
    worker, ÷ the cores its ``workers`` + 1 threads get (µs, unprofiled time), and the clause stating it."""
    c = budget.job_cores((workers or 1) + 1)
    assert budget.process_cpu_us is not None and budget.step_us is not None
    off = budget.off_cpu_us()
    share = min(max(1.0 - off / fetch_us, 0.0), 1.0) if fetch_us > 0 else 0.0
    handoff = HANDOFF_US * batches
    # the job's threads outnumber the cores left to it, and no other load fills what they leave idle
    busy = c * POOL_CORE_SHARE if (workers or 1) + 1 > c and c >= budget.free_cores else c
    floor = (budget.process_cpu_us + handoff) / busy
    shared = (
        f"; the loop's thread waited {budget.main_wait_us / 1e3:.1f} ms per step for a core, so its "
        f"{(workers or 1) + 1} threads with the workers get {c:.2f} cores"
        if budget.main_wait_us is not None and c < budget.free_cores
        else ""
    )
    return floor, (
        f"core budget: {budget.machine_text()}{shared}; the training process used "
        f"{budget.process_cpu_us / 1e3:.1f} ms of CPU per {budget.step_us / 1e3:.1f} ms unprofiled step "
        f"(steps.csv cpu_s; its loop thread asleep or in I/O {off / 1e3:.1f} ms of it, so the fetch is "
        f"{share:.0%} CPU work, which the workers still run), and {handoff / 1e3:.1f} ms to receive "
        f"{batches:.3g} batch(es) from the workers (the __next__ of a ready batch: queue get, unpickle, map, "
        f"{HANDOFF_US / 1e3:.1f} ms each, benchmarks/dataloader_handoff.py on a 2-core machine): the fixed step "
        f"lasts at least ({budget.process_cpu_us / 1e3:.1f} + {handoff / 1e3:.1f}) ÷ {busy:.2f} = {floor / 1e3:.1f} ms"
        + (
            f" ({(workers or 1) + 1} busy threads on {c:.2f} cores keep {POOL_CORE_SHARE:.0%} of them busy: "
            "2 workers and the loop on 2 cores, measured on a 2-core machine)"
            if busy < c
            else ""
        )
    )


def _assumed_floor(budget: CoreBudget, fetch_us: float, step_us: float) -> tuple[float, str]:
    """:func:`core_floor` with the machine's cores only: the training thread busy the whole step and the fetch all
    CPU work (µs, unprofiled time), and the clause stating it."""
    c = budget.free_cores
    f_ms = fetch_us / 1e3
    floor = fetch_us / (c - 1) if c >= 2 else step_us + fetch_us * (2 - c)
    return floor, (
        f"core budget: {budget.machine_text()}; the run recorded no CPU time per step, so the training thread is "
        f"assumed busy through the step and the {f_ms:.1f} ms of fetching per step all CPU work: the fixed step "
        f"lasts at least {floor / 1e3:.1f} ms"
        + (
            f" ({f_ms:.1f} ms ÷ {c - 1:.1f} spare cores)"
            if c >= 2
            else " (under two free cores: the fetch stays in the step, in part)"
        )
    )


def core_floor(
    budget: CoreBudget | None,
    fetch_us: float,
    step_us: float,
    workers: int | None = None,
    batches: float = 1.0,
) -> tuple[float, str]:
    """The shortest fixed step the machine's cores allow once the fetches' work runs in worker processes (µs per
    step savings are stated for: the unprofiled one where the run measured it, whose CPU times the budget holds),
    and the clause that states the budget (:mod:`perfdoctor.replay.machine`).

    ``fetch_us``: recorded DataLoader fetch time per step (µs, the work moved to workers); ``step_us``: the step
    replayed with the hand-off (µs). With the run's CPU times: the fetch's CPU share is what the step loop's thread
    did not spend off the CPU (``1 − off_cpu / fetch``: a sleeping ``__getitem__`` costs the workers no core), and
    the floor is the process's CPU time per unprofiled step (its own work and the fetch's, now the workers'), plus
    receiving each of the step's ``batches`` from a worker (:data:`HANDOFF_US` of CPU each), ÷ the cores the job's
    threads get (:meth:`CoreBudget.job_cores`: from the step thread's measured run-queue wait,
    else the machine's cores less the other processes' load when the run started; ``workers`` + 1 threads).
    With the cores only: the training thread busy the whole step and the fetch all CPU work, ``C·T ≥ T +
    fetch``, so ``T ≥ fetch / (C − 1)``; under two free cores, ``T ≥ T + fetch × (2 − C)`` (one core: the fetch
    adds to the step, no saving). Without a budget (a bare trace): no floor; the clause names the fewest cores the
    saving needs under the same assumption.
    """
    f_ms, t_ms = fetch_us / 1e3, step_us / 1e3
    if budget is None:
        need = int(np.ceil((step_us + fetch_us) / step_us)) if step_us > 0 else 1
        return 0.0, (
            f"core budget: not recorded (bare trace); needs {need} free logical CPUs, the training thread busy "
            f"through the {t_ms:.1f} ms step beside {f_ms:.1f} ms of fetching per step in workers (assumed CPU "
            "work): fewer, and the saving shrinks"
        )
    floor, text = (
        _measured_floor(budget, fetch_us, workers, batches)
        if budget.measured
        else _assumed_floor(budget, fetch_us, step_us)
    )
    binds = floor > step_us + 0.5
    return floor, text + (" (binds: the cores, not the loop, set the step)" if binds else " (does not bind)")


def _per_window(ts_us: np.ndarray, rr: RankReplay) -> np.ndarray:
    """Index of the analysed step window each host time lies in (-1 outside every window)."""
    w = rr.windows
    k = np.searchsorted(w.host_start_us, ts_us, side="right") - 1
    return np.where((k >= 0) & (ts_us < w.host_end_us[np.maximum(k, 0)]), k, -1)


def fetched_batches(rr: RankReplay, tables: TraceTables, fetch_end_us: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The batch of each fetch as far as the trace shows it: the host→device copies the step's process launches
    after the fetch ends and before its next kernel launch (the batch's ``.to(device)``; ResNet50 V100: 19,267,584
    + 256 bytes, the 32×3×224×224 fp32 images and the labels).

    Returns:
        (bytes per fetch, shape of ``fetch_end_us``: 0 where no such copy follows, a CPU-only trace or a batch the
        host consumes, whose size the trace does not show; graph activity indices of those copies)
    """
    from perfdoctor.analysis.timing.classify import classify_kernel

    g = rr.graph
    out = np.zeros(fetch_end_us.size)
    mine = (g.act_launch >= 0) & ((g.act_pid == rr.windows.pid) if rr.windows.pid >= 0 else True)
    kl = np.sort(g.act_launch_ts_us[mine & (g.act_table == ACT_TABLES.index("kernels"))])
    mc = np.flatnonzero(mine & (g.act_table == ACT_TABLES.index("memcpy")))
    if mc.size == 0 or fetch_end_us.size == 0:
        return out, np.empty(0, dtype=np.int64)
    name_id = tables.memcpy["name_id"][g.act_row[mc]]
    h2d = [i for i in set(name_id.tolist()) if classify_kernel(tables.names[i]).direction == "h2d"]
    mc = mc[np.isin(name_id, h2d)]
    lt, nb = g.act_launch_ts_us[mc], tables.memcpy["bytes"][g.act_row[mc]].clip(0).astype(np.float64)
    # no kernel launch after a fetch (or none at all: a trace whose kernels were all dropped at the boundary):
    # every later copy of the process counts
    until = np.append(kl, np.inf)[np.searchsorted(kl, fetch_end_us, side="left")]
    picked = []
    for i, (a, b) in enumerate(zip(fetch_end_us.tolist(), until.tolist(), strict=True)):
        m = (lt >= a) & (lt < b)
        out[i] = float(nb[m].sum())
        picked.append(mc[m])
    return out, np.concatenate(picked) if picked else np.empty(0, dtype=np.int64)


@dataclass(frozen=True)
class _Fetches:
    """The DataLoader fetches (``__next__``) of the step's process: their host spans (µs, recorded clock) and the
    analysed step window each lies in (-1: outside every window)."""

    pid: int
    ts_us: np.ndarray
    end_us: np.ndarray
    step: np.ndarray
    n_steps: int

    @property
    def inside(self) -> np.ndarray:
        """Whether each fetch lies in an analysed step window (bool, one per fetch)."""
        return self.step >= 0

    def per_step(self) -> np.ndarray:
        """Fetches per analysed step window (float64, shape ``(n_steps,)``)."""
        return np.bincount(self.step[self.inside], minlength=self.n_steps).astype(np.float64)

    def mean_load_us(self) -> float:
        """Mean recorded fetch in the analysed windows (µs; 0 without one): a worker's time per batch, ``L``."""
        inside = self.inside
        return float((self.end_us - self.ts_us)[inside].mean()) if inside.any() else 0.0

    def scenario(self, keep_us: np.ndarray, act_dur_us: np.ndarray | None) -> Scenario:
        """Each fetch keeps its first ``keep_us`` (µs per fetch, at most the whole fetch) and the rest of its host
        time goes; ``act_dur_us``: the activities' durations (None: as recorded)."""
        s, e = self.ts_us, self.end_us
        s2 = np.minimum(s + keep_us, e)
        cut = {self.pid: (s2[e > s2], e[e > s2])} if s.size else {}
        return Scenario("prefetch-dataloader", act_dur_us=act_dur_us, host_cut=cut)


def _fetches(rr: RankReplay, tables: TraceTables) -> _Fetches:
    """The DataLoader fetches of ``rr``'s step process (:data:`DATALOADER`), placed in its analysed windows."""
    pid = rr.windows.pid
    s, e = _named(tables, DATALOADER, pid)
    return _Fetches(pid, s, e, _per_window(s, rr), rr.windows.host_start_us.size)


@dataclass(frozen=True)
class _Handoff:
    """What each fetch keeps as a worker's hand-off (``keep_us``: µs per fetch), the activities' durations with
    the batches' host→device copies stretched (None: as recorded) and the assumption's words."""

    keep_us: np.ndarray
    act_dur_us: np.ndarray | None
    text: str


def _handoff(
    rr: RankReplay, tables: TraceTables, f: _Fetches, residual_us: float | None, measured_run: bool
) -> _Handoff:
    """The hand-off of each fetch: ``residual_us`` each when given; else :data:`HANDOFF_FREE_NS_PER_BYTE` × the
    batch's bytes (:func:`fetched_batches`; nothing for a fetch that already came from workers,
    :data:`WORKER_FETCH`: the recording holds its hand-off), plus, for a run whose core budget holds its CPU times
    (``measured_run``), :data:`HANDOFF_US` (the ``__next__`` of a ready batch, on the step's thread, which that
    budget charges too); and the batch's host→device copies take :data:`HANDOFF_READ_NS_PER_BYTE` × their bytes
    longer. Source: benchmarks/dataloader_handoff.py."""
    if residual_us is not None:
        return _Handoff(np.full(f.ts_us.size, float(residual_us)), None, f"each __next__ keeps {residual_us:.0f} µs")
    pooled = overlaps(f.ts_us, f.end_us, _named(tables, WORKER_FETCH, f.pid))
    nbytes = np.zeros(f.ts_us.size)  # a worker's fetch: its hand-off is in the recording already
    nbytes[~pooled], copies = fetched_batches(rr, tables, f.end_us[~pooled])
    dur: np.ndarray | None = None
    if copies.size:
        dur = rr.graph.act_dur_us.copy()
        nb = tables.memcpy["bytes"][rr.graph.act_row[copies]].clip(0)
        dur[copies] += HANDOFF_READ_NS_PER_BYTE * nb / 1e3
    inside = f.inside
    mb = float(nbytes[inside].mean()) / 1e6 if inside.any() else 0.0
    ready_us = HANDOFF_US if measured_run else 0.0
    keep = np.where(pooled, 0.0, ready_us + HANDOFF_FREE_NS_PER_BYTE * nbytes / 1e3)
    return _Handoff(keep, dur, _handoff_text(mb, tables.has_device_activity, measured_run))


def _fixed_steps(rr: RankReplay, sc: Scenario) -> np.ndarray:
    """Per analysed step (µs): the step savings are stated for (the unprofiled one of a ``perfdoctor profile``
    run, :meth:`RankReplay.fixed_step_times`) replayed with the prefetch scenario ``sc``."""
    return rr.fixed_step_times([WhatIf("prefetch-dataloader", sc, "", "")])


def _fetch_overhead_us(rr: RankReplay, tables: TraceTables, f: _Fetches) -> float:
    """The profiler's overhead in the mean analysed fetch (µs): the per-event overhead of a profile run's
    unprofiled step (:mod:`perfdoctor.replay.unprofiled`, ``"overhead"``) × the host events recorded inside the
    fetches, per fetch; 0 for a bare trace or where no per-event overhead was measured."""
    from perfdoctor.replay.unprofiled import host_events

    u, inside = rr.unprofiled, f.inside
    if u is None or u.whatif is None or not inside.any():
        return 0.0
    n = host_events(tables, f.pid, (f.ts_us[inside], f.end_us[inside])).size
    return u.per_event_us * n / int(inside.sum())


def _wait_for_bound(
    rr: RankReplay, f: _Fetches, handoff: _Handoff, bound_us: np.ndarray | float, sc: Scenario, replayed_us: np.ndarray
) -> Scenario:
    """The prefetch scenario ``sc`` (replayed at ``replayed_us`` per step, :func:`_fixed_steps`) with every step
    shorter than ``bound_us`` (µs per step of the same step: the pool's throughput, the cores' floor) waiting in its
    fetches for the difference, shared evenly among them; replayed again, up to :data:`POOL_PASSES` times, since
    waiting host time partly hides behind queued device work (and, in a profile run, loses the profiler's overhead
    cut at the events the kept fetch holds)."""
    keep = handoff.keep_us.copy()
    n_fetch, step, inside = f.per_step(), f.step, f.inside
    for _ in range(POOL_PASSES):
        deficit = bound_us - replayed_us
        if not (deficit > 0.5).any():
            break
        short = inside & (deficit[np.maximum(step, 0)] > 0.5)
        keep[short] += deficit[step[short]] / n_fetch[step[short]]
        sc = f.scenario(keep, handoff.act_dur_us)
        replayed_us = _fixed_steps(rr, sc)
    return sc


def _workers_needed_text(handoff: str, load_us: float, step_us: float) -> str:
    """The assumption of an unbounded pool: the fewest workers that keep up, ``⌈L / replayed step⌉`` (µs in)."""
    need = int(np.ceil(load_us / step_us)) if load_us > 0 and step_us > 0 else 0
    return (
        f"batches prefetched by DataLoader workers: {handoff}; this needs at least {max(need, 1)} worker(s) "
        f"(fetch {load_us / 1e3:.1f} ms ÷ replayed step {step_us / 1e3:.1f} ms)"
    )


def _pool_text(workers: int | None, load_us: float, overhead_us: float) -> str:
    """The pool's assumption: ``workers`` each loading a batch in the fetch's time ``load_us`` (µs), the recorded
    fetch less ``overhead_us``, the profiler's overhead in it (:func:`_fetch_overhead_us`)."""
    if not workers:
        return "batches prefetched by DataLoader workers"
    less = (
        f", the recorded fetch less {overhead_us / 1e3:.2f} ms of the profiler's per-event overhead"
        if overhead_us
        else ""
    )
    return (
        f"{workers} DataLoader worker(s), each loading a batch in the fetch's time ({load_us / 1e3:.1f} ms{less}): "
        f"a step lasts at least {load_us / max(workers, 1) / 1e3:.1f} ms per batch"
    )


def prefetch_dataloader(
    rr: RankReplay,
    tables: TraceTables,
    residual_us: float | None = None,
    workers: int | None = None,
    budget: CoreBudget | None = None,
) -> WhatIf:
    """Every DataLoader ``__next__`` on the step's process becomes a hand-off of a batch from a worker, as long as
    a pool of ``workers`` processes keeps up.

    The hand-off keeps ``residual_us`` of each fetch; by default (None)
    :data:`HANDOFF_FREE_NS_PER_BYTE` × the batch's bytes (:func:`fetched_batches`), at most the recorded fetch, and
    the batch's host→device copies take :data:`HANDOFF_READ_NS_PER_BYTE` × their bytes longer; nothing for a fetch
    that already came from workers (:data:`WORKER_FETCH`: the recording holds its hand-off).
    Each worker loads a whole batch (``__getitem__`` per sample and the collate) in the time the main process
    took for it here, the fetch's recorded duration ``L`` (less the profiler's per-event overhead in it in a
    profile run, :func:`_fetch_overhead_us`); ``W`` workers deliver at most one batch per ``L / W``,
    so a step that fetches ``n`` batches lasts at least ``n × L / W`` (mean ``L`` of the analysed steps: the
    prefetch queue evens out batch-to-batch variation). Steps the replay makes shorter wait in their fetches for
    the difference (replayed again, up to :data:`POOL_PASSES` times, since waiting host time partly hides behind
    queued device work). ``workers=None``: enough workers that the bound never binds; the assumption then names
    the fewest that suffice, ``⌈L / replayed step⌉``.

    The machine's cores (``budget``, from the run: :mod:`perfdoctor.replay.machine`): the work moved to the
    workers still takes CPU time, so no step is shorter than :func:`core_floor`; steps under it wait in their
    fetches for the difference, as under the pool's bound. Without a budget (a bare trace) the saving states the
    fewest cores it needs. Not modelled: the workers' competition for memory bandwidth, caches and clock (on the
    ResNet50 V100 pair the "after" trace's host ops ran 4-11% slower than the "before" trace's in its typical
    steps and up to 32% slower in two, and one copy stalled 37 ms), and a batch size the trace does not show (no
    host→device copy after the fetch: the per-byte hand-off is not counted).
    Source: PyTorch DataLoader docs, multi-process data loading (``num_workers`` worker processes, each building
    whole batches, ``prefetch_factor`` batches ahead per worker); the hand-off cost from
    benchmarks/dataloader_handoff.py.
    """
    f = _fetches(rr, tables)
    handoff = _handoff(rr, tables, f, residual_us, budget is not None and budget.measured)
    contention = CONTENTION if tables.has_device_activity else CONTENTION_CPU
    sc = f.scenario(handoff.keep_us, handoff.act_dur_us)
    overhead_us = _fetch_overhead_us(rr, tables, f)
    load_us = f.mean_load_us() - overhead_us
    replayed = _fixed_steps(rr, sc)
    floor, budget_text = core_floor(
        budget, float(f.per_step().mean()) * load_us, float(replayed.mean()), workers, float(f.per_step().mean())
    )
    source = "PyTorch DataLoader multi-process loading (num_workers > 0)"
    if workers is None and floor <= 0:
        text = _workers_needed_text(handoff.text, load_us, float(replayed.mean()))
        return WhatIf("prefetch-dataloader", sc, f"{text}; {budget_text}; {contention}", source)
    bound = np.maximum(f.per_step() * load_us / max(workers or 1, 1) if workers else 0.0, floor)
    sc = _wait_for_bound(rr, f, handoff, bound, sc, replayed)
    text = f"{_pool_text(workers, load_us, overhead_us)}; {handoff.text}; {budget_text}; {contention}"
    return WhatIf("prefetch-dataloader", sc, text, source)


def _handoff_text(mb: float, device: bool, measured_run: bool) -> str:
    """The hand-off's assumption for a batch of ``mb`` MB (0: the trace shows no batch size); ``device``: a GPU
    trace, whose batch is copied to the device (a CPU-only run reads it in place: no copy to stretch);
    ``measured_run``: a run whose core budget holds its CPU times (the ``__next__`` of a ready batch then counts)."""
    copy = (
        f" and the batch's copy to the device takes {HANDOFF_READ_NS_PER_BYTE} ns/byte longer (page faults of the "
        "fresh mapping)"
        if device
        else ""
    )
    size = f"a {mb:.1f} MB batch (its host→device copy)" if mb > 0 else "0 bytes (no batch size in the trace)"
    seen = (
        "the median __next__ from workers in a ResNet50 V100 num_workers=4 trace"
        if device
        else "the least __next__ from 2 workers in CPU training runs on a 2-core machine"
    )
    ready = (
        f"and {HANDOFF_US / 1e3:.1f} ms for the __next__ of a ready batch itself (queue get, unpickle, map; {seen})"
        if measured_run
        else f"the __next__ of a ready batch itself (about {HANDOFF_US:.0f} µs on a 2-core machine; {seen}) is not "
        "counted: the trace comes without the run's CPU times (perfdoctor profile records them and counts it)"
    )
    return (
        f"each __next__ keeps {HANDOFF_FREE_NS_PER_BYTE} ns per byte of the batch (freeing the previous batch's "
        f"shared memory){copy}, {size}, {'both ' if device else ''}measured with a real DataLoader on another machine; "
        f"{ready}"
    )


def _launch_calls(tables: TraceTables, pid: int) -> tuple[np.ndarray, np.ndarray]:
    rt = tables.runtime
    if len(rt) == 0:
        return np.empty(0), np.empty(0)
    m = tables.names_matching(QUEUE_CALL)[rt["name_id"]] & ((rt["pid"] == pid) if pid >= 0 else True)
    return rt["ts_us"][m], rt["end_us"][m]


def fused_optimizer(rr: RankReplay, tables: TraceTables) -> WhatIf:
    """``Optimizer.step`` host time shrinks to :data:`FUSED_OPTIMIZER_LAUNCHES` launches at this trace's median
    launch-call cost; the optimizer's device kernels keep their recorded time (the same bytes move; a fused kernel
    saves their per-kernel gaps, not counted: a lower bound on the saving).

    Source: torch.optim ``foreach``/``fused`` implementations (one kernel per tensor list chunk); per-launch cost
    measured in this trace.
    """
    pid = rr.windows.pid
    s, e = _named(tables, OPTIMIZER_STEP, pid)
    ls, le = _launch_calls(tables, pid)
    per_launch = float(np.median(le - ls)) if ls.size else 5.0
    keep = FUSED_OPTIMIZER_LAUNCHES * per_launch
    s2 = np.minimum(s + keep, e)
    cut = {pid: (s2[e > s2], e[e > s2])} if s.size else {}
    return WhatIf(
        "fused-optimizer",
        Scenario("fused-optimizer", host_cut=cut, peers_move=True),
        f"a foreach/fused optimizer: Optimizer.step host time becomes {FUSED_OPTIMIZER_LAUNCHES} launches "
        f"× {per_launch:.1f} µs (median launch call here); its device kernels keep their time",
        "torch.optim foreach/fused implementations; launch cost measured in this trace",
    )


def graph_api(tables: TraceTables) -> str:
    """ "HIP" on a ROCm trace (its runtime calls are hip*), else "CUDA": whose graphs capture the step
    (``torch.cuda.graphs`` and ``torch.compile(mode="reduce-overhead")`` drive HIP graphs on ROCm)."""
    return "HIP" if tables.names_matching(r"^hip").any() else "CUDA"


def cuda_graphs(rr: RankReplay, tables: TraceTables) -> WhatIf:
    """Each step's host time between its first and last kernel launch collapses to one ``cudaGraphLaunch``
    (:data:`GRAPH_LAUNCH_US`), except DataLoader fetches and blocking calls, which a graph cannot capture.

    Assumption: the step's launch sequence is static (capturable); kernels keep their durations and queue back to
    back. Source: CUDA Graphs (torch.cuda.graphs / ``torch.compile(mode="reduce-overhead")``).
    """
    from perfdoctor.trace import intervals as iv

    pid = rr.windows.pid
    ls, le = _launch_calls(tables, pid)
    w = rr.windows
    o = np.argsort(ls, kind="stable")
    ls, le = ls[o], le[o]
    # each step's launches: those starting in [host start, host end), a slice of the sorted calls
    lo = np.searchsorted(ls, w.host_start_us, side="left")
    hi = np.searchsorted(ls, w.host_end_us, side="left")
    many = hi - lo > 1
    spans_s = ls[lo[many]] + GRAPH_LAUNCH_US if many.any() else np.empty(0)
    spans_e = np.array([le[a:b].max() for a, b in zip(lo[many].tolist(), hi[many].tolist())], dtype=np.float64)
    cut = iv.union(np.asarray(spans_s, dtype=np.float64), spans_e)
    keep = iv.union_of(_named(tables, DATALOADER, pid), iv.union(rr.graph.blk_ts_us, rr.graph.blk_end_us))
    cut = iv.subtract(cut, keep)
    api = graph_api(tables)
    return WhatIf(
        "cuda-graphs",
        Scenario("cuda-graphs", host_cut={pid: cut} if cut[0].size else {}, peers_move=True),
        f"the step's launches replayed as one {api} graph ({GRAPH_LAUNCH_US:.0f} µs): the host time from its first "
        "to its last launch goes, launch calls, op dispatch and the Python between them (a captured graph runs "
        "none of it); DataLoader and synchronizing calls stay",
        "CUDA Graphs; graph launch cost from luatil trace_05 (RTX 3060)",
    )


PER_ELEMENT_COPIES = 64  # blocking device→host copies per step from which they are read as a per-element loop
# bytes of one element's copy at most: complex128, torch's widest scalar dtype (torch.finfo/iinfo); a larger copy
# moves a tensor, not an element (GPUPuzzlers blocking_streams: 100 copies of 4 MiB results, not a loop)
PER_ELEMENT_BYTES = 16


def _d2h_copies(tables: TraceTables, rr: RankReplay) -> np.ndarray:
    """Graph activity indices of the device→host copies of one element (at most :data:`PER_ELEMENT_BYTES`; a
    copy whose size the trace lacks is not counted) launched by the step's process."""
    from perfdoctor.analysis.timing.classify import classify_kernel

    g = rr.graph
    mc = np.flatnonzero((g.act_table == ACT_TABLES.index("memcpy")) & (g.act_launch >= 0))
    if rr.windows.pid >= 0:
        mc = mc[g.act_pid[mc] == rr.windows.pid]
    name_id = tables.memcpy["name_id"][g.act_row[mc]]
    d2h = [i for i in set(name_id.tolist()) if classify_kernel(tables.names[i]).direction == "d2h"]
    nbytes = tables.memcpy["bytes"][g.act_row[mc]]
    out: np.ndarray = mc[np.isin(name_id, d2h) & (nbytes >= 0) & (nbytes <= PER_ELEMENT_BYTES)]
    return out


def _issuing_ops(tables: TraceTables, rr: RankReplay, blk: np.ndarray) -> Intervals:
    """Host spans (µs, sorted, disjoint) of the copies that issued the blocking calls ``blk`` (indices into the
    graph's blocking calls): the top-level cpu_op of the call's thread around a call (``aten::to`` for ``.cpu()``,
    ``aten::item`` for ``.item()``: the copy's launch and its wait), or the call itself when no op holds it or the
    op launches more than one copy (then it is not one element's copy)."""
    from perfdoctor.trace import intervals as iv

    g = rr.graph
    s, e = g.blk_ts_us[blk].copy(), g.blk_end_us[blk].copy()
    ops, rt = tables.cpu_ops, tables.runtime
    if len(ops) == 0 or blk.size == 0:
        return iv.union(s, e)
    pid = int(g.blk_pid[blk][0])
    mc = (g.act_table == ACT_TABLES.index("memcpy")) & (g.act_pid == pid)
    tids = rt["tid"][g.blk_row[blk]]
    for tid in np.unique(tids).tolist():
        m = (ops["tid"] == tid) & (ops["pid"] == pid)
        order = np.argsort(ops["ts_us"][m], kind="stable")
        ts, end = ops["ts_us"][m][order], ops["end_us"][m][order]
        top = np.ones(ts.size, dtype=bool)
        top[1:] = ts[1:] >= np.maximum.accumulate(end)[:-1]
        ts, end = ts[top], end[top]
        if ts.size == 0:  # no op on the call's thread: the call itself (PD401's sync on a thread without ops)
            continue
        mine = np.flatnonzero(tids == tid)
        k = np.searchsorted(ts, s[mine], side="right") - 1
        inside = (k >= 0) & (end[np.maximum(k, 0)] >= e[mine])
        j = np.searchsorted(ts, g.act_launch_ts_us[mc], side="right") - 1
        j = j[(j >= 0) & (g.act_launch_ts_us[mc] < end[np.maximum(j, 0)])]
        one_copy = np.bincount(j, minlength=ts.size)[np.maximum(k, 0)] <= 1
        ok = inside & one_copy
        s[mine[ok]], e[mine[ok]] = ts[k[ok]], end[k[ok]]
    return iv.union(s, e)


@dataclass(frozen=True)
class _CopyLoop:
    """One step's loop of per-element device→host copies: the copies (graph activity indices, ``rows``), which of
    them the loop's first element launched (``first``, bool per row: they stay, as the one copy), and the host spans
    (µs, recorded clock) of the other elements' copy ops, which go."""

    rows: np.ndarray
    first: np.ndarray
    cut_ts_us: np.ndarray
    cut_end_us: np.ndarray


def _copy_loop(tables: TraceTables, rr: RankReplay, blk: np.ndarray, d2h: np.ndarray) -> _CopyLoop | None:
    """The loop of per-element copies in one step, from its blocking calls ``blk`` (graph blocking-call indices) and
    the process's one-element device→host copies ``d2h`` (:func:`_d2h_copies`): the spans of the ops that issued
    the calls (:func:`_issuing_ops`) that launched such a copy are the loop's elements. None: fewer than
    :data:`PER_ELEMENT_COPIES` elements, no loop."""
    if min(blk.size, d2h.size) < PER_ELEMENT_COPIES:
        return None  # each element's span holds one of these calls and launches one of these copies: no loop
    s, e = _issuing_ops(tables, rr, blk)
    lt = rr.graph.act_launch_ts_us[d2h]
    k = np.searchsorted(s, lt, side="right") - 1
    ok = (k >= 0) & (lt < e[np.maximum(k, 0)])
    copies = np.unique(k[ok])  # the spans that launched a device→host copy: the loop's elements
    if copies.size < PER_ELEMENT_COPIES:
        return None
    return _CopyLoop(d2h[ok], k[ok] == copies[0], s[copies[1:]], e[copies[1:]])


def _copy_loops(rr: RankReplay, tables: TraceTables, hit: np.ndarray) -> list[_CopyLoop]:
    """The per-element copy loop of each analysed step (:func:`_copy_loop`) whose blocking calls are among ``hit``
    (bool per graph blocking call), in step order."""
    g = rr.graph
    d2h = _d2h_copies(tables, rr)
    loops = []
    for a, b in zip(rr.windows.host_start_us.tolist(), rr.windows.host_end_us.tolist(), strict=True):
        loop = _copy_loop(tables, rr, np.flatnonzero(hit & (g.blk_ts_us >= a) & (g.blk_ts_us < b)), d2h)
        if loop is not None:
            loops.append(loop)
    return loops


def _one_copy_durations(rr: RankReplay, tables: TraceTables, loops: list[_CopyLoop], bw: float) -> np.ndarray:
    """The activities' durations (µs) with each loop's copies done as one: the first element's copy takes
    ``max(recorded, the loop's bytes ÷ bw)`` (``bw``: bytes/s), the others none."""
    g = rr.graph
    dur = g.act_dur_us.copy()
    for loop in loops:
        rows, first = loop.rows, loop.first
        nbytes = float(tables.memcpy["bytes"][g.act_row[rows]].clip(0).sum())
        dur[rows[~first]] = 0.0
        dur[rows[first]] = np.maximum(dur[rows[first]], nbytes / bw * 1e6 / int(first.sum()))
    return dur


def batch_copies(rr: RankReplay, tables: TraceTables, calls: Intervals) -> WhatIf:
    """A loop of blocking device→host copies (``tensor[i].item()`` / ``.cpu()`` per element) becomes one copy of
    the whole tensor before the loop.

    Per step with at least :data:`PER_ELEMENT_COPIES` device→host copies of one element each (at most
    :data:`PER_ELEMENT_BYTES`: a bigger copy moves a tensor and is no loop's element) issued by blocking calls inside
    ``calls``, the op that issued each copy (:func:`_issuing_ops`) is cut with its waits, except the first, which
    stays as the one copy; the copies' device activities go, and the first one's takes ``max(recorded, the loop's
    bytes ÷ bandwidth)`` (:func:`perfdoctor.replay.transforms.copies.pinned_bandwidth`: measured in this trace,
    else the PCIe datasheet). The rest of the loop (indexing, the host arithmetic on each element, the Python
    between the ops) keeps its recorded time: it now runs on the host copy, as the recorded arithmetic already ran
    on the copied values. The Python call overhead around each cut op (outside it, not recorded as an op) stays:
    a lower bound.
    Source: the recorded graph; the GPUPuzzlers d2h_sync puzzle's fix (one ``.cpu()``, then the loop).
    """
    from perfdoctor.replay.transforms.copies import pinned_bandwidth
    from perfdoctor.trace import intervals as iv

    g = rr.graph
    pid = rr.windows.pid
    hit = overlaps(g.blk_ts_us, g.blk_end_us, calls) & ((g.blk_pid == pid) if pid >= 0 else True)
    bw, bw_source = pinned_bandwidth(tables)
    loops = _copy_loops(rr, tables, hit)
    cut = (
        iv.union(np.concatenate([c.cut_ts_us for c in loops]), np.concatenate([c.cut_end_us for c in loops]))
        if loops
        else iv.EMPTY
    )
    in_cut = overlaps(g.blk_ts_us, g.blk_end_us, cut) & hit
    target = pid if pid >= 0 else (int(g.blk_pid[hit][0]) if hit.any() else -1)
    return WhatIf(
        "batch-copies",
        Scenario(
            "batch-copies",
            act_dur_us=_one_copy_durations(rr, tables, loops, bw) if loops else None,
            host_cut={target: cut} if cut[0].size else {},
            blk_removed=in_cut,
            peers_move=True,
        ),
        f"per-element device→host copies in {len(loops)} step(s) done as one copy of the tensor: "
        f"{sum(c.cut_ts_us.size for c in loops)} copy ops and their waits go, the loop's other host work stays; the "
        f"one copy takes the loop's bytes ÷ {bw / 1e9:.1f} GB/s at least",
        f"replay of the recorded graph (GPUPuzzlers d2h_sync puzzle's fix); {bw_source}",
    )
