"""Memory over the step: high-water mark, its phase and op, the contributors live at it, churn.

A hand-made trace worked out by hand, and the two real profile_memory traces checked against values computed
from their raw ``[memory]`` events by the plain loops below (json, dicts, no perfdoctor code).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import numpy as np
from tracebuilder import TraceBuilder

from perfdoctor.analysis.memory.memory_steps import innermost_ops, memory_over_steps
from perfdoctor.analysis.steps.steps import find_steps
from perfdoctor.trace import load_trace

MiB = 1 << 20
GiB = 1 << 30
FACTORIES = {"aten::empty", "aten::empty_strided", "aten::empty_like", "aten::new_empty", "aten::new_empty_strided"}
FACTORIES.add("aten::resize_")


def _over(path: Path) -> list[dict[str, Any]]:
    tables = load_trace(str(path))
    return memory_over_steps(tables, find_steps(tables))


def _two_steps(tmp_path: Path) -> Path:
    """Two steps; 1000 MiB allocated before the trace; reserved 2048 MiB throughout."""
    tb = TraceBuilder(total_memory=80 * GiB)
    tb.step(1, 0, 1000).step(2, 1000, 1000)
    r = 2048 * MiB
    # step 1: forward linear (its allocation made inside aten::empty), backward mm, optimizer add_
    tb.cpu_op("aten::linear", 100, 100).cpu_op("aten::empty", 110, 10)
    tb.memory(115, 100 * MiB, 1100 * MiB, r, addr=1)
    tb.cpu_op("autograd::engine::evaluate_function: MmBackward0", 400, 200).cpu_op("aten::mm", 410, 40)
    tb.memory(420, 300 * MiB, 1400 * MiB, r, addr=2)  # the step's peak: 1000 + 100 + 300
    tb.memory(500, -100 * MiB, 1300 * MiB, r, addr=1)
    tb.annotation("Optimizer.step#SGD.step", 700, 100).cpu_op("aten::add_", 710, 10)
    tb.memory(715, 50 * MiB, 1350 * MiB, r, addr=3)
    tb.memory(900, -300 * MiB, 1050 * MiB, r, addr=2)
    tb.memory(950, -50 * MiB, 1000 * MiB, r, addr=3)
    # step 2: address 1 handed out again in forward, freed in backward
    tb.cpu_op("aten::matmul", 1100, 200)
    tb.memory(1150, 500 * MiB, 1500 * MiB, r, addr=1)
    tb.cpu_op("autograd::engine::evaluate_function: MmBackward0", 1400, 100)
    tb.memory(1450, -500 * MiB, 1000 * MiB, r, addr=1)
    return tb.write(tmp_path / "m.json")


def test_two_steps_worked_by_hand(tmp_path):
    (dev,) = _over(_two_steps(tmp_path))
    assert (dev["label"], dev["capacity_bytes"], dev["peak_step"]) == ("GPU 0", 80 * GiB, 2)
    s1, s2 = dev["steps"]
    assert s1["step"] == 1 and s1["peak_allocated_bytes"] == 1400 * MiB
    assert (s1["peak_ts_us"], s1["phase"], s1["op"]) == (420.0, "backward", "aten::mm")
    assert s1["reserved_unallocated_bytes"] == (2048 - 1400) * MiB
    assert s1["start_allocated_bytes"] == 1000 * MiB  # before the first event: 1100 - 100
    assert (s1["allocated_in_step_bytes"], s1["freed_in_step_bytes"], s1["n_allocations"]) == (
        450 * MiB,
        450 * MiB,
        3,
    )
    # live at t=420: A (100 MiB, made in aten::empty inside aten::linear) and B (300 MiB, aten::mm)
    assert s1["contributors"] == [
        {"op": "(allocated before the trace)", "bytes": 1000 * MiB, "n_allocations": 0},
        {"op": "aten::mm", "bytes": 300 * MiB, "n_allocations": 1},
        {"op": "aten::linear", "bytes": 100 * MiB, "n_allocations": 1},
    ]
    assert (s2["peak_allocated_bytes"], s2["phase"], s2["op"], s2["peak_offset_us"]) == (
        1500 * MiB,
        "forward",  # from the step start to the first backward op
        "aten::matmul",
        150.0,
    )
    assert s2["start_allocated_bytes"] == 1000 * MiB
    assert s2["contributors"] == [
        {"op": "(allocated before the trace)", "bytes": 1000 * MiB, "n_allocations": 0},
        {"op": "aten::matmul", "bytes": 500 * MiB, "n_allocations": 1},
    ]
    chart = dev["chart"]
    assert chart["step"] == 2 and chart["dur_us"] == 1000.0
    assert chart["offsets_us"] == [0.0, 150.0, 450.0]
    assert chart["allocated_bytes"] == [1000 * MiB, 1500 * MiB, 1000 * MiB]
    assert [p["phase"] for p in chart["phases"]] == ["forward", "backward"]
    assert chart["phases"][1] == {"phase": "backward", "start_us": 400.0, "end_us": 500.0}


def test_step_one_optimizer_phase(tmp_path):
    """An allocation during Optimizer.step is in the optimizer phase (the step's peak moved there)."""
    tb = TraceBuilder()
    tb.step(1, 0, 1000)
    tb.cpu_op("autograd::engine::evaluate_function: MmBackward0", 100, 100)
    tb.memory(150, 10, 10, 0, addr=1)
    tb.annotation("Optimizer.step#Adam.step", 300, 100).cpu_op("aten::zeros_like", 310, 20)
    tb.memory(320, 30, 40, 0, addr=2)
    (dev,) = _over(tb.write(tmp_path / "o.json"))
    (s,) = dev["steps"]
    assert (s["peak_allocated_bytes"], s["phase"], s["op"]) == (40, "optimizer", "aten::zeros_like")
    assert s["reserved_unallocated_bytes"] is None  # the device reported no reserved bytes


def test_no_memory_events_gives_nothing(tmp_path):
    tb = TraceBuilder()
    tb.step(1, 0, 1000).cpu_op("aten::mm", 10, 10)
    assert _over(tb.write(tmp_path / "n.json")) == []


def test_events_outside_every_step_give_nothing(tmp_path):
    tb = TraceBuilder()
    tb.step(1, 0, 1000).step(2, 1000, 1000).cpu_op("aten::mm", 10, 10)
    tb.memory(2500, 64, 64, 1024, addr=1)  # after the last step
    assert _over(tb.write(tmp_path / "after.json")) == []


def test_innermost_ops_equal_starts_and_ends():
    """Parent [0, 10) and child [0, 4) start together (the child listed first), a sibling [4, 10) ends with the
    parent; a point at 10 is outside all (ends are exclusive)."""
    ts = np.array([0.0, 0.0, 4.0])
    end = np.array([4.0, 10.0, 10.0])
    thread = np.zeros(3, dtype=np.int64)
    at = np.array([0.0, 3.9, 4.0, 9.9, 10.0, -1.0])
    got = innermost_ops(ts, end, thread, at, np.zeros(at.size, dtype=np.int64))
    assert got.tolist() == [0, 0, 2, 2, -1, -1]
    other = innermost_ops(ts, end, thread, np.array([1.0]), np.array([7]))
    assert other.tolist() == [-1]  # another thread has no ops


# --- independent reading of the raw JSON --------------------------------------------------------------------


TRACE_CATS = {
    "cpu_op",
    "Operator",
    "user_annotation",
    "kernel",
    "Kernel",
    "gpu_memcpy",
    "Memcpy",
    "gpu_memset",
    "Memset",
    "cuda_runtime",
    "cuda_driver",
    "Runtime",
    "python_function",
}


def _raw_events(path: Path) -> list[dict[str, Any]]:
    with gzip.open(path, "rt") if path.suffix == ".gz" else open(path) as fh:
        doc = json.load(fh)
    return doc["traceEvents"] if isinstance(doc, dict) else doc


def _op_at(ops: list[dict[str, Any]], e: dict[str, Any]) -> str | None:
    """The latest-starting (then shortest) op on the event's thread with ts <= t < ts + dur, factories skipped
    unless nothing else encloses the event."""
    for skip in (True, False):
        best = None
        for o in ops:
            if o["pid"] != e["pid"] or o["tid"] != e["tid"] or (skip and o["name"] in FACTORIES):
                continue
            if o["ts"] <= e["ts"] < o["ts"] + o["dur"]:
                if best is None or (o["ts"], -o["dur"]) > (best["ts"], -best["dur"]):
                    best = o
        if best is not None:
            return str(best["name"])
    return None


def _independent(path: Path, device_type: int, device_id: int) -> dict[str, Any]:
    events = _raw_events(path)
    names = {str(e.get("name", "")) for e in events}
    assert not any(n.startswith(("autograd::engine::evaluate_function", "Optimizer.step#")) for n in names)
    assert not any(n.startswith("ProfilerStep#") for n in names)  # one whole-trace window
    mem = [
        e
        for e in events
        if e.get("name") == "[memory]"
        and e["args"].get("Device Type") == device_type
        and e["args"].get("Device Id") == device_id
    ]
    mem.sort(key=lambda e: e["ts"])
    ops = [e for e in events if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "Operator") and e["dur"] > 0]
    totals = [e["args"]["Total Allocated"] for e in mem]
    j = totals.index(max(totals))
    live: dict[int, tuple[int, str]] = {}
    for e in mem[: j + 1]:
        a = e["args"]
        if a["Bytes"] > 0:
            live[a["Addr"]] = (a["Bytes"], _op_at(ops, e) or "(outside any op)")
        else:
            live.pop(a["Addr"], None)
    by_op: dict[str, list[int]] = {}
    for nbytes, op in live.values():
        by_op.setdefault(op, [0, 0])
        by_op[op][0] += nbytes
        by_op[op][1] += 1
    rows = [(op, b, n) for op, (b, n) in by_op.items()]
    before = totals[j] - sum(b for _, b, _ in rows)
    if before > 0:
        rows.append(("(allocated before the trace)", before, 0))
    rows.sort(key=lambda r: (-r[1], -r[2], r[0]))  # bytes, then allocations (more first), then name
    shown = [r for r in rows if r[1] >= rows[min(4, len(rows) - 1)][1]]  # the first 5 and any tie at the 5th
    peak = mem[j]
    # one whole-trace window: it starts at the trace's first event (an op, annotation, runtime call, device
    # activity, Python function or [memory] event)
    start = min(
        [float(e["ts"]) for e in events if e.get("ph") == "X" and e.get("cat") in TRACE_CATS]
        + [float(e["ts"]) for e in mem]
    )
    return {
        "peak_allocated_bytes": totals[j],
        "peak_ts_us": float(peak["ts"]),
        "op": _op_at(ops, peak),
        "reserved_bytes": peak["args"]["Total Reserved"],
        "allocated_in_step_bytes": sum(e["args"]["Bytes"] for e in mem if e["args"]["Bytes"] > 0),
        "peak_offset_us": float(peak["ts"]) - start,
        "contributors": [{"op": o, "bytes": b, "n_allocations": n} for o, b, n in shown],
    }


def _check(path: Path, device_type: int, device_id: int, label: str) -> dict[str, Any]:
    want = _independent(path, device_type, device_id)
    dev = next(d for d in _over(path) if d["label"] == label)
    (s,) = dev["steps"]
    for key, value in want.items():
        assert s[key] == value, key
    assert s["phase"] == "forward"  # no backward or optimizer op in the trace: inference, every op is forward
    return s


def test_switchtransformers_a100_peak_against_raw_events(shared):
    s = _check(shared("switchtransformers__a100_moe_profile_memory.json.gz"), 1, 0, "GPU 0")
    # what the loop above found, as a reader would quote it
    assert s["peak_allocated_bytes"] == 23_111_038_976 and s["op"] == "aten::addmm"
    assert s["contributors"][0] == {"op": "aten::addmm", "bytes": 8_656_125_952, "n_allocations": 43}
    # aten::clone (40 allocations) and aten::cat (10) tie at the fifth place with 1,342,177,280 B: both are shown
    assert s["contributors"][4:] == [
        {"op": "aten::clone", "bytes": 1_342_177_280, "n_allocations": 40},
        {"op": "aten::cat", "bytes": 1_342_177_280, "n_allocations": 10},
    ]
    # from the trace's start (its first event), not from the first [memory] event (925,485 µs)
    assert s["peak_offset_us"] == 926_928
    assert s["reserved_unallocated_bytes"] == 23_616_028_672 - 23_111_038_976


def test_cpu_resnet_peak_against_raw_events(shared):
    s = _check(shared("epsilonpidelta__cpu_resnet_memory.pt.trace.json"), 0, -1, "CPU")
    assert s["peak_allocated_bytes"] == 117_349_888 and s["op"] == "aten::mkldnn_convolution"
    assert s["reserved_unallocated_bytes"] is None


def test_report_carries_memory_over_step_through_json(tmp_path):
    from perfdoctor import pipeline
    from perfdoctor.model import from_json, to_json

    built = pipeline.build([str(_two_steps(tmp_path))])
    again = from_json(to_json(built.model))
    assert again == built.model
    (dev,) = again.ranks[0].memory.over_step
    assert dev.peak_step == 2 and dev.steps[0].contributors[1].op == "aten::mm"
    assert dev.chart.allocated_bytes == [1000 * MiB, 1500 * MiB, 1000 * MiB]


def test_every_format_shows_the_peak_and_its_contributors(tmp_path):
    """HTML: the chart (inline SVG, the peak marked, phase bands) and the contributors, a hostile op name escaped;
    terminal: the peak line and the contributors in at most 4 lines at 120 columns; Markdown: the same line."""
    import io

    from rich.console import Console

    from perfdoctor import pipeline
    from perfdoctor.render.html import render_html
    from perfdoctor.render.markdown import render_markdown
    from perfdoctor.render.terminal import memory_lines

    path = _two_steps(tmp_path)
    doc = json.loads(path.read_text())
    for e in doc["traceEvents"]:
        if e.get("name") == "aten::matmul":
            e["name"] = "</script><b>matmul"
    path.write_text(json.dumps(doc))
    report = pipeline.build([str(path)]).model
    html = render_html(report)
    section = html[html.index("Memory over the step — rank 0, GPU 0") :]
    assert "<svg" in section and "Memory over step 2 — rank 0, GPU 0" in section
    assert "<title>peak 1.46 GiB at 0.15 ms in &lt;/script&gt;&lt;b&gt;matmul</title>" in section
    assert "<title>backward</title>" in section and "<title>forward</title>" in section
    assert "</script><b>" not in html and "&lt;/script&gt;&lt;b&gt;matmul" in section
    lines = memory_lines(report.ranks[0])
    assert lines[0] == (
        "memory (GPU 0): peak 1.46 GiB of 80.00 GiB in step 2 (forward, </script><b>matmul, at 0.15 ms into it); "
        "reserved 2.00 GiB (548.00 MiB cached, unused); 475.00 MiB allocated per step"  # (450 + 500) / 2 MiB
    )
    assert lines[1] == (
        "live at the peak: (allocated before the trace) 1,000.00 MiB, </script><b>matmul 500.00 MiB (1 allocation)"
    )
    out = io.StringIO()
    Console(file=out, width=120, color_system=None).print("\n".join(lines))
    assert len(out.getvalue().splitlines()) <= 4
    md = render_markdown(report)
    assert "## Memory over the step — rank 0" in md and "| 500.00 MiB | 1 |" in md


def test_memory_events_in_a_trace_without_ops_are_made_outside_any_op(tmp_path):
    """A kernel-only recording with [memory] events (no cpu_op): the step's peak has no op (was an IndexError)."""
    from tracebuilder import TraceBuilder

    from perfdoctor.analysis.memory.memory_steps import memory_over_steps
    from perfdoctor.analysis.steps.steps import find_steps
    from perfdoctor.trace import load_trace

    tb = TraceBuilder()
    tb.step(1, 0, 1000)
    tb.launch("volta_sgemm_128x64_nn", launch_ts=5, start=10, dur=400)
    tb.memory(100, 1 << 20, 3 << 20, 4 << 20)
    t = load_trace(str(tb.write(tmp_path / "t.json")))
    (gpu,) = memory_over_steps(t, find_steps(t))
    assert gpu["steps"][0]["peak_allocated_bytes"] == 3 << 20 and gpu["steps"][0]["op"] is None


def test_contributors_keep_a_tie_at_the_cut():
    """Seven ops hold the 900 B live at a peak: a 300, b 200, c 150, d 100, then e 50 (2 allocations), f 50 (5)
    and g 50 (5) tie for the fifth place. Bytes first, then allocations (more first), then the name: f, g, e; all
    three shown. With 960 B at the peak, 60 B predate the trace: that group is fifth, and the tie is cut after it."""
    from perfdoctor.analysis.memory.memory_steps import _top

    names = ["a", "b", "c", "d", "e", "f", "g"]
    nb = np.array([300, 200, 150, 100, 50, 50, 50])
    nc = np.array([1, 1, 1, 1, 2, 5, 5])
    first = [("a", 300, 1), ("b", 200, 1), ("c", 150, 1), ("d", 100, 1)]
    got = _top(np.arange(7), nb, nc, names, 900)
    assert [(r["op"], r["bytes"], r["n_allocations"]) for r in got] == [
        *first,
        ("f", 50, 5),
        ("g", 50, 5),
        ("e", 50, 2),
    ]
    got = _top(np.arange(7), nb, nc, names, 960)
    assert [(r["op"], r["bytes"], r["n_allocations"]) for r in got] == [*first, ("(allocated before the trace)", 60, 0)]
