"""The step with every collective free: the bound a multi-rank run's communication puts on its step time."""

from __future__ import annotations

import re

import numpy as np

from perfdoctor.replay.rank import RankReplay
from perfdoctor.replay.simulate import Intervals, Scenario
from perfdoctor.replay.transforms import WhatIf
from perfdoctor.trace import intervals as iv
from perfdoctor.trace.tables import TraceTables

SOURCE = "the recorded dependency graph with communication removed (an ideal, infinitely fast interconnect)"


def exposed_host_collectives(tables: TraceTables, pid: int) -> Intervals:
    """Host time (µs, disjoint sorted intervals) of process ``pid`` inside host collectives
    (:data:`perfdoctor.analysis.timing.cpu_breakdown.HOST_COMMUNICATION`: gloo/c10d calls, ``record_param_comms``;
    the ops nested in one on its thread are inside its interval) that no other op of the process overlaps: the
    breakdown's exposed host collective time (:func:`perfdoctor.analysis.timing.cpu_breakdown.cpu_breakdown`)."""
    from perfdoctor.analysis.timing.cpu_breakdown import HOST_COMMUNICATION, host_compute, host_unions

    named = tables.names_matching(re.compile(HOST_COMMUNICATION))
    parts = []
    for tname in ("annotations", "cpu_ops"):
        tab = tables.tables[tname]
        if len(tab):
            m = named[tab["name_id"]] & (tab["pid"] == pid)
            parts.append(iv.union(tab["ts_us"][m], tab["end_us"][m]))
    coll = iv.union_of(*parts) if parts else iv.EMPTY
    return iv.subtract(coll, host_compute(host_unions(tables, pid)))


def free_collectives(rr: RankReplay, tables: TraceTables) -> WhatIf:
    """Every collective's transfer is free and perfectly overlapped: each communication activity (kernel classes,
    :func:`perfdoctor.replay.kernel_classes.kernel_classes`) takes zero time and no compute waits for one (the waits
    :func:`perfdoctor.replay.transforms.kernels.overlap_communication` drops); on a CPU-only rank (gloo) the
    training process's exposed host collective time (:func:`exposed_host_collectives`) is cut from its timeline.
    Every rank is changed alike (``peers_move``), so nobody waits for a peer inside a collective either.

    Assumption: nothing but the transfer and the wait for peers changes; the compute, its order and the host's
    launches stay as recorded. No communication fix (faster links, compression, overlap, balancing the ranks) can
    do better, so the replayed step is a lower bound on the step and the saving an upper bound on any such fix.
    Source: the recorded dependency graph, replayed (:mod:`perfdoctor.replay.simulate`).
    """
    from perfdoctor.replay.kernel_classes import kernel_classes
    from perfdoctor.replay.transforms.kernels import overlap_communication

    g = rr.graph
    cat, _, _ = kernel_classes(tables, g)
    comm = cat == "communication"
    dur = np.where(comm, 0.0, g.act_dur_us)
    waits = overlap_communication(rr, tables).scenario
    cut: dict[int, Intervals] = {}
    n_host = 0
    if not tables.has_device_activity:
        exposed = exposed_host_collectives(tables, rr.windows.pid)
        n_host = int(exposed[0].size)
        if n_host:
            cut = {rr.windows.pid: exposed}
    sc = Scenario(
        "free-collectives",
        act_dur_us=dur,
        host_cut=cut,
        act_dep_removed=waits.act_dep_removed,
        xdep_removed=waits.xdep_removed,
        peers_move=True,
    )
    what = (
        f"{int(comm.sum())} communication activities take no time and no compute waits for them"
        if tables.has_device_activity
        else f"{n_host} stretches of exposed host collective time (gloo calls and the ops inside them) cut"
    )
    return WhatIf(
        "free-collectives",
        sc,
        f"{what}, on every rank alike: the transfer free and perfectly overlapped, compute and launches as "
        "recorded (a bound no communication fix can beat)",
        SOURCE,
    )


def free_collectives_step_us(rr: RankReplay, tables: TraceTables) -> tuple[float, float] | None:
    """(mean step the rank's savings are taken from, the same mean step replayed with :func:`free_collectives`),
    µs over the analysed steps (:meth:`perfdoctor.replay.rank.RankReplay.fixed_step_times`: a ``perfdoctor
    profile`` run's unprofiled step); None for a rank without analysed steps or anything to free (no communication
    activity, and on a CPU-only rank no exposed host collective time)."""
    from perfdoctor.replay.kernel_classes import kernel_classes

    if rr.recorded_step_us.size == 0:
        return None
    whatif = free_collectives(rr, tables)
    cat, _, _ = kernel_classes(tables, rr.graph)
    if not bool((cat == "communication").any()) and not whatif.scenario.host_cut:
        return None
    return rr.base_step_us, float(rr.fixed_step_times([whatif]).mean())
