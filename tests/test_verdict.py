"""The one-line verdict (issue 11 "also seen"), from the top finding or the breakdown."""

import msgspec
import pytest
from rules_helpers import DL, SGEMM
from tracebuilder import TraceBuilder

from perfdoctor import pipeline
from perfdoctor.model.report import FindingSection
from perfdoctor.model.verdict import verdict


def _report(tb, tmp_path):
    return pipeline.build_report([str(tb.write(tmp_path / "t.json"))])


def test_verdict_names_the_top_finding(tmp_path):
    tb = TraceBuilder()
    for n in range(3):
        s = 1000 * n
        tb.step(n + 1, s, 1000)
        tb.annotation(DL, s, 500)  # half of each step fetching the batch
        tb.launch(SGEMM, launch_ts=s + 510, start=s + 520, dur=470)
    rep = _report(tb, tmp_path)
    top = next(f for f in rep.findings if f.position == 1)
    assert top.code == "PD101"
    assert top.replayed  # a replayed point estimate: "about", not "up to" (F16)
    assert rep.verdict == (
        f"input-bound: replaying the step with batches prefetched by DataLoader workers saves about "
        f"{top.saving_pct_of_step:.0f}% of it (PD101 dataloader-starvation)"
    )


def test_verdict_from_the_breakdown_when_no_finding_matters(tmp_path):
    tb = TraceBuilder()
    for n in range(3):
        s = 1000 * n
        tb.step(n + 1, s, 1000)
        tb.launch("sm80_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x32", launch_ts=s + 1, start=s + 2, dur=995)
    rep = _report(tb, tmp_path)
    assert rep.verdict.startswith("busy: the device works 100% of each step (largest: matmul")


def test_no_verdict_on_a_gpu_trace_without_device_activity(tmp_path):
    tb = TraceBuilder()  # deviceProperties name an A100
    tb.step(1, 0, 1000)
    tb.cpu_op("aten::mm", 10, 500)
    rep = _report(tb, tmp_path)
    assert rep.verdict.startswith("no verdict: the trace names GPUs but holds no GPU activity")


def test_resnet50_num_workers_0_is_input_bound_not_launch_bound():
    """F2: CUDA graphs replayed alone on ResNet50 V100 num_workers=0 saved 63.8 ms, ranking PD103 above PD101
    (59.0 ms), but most of it was the DataLoader fetch hidden behind device work once the host is free; the same
    fix on the num_workers=4 recording saved 29.2 ms. Measured on top of prefetched batches, PD103's saving is
    the launch overhead: it agrees with the breakdown's measured launch idle (16.2 ms per step, a different
    model: the idle the critical path attributes to a host busy with nothing queued), and PD101 ranks first."""
    from conftest import shared_trace

    path = shared_trace("kineto__resnet50_num_workers_0__worker0.pt.trace.json.gz")
    rep = pipeline.build([str(path)]).model
    by = {f.code: f for f in rep.findings}
    assert by["PD101"].position == 1 and by["PD103"].position > 1
    assert rep.verdict.startswith("input-bound: replaying the step with batches prefetched")
    dev = rep.ranks[0].primary
    launch_idle_us = sum(s.idle_causes_us.get("host_launch_bound", 0.0) for s in dev.steps) / len(dev.steps)
    assert abs(by["PD103"].saving_us_per_step - launch_idle_us) < 0.05 * launch_idle_us
    assert by["PD103"].evidence["saving_alone_ms"] > by["PD101"].saving_us_per_step / 1000  # graphs alone: 63.8


def test_verdict_of_an_upper_bound_says_what_fixing_saves_not_what_the_time_goes_to(tmp_path):
    """The verdict quotes the saving, never as a share of the step that "goes to" the problem. By hand: an A100
    step of 1000 µs with a 400 µs FP32 SGEMM (40% of the step, as the finding's message says) and no op shapes
    to replay with: PD203's bound is 400 × (1 − 1/8) = 350 µs (A100 tensor-core ÷ FP32 peak 8), 35% of the step."""
    tb = TraceBuilder()
    for n in range(3):
        s = 1000 * n
        tb.step(n + 1, s, 1000)
        tb.launch(SGEMM, launch_ts=s + 5, start=s + 10, dur=400)
        tb.launch(
            "sm80_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x32", launch_ts=s + 20, start=s + 410, dur=585
        )
    rep = _report(tb, tmp_path)
    top = next(f for f in rep.findings if f.position == 1)
    assert top.code == "PD203" and not top.replayed and "40.0% of the step" in top.message
    assert rep.verdict == (
        "FP32 compute: fixing the FP32 GEMMs (tensor cores) saves up to 35% of the step "
        "(PD203 fp32-matmul-without-tensor-cores)"
    )


# -- the measurement's caveats (PD601, PD603) -------------------------------------------------------------------


def _finding(code: str, position: int | None, pct: float, name: str = "rule") -> FindingSection:
    return FindingSection(
        code=code,
        name=name,
        category="c",
        severity="high" if position else "medium",
        position=position,
        rank=None,
        message="m",
        saving_us_per_step=10 * pct,
        saving_pct_of_step=pct,
        saving_method="per-step fixed cost (an upper bound)",
        evidence={},
        steps=[],
        fix="",
        example_before="",
        example_after="",
        references=[],
    )


def test_verdict_names_the_top_finding_and_says_when_the_measurement_is_in_doubt():
    top = _finding("PD202", 1, 11.0, "unfused-elementwise")
    base = verdict([], [top])
    assert (
        base == "elementwise-bound: fixing the unfused elementwise ops saves up to 11% of the step "
        "(PD202 unfused-elementwise)"
    )
    # a 406 ms step on a machine at load 9 was called "small batch ... saves 82%" while PD603
    # said the step times had no single level: the verdict now carries that doubt
    unstable = verdict([], [top, _finding("PD603", None, 0.0)])
    assert (
        unstable == base + "; but the run's step times have no single level (PD603): the shares are of an unstable mean"
    )
    both = verdict([], [top, _finding("PD601", None, 0.0), _finding("PD603", None, 0.0)])
    assert both.startswith(base + "; but the profiled window is a transient, not the steady state (PD601) and ")


def test_verdict_says_when_its_only_step_is_a_fragment_cut_where_the_recording_stops():
    """HTA's Triton example records 1.5 ms of a 13,336 ms ProfilerStep#1 (the profiler's own
    'PyTorch Profiler (0)' span ends inside the step), and the verdict read 'saves up to 100% of the step' of that
    fragment. From the raw JSON: the step's end − the last end of any other event = the cut the warning names."""
    import gzip
    import json

    from conftest import shared_trace

    path = shared_trace("hta__triton_example__triton_example.json.gz")
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    step = next(e for e in events if e.get("name") == "ProfilerStep#1")
    last = max(
        e["ts"] + e.get("dur", 0) for e in events if e is not step and e.get("ph") == "X" and e.get("cat") != "Trace"
    )
    span = next(e for e in events if e.get("cat") == "Trace")
    assert span["ts"] + span["dur"] < step["ts"] + step["dur"]  # the profiler's span ends inside the step
    report = pipeline.build([str(path)]).report
    cut_ms = (step["ts"] + step["dur"] - last) / 1000
    assert any(f"runs {cut_ms:,.1f} ms past the last recorded event" in w for w in report["warnings"]), cut_ms
    assert report["verdict"].endswith(
        "; but the only analysed step is the recorded start of a longer step (the profiler stopped recording inside "
        "it, see the warning): the shares are of that fragment"
    )


def test_verdict_puts_ranks_reading_the_same_data_first_whatever_the_speed():
    same = msgspec.structs.replace(
        _finding("PD307", None, 0.0, "ranks-read-same-data"),
        headline="Ranks 0, 1 read the same input batches at 8 of 8 steps",
    )
    top = _finding("PD202", 1, 11.0, "unfused-elementwise")
    assert verdict([], [top, same]) == (
        "correctness: Ranks 0, 1 read the same input batches at 8 of 8 steps (PD307 ranks-read-same-data); "
        "elementwise-bound: fixing the unfused elementwise ops saves up to 11% of the step (PD202 unfused-elementwise)"
    )
    # alone, with nothing else to say (no rank, no finding with a saving): the fault is the verdict
    assert verdict([], [same]).startswith("correctness: Ranks 0, 1 read the same input batches")


def test_verdict_words_come_from_the_rules_toml(tmp_path):
    """The kind and the fix a verdict names are the rule's ``[verdict]`` words; a malformed table is one error
    naming the file."""
    from perfdoctor.checks.catalogue import VerdictWords, load_catalogue
    from perfdoctor.errors import PerfDoctorError
    from perfdoctor.model.verdict import rule_words

    assert rule_words()["PD101"] == VerdictWords(
        "input-bound", "the wait for the DataLoader", "batches prefetched by DataLoader workers"
    )
    assert rule_words()["PD104"].replayed_with == ""  # never replayed: its verdict says "fixing ... up to"
    bad = tmp_path / "PD101.toml"
    bad.write_text('code = "PD101"\n[verdict]\nkind = "input-bound"\n')  # no "removes"
    with pytest.raises(PerfDoctorError, match=r"PD101.toml: verdict must be a table of strings"):
        load_catalogue([str(tmp_path)])
