"""Top movers: the kernels and CPU ops whose time per step changed most.

Time per step of a name = its summed duration over the analysed steps ÷ the number of steps, averaged over the
ranks (kernels: report-schema ``top_kernels``; CPU ops: ``top_cpu_ops``, inclusive durations). Matching, in order:

1. exact name and category;
2. the remaining names grouped by (normalised name, category) on each side (:mod:`perfdoctor.diff.names`); a
   group present on both sides is one mover, ``how`` names the normalisation stages it needed;
3. what is left ``appeared`` (AFTER only) or ``disappeared`` (BEFORE only) when the other side's list holds every
   name; when it is full (a report keeps each rank's top 20) the name may sit below it there: ``unlisted``, with
   that list's smallest row as the bound of the unknown time (``delta_us`` None).

A side of several runs: each name's time per step is the mean over its runs, as over the ranks of one run (a
name missing from one run's list counts 0 there); the bound is the largest of the runs' list floors.
"""

from __future__ import annotations

from collections.abc import Sequence

from perfdoctor.diff.model import Mover
from perfdoctor.diff.names import how_matched, normalise
from perfdoctor.diff.pool import mean_of
from perfdoctor.diff.sides import TOP_LIST_LIMIT, Side
from perfdoctor.diff.steps import primary_device
from perfdoctor.model.report import TopCpuOp, TopKernel

_Key = tuple[str, str]


def per_step(runs: Sequence[Side], which: str) -> tuple[dict[_Key, float], float | None]:
    """(name, category) → µs per step (the mean over the runs of the mean over ranks); and the smallest listed µs
    per step when a rank's list is full (TOP_LIST_LIMIT rows: names below it are left out; the largest such over
    the runs), else None."""
    one = [_per_step_of_run(side, which) for side in runs]
    floors = [f for _, f in one if f is not None]
    return mean_of([d for d, _ in one]), max(floors) if floors else None


def _per_step_of_run(side: Side, which: str) -> tuple[dict[_Key, float], float | None]:
    out: dict[_Key, float] = {}
    floor: float | None = None
    ranks = [(i, r, d) for i, r in enumerate(side.model.ranks) if (d := primary_device(r)) is not None and d.steps]
    for _, rank, dev in ranks:
        n = float(dev.totals.n_steps or len(dev.steps))
        rows: list[TopKernel] | list[TopCpuOp] = rank.top_kernels if which == "kernels" else rank.top_cpu_ops
        for row in rows:
            key = (row.name, row.category or "other")
            out[key] = out.get(key, 0.0) + row.total_us / n / len(ranks)
        if len(rows) >= TOP_LIST_LIMIT:
            low = min(x.total_us for x in rows) / n
            floor = low if floor is None else max(floor, low)
    return out, floor


def _group(rest: dict[_Key, float]) -> dict[_Key, list[_Key]]:
    groups: dict[_Key, list[_Key]] = {}
    for name, cat in rest:
        groups.setdefault((normalise(name), cat), []).append((name, cat))
    return groups


def _label(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{names[0]} (+{len(names) - 1} variants)"


def _exact(before: dict[_Key, float], after: dict[_Key, float]) -> list[Mover]:
    """Movers of the (name, category) keys both sides list (step 1 of the module docstring)."""
    return [
        Mover(n, n, n, c, before[(n, c)], after[(n, c)], after[(n, c)] - before[(n, c)], "exact", "same name")
        for (n, c) in before
        if (n, c) in after
    ]


def _gone(key: _Key, names_b: list[str], tb: float, floor_after: float | None) -> Mover:
    """A group listed only in BEFORE (``tb`` µs per step): ``unlisted`` when AFTER's list is full (its smallest
    row, ``floor_after`` µs per step, bounds the unknown time), else ``disappeared``."""
    if floor_after is not None:  # AFTER's list is full: the name may sit below it there
        return Mover(
            _label(names_b), None, key[0], key[1], tb, None, None, "unlisted", "not in AFTER's top list", floor_after
        )
    return Mover(_label(names_b), None, key[0], key[1], tb, 0.0, -tb, "disappeared", "")


def _new(key: _Key, names_a: list[str], ta: float, floor_before: float | None) -> Mover:
    """A group listed only in AFTER (``ta`` µs per step): ``unlisted`` when BEFORE's list is full (its smallest
    row, ``floor_before`` µs per step, bounds the unknown time), else ``appeared``."""
    if floor_before is not None:  # BEFORE's list is full: the name may sit below it there
        return Mover(
            None, _label(names_a), key[0], key[1], None, ta, None, "unlisted", "not in BEFORE's top list", floor_before
        )
    return Mover(None, _label(names_a), key[0], key[1], 0.0, ta, ta, "appeared", "")


def match(
    before: dict[_Key, float], after: dict[_Key, float], floor_before: float | None, floor_after: float | None
) -> list[Mover]:
    """All movers, unsorted (see the module docstring)."""
    out = _exact(before, after)
    gb = _group({k: v for k, v in before.items() if k not in after})
    ga = _group({k: v for k, v in after.items() if k not in before})
    for key in sorted(set(gb) | set(ga)):
        nb = sorted((k for k in gb.get(key, [])), key=lambda k: -before[k])
        na = sorted((k for k in ga.get(key, [])), key=lambda k: -after[k])
        tb, ta = sum(before[k] for k in nb), sum(after[k] for k in na)
        names_b, names_a = [k[0] for k in nb], [k[0] for k in na]
        if nb and na:
            how = how_matched(names_b, names_a)
            out.append(Mover(_label(names_b), _label(names_a), key[0], key[1], tb, ta, ta - tb, "normalised", how))
        elif nb:
            out.append(_gone(key, names_b, tb, floor_after))
        else:
            out.append(_new(key, names_a, ta, floor_before))
    return out


def top_movers(before: Sequence[Side], after: Sequence[Side], which: str, limit: int = 15) -> list[Mover]:
    """The ``limit`` movers with the largest |Δ µs per step| (``which``: ``"kernels"`` or ``"cpu_ops"``) between
    two sides of one or more runs; ``unlisted`` ones, whose change is unknown, are ranked by their known side's
    time."""
    b, fb = per_step(before, which)
    a, fa = per_step(after, which)
    movers = match(b, a, fb, fa)

    def size(m: Mover) -> float:
        if m.delta_us is not None:
            return abs(m.delta_us)
        return (m.before_us or 0.0) + (m.after_us or 0.0)

    movers.sort(key=lambda m: (-size(m), m.key))
    return [m for m in movers if size(m) > 0][:limit]
