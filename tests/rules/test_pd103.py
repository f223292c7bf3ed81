"""PD103 host-launch-bound: a firing and a silent case (and skips), answers worked out by hand (µs).

Moved from tests/test_rules_synthetic.py (issue 9: one test file per rule).
"""

from rules_helpers import ADD, run_rules, run_tb
from tracebuilder import TraceBuilder


def _launch_trace(kernel_dur, spacing=30):
    tb = TraceBuilder()
    tb.step(1, 0, 1000)
    tb.cpu_op("aten::add", 0, 1000)  # the host is busy the whole step
    for i in range(30):
        t = 10 + spacing * i
        tb.launch(ADD, launch_ts=t, start=t + 12, dur=kernel_dur, launch_dur=10)
    return tb


def test_pd103_fires_on_tiny_kernels(tmp_path):
    r = run_tb(_launch_trace(2), tmp_path, ["PD103"])
    f = r.findings["PD103"]
    # replayed as one CUDA graph: host time [20, 890) between the first launch (+10 µs graph launch) and the last
    # launch's end goes, the annotation ends at 130, the kernels (2 µs each) end before it
    assert f["saving_us_per_step"] == 870
    # the 870 µs include the op's own host time between launches, not only the 30 × 10 µs of launch calls: the
    # assumption next to the saving says so (a reviewer found it said "launches" only)
    assert "op dispatch and the Python between them" in f["saving_method"]
    assert f["evidence"]["short_kernel_pct"] == 100
    assert f["evidence"]["kernels_per_step"] == 30
    assert f["evidence"]["median_launch_gap_us"] == 30 and f["evidence"]["median_launch_us"] == 10


def test_pd103_fires_when_op_overhead_between_launches_outlasts_kernels(tmp_path):
    # kernels (16 µs) outlast their launch call (10 µs) but not the host's 30 µs between launches:
    # the queue drains (A100 DDP trace: 16 µs kernels, 10 µs launches, 172 µs between launches)
    r = run_tb(_launch_trace(16), tmp_path, ["PD103"])
    f = r.findings["PD103"]
    # as one CUDA graph: the 30 kernels queue back to back from 22: [22, 502); the annotation ends at 130
    assert f["saving_us_per_step"] == 1000 - 502
    assert f["evidence"]["short_kernel_pct"] == 100


def test_pd103_silent_when_kernels_outlast_the_host_between_launches(tmp_path):
    # launches every 20 µs, kernels of 25 µs: the device never waits between kernels; the idle before the
    # first and after the last kernel is there, but it is not a stream of kernels the host cannot feed
    r = run_tb(_launch_trace(25, spacing=20), tmp_path, ["PD103"])
    assert "PD103" in r.passed
    m = r.metrics("PD103")
    assert m["short_kernel_share"] == 0 and m["launch_idle_us"] == 1000 - (10 + 20 * 29 + 12 + 25 - 22)


def test_idle_inside_cudafree_is_named_and_not_launch_overhead(tmp_path):
    tb = _launch_trace(2)  # 30 tiny kernels, the host busy the whole 1000 µs step
    tb.runtime("cudaFree", 950, 40)  # ...and inside cudaFree for the last 40 µs
    path = tb.write(tmp_path / "free.json")
    r = run_rules([path], ["PD103"])
    # a CUDA graph removes the launch host time [20, 890), not the cudaFree at 950: same saving as without it
    assert r.findings["PD103"]["saving_us_per_step"] == 870
    big = TraceBuilder()
    big.step(1, 0, 1000)
    big.cpu_op("aten::empty", 0, 1000)
    big.launch(ADD, launch_ts=10, start=20, dur=100)
    big.runtime("hipFree", 130, 800)  # 800 of the 900 µs 'host busy' idle (0–20, 120–1000) inside hipFree
    from analysed import rank_analysis

    dev = rank_analysis(big.write(tmp_path / "hipfree.json")).ranks[0].primary
    assert dev.notes == [
        "89% of the idle charged to 'host busy, nothing queued' (0.8 ms) is spent inside hipFree "
        "calls: a blocking runtime call, not launch overhead"
    ]
    assert "PD103" in run_rules([tmp_path / "hipfree.json"], ["PD103"]).passed


def test_pd103_message_says_what_it_subtracts_from_the_breakdown_row(tmp_path):
    tb = _launch_trace(2)  # 30 kernels of 2 µs at [22 + 30 i, 24 + 30 i): busy 60 µs of the 1000 µs step
    tb.runtime("cudaFree", 950, 40)
    f = run_tb(tb, tmp_path, ["PD103"]).findings["PD103"]
    ev = f["evidence"]
    # the host is inside aten::add the whole step, so all 1000 - 60 = 940 µs of idle is the breakdown's
    # "host busy, nothing queued" row; the 40 µs inside cudaFree [950, 990) (the last kernel ended at 894) is
    # left out of the launch idle: 900 µs, and the message says so
    assert ev["breakdown_launch_idle_ms"] == 0.94 and ev["launch_idle_ms"] == 0.9
    assert '"idle: host busy, nothing queued" row, 0.94 ms, less 0.04 ms inside Optimizer.step' in f["message"]
    assert f["message"].startswith("The device idles 0.90 ms per step")


def test_pd103_message_quotes_the_breakdown_row_when_nothing_is_subtracted(tmp_path):
    f = run_tb(_launch_trace(2), tmp_path, ["PD103"]).findings["PD103"]
    # no cudaFree, no Optimizer.step: the launch idle is the row, 940 µs
    assert f["evidence"]["launch_idle_ms"] == f["evidence"]["breakdown_launch_idle_ms"] == 0.94
    assert 'launch work (measured: the breakdown\'s "idle: host busy, nothing queued" row);' in f["message"]


def test_pd103_method_adds_no_shown_steps_note_when_every_step_shows_it(tmp_path):
    f = run_tb(_launch_trace(2), tmp_path, ["PD103"]).findings["PD103"]
    assert f["steps"] == [1] and "the problem shows in" not in f["saving_method"]


def test_pd103_on_rocm_speaks_of_hip_graphs_in_every_line(tmp_path):
    # the tiny-kernel trace above, launched with hipLaunchKernel on an MI300X: the same 870 µs replayed saving,
    # and the words of the trace's own runtime (HIP graphs, which torch.cuda.graphs drives on ROCm)
    from perfdoctor import pipeline

    tb = TraceBuilder(device_name="AMD Instinct MI300X")
    tb.step(1, 0, 1000)
    tb.cpu_op("aten::add", 0, 1000)
    for i in range(30):
        tb.launch(ADD, launch_ts=10 + 30 * i, start=22 + 30 * i, dur=2, launch_dur=10, runtime_name="hipLaunchKernel")
    f = run_tb(tb, tmp_path, ["PD103"]).findings["PD103"]
    assert f["saving_us_per_step"] == 870 and f["evidence"]["graph_api"] == "HIP"
    assert "in one HIP graph" in f["message"] and "one HIP graph" in f["saving_method"]
    assert "HIP graphs" in f["fix"]
    rep = pipeline.build_report([str(tmp_path / "t.json")])
    assert rep.verdict.startswith("host launch-bound: replaying the step with its launches in HIP graphs saves about")
    text = rep.verdict + f["message"] + f["saving_method"] + f["fix"] + f["headline"]
    assert "CUDA graph" not in text
