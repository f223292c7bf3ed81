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

from perfdoctor.analysis.steps.steps import find_steps
from perfdoctor.analysis.timing import host
from perfdoctor.replay.rank import replay_rank
from perfdoctor.replay.transforms.host import (
    HANDOFF_FREE_NS_PER_BYTE,
    HANDOFF_READ_NS_PER_BYTE,
    batch_copies,
    fetched_batches,
    prefetch_dataloader,
)
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


def _fetch_then_copy(fetch: str) -> TraceBuilder:
    """Step [0, 3000): ``fetch`` [0, 1000); the batch's pageable H2D copy of 1,000,000 B, its call [1010, 1510)
    and the copy [1020, 1500) on the device; a kernel launched at 1600 runs [1610, 2610), a device sync
    [1610, 2615) waits for it; host work [2620, 3000)."""
    tb = TraceBuilder()
    tb.step(1, 0, 3000)
    tb.annotation(fetch, 0, 1000)
    tb.memcpy(1010, 1020, 480, kind="HtoD (Pageable -> Device)", nbytes=1_000_000, launch_dur=500)
    tb.launch("k", 1600, 1610, 1000)
    tb.runtime("cudaDeviceSynchronize", 1610, 1005)
    tb.cpu_op("aten::mul", 2620, 380)
    return tb


def test_prefetch_hand_off_frees_and_faults_in_the_batch_it_copies(tmp_path: Path) -> None:
    # _fetch_then_copy: the hand-off keeps HANDOFF_FREE_NS_PER_BYTE × 1e6 B of the fetch (freeing the previous
    # batch's shared memory) and the copy takes HANDOFF_READ_NS_PER_BYTE × 1e6 B longer (the fresh mapping's page
    # faults): every later event moves by −(1000 − free) + read
    rr, tables = _replay(_fetch_then_copy(NEXT), tmp_path)
    assert rr.replayed_step_us.tolist() == [3000.0]
    free_us, read_us = HANDOFF_FREE_NS_PER_BYTE * 1e6 / 1e3, HANDOFF_READ_NS_PER_BYTE * 1e6 / 1e3
    w = prefetch_dataloader(rr, tables)
    assert rr.step_times(w.scenario).tolist() == pytest.approx([3000.0 - (1000.0 - free_us) + read_us])
    assert "a 1.0 MB batch" in w.assumption
    # a hand-off given as a number keeps that much of each fetch and leaves the copy alone: 3000 − 1000
    assert rr.step_times(prefetch_dataloader(rr, tables, residual_us=0.0).scenario).tolist() == [2000.0]


def test_a_fetch_in_a_trace_without_kernels_takes_the_copies_after_it(tmp_path: Path) -> None:
    # found by the fuzzer: every kernel of a DLRM rank dropped at the boundary (``dur`` of -1e308), its batch
    # copies kept; the next kernel launch after the fetch was looked up in an empty array (IndexError). Step
    # [0, 3000): the fetch [0, 1000), the batch's pageable H2D copy of 1,000,000 B (call [1010, 1510), copy
    # [1020, 1500)), host work [2620, 3000), no kernel: with no launch to end the batch, the copy after the fetch
    # is its batch. The hand-off: the fetch keeps HANDOFF_FREE_NS_PER_BYTE x 1e6 B, the copy (and the pageable
    # call that returns when it ends) HANDOFF_READ_NS_PER_BYTE x 1e6 B longer: 3000 - (1000 - free) + read
    tb = TraceBuilder()
    tb.step(1, 0, 3000)
    tb.annotation(NEXT, 0, 1000)
    tb.memcpy(1010, 1020, 480, kind="HtoD (Pageable -> Device)", nbytes=1_000_000, launch_dur=500)
    tb.cpu_op("aten::mul", 2620, 380)
    rr, tables = _replay(tb, tmp_path)
    s, e = host.ranges_named(tables, host.DATALOADER)
    nbytes, copies = fetched_batches(rr, tables, e)
    assert len(tables.kernels) == 0 and nbytes.tolist() == [1_000_000.0] and copies.size == 1
    free_us, read_us = HANDOFF_FREE_NS_PER_BYTE * 1e6 / 1e3, HANDOFF_READ_NS_PER_BYTE * 1e6 / 1e3
    w = prefetch_dataloader(rr, tables)
    assert rr.step_times(w.scenario).tolist() == pytest.approx([3000.0 - (1000.0 - free_us) + read_us])


def test_a_fetch_from_workers_already_holds_its_hand_off(tmp_path: Path) -> None:
    # the same step fetched by _MultiProcessingDataLoaderIter: the batch came from a worker, its hand-off is in the
    # recording; the fetch goes (3000 − 1000) and the copy keeps its time
    rr, tables = _replay(_fetch_then_copy("enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"), tmp_path)
    assert rr.step_times(prefetch_dataloader(rr, tables).scenario).tolist() == [2000.0]


def test_fetched_batches_are_the_copies_between_the_fetch_and_the_next_kernel() -> None:
    # ResNet50 V100, num_workers=0: after each DataLoader __next__ the loop copies the images and the labels to the
    # device before the first conv. From the raw JSON: per analysed step, the Memcpy HtoD bytes whose
    # cudaMemcpyAsync (matched by correlation id) starts after the step's __next__ ends and before its first
    # cudaLaunchKernel
    name = "kineto__resnet50_num_workers_0__worker0.pt.trace.json.gz"
    with gzip.open(shared_trace(name), "rt") as fh:
        ev = [e for e in json.load(fh)["traceEvents"] if e.get("ph") == "X"]
    call = {e["args"]["correlation"]: e["ts"] for e in ev if e.get("cat") == "Runtime"}
    expected = []
    for s in (e for e in ev if e["name"].startswith("ProfilerStep#")):
        fetch = next(e for e in ev if e["name"].startswith("enumerate(DataLoader)") and e["ts"] >= s["ts"])
        end = fetch["ts"] + fetch["dur"]
        first_launch = min(e["ts"] for e in ev if e["name"] == "cudaLaunchKernel" and e["ts"] >= end)
        expected.append(
            sum(
                e["args"]["bytes"]
                for e in ev
                if e["name"].startswith("Memcpy HtoD") and end <= call[e["args"]["correlation"]] < first_launch
            )
        )
    assert expected == [19_267_584 + 256] * 6  # 32×3×224×224 fp32 images and 32 int64 labels
    tables = load_trace(str(shared_trace(name)))
    rr = replay_rank(tables, find_steps(tables))
    s, e = host.ranges_named(tables, host.DATALOADER)
    nbytes, copies = fetched_batches(rr, tables, e)
    assert nbytes.tolist() == expected and copies.size == 12


def test_combined_fixes_keep_a_stretched_copy() -> None:
    # recorded durations [100, 100, 100] µs. A stretches activity 0 to 150 (the hand-off's slower batch copy), B
    # shortens activity 1 to 50 and leaves 0 alone, C shortens activity 0 to 80: together A and B give [150, 50,
    # 100] (B's recorded 100 for activity 0 is no change, so A's 150 stands); all three [80, 50, 100] (two fixes
    # change activity 0: the shorter)
    import numpy as np

    from perfdoctor.replay.simulate import Scenario
    from perfdoctor.replay.transforms import WhatIf, combine

    rec = np.array([100.0, 100.0, 100.0])

    def w(name: str, dur: list[float]) -> WhatIf:
        return WhatIf(name, Scenario(name, act_dur_us=np.array(dur)), name, "test")

    a, b, c = w("A", [150, 100, 100]), w("B", [100, 50, 100]), w("C", [80, 100, 100])
    assert combine("AB", [a, b], 3, 0, rec).scenario.act_dur_us.tolist() == [150.0, 50.0, 100.0]  # type: ignore[union-attr]
    assert combine("ABC", [a, b, c], 3, 0, rec).scenario.act_dur_us.tolist() == [80.0, 50.0, 100.0]  # type: ignore[union-attr]
