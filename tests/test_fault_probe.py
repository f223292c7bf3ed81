"""Minor page faults: the runner's count per step (steps.csv ``minor_faults``) and its probe of one fault's cost
(run.json ``fault_probe``), measured on this machine against page counts known in advance."""

from __future__ import annotations

import mmap
import sys

import numpy as np
import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="getrusage's minor faults: Linux")


def test_the_probe_faults_once_per_page_and_times_each() -> None:
    from perfdoctor.capture.fault_probe import PROBE_BYTES, ROUNDS, probe_faults

    p = probe_faults()
    assert p is not None
    # one fault per 4 KiB page of the 64 MiB mapping (madvise or never transparent huge pages: a plain mmap gets none)
    assert p["faults"] == PROBE_BYTES // mmap.PAGESIZE == 16384
    assert p["rounds"] == ROUNDS
    us = p["us_per_fault"]
    assert isinstance(us, float) and 0.05 < us < 100.0  # a fault maps and zeroes a page: 0.1-10 µs on any CPU


def test_a_step_that_writes_fresh_memory_counts_its_pages() -> None:
    torch = pytest.importorskip("torch")
    del torch
    from perfdoctor.capture.step_record import StepRecord
    from perfdoctor.capture.step_timer import StepTimer

    rows: list[StepRecord] = []
    timer = StepTimer(0.0, rows.append)
    timer.end_step(None, None, None, "none")  # the first step: no CPU times read before it
    m = mmap.mmap(-1, 8 << 20)
    np.frombuffer(m, dtype=np.uint8)[:: mmap.PAGESIZE] = 1  # 2,048 pages written for the first time
    timer.end_step(None, None, None, "none")
    timer.end_step(None, None, None, "none")  # nothing touched
    m.close()
    assert rows[0].minor_faults is None
    assert rows[1].minor_faults is not None and 2048 <= rows[1].minor_faults < 2048 + 200
    assert rows[2].minor_faults is not None and rows[2].minor_faults < 50
