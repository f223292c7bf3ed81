"""PD401 host-device-sync: synchronize calls and blocking device-to-host copies inside steps.

``.item()``, ``.cpu()``, ``.tolist()``, printing a tensor or ``if tensor:``
copy a value to the host and wait for the device to finish everything queued
before it (``cudaStreamSynchronize`` / a pageable ``cudaMemcpy`` D2H); explicit
``torch.cuda.synchronize()`` is ``cudaDeviceSynchronize``. While the host
waits, nothing new is queued, so the device idles until the host catches up.
The part of a sync after a pageable host-to-device copy that the copy itself
explains is PD102's (:func:`perfdoctor.checks.common.copy_explained`); the rest
is the host waiting for queued work to drain, and is this rule's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from perfdoctor.analysis.timing import host
from perfdoctor.checks.common import (
    cold_reason,
    copy_explained,
    count_text,
    idle_cause_ms,
    name_line,
    pageable_h2d,
    pct,
    replay_fields,
    steps_over,
    sync_calls_by_name,
    top_names,
)
from perfdoctor.checks.context import Outcome, RankContext, passed, replayed_outcome, skipped
from perfdoctor.findings import EventValue, Evidence
from perfdoctor.replay.transforms import WhatIf
from perfdoctor.replay.transforms.host import PER_ELEMENT_COPIES, batch_copies, remove_syncs
from perfdoctor.trace import intervals as iv

CODE = "PD401"
METRICS = {
    "syncs_per_step": "synchronize calls and blocking D2H copies per step, less the synchronize calls that wait for "
    "nothing (right after a blocking call, no device work queued since: "
    "perfdoctor.analysis.timing.host.waitless_syncs)",
    "idle_us": "mean µs per step the replayed step gets shorter when they no longer block (the saving)",
    "idle_pct": "idle_us as % of the mean step time",
}

# every field a hit gives the TOML message and headline (its evidence values and fields; checked at load)
MESSAGE_FIELDS = ("host_wait_ms", "sync_idle_ms", "syncs", "source", "recorded_ms", "replayed_fix", "saving_parts")


@dataclass(frozen=True)
class Thresholds:
    """``[thresholds]`` of rules/PD401.toml: names and types checked when the catalogue loads."""

    min_saving_pct: float
    sync_adjacency_us: float
    staging_gb_per_s: float
    per_copy_overhead_us: float
    waitless_sync_max_us: float


def _callers(ctx: RankContext, rows: np.ndarray) -> np.ndarray:
    """ "op → call" for each runtime call: the outermost cpu_op of the same thread whose time span contains the
    call (``aten::to`` for ``.cpu()``, ``aten::item`` for ``.item()``), else the call's own name.

    By time, not by external id: a blocking call's external id can be an earlier op's (the d2h_sync puzzle's
    ``cudaStreamSynchronize`` carries the id of the ``aten::as_strided`` before the ``aten::to`` it runs in).
    """
    t = ctx.tables
    rt, ops = t.runtime, t.cpu_ops
    names = t.name_array()[rt["name_id"][rows]].astype(object)
    out = np.asarray(names, dtype=object)
    if len(ops) == 0 or rows.size == 0:
        return out
    cs, ce = rt["ts_us"][rows], rt["end_us"][rows]
    for pid, tid in {(int(p), int(q)) for p, q in zip(rt["pid"][rows], rt["tid"][rows], strict=True)}:
        m = (ops["pid"] == pid) & (ops["tid"] == tid)
        order = np.lexsort((-ops["end_us"][m], ops["ts_us"][m]))  # by start, the longer first at a tie
        ts, end, nid = ops["ts_us"][m][order], ops["end_us"][m][order], ops["name_id"][m][order]
        top = np.ones(ts.size, dtype=bool)  # not inside an earlier op: the outermost ops
        top[1:] = ts[1:] >= np.maximum.accumulate(end)[:-1]
        ts, end, nid = ts[top], end[top], nid[top]
        sel = np.flatnonzero((rt["pid"][rows] == pid) & (rt["tid"][rows] == tid))
        if ts.size == 0:  # no op on the call's thread: the call's own name
            continue
        k = np.searchsorted(ts, cs[sel], side="right") - 1
        inside = (k >= 0) & (end[np.maximum(k, 0)] >= ce[sel])
        op = t.name_array()[nid[np.maximum(k, 0)]]
        out[sel[inside]] = op[inside] + " → " + names[sel[inside]]
    return out


def _source(events: Sequence[Mapping[str, EventValue]]) -> str:
    """Where the syncs come from, for the message: the op of the longest-waiting "op → call" group."""
    if not events:
        return "no op found around them"
    name = str(events[0]["name"])
    return f"most from {name.split(' → ')[0]}" if " → " in name else f"most are {name} outside any op"


def _covered(starts: np.ndarray, ends: np.ndarray, by: iv.Intervals) -> np.ndarray:
    """Whether each ``[start, end)`` lies inside one interval of ``by`` (sorted, disjoint)."""
    if by[0].size == 0 or starts.size == 0:
        return np.zeros(starts.size, dtype=bool)
    k = np.searchsorted(by[0], starts, side="right") - 1
    return (k >= 0) & (ends <= by[1][np.maximum(k, 0)])


# the fix a per-element copy loop gets (batch_copies' transformation): one copy of the tensor, then the loop
BATCH_FIX = f"""
The step copies a tensor to the host one element at a time (at least {PER_ELEMENT_COPIES} blocking device-to-host
copies per step, each `.item()`/`.cpu()` of one element waiting for the device): copy the whole tensor once
before the loop (`values = t.cpu()` or `t.tolist()`) and index the host copy. Other syncs in the step stay."""
BATCH_BEFORE = """
total = 0.0
for i in range(x.numel()):
    total += x[i].cpu()          # one blocking copy per element
"""
BATCH_AFTER = """
values = x.cpu()                 # one copy of the tensor
total = 0.0
for i in range(values.numel()):
    total += values[i]
"""


def _wait_events(ctx: RankContext, sync_rows: np.ndarray, waits: iv.Intervals) -> list[dict[str, EventValue]]:
    """The evidence's events: the sync calls and blocking memcpy calls, grouped "op → call", each weighted by its
    host time (µs) inside ``waits`` and the step windows, so that the groups add up to the headline's host wait
    (GPUPuzzlers first_sum: 4,096 pageable D2H cudaMemcpyAsync, 93% of the wait, were missing from a list of the
    syncs alone). A call with no time left there (a copy's own time, PD102's) is not listed."""
    ws, we = ctx.windows()
    inside = iv.intersect(waits, iv.union(ws, we))
    rt = ctx.tables.runtime
    rows = np.union1d(sync_rows, host.blocking_memcpy_rows(ctx.tables))
    weight = iv.covered_until(inside, rt["end_us"][rows]) - iv.covered_until(inside, rt["ts_us"][rows])
    keep = weight > 0
    return top_names(_callers(ctx, rows[keep]), weight[keep])


def _whatif(ctx: RankContext, waits: iv.Intervals) -> tuple[WhatIf, str, dict[str, str]]:
    """The fix replayed: a per-element copy loop done as one copy (:func:`batch_copies`) when the step has one,
    else the syncs no longer blocking (:func:`remove_syncs`); with the message's phrase and the advice."""
    rr = ctx.replay()
    batched = batch_copies(rr, ctx.tables, waits)
    if batched.changes_anything:
        advice = {"fix": BATCH_FIX, "example_before": BATCH_BEFORE, "example_after": BATCH_AFTER}
        return batched, "its per-element copies done as one copy", advice
    return remove_syncs(rr, waits), "its syncs not blocking", {}


def check(ctx: RankContext) -> Outcome:
    th = ctx.thresholds(Thresholds)
    if reason := cold_reason(ctx):
        return skipped(reason)
    t = ctx.tables
    mask, copy_blocked = pageable_h2d(t, ctx.device.device, th.sync_adjacency_us)
    copy_own = copy_explained(t, mask, copy_blocked, th.staging_gb_per_s, th.per_copy_overhead_us)
    rows, _ = sync_calls_by_name(t, iv.EMPTY)
    rt = t.runtime
    rows = rows[~_covered(rt["ts_us"][rows], rt["end_us"][rows], copy_own)]  # wholly the copy's own: PD102's
    # a sync right after a call that returned once the device caught up waits for nothing: no wait to count, but
    # the fix removes its call with the rest (the replay cuts it)
    waitless = host.waitless_syncs(t, rows, th.waitless_sync_max_us)
    idle_calls = iv.union(rt["ts_us"][rows[waitless]], rt["end_us"][rows[waitless]]) if waitless.any() else iv.EMPTY
    rows = rows[~waitless]
    calls = iv.union(rt["ts_us"][rows], rt["end_us"][rows]) if rows.size else iv.EMPTY
    d2h = iv.subtract(host.blocking_memcpy_calls(t), copy_blocked)
    waits = iv.subtract(iv.union_of(calls, d2h), copy_own)
    ws, we = ctx.windows()
    whatif, replayed_fix, advice = _whatif(ctx, iv.union_of(waits, idle_calls))
    saving, idle, method = ctx.replayed_saving(whatif)
    idle = np.maximum(idle, 0.0)
    in_step = ctx.step_of(rt["ts_us"][rows]) if rows.size else np.empty(0, dtype=np.int64)
    n_calls = np.bincount(in_step[in_step >= 0], minlength=ctx.n_steps)
    n_d2h = (
        np.bincount(np.clip(ctx.step_of(d2h[0]), -1, None) + 1, minlength=ctx.n_steps + 1)[1:]
        if d2h[0].size
        else np.zeros(ctx.n_steps)
    )
    metrics = {
        "syncs_per_step": float((n_calls + n_d2h).mean()),
        "idle_us": saving,
        "idle_pct": pct(saving, ctx.base_step_us),
    }
    if saving <= 0:  # min_saving_pct is the engine's, on the report's denominator (perfdoctor.checks.after)
        return passed(**metrics)
    ev = Evidence(
        values={
            "syncs_per_step": metrics["syncs_per_step"],
            "host_wait_ms": float(iv.per_window(waits, ws, we).mean()) / 1000,
            "sync_idle_ms": idle_cause_ms(ctx, "synchronization"),
            "replayed_fix": replayed_fix,
        },
        steps=steps_over(idle, ctx.per_step(lambda s: s.dur_us), th.min_saving_pct, ctx.step_numbers),
        events=_wait_events(ctx, rows, waits),
    )
    # the .item() / .cpu() line: the runtime calls that start each wait (syncs and blocking copies)
    starts = rt["ts_us"]
    in_wait = (iv.containing(starts, waits) >= 0) if waits[0].size else np.zeros(len(rt), dtype=bool)
    name_line(ev, t, "runtime", np.flatnonzero(in_wait), rt["dur_us"][in_wait])
    # where the saving comes from, read off the replays it is the difference of (it can exceed the sync idle named
    # above: copies on other streams overlap compute once the host no longer blocks between them)
    parts = ctx.saving_parts(whatif).text(("synchronization",))
    fields = {
        "syncs": count_text(metrics["syncs_per_step"]),
        "source": _source(ev.events),
        "saving_parts": parts,
        **replay_fields(ctx),
    }
    return replayed_outcome(ctx, metrics, ev, saving, method, fields, advice, min_saving_pct=th.min_saving_pct)
