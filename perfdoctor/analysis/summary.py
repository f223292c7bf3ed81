"""Small summaries over analysis tables: distributions, top kernels, top ops, ranks."""

from __future__ import annotations

from typing import Any

import numpy as np

from perfdoctor.analysis.timing.classify import classify_kernel
from perfdoctor.analysis.timing.cpu_breakdown import classify_cpu_op
from perfdoctor.trace.tables import TraceTables


def distribution(values_us: np.ndarray) -> dict[str, float]:
    """median / mean / min / max / p10 / p90 / std of a series (same unit as input)."""
    v = np.asarray(values_us, dtype=np.float64)
    if v.size == 0:
        return {}
    return {
        "median": float(np.median(v)),
        "mean": float(v.mean()),
        "min": float(v.min()),
        "max": float(v.max()),
        "p10": float(np.percentile(v, 10)),
        "p90": float(np.percentile(v, 90)),
        "std": float(v.std()),
        "n": int(v.size),
    }


def top_kernels(tables: TraceTables, window: tuple[float, float], limit: int = 20) -> list[dict[str, Any]]:
    """GPU kernels / memcpys / memsets starting inside ``window`` grouped by name.

    Returns rows ``{name, category, count, total_us, mean_us, share}``, where
    share = total_us ÷ the sum of all rows' total_us (sum of durations, so
    overlapping streams count twice), sorted by total_us descending.
    """
    lo, hi = window
    rows: dict[int, list[float]] = {}
    for tname in ("kernels", "memcpy", "memset"):
        tab = tables.tables[tname]
        if len(tab) == 0:
            continue
        m = (tab["ts_us"] >= lo) & (tab["ts_us"] < hi)
        ids, durs = tab["name_id"][m], tab["dur_us"][m]
        if ids.size == 0:
            continue
        uniq, inv = np.unique(ids, return_inverse=True)
        tot = np.bincount(inv, weights=durs)
        cnt = np.bincount(inv)
        for u, t, c in zip(uniq.tolist(), tot.tolist(), cnt.tolist()):
            acc = rows.setdefault(u, [0.0, 0])
            acc[0] += t
            acc[1] += c
    grand = sum(r[0] for r in rows.values()) or 1.0
    ranked = sorted(rows.items(), key=lambda kv: -kv[1][0])[:limit]
    return [
        {
            "name": tables.names[nid],
            "category": classify_kernel(tables.names[nid]).category,
            "count": int(c),
            "total_us": float(t),
            "mean_us": float(t / c),
            "share": float(t / grand),
        }
        for nid, (t, c) in ranked
    ]


def top_cpu_ops(
    tables: TraceTables, window: tuple[float, float], pid: int = -1, limit: int = 20
) -> list[dict[str, Any]]:
    """Host ops starting inside ``window`` grouped by name (inclusive time, µs).

    Rows ``{name, category, count, total_us, mean_us}``; nested ops each count
    their own inclusive duration, so totals of parent and child overlap.
    """
    ops = tables.cpu_ops
    if len(ops) == 0:
        return []
    lo, hi = window
    m = (ops["ts_us"] >= lo) & (ops["ts_us"] < hi)
    if pid >= 0:
        m &= ops["pid"] == pid
    ids, durs = ops["name_id"][m], ops["dur_us"][m]
    if ids.size == 0:
        return []
    uniq, inv = np.unique(ids, return_inverse=True)
    tot = np.bincount(inv, weights=durs)
    cnt = np.bincount(inv)
    order = np.argsort(-tot)[:limit]
    return [
        {
            "name": tables.names[int(uniq[k])],
            "category": classify_cpu_op(tables.names[int(uniq[k])]),
            "count": int(cnt[k]),
            "total_us": float(tot[k]),
            "mean_us": float(tot[k] / cnt[k]),
        }
        for k in order
    ]


def rank_summary(step_medians_us: dict[int, float]) -> dict[str, Any]:
    """Spread of the median step time across ranks.

    Returns ``{n_ranks, slowest_rank, fastest_rank, spread_pct}`` where
    spread_pct = (slowest - fastest) ÷ fastest × 100.
    """
    if not step_medians_us:
        return {"n_ranks": 0}
    slow = max(step_medians_us, key=lambda r: step_medians_us[r])
    fast = min(step_medians_us, key=lambda r: step_medians_us[r])
    lo = step_medians_us[fast]
    spread = (step_medians_us[slow] - lo) / lo * 100 if lo > 0 else 0.0
    return {
        "n_ranks": len(step_medians_us),
        "slowest_rank": slow,
        "fastest_rank": fast,
        "median_step_us": step_medians_us,
        "spread_pct": spread,
    }
