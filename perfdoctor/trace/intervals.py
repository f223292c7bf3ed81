"""Interval arithmetic on numpy arrays (all times in µs).

An *interval set* is a pair ``(starts, ends)`` of float64 arrays, sorted,
disjoint and non-empty (``starts[i] < ends[i] <= starts[i+1]``), as returned by
:func:`union`. Every function here is vectorised: O(n log n) at worst.
"""

from __future__ import annotations

import numpy as np

Intervals = tuple[np.ndarray, np.ndarray]

EMPTY: Intervals = (np.empty(0), np.empty(0))


def union(starts: np.ndarray, ends: np.ndarray) -> Intervals:
    """Merge possibly overlapping intervals into a disjoint sorted set.

    Zero-length intervals are dropped; touching intervals are merged.
    """
    starts = np.asarray(starts, dtype=np.float64)
    ends = np.asarray(ends, dtype=np.float64)
    keep = ends > starts
    if not keep.all():
        starts, ends = starts[keep], ends[keep]
    if starts.size == 0:
        return EMPTY
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    running_end = np.maximum.accumulate(e)
    new_group = np.empty(s.size, dtype=bool)
    new_group[0] = True
    new_group[1:] = s[1:] > running_end[:-1]
    group_starts = np.flatnonzero(new_group)
    out_s = s[group_starts]
    group_last = np.append(group_starts[1:] - 1, s.size - 1)
    out_e = running_end[group_last]
    return out_s, out_e


def total(iv: Intervals) -> float:
    """Covered length of an interval set (µs)."""
    return float(np.sum(iv[1] - iv[0])) if iv[0].size else 0.0


def union_of(*sets: Intervals) -> Intervals:
    """Union of several interval sets."""
    parts = [s for s in sets if s[0].size]
    if not parts:
        return EMPTY
    return union(np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]))


def intersect(a: Intervals, b: Intervals) -> Intervals:
    """Intersection of two disjoint sorted interval sets."""
    if a[0].size == 0 or b[0].size == 0:
        return EMPTY
    # boundary sweep: coverage count 2 means both sets cover the segment
    pts = np.concatenate([a[0], a[1], b[0], b[1]])
    delta = np.concatenate([np.ones(a[0].size), -np.ones(a[1].size), np.ones(b[0].size), -np.ones(b[1].size)])
    order = np.lexsort((delta, pts))  # at equal times apply ends (-1) before starts (+1)
    pts, delta = pts[order], delta[order]
    count = np.cumsum(delta)
    seg_s, seg_e = pts[:-1], pts[1:]
    both = (count[:-1] == 2) & (seg_e > seg_s)
    return union(seg_s[both], seg_e[both])


def subtract(a: Intervals, b: Intervals) -> Intervals:
    """``a`` minus ``b`` for disjoint sorted interval sets."""
    if a[0].size == 0 or b[0].size == 0:
        return a
    pts = np.concatenate([a[0], a[1], b[0], b[1]])
    da = np.concatenate([np.ones(a[0].size), -np.ones(a[1].size), np.zeros(2 * b[0].size)])
    db = np.concatenate([np.zeros(2 * a[0].size), np.ones(b[0].size), -np.ones(b[1].size)])
    order = np.argsort(pts, kind="stable")
    pts, da, db = pts[order], da[order], db[order]
    # resolve equal timestamps: coverage is evaluated on open segments between points
    ca, cb = np.cumsum(da), np.cumsum(db)
    seg_s, seg_e = pts[:-1], pts[1:]
    keep = (ca[:-1] > 0) & (cb[:-1] <= 0) & (seg_e > seg_s)
    return union(seg_s[keep], seg_e[keep])


def clip(iv: Intervals, lo: float, hi: float) -> Intervals:
    """The part of ``iv`` inside ``[lo, hi)``."""
    if iv[0].size == 0 or hi <= lo:
        return EMPTY
    s = np.maximum(iv[0], lo)
    e = np.minimum(iv[1], hi)
    keep = e > s
    return s[keep], e[keep]


def covered_until(iv: Intervals, t: np.ndarray) -> np.ndarray:
    """F(t): length of ``iv`` inside ``(-inf, t]`` for each t (vectorised)."""
    t = np.asarray(t, dtype=np.float64)
    if iv[0].size == 0:
        return np.zeros(t.shape)
    s, e = iv
    before = np.concatenate([[0.0], np.cumsum(e - s)])
    i = np.searchsorted(s, t, side="right") - 1
    inside = np.where(i >= 0, np.minimum(t, e[np.maximum(i, 0)]) - s[np.maximum(i, 0)], 0.0)
    return np.where(i >= 0, before[np.maximum(i, 0)] + np.maximum(inside, 0.0), 0.0)


def per_window(iv: Intervals, win_starts: np.ndarray, win_ends: np.ndarray) -> np.ndarray:
    """Covered length of ``iv`` inside each window ``[win_starts[k], win_ends[k])`` (µs)."""
    return np.asarray(covered_until(iv, win_ends) - covered_until(iv, win_starts))


def complement(iv: Intervals, lo: float, hi: float) -> Intervals:
    """Gaps of ``iv`` inside ``[lo, hi)``."""
    inside = clip(iv, lo, hi)
    s = np.concatenate([[lo], inside[1]])
    e = np.concatenate([inside[0], [hi]])
    keep = e > s
    return s[keep], e[keep]


def containing(points: np.ndarray, intervals: Intervals) -> np.ndarray:
    """Index of the interval ``[start, end)`` holding each point, -1 for none (int64, the shape of ``points``).

    ``intervals``: starts ascending (e.g. a :func:`union`, step windows, or annotations of one thread). Each
    point is tested against the latest interval starting at or before it, so for nested or overlapping
    intervals only that one counts.
    """
    starts, ends = intervals
    pts = np.asarray(points, dtype=np.float64)
    if starts.size == 0:
        return np.full(pts.shape, -1, dtype=np.int64)
    k = np.searchsorted(starts, pts, side="right") - 1
    ok = (k >= 0) & (pts < ends[np.maximum(k, 0)])
    return np.where(ok, k, -1).astype(np.int64)
