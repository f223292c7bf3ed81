"""PD108 steady-state-recompilation: a firing and a silent case on hand-made traces (numbers worked out by hand, µs),
and the real traces: a cold start stays PD902's, the clean compiled traces stay silent.

The real-script case (examples/compile_breaks.py --shape-every N under `perfdoctor profile`) is in
tests/test_compile_examples.py.
"""

import pytest
from conftest import shared_trace
from rules_helpers import run_rules, run_tb
from tracebuilder import TraceBuilder


def _two_steps(recompile: bool, new_shape: bool = True) -> TraceBuilder:
    """Two 1000 µs steps of a CPU-only run, each calling the compiled model at +100 µs (graph [+110, +290)).

    With ``recompile``: step 2's cache lookup [1100, 1500) holds a compile (``dynamo`` [1110, 1490) >
    ``entire_frame_compile`` > ``_compile.compile_inner (dynamo_timed)``), and the frame runs as 0/1 at 1500;
    ``new_shape``: its graph's input is [7, 4] where step 1's was [8, 4].
    """
    tb = TraceBuilder(device_name=None)
    tb.step(1, 0, 1000)
    tb.step(2, 1000, 1000)
    tb.cpu_op("TorchDynamo Cache Lookup", 100, 5)
    tb.cpu_op("Torch-Compiled Region: 0/0", 105, 200)
    tb.cpu_op("CompiledFunction", 110, 180, input_dims=[[8, 4], [4, 4]])
    if recompile:
        tb.cpu_op("TorchDynamo Cache Lookup", 1100, 400)
        tb.cpu_op("dynamo", 1110, 380)
        tb.cpu_op("entire_frame_compile", 1115, 370)
        tb.cpu_op("_compile.compile_inner (dynamo_timed)", 1120, 360)
        tb.cpu_op("Torch-Compiled Region: 0/1", 1500, 200)
        tb.cpu_op("CompiledFunction", 1510, 180, input_dims=[[7, 4] if new_shape else [8, 4], [4, 4]])
    else:
        tb.cpu_op("TorchDynamo Cache Lookup", 1100, 5)
        tb.cpu_op("Torch-Compiled Region: 0/0", 1105, 200)
        tb.cpu_op("CompiledFunction", 1110, 180, input_dims=[[8, 4], [4, 4]])
    tb.cpu_op("aten::mm", 1750, 200)
    return tb


def test_pd108_fires_on_a_recompile_with_a_new_shape(tmp_path):
    r = run_tb(_two_steps(True), tmp_path, ["PD108"])
    f = r.findings["PD108"]
    m = r.metrics("PD108")
    # compile: the cache lookup [1100, 1500) that holds the compile spans: 400 µs in step 2, 0 in step 1; mean over
    # the 2 steps 200 µs, 20% of the 1000 µs step. The CPU-only replay cuts those 400 µs from step 2: per-step
    # savings 0 and 400, mean 200 µs.
    assert m["compile_us"] == 200
    assert m["compiling_steps"] == 1
    assert f["saving_us_per_step"] == pytest.approx(200)
    assert "recompiled frames: 0/1" in f["message"]
    assert "400.0 ms" not in f["message"] and "0.4 ms each" in f["message"]
    assert "changing input shapes (step #2: [8, 4] → [7, 4])" in f["message"]
    assert "mark_dynamic" in f["fix"]


def test_pd108_names_a_python_guard_when_shapes_stay(tmp_path):
    r = run_tb(_two_steps(True, new_shape=False), tmp_path, ["PD108"])
    f = r.findings["PD108"]
    assert "a guard on a Python value" in f["message"]
    assert "TORCH_LOGS=recompiles" in f["fix"] and "mark_dynamic" not in f["fix"]


def test_pd108_silent_without_a_compile(tmp_path):
    r = run_tb(_two_steps(False), tmp_path, ["PD108"])
    assert "PD108" in r.passed
    assert r.metrics("PD108")["compile_us"] == 0


def test_pd108_leaves_a_cold_start_to_pd902():
    # the first compiled calls of ResNet18 (~1.7 s of Inductor compile): every analysed step is cold
    r = run_rules([shared_trace("wings236__rtx4090_first_compile.json")], ["PD108", "PD902"])
    assert "PD108" not in r.findings
    assert "cold start" in r.skipped["PD108"]
    assert "PD902" in r.findings


@pytest.mark.parametrize("name", ["wings236__rtx4090_compiled_resnet18.json", "wings236__rtx4090_graph_breaks.json"])
def test_pd108_silent_on_compiled_steady_state_traces(name):
    r = run_rules([shared_trace(name)], ["PD108"])
    assert "PD108" in r.passed
    assert r.metrics("PD108")["compile_us"] == 0
