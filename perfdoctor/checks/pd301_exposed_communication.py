"""PD301 exposed-communication: collective kernel time not overlapped by compute kernels.

From the breakdown's ``communication`` per step: ``exposed_us`` is the part of
the union of NCCL/RCCL kernels during which no compute kernel runs on the
device (HTA's comm/comp overlap = overlapped ÷ total). On a multi-rank job
whose collectives can be matched across ranks
(:mod:`perfdoctor.crossrank.collectives`), the time a rank waits inside
collectives for later ranks to arrive is taken out of the exposed time: no
overlap setting shortens it (PD304 reports it), so the saving here is the
exposed transfer only: ``max(exposed − wait, 0)`` per step.

A second fix is stated next to it, with its own saving, assumption and source, when the trace shows collectives
issued later than their input was ready (:func:`perfdoctor.replay.transforms.kernels.issue_collectives_early`:
each collective waits only for the op producing its input, matched by shape): "issue the all-to-all as soon as
its input is ready", replayed alone (an alternative to overlapping: the findings' fix-all replays the first).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from perfdoctor.checks.common import pct, steps_over
from perfdoctor.checks.context import Outcome, RankContext, passed, skipped
from perfdoctor.findings import Estimate, Evidence, Hit

CODE = "PD301"
CROSS_RANK = True  # reads the job's collective wait: re-run on the rank's summary once the job has it
METRICS = {
    "comm_us": "mean µs per step of collective kernels (union)",
    "exposed_us": "mean µs per step of collective time with no compute kernel running",
    "exposed_pct": "exposed_us as % of the mean step time",
    "overlap_pct": "overlapped ÷ total collective time, %",
    "wait_us": "mean µs per step this rank waits inside collectives for other ranks (multi-rank, matched)",
    "saving_us": "mean µs per step the replayed step gets shorter when compute no longer waits for collectives",
    "saving_pct": "saving_us as % of the mean step time",
    "replayed_us": "the replay's saving before the cap at exposed_us",
    "reorder_saving_us": "mean µs per step the replayed step gets shorter when each collective is issued right after "
    "the op producing its input (0: none issued later than that)",
}

# every field a hit gives the TOML message and headline (its evidence values and fields; checked at load)
MESSAGE_FIELDS = (
    "comm_ms",
    "exposed_ms",
    "messages_note",
    "wait_note",
    "reorder_note",
    "overlap_pct",
    "exposed_pct",
)
# the parallelism the collectives show, each with its fix_<situation> in the TOML (:func:`_situation`)
ADVICE = ("ddp", "fsdp", "zero", "alltoall", "pipeline")


@dataclass(frozen=True)
class Thresholds:
    """``[thresholds]`` of rules/PD301.toml: names and types checked when the catalogue loads."""

    min_saving_pct: float


@dataclass(frozen=True)
class Exposure:
    """The rank's collective time per analysed step (µs arrays, one entry per step): ``exposed`` is the exposed
    time less the wait for other ranks inside collectives (``wait``, zeros without a job's matched collectives)."""

    total: np.ndarray
    exposed_all: np.ndarray
    overlapped: np.ndarray
    wait: np.ndarray
    exposed: np.ndarray


def check(ctx: RankContext) -> Outcome:
    th = ctx.thresholds(Thresholds)
    total = ctx.per_step(lambda s: s.communication.total_us)
    if total.sum() <= 0:
        return skipped(_no_comm_reason(ctx))
    ex = _exposure(ctx, total)
    # each mean once: re-run for every rank of a job (4,096 ranks: 24,576 means of one-step arrays took 0.4 s)
    exposed_us, total_us, wait_us = float(ex.exposed.mean()), float(total.mean()), float(ex.wait.mean())
    reorder, replayed, replay_method = _replayed(ctx, exposed_us)
    saving = min(max(replayed, 0.0), exposed_us)  # np.clip's value for a scalar
    metrics = {
        "comm_us": total_us,
        "exposed_us": exposed_us,
        "exposed_pct": pct(exposed_us, ctx.step_us),
        "saving_us": saving,
        "saving_pct": pct(saving, ctx.base_step_us),
        "replayed_us": replayed,
        "overlap_pct": pct(float(ex.overlapped.sum()), float(total.sum())),
        "wait_us": wait_us,
        "reorder_saving_us": reorder[0],
    }
    if saving <= 0:  # min_saving_pct: the engine's, on the report's denominator (perfdoctor.checks.after)
        return passed(**metrics)
    by_coll = _by_collective(ctx)
    msgs, recorded = _messages(ctx)
    situation = _situation(ctx, by_coll, recorded)
    ev = _evidence(ctx, ex, metrics, by_coll, msgs, situation, reorder)
    ev.steps = steps_over(ex.exposed, ctx.per_step(lambda s: s.dur_us), th.min_saving_pct, ctx.step_numbers)
    method = (
        replay_method
        + "; at most the collective time with no compute kernel running"
        + (", less the rank's wait for other ranks inside collectives" if ex.wait.any() else "")
    )
    return Outcome(
        metrics=metrics,
        hit=Hit(
            evidence=ev,
            estimate=Estimate(saving, method),
            advice=ctx.advice(situation) if situation else {},
            min_saving_pct=th.min_saving_pct,
        ),
    )


def _exposure(ctx: RankContext, total: np.ndarray) -> Exposure:
    """The rank's exposed collective time per step (``total``: its collective time, µs), less its wait for other
    ranks where the job matched its collectives (:mod:`perfdoctor.crossrank.collectives`)."""
    exposed_all = ctx.per_step(lambda s: s.communication.exposed_us)
    overlapped = ctx.per_step(lambda s: s.communication.overlapped_us)
    cw = ctx.analysis.collective_wait
    wait = cw.wait_us.get(ctx.rank.rank) if cw is not None and ctx.rank.rank is not None else None
    wait = np.zeros_like(exposed_all) if wait is None or wait.size != exposed_all.size else wait
    exposed = np.maximum(exposed_all - np.minimum(wait, exposed_all), 0.0)
    return Exposure(total, exposed_all, overlapped, wait, exposed)


def _replayed(ctx: RankContext, exposed_us: float) -> tuple[tuple[float, str], float, str]:
    """(the second fix's (saving µs, sentence): :func:`_reorder`; the replay's saving µs per step with compute no
    longer waiting for collectives, before the cap at ``exposed_us``; its method). Re-run from a rank summary with
    the job's collective wait, both come from the rank's own pass, where its replay ran."""
    from perfdoctor.replay.transforms.kernels import overlap_communication

    # the saving is the replay's with compute no longer waiting for collectives, at most the exposed time
    # less the wait for other ranks (no overlap hides that: PD304)
    method_text = "replay of the step's dependency graph with compute no longer waiting for collectives"
    if ctx.has_trace:
        reorder = _reorder(ctx, exposed_us)
        replayed, _, replay_method = ctx.replayed_saving(overlap_communication(ctx.replay(), ctx.tables))
        return reorder, replayed, replay_method
    first = ctx.rank_pass()
    prev = first.hit.evidence.values if first is not None and first.hit is not None else {}
    saving_ms = prev.get("reorder_saving_ms", 0.0)
    reorder = (
        float(saving_ms) * 1000 if isinstance(saving_ms, (int, float)) else 0.0,
        str(prev.get("reorder_note", "")),
    )
    replayed = float((first.metrics if first is not None else {}).get("replayed_us", exposed_us))
    return reorder, replayed, method_text + " (replayed where the rank was analysed)"


def _by_collective(ctx: RankContext) -> dict[str, float]:
    """Mean µs per step of each collective's kernels (the breakdown's ``communication_by_collective_us``)."""
    by_coll: dict[str, float] = {}
    n_steps = ctx.n_steps  # once: each call finds the primary device again (50,001 steps took minutes)
    for s in ctx.step_rows:
        for c, v in s.communication_by_collective_us.items():
            by_coll[c] = by_coll.get(c, 0.0) + v / n_steps
    return by_coll


def _evidence(
    ctx: RankContext,
    ex: Exposure,
    metrics: dict[str, float],
    by_coll: dict[str, float],
    msgs: str,
    situation: str | None,
    reorder: tuple[float, str],
) -> Evidence:
    """The hit's evidence values (ms and %): the message's fields and the numbers behind them."""
    wait_us = metrics["wait_us"]
    wait_note = (
        f" ({float(ex.exposed_all.mean()) / 1000:.1f} ms exposed in all, less {wait_us / 1000:.1f} ms of "
        "waiting for other ranks to arrive, which no overlap can hide: PD304)"
        if ex.wait.any()
        else ""
    )
    return Evidence(
        values={
            "parallelism": _PARALLELISM.get(situation or "", "not told apart"),
            "comm_ms": metrics["comm_us"] / 1000,
            "exposed_ms": metrics["exposed_us"] / 1000,
            "exposed_pct": metrics["exposed_pct"],
            "overlap_pct": metrics["overlap_pct"],
            "wait_note": wait_note,
            "wait_ms": wait_us / 1000,
            "by_collective_ms": {c: v / 1000 for c, v in sorted(by_coll.items())},
            "messages": msgs,
            "messages_note": f"; messages (record_param_comms): {msgs}" if msgs else "",
            "reorder_saving_ms": reorder[0] / 1000,
            "reorder_note": reorder[1],
        },
    )


# the evidence's words for each situation of ADVICE
_PARALLELISM = {
    "ddp": "data parallel (all-reduce)",
    "fsdp": "sharded data parallel (all-gather / reduce-scatter)",
    "zero": "DeepSpeed ZeRO (all-gather / reduce-scatter)",
    "alltoall": "all-to-all (expert or embedding parallel)",
    "pipeline": "pipeline (send/recv between stages)",
}


def _situation(ctx: RankContext, by_coll: dict[str, float], recorded: set[str]) -> str | None:
    """Which fix of :data:`ADVICE` the collectives call for, from the one with the most time per step (the kernels'
    names) and what record_param_comms says the collectives were (``recorded``, as :func:`_kind_text` writes them:
    an all_to_allv runs as NCCL send/recv kernels);
    the labels of FSDP, ``fully_shard`` or DeepSpeed ZeRO decide for them
    (:func:`perfdoctor.analysis.parallel.sharding.flavour`). None when nothing tells (the rule's generic fix). Re-run
    from a rank
    summary (no tables), the situation found where the rank was analysed."""
    if not ctx.has_trace:
        first = ctx.rank_pass()
        said = first.hit.evidence.values.get("parallelism") if first is not None and first.hit is not None else None
        return next((k for k, v in _PARALLELISM.items() if v == said), None)
    from perfdoctor.analysis.parallel.sharding import flavour

    sharded = flavour(ctx.tables)  # FSDP1, fully_shard or DeepSpeed ZeRO, from their labels
    if sharded is not None:
        return "zero" if sharded == "zero" else "fsdp"
    if not by_coll:
        return None
    kern = ctx.tables.kernels
    if "collective" in kern:  # Kineto's "Collective name" of a collective kernel: what was called, as recorded
        recorded = recorded | {_kind_text(str(c)) for c in set(kern["collective"].tolist()) if c}
    top = _kind_text(max(by_coll, key=lambda c: by_coll[c]))
    if recorded and top not in recorded:  # the kernel runs what was called (send/recv kernels for an all_to_allv)
        top = "all-to-all" if "all-to-all" in recorded else min(recorded) if len(recorded) == 1 else top
    if top == "all-to-all":
        return "alltoall"
    if re.search(r"send|recv", top):
        return "pipeline"
    return {"all-reduce": "ddp", "all-gather": "fsdp", "reduce-scatter": "fsdp"}.get(top)


_KINDS = (
    ("all_to_all", "all-to-all"),
    ("alltoall", "all-to-all"),
    ("all_reduce", "all-reduce"),
    ("allreduce", "all-reduce"),
    ("all_gather", "all-gather"),
    ("allgather", "all-gather"),
    ("reduce_scatter", "reduce-scatter"),
    ("reducescatter", "reduce-scatter"),
)


def _kind_text(raw: str) -> str:
    """A collective's name as the report writes it: ``all_to_allv`` → "all-to-all", ``allreduce`` → "all-reduce"."""
    low = raw.lower()
    return next((text for key, text in _KINDS if key in low), low.replace("_", "-") or "collective")


def _reorder(ctx: RankContext, cap_us: float) -> tuple[float, str]:
    """The second fix: each collective issued right after the op producing its input
    (:func:`perfdoctor.replay.transforms.kernels.issue_collectives_early`), replayed alone: (saving µs per step, at
    most ``cap_us``; the sentence for the message, with its saving, assumption and source); (0, "") when no
    collective waits for more than its input's producer."""
    from perfdoctor.analysis.timing.classify import classify_kernel
    from perfdoctor.replay.transforms.kernels import issue_collectives_early

    rr = ctx.replay()
    w = issue_collectives_early(rr, ctx.tables)
    moved = w.scenario.xdep_src_moved
    if moved is None or not (moved >= 0).any():
        return 0.0, ""
    g, kern = rr.graph, ctx.tables.kernels
    acts = np.unique(g.xdep_dst[moved >= 0])
    rows = g.act_row[acts[g.act_table[acts] == 0]]
    named = kern["collective"][rows].tolist() if "collective" in kern else [None] * rows.size
    kinds = sorted(
        {
            _kind_text(str(c) if c else (classify_kernel(ctx.tables.names[int(i)]).collective or ""))
            for c, i in zip(named, kern["name_id"][rows].tolist())
        }
    )
    replayed, _, method = ctx.replayed_saving(w, record=False)
    saving = float(np.clip(replayed, 0.0, cap_us))
    what = "/".join(kinds) or "collective"
    return saving, (
        f"; second fix: issue the {what} as soon as its input is ready: saves {saving / 1000:,.2f} ms per step "
        f"({method})"
    )


def _no_comm_reason(ctx: RankContext) -> str:
    """Why there is nothing to judge: single-process training only when nothing in the trace says otherwise."""
    from perfdoctor.analysis.timing.kernel_ops import COMM_OP

    names = ctx.tables.name_array()
    host = sorted(
        {
            str(names[i])
            for t in ("cpu_ops", "annotations")
            if len(ctx.tables.tables[t])
            for i in np.unique(ctx.tables.tables[t]["name_id"]).tolist()
            if COMM_OP.search(str(names[i]))
        }
    )
    info = ctx.tables.metadata.get("distributedInfo")
    world = info.get("world_size") if isinstance(info, dict) else None
    if host:
        return (
            f"collectives are called on the host ({', '.join(host[:3])}) but no communication kernel of this "
            "device lies in the analysed steps: host (gloo) collectives, or device activity not recorded"
        )
    if isinstance(world, int) and world > 1:
        return (
            f"distributedInfo says world_size {world}, but the trace holds no communication kernel "
            "(NCCL/RCCL, MSCCL, NVSHMEM, DeepEP, oneCCL) and no c10d/record_param_comms annotation"
        )
    return (
        "no collective kernel (NCCL/RCCL, MSCCL, NVSHMEM, DeepEP, oneCCL, custom all-reduce/all-to-all) and "
        "no c10d/record_param_comms annotation in the trace: single-process training"
    )


def _messages(ctx: RankContext) -> tuple[str, set[str]]:
    """The collectives' messages as record_param_comms records them over the analysed steps ("" if none, or when
    re-run from a rank summary, which keeps no tables), and the collectives named there (:func:`_kind_text`)."""
    from perfdoctor.analysis.timing.kernel_ops import collective_messages

    if not ctx.has_trace:
        return "", set()
    ws, we = ctx.windows()
    rows = collective_messages(ctx.tables, float(ws[0]), float(we[-1]))
    parts = []
    for r in rows[:4]:
        size = f"{int(str(r['bytes_per_call'])) / 1e6:,.3f} MB" if r["bytes_per_call"] is not None else "size unknown"
        per_step = int(str(r["calls"])) / max(ctx.n_steps, 1)
        parts.append(f"{r['collective']} {per_step:g}×/step of {size} in a group of {r['group_size']}")
    return "; ".join(parts), {_kind_text(str(r["collective"])) for r in rows}
