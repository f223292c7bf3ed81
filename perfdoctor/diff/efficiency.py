"""MFU, device utilization, memory peak and median step, per rank and for the job, on both sides.

Read from each report as written (report-schema ``ranks[].mfu.mfu``, the primary device's ``utilization`` and
``step_time_us.median``, ``memory.devices[].peak_allocated_bytes``). The job row (``rank`` None) is the mean
utilization and MFU over the ranks that have them, the largest memory peak and the longest median step.
"""

from __future__ import annotations

from typing import Any

from perfdoctor.diff.model import Pair, RankEfficiency, Straggler
from perfdoctor.diff.steps import primary_device


def _facts(rank: dict[str, Any]) -> dict[str, float | None]:
    dev = primary_device(rank) or {}
    mfu: dict[str, Any] = rank["mfu"] if isinstance(rank.get("mfu"), dict) else {}
    median = (dev.get("step_time_us") or {}).get("median")
    mem = [d for d in (rank.get("memory") or {}).get("devices") or [] if isinstance(d, dict)]
    gpu = [d for d in mem if d.get("device_type") == "GPU"] or mem
    peaks = [float(d["peak_allocated_bytes"]) for d in gpu if d.get("peak_allocated_bytes") is not None]
    util = dev.get("utilization")
    return {
        "utilization": float(util) if isinstance(util, (int, float)) else None,
        "mfu": float(mfu["mfu"]) if isinstance(mfu.get("mfu"), (int, float)) else None,
        "memory": max(peaks) if peaks else None,
        "median": float(median) if isinstance(median, (int, float)) else None,
    }


def _ranks(report: dict[str, Any]) -> dict[int, dict[str, float | None]]:
    return {int(r["rank"]) if isinstance(r.get("rank"), int) else i: _facts(r)
            for i, r in enumerate(report.get("ranks") or []) if isinstance(r, dict)}


def _job(facts: list[dict[str, float | None]]) -> dict[str, float | None]:
    def vals(k: str) -> list[float]:
        return [v for f in facts if (v := f[k]) is not None]

    def mean(k: str) -> float | None:
        v = vals(k)
        return sum(v) / len(v) if v else None

    return {"utilization": mean("utilization"), "mfu": mean("mfu"), "memory": max(vals("memory"), default=None),
            "median": max(vals("median"), default=None)}


def _row(rank: int | None, b: dict[str, float | None], a: dict[str, float | None]) -> RankEfficiency:
    return RankEfficiency(rank=rank, utilization=Pair(b["utilization"], a["utilization"]),
                          mfu=Pair(b["mfu"], a["mfu"]), memory_peak_bytes=Pair(b["memory"], a["memory"]),
                          median_step_us=Pair(b["median"], a["median"]))


def efficiency_rows(before: dict[str, Any], after: dict[str, Any]) -> list[RankEfficiency]:
    """The job row first, then one row per rank present on both sides (multi-rank inputs only)."""
    rb, ra = _ranks(before), _ranks(after)
    if not rb and not ra:
        return []
    rows = [_row(None, _job(list(rb.values())), _job(list(ra.values())))]
    if len(rb) > 1 or len(ra) > 1:
        rows += [_row(k, rb[k], ra[k]) for k in sorted(set(rb) & set(ra))]
    return rows


def straggler(before: dict[str, Any], after: dict[str, Any]) -> Straggler | None:
    """Slowest rank and spread on both sides (None unless a side has more than one rank)."""
    sb, sa = before.get("summary") or {}, after.get("summary") or {}
    if max(int(sb.get("n_ranks") or 0), int(sa.get("n_ranks") or 0)) < 2:
        return None
    return Straggler(slowest_rank_before=sb.get("slowest_rank"), slowest_rank_after=sa.get("slowest_rank"),
                     spread_pct=Pair(sb.get("spread_pct"), sa.get("spread_pct")))
