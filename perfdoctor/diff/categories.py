"""Where the time moved: each category's time per step on both sides (µs).

Per side, a category's time per step is its total over the analysed steps ÷ the number of steps (report-schema
"category time") on the rank whose mean step is the job's step (on a multi-rank job the longest of the ranks'
mean steps, the report's denominator and the verdict's step). ``busy`` rows (the exclusive categories) and
``idle`` rows (idle by cause) add up to that rank's mean step; ``detail`` rows (communication overlapped with
compute, copies by direction) break a busy row down and are not in that sum. A side of several runs: the mean over
its runs (:mod:`perfdoctor.diff.pool`), so the rows still add up to its mean step. Labels come from the one table
in :mod:`perfdoctor.render.view`.
"""

from __future__ import annotations

from perfdoctor.diff.model import CategoryRow
from perfdoctor.diff.pool import mean_of
from perfdoctor.diff.steps import job_rank, job_step_words, primary_device
from perfdoctor.model import Report
from perfdoctor.vocab import CHART_ORDER

_BUSY_ORDER = CHART_ORDER


def _per_step(model: Report) -> dict[tuple[str, str], float]:
    """(group, key) → µs per step of the job's rank (:func:`perfdoctor.diff.steps.job_rank`); also ("step", "dur")
    for its mean step, the job's step."""
    rank = job_rank(model)
    dev = primary_device(rank) if rank is not None else None
    if dev is None or not dev.steps:
        return {}
    tot = dev.totals
    n = float(tot.n_steps or len(dev.steps))
    rows: list[tuple[tuple[str, str], float]] = [(("step", "dur"), tot.dur_us)]
    rows += [(("busy", k), v) for k, v in tot.categories_us.items()]
    rows += [(("idle", k), v) for k, v in tot.idle_causes_us.items()]
    if tot.communication.overlapped_us:
        rows.append((("detail", "communication_overlapped"), tot.communication.overlapped_us))
    rows += [(("detail", f"memcpy_{k}"), v) for k, v in tot.memcpy_by_direction_us.items()]
    return {key: float(v) / n for key, v in rows}


def step_source(before: list[Report], after: list[Report]) -> str:
    """Which rank each side's category rows are of, in words ("" when every run has one rank); several runs on a
    side: its first run's."""
    if all(len(m.ranks) < 2 for m in (*before, *after)):
        return ""
    rb, ra = job_rank(before[0]), job_rank(after[0])
    who_b = job_step_words(before[0], rb) if rb is not None else "–"
    who_a = job_step_words(after[0], ra) if ra is not None else "–"
    first = " (first run)" if len(before) > 1 or len(after) > 1 else ""
    return f"BEFORE{first} {who_b}; AFTER{first} {who_a}"


def _label(group: str, key: str) -> str:
    from perfdoctor.render.view import CAT_LABELS, IDLE_LABELS

    if group == "busy":
        return CAT_LABELS.get(key, key)
    if group == "idle":
        return IDLE_LABELS.get(key, f"idle: {key}")
    if key == "communication_overlapped":
        return "communication overlapped with compute (detail)"
    return f"memcpy {key.removeprefix('memcpy_')} (detail)"


def _order(item: tuple[str, str]) -> tuple[int, int, str]:
    group, key = item
    g = {"busy": 0, "idle": 1, "detail": 2}[group]
    return (g, _BUSY_ORDER.index(key) if group == "busy" and key in _BUSY_ORDER else 99, key)


def category_rows(before: list[Report], after: list[Report]) -> tuple[list[CategoryRow], float, float]:
    """Rows for every category either side has time in, and each side's mean trace step (µs); a side's runs
    pooled by their mean (:func:`perfdoctor.diff.pool.mean_of`)."""
    b, a = mean_of([_per_step(m) for m in before]), mean_of([_per_step(m) for m in after])
    keys = sorted({k for k in (*b, *a) if k[0] != "step" and (b.get(k, 0.0) or a.get(k, 0.0))}, key=_order)
    rows = [
        CategoryRow(
            key=k,
            label=_label(g, k),
            group=g,
            before_us=b.get((g, k), 0.0),
            after_us=a.get((g, k), 0.0),
            delta_us=a.get((g, k), 0.0) - b.get((g, k), 0.0),
        )
        for g, k in keys
    ]
    return rows, b.get(("step", "dur"), 0.0), a.get(("step", "dur"), 0.0)
