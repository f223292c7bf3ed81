"""The host what-ifs' modelling terms (issue 10, "savings you can bank"): hand-worked TraceBuilder graphs, and the
GPU before/after pairs of ../shared/traces whose predicted saving is asserted against the measured change computed
from the raw JSON here (json/gzip, not perfdoctor).

Every expected time below is worked out by hand from the events written in the test (µs).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from conftest import shared_trace
from tracebuilder import TraceBuilder

from perfdoctor.analysis import host
from perfdoctor.analysis.steps import find_steps
from perfdoctor.replay.rank import replay_rank
from perfdoctor.replay.transforms.host import batch_copies, prefetch_dataloader
from perfdoctor.trace import load_trace

NEXT = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def _replay(tb: TraceBuilder, tmp_path: Path):  # type: ignore[no-untyped-def]
    tables = load_trace(str(tb.write(tmp_path / "t.json")))
    return replay_rank(tables, find_steps(tables)), tables


def _copy_loop(n: int, nbytes: int = 4) -> TraceBuilder:
    """One step of ``for i in range(n): total += x[i].cpu()``: iteration i starts at t0 = 10 + 30 i and runs
    aten::select [t0, t0+4), the copy's aten::to [t0+5, t0+25) (cudaMemcpyAsync [t0+6, t0+16) of a pageable D2H
    copy on the device [t0+10, t0+11), cudaStreamSynchronize [t0+17, t0+19)), aten::add_ [t0+26, t0+28); the
    step annotation [0, 30 n + 20)."""
    tb = TraceBuilder()
    tb.step(1, 0, 30 * n + 20)
    for i in range(n):
        t0 = 10 + 30 * i
        tb.cpu_op("aten::select", t0, 4)
        tb.cpu_op("aten::to", t0 + 5, 20)
        tb.memcpy(t0 + 6, t0 + 10, 1, kind="DtoH (Device -> Pageable)", nbytes=nbytes, launch_dur=10)
        tb.runtime("cudaStreamSynchronize", t0 + 17, 2)
        tb.cpu_op("aten::add_", t0 + 26, 2)
    return tb


def test_copy_loop_keeps_the_loop_and_drops_all_but_one_copy(tmp_path: Path) -> None:
    # 64 iterations: step [0, 1940). The fix keeps the first aten::to [15, 35) as the one copy and cuts the other
    # 63 (20 µs each: 1,260 µs); select, add_ and the gaps stay (10 µs per iteration). The one copy moves
    # 64 × 4 B = 256 B: at 25 GB/s (compute capability 8 → PCIe 4.0, no pinned copy to measure) 0.01 µs < its
    # recorded 1 µs, so it keeps 1 µs. The step: 1,940 − 1,260 = 680 µs
    rr, tables = _replay(_copy_loop(64), tmp_path)
    assert rr.replayed_step_us.tolist() == [1940.0]
    w = batch_copies(rr, tables, host.synchronization(tables))
    assert rr.step_times(w.scenario).tolist() == [680.0]
    assert "63 copy ops" in w.assumption


def test_one_copy_takes_the_loops_bytes_at_the_link_bandwidth(tmp_path: Path) -> None:
    # as above with 16 B per element (complex128, the widest scalar) and a slow link measured in the trace: a pinned
    # 256 KiB H2D copy after the step takes 262,144 µs, 1e6 B/s. The one copy moves 64 × 16 = 1,024 B ÷ 1e6 B/s
    # = 1,024 µs: it runs [20, 1044). Its cudaMemcpyAsync (a pageable D2H copy: the call returns once the copy is
    # done; recorded [16, 26), 5 µs after the copy's end) returns at 1049, 1,023 µs late; the sync after it keeps
    # its 1 µs gap and 2 µs (the copy it would wait for is done): everything after moves 1,023 µs, the step is
    # 680 + 1,023 = 1,703 µs
    tb = _copy_loop(64, nbytes=16)
    tb.memcpy(3000, 3010, 262_144, kind="HtoD (Pinned -> Device)", nbytes=262_144)
    rr, tables = _replay(tb, tmp_path)
    w = batch_copies(rr, tables, host.synchronization(tables))
    assert rr.step_times(w.scenario).tolist() == pytest.approx([1703.0], abs=1e-6)
    assert "measured in this trace: median of 1 pinned copies" in w.source


def test_tensor_sized_copies_are_not_a_per_element_loop(tmp_path: Path) -> None:
    # 64 copies of 17 B (one byte over complex128): each moves more than one element, so it is no per-element loop
    # (the GPUPuzzlers blocking_streams trace copies 100 results of 4 MiB): nothing changes
    rr, tables = _replay(_copy_loop(64, nbytes=17), tmp_path)
    assert not batch_copies(rr, tables, host.synchronization(tables)).changes_anything


def test_fewer_copies_than_a_loop_change_nothing(tmp_path: Path) -> None:
    # 63 copies in the step: below PER_ELEMENT_COPIES (64), not read as a per-element loop
    rr, tables = _replay(_copy_loop(63), tmp_path)
    assert not batch_copies(rr, tables, host.synchronization(tables)).changes_anything


def _fetching_steps(n: int = 3) -> TraceBuilder:
    # CPU only: step k is [1000 k, 1000 k + 1000): __next__ [1000 k, 1000 k + 600), then 400 µs of host work
    tb = TraceBuilder(device_name=None)
    for k in range(n):
        tb.step(k + 1, 1000 * k, 1000)
        tb.annotation(NEXT, 1000 * k, 600)
        tb.cpu_op("aten::addmm", 1000 * k + 600, 400)
    return tb


def test_prefetch_with_enough_workers_leaves_the_rest_of_the_step(tmp_path: Path) -> None:
    # every fetch becomes 0 µs: each step is its 400 µs of host work. The fewest workers that keep up: the
    # 600 µs fetch ÷ the 400 µs replayed step = 1.5 → 2
    rr, tables = _replay(_fetching_steps(), tmp_path)
    w = prefetch_dataloader(rr, tables)
    assert rr.step_times(w.scenario).tolist() == [400.0, 400.0, 400.0]
    assert "at least 2 worker(s)" in w.assumption
    # two workers deliver a batch per 600 / 2 = 300 µs: the 400 µs step is slower, the bound does not bind
    assert rr.step_times(prefetch_dataloader(rr, tables, workers=2).scenario).tolist() == [400.0, 400.0, 400.0]


def test_prefetch_with_one_worker_is_bound_by_its_load_time(tmp_path: Path) -> None:
    # one worker loads a batch in the recorded 600 µs: a step lasts at least 600 µs, so each fetch keeps a
    # 600 − 400 = 200 µs wait: steps of 200 + 400 = 600 µs (saving 400 µs, not 600)
    rr, tables = _replay(_fetching_steps(), tmp_path)
    w = prefetch_dataloader(rr, tables, workers=1)
    assert rr.step_times(w.scenario).tolist() == [600.0, 600.0, 600.0]
    assert "1 DataLoader worker(s)" in w.assumption and "at least 0.6 ms per batch" in w.assumption


def _whole_window_us(name: str, module_prefix: str) -> float:
    """Duration (µs) of the script's top-level ``<module>`` python_function: the one step of these traces."""
    with gzip.open(shared_trace(name), "rt") as fh:
        events = json.load(fh)["traceEvents"]
    return float(next(e["dur"] for e in events if e.get("name", "").startswith(module_prefix)))


def test_d2h_pair_predicted_within_a_quarter_of_the_measured_change() -> None:
    # GPUPuzzlers d2h_sync: first_sum copies 4,096 elements one .cpu() each; third_sum copies the tensor once and
    # runs the same loop on the host copy. The measured change: the two <module> spans read from the raw JSON
    before = _whole_window_us("gpupuzzlers__d2h_sync_first_sum.json.gz", "first_sum.py(13): <module>")
    after = _whole_window_us("gpupuzzlers__d2h_sync_third_sum.json.gz", "third_sum.py(14): <module>")
    measured = before - after
    tables = load_trace(str(shared_trace("gpupuzzlers__d2h_sync_first_sum.json.gz")))
    rr = replay_rank(tables, find_steps(tables))
    w = batch_copies(rr, tables, host.synchronization(tables))
    predicted = float((rr.recorded_step_us - rr.step_times(w.scenario)).mean())
    assert abs(predicted - measured) <= 0.25 * measured, (predicted, measured)
