"""torch.compile on real CPU runs: examples/compile_breaks.py under `perfdoctor profile` (Inductor builds C++ here).

A planted graph break (``--graph-break item`` / ``print``: three per step) gives PD107 with the count Dynamo itself
reports (``torch._dynamo.explain`` on the same model) and the raw trace shows (regions per ProfilerStep, counted
with plain ``json``); a batch that loses a sample every 6 steps under ``dynamic=False`` gives PD108 in the step
that recompiles; the same script compiled cleanly gives neither, and its trace shows it ran compiled (one region per
step). 20 steps each: the profiler window is steps 10-13 (2 warm-up steps from 8), so the recompilation of step 12
(12 // 6 = 2: the third batch size) falls inside it.
"""

from __future__ import annotations

import gzip
import json
import re
import sys

import pytest
from examples_runs import REPO, example, profile, quiet_machine, runs_root  # noqa: F401 (a fixture)

STEPS = 20
SCRIPT = "compile_breaks.py"


def _run(name: str, flags: list[str]):
    return profile(name, flags, steps=STEPS, env={"OMP_NUM_THREADS": "1"}, script=SCRIPT)


def _regions_per_step(name: str) -> list[tuple[int, int]]:
    """Independent count from the run's raw trace: per ProfilerStep, the ``Torch-Compiled Region`` events starting in
    it and those not inside another region (entries from eager code)."""
    path = next((runs_root() / name).glob("trace.rank0*.pt.trace.json.gz"))
    with gzip.open(path, "rt") as fh:
        events = [e for e in json.load(fh)["traceEvents"] if e.get("ph") == "X"]
    steps = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e["name"].startswith("ProfilerStep#"))
    regions = sorted(
        ((e["ts"], e["ts"] + e["dur"]) for e in events if e["name"].startswith("Torch-Compiled Region")),
        key=lambda r: (r[0], -r[1]),
    )
    out = []
    for a, b in steps:
        inside = [r for r in regions if a <= r[0] < b]
        outer, end = 0, float("-inf")
        for s, e in inside:
            if s >= end:
                outer += 1
            end = max(end, e)
        out.append((len(inside), outer))
    return out


def _dynamo_breaks(graph_break: str) -> tuple[int, int]:
    """Dynamo's own count for the example's model: (graphs, graph breaks) of one forward."""
    import torch

    sys.path.insert(0, str(REPO / "examples"))
    try:
        from compile_breaks import BlockMLP
    finally:
        sys.path.pop(0)
    torch._dynamo.reset()
    explained = torch._dynamo.explain(BlockMLP(64, 64, 10, graph_break))(torch.randn(64, 64))
    return explained.graph_count, explained.graph_break_count


@example
@pytest.mark.parametrize("kind", ["item", "print"])
def test_planted_graph_break_gives_pd107_with_dynamos_count(kind):
    findings, skipped, _, _ = _run(f"compile-{kind}", ["--graph-break", kind])
    graphs, breaks = _dynamo_breaks(kind)
    assert (graphs, breaks) == (4, 3)
    assert set(_regions_per_step(f"compile-{kind}")) == {(graphs, 1)}
    f = findings["PD107"]
    assert f["message"].startswith(f"torch.compile runs {graphs} compiled graphs per step where 1 would do: {breaks} ")
    if kind == "item":  # the break's op named, and the fix for a scalar read
        assert "aten::item ×3 per step" in f["message"]
        assert "capture_scalar_outputs" in f["fix"]
    else:
        assert "no op runs between the graphs" in f["message"]
    assert f["saving_us_per_step"] > 0
    assert "PD108" not in findings


@example
def test_shape_change_gives_pd108_in_the_recompiling_step():
    findings, skipped, _, _ = _run("compile-shape", ["--shape-every", "6"])
    f = findings["PD108"]
    # the batch is 64 - step // 6 samples: 62 in steps 12-17, 63 before; step 12 compiles the new shape
    # 1 of the 4 recorded steps (#10 may be left out as first-call work on a loaded machine: PD902)
    assert re.search(r"compiles inside 1 of [34] analysed steps \(recompiled frames: 1/\d\)", f["message"])
    assert "changing input shapes (step #12: [63, 64] → [62, 64])" in f["message"]
    assert "mark_dynamic" in f["fix"]
    assert f["saving_us_per_step"] > 0
    assert "PD107" not in findings


@example
def test_clean_compile_gives_neither():
    findings, skipped, _, _ = _run("compile-clean", [])
    # it ran compiled: one region per analysed step, entered once
    assert set(_regions_per_step("compile-clean")) == {(1, 1)}
    assert "PD107" not in findings and "PD107" not in skipped
    assert "PD108" not in findings and "PD108" not in skipped


@example
def test_batch_probe_leaves_no_recompilation_in_the_window():
    # 30 steps: the window is steps 15-20, and the batch probe has seen 20 identical batches after step 19; removing
    # its global module hooks then would fail the compiled code's guards and recompile it in step 20 (frame 1/1)
    findings, skipped, _, _ = profile("compile-clean-30", [], steps=30, env={"OMP_NUM_THREADS": "1"}, script=SCRIPT)
    assert "PD108" not in findings and "PD108" not in skipped
    path = next((runs_root() / "compile-clean-30").glob("trace.rank0*.pt.trace.json.gz"))
    with gzip.open(path, "rt") as fh:
        names = {e["name"] for e in json.load(fh)["traceEvents"] if e.get("name", "").startswith("Torch-Compiled")}
    assert names == {"Torch-Compiled Region: 1/0"}
