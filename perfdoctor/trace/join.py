"""The joins of a trace, each computed once: which runtime call launched each GPU activity (``correlation``),
and which host op carries an ``external_id``.

Kineto writes a launching runtime call (``cudaLaunchKernel``, ``cudaMemcpyAsync``, ...) and the kernel, memcpy or
memset it launched with the same ``correlation`` id. :func:`launch_rows` pairs them for one GPU table and keeps
the result on the :class:`~perfdoctor.trace.tables.TraceTables` it came from, so every analysis and check asks
once per trace instead of re-sorting the runtime table. :func:`external_id_rows` finds the host op (or other row)
with an ``external_id``, the key Kineto gives an op and the runtime calls and activities it caused.
"""

from __future__ import annotations

from typing import cast

import numpy as np

from perfdoctor.trace.tables import TraceTables

_CACHE_KEY = "_launch_rows_cache"
_EXT_CACHE_KEY = "_external_id_order_cache"


def launch_rows(tables: TraceTables, table: str) -> np.ndarray:
    """Row of ``tables.runtime`` that launched each row of ``tables.tables[table]`` (int64, shape ``(n,)``).

    -1 where the row has no correlation id (negative) or no runtime call carries it. Of several runtime calls
    with one correlation id the first in the runtime table's order wins. Cached per (tables, table): the
    tables must not be changed after the first call.
    """
    cache = cast(dict[str, np.ndarray], tables.__dict__.setdefault(_CACHE_KEY, {}))
    if table in cache:
        return cache[table]
    gpu = tables.tables[table]
    rows = np.full(len(gpu), -1, dtype=np.int64)
    rt = tables.runtime
    if len(gpu) and len(rt):
        corr = rt["correlation"]
        valid = np.flatnonzero(corr >= 0)
        order = valid[np.argsort(corr[valid], kind="stable")]
        rc = corr[order]
        gc = gpu["correlation"]
        if rc.size:
            pos = np.minimum(np.searchsorted(rc, gc), rc.size - 1)
            hit = (gc >= 0) & (rc[pos] == gc)
            rows[hit] = order[pos[hit]]
    cache[table] = rows
    return rows


def launched_values(
    tables: TraceTables, table: str, column: str, rows: np.ndarray | None = None, fill: float = np.nan
) -> np.ndarray:
    """``column`` of the runtime call that launched each row of ``table`` (float64; ``fill`` where none).

    ``rows``: a boolean mask or index array selecting rows of ``table`` (default: all)."""
    r = launch_rows(tables, table)
    if rows is not None:
        r = r[rows]
    out = np.full(r.size, fill, dtype=np.float64)
    ok = r >= 0
    out[ok] = tables.runtime[column][r[ok]]
    return out


def external_id_ranges(
    tables: TraceTables, external_id: np.ndarray, table: str = "cpu_ops"
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every row of ``tables.tables[table]`` with each of ``external_id``: ``(order, lo, hi)``, the rows with
    ``external_id[i]`` being ``order[lo[i]:hi[i]]`` in the table's order (by start time); ``lo == hi`` where the
    id is not positive (absent ids read -1; runtime calls outside any op carry 0) or no row has it. ``order`` (the
    rows sorted by id, stable) is cached per (tables, table): the tables must not change after the first call.
    For a caller that tries each row with an id until one answers (an op whose recorded arguments parse)."""
    cache = cast(dict[str, np.ndarray], tables.__dict__.setdefault(_EXT_CACHE_KEY, {}))
    tab = tables.tables[table]
    if table not in cache:
        cache[table] = np.argsort(tab["external_id"], kind="stable") if len(tab) else np.empty(0, dtype=np.int64)
    order = cache[table]
    ext = np.asarray(external_id, dtype=np.int64)
    if order.size == 0:
        return order, np.zeros(ext.shape, dtype=np.int64), np.zeros(ext.shape, dtype=np.int64)
    keys = tab["external_id"][order]
    lo = np.searchsorted(keys, ext, side="left")
    hi = np.where(ext > 0, np.searchsorted(keys, ext, side="right"), lo)
    return order, lo, hi


def external_id_rows(tables: TraceTables, external_id: np.ndarray, table: str = "cpu_ops") -> np.ndarray:
    """Row of ``tables.tables[table]`` whose ``external_id`` equals each of ``external_id`` (int64, its shape):
    the first in the table's order (by start time) of :func:`external_id_ranges`; -1 where none."""
    order, lo, hi = external_id_ranges(tables, external_id, table)
    if order.size == 0:
        return np.full(np.shape(external_id), -1, dtype=np.int64)
    return np.where(hi > lo, order[np.minimum(lo, order.size - 1)], -1).astype(np.int64)


def has_activity(tables: TraceTables) -> np.ndarray:
    """Whether each row of ``tables.runtime`` has a kernel, memcpy or memset with its ``correlation`` id (bool,
    shape ``(len(runtime),)``): a launch whose activity made it into the file. Set membership, so every copy of
    a duplicated call counts."""
    rt = tables.runtime
    ids = [tables.tables[t]["correlation"] for t in ("kernels", "memcpy", "memset") if len(tables.tables[t])]
    if not len(rt) or not ids:
        return np.zeros(len(rt), dtype=bool)
    return np.asarray((rt["correlation"] >= 0) & np.isin(rt["correlation"], np.concatenate(ids)))


def launched_rows(tables: TraceTables, table: str, rows: np.ndarray | None = None) -> np.ndarray:
    """Rows of ``tables.runtime`` that launched the selected rows of ``table`` (a boolean mask or index array;
    default all), those without a launch call left out (int64, sorted, unique)."""
    r = launch_rows(tables, table)
    if rows is not None:
        r = r[rows]
    return np.unique(r[r >= 0])
