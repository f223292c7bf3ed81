"""Report numbers on real traces against the raw JSON, each worked out here with plain json/gzip + numpy.

The computations below read the trace files directly and share no code with perfdoctor: step windows from the
ProfilerStep annotations and the kernels they launch (correlation ids), device busy time as a union of intervals,
and each finding's quantity from its definition in docs/report-schema.md and the rule's TOML.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import shared_trace

from perfdoctor import pipeline

DEVICE_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset"}
RUNTIME_CATS = {"cuda_runtime", "cuda_driver", "Runtime"}
Spans = list[tuple[float, float]]


def _events(path: Path) -> list[dict[str, Any]]:
    opener: Any = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt") as f:
        data = json.load(f)
    events = data["traceEvents"] if isinstance(data, dict) else data
    return [e for e in events if isinstance(e, dict) and e.get("ph") == "X"]


def _span(e: dict[str, Any]) -> tuple[float, float]:
    return float(e["ts"]), float(e["ts"]) + float(e["dur"])


def _union(spans: Spans) -> Spans:
    out: list[list[float]] = []
    for s, e in sorted(spans):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def _clip(spans: Spans, a: float, b: float) -> Spans:
    return [(max(s, a), min(e, b)) for s, e in spans if min(e, b) > max(s, a)]


def _gaps(busy: Spans, a: float, b: float) -> Spans:
    """[a, b) less the union of ``busy``."""
    out, cur = [], a
    for s, e in _union(_clip(busy, a, b)):
        if s > cur:
            out.append((cur, s))
        cur = max(cur, e)
    return out + ([(cur, b)] if cur < b else [])


def _overlap(x: Spans, y: Spans) -> float:
    x, y = _union(x), _union(y)
    i = j = 0
    total = 0.0
    while i < len(x) and j < len(y):
        total += max(0.0, min(x[i][1], y[j][1]) - max(x[i][0], y[j][0]))
        if x[i][1] < y[j][1]:
            i += 1
        else:
            j += 1
    return total


def _step_windows(events: list[dict[str, Any]]) -> list[tuple[int, float, float]]:
    """(N, start, end) per ProfilerStep#N: end = the later of the host annotation's end and the end of the last
    device activity launched inside it, never before the previous end (kineto tb_plugin's definition). The
    traces used here have no device work inherited from before step 1."""
    launch = {
        e["args"]["correlation"]: float(e["ts"])
        for e in events
        if e.get("cat") in RUNTIME_CATS and "correlation" in (e.get("args") or {})
    }
    device = [e for e in events if e.get("cat") in DEVICE_CATS]
    host = sorted(
        (int(e["name"].split("#")[1]), *_span(e))
        for e in events
        if e.get("name", "").startswith("ProfilerStep#") and e.get("cat") in ("user_annotation", "cpu_op", "Operator")
    )
    out: list[tuple[int, float, float]] = []
    for n, hs, he in host:
        end = he
        for e in device:
            t = launch.get((e.get("args") or {}).get("correlation"))
            if t is not None and hs <= t < he:
                end = max(end, _span(e)[1])
        start = hs if not out else max(out[-1][2], hs)
        out.append((n, start, max(end, start)))
    return out


def _report(paths: list[Path]) -> dict[str, Any]:
    """The report JSON document's dicts, as `perfdoctor report PATHS --format json` writes it."""
    return pipeline.build([str(p) for p in paths]).report


def test_pd101_stall_is_device_idle_while_the_host_is_inside_dataloader_next() -> None:
    """ResNet50 on a V100, num_workers=0: per step, the device-idle time (step window less the union of kernels,
    memcpys and memsets) that falls inside the host's `enumerate(DataLoader)#..__next__` op, and the host time
    in that op; both averaged over the 6 ProfilerSteps. Raw: 69.317, 57.669, 61.257, 56.453, 62.690, 48.185 ms
    of stall (mean 59.262 ms) out of a 177.592 ms mean step; tb-profiler's avg step is 177.6 ms."""
    path = shared_trace("kineto__resnet50_num_workers_0__worker0.pt.trace.json.gz")
    events = _events(path)
    windows = _step_windows(events)
    device = [_span(e) for e in events if e.get("cat") in DEVICE_CATS]
    loader = [_span(e) for e in events if "DataLoader" in e.get("name", "") and "__next__" in e.get("name", "")]
    stall = [_overlap(_gaps(device, a, b), _clip(loader, a, b)) for _, a, b in windows]
    inside = [sum(e - s for s, e in _union(_clip(loader, a, b))) for _, a, b in windows]
    mean_step = float(np.mean([b - a for _, a, b in windows]))
    assert len(windows) == 6 and stall[0] == 69317.0

    report = _report([path])
    assert report["denominator"]["value_us"] == pytest.approx(mean_step)
    (f,) = [f for f in report["findings"] if f["code"] == "PD101"]
    assert f["evidence"]["dataloader_idle_ms"] == pytest.approx(np.mean(stall) / 1000)
    assert f["evidence"]["dataloader_host_ms"] == pytest.approx(np.mean(inside) / 1000)
    steps = report["ranks"][0]["devices"][0]["steps"]
    assert [s["idle_causes_us"]["dataloader"] for s in steps] == stall
    assert (
        f"{np.mean(stall) / 1000:.1f} ms per step ({100 * np.mean(stall) / mean_step:.0f}% of the step)"
        in (f["headline"])
    )


def test_mi300x_allocator_calls_per_window_between_optimizer_steps() -> None:
    """ROCm MI300X DDP ResNet18: no ProfilerStep, five `Optimizer.step#SGD.step` annotations, so four steps
        between them. Counted in the raw trace, each of the four holds 292 hipMalloc + 272 hipFree = 564 calls (and
        292 + 272 more come before the first). PD501 leaves the first step out (it fills the cache): the calls of
        the three others are 3 × 564 = 1,692 (876 hipMalloc, 816 hipFree): 564 per steady-state step, and its host
    time is their union ÷ 3 (1,045.6 ms per steady-state step)."""
    path = shared_trace("tracelens__mi300__ddp_resnet18.json.gz")
    events = _events(path)
    bounds = sorted(
        float(e["ts"])
        for e in events
        if e.get("name") == "Optimizer.step#SGD.step" and e.get("cat") == "user_annotation"
    )
    calls = [e for e in events if e.get("name") in ("hipMalloc", "hipFree")]
    per_window = [[e for e in calls if bounds[i] <= float(e["ts"]) < bounds[i + 1]] for i in range(len(bounds) - 1)]
    assert [len(w) for w in per_window] == [564] * 4
    steady = [e for w in per_window[1:] for e in w]
    host_us = sum(e - s for s, e in _union([_span(e) for e in steady])) / len(per_window[1:])

    report = _report([path])
    (f,) = [f for f in report["findings"] if f["code"] == "PD501"]
    ev = f["evidence"]
    assert ev["calls_in_first_steps"] == len(per_window[0])
    assert {x["name"]: x["count"] for x in ev["events"]} == {
        "hipMalloc": sum(e["name"] == "hipMalloc" for e in steady),
        "hipFree": sum(e["name"] == "hipFree" for e in steady),
    }
    assert ev["allocator_host_ms"] == pytest.approx(host_us / 1000, rel=1e-6)
    # per steady-state step: the count of a window, not 1,692 / 4 = 423
    assert ev["allocator_calls_per_step"] == len(steady) / len(per_window[1:]) == 564
    assert f"{len(steady) / 3:.1f} hipMalloc/hipFree calls per steady-state step" in f["headline"]


def test_dlrm_collective_wait_is_each_kernel_less_the_shortest_rank() -> None:
    """DLRM, 8 V100 ranks, one ProfilerStep (#10): each rank's 8 NCCL kernels in the step, matched by order
    (4 SendRecv, AllReduce, SendRecv, 2 AllReduce on every rank). A rank's wait in a collective is its kernel's
    duration less the shortest rank's (the transfer); summed per rank from the raw traces: 5,581, 11,119, 3,275,
    9,557, 6,370, 6,034, 3,341 and 1,529 µs. The last to arrive (latest kernel start): rank 7 in 5 collectives,
    rank 5 in 2, rank 4 in 1."""
    folder = shared_trace("param__dlrm_8ranks")
    paths = sorted(folder.glob("*.json*"))
    durations, starts = [], []
    for p in paths:
        events = _events(p)
        ((_, a, b),) = _step_windows(events)
        nccl = sorted(
            (e for e in events if e.get("cat") == "kernel" and "nccl" in e["name"].lower() and a <= float(e["ts"]) < b),
            key=lambda e: float(e["ts"]),
        )
        durations.append([float(e["dur"]) for e in nccl])
        starts.append([float(e["ts"]) for e in nccl])
    dur = np.array(durations)
    wait = (dur - dur.min(axis=0)).sum(axis=1)
    last = np.bincount(np.argmax(np.array(starts), axis=0), minlength=len(paths))
    assert dur.shape == (8, 8) and wait.tolist()[:2] == [5581.0, 11119.0]

    report = _report(paths)
    cw = report["job"]["collective_wait"]
    assert cw["matched"] and cw["n_collectives"] == 8
    assert cw["wait_us_per_step"] == wait.tolist()
    assert cw["last_arrivals"] == last.tolist()
    # the matrix's columns follow worst_collectives (largest wait on any rank first); its index is the time order
    per_collective = dur - dur.min(axis=0)
    worst = sorted(range(dur.shape[1]), key=lambda k: -per_collective[:, k].max())
    assert [c["index"] for c in cw["worst_collectives"]] == worst
    assert cw["wait_matrix_us"] == per_collective[:, worst].tolist()
    (f,) = [f for f in report["findings"] if f["code"] == "PD304"]
    assert f["evidence"]["all_wait_ms"] == pytest.approx(wait.max() / 1000)
    assert f["evidence"]["rank"] == int(np.argmax(wait))


@pytest.mark.parametrize(
    ("name", "waits"),
    [("gpupuzzlers__d2h_sync_first_sum.json.gz", 4097), ("gpupuzzlers__blocking_streams.json.gz", 102)],
)
def test_pd401_counts_each_host_wait_once(name: str, waits: int) -> None:
    """GPUPuzzlers, no step markers (one window). A pageable D2H cudaMemcpyAsync returns once its copy is done; the
    cudaStreamSynchronize right after it (the previous runtime call, nothing queued between) returns in 1-8 µs
    having waited for nothing. The waits, from the raw JSON: the pageable D2H copy calls, plus the synchronize
    calls less those (stream syncs right after such a copy or another sync, under 10 µs) and less the syncs right
    after a pageable H2D copy (that copy's own: PD102's). first_sum: 4,096 copies + 1 cudaDeviceSynchronize
    (8,193 counted each element twice); blocking_streams: 100 D2H copies + the cudaDeviceSynchronize + one 29 µs
    stream sync that did wait (201 before)."""
    events = _events(shared_trace(name))
    kind = {e["args"]["correlation"]: e["name"] for e in events if e.get("cat") == "gpu_memcpy"}
    runtime = sorted((e for e in events if e.get("cat") in RUNTIME_CATS), key=lambda e: float(e["ts"]))
    n = 0
    for prev, e in zip([None, *runtime], runtime):
        prev_kind = kind.get((prev or {"args": {}})["args"].get("correlation"), "")
        if kind.get(e["args"].get("correlation"), "") == "Memcpy DtoH (Device -> Pageable)":
            n += 1
        elif e["name"].endswith("Synchronize"):
            returned_done = prev_kind == "Memcpy DtoH (Device -> Pageable)" or str((prev or {}).get("name")).endswith(
                "Synchronize"
            )
            waitless = e["name"] == "cudaStreamSynchronize" and returned_done and float(e["dur"]) < 10
            n += not waitless and prev_kind != "Memcpy HtoD (Pageable -> Device)"
    assert n == waits

    (f,) = [f for f in _report([shared_trace(name)])["findings"] if f["code"] == "PD401"]
    assert f["evidence"]["syncs_per_step"] == waits
    assert f["headline"].startswith(f"{waits:,} host waits on the device per step")
