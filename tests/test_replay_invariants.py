"""Every what-if on every shared trace keeps the device's physics and the recorded stream waits (issue 10, F4).

For each rank file (``../shared/traces``, else ``tests/data``; per-rank files of job directories too), the rules
run, and every what-if they replayed, plus all of them together, is checked:

1. **a stream runs one activity at a time**: the replayed mean step is at least the busiest stream's total
   duration per step, with the what-if's own durations (so the device time the what-if shortens is allowed for),
   over the activities launched inside the analysed steps' host windows;
2. **recorded stream waits hold**: for each ``cudaStreamWaitEvent``/``hipStreamWaitEvent`` call, read here from the
   raw JSON with independent code, the first activity launched after it on the waiting stream (Kineto's
   ``Stream Wait Event`` record names that stream; else the next launch of the waiting thread does) starts no
   earlier than the end of the last activity launched before the call on each other stream of the device (the
   event's stream is not recorded: every stream is assumed, except one whose activity ran past the waiting one's
   recorded start, which the recording itself shows was not waited for).

The device's union busy time is no bound here: a what-if may legitimately run communication alongside compute
that the recording serialised (DDP's all-reduce next to the backward that follows it).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest
from conftest import real_rank_files

from perfdoctor.analysis.rank import Analysis
from perfdoctor.checks import context as cx
from perfdoctor.checks import engine
from perfdoctor.checks.catalogue import load_catalogue
from perfdoctor.jobs.rank_stage import analyze_tables
from perfdoctor.replay.simulate import replay
from perfdoctor.replay.transforms import combine
from perfdoctor.replay.windows import replayed_windows
from perfdoctor.trace import load_trace

DEVICE_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset"}


FILES = real_rank_files()


def _raw_waits(path: Path) -> list[tuple[tuple[int, int, float], list[tuple[int, int, float]]]]:
    """(destination, [sources]) of every recorded stream wait, activities named by (device, stream, start µs)."""
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt") as fh:  # type: ignore[operator]
        doc = json.load(fh)
    raw = doc.get("traceEvents", []) if isinstance(doc, dict) else doc  # old exports: a bare event list
    events = [e for e in raw if isinstance(e, dict)]
    rt = {}
    waits = []
    wait_stream = {}
    for e in events:
        a = e.get("args") or {}
        if e.get("cat") in ("cuda_runtime", "cuda_driver", "Runtime") and "correlation" in a:
            rt[a["correlation"]] = (float(e["ts"]), e.get("tid"))
            if str(e.get("name", "")).endswith("StreamWaitEvent"):
                waits.append((float(e["ts"]), e.get("tid"), a["correlation"]))
        if e.get("cat") == "cuda_sync" and e.get("name") == "Stream Wait Event":
            wait_stream[a.get("correlation")] = (int(a.get("device", 0)), int(a.get("stream", -1)))
    acts = []  # (device, stream, start, end, launch ts, launch tid)
    for e in events:
        a = e.get("args") or {}
        if e.get("cat") in DEVICE_CATS and e.get("ph") == "X":
            lt, tid = rt.get(a.get("correlation"), (float(e["ts"]), None))
            acts.append(
                (
                    int(a.get("device", 0)),
                    int(a.get("stream", -1)),
                    float(e["ts"]),
                    float(e["ts"]) + float(e.get("dur", 0)),
                    lt,
                    tid,
                )
            )
    out = []
    for tw, tid, corr in waits:
        target = wait_stream.get(corr)
        if target is None:
            mine = [x for x in acts if x[5] == tid and x[4] > tw]
            if not mine:
                continue
            nxt = min(mine, key=lambda x: x[4])
            target = (nxt[0], nxt[1])
        later = [x for x in acts if (x[0], x[1]) == target and x[4] > tw]
        if not later:
            continue
        dst = min(later, key=lambda x: (x[4], x[2]))
        srcs = []
        for key in {(x[0], x[1]) for x in acts if x[0] == target[0] and (x[0], x[1]) != target}:
            before = [x for x in acts if (x[0], x[1]) == key and x[4] < tw]
            if before:
                src = max(before, key=lambda x: (x[4], x[2]))
                if src[3] <= dst[2] + 1.0:
                    srcs.append((src[0], src[1], src[2]))
        out.append(((dst[0], dst[1], dst[2]), srcs))
    return out


@pytest.mark.skipif(not FILES, reason="no real traces (../shared/traces or tests/data)")
@pytest.mark.parametrize("path", FILES, ids=[f"{p.parent.name}/{p.name}" for p in FILES])
def test_every_what_if_keeps_streams_serial_and_recorded_waits(path: Path) -> None:
    tables = load_trace(str(path))
    ra = analyze_tables(tables)
    rr = ra.replay
    if rr is None or rr.recorded_step_us.size == 0 or rr.graph.n_act == 0:
        pytest.skip("no replay with steps and device activities")
    an = Analysis(ranks=[ra], inputs=[])
    cat = load_catalogue([])
    engine.rank_outcomes(an, cx.RankContext(an, ra), cat, engine.check_order(cat, sorted(cat.rules)))
    g = rr.graph
    whatifs = dict(rr.whatifs)
    if whatifs:
        whatifs["fix-all"] = combine("fix-all", list(rr.whatifs.values()), g.n_act, g.n_blk, g.act_dur_us)
    # activities launched inside the analysed steps' host windows (as replay/windows.py assigns them)
    w = rr.windows
    k = np.searchsorted(w.host_start_us, g.act_launch_ts_us, side="right") - 1
    inside = (k >= 0) & (g.act_launch >= 0) & (g.act_launch_ts_us < w.host_end_us[np.maximum(k, 0)])
    key = {
        (int(d), int(s), float(t)): i
        for i, (d, s, t) in enumerate(zip(g.act_device.tolist(), g.act_stream.tolist(), g.act_ts_us.tolist()))
    }
    waits = [(key[d], [key[s] for s in ss if s in key]) for d, ss in _raw_waits(path) if d in key]
    for name, wi in whatifs.items():
        sc = wi.scenario
        dur = g.act_dur_us if sc.act_dur_us is None else sc.act_dur_us
        per_stream = {}
        for d, s in {(int(a), int(b)) for a, b in zip(g.act_device[inside], g.act_stream[inside])}:
            m = inside & (g.act_device == d) & (g.act_stream == s)
            per_stream[(d, s)] = float(dur[m].sum())
        busiest = max(per_stream.values(), default=0.0) / rr.recorded_step_us.size
        res = replay(g, sc)
        start, end = replayed_windows(res, w)
        mean = float((end - start).mean())
        assert mean >= busiest - 1.0, f"{name}: replayed step {mean:.1f} µs < busiest stream {busiest:.1f} µs"
        dropped = (
            set()
            if sc.xdep_removed is None
            else {(int(s), int(d)) for s, d, x in zip(g.xdep_src, g.xdep_dst, sc.xdep_removed) if x}
        )
        for dst, srcs in waits:
            for src in srcs:
                if (src, dst) in dropped:  # overlap-communication drops compute's waits on collectives by design
                    continue
                assert res.act_start_us[dst] >= res.act_end_us[src] - 1e-6, (
                    f"{name}: activity at {g.act_ts_us[dst]:.1f} starts before the one at {g.act_ts_us[src]:.1f} "
                    "it waits for (a recorded stream wait) ends"
                )
