"""Where the time moved: each category's time per step on both sides (µs).

Per side, a category's time per step is its total over the analysed steps ÷ the number of steps (report-schema
"category time"), averaged over the ranks that have steps: every rank weighs equally on both sides, so a
multi-rank job compares like with like (one rank per side, each side's longest, compared rank 1 with rank 0 when
the longest rank switched: its rows were rank differences, not the change), and the rows agree with the top
movers, which average over the ranks too (:mod:`perfdoctor.diff.movers`). ``busy`` rows (the exclusive
categories) and ``idle`` rows (idle by cause) add up to that mean of the ranks' mean steps, which on a multi-rank
job is not the verdict's step (the job's step, the longest of the ranks' mean steps:
:func:`perfdoctor.diff.steps.trace_step_times`); ``detail`` rows (communication overlapped with compute, copies by
direction) break a busy row down and are not in that sum. A side of several runs: the mean over
its runs (:mod:`perfdoctor.diff.pool`), so the rows still add up to its mean step. Labels come from the one table
in :mod:`perfdoctor.render.view`.
"""

from __future__ import annotations

from perfdoctor.diff.model import CategoryRow
from perfdoctor.diff.pool import mean_of
from perfdoctor.diff.steps import primary_device
from perfdoctor.model import Report
from perfdoctor.model.report import RankSection
from perfdoctor.vocab import CHART_ORDER, category_label, idle_label

_BUSY_ORDER = CHART_ORDER


def _per_step_of_rank(rank: RankSection) -> dict[tuple[str, str], float]:
    """(group, key) → µs per step of one rank; also ("step", "dur") for its mean step ({} without steps)."""
    dev = primary_device(rank)
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


def _per_step(model: Report) -> dict[tuple[str, str], float]:
    """(group, key) → µs per step, the mean over the ranks that have steps (a key a rank lacks counts 0 there);
    also ("step", "dur"), the mean of the ranks' mean steps ({} when no rank has steps)."""
    return mean_of([d for d in (_per_step_of_rank(r) for r in model.ranks) if d])


def job_trace_step(models: list[Report]) -> float:
    """The job's mean trace step (µs): the longest of its ranks' mean analysed steps, the mean over the side's runs
    (0.0 when no rank has steps)."""
    steps = [
        max((d[("step", "dur")] for d in (_per_step_of_rank(r) for r in m.ranks) if d), default=0.0) for m in models
    ]
    return sum(steps) / len(steps) if steps else 0.0


def step_source(before: list[Report], after: list[Report]) -> str:
    """What each side's category rows are on a multi-rank input, in words ("" when every run has one rank)."""
    if all(len(m.ranks) < 2 for m in (*before, *after)):
        return ""

    def count(models: list[Report]) -> str:
        return " or ".join(str(k) for k in sorted({sum(1 for r in m.ranks if _per_step_of_rank(r)) for m in models}))

    return (
        f"every rank's mean on both sides (BEFORE {count(before)} ranks, AFTER {count(after)}), each rank "
        "weighing equally, like the top movers; the verdict's step is the job's, the longest of the ranks' mean "
        "steps"
    )


def _label(group: str, key: str) -> str:
    if group == "busy":
        return category_label(key)
    if group == "idle":
        label = idle_label(key)
        return label if label != key else f"idle: {key}"
    if key == "communication_overlapped":
        return "communication overlapped with compute (detail)"
    return f"memcpy {key.removeprefix('memcpy_')} (detail)"


def _order(item: tuple[str, str]) -> tuple[int, int, str]:
    group, key = item
    g = {"busy": 0, "idle": 1, "detail": 2}[group]
    return (g, _BUSY_ORDER.index(key) if group == "busy" and key in _BUSY_ORDER else 99, key)


def category_rows(before: list[Report], after: list[Report]) -> tuple[list[CategoryRow], float, float]:
    """Rows for every category either side has time in, and each side's mean trace step (µs), both the mean over
    a run's ranks (:func:`_per_step`); a side's runs pooled by their mean (:func:`perfdoctor.diff.pool.mean_of`)."""
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
