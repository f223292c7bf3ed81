"""MFU, device utilization, memory peak and median step, per rank and for the job, on both sides.

Read from each report as written (report-schema ``ranks[].mfu.mfu``, the primary device's ``utilization`` and
``step_time_us.median``, ``memory.devices[].peak_allocated_bytes``). The job row (``rank`` None) is the mean
utilization and MFU over the ranks that have them, the largest memory peak and the longest median step.
"""

from __future__ import annotations

from perfdoctor.diff.model import Pair, RankEfficiency, Straggler
from perfdoctor.diff.sides import rank_number
from perfdoctor.diff.steps import primary_device
from perfdoctor.model import Report
from perfdoctor.model.report import RankSection

_Facts = dict[str, float | None]


def _facts(rank: RankSection) -> _Facts:
    dev = primary_device(rank)
    gpu = [d for d in rank.memory.devices if d.device_type == "GPU"] or rank.memory.devices
    return {
        "utilization": dev.utilization if dev is not None else None,
        "mfu": rank.mfu.mfu if rank.mfu is not None else None,
        "memory": float(max(d.peak_allocated_bytes for d in gpu)) if gpu else None,
        "median": dev.step_time_us.median if dev is not None and dev.steps else None,
    }


def _ranks(model: Report) -> dict[int, _Facts]:
    return {rank_number(r, i): _facts(r) for i, r in enumerate(model.ranks)}


def _job(facts: list[_Facts]) -> _Facts:
    def vals(k: str) -> list[float]:
        return [v for f in facts if (v := f[k]) is not None]

    def mean(k: str) -> float | None:
        v = vals(k)
        return sum(v) / len(v) if v else None

    return {
        "utilization": mean("utilization"),
        "mfu": mean("mfu"),
        "memory": max(vals("memory"), default=None),
        "median": max(vals("median"), default=None),
    }


def _row(rank: int | None, b: _Facts, a: _Facts) -> RankEfficiency:
    return RankEfficiency(
        rank=rank,
        utilization=Pair(b["utilization"], a["utilization"]),
        mfu=Pair(b["mfu"], a["mfu"]),
        memory_peak_bytes=Pair(b["memory"], a["memory"]),
        median_step_us=Pair(b["median"], a["median"]),
    )


def efficiency_rows(before: Report, after: Report) -> list[RankEfficiency]:
    """The job row first, then one row per rank present on both sides (multi-rank inputs only)."""
    rb, ra = _ranks(before), _ranks(after)
    if not rb and not ra:
        return []
    rows = [_row(None, _job(list(rb.values())), _job(list(ra.values())))]
    if len(rb) > 1 or len(ra) > 1:
        rows += [_row(k, rb[k], ra[k]) for k in sorted(set(rb) & set(ra))]
    return rows


def straggler(before: Report, after: Report) -> Straggler | None:
    """Slowest rank and spread on both sides (None unless a side has more than one rank)."""
    sb, sa = before.summary, after.summary
    if max(sb.n_ranks, sa.n_ranks) < 2:
        return None

    def num(v: object) -> float | None:
        return float(v) if isinstance(v, (int, float)) else None

    def rank(v: object) -> int | None:
        return v if isinstance(v, int) else None

    return Straggler(
        slowest_rank_before=rank(sb.slowest_rank),
        slowest_rank_after=rank(sa.slowest_rank),
        spread_pct=Pair(num(sb.spread_pct), num(sa.spread_pct)),
    )
