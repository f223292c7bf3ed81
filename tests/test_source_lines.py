"""Source lines: the user's line a finding's time starts at, read from the trace's Python stacks.

Synthetic stacks worked out by hand; the GPUPuzzlers ``.cpu()``-per-element trace checked against its raw events
with plain ``json``; real example runs under `perfdoctor profile --with-stack` (slow) checked against the example's
own source text.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest
from tracebuilder import TraceBuilder

from perfdoctor.analysis.timing.source_lines import is_library, stacks_of
from perfdoctor.trace import load_trace


def _stacked(tmp_path: Path, callers: bool) -> Path:
    """One step: train.py's loop calls step() (def line 10) at line 31; step() calls .item() at line 14 (a
    20 µs sync inside it), and torch's optimizer (torch/optim/adamw.py) at line 15, which calls .item() itself."""
    b = TraceBuilder()
    b.step(1, 0, 1000)
    mod = b.python_function("train.py(30): <module>", 0, 1000)
    step = b.python_function("train.py(10): step", 5, 900, mod, "train.py(31): <module>" if callers else None)
    b.python_function(
        "<built-in method item of Tensor object at 0x7f00>", 100, 30, step, "train.py(14): step" if callers else None
    )
    opt = b.python_function(
        "torch/optim/adamw.py(200): step", 300, 400, step, "train.py(15): step" if callers else None
    )
    inner = b.python_function("torch/optim/optimizer.py(90): _get_value", 310, 50, opt, None)
    b.python_function("<built-in method item of Tensor object at 0x7f00>", 320, 10, inner, None)
    b.runtime("cudaStreamSynchronize", 105, 20)  # inside .item() called from train.py:14
    b.runtime("cudaStreamSynchronize", 322, 5)  # inside torch's own .item(): its user line is the optimizer call
    return b.write(tmp_path / "t.json")


def test_library_frames():
    assert is_library("torch/nn/modules/module.py") and is_library("threading.py")
    assert is_library("multiprocessing/queues.py") and is_library("<frozen os>")
    assert is_library("/usr/lib/python3.11/site-packages/foo/bar.py") and is_library("tqdm/_monitor.py")
    assert not is_library("train.py") and not is_library("models/gpt.py")


def test_exact_line_of_the_call(tmp_path):
    t = load_trace(str(_stacked(tmp_path, callers=True)))
    rt = t.runtime
    src = stacks_of(t).locate(rt["pid"], rt["tid"], rt["ts_us"], rt["dur_us"])
    # 20 µs start at train.py:14 (.item() in step), 5 µs at train.py:15 (inside the optimizer): 20 / 25 = 80%
    assert src is not None and src.exact
    assert (src.location, src.function, src.calls) == ("train.py:14", "step", "Tensor.item")
    assert src.share_pct == pytest.approx(80.0)
    assert src.frames == ["train.py:14 in step", "train.py:31 in <module>"]
    # the other sync alone: two torch frames (optimizer.py, the .item() it calls) under the call skipped
    one = stacks_of(t).locate(rt["pid"][1:], rt["tid"][1:], rt["ts_us"][1:])
    assert one is not None and (one.location, one.calls, one.skipped) == (
        "train.py:15",
        "torch/optim/adamw.py: step",
        2,
    )


def test_function_line_without_callers(tmp_path):
    """Kineto's own names: the function that makes the call, named by its first line (not exact)."""
    t = load_trace(str(_stacked(tmp_path, callers=False)))
    rt = t.runtime
    src = stacks_of(t).locate(rt["pid"], rt["tid"], rt["ts_us"], rt["dur_us"])
    # both syncs now key on the same user frame (step, line 10): 100%
    assert src is not None and not src.exact
    assert (src.location, src.function, src.share_pct) == ("train.py:10", "step", 100.0)


def test_moment_outside_every_python_event(tmp_path):
    t = load_trace(str(_stacked(tmp_path, callers=True)))
    s = stacks_of(t)
    assert s.innermost(np.array([100]), np.array([100]), np.array([5000.0])).tolist() == [-1]
    assert s.locate(np.array([100]), np.array([100]), np.array([5000.0])) is None


def test_no_stacks_gives_the_hint(tmp_path):
    from perfdoctor.checks.common import WITH_STACK_HINT, name_line
    from perfdoctor.findings import Evidence

    b = TraceBuilder()
    b.step(1, 0, 100)
    b.runtime("cudaStreamSynchronize", 10, 20)
    t = load_trace(str(b.write(tmp_path / "t.json")))
    ev = Evidence()
    name_line(ev, t, "runtime", np.array([0]))
    assert ev.source is None and ev.source_hint == WITH_STACK_HINT and "--with-stack" in WITH_STACK_HINT


def _raw_cpu_line(path: Path) -> tuple[str, int, float]:
    """Independently of perfdoctor: for each host sync/copy call of the trace, the python_function events that
    contain it on its thread; the innermost one whose file is not torch's nor a built-in names the line.
    Returns (frame name, number of calls placed there, share of all calls)."""
    with gzip.open(path, "rt") as fh:
        events = json.load(fh)["traceEvents"]
    py = [e for e in events if e.get("cat") == "python_function"]
    calls = [
        e
        for e in events
        if e.get("cat") == "cuda_runtime" and e["name"] in ("cudaStreamSynchronize", "cudaMemcpyAsync", "cudaMemcpy")
    ]
    counts: dict[str, int] = {}
    for c in calls:
        around = [p for p in py if p["tid"] == c["tid"] and p["ts"] <= c["ts"] <= p["ts"] + p["dur"]]
        user = [p for p in around if not p["name"].startswith(("torch/", "<"))]
        name = max(user, key=lambda p: p["ts"])["name"]
        counts[name] = counts.get(name, 0) + 1
    top = max(counts, key=lambda k: counts[k])
    return top, counts[top], counts[top] / len(calls)


def test_pd401_names_the_cpu_call_on_a_real_trace(shared):
    """GPUPuzzlers' first_sum: `tensor[i].cpu()` per element inside first_sum() (A100); PD401 fires and names
    first_sum.py's first_sum, the function the raw events place every blocking call in."""
    from perfdoctor import pipeline

    path = shared("gpupuzzlers__d2h_sync_first_sum.json.gz")
    frame, n, share = _raw_cpu_line(path)
    assert frame == "first_sum.py(4): first_sum" and share == 1.0 and n == 8192
    res = pipeline.build([str(path)]).report
    (pd401,) = [f for f in res["findings"] if f["code"] == "PD401"]
    src = pd401["source"]
    assert (src["location"], src["function"], src["exact"]) == ("first_sum.py:4", "first_sum", False)
    # weighted by duration, every runtime call in the waits: all but 0.01% of it starts in first_sum
    assert src["calls"] == "Tensor.cpu" and src["share_pct"] > 99.9
    assert pd401["source_hint"] == ""


def _line_of(text: str) -> int:
    """The 1-based line of examples/_train_common.py that holds ``text`` (once)."""
    lines = (Path(__file__).resolve().parents[1] / "examples" / "_train_common.py").read_text().splitlines()
    (n,) = [i for i, line in enumerate(lines, 1) if text in line]
    return n


def _stack_run(name: str, flags: list[str]) -> Path:
    import os
    import subprocess
    import sys

    from examples_runs import ONE_THREAD, REPO, runs_root

    out = runs_root() / name
    if not out.exists():
        cmd = [sys.executable, "-m", "perfdoctor", "profile", str(REPO / "examples" / "mlp.py"), "--steps", "12"]
        cmd += ["--out", str(out), "--no-report", "--with-stack", "--", *flags]
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=600, cwd=runs_root(), env={**os.environ, **ONE_THREAD}
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
    return out


@pytest.mark.slow
def test_with_stack_names_the_item_line():
    """`--item-every-step`: `loss.item()` in the print of _train_common.py's loop. On a CPU run PD401 is skipped
    (a CPU tensor's .item() waits for no device), so the line is read where PD401 reads it on a GPU: the host
    calls of `aten::item` (its `_local_scalar_dense`, the copy to the host), placed on their user line."""
    from perfdoctor.checks.common import name_line
    from perfdoctor.findings import Evidence

    out = _stack_run("stack_item", ["--num-workers", "0", "--item-every-step"])
    (trace,) = sorted(out.glob("trace.rank*.pt.trace.json.gz"))
    t = load_trace(str(trace))
    ops = t.cpu_ops
    rows = np.flatnonzero(t.name_array()[ops["name_id"]] == "aten::_local_scalar_dense")
    ev = Evidence()
    name_line(ev, t, "cpu_ops", rows)
    line = _line_of('print(f"rank {rank} step {step} loss {loss.item()')
    assert ev.source is not None and ev.source.exact
    # AdamW's own `.item()` calls (torch/optim) are placed on the `opt.step()` line; the print's is the heaviest
    # only when it wins, so check both are where they belong
    assert ev.source.location in (f"_train_common.py:{line}", f"_train_common.py:{_line_of('opt.step()')}")
    tops = stacks_of(t)
    user, below, _ = tops.anchor(tops.innermost(ops["pid"][rows], ops["tid"][rows], ops["ts_us"][rows]))
    callers = {tops.caller[b] for b in below.tolist()}
    assert f"_train_common.py({line}): train" in callers


@pytest.mark.slow
def test_with_stack_names_the_dataloader_loop_line():
    """`--slow-getitem-ms`: PD101 fires and names the line iterating the DataLoader (`yield from loader` in
    _batches), with the loop's `batch = next(batches)` the next frame out."""
    from perfdoctor import pipeline

    out = _stack_run("stack_dl", ["--num-workers", "0", "--slow-getitem-ms", "2", "--hidden", "2048"])
    traces = [str(p) for p in sorted(out.glob("trace.rank*.pt.trace.json.gz"))]
    res = pipeline.build(traces).report
    (pd101,) = [f for f in res["findings"] if f["code"] == "PD101"]
    src = pd101["source"]
    assert src["exact"] and src["location"] == f"_train_common.py:{_line_of('yield from loader')}"
    assert src["function"] == "_batches" and src["calls"].endswith("dataloader.py: __next__")
    assert src["frames"][1] == f"_train_common.py:{_line_of('batch = next(batches)')} in train"
