"""The other ranks unchanged (perfdoctor/crossrank/bounds.py, jobs/rounds.py): each collective on the replayed rank
ends no earlier than the latest peer's arrival plus the transfer. By hand on TraceBuilder ranks (µs), and on real traces
against values read from the raw JSON with independent code."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest
from analysed import rank_analysis
from conftest import SHARED_TRACES
from tracebuilder import TraceBuilder

from perfdoctor import pipeline
from perfdoctor.checks import config
from perfdoctor.crossrank.bounds import moving_text

NCCL = "ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)"
GEMM = "ampere_sgemm_128x64_nn"
DL = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
SHARED = SHARED_TRACES


def _ranks(tmp_path: Path) -> Path:
    """Two ranks of one step; their send/recv ends at 800 on both devices.

    rank 0: DataLoader fetch 0-300; the send/recv, launched at 310, starts at 320 and waits for rank 1 until 800
    (480 µs); the host's step ends at 500.
    rank 1: fetch 0-200; GEMM launched at 205 runs 210-770; the send/recv, launched at 206, runs after it on the
    same stream, 770-800 (the transfer, 30 µs: the last to arrive); the host's step ends at 790.
    """
    d = tmp_path / "job"
    d.mkdir()
    for rank in (0, 1):
        tb = TraceBuilder(rank=rank, world_size=2)
        if rank == 0:
            tb.step(1, 0, 500)
            tb.annotation(DL, 0, 300)
            tb.launch(NCCL, launch_ts=310, start=320, dur=480)
        else:
            tb.step(1, 0, 790)
            tb.annotation(DL, 0, 200)
            tb.launch(GEMM, launch_ts=205, start=210, dur=560)
            tb.launch(NCCL, launch_ts=206, start=770, dur=30)
        tb.write(d / f"rank{rank}.json")
    return d


def _pd101_wait(built: pipeline.BuiltReport, rank: int) -> float:
    return float(built.checks.metrics["PD101"][str(rank)]["dataloader_wait_us"])


def test_a_fetch_before_a_late_peers_collective_saves_nothing(tmp_path: Path) -> None:
    built = pipeline.build([str(_ranks(tmp_path))], rule_options=config.resolve(select="PD101"))
    # rank 0 prefetched: the send/recv launches at 10 and starts at 20, but rank 1 still arrives at 770 (+ the
    # 30 µs transfer): it ends at 800 as recorded, and so does the step (800): saves 0, where the replay without
    # the bound ended it at 20 + 480 = 500 (300 µs "saved")
    assert _pd101_wait(built, 0) == 0.0
    # rank 1 arrived last: prefetched, its GEMM runs 10-570 and its send/recv 570-600, rank 0 having arrived at
    # 320 (+ 30 = 350 < 600): the step ends at 600 (host 590): saves the whole 200 µs fetch
    assert _pd101_wait(built, 1) == 200.0


def test_a_single_rank_trace_keeps_its_recorded_collective_ends(tmp_path: Path) -> None:
    d = _ranks(tmp_path)
    built = pipeline.build([str(d / "rank1.json")], rule_options=config.resolve(select="PD101"))
    # without the peers' traces, rank 1's send/recv is taken to end no earlier than recorded (800): the fetch
    # moves the GEMM to 10-570 and the send/recv's start to 570, but not its end: the step stays 800, saves 0
    assert _pd101_wait(built, 1) == 0.0
    method = built.checks.metrics["PD101"]["1"]
    assert method["dataloader_host_us"] == 200.0


def test_no_collective_after_the_fetch_saves_its_full_time(tmp_path: Path) -> None:
    tb = TraceBuilder(rank=0, world_size=2)
    tb.step(1, 0, 1000)
    tb.launch(NCCL, launch_ts=0, start=10, dur=100)  # the collective comes first: 10-110
    tb.annotation(DL, 200, 400)
    tb.launch(GEMM, launch_ts=610, start=620, dur=300)  # [620, 920)
    p = tb.write(tmp_path / "t.json")
    built = pipeline.build([str(p)], rule_options=config.resolve(select="PD101"))
    # prefetched: the GEMM launches at 210 and runs 220-520; the host step ends at 600: 1000 -> 600, the 400 µs
    # fetch (the collective before it ends at 110 either way)
    assert _pd101_wait(built, 0) == 400.0


def _events(path: Path) -> list[dict]:
    with gzip.open(path, "rt") as fh:
        return [e for e in json.load(fh)["traceEvents"] if e.get("ph") == "X"]


@pytest.mark.skipif(not (SHARED / "param__dlrm_8ranks").is_dir(), reason="needs ../shared/traces/param__dlrm_8ranks")
def test_dlrm_rank5_dataloader_saves_nothing_with_its_peers_unchanged() -> None:
    files = sorted((SHARED / "param__dlrm_8ranks").glob("worker*.json.gz"))
    # raw JSON: every rank's first NCCL kernel (SendRecv #0); its copies end together, so one clock offset per rank
    firsts = []
    for f in files:
        ev = _events(f)
        k = min((e for e in ev if e.get("cat") == "kernel" and "nccl" in e["name"].lower()), key=lambda e: e["ts"])
        fetch = [e for e in ev if "DataLoader" in e["name"] and "__next__" in e["name"]]
        firsts.append((float(k["ts"]), float(k["ts"] + k["dur"]), float(k["dur"]), fetch))
    start = np.array([f[0] for f in firsts])
    end = np.array([f[1] for f in firsts])
    transfer = min(f[2] for f in firsts)
    arrival = start - (end - end[0])  # rank 0's clock
    peers5 = np.delete(arrival, 5).max() + (end[5] - end[0]) + transfer  # rank 5's clock
    fetch5 = firsts[5][3]
    assert fetch5 and max(e["ts"] + e["dur"] for e in fetch5) < start[5]  # the fetch is before SendRecv #0
    # the latest peer (rank 7) arrives ~4.7 ms after rank 5: the send/recv cannot end before its recorded end
    assert peers5 >= end[5] - 5.0 and arrival[7] - arrival[5] > 4000
    built = pipeline.build([str(f) for f in files], rule_options=config.resolve(select="PD101"))
    # so nothing after the fetch moves: the 1,081 µs fetch saves ~0 (it claimed all of it before)
    assert _pd101_wait(built, 5) < 5.0


NCCL_DATA = Path(__file__).resolve().parent / "data" / "hta__nccl_parser_config__nccl_data.json.gz"


def test_hta_nccl_cuda_graphs_move_the_peers_alike_and_keep_the_device_work() -> None:
    """A100 DDP rank (HTA nccl_data): CUDA graphs are a change every rank gets, so the collectives keep their
    recorded durations (transfer + the recorded wait) and move with the rank; the step cannot go below the compute
    stream's own work. Expected values from the raw JSON."""
    from perfdoctor.replay.transforms.host import cuda_graphs

    ev = _events(NCCL_DATA)
    steps = sorted((e["ts"], e["ts"] + e["dur"]) for e in ev if e["name"].startswith("ProfilerStep#"))
    kern = [e for e in ev if e.get("cat") == "kernel"]
    comm = [e for e in kern if "nccl" in e["name"].lower()]
    compute = [e for e in kern if "nccl" not in e["name"].lower()]
    assert {e["args"]["stream"] for e in compute} == {7}  # one compute stream: its kernels run one after another
    per_step = [sum(e["dur"] for e in compute if a <= e["ts"] < b) for a, b in steps]  # 39.39, 39.30, 39.62 ms

    def key(e: dict) -> tuple:
        return (e["name"], e["args"].get("In msg nelems"), e["args"].get("dtype"))

    shortest: dict[tuple, float] = {}
    for e in comm:
        shortest[key(e)] = min(shortest.get(key(e), np.inf), e["dur"])
    inside = [e for e in comm if any(a <= e["ts"] < b for a, b in steps)]
    total_ms = sum(e["dur"] for e in inside) / len(steps) / 1000  # 15.63 ms per step
    transfer_ms = sum(shortest[key(e)] for e in inside) / len(steps) / 1000  # 11.20 ms

    a = rank_analysis(NCCL_DATA)
    r = a.ranks[0]
    assert r.replay is not None
    whatif = cuda_graphs(r.replay, r.tables)
    assert whatif.scenario.peers_move
    replayed = r.replay.step_times(whatif.scenario)
    # the compute stream's kernels keep their time and order: no step is shorter than them
    assert all(float(x) >= w for x, w in zip(replayed, per_step))
    # 222.4 ms recorded; ~42 ms replayed (the reviewer's replay with the peers moving: 42.4/41.8/42.1 ms); under the
    # compute stream's work plus every collective of the step (the collectives overlap compute once the host stops
    # setting the pace)
    comm_step = [sum(e["dur"] for e in inside if a <= e["ts"] < b) for a, b in steps]
    assert all(float(x) <= w + c for x, w, c in zip(replayed, per_step, comm_step))
    text = moving_text(r.replay.peers)
    assert f"{total_ms:.2f} ms per step: {transfer_ms:.2f} ms of transfer" in text
    assert f"{total_ms - transfer_ms:.2f} ms of waiting" in text


def _mixed(tmp_path: Path) -> tuple:
    """One rank of two: the host step 0-500, a send/recv launched at 310 that starts at 320 and waits until 800."""
    tb = TraceBuilder(rank=0, world_size=2)
    tb.step(1, 0, 500)
    tb.launch(NCCL, launch_ts=310, start=320, dur=480)
    a = rank_analysis(tb.write(tmp_path / "t.json"))
    return a.ranks[0].replay


def test_peers_get_the_program_wide_part_of_a_combination(tmp_path: Path) -> None:
    from perfdoctor.replay.simulate import Scenario
    from perfdoctor.replay.transforms import WhatIf, combine

    rr = _mixed(tmp_path)
    assert rr is not None and float(rr.recorded_step_us[0]) == 800.0
    g = rr.graph
    alike = WhatIf(
        "alike", Scenario("alike", host_cut={100: (np.array([100.0]), np.array([200.0]))}, peers_move=True), "", ""
    )
    own = WhatIf("own", Scenario("own", host_cut={100: (np.array([0.0]), np.array([100.0]))}), "", "")
    # every rank cuts 100 µs before the launch: the peers arrive 100 µs earlier too, the send/recv keeps its 480 µs
    # (220-700): the step ends at 700
    assert float(rr.step_times(alike.scenario)[0]) == 700.0
    # this rank alone cuts 100 µs: the peers arrive as recorded, the send/recv still ends at 800
    assert float(rr.step_times(own.scenario)[0]) == 800.0
    # both: launched at 110, started at 120, the peers (with the program-wide cut only) let it end at 800 - 100 = 700
    both = combine("both", [alike, own], g.n_act, g.n_blk, g.act_dur_us)
    assert not both.scenario.peers_move and both.scenario.peers_with is not None
    assert float(rr.step_times(both.scenario)[0]) == 700.0
