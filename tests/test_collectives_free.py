"""A job's step with every collective free (perfdoctor/replay/transforms/collectives.py, the job section's
``collectives_free``): by hand on two-rank TraceBuilder jobs (µs), one on a device and one CPU-only (gloo), and on
the 8-rank DLRM job against each rank's step less its exposed communication read from the raw trace JSON."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import numpy as np
import pytest
from conftest import SHARED_TRACES
from rich.console import Console
from test_replay_joint import _rank
from tracebuilder import TraceBuilder

from perfdoctor import pipeline
from perfdoctor.analysis.steps.steps import find_steps
from perfdoctor.model import to_builtins
from perfdoctor.render.job_html import job_view
from perfdoctor.render.job_terminal import render_job
from perfdoctor.render.markdown import render_markdown
from perfdoctor.replay.rank import replay_rank
from perfdoctor.replay.transforms.collectives import free_collectives, free_collectives_step_us
from perfdoctor.trace import load_trace

DLRM_DIRS = [SHARED_TRACES / "param__dlrm_8ranks", Path(__file__).parent / "data" / "param__dlrm_8ranks"]
DLRM = next((d for d in DLRM_DIRS if d.is_dir()), DLRM_DIRS[0])


def test_device_ranks_by_hand(tmp_path: Path) -> None:
    """test_replay_joint's two ranks, both steps ending at 370 (host 0-200).

    rank 0: GEMM A 10-110; the all-to-all, launched at 120, starts 130 (launch latency 10) and waits for rank 1
    until 320; GEMM B (launched 125) waits for it: 320-370. Free: the all-to-all ends where it starts (130) and B
    no longer waits for it: launched 125 + the typical latency 10 = 135, after A (110): 135-185. The step ends
    with the host at 200.
    rank 1: A' 10-290; the all-to-all waits for A' (its input: kept) + the recorded 10 µs: 300, and takes 20 (the
    transfer); B' after it 320-370. Free: the all-to-all ends at 300, B' follows A' on its stream: 290-340.
    Job: 370 measured (both ranks), 340 free (rank 1): 340 / 370.
    """
    (r0, t0), (r1, t1) = _rank(tmp_path, 0), _rank(tmp_path, 1)
    assert r0.step_times(free_collectives(r0, t0).scenario).tolist() == [200.0]
    assert r1.step_times(free_collectives(r1, t1).scenario).tolist() == [340.0]
    assert free_collectives_step_us(r0, t0) == (370.0, 200.0)
    assert free_collectives_step_us(r1, t1) == (370.0, 340.0)
    built = pipeline.build([str(tmp_path)])
    report = to_builtins(built.model)
    cf = report["job"]["collectives_free"]
    assert (cf["step_us"], cf["free_step_us"], cf["free_rank"]) == (370.0, 340.0, 1)
    assert cf["ratio"] == pytest.approx(340 / 370)
    assert cf["ranks_step_us"] == [370.0, 370.0] and cf["ranks_free_step_us"] == [200.0, 340.0]
    line = "job step 0.37 ms (rank 0) → 0.34 ms (rank 1), 91.9% of the measured step"
    console = Console(width=200, record=True)
    render_job(built.model.job, console)
    assert line in console.export_text()
    assert line in render_markdown(built.model).replace("\\", "")
    assert line in str(job_view(built.model, 2)["collectives_free"])


def _gloo_rank(rank: int) -> TraceBuilder:
    """CPU-only, 2 steps of 1000 µs on the main thread; the gloo all_reduce runs on thread 200.

    rank 0: mm [0, 300), all_reduce [300, 900) holding a copy_ [350, 400) on its own thread (the collective's,
    not compute), an add [800, 850) on the main thread (compute overlapping the call): exposed 600 - 50 = 550.
    rank 1: mm [0, 500), all_reduce [500, 900): exposed 400.
    """
    tb = TraceBuilder(device_name=None)
    tb.meta["distributedInfo"] = {"backend": "gloo", "rank": rank, "world_size": 2}
    for n in range(2):
        s = 1000 * n
        tb.step(n + 1, s, 1000)
        start = 300 if rank == 0 else 500
        tb.cpu_op("aten::mm", s, start)
        tb.cpu_op("gloo:all_reduce", s + start, 900 - start, tid=200)
        if rank == 0:
            tb.cpu_op("aten::copy_", s + 350, 50, tid=200)
            tb.cpu_op("aten::add", s + 800, 50)
    return tb


def test_gloo_ranks_by_hand(tmp_path: Path) -> None:
    """Each step loses its exposed host collective time: rank 0 1000 - 550 = 450, rank 1 1000 - 400 = 600; the
    job's step goes from 1000 to 600 (rank 1): 60%."""
    for rank in (0, 1):
        _gloo_rank(rank).write(tmp_path / f"rank{rank}.json")
    t = load_trace(str(tmp_path / "rank0.json"))
    rr = replay_rank(t, find_steps(t))
    assert rr.step_times(free_collectives(rr, t).scenario).tolist() == [450.0, 450.0]
    cf = to_builtins(pipeline.build([str(tmp_path)]).model)["job"]["collectives_free"]
    assert cf["ranks_free_step_us"] == [450.0, 600.0] and cf["ranks_step_us"] == [1000.0, 1000.0]
    assert (cf["free_step_us"], cf["free_rank"], cf["ratio"]) == (600.0, 1, 0.6)


def test_a_job_without_collectives_has_no_figure(tmp_path: Path) -> None:
    for rank in (0, 1):
        tb = TraceBuilder(device_name=None)
        tb.meta["distributedInfo"] = {"backend": "gloo", "rank": rank, "world_size": 2}
        tb.step(1, 0, 1000)
        tb.cpu_op("aten::mm", 0, 900)
        tb.write(tmp_path / f"rank{rank}.json")
    assert "collectives_free" not in to_builtins(pipeline.build([str(tmp_path)]).model)["job"]


def _raw_bounds(path: Path, step_us: float) -> tuple[float, float]:
    """(step less its exposed communication, step less the host's time blocked in ``cudaStreamSynchronize`` and
    ``cudaMemcpyAsync`` calls) of one DLRM rank's step, µs, from the raw JSON: the step runs ``step_us`` from its
    ``ProfilerStep#`` annotation's start; exposed communication is the time inside NCCL kernels while no other
    kernel runs."""
    with gzip.open(path, "rt") as fh:
        events = [e for e in json.load(fh)["traceEvents"] if e.get("ph") == "X" and "dur" in e]
    lo = min(float(e["ts"]) for e in events if str(e["name"]).startswith("ProfilerStep#"))
    hi = lo + step_us
    kernels = [
        (max(float(e["ts"]), lo), min(float(e["ts"]) + float(e["dur"]), hi), "nccl" in str(e["name"]).lower())
        for e in events
        if e.get("cat") == "kernel" and float(e["ts"]) < hi and float(e["ts"]) + float(e["dur"]) > lo
    ]
    cuts = np.unique([x for s, e, _ in kernels for x in (s, e)] + [lo, hi])
    mid = (cuts[:-1] + cuts[1:]) / 2
    comm, other = np.zeros(mid.size, bool), np.zeros(mid.size, bool)
    for s, e, nccl in kernels:
        inside = (mid > s) & (mid < e)
        comm, other = (comm | inside, other) if nccl else (comm, other | inside)
    exposed = float(np.diff(cuts)[comm & ~other].sum())
    blocked = sum(
        min(float(e["ts"]) + float(e["dur"]), hi) - float(e["ts"])
        for e in events
        if e.get("cat") == "cuda_runtime"
        and e["name"] in ("cudaStreamSynchronize", "cudaMemcpyAsync")
        and lo <= float(e["ts"]) < hi
    )
    return step_us - exposed, step_us - blocked


@pytest.mark.skipif(not DLRM.is_dir(), reason="needs tests/data/param__dlrm_8ranks")
def test_dlrm_ranks_fall_to_their_host_time() -> None:
    """DLRM, 8 ranks of one step (10). With communication free every rank's step falls to its host's own time:
    the step less the time its host sat blocked in synchronize and copy calls (waiting for the collectives), plus
    the ~0.2 ms the device runs after the host's last call (196-211 µs on every rank). That is above each rank's
    step less its exposed communication (the host, not the device, is then the limit): on rank 7, the last to
    arrive, freeing its 1.58 ms of exposed communication saves nothing (12.51 ms either way). The job's step goes
    from 19.90 ms (rank 1) to 13.28 ms (rank 5): 66.7%."""
    files = sorted(DLRM.glob("worker*.json.gz"))
    report = to_builtins(pipeline.build([str(DLRM)]).model)
    job = report["job"]
    cf = job["collectives_free"]
    assert cf["step_us"] == report["denominator"]["value_us"]  # the job's step every saving is a share of
    assert job["ranks"] == list(range(8)) and [p.name[:7] for p in files] == [f"worker{r}" for r in range(8)]
    assert (cf["step_rank"], cf["free_rank"]) == (1, 5)
    assert cf["step_us"] == pytest.approx(19901.0) and cf["free_step_us"] == pytest.approx(13283.0)
    assert cf["ratio"] == pytest.approx(13283 / 19901)
    for path, step, free in zip(files, cf["ranks_step_us"], cf["ranks_free_step_us"]):
        less_exposed, host_floor = _raw_bounds(path, step)
        assert host_floor <= free <= host_floor + 250.0, path.name
        assert less_exposed <= free <= step, path.name
    assert cf["ranks_free_step_us"][7] == cf["ranks_step_us"][7] == pytest.approx(12509.0)
    assert _raw_bounds(files[7], 12509.0)[0] == pytest.approx(12509.0 - 1580.0)


def _raw_exposed_gloo_us(path: Path, lo: float, hi: float) -> float:
    """Host time of the trace's process in [lo, hi) inside gloo/c10d collectives (any thread) while no other op
    (nor ``Optimizer.step``) runs on the process, an op nested in a collective on its own thread counting as the
    collective's: from the raw JSON (µs)."""
    with gzip.open(path, "rt") as fh:
        events = [e for e in json.load(fh)["traceEvents"] if e.get("ph") == "X" and "dur" in e]
    is_coll = [bool(re.search(r"^(gloo|c10d)[:_]|^c10d::|all_?reduce", str(e["name"]))) for e in events]
    colls = [e for e, c in zip(events, is_coll) if c and e.get("cat") in ("cpu_op", "user_annotation")]
    ops = []
    for e, c in zip(events, is_coll):
        optimizer = e.get("cat") == "user_annotation" and str(e["name"]).startswith("Optimizer.step")
        if c or (e.get("cat") != "cpu_op" and not optimizer):
            continue
        s, t = float(e["ts"]), float(e["ts"]) + float(e["dur"])
        held = any(
            k["tid"] == e["tid"] and float(k["ts"]) <= s and t <= float(k["ts"]) + float(k["dur"]) for k in colls
        )
        if not held:
            ops.append((s, t))
    cuts = np.unique([lo, hi] + [float(x) for k in colls for x in (k["ts"], float(k["ts"]) + float(k["dur"]))])
    cuts = cuts[(cuts >= lo) & (cuts <= hi)]
    cuts = np.unique(np.concatenate([cuts, [x for s, t in ops for x in (s, t) if lo < x < hi]]))
    mid = (cuts[:-1] + cuts[1:]) / 2
    inside = np.zeros(mid.size, bool)
    busy = np.zeros(mid.size, bool)
    for k in colls:
        inside |= (mid > float(k["ts"])) & (mid < float(k["ts"]) + float(k["dur"]))
    for s, t in ops:
        busy |= (mid > s) & (mid < t)
    return float(np.diff(cuts)[inside & ~busy].sum())


@pytest.mark.slow
def test_real_gloo_job_loses_its_exposed_collective_time(tmp_path: Path) -> None:
    """examples/mlp.py under --ddp (2 gloo processes): each rank's profiled steps, replayed with collectives free,
    are shorter by exactly the host time spent in gloo calls with no other op running, read from the raw JSON."""
    import os
    import subprocess
    import sys

    out = tmp_path / "ddp"
    cmd = [sys.executable, "-m", "perfdoctor", "profile", str(Path(__file__).parents[1] / "examples" / "mlp.py")]
    cmd += ["--steps", "14", "--active", "4", "--out", str(out), "--no-report", "--", "--log-every", "0", "--ddp"]
    subprocess.run(cmd, check=True, capture_output=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})
    for rank in (0, 1):
        path = out / f"trace.rank{rank}.pt.trace.json.gz"
        t = load_trace(str(path))
        steps = find_steps(t)
        rr = replay_rank(t, steps)
        free = rr.step_times(free_collectives(rr, t).scenario)
        lo, hi = float(steps.start_us[0]), float(steps.end_us[-1])
        exposed = _raw_exposed_gloo_us(path, lo, hi)
        assert exposed > 0
        assert float(rr.recorded_step_us.sum() - free.sum()) == pytest.approx(exposed, abs=1.0)
    cf = to_builtins(pipeline.build([str(out)]).model)["job"]["collectives_free"]
    assert 0 < cf["ratio"] < 1
