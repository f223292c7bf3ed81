"""A replayed saving split into what it removes (perfdoctor/replay/decompose.py): the attributions of the two replays
the saving is the difference of, subtracted. Every part worked out by hand on TraceBuilder graphs (µs)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from tracebuilder import TraceBuilder

from perfdoctor import pipeline
from perfdoctor.analysis.rank import analyze_paths
from perfdoctor.checks import config
from perfdoctor.replay.decompose import saving_parts
from perfdoctor.replay.transforms.host import cuda_graphs, remove_syncs

SGEMM = "ampere_sgemm_128x64_nn"


def _sync_then_copy(tmp_path: Path) -> Path:
    """Step 0-230: an SGEMM launched at 0 runs 10-110; cudaStreamSynchronize 20-115 waits for it (release 5 µs);
    a device→host copy on stream 22, launched at 120, runs 125-225; the host step ends at 230."""
    tb = TraceBuilder()
    tb.step(1, 0, 230)
    tb.launch(SGEMM, launch_ts=0, start=10, dur=100)
    tb.runtime("cudaStreamSynchronize", 20, 95)
    tb.memcpy(launch_ts=120, start=125, dur=100, kind="DtoH (Device -> Pinned)", stream=22)
    return tb.write(tmp_path / "sync.json")


def test_a_removed_sync_saves_its_idle_plus_the_copy_now_overlapping_compute(tmp_path: Path) -> None:
    r = analyze_paths([str(_sync_then_copy(tmp_path))]).ranks[0]
    rr = r.replay
    assert rr is not None
    whatif = remove_syncs(rr, (np.array([20.0]), np.array([115.0])))
    # the sync's 95 µs cut: the copy launches at 25 and runs 30-130 beside the SGEMM (10-110); the host ends at
    # 135: 230 -> 135
    assert rr.step_times(whatif.scenario).tolist() == [135.0]
    parts = saving_parts(r.tables, rr, whatif.scenario, 0)
    # before: busy 200 (10-110, 125-225); idle 30 = launch 15 (the SGEMM's launch 0-10, the copy's 120-125),
    # sync 5 (its release 110-115), Python 10 (115-120, 225-230)
    # after: busy 120 (10-130); idle 15 = launch 5 (the launch call 0-5), Python 10 (5-10, 130-135)
    assert parts.idle_us == {
        "dataloader": 0.0,
        "synchronization": 5.0,
        "host_launch_bound": 10.0,
        "python": 0.0,
        "other": 0.0,
    }
    assert parts.busy_us == 80.0 and parts.error_us == 0.0 and parts.overlapping[0] == "memcpy"
    assert parts.total_us == 95.0  # = the saving, 230 - 135
    assert parts.text(("synchronization",)) == (
        "0.01 ms sync idle + 0.01 ms launch idle + 0.08 ms from copies overlapping other device work"
    )


def _python_between_launches(tmp_path: Path) -> Path:
    """Step 0-240: three aten::mm (0-20, 100-120, 200-220) launch a 10 µs SGEMM each at +10 (it runs at +20);
    the host runs Python outside any op in between (20-100, 120-200, 220-240)."""
    tb = TraceBuilder()
    tb.step(1, 0, 240)
    for t in (0, 100, 200):
        tb.cpu_op("aten::mm", t, 20)
        tb.launch(SGEMM, launch_ts=t + 10, start=t + 20, dur=10)
    return tb.write(tmp_path / "launch.json")


def test_cuda_graphs_save_the_launch_idle_and_the_python_between_launches(tmp_path: Path) -> None:
    path = _python_between_launches(tmp_path)
    r = analyze_paths([str(path)]).ranks[0]
    rr = r.replay
    assert rr is not None
    whatif = cuda_graphs(rr, r.tables)
    # host cut from the first launch + 10 (one graph launch) to the last launch's end: 20-215; the SGEMMs queue
    # back to back 20-50; the host ends at 240 - 195 = 45: 240 -> 50
    assert rr.step_times(whatif.scenario).tolist() == [50.0]
    parts = saving_parts(r.tables, rr, whatif.scenario, 0)
    # before (the host sets the pace): busy 30; idle 210 = launch 60 (inside the three aten::mm), Python 150
    # after: busy 30 (20-50); idle 20 (0-20) = launch 20 (the first aten::mm and its launch latency)
    assert parts.idle_us["host_launch_bound"] == 40.0 and parts.idle_us["python"] == 150.0
    assert parts.busy_us == 0.0 and parts.total_us == 190.0
    built = pipeline.build([str(path)], rule_options=config.resolve(select="PD103"))
    (f,) = [f for f in built.model.findings if f.code == "PD103"]
    assert f.saving_us_per_step == 190.0
    assert "(saves 0.2 ms: 0.04 ms launch idle + 0.15 ms Python idle (host outside ops))" in f.message


def test_pd401_message_splits_its_saving(tmp_path: Path) -> None:
    built = pipeline.build([str(_sync_then_copy(tmp_path))], rule_options=config.resolve(select="PD401"))
    (f,) = [f for f in built.model.findings if f.code == "PD401"]
    assert f.saving_us_per_step == 95.0  # as replayed above
    assert "(saves 0.10 ms: 0.01 ms sync idle + 0.01 ms launch idle + 0.08 ms from copies overlapping" in f.message


def test_the_fix_all_replays_the_base_pd103_is_measured_on(tmp_path: Path) -> None:
    """Step 0-240: a DataLoader fetch 0-100, then two aten::mm (100-120, 200-220) each launching a 10 µs SGEMM at
    +10 (runs at +20), Python between them. With PD101 a finding, PD103 is measured on top of its prefetched
    batches (the base) and the fix-all of both replays the base once. Without PD101 (not selected)
    PD103 is the graphs alone, and no fix-all replays a prefetch no finding recommends
    (`--ignore PD101` once still took its 56.5 ms off the ResNet50 fix-all)."""
    tb = TraceBuilder()
    tb.step(1, 0, 240)
    tb.annotation("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 0, 100)
    for t in (100, 200):
        tb.cpu_op("aten::mm", t, 20)
        tb.launch(SGEMM, launch_ts=t + 10, start=t + 20, dur=10)
    path = str(tb.write(tmp_path / "t.json"))
    built = pipeline.build([path], rule_options=config.resolve(select="PD101,PD103"))
    found = {f.code: f for f in built.model.findings}
    assert set(found) == {"PD101", "PD103"}
    f = found["PD103"]
    # prefetched (the 100 µs fetch cut): SGEMMs 20-30 and 120-130, host ends 140: the base step is 140.
    # With graphs too (cut 120-215 more, 95 µs): SGEMMs 20-30 and 30-40, host ends 45: 45. PD103 saves 140 - 45.
    assert f.saving_us_per_step == 95.0 and f.saving_from_us_per_step == 140.0
    fix = built.model.ranks[0].replay.fix_all
    # the fix-all: 240 -> 45 = PD101's 100 + PD103's 95
    assert fix.codes == ["PD101", "PD103"]
    assert (fix.recorded_mean_step_us, fix.replayed_mean_step_us) == (240.0, 45.0)
    alone = pipeline.build([path], rule_options=config.resolve(select="PD103"))
    (g,) = [f for f in alone.model.findings if f.code == "PD103"]
    # graphs alone: the host's launches 110-210 collapse to 10 µs; the fetch stays: SGEMMs 120-130, 130-140, the
    # host ends at 240 - 95 = 145
    assert g.saving_us_per_step == 95.0 and g.saving_from_us_per_step == 240.0
    assert "DataLoader" not in g.message
    fix = alone.model.ranks[0].replay.fix_all
    assert fix.codes == ["PD103"] and (fix.recorded_mean_step_us, fix.replayed_mean_step_us) == (240.0, 145.0)


def test_device_work_gone_is_the_removed_copies_time_from_the_raw_json() -> None:
    """GPUPuzzlers first_sum: 4,096 one-element D2H copies (11,519 µs in the raw JSON, the first 2 µs, 16,384 B in
    all); done as one copy, the first takes max(2 µs, 16,384 B ÷ 12 GB/s = 1.4 µs) and the rest go: 11,517 µs of
    device work gone, stated as such (it read "from copies overlapping other device work" on a trace with no
    kernels)."""
    import gzip
    import json
    import re

    from conftest import shared_trace

    path = shared_trace("gpupuzzlers__d2h_sync_first_sum.json.gz")
    with gzip.open(path) as fh:
        events = json.load(fh)["traceEvents"]
    copies = sorted(
        (e for e in events if e.get("ph") == "X" and e.get("cat") == "gpu_memcpy" and "DtoH" in e["name"]),
        key=lambda e: e["ts"],
    )
    nbytes = sum(e["args"]["bytes"] for e in copies)
    gone_us = sum(e["dur"] for e in copies) - max(copies[0]["dur"], nbytes / 12.0e9 * 1e6)
    report = pipeline.build([str(path)]).report
    (f,) = [f for f in report["findings"] if f["code"] == "PD401"]
    m = re.search(r"([\d.]+) ms of device work gone", f["message"])
    assert m is not None and float(m[1]) == round(gone_us / 1000, 2) == 11.52
    assert "overlapping other device work" not in f["message"]
