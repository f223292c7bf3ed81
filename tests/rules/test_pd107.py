"""PD107 compile-graph-breaks: a firing and a silent case on hand-made traces (numbers worked out by hand, µs), the
graph-breaks trace of wings236 against its regions counted by independent code, and the clean compiled traces.

The real-script cases (examples/compile_breaks.py under `perfdoctor profile`) are in tests/test_compile_examples.py.
"""

import json

import pytest
from conftest import shared_trace
from rules_helpers import run_rules, run_tb
from tracebuilder import TraceBuilder


def _compiled_step(graph_break: bool) -> TraceBuilder:
    """One 1000 µs step of a CPU-only run: a compiled forward entered at 20 µs, then an eager op (the loss).

    With ``graph_break``: the forward's graph ends at 230, an eager ``.item()`` runs [240, 250), and the resume
    frame (1/0) is looked up [260, 275) and runs [280, 590) inside region 0/0, its graph [290, 560).
    """
    tb = TraceBuilder(device_name=None)
    tb.step(1, 0, 1000)
    tb.cpu_op("TorchDynamo Cache Lookup", 10, 10)
    tb.cpu_op("Torch-Compiled Region: 0/0", 20, 580)
    tb.cpu_op("Pregraph bytecode", 22, 3)
    tb.cpu_op("CompiledFunction", 30, 200 if graph_break else 530)
    if graph_break:
        tb.cpu_op("aten::item", 240, 10)
        tb.cpu_op("aten::_local_scalar_dense", 242, 6)
        tb.cpu_op("TorchDynamo Cache Lookup", 260, 15)
        tb.cpu_op("Torch-Compiled Region: 1/0", 280, 310)
        tb.cpu_op("Pregraph bytecode", 282, 3)
        tb.cpu_op("CompiledFunction", 290, 270)
    tb.cpu_op("aten::mm", 650, 250)
    return tb


def test_pd107_fires_on_a_graph_break(tmp_path):
    r = run_tb(_compiled_step(True), tmp_path, ["PD107"])
    f = r.findings["PD107"]
    m = r.metrics("PD107")
    # 2 regions, 1 outermost: 1 break. Eager between the graphs: aten::item [240, 250) = 10 µs (its child is inside).
    # The break's cost: the resume region [280, 590) outside its graph [290, 560): 10 + 30 = 40 µs, plus its cache
    # lookup [260, 275) = 15 µs: 55 µs. A CPU-only step is its host timeline: cutting 55 µs saves 55 µs (5.5%).
    assert m["breaks_per_step"] == 1
    assert m["graphs_per_step"] == 2
    assert m["eager_us"] == 10
    assert m["overhead_us"] == 55
    assert f["saving_us_per_step"] == pytest.approx(55)
    assert "aten::item ×1 per step, 0.01 ms" in f["message"]
    assert f["message"].startswith("torch.compile runs 2 compiled graphs per step where 1 would do: 1 graph break")
    assert "capture_scalar_outputs" in f["fix"]  # the fix for a break on a scalar read, not the generic text


def test_pd107_silent_on_one_graph(tmp_path):
    r = run_tb(_compiled_step(False), tmp_path, ["PD107"])
    assert "PD107" in r.passed
    assert r.metrics("PD107")["breaks_per_step"] == 0
    assert r.metrics("PD107")["graphs_per_step"] == 1


def test_pd107_silent_on_an_eager_trace(tmp_path):
    tb = TraceBuilder(device_name=None)
    tb.step(1, 0, 1000)
    tb.cpu_op("aten::mm", 100, 800)
    r = run_tb(tb, tmp_path, ["PD107"])
    assert "PD107" in r.passed
    assert r.metrics("PD107")["graphs_per_step"] == 0


def _regions_per_iteration(path) -> tuple[int, int]:
    """Independent count from the raw JSON: the ``Torch-Compiled Region`` events, and those not inside another
    region of the same thread (one per call of the compiled function)."""
    with open(path) as fh:
        events = json.load(fh)["traceEvents"]
    regions = sorted(
        (
            (e["tid"], e["ts"], e["ts"] + e["dur"])
            for e in events
            if e.get("name", "").startswith("Torch-Compiled Region")
        ),
        key=lambda r: (r[0], r[1], -r[2]),
    )
    outer, open_end = 0, {}
    for tid, ts, end in regions:
        if ts >= open_end.get(tid, float("-inf")):
            outer += 1
            open_end[tid] = end
        else:
            open_end[tid] = max(open_end[tid], end)
    return len(regions), outer


def test_pd107_wings236_graph_breaks_match_the_raw_regions():
    path = shared_trace("wings236__rtx4090_graph_breaks.json")
    n_regions, n_calls = _regions_per_iteration(path)
    assert (n_regions, n_calls) == (12, 3)  # 3 iterations of 4 regions (0/0 ⊃ 1/0 ⊃ 2/0 ⊃ 3/0)
    r = run_rules([path], ["PD107"])
    m = r.metrics("PD107")
    # the analysed steps are iterations 2 and 3 (the first is a cold start, PD902): 4 regions and 3 breaks in each
    assert m["graphs_per_step"] == n_regions / n_calls
    assert m["breaks_per_step"] == (n_regions - n_calls) / n_calls
    f = r.findings["PD107"]
    assert "frames 0/0, 1/0, 2/0, 3/0" in f["message"]
    assert "no op runs between the graphs" in f["message"]  # explicit graph_break() calls: no eager op between
    assert "TORCH_LOGS=graph_breaks" in f["fix"]


@pytest.mark.parametrize(
    "name",
    ["wings236__rtx4090_compiled_resnet18.json", "luatil__rtx3060_compile_cudagraphs__trace_05.json"],
)
def test_pd107_silent_on_clean_compiled_traces(name):
    r = run_rules([shared_trace(name)], ["PD107"])
    # one Torch-Compiled Region per step (raw counts: 3 in 3 iterations; 5 in 5 ProfilerSteps)
    assert "PD107" in r.passed
    assert r.metrics("PD107")["breaks_per_step"] == 0
    assert r.metrics("PD107")["graphs_per_step"] == 1


def test_pd107_skipped_without_steps():
    # the MI300X Triton trace: one compiled call (one region, no break) and no step markers, so no "per step"
    r = run_rules([shared_trace("tracelens__mi300__torch_compile_triton.json.gz")], ["PD107"])
    assert "PD107" not in r.findings
    assert r.skipped["PD107"].startswith("no ProfilerStep#N annotations")
