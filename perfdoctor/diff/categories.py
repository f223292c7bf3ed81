"""Where the time moved: each category's time per step on both sides (µs).

Per side, a category's time per step is its total over the analysed steps ÷ the number of steps, averaged over
the ranks (report-schema "category time"). ``busy`` rows (the exclusive categories) and ``idle`` rows (idle by
cause) add up to the trace's mean step; ``detail`` rows (communication overlapped with compute, copies by
direction) break a busy row down and are not in that sum. Labels come from the one table in
:mod:`perfdoctor.render.view`.
"""

from __future__ import annotations

from perfdoctor.diff.model import CategoryRow
from perfdoctor.diff.steps import primary_device
from perfdoctor.model import Report
from perfdoctor.vocab import CHART_ORDER

_BUSY_ORDER = CHART_ORDER


def _per_step(model: Report) -> dict[tuple[str, str], float]:
    """(group, key) → mean µs per step over ranks; also ("step", "dur") for the trace's mean step."""
    sums: dict[tuple[str, str], float] = {}
    devs = [d for d in (primary_device(r) for r in model.ranks) if d is not None and d.steps]
    for dev in devs:
        tot = dev.totals
        n = float(tot.n_steps or len(dev.steps))
        rows: list[tuple[tuple[str, str], float]] = [(("step", "dur"), tot.dur_us)]
        rows += [(("busy", k), v) for k, v in tot.categories_us.items()]
        rows += [(("idle", k), v) for k, v in tot.idle_causes_us.items()]
        if tot.communication.overlapped_us:
            rows.append((("detail", "communication_overlapped"), tot.communication.overlapped_us))
        rows += [(("detail", f"memcpy_{k}"), v) for k, v in tot.memcpy_by_direction_us.items()]
        for key, v in rows:
            sums[key] = sums.get(key, 0.0) + float(v) / n / len(devs)
    return sums


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


def category_rows(before: Report, after: Report) -> tuple[list[CategoryRow], float, float]:
    """Rows for every category either side has time in, and each side's mean trace step (µs)."""
    b, a = _per_step(before), _per_step(after)
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
