"""MFU, device utilization, memory peak and median step, per rank and for the job, on both sides.

Read from each report as written (report-schema ``ranks[].mfu.mfu``, the primary device's ``utilization`` and
``step_time_us.median``, ``memory.devices[].peak_allocated_bytes``). The job row (``rank`` None) is the mean
utilization and MFU over the ranks that have them, the largest memory peak and the longest median step. A side of
several runs: per rank, the mean over its runs of utilization, MFU and median step and the largest memory peak;
the straggler is the rank slowest in most runs, the spread the mean over the runs.
"""

from __future__ import annotations

from perfdoctor.diff.model import Pair, RankEfficiency, Straggler
from perfdoctor.diff.pool import mean_present
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


def _ranks(models: list[Report]) -> dict[int, _Facts]:
    """Each rank's facts, pooled over the runs that have the rank."""
    runs = [{rank_number(r, i): _facts(r) for i, r in enumerate(m.ranks)} for m in models]
    out: dict[int, _Facts] = {}
    for rank in sorted({k for run in runs for k in run}):
        facts = [run[rank] for run in runs if rank in run]
        out[rank] = {
            "utilization": mean_present([f["utilization"] for f in facts]),
            "mfu": mean_present([f["mfu"] for f in facts]),
            "memory": max((v for f in facts if (v := f["memory"]) is not None), default=None),
            "median": mean_present([f["median"] for f in facts]),
        }
    return out


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


def efficiency_rows(before: list[Report], after: list[Report]) -> list[RankEfficiency]:
    """The job row first, then one row per rank present on both sides (multi-rank inputs only)."""
    rb, ra = _ranks(before), _ranks(after)
    if not rb and not ra:
        return []
    rows = [_row(None, _job(list(rb.values())), _job(list(ra.values())))]
    if len(rb) > 1 or len(ra) > 1:
        rows += [_row(k, rb[k], ra[k]) for k in sorted(set(rb) & set(ra))]
    return rows


def _num(v: object) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _slowest(models: list[Report]) -> int | None:
    """The rank slowest in most runs (the lowest on a tie); None when no run names one."""
    ranks = [v for m in models if isinstance(v := m.summary.slowest_rank, int) and not isinstance(v, bool)]
    return min(set(ranks), key=lambda r: (-ranks.count(r), r)) if ranks else None


def straggler(before: list[Report], after: list[Report]) -> Straggler | None:
    """Slowest rank and spread on both sides (None unless a run has more than one rank)."""
    if max(m.summary.n_ranks for m in (*before, *after)) < 2:
        return None
    return Straggler(
        slowest_rank_before=_slowest(before),
        slowest_rank_after=_slowest(after),
        spread_pct=Pair(
            mean_present([_num(m.summary.spread_pct) for m in before]),
            mean_present([_num(m.summary.spread_pct) for m in after]),
        ),
    )
