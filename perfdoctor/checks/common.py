"""Helpers several checks share: host intervals of copies and syncs, per-step summaries, top events."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from perfdoctor.analysis.timing import host
from perfdoctor.analysis.timing.classify import classify_kernel
from perfdoctor.analysis.timing.source_lines import stacks_of
from perfdoctor.findings import Basis, Estimate, EventValue, Evidence
from perfdoctor.trace import intervals as iv
from perfdoctor.trace.join import launch_rows, launched_rows
from perfdoctor.trace.json_value import number
from perfdoctor.trace.tables import TraceTables

if TYPE_CHECKING:
    from perfdoctor.capture.run_data import RunData
    from perfdoctor.checks.context import RankContext

COPY_OPS = r"^aten::(copy_|to|_to_copy|_copy_from|_copy_from_and_resize)$"


def pct(part: float, whole: float) -> float:
    """``100 * part / whole`` (0 when ``whole`` is 0)."""
    return 100.0 * part / whole if whole > 0 else 0.0


def count_text(n: float) -> str:
    """A count (e.g. a mean number of calls per step) as text: "8,193" when whole, "2.5" otherwise."""
    return f"{n:,.0f}" if float(n).is_integer() else f"{n:,.1f}"


def step_list_text(numbers: list[int]) -> str:
    """Step numbers as text: "#5–#10" when consecutive, else "#2, #4, #7" (``ProfilerStep#N`` numbers)."""
    if not numbers:
        return "none"
    if len(numbers) > 1 and numbers == list(range(numbers[0], numbers[0] + len(numbers))):
        return f"#{numbers[0]}–#{numbers[-1]}"
    return ", ".join(f"#{n}" for n in numbers)


def shown_steps_text(shown: list[int], analysed: list[int]) -> str:
    """A saving method's note on a finding whose steps (where the problem shows) are fewer than the analysed steps
    its per-step figures are averaged over: "; the problem shows in 5 of the 6 steps averaged (#6–#10)"; "" when
    they are the same steps or the finding names none."""
    if not shown or sorted(shown) == sorted(analysed):
        return ""
    return f"; the problem shows in {len(shown)} of the {len(analysed)} steps averaged ({step_list_text(shown)})"


def rank_list_text(ranks: list[int], limit: int = 8) -> str:
    """Trace ranks as text, runs of three or more folded: "0–7", "0, 1, 5, 9–12"; past ``limit`` runs, "…" and
    the count."""
    runs: list[tuple[int, int]] = []
    for r in sorted(set(ranks)):
        if runs and r == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], r)
        else:
            runs.append((r, r))
    parts = [f"{a}" if a == b else (f"{a}, {b}" if b == a + 1 else f"{a}–{b}") for a, b in runs]
    if len(parts) > limit:
        return ", ".join(parts[:limit]) + f", … ({len(set(ranks))} ranks)"
    return ", ".join(parts)


def replay_fields(ctx: RankContext) -> dict[str, float]:
    """Message fields of a replayed saving: ``recorded_ms``, the mean step the rank's savings are taken from (ms:
    its recorded mean analysed step, or a profile run's unprofiled step, :attr:`RankContext.base_step_us`; the
    engine adds ``replayed_ms`` = ``recorded_ms`` − the saving, so a message reads "takes it from A ms to B ms")."""
    return {"recorded_ms": ctx.base_step_us / 1000.0}


def replayed_estimate(saving_us: float, method: str, fields: Mapping[str, object]) -> Estimate:
    """The estimate of a replayed saving whose message says "takes it from A ms to B ms": ``from_us`` is A
    (``fields["recorded_ms"]``, from :func:`replay_fields` or the replayed base the check measured on top of), so a
    renderer's now/fixed bars show the message's two steps."""
    recorded_ms = fields["recorded_ms"]
    assert isinstance(recorded_ms, (int, float, np.floating)), "recorded_ms: the step the saving is taken from, ms"
    return Estimate(saving_us, method, basis=Basis(from_us=float(recorded_ms) * 1000.0))


def idle_cause_ms(ctx: RankContext, cause: str) -> float:
    """Measured device idle per step (ms, mean over the analysed steps) the breakdown attributes to ``cause``
    (an :class:`perfdoctor.vocab.IdleCause` value): a measurement, not a replayed saving."""
    return float(ctx.per_step(lambda s: s.idle_causes_us.get(cause, 0.0)).mean()) / 1000.0 if ctx.n_steps else 0.0


def steps_over(values_us: np.ndarray, step_us: np.ndarray, min_pct: float, numbers: list[int]) -> list[int]:
    """Step numbers whose ``values_us`` is at least ``min_pct`` % of that step's time."""
    share = np.divide(100.0 * values_us, step_us, out=np.zeros_like(values_us), where=step_us > 0)
    return [int(numbers[i]) for i in np.flatnonzero(share >= min_pct)]


def memcpy_mask(tables: TraceTables, device: int, direction: str, pageable: bool | None) -> np.ndarray:
    """Rows of the memcpy table on ``device`` with ``direction`` (``h2d``...) and host memory kind.

    ``pageable`` True/False selects names saying Pageable/Pinned; None selects
    copies whose names say neither.
    """
    mc = tables.memcpy
    if len(mc) == 0:
        return np.zeros(0, dtype=bool)
    uniq = np.unique(mc["name_id"])
    good = [
        i
        for i in uniq.tolist()
        if (c := classify_kernel(tables.names[i])).direction == direction and c.pageable is pageable
    ]
    return np.asarray(np.isin(mc["name_id"], good) & (mc["device"] == device))


def runtime_calls_of(tables: TraceTables, table: str, rows: np.ndarray) -> iv.Intervals:
    """Host intervals of the runtime calls that launched the selected rows of ``table`` (mask or indices)."""
    rt = tables.runtime
    r = launched_rows(tables, table, rows)
    return iv.union(rt["ts_us"][r], rt["end_us"][r])


def ops_containing(tables: TraceTables, pattern: str, times_us: np.ndarray) -> iv.Intervals:
    """Union of cpu ops named ``pattern`` that contain at least one of ``times_us``."""
    ops = tables.cpu_ops
    if len(ops) == 0 or times_us.size == 0:
        return iv.EMPTY
    m = tables.names_matching(re.compile(pattern))[ops["name_id"]]
    s, e = ops["ts_us"][m], ops["end_us"][m]
    t = np.sort(times_us)
    holds = np.searchsorted(t, e, side="left") > np.searchsorted(t, s, side="left")
    return iv.union(s[holds], e[holds])


def pageable_h2d(tables: TraceTables, device: int, adjacency_us: float) -> tuple[np.ndarray, iv.Intervals]:
    """Pageable host-to-device copies of ``device`` and the host time they block.

    Returns ``(memcpy row mask, blocked host intervals)``: the copies' runtime
    calls, plus the copy op around them (``aten::copy_``/``to``: PyTorch
    synchronizes the stream after a pageable copy) or, when the trace has no
    such op, any synchronize call starting within ``adjacency_us`` after the copy call.
    """
    mask = memcpy_mask(tables, device, "h2d", True)
    if not mask.any():
        return mask, iv.EMPTY
    calls = runtime_calls_of(tables, "memcpy", mask)
    windows = iv.union_of(ops_containing(tables, COPY_OPS, calls[0]), iv.union(calls[0], calls[1] + adjacency_us))
    blocked = iv.union_of(calls, iv.intersect(host.synchronization(tables), windows))
    return mask, blocked


def copy_explained(
    tables: TraceTables, mask: np.ndarray, blocked: iv.Intervals, staging_gb_per_s: float, per_copy_overhead_us: float
) -> iv.Intervals:
    """The part of ``blocked`` (host intervals, µs) that the pageable copies themselves explain.

    Each copy (memcpy rows ``mask``) may hold the host for at most
    ``max(device memcpy dur_us, bytes / staging bandwidth) + per_copy_overhead_us``
    from the start of its runtime call: staging through the driver's pinned
    buffer runs at no less than ``staging_gb_per_s`` (GB/s, decimal), and the
    call, the staging set-up and the stream sync's return cost a few µs. The rest
    of a blocked interval is the host waiting for the stream to drain the work
    queued before the copy, which pinning would not remove (PD401 counts it).
    Returns ``blocked`` ∩ the union of ``[call start, call start + bound)``.
    """
    mc, rt = tables.memcpy, tables.runtime
    if not mask.any() or len(rt) == 0 or blocked[0].size == 0:
        return iv.EMPTY
    rows = launch_rows(tables, "memcpy")[mask]
    found = rows >= 0
    call_ts = rt["ts_us"][rows[found]]
    bound = (np.maximum(mc["dur_us"][mask], mc["bytes"][mask] / (staging_gb_per_s * 1e3)) + per_copy_overhead_us)[found]
    return iv.intersect(iv.union(call_ts, call_ts + bound), blocked)


def size_text(nbytes: float) -> str:
    """Bytes as text in decimal units: ``"512 B"``, ``"11.5 KB"``, ``"8.4 MB"``, ``"1.20 GB"``."""
    if nbytes < 1e3:
        return f"{nbytes:.0f} B"
    if nbytes < 1e6:
        return f"{nbytes / 1e3:.1f} KB"
    if nbytes < 1e9:
        return f"{nbytes / 1e6:.1f} MB"
    return f"{nbytes / 1e9:.2f} GB"


def sync_calls_by_name(tables: TraceTables, exclude: iv.Intervals) -> tuple[np.ndarray, np.ndarray]:
    """Row indices of synchronize runtime calls not inside ``exclude``, and their names."""
    rt = tables.runtime
    if len(rt) == 0:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=object)
    m = tables.names_matching(re.compile(host.SYNC_RUNTIME))[rt["name_id"]]
    idx = np.flatnonzero(m)
    if exclude[0].size and idx.size:
        idx = idx[iv.containing(rt["ts_us"][idx], exclude) < 0]
    return idx, tables.name_array()[rt["name_id"][idx]]


def top_names(names: np.ndarray, weights: np.ndarray, n: int = 5, unit: str = "us") -> list[dict[str, EventValue]]:
    """The ``n`` names with the largest summed weight: ``[{"name", "count", "total_<unit>"}]``."""
    if names.size == 0:
        return []
    uniq, inv = np.unique(names.astype(str), return_inverse=True)
    tot = np.bincount(inv, weights=weights)
    cnt = np.bincount(inv)
    order = np.argsort(-tot, kind="stable")[:n]
    return [{"name": str(uniq[i]), "count": int(cnt[i]), f"total_{unit}": round(float(tot[i]), 3)} for i in order]


def peak_reserved_pct(ctx: RankContext) -> float | None:
    """Peak reserved memory of the rank's primary device as % of its capacity (``totalGlobalMem``).

    From the ``[memory]`` events' ``Total Reserved`` (profile_memory=True); None when either is missing.
    """
    mem = ctx.tables.memory
    cap = next(
        (
            number(p.get("totalGlobalMem"))
            for p in ctx.tables.device_properties
            if isinstance(p, dict) and p.get("id") == ctx.device.device
        ),
        None,
    )
    if len(mem) == 0 or not cap:
        return None
    m = (mem["device_type"] == 1) & (mem["device_id"] == ctx.device.device) & (mem["total_reserved"] >= 0)
    return pct(float(mem["total_reserved"][m].max()), float(cap)) if m.any() else None


def unprofiled_step_times(run: RunData | None, start: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(step indices, train-only times s) of a run's unprofiled steps from step ``start`` on.

    Train-only = ``train_s`` of :mod:`perfdoctor.capture.run_data` (duration − evaluation − checkpoint), or
    ``duration_s`` for step tables without it; profiled (warm-up, active) and FLOPs-counting steps and
    unmeasured (NaN) ones are left out. Empty arrays when the run has no step table.
    """
    steps = run.steps if run is not None else {}
    d, phase = steps.get("train_s", steps.get("duration_s")), steps.get("profiler_phase")
    if d is None or len(d) == 0:
        return np.empty(0, dtype=np.int64), np.empty(0)
    d = np.asarray(d, float)
    keep = (np.arange(d.size) >= start) & np.isfinite(d) & ((phase == "none") if phase is not None else True)
    return np.flatnonzero(keep), d[keep]


def cold_reason(ctx: RankContext) -> str:
    """Why a verdict about the training loop (launch-bound, synchronization, Python between ops, batch size, MFU) is
    not drawn ("" when the analysed steps are warm): every analysed step is first-call work (PD902)."""
    warm = ctx.steps.warmup
    if warm is None or not warm.cold.size or not warm.cold.all():
        return ""
    share = pct(float(warm.per_window_us.mean()), ctx.step_us)
    return (
        f"the analysed step(s) are a cold start ({share:.0f}% of the step is first-call work: compilation, first "
        "op calls, lazy init; PD902): a verdict on them would describe the warm-up, not the training loop"
    )


# a finding's source clause on a trace without Python stacks (one short clause, never in the headline)
WITH_STACK_HINT = "`perfdoctor profile --with-stack` would name the line"


def name_line(
    ev: Evidence,
    tables: TraceTables,
    table: str,
    rows: np.ndarray,
    weight: np.ndarray | None = None,
    by_module: bool = False,
) -> None:
    """Set ``ev.source`` to the user's line where most of ``weight`` (µs, or 1 per event) of the events
    ``tables.<table>[rows]`` starts (:meth:`perfdoctor.analysis.timing.source_lines.PythonStacks.locate`, on each
    event's
    own thread and start), or ``ev.source_hint`` when the trace holds no Python stacks."""
    stacks = stacks_of(tables)
    if not stacks:
        ev.source_hint = WITH_STACK_HINT
        return
    tab = tables.tables[table]
    if rows.size == 0 or len(tab) == 0:
        return
    ev.source = stacks.locate(tab["pid"][rows], tab["tid"][rows], tab["ts_us"][rows], weight, by_module=by_module)


def name_line_at(
    ev: Evidence, tables: TraceTables, pid: int, tid: int, ts_us: np.ndarray, weight: np.ndarray | None = None
) -> None:
    """:func:`name_line` for moments ``ts_us`` (µs, shape (n,)) on thread (``pid``, ``tid``) instead of a table's
    events (e.g. the middles of the stretches with no op open), each of ``weight`` (µs, default 1)."""
    stacks = stacks_of(tables)
    if not stacks:
        ev.source_hint = WITH_STACK_HINT
        return
    if ts_us.size == 0:
        return
    n = ts_us.size
    ev.source = stacks.locate(np.full(n, pid), np.full(n, tid), ts_us, weight)


def name_line_of(ev: Evidence, tables: TraceTables, pattern: str) -> None:
    """:func:`name_line` for the host events named by ``pattern`` (annotations and CPU ops, as
    :func:`perfdoctor.analysis.timing.host.ranges_named` finds them), each weighted by its duration (µs)."""
    best: tuple[float, str, np.ndarray] | None = None
    for table in ("annotations", "cpu_ops"):
        tab = tables.tables[table]
        if len(tab) == 0:
            continue
        rows = np.flatnonzero(tables.names_matching(pattern)[tab["name_id"]])
        total = float(tab["dur_us"][rows].sum())
        if rows.size and (best is None or total > best[0]):
            best = (total, table, rows)
    if best is None:
        name_line(ev, tables, "annotations", np.empty(0, dtype=np.int64))
        return
    _, table, rows = best
    name_line(ev, tables, table, rows, tables.tables[table]["dur_us"][rows])
