"""The cost of a minor page fault on the machine that ran the job, timed by the runner after the run.

A fresh anonymous mapping (what the C allocator hands a large tensor: glibc ``malloc`` maps allocations over its
mmap threshold, 128 KiB at first) costs nothing until a page is first written; then the kernel takes a minor fault,
maps the page and zeroes it. The probe maps ``PROBE_BYTES``, writes one byte per page (every write a fault), then
writes them again (no fault: the same stride's cache and TLB misses), and takes the difference per fault. The
median of ``ROUNDS`` mappings; about 0.1 s in all.
"""

from __future__ import annotations

import mmap
import resource
import statistics
import time

import numpy as np

PROBE_BYTES = 64 << 20  # 16,384 pages of 4 KiB
ROUNDS = 5


def _minor_faults() -> int:
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_minflt)


def probe_faults() -> dict[str, object] | None:
    """``{"us_per_fault": µs, "faults": faults per round, "rounds": ROUNDS, "source": ...}``: the median time one
    minor page fault costs this process (µs), or None where no fault was counted (the kernel backed the mapping
    with huge pages, or ``getrusage`` does not count minor faults)."""
    page = mmap.PAGESIZE
    costs, counts = [], []
    for _ in range(ROUNDS):
        m = mmap.mmap(-1, PROBE_BYTES)
        try:
            a = np.frombuffer(m, dtype=np.uint8)
            f0 = _minor_faults()
            t0 = time.perf_counter()
            a[::page] = 1
            t1 = time.perf_counter()
            faults = _minor_faults() - f0
            a[::page] = 2
            t2 = time.perf_counter()
            del a
        finally:
            m.close()
        if faults > 0:
            costs.append(max((t1 - t0) - (t2 - t1), 0.0) * 1e6 / faults)
            counts.append(faults)
    if not costs:
        return None
    return {
        "us_per_fault": round(statistics.median(costs), 4),
        "faults": int(statistics.median(counts)),
        "rounds": len(costs),
        "source": f"perfdoctor profile: {PROBE_BYTES >> 20} MiB of fresh anonymous memory written one byte a page, "
        "less the same writes again, per minor fault (median of the rounds)",
    }
