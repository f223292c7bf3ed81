"""One denominator for every finding's share (issue 10, reviewer F7).

The expected step times are worked out from the raw Kineto JSON with code that shares nothing with perfdoctor:
step windows as documented in perfdoctor/analysis/steps/steps.py (the host ``ProfilerStep#N`` annotation, stretched to
the end of the last GPU activity whose runtime launch falls inside it; each window starts at its annotation's start
or where the previous one ended, whichever is later, as the TensorBoard plugin's event_parser._update_steps_duration
does). Only which steps are analysed is read from the report.
"""

from __future__ import annotations

import gzip
import io
import json
from pathlib import Path

import pytest
from conftest import shared_trace
from rich.console import Console

GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset"}  # lower-cased: 2021 traces say "Kernel"
RUNTIME_CATS = {"cuda_runtime", "cuda_driver", "runtime"}


def _step_times_us(path: Path) -> dict[int, float]:
    """{N: step time µs} of every ``ProfilerStep#N`` of a raw trace file (see the module docstring)."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as fh:
        events = json.load(fh)["traceEvents"]
    steps = sorted(
        (e["ts"], e["ts"] + e["dur"], int(e["name"].split("#")[1]))
        for e in events
        if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")
    )
    runtime = [e for e in events if str(e.get("cat")).lower() in RUNTIME_CATS and "correlation" in e.get("args", {})]
    launch = {e["args"]["correlation"]: e["ts"] for e in runtime}
    gpu_end = [
        (launch[e["args"]["correlation"]], e["ts"] + e["dur"])
        for e in events
        if str(e.get("cat")).lower() in GPU_CATS and e.get("args", {}).get("correlation") in launch
    ]
    out: dict[int, float] = {}
    prev_end = None
    for ts, end, n in steps:
        last_gpu = max((g for t, g in gpu_end if ts <= t < end), default=end)
        start = ts if prev_end is None else max(prev_end, ts)
        stop = max(end, last_gpu, prev_end if prev_end is not None else end)
        out[n] = stop - start
        prev_end = stop
    return out


def _analysed(report: dict, rank_index: int) -> list[int]:
    r = report["ranks"][rank_index]
    dev = next(d for d in r["devices"] if d["device"] == r["primary_device"])
    return [s["step"] for s in dev["steps"]]


def _assert_every_pct_is_of(report: dict, denom_us: float) -> None:
    assert report["denominator"]["value_us"] == pytest.approx(denom_us, rel=1e-9)
    estimated = [f for f in report["findings"] if f["saving_method"]]
    assert estimated
    for f in estimated:
        assert f["saving_pct_of_step"] == pytest.approx(100 * f["saving_us_per_step"] / denom_us, abs=1e-3), f["code"]


def test_single_rank_every_share_is_of_the_mean_analysed_step():
    from perfdoctor import pipeline

    path = shared_trace("kineto__resnet50_num_workers_0__worker0.pt.trace.json.gz")
    report = pipeline.build([str(path)]).report
    times = _step_times_us(path)
    steps = _analysed(report, 0)
    mean_us = sum(times[n] for n in steps) / len(steps)
    _assert_every_pct_is_of(report, mean_us)
    d = report["denominator"]
    assert f"the mean of {len(steps)} analysed steps (ProfilerStep #{steps[0]}–#{steps[-1]})" in d["definition"]
    assert d["rank"] == report["ranks"][0]["rank"]


def test_multi_rank_every_share_is_of_the_slowest_ranks_mean_step():
    from perfdoctor import pipeline

    folder = shared_trace("param__dlrm_8ranks")
    report = pipeline.build([str(folder)]).report
    means = {}
    for i, r in enumerate(report["ranks"]):
        times = _step_times_us(Path(r["path"]))
        steps = _analysed(report, i)
        means[r["rank"]] = sum(times[n] for n in steps) / len(steps)
    slowest = max(means, key=lambda k: means[k])
    _assert_every_pct_is_of(report, means[slowest])
    # every finding, whichever rank speaks for it, is a share of the job's step, not of its own rank's
    assert report["denominator"]["rank"] == slowest
    assert report["denominator"]["definition"].startswith(f"the job's step: rank {slowest}'s ")
    assert "the longest mean step of 8 ranks" in report["denominator"]["definition"]


def test_every_render_names_the_denominator_once(tmp_path):
    from perfdoctor import pipeline
    from perfdoctor.render.html import render_html
    from perfdoctor.render.markdown import render_markdown
    from perfdoctor.render.terminal import render_terminal

    path = shared_trace("kineto__resnet50_num_workers_0__worker0.pt.trace.json.gz")
    built = pipeline.build([str(path)])
    d = built.report["denominator"]
    text = f"Saving percentages are of {d['value_us'] / 1000:,.2f} ms per step"
    md = render_markdown(built.model)
    page = render_html(built.model)
    console = Console(width=400, record=True, file=io.StringIO())
    render_terminal(built.model, console)
    term = console.export_text()
    for out in (md, page, term):
        assert out.count(text) == 1


def test_a_trace_without_step_markers_is_the_whole_trace_window_once(tmp_path):
    # no ProfilerStep: one step, the whole trace window; the definition said "the the whole trace window"
    from tracebuilder import TraceBuilder

    from perfdoctor import pipeline

    tb = TraceBuilder()
    tb.cpu_op("aten::mm", 0, 1000)
    tb.launch("volta_sgemm_128x64_nn", launch_ts=10, start=20, dur=900)
    built = pipeline.build([str(tb.write(tmp_path / "nosteps.json"))])
    assert built.report["denominator"]["definition"] == "the whole trace window (no step markers: one step), rank 0"


def test_step_windows_start_where_tensorboard_starts_them():
    """ResNet50 nw4: steps #9 and #10 begin at their host annotation, after the previous window ended (the device
    had finished), so TensorBoard's start = max(previous end, host start) differs from a window starting at the
    previous end by 64 and 70 µs; every analysed step time equals the raw-JSON one (mean 141,068.0 µs, the
    plugin's 141.1 ms)."""
    from perfdoctor import pipeline

    path = shared_trace("kineto__resnet50_num_workers_4__worker0.pt.trace.json.gz")
    report = pipeline.build([str(path)]).report
    times = _step_times_us(path)
    r = report["ranks"][0]
    dev = next(d for d in r["devices"] if d["device"] == r["primary_device"])
    got = {s["step"]: s["dur_us"] for s in dev["steps"]}
    assert got == pytest.approx({n: times[n] for n in got}, abs=1e-6)
    assert sum(got.values()) / len(got) == pytest.approx(141_068.0, abs=0.05)


def test_a_profile_run_shares_are_of_its_unprofiled_step():
    """A ``perfdoctor profile`` run: the per-event overhead is (W − S) / N from the raw trace and steps.csv, and
    every share is of the unprofiled step the savings are taken from, which lands on S (issue 10 item 5)."""
    import csv
    import gzip as gz
    import statistics

    from perfdoctor import pipeline

    run = Path(__file__).resolve().parents[1] / "sample_traces" / "tiny_gpt_cpu_run"
    report = pipeline.build([str(run)]).report
    trace = run / "trace.rank0.pt.trace.json.gz"
    times = _step_times_us(trace)
    steps = _analysed(report, 0)
    window_us = sum(times[n] for n in steps) / len(steps)
    first = report["run"]["steady_state"]["steady_start_step"]
    with open(run / "steps.csv", newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if r["profiler_phase"] == "none" and int(r["step"]) >= first]
    steady_us = 1e6 * statistics.median(
        float(r["duration_s"]) - float(r.get("eval_s") or 0) - float(r.get("checkpoint_s") or 0) for r in rows
    )
    with gz.open(trace, "rt") as fh:
        events = json.load(fh)["traceEvents"]
    marks = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if str(e.get("name", "")).startswith("ProfilerStep#"))
    lo, hi = marks[steps[0] - min(times)][0], marks[steps[-1] - min(times)][1]
    n = sum(1 for e in events if e.get("cat") in ("cpu_op", "user_annotation") and lo <= e["ts"] < hi)
    u = report["ranks"][0]["replay"]["unprofiled"]
    assert u["method"] == "overhead"
    assert u["steady_step_us"] == pytest.approx(steady_us)
    assert u["per_event_us"] == pytest.approx((window_us - steady_us) / (n / len(steps)), rel=1e-6)
    assert report["denominator"]["value_us"] == pytest.approx(u["step_us"])
    assert u["step_us"] == pytest.approx(steady_us, rel=0.02)  # the overhead-free replay lands on the run's step
    assert report["denominator"]["definition"].startswith("the unprofiled step: ")
    _assert_every_pct_is_of(report, u["step_us"])


def test_job_denominator_says_mean_and_names_the_longest_median_rank(tmp_path):
    """The header's longest rank (median) and the footer's (mean) differed, unlabelled. By
    hand: rank 0's steps 1000, 1000, 4000 µs (mean 2000, median 1000), rank 1's 1500 × 3 (mean 1500, median
    1500): the denominator is rank 0's 2000 µs mean, "the longest mean step", and rank 1 is named as the
    longest median."""
    from tracebuilder import TraceBuilder

    from perfdoctor import pipeline

    for rank, durs in ((0, [1000, 1000, 4000]), (1, [1500, 1500, 1500])):
        tb = TraceBuilder(device_name=None, rank=rank, world_size=2)
        t = 0
        for i, d in enumerate(durs):
            tb.step(i + 1, t, d)
            tb.cpu_op("aten::mm", t, d - 100)
            t += d
        tb.write(tmp_path / f"rank{rank}.json")
    den = pipeline.build([str(tmp_path)]).report["denominator"]
    assert den["value_us"] == 2000.0 and den["rank"] == 0
    assert "rank 0's mean of 3 analysed steps" in den["definition"]
    assert "the longest mean step of 2 ranks" in den["definition"]
    assert den["definition"].endswith("; rank 1 has the longest median step (the rank spread's statistic)")


def test_the_unprofiled_steps_definition_states_the_page_faults_it_removed():
    """A run whose window took extra page faults: the definition states them and the per-event overhead that is
    left. By hand: W = 75.56 ms, S = 39.86 ms, F = 33.74 ms per step, N = 7,360 events per step: o = (75.56 −
    39.86 − 33.74) ms / 7,360 = 0.266 µs."""
    from perfdoctor.analysis.rank import UnprofiledStep
    from perfdoctor.checks.denominator import _unprofiled_words

    d = {"step_us": 39860.0, "method": "overhead", "per_event_us": 1960.0 / 7360, "events_per_step": 7360.0}
    d |= {"window_step_us": 75560.0, "steady_step_us": 39860.0, "fault_us": 33740.0}
    u = UnprofiledStep.of(d)
    assert u is not None and u.fault_us == 33740.0
    words = _unprofiled_words(u, "mean of 10 analysed steps")
    assert words == (
        "unprofiled step: the mean of 10 analysed steps replayed without the profiler's extra page faults (33.74 ms "
        "per step) and its 0.27 µs per recorded host event (75.56 ms profiled mean step − 39.86 ms median "
        "unprofiled steady step − 33.74 ms of page faults, over 7,360 events per step)"
    )
    # a run that did not count them reads as before
    plain = UnprofiledStep.of({**d, "fault_us": 0.0})
    assert plain is not None and "page faults" not in _unprofiled_words(plain, "mean of 10 analysed steps")
