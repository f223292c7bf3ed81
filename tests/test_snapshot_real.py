"""The reader on real snapshots (``../shared/traces/wedsonlin__*_memory_snapshot.pickle``, an A-series GPU running a
GPT-2-medium-size model at context 512) agrees with PyTorch's own ``torch.cuda._memory_viz``.

Figures ``_memory_viz`` prints are compared with its own functions (``segsum``: reserved, allocated, segments at the
snapshot; ``trace``: cudaMalloc calls and OOMs; ``segments``: every byte of every segment). The peak over the
history is drawn by the browser viewer (``MemoryViz.js``, ``process_alloc_data``), which has no Python
counterpart: :func:`_viewer_peak` re-derives it here from the raw dict, independently of perfdoctor's code.
"""

from __future__ import annotations

import functools
import pickle
import re
from typing import Any

import pytest
from conftest import shared_trace

from perfdoctor.snapshot.analysis import analyse
from perfdoctor.snapshot.reader import read_snapshot
from perfdoctor.snapshot.report import DeviceMemory

memory_viz = pytest.importorskip("torch.cuda._memory_viz")

NAMES = [
    "wedsonlin__medium_512_inference_memory_snapshot.pickle",
    "wedsonlin__medium_512_training_memory_snapshot.pickle",
]


@functools.cache
def _device0(path: str) -> DeviceMemory:
    (d,) = analyse(read_snapshot(path)).devices
    return d


def _raw(path: str) -> dict[str, Any]:
    with open(path, "rb") as fh:
        data: dict[str, Any] = pickle.load(fh)  # a known file from the shared set: the plain loader is the reference
    return data


def _viewer_peak(data: dict[str, Any], device: int, segments: bool) -> int:
    """Max of the "Active Memory Timeline" (``segments`` False) or "Active Cached Memory Timeline" (True) as
    MemoryViz.js computes it: allocations live before the history are the unmatched frees plus the snapshot's
    live blocks (segments) not allocated in it; the max is taken after each action."""
    events = list(data["device_traces"][device])
    alloc, frees = ("segment_alloc", ("segment_free",)) if segments else ("alloc", ("free_completed", "free"))
    sizes: list[int] = []
    initial: list[int] = []
    actions: list[int] = []
    by_addr: dict[int, int] = {}
    for e in events:
        if e["action"] == alloc:
            sizes.append(e["size"])
            by_addr[e["addr"]] = len(sizes) - 1
            actions.append(len(sizes) - 1)
        elif e["action"] in frees:
            if e["addr"] in by_addr:
                actions.append(by_addr.pop(e["addr"]))
            else:
                sizes.append(e["size"])
                initial.append(len(sizes) - 1)
                actions.append(len(sizes) - 1)
    for seg in data["segments"]:
        if seg["device"] != device:
            continue
        if segments:
            if seg["address"] not in by_addr:
                sizes.append(seg["total_size"])
                initial.append(len(sizes) - 1)
            continue
        addr = seg["address"]
        for b in seg["blocks"]:
            if b["state"] == "active_allocated" and addr not in by_addr:
                sizes.append(b["requested_size"])
                initial.append(len(sizes) - 1)
            addr += b["size"]
    if not actions and initial:
        actions.append(initial.pop())
    live = set(initial)
    total = sum(sizes[i] for i in initial)
    peak = 0
    for i in actions:
        if i in live:
            live.remove(i)
            total -= sizes[i]
        else:
            live.add(i)
            total += sizes[i]
        peak = max(peak, total)
    return peak


def _segsum_line(text: str, label: str) -> str:
    m = re.search(rf"^{label}: (\S+)", text, re.M)
    assert m, label
    return m.group(1)


@pytest.mark.parametrize("name", NAMES)
def test_peaks_equal_the_memory_viewer(name: str) -> None:
    path = str(shared_trace(name))
    data = _raw(path)
    d = _device0(path)
    assert d.peak_allocated_bytes == _viewer_peak(data, 0, segments=False)
    assert d.peak_reserved_bytes == _viewer_peak(data, 0, segments=True)


@pytest.mark.parametrize("name", NAMES)
def test_snapshot_state_equals_memory_viz(name: str) -> None:
    path = str(shared_trace(name))
    data = _raw(path)
    d = _device0(path)
    summary = memory_viz.segsum(data)
    fmt = memory_viz._format_size
    assert _segsum_line(summary, "segments") == str(d.segments)
    assert _segsum_line(summary, "total_reserved") == fmt(d.reserved_at_snapshot_bytes)
    assert _segsum_line(summary, "total_allocated") == fmt(d.allocated_at_snapshot_bytes)
    # exact bytes, from the raw dict (segsum prints one decimal of GiB)
    assert d.reserved_at_snapshot_bytes == sum(s["total_size"] for s in data["segments"])
    live = [b for s in data["segments"] for b in s["blocks"] if b["state"] == "active_allocated"]
    assert d.allocated_at_snapshot_bytes == sum(b["requested_size"] for b in live)
    # _memory_viz.segments' flame graph lines account for every byte of every segment (live, gaps, inactive)
    lines = memory_viz.segments(data, format_flamegraph=lambda text: text).splitlines()
    assert sum(int(line.rsplit(" ", 1)[1]) for line in lines) == d.reserved_at_snapshot_bytes
    assert d.allocated_at_snapshot_bytes + d.rounding_bytes + d.cached_free_bytes + d.awaiting_free_bytes == (
        d.reserved_at_snapshot_bytes
    )


@pytest.mark.parametrize("name", NAMES)
def test_allocator_calls_and_ooms_equal_memory_viz_trace(name: str) -> None:
    path = str(shared_trace(name))
    text = memory_viz.trace(_raw(path))
    d = _device0(path)
    assert d.cuda_malloc_calls == text.count("= cudaMalloc(")
    assert d.cuda_free_calls == text.count("cudaFree(")
    assert len(d.ooms) == text.count("raise OutOfMemoryError")


def test_real_figures() -> None:
    """The numbers the two files give (equal to the viewer's by the tests above), as a reader sees them."""
    inference = _device0(str(shared_trace(NAMES[0])))
    training = _device0(str(shared_trace(NAMES[1])))
    assert (inference.peak_allocated_bytes, inference.peak_reserved_bytes) == (1_949_343_744, 1_981_808_640)
    assert (training.peak_allocated_bytes, training.peak_reserved_bytes) == (12_426_629_128, 12_660_506_624)
    # the traces README: "about 1.85 GB reserved" (inference), "about 11.8 GiB reserved" (training)
    assert round(training.reserved_at_snapshot_bytes / 2**30, 1) == 11.8
    # AdamW's two state tensors per parameter, allocated in the optimizer's step (cs336_basics/optimizer.py:73, 74),
    # are live at the training peak with equal bytes
    sites = {c.site.rsplit("/", 2)[-1]: c.bytes for c in training.call_sites}
    assert sites["optimizer.py:73:step"] == sites["optimizer.py:74:step"] > 1e9


def test_real_pair_diff_gates_on_the_peak(tmp_path, capsys) -> None:
    from perfdoctor.cli import main

    before, after = (str(shared_trace(n)) for n in NAMES)
    assert main(["diff", before, after, "--fail-on-regression", "537"]) == 1  # (12,426,629,128 / 1,949,343,744 - 1)
    assert "+537.5%" in capsys.readouterr().err  # = +537.47%
    assert main(["diff", before, after, "--fail-on-regression", "538"]) == 0
    assert main(["report", after, "-o", str(tmp_path / "r.html")]) == 0
    assert "12,426,629,128 B (11.57 GiB)" in (tmp_path / "r.html").read_text()
