"""The correlation join of a trace, computed once: which runtime call launched each GPU activity.

Kineto writes a launching runtime call (``cudaLaunchKernel``, ``cudaMemcpyAsync``, ...) and the kernel, memcpy or
memset it launched with the same ``correlation`` id. :func:`launch_rows` pairs them for one GPU table and keeps
the result on the :class:`~perfdoctor.trace.tables.TraceTables` it came from, so every analysis and check asks
once per trace instead of re-sorting the runtime table.
"""

from __future__ import annotations

from typing import cast

import numpy as np

from perfdoctor.trace.tables import TraceTables

_CACHE_KEY = "_launch_rows_cache"


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
