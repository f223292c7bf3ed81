"""PD101 dataloader-starvation: a firing and a silent case (and skips), answers worked out by hand (µs).

Moved from tests/test_rules_synthetic.py (issue 9: one test file per rule).
"""

from rules_helpers import DL, SGEMM, run_tb
from tracebuilder import TraceBuilder


def test_pd101_fires_when_device_waits_on_dataloader(tmp_path):
    tb = TraceBuilder()
    tb.step(1, 0, 1000)
    tb.annotation(DL, 0, 400)
    tb.launch(SGEMM, launch_ts=410, start=420, dur=480)  # [420, 900)
    r = run_tb(tb, tmp_path, ["PD101"])
    f = r.findings["PD101"]
    # replayed with the fetch a hand-off: the launch moves from 410 to 10, the kernel runs [20, 500), the host
    # annotation ends at 600: 1000 -> 600 (the 20 µs of launch after the fetch were never the DataLoader's)
    assert f["saving_us_per_step"] == 400
    assert f["saving_pct_of_step"] == 40.0
    assert f["severity"] == "high"
    assert f["steps"] == [1]
    assert "420" not in f["message"] and "0.4 ms" in f["message"]
    assert f["evidence"]["fetches_per_step"] == 1.0


def test_pd101_silent_when_fetch_is_short(tmp_path):
    tb = TraceBuilder()
    tb.step(1, 0, 1000)
    tb.annotation(DL, 0, 10)
    tb.launch(SGEMM, launch_ts=12, start=20, dur=970)
    r = run_tb(tb, tmp_path, ["PD101"])
    assert "PD101" in r.passed
    # replayed: the kernel runs [10, 980), the annotation ends at 990
    assert r.metrics("PD101")["dataloader_wait_us"] == 10


def test_pd101_skipped_without_dataloader_events(tmp_path):
    tb = TraceBuilder()
    tb.step(1, 0, 1000)
    tb.launch(SGEMM, launch_ts=12, start=20, dur=970)
    r = run_tb(tb, tmp_path, ["PD101"])
    assert "DataLoader" in r.skipped["PD101"]


def test_pd101_skipped_without_profiler_steps(tmp_path):
    tb = TraceBuilder()
    tb.annotation(DL, 0, 400)
    tb.launch(SGEMM, launch_ts=410, start=420, dur=480)
    r = run_tb(tb, tmp_path, ["PD101"])
    assert "ProfilerStep" in r.skipped["PD101"]


def test_pd101_on_a_cpu_only_run_speaks_of_the_training_loop_not_a_device(tmp_path):
    # three 1,000 µs CPU-only steps: __next__ 0-400, then one addmm 410-910. The loop spends 400 µs per step in
    # the DataLoader, 40% of the step; prefetched, the addmm starts at 10: 1,000 -> 600 µs (nothing to copy)
    tb = TraceBuilder(device_name=None)
    for n in range(3):
        tb.step(n + 1, 1000 * n, 1000)
        tb.annotation(DL, 1000 * n, 400)
        tb.cpu_op("aten::addmm", 1000 * n + 410, 500)
    f = run_tb(tb, tmp_path, ["PD101"]).findings["PD101"]
    assert f["saving_us_per_step"] == 400
    assert f["headline"] == "DataLoader stalls the training loop 0.4 ms per step (40% of the step)"
    text = " ".join(f[k] for k in ("message", "saving_method", "fix", "example_before", "example_after"))
    for gpu_word in ("device", "GPU", "V100", "pin_memory", ".cuda(", "non_blocking"):
        assert gpu_word not in text, gpu_word
    assert "num_workers" in f["fix"] and "set_num_threads" in f["example_after"]
