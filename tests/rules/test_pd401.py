"""PD401 host-device-sync: a firing and a silent case (and skips), answers worked out by hand (µs).

Moved from tests/test_rules_synthetic.py (issue 9: one test file per rule).
"""

from rules_helpers import SGEMM, run_tb
from tracebuilder import TraceBuilder


def _sync_trace(with_sync):
    tb = TraceBuilder()
    tb.step(1, 0, 1000)
    tb.launch(SGEMM, launch_ts=5, start=10, dur=490)  # [10, 500)
    tb.cpu_op("aten::item", 15, 500)
    if with_sync:
        tb.runtime("cudaStreamSynchronize", 20, 490)  # [20, 510)
    tb.launch(SGEMM, launch_ts=700, start=710, dur=200)  # [710, 910)
    return tb


def test_pd401_fires_on_sync(tmp_path):
    f = run_tb(_sync_trace(True), tmp_path, ["PD401"]).findings["PD401"]
    # replayed without the sync: 490 µs of host time go, the second kernel launches at 210 and queues behind the
    # first: [500, 700); the annotation ends at 510: 1000 -> 700
    assert f["saving_us_per_step"] == 300
    assert f["evidence"]["syncs_per_step"] == 1
    assert f["evidence"]["events"][0]["name"].endswith("cudaStreamSynchronize")


def test_pd401_silent_without_sync(tmp_path):
    r = run_tb(_sync_trace(False), tmp_path, ["PD401"])
    assert "PD401" in r.passed and r.metrics("PD401")["idle_us"] == 0


def test_pd401_leaves_pageable_copy_syncs_to_pd102(tmp_path):
    tb = TraceBuilder()
    tb.step(1, 0, 1000)
    tb.cpu_op("aten::copy_", 5, 400)
    tb.memcpy(launch_ts=10, start=20, dur=80, launch_dur=20)
    tb.runtime("cudaStreamSynchronize", 35, 300)
    tb.launch(SGEMM, launch_ts=420, start=430, dur=500)
    r = run_tb(tb, tmp_path, ["PD401", "PD102"])
    assert r.metrics("PD401")["idle_us"] == 0
    # replayed pinned and non_blocking: the copy call keeps a 5 µs launch, [15, 30) and the sync [35, 335) go
    # (315 µs); the kernel launches at 105, runs [115, 615); the annotation ends at 685
    assert r.findings["PD102"]["saving_us_per_step"] == 315


def test_pd401_counts_print_as_integers(tmp_path):
    """F15: a whole count prints without ".0" (was "8193.0 times per step"); the method names the analysed
    steps it averages over (one here: ProfilerStep#1) and, a bare trace, that the saving is for the profiled step."""
    f = run_tb(_sync_trace(True), tmp_path, ["PD401"]).findings["PD401"]
    assert "waits on the device 1 times per step" in f["message"]
    assert "mean over 1 analysed step(s) (#1); for the profiled step (a bare trace" in f["saving_method"]


def test_count_and_step_list_text():
    from perfdoctor.checks.common import count_text, step_list_text

    assert count_text(8193.0) == "8,193" and count_text(2.5) == "2.5" and count_text(0) == "0"
    assert step_list_text([5, 6, 7, 8, 9, 10]) == "#5–#10" and step_list_text([2, 4, 7]) == "#2, #4, #7"
    assert step_list_text([3]) == "#3" and step_list_text([]) == "none"


def test_pd401_names_the_enclosing_op_not_a_stale_external_id(tmp_path):
    """F6: the sync's source is the outermost cpu_op of its thread whose span contains it (by time), not the op its
    external id points at: here the call carries the id of an earlier aten::as_strided (as in the d2h_sync trace)."""
    tb = TraceBuilder()
    tb.step(1, 0, 1000)
    tb.launch(SGEMM, launch_ts=5, start=10, dur=490)  # [10, 500)
    tb.cpu_op("aten::as_strided", 12, 2, external_id=77)
    tb.cpu_op("aten::to", 15, 500)  # .cpu(): aten::to > aten::_to_copy > aten::copy_ > the sync
    tb.cpu_op("aten::_to_copy", 16, 498)
    tb.cpu_op("aten::copy_", 18, 494)
    tb.runtime("cudaStreamSynchronize", 20, 490)
    tb.events[-1]["args"]["External id"] = 77
    tb.launch(SGEMM, launch_ts=700, start=710, dur=200)
    f = run_tb(tb, tmp_path, ["PD401"]).findings["PD401"]
    assert f["evidence"]["events"][0]["name"] == "aten::to → cudaStreamSynchronize"
    assert "most from aten::to" in f["message"]


def test_pd401_names_aten_to_on_the_d2h_sync_trace():
    """The GPUPuzzlers d2h_sync trace: each of its 4,096 blocking cudaMemcpyAsync calls runs inside aten::to
    (checked in the raw JSON: the outermost cpu_op of the same thread containing the call), and so does the
    cudaStreamSynchronize after each, whose external id names the aten::as_strided before it. Those syncs wait for
    nothing (the copy returned once done), so the waits listed are the copies."""
    import bisect
    import gzip
    import json

    from conftest import shared_trace

    from perfdoctor import pipeline

    path = shared_trace("gpupuzzlers__d2h_sync_first_sum.json.gz")
    with gzip.open(path, "rt") as fh:
        events = json.load(fh)["traceEvents"]
    # the outermost cpu_op of each thread (the earliest-starting, longest first, not inside an earlier one), then
    # for each copy the last of them starting at or before it, if it ends after the copy
    tops: dict[object, list[dict]] = {}
    for o in sorted((e for e in events if e.get("cat") == "cpu_op"), key=lambda o: (o["ts"], -o["dur"])):
        top = tops.setdefault(o["tid"], [])
        if not top or o["ts"] >= top[-1]["ts"] + top[-1]["dur"]:
            top.append(o)
    starts = {tid: [o["ts"] for o in top] for tid, top in tops.items()}
    outer = {}
    for s in (e for e in events if e.get("name") == "cudaMemcpyAsync"):
        i = bisect.bisect_right(starts.get(s["tid"], []), s["ts"]) - 1
        o = tops[s["tid"]][i] if i >= 0 else None
        name = o["name"] if o is not None and o["ts"] + o["dur"] >= s["ts"] + s["dur"] else None
        outer[name] = outer.get(name, 0) + 1
    report = pipeline.build([str(path)]).report
    f = next(f for f in report["findings"] if f["code"] == "PD401")
    copies = next(e for e in f["evidence"]["events"] if e["name"].endswith("cudaMemcpyAsync"))
    assert copies["name"] == "aten::to → cudaMemcpyAsync" and copies["count"] == outer["aten::to"] == 4096
    assert "aten::as_strided" not in json.dumps(f)


def test_pd401_names_a_sync_on_a_thread_without_ops_by_its_own_name(tmp_path):
    # the _sync_trace's sync moved to thread 7, which has no op (the op stays on thread 100): the replay is the
    # same (host threads of a process share one timeline), 1000 -> 700; the caller join found no op there and
    # indexed an empty array (IndexError); the call keeps its own name
    tb = _sync_trace(False)
    tb.runtime("cudaStreamSynchronize", 20, 490, tid=7)
    f = run_tb(tb, tmp_path, ["PD401"]).findings["PD401"]
    assert f["saving_us_per_step"] == 300 and f["evidence"]["events"][0]["name"] == "cudaStreamSynchronize"


def _copy_loop(n):
    """One step of ``for i in range(n): total += x[i].cpu()`` (tests/test_transforms_host.py's loop): iteration i
    starts at t0 = 10 + 30 i: aten::select [t0, t0+4), aten::to [t0+5, t0+25) holding a pageable D2H
    cudaMemcpyAsync [t0+6, t0+16) (its 4 B copy on the device [t0+10, t0+11)) and a cudaStreamSynchronize
    [t0+17, t0+19), aten::add_ [t0+26, t0+28); the step [0, 30 n + 20)."""
    tb = TraceBuilder()
    tb.step(1, 0, 30 * n + 20)
    for i in range(n):
        t0 = 10 + 30 * i
        tb.cpu_op("aten::select", t0, 4)
        tb.cpu_op("aten::to", t0 + 5, 20)
        tb.memcpy(t0 + 6, t0 + 10, 1, kind="DtoH (Device -> Pageable)", nbytes=4, launch_dur=10)
        tb.runtime("cudaStreamSynchronize", t0 + 17, 2)
        tb.cpu_op("aten::add_", t0 + 26, 2)
    return tb


def test_pd401_replays_a_per_element_copy_loop_as_one_copy(tmp_path):
    # 64 copies in the step: a per-element loop. The fix keeps the first aten::to as the one copy and cuts the
    # other 63 with their waits (20 µs each: 1,260 µs); select, add_ and the gaps stay. Step 1,940 -> 680 µs
    # (the one copy moves 256 B: far under its recorded 1 µs at any link speed)
    f = run_tb(_copy_loop(64), tmp_path, ["PD401"]).findings["PD401"]
    assert f["saving_us_per_step"] == 1260
    assert "with its per-element copies done as one copy takes it from 1.94 ms to 0.68 ms" in f["message"]
    assert "63 copy ops and their waits go" in f["saving_method"]
    assert f["fix"].lstrip().startswith("The step copies a tensor to the host one element at a time")
    assert "values = x.cpu()" in f["example_after"]


def test_pd401_removes_syncs_below_a_loop(tmp_path):
    # 63 copies: not read as a loop (64 or more), so the syncs stop blocking instead: per iteration the blocking
    # cudaMemcpyAsync (10 µs: a pageable D2H copy returns when it is done) and the sync (2 µs) go, 12 µs each:
    # 63 × 12 = 756 µs of the 1,910 µs step; the rest of the host's work keeps its time
    f = run_tb(_copy_loop(63), tmp_path, ["PD401"]).findings["PD401"]
    assert f["saving_us_per_step"] == 756
    assert "with its syncs not blocking takes it" in f["message"] and "no longer block" in f["saving_method"]
    assert f["fix"].lstrip().startswith("Keep values on the device")


def test_pd401_saving_on_the_d2h_pair_is_the_validated_one():
    """The GPUPuzzlers d2h_sync pair: first_sum copies 4,096 elements one .cpu() each, third_sum copies the tensor
    once. PD401's saving on first_sum is within a quarter of the measured change (the two scripts' <module> spans,
    read from the raw JSON here), as benchmarks/replay_pairs.py validates for batch_copies."""
    import gzip
    import json

    from conftest import shared_trace

    from perfdoctor import pipeline

    def module_us(name, prefix):
        with gzip.open(shared_trace(name), "rt") as fh:
            events = json.load(fh)["traceEvents"]
        return float(next(e["dur"] for e in events if e.get("name", "").startswith(prefix)))

    measured = module_us("gpupuzzlers__d2h_sync_first_sum.json.gz", "first_sum.py(13): <module>") - module_us(
        "gpupuzzlers__d2h_sync_third_sum.json.gz", "third_sum.py(14): <module>"
    )
    report = pipeline.build([str(shared_trace("gpupuzzlers__d2h_sync_first_sum.json.gz"))]).report
    f = next(f for f in report["findings"] if f["code"] == "PD401")
    assert abs(f["saving_us_per_step"] - measured) <= 0.25 * measured, (f["saving_us_per_step"], measured)
    assert "per-element device→host copies" in f["saving_method"]


def test_pd401_events_add_up_to_the_host_wait_on_the_d2h_sync_trace():
    """GPUPuzzlers d2h_sync first_sum (one step): the host wait is the 4,096 cudaMemcpyAsync calls whose memcpy
    (same correlation id, read from the raw JSON) is a pageable D2H copy, plus every synchronize call that waits
    for something: not a cudaStreamSynchronize right after such a copy (which returned once its copy was done)
    with no call queuing work in between, returning within 10 µs. The events list names all of them, and its
    totals add up to the headline."""
    import gzip
    import json

    from conftest import shared_trace

    from perfdoctor import pipeline

    path = shared_trace("gpupuzzlers__d2h_sync_first_sum.json.gz")
    with gzip.open(path, "rt") as fh:
        events = json.load(fh)["traceEvents"]
    pageable_d2h = {
        e["args"]["correlation"]
        for e in events
        if e.get("cat") == "gpu_memcpy" and e["name"] == "Memcpy DtoH (Device -> Pageable)"
    }
    want: dict[str, float] = {}
    runtime = sorted((e for e in events if e.get("cat") == "cuda_runtime"), key=lambda e: e["ts"])
    for prev, e in zip([None, *runtime], runtime):
        after_copy = prev is not None and prev["args"].get("correlation") in pageable_d2h
        waitless = e["name"] == "cudaStreamSynchronize" and after_copy and e["dur"] < 10
        if (e["name"].endswith("Synchronize") and not waitless) or e["args"].get("correlation") in pageable_d2h:
            want[e["name"]] = want.get(e["name"], 0.0) + e["dur"]
    f = next(f for f in pipeline.build([str(path)]).report["findings"] if f["code"] == "PD401")
    got = {e["name"].split(" → ")[-1]: e["total_us"] for e in f["evidence"]["events"]}
    assert got == want == {"cudaMemcpyAsync": 56618.0, "cudaDeviceSynchronize": 6.0}
    assert abs(sum(got.values()) / 1000 - f["evidence"]["host_wait_ms"]) < 1e-9


def test_pd401_counts_no_wait_for_a_sync_right_after_a_blocking_copy(tmp_path):
    """Each iteration of _copy_loop is a pageable D2H cudaMemcpyAsync (it returns once its copy is done), then a
    2 µs cudaStreamSynchronize with nothing queued since: one wait per element, 63, not 126. The fix still removes
    both calls (756 µs, test_pd401_removes_syncs_below_a_loop)."""
    r = run_tb(_copy_loop(63), tmp_path, ["PD401"])
    f = r.findings["PD401"]
    assert f["evidence"]["syncs_per_step"] == 63 and f["saving_us_per_step"] == 756
    # the host wait is the copies' calls alone: 63 × 10 µs
    assert f["evidence"]["host_wait_ms"] == 0.63
    assert [e["name"] for e in f["evidence"]["events"]] == ["aten::to → cudaMemcpyAsync"]


def test_pd401_counts_a_sync_with_work_queued_after_the_copy(tmp_path):
    """The same loop with a kernel launched between each copy and its sync (cudaLaunchKernel [t0+16.5, t0+17)):
    the sync has work to wait for, so each element waits twice: 126; a device-wide cudaDeviceSynchronize after the
    last sync waits for every stream, and counts too: 127."""
    tb = _copy_loop(63)
    for i in range(63):
        t0 = 10 + 30 * i
        tb.launch(SGEMM, launch_ts=t0 + 16.5, start=t0 + 17, dur=1, launch_dur=0.5)
    tb.runtime("cudaDeviceSynchronize", 30 * 63 + 12, 2)
    f = run_tb(tb, tmp_path, ["PD401"]).findings["PD401"]
    assert f["evidence"]["syncs_per_step"] == 127
