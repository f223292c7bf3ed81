"""PD109 cuda-graph-rerecording: firing cases (cudagraph trees' record range; a manual stream capture) and silent
ones on hand-made traces (numbers worked out by hand, µs), and the reduce-overhead trace of luatil (graphs replayed,
never recorded, in its 5 steps)."""

import pytest
from conftest import shared_trace
from rules_helpers import SGEMM, run_rules, run_tb
from tracebuilder import TraceBuilder


def _two_steps(record: str | None) -> TraceBuilder:
    """Two 1000 µs steps, each replaying a graph: ``cudaGraphLaunch`` at +100 µs (10 µs), its kernel 180 µs.

    ``record``: step 2 first records the graph on the host, [1050, 1400) (``"trees"``: a CUDAGraphNode.record range;
    ``"capture"``: cudaStreamBeginCapture [1050, 1055) … cudaStreamEndCapture [1300, 1305), then
    cudaGraphInstantiateWithFlags [1310, 1400)), and launches it at 1400 instead of 1100.
    """
    tb = TraceBuilder()
    tb.step(1, 0, 1000)
    tb.step(2, 1000, 1000)
    tb.launch(SGEMM, 100, 120, 180, runtime_name="cudaGraphLaunch", launch_dur=10)
    if record == "trees":
        tb.annotation("CUDAGraphNode.record (dynamo_timed)", 1050, 350)
    elif record == "capture":
        tb.runtime("cudaStreamBeginCapture_v2", 1050, 5)
        tb.runtime("cudaLaunchKernel", 1100, 5)
        tb.runtime("cudaStreamEndCapture", 1300, 5)
        tb.runtime("cudaGraphInstantiateWithFlags", 1310, 90)
    at = 1400 if record else 1100
    tb.launch(SGEMM, at, at + 20, 180, runtime_name="cudaGraphLaunch", launch_dur=10)
    return tb


@pytest.mark.parametrize(("record", "record_us"), [("trees", 350), ("capture", 255 + 90)])
def test_pd109_fires_on_a_recording_in_a_warm_step(tmp_path, record, record_us):
    r = run_tb(_two_steps(record), tmp_path, ["PD109"])
    f = r.findings["PD109"]
    m = r.metrics("PD109")
    # step 2 records for record_us (trees: [1050, 1400); capture: [1050, 1305) ∪ [1310, 1400)); mean over the two
    # steps record_us / 2
    assert m["record_us"] == record_us / 2
    assert m["recordings_per_step"] == 0.5
    assert f["message"].startswith("CUDA graphs are recorded again inside 1 of 2 analysed steps")
    # replayed: the recording leaves step 2's host timeline and its graph launch moves up by record_us, so the step
    # ends record_us earlier (nothing else waits); 0 in step 1: the mean saving is record_us / 2
    assert f["saving_us_per_step"] == pytest.approx(record_us / 2)


def test_pd109_silent_when_graphs_are_only_replayed(tmp_path):
    r = run_tb(_two_steps(None), tmp_path, ["PD109"])
    assert "PD109" in r.passed
    assert r.metrics("PD109")["record_us"] == 0


def test_pd109_silent_on_reduce_overhead_steady_state():
    # luatil trace_05: torch.compile(mode="reduce-overhead"), 10 cudaGraphLaunch in 5 ProfilerSteps, no capture
    r = run_rules([shared_trace("luatil__rtx3060_compile_cudagraphs__trace_05.json")], ["PD109"])
    assert "PD109" in r.passed
    assert r.metrics("PD109")["record_us"] == 0
