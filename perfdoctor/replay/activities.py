"""The device activities of one trace as columns (kernels, memcpys, memsets of every device, all times µs, absolute
as in the file): the nodes of the replay's graph (:mod:`perfdoctor.replay.graph`) and of the cross-stream edges
between them (:mod:`perfdoctor.replay.deps`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from perfdoctor.trace.tables import TraceTables

ACT_TABLES = ("kernels", "memcpy", "memset")


@dataclass(frozen=True)
class Activities:
    """Every device activity, sorted by start (then by table), as columns of shape ``(n,)``: ``ts_us`` /
    ``dur_us`` (µs), ``device``, ``stream``, ``table`` (index into :data:`ACT_TABLES`) and ``row`` (row in that
    table)."""

    ts_us: np.ndarray
    dur_us: np.ndarray
    device: np.ndarray
    stream: np.ndarray
    table: np.ndarray
    row: np.ndarray

    @property
    def end_us(self) -> np.ndarray:
        """Each activity's recorded end (µs)."""
        return np.asarray(self.ts_us + self.dur_us)


def activities(tables: TraceTables) -> Activities:
    """The activities of the tables :data:`ACT_TABLES` names, in one start-sorted set of columns."""
    parts: dict[str, list[np.ndarray]] = {k: [] for k in ("ts", "dur", "device", "stream", "table", "row")}
    for k, tname in enumerate(ACT_TABLES):
        tab = tables.tables[tname]
        n = len(tab)
        if n == 0:
            continue
        parts["ts"].append(tab["ts_us"])
        parts["dur"].append(tab["dur_us"])
        parts["device"].append(tab["device"].astype(np.int64))
        parts["stream"].append(tab["stream"].astype(np.int64))
        parts["table"].append(np.full(n, k, dtype=np.int64))
        parts["row"].append(np.arange(n, dtype=np.int64))
    if not parts["ts"]:
        f, i = np.empty(0, dtype=np.float64), np.empty(0, dtype=np.int64)
        return Activities(f, f, i, i, i, i)
    cols = {k: np.concatenate(v) for k, v in parts.items()}
    order = np.lexsort((cols["table"], cols["ts"]))
    return Activities(*(cols[k][order] for k in ("ts", "dur", "device", "stream", "table", "row")))
