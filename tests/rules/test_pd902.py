"""PD902 cold-start: first-call work (compilation, lazy module loading) left out of the analysed steps, by hand (µs).

Moved from tests/test_coverage_rules.py (issue 9: one test file per rule).
"""

from rules_helpers import ADD, few_kernels_trace, run_tb
from tracebuilder import TraceBuilder


def _cold_then_warm():
    """Step 1: 800 µs of Inductor compilation; steps 2-3 warm, each with one 100 µs convolution."""
    tb = TraceBuilder()
    for n in range(3):
        s = 1000 * n
        tb.step(n + 1, s, 1000)
        if n == 0:
            tb.annotation("compile_fx_inner (dynamo_timed)", s + 10, 800)
        tb.cpu_op("aten::convolution", s + 850, 100)
        tb.launch("volta_scudnn_128x64_relu_interior_nn_v1", launch_ts=s + 900, start=s + 910, dur=50)
    return tb


def test_pd902_fires_on_a_leading_cold_step_and_leaves_it_out(tmp_path):
    from perfdoctor.analysis.steps.steps import find_steps
    from perfdoctor.trace import load_trace

    s = find_steps(load_trace(str(_cold_then_warm().write(tmp_path / "t.json"))))
    assert s.numbers.tolist() == [2, 3]
    assert s.cold_dropped == [(1, 1000.0, 800.0)]
    assert any("left out: 0.8 of their 1.0 ms are first-call work" in w for w in s.warnings)
    r = run_tb(_cold_then_warm(), tmp_path, ["PD902"])
    f = r.findings["PD902"]
    assert f["evidence"]["n_cold_dropped"] == 1 and f["steps"] == [1]
    assert "torch.compile (Dynamo/Inductor) compilation 0.8 ms" in f["message"]  # what filled the step left out


def test_pd902_fires_on_all_cold_steps_and_skips_launch_and_sync_verdicts(tmp_path):
    tb = few_kernels_trace()
    tb.cpu_op("aten::convolution", 900, 60)  # first call: 60 µs is under the 1 ms floor, not warm-up
    tb.annotation("OutputGraph.call_user_compiler (dynamo_timed)", 0, 600)
    r = run_tb(tb, tmp_path, ["PD103", "PD401", "PD902"])
    assert "cold start (60% of the step is first-call work" in r.skipped["PD103"] and "PD103" not in r.findings
    assert "PD401" in r.skipped
    f = r.findings["PD902"]
    assert f["evidence"]["warmup_ms"] == 0.6 and "torch.compile (Dynamo/Inductor) compilation 0.6 ms" in f["message"]


def _first_launch_trace(pending: int = 0, launched_before: bool = False):
    """One 10,000 µs step; at 2,000 a launch call of 6,000 µs (the first launch of the add kernel, as the ykcai
    MoE traces' AccumulateGrad add_ in the process's first step), its kernel at 8,010 for 5 µs. ``pending``
    kernels are launched at 1,000-1,999 and start only after the long call began (a backlogged queue);
    ``launched_before``: the add kernel was launched once already at 500 (so the long call is not its first)."""
    tb = TraceBuilder()
    tb.step(1, 0, 10000)
    if launched_before:
        tb.launch(ADD, launch_ts=500, start=510, dur=5)
    for i in range(pending):
        tb.launch(
            "ampere_sgemm_32x128_nt",
            launch_ts=1000 + i * 999 / max(pending, 1),
            start=2001 + 20 * i,
            dur=20,
            launch_dur=0.5,
        )
    tb.launch(ADD, launch_ts=2000, start=8010, dur=5, launch_dur=6000)
    return tb


def test_pd902_fires_on_a_first_kernel_launch_lazy_module_loading(tmp_path):
    import numpy as np

    from perfdoctor.analysis.steps.warmup import warmup
    from perfdoctor.trace import load_trace

    w = warmup(load_trace(str(_first_launch_trace().write(tmp_path / "t.json"))), np.array([0.0]), np.array([1e4]))
    # the call [2,000, 8,000) is the add kernel's first launch with an empty queue: 6,000 µs, 60% of the step ≥ 25%
    assert w.by_kind_us["lazy_init"] == 6000 and w.per_window_us.tolist() == [6000.0] and w.cold[0]
    r = run_tb(_first_launch_trace(), tmp_path, ["PD902"])
    assert (
        "lazy CUDA/HIP initialisation (module loading, first kernel launches) 6.0 ms" in r.findings["PD902"]["message"]
    )


def test_pd902_silent_on_a_long_launch_into_a_full_queue_or_of_a_loaded_kernel(tmp_path):
    import numpy as np

    from perfdoctor.analysis.steps.warmup import warmup
    from perfdoctor.trace import load_trace

    # 300 kernels launched before 2,000 start after it: the queue is backlogged (≥ 256 pending), the call blocked
    full = warmup(
        load_trace(str(_first_launch_trace(300).write(tmp_path / "a.json"))), np.array([0.0]), np.array([1e4])
    )
    # the add kernel was launched at 500 already: its module is loaded
    again = warmup(
        load_trace(str(_first_launch_trace(0, True).write(tmp_path / "b.json"))), np.array([0.0]), np.array([1e4])
    )
    assert full.by_kind_us["lazy_init"] == 0 and again.by_kind_us["lazy_init"] == 0
    assert "PD902" not in run_tb(_first_launch_trace(0, True), tmp_path, ["PD902"]).findings


def test_all_cold_steps_draw_no_batch_size_or_mfu_verdict():
    # ykcai MoE "before" ranks (2x A100, shared traces): the one analysed step is a cold start, mostly lazy CUDA
    # module loading (the trace's README story); PD201 read its 12 ms of lazy init as fixed per-step cost and
    # claimed ~24% from a larger batch, PD206 blamed low MFU on "launch-bound (96%)"
    from conftest import shared_trace
    from rules_helpers import run_rules

    d = shared_trace("ykcai__a100x2_moe_1layer_before")
    r = run_rules(sorted(d.glob("*.json")), ["PD201", "PD206", "PD902"])
    assert "PD902" in r.findings
    for code in ("PD201", "PD206"):
        assert code not in r.findings and "are a cold start" in r.skipped[code]


def test_pd902_says_its_kinds_overlap_and_gives_their_union(tmp_path):
    """switchtransformers' parts (440.6 + 143.7 + 34.1 ms) exceeded the 496.7 ms held per step
    unexplained. By hand, one 10,000 µs step: the first aten::linear call [0, 4000) holds a 3,000 µs
    cuModuleLoadData [100, 3100) (lazy init); its second call takes 100 µs, so the first is a first call (≥ 3x and
    ≥ 1 ms longer). First calls 4.0 ms + lazy init 3.0 ms = 7.0 ms, their union 4.0 ms (40% of the step: cold)."""
    tb = TraceBuilder()
    tb.step(1, 0, 10_000)
    tb.cpu_op("aten::linear", 0, 4000)
    tb.runtime("cuModuleLoadData", 100, 3000)
    tb.cpu_op("aten::linear", 5000, 100)
    f = run_tb(tb, tmp_path, ["PD902"]).findings["PD902"]
    assert f["evidence"]["warmup_ms"] == 4.0
    assert "first calls of ops 4.0 ms;" in f["message"] and " 3.0 ms; these overlap" in f["message"]
    assert "their union is 4.0 ms)" in f["message"] and "hold 4.0 ms of it per step" in f["message"]
