"""Pageable host↔device copies replaced by pinned, asynchronous ones."""

from __future__ import annotations

import numpy as np

from perfdoctor.replay.activities import ACT_TABLES
from perfdoctor.replay.graph import QUEUE_CALL
from perfdoctor.replay.rank import RankReplay
from perfdoctor.replay.simulate import Intervals, Scenario
from perfdoctor.replay.transforms import WhatIf, merge_cuts
from perfdoctor.trace.tables import TraceTables

GB = 1e9
MIN_MEASURED_BYTES = 256 * 1024  # smaller copies are latency-bound: their bytes/µs says nothing about bandwidth
# achievable pinned host→device bandwidth of an x16 link by PCIe generation (B/s): about 75-80% of the raw
# 16/32/64 GB/s (PCI-SIG PCIe 3.0/4.0/5.0 x16; NVIDIA bandwidthTest on pinned memory reaches 12-13, 24-26, 50-55)
PCIE_PINNED_BYTES_PER_S = {3: 12 * GB, 4: 25 * GB, 5: 50 * GB}
_PCIE_GEN_BY_CC = {6: 3, 7: 3, 8: 4, 9: 5, 10: 5}  # compute capability major → PCIe generation of its boards


def pinned_bandwidth(tables: TraceTables) -> tuple[float, str]:
    """(B/s, source): the median bytes/duration of this trace's pinned host↔device copies of at least
    :data:`MIN_MEASURED_BYTES`, else the PCIe generation of the GPU's compute capability, else PCIe 3.0."""
    from perfdoctor.analysis.timing.classify import classify_kernel

    mc = tables.memcpy
    if len(mc):
        names = tables.names
        pinned = np.array(
            [
                (lambda c: c.direction in ("h2d", "d2h") and not c.pageable)(classify_kernel(names[i]))
                for i in mc["name_id"].tolist()
            ],
            dtype=bool,
        )
        big = pinned & (mc["bytes"] >= MIN_MEASURED_BYTES) & (mc["dur_us"] > 0)
        if big.any():
            bw = float(np.median(mc["bytes"][big] / (mc["dur_us"][big] * 1e-6)))
            return bw, f"measured in this trace: median of {int(big.sum())} pinned copies, {bw / GB:.1f} GB/s"
    props = tables.device_properties
    cc = props[0].get("computeMajor") if props and isinstance(props[0], dict) else None
    gen = _PCIE_GEN_BY_CC.get(int(cc), 3) if isinstance(cc, int) else 3
    bw = PCIE_PINNED_BYTES_PER_S[gen]
    return bw, f"PCIe {gen}.0 x16 pinned bandwidth, {bw / GB:.0f} GB/s (datasheet, about 78% of the raw link)"


def _launch_call_us(tables: TraceTables, blocking_rows: np.ndarray) -> float:
    """Median duration (µs) of the trace's launch calls that did not block (5 µs when there are none)."""
    rt = tables.runtime
    if len(rt) == 0:
        return 5.0
    m = tables.names_matching(QUEUE_CALL)[rt["name_id"]]
    m[blocking_rows] = False
    return float(np.median(rt["dur_us"][m])) if m.any() else 5.0


def pinned_copies(
    rr: RankReplay, tables: TraceTables, memcpy_rows: np.ndarray, held: Intervals | None = None
) -> WhatIf:
    """The pageable copies ``memcpy_rows`` (rows of the memcpy table) run as pinned ``non_blocking=True`` copies.

    Each copy takes ``bytes / pinned bandwidth`` (:func:`pinned_bandwidth`: measured in this trace when it holds
    pinned copies, else the PCIe datasheet) instead of its staged time, and its launch call no longer blocks the
    host: the call keeps this trace's median launch-call time and the rest of it is cut; so do the synchronizing
    calls that start inside ``held`` (the host intervals the copies hold: PyTorch synchronizes the stream after a
    blocking pageable copy, and a ``non_blocking=True`` pinned copy does not).
    Source: CUDA C Programming Guide, "Page-Locked Host Memory" (pageable copies are staged and synchronous).
    """
    g = rr.graph
    bw, source = pinned_bandwidth(tables)
    is_mc = g.act_table == ACT_TABLES.index("memcpy")
    sel = is_mc & np.isin(g.act_row, memcpy_rows)
    dur = g.act_dur_us.copy()
    nbytes = tables.memcpy["bytes"][g.act_row[sel]].astype(np.float64) if sel.any() else np.empty(0)
    dur[sel] = np.minimum(dur[sel], np.maximum(nbytes, 0) / bw * 1e6)
    rows = g.act_launch[sel]
    own_call = np.isin(g.blk_row, rows[rows >= 0])
    blk = own_call.copy()
    if held is not None and held[0].size:
        k = np.searchsorted(held[0], g.blk_end_us, side="left") - 1
        blk |= (k >= 0) & (held[1][np.maximum(k, 0)] > g.blk_ts_us)
    launch_us = _launch_call_us(tables, g.blk_row)
    cut: dict[int, Intervals] = {}
    for pid in np.unique(g.blk_pid[blk]).tolist():
        m = blk & (g.blk_pid == pid)
        # the copy's own call stays a launch; a synchronize after it goes whole
        s = np.where(own_call[m], np.minimum(g.blk_ts_us[m] + launch_us, g.blk_end_us[m]), g.blk_ts_us[m])
        cut = merge_cuts(cut, {pid: (s, g.blk_end_us[m])})
    return WhatIf(
        "pinned-copies",
        Scenario("pinned-copies", act_dur_us=dur, host_cut=cut, blk_removed=blk, peers_move=True),
        f"{int(sel.sum())} pageable copies pinned and non_blocking: bytes ÷ {bw / GB:.1f} GB/s, the host is not held",
        source,
    )
