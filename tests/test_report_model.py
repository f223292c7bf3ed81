"""The typed report model: byte-exact JSON round trip, one-line errors for what is not a report, typed reasons."""

from __future__ import annotations

import typing
from pathlib import Path

import msgspec
import pytest
from conftest import REPO
from reporting import as_report
from tracebuilder import TraceBuilder

from perfdoctor import pipeline
from perfdoctor.errors import PerfDoctorError
from perfdoctor.model import MissingReason, Report, from_json, to_json

BUNDLED = sorted((REPO / "reports").glob("*.json")) + sorted(
    p for p in (REPO / "tests" / "golden").glob("*.json") if p.name != "rules_on_shared_traces.json"
)


@pytest.mark.parametrize("path", BUNDLED, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_bundled_reports_round_trip_byte_exactly(path: Path):
    data = path.read_bytes()
    report = from_json(data, str(path))
    assert isinstance(report, Report) and report.ranks is not None
    assert to_json(report) == data


def test_built_report_equals_its_json_read_back(tmp_path):
    tb = TraceBuilder()
    tb.step(1, 0, 1000)
    tb.launch("volta_sgemm_128x64_nn", launch_ts=10, start=100, dur=300)
    built = pipeline.build([str(tb.write(tmp_path / "t.json"))])
    again = from_json(to_json(built.model))
    assert again == built.model
    assert again.ranks[0].primary.step_time_us.median == 1000.0  # step 0–1000 µs, the kernel ends at 400 µs
    assert again.summary.median_step_us == {0: 1000.0}  # int rank keys survive the JSON's string keys


@pytest.mark.parametrize(
    "data, words",
    [
        (b"", "not valid JSON"),
        (b"{not json", "not valid JSON"),
        (b"[1, 2, 3]", "not an object"),
        (b"42", "not an object"),
        (b'{"traceEvents": []}', "schema None"),
        (b'{"schema": "hta.report", "schema_version": 1}', "schema 'hta.report'"),
        (b'{"schema": "perfdoctor.report", "schema_version": 0}', "schema version 0 is not supported"),
        (b'{"schema": "perfdoctor.report", "schema_version": "1"}', "schema version '1' is not supported"),
        (b'{"schema": "perfdoctor.report", "schema_version": 1}', "damaged perfdoctor report (Object missing required"),
        (
            b'{"schema": "perfdoctor.report", "schema_version": 1, "tool": {"name": "x", "version": 3}}',
            "damaged perfdoctor report",
        ),
    ],
)
def test_what_is_not_a_current_report_is_one_clear_line(data, words):
    with pytest.raises(PerfDoctorError) as err:
        from_json(data, "old.json")
    msg = str(err.value.message if hasattr(err.value, "message") else err.value)
    assert msg.startswith("old.json: ") and words in msg and "\n" not in msg


def test_a_wrong_field_type_names_its_path():
    doc = from_json((REPO / "tests" / "golden" / "synthetic_two_steps.json").read_bytes())
    plain = __import__("orjson").loads(to_json(doc))
    plain["ranks"][0]["devices"][0]["steps"][0]["busy_us"] = "fast"
    with pytest.raises(PerfDoctorError, match=r"\$\.ranks\[0\]\.devices\[0\]\.steps\[0\]\.busy_us"):
        as_report(plain, "edited.json")


def test_mfu_missing_carries_a_typed_reason(tmp_path):
    """No shapes recorded: code no_shapes; no step markers: code no_steps; PD206 skips with the message."""

    tb = TraceBuilder()
    tb.step(1, 0, 1000)
    tb.launch("volta_sgemm_128x64_nn", launch_ts=10, start=100, dur=300)
    from analysed import rank_analysis

    a = rank_analysis(tb.write(tmp_path / "noshape.json"))
    why = a.ranks[0].mfu_missing
    assert a.ranks[0].mfu is None and isinstance(why, MissingReason) and why.code == "no_shapes"
    assert why.message.startswith("no input shapes recorded (profile with record_shapes=True)")

    shaped = TraceBuilder(device_name="NVIDIA A100-SXM4-80GB")  # shapes recorded, but of no op with a FLOP formula
    shaped.step(1, 0, 1000)
    shaped.cpu_op("my_lib::custom_op", 10, 50, input_dims=[[4, 4]], input_type=["float"])
    shaped.launch("my_custom_kernel", launch_ts=20, start=100, dur=800)
    custom = shaped.write(tmp_path / "custom.json")
    c = rank_analysis(custom)
    assert c.ranks[0].mfu_missing == MissingReason(
        code="no_costed_op", message="no op could be costed from the recorded shapes"
    )
    skipped = pipeline.build([str(custom)]).report["skipped_checks"]
    assert [s["reason"] for s in skipped if s["code"] == "PD206"] == [c.ranks[0].mfu_missing.message]

    nostep = TraceBuilder()
    nostep.launch("volta_sgemm_128x64_nn", launch_ts=10, start=100, dur=300)
    nostep_path = nostep.write(tmp_path / "nostep.json")
    b = rank_analysis(nostep_path)
    assert b.ranks[0].mfu_missing == MissingReason(code="no_steps", message="no training steps in the trace")
    report = pipeline.build([str(nostep_path)]).report
    assert report["ranks"][0]["mfu"] is None
    assert report["ranks"][0]["mfu_missing"] == {"code": "no_steps", "message": "no training steps in the trace"}


def test_mfu_reported_means_no_missing_reason(tmp_path):
    """One fp32 1024³ mm in a 1000 µs step with shapes: MFU computed from the op sum, no reason written."""
    tb = TraceBuilder(device_name="NVIDIA A100-SXM4-80GB")
    tb.step(1, 0, 1000)
    tb.cpu_op("aten::mm", 10, 50, input_dims=[[1024, 1024], [1024, 1024]], input_type=["float", "float"])
    tb.launch("ampere_sgemm_128x64_nn", launch_ts=20, start=100, dur=800)
    built = pipeline.build([str(tb.write(tmp_path / "mm.json"))])
    rank = built.model.ranks[0]
    assert rank.mfu is not None and rank.mfu.flops_source == "op_sum"
    assert rank.mfu.mfu == pytest.approx(2 * 1024**3 / 1e-3 / 19.5e12)  # A100 fp32 dense peak 19.5 TFLOP/s
    assert "mfu_missing" not in built.report["ranks"][0]


def test_run_facts_type_what_run_json_holds(tmp_path):
    """The sample run directory's run.json as RunFacts (values read off the file), and a wrong type refused."""
    import json
    import shutil

    from perfdoctor.capture.run_data import load_run_dir

    run = load_run_dir(REPO / "sample_traces" / "tiny_gpt_cpu_run")
    f = run.facts
    assert (f.steps_completed, f.flops_per_step, f.tokens_per_step, f.world_size) == (500, 7650410496, 2048, 1)
    assert f.cpu is not None and f.cpu.logical_cpus == 2 and "amx_bf16" in (f.cpu.flags or [])
    assert f.environment is not None and f.environment.hostname == "vm" and f.environment.torch_threads == 2
    assert f.ranks is not None and [(w.first_step, w.last_step) for w in f.ranks[0].windows] == [(205, 214)]
    assert run.partial is False and run.facts.wall_s == pytest.approx(38.4156, abs=1e-4)

    bad = tmp_path / "run"
    shutil.copytree(REPO / "sample_traces" / "tiny_gpt_cpu_run", bad)
    raw = json.loads((bad / "run.json").read_text())
    raw["steps_completed"] = "many"
    (bad / "run.json").write_text(json.dumps(raw))
    with pytest.raises(PerfDoctorError, match=r"run\.json: unexpected run\.json content .*steps_completed"):
        load_run_dir(bad)


def test_the_report_embeds_the_analysis_types_not_copies():
    """One type per concept: the report's step breakdown, roofline, MFU, steady state, run memory and cross-rank job
    sections are the analyses' own Structs, so a field added to an analysis reaches the report and its JSON (or fails
    the schema document's test) instead of drifting from a second definition."""
    from perfdoctor.analysis.memory import run_memory
    from perfdoctor.analysis.steps import steady_state
    from perfdoctor.analysis.timing import breakdown
    from perfdoctor.analysis.work import mfu, roofline
    from perfdoctor.crossrank import job_section
    from perfdoctor.model import report as m

    shared = {
        m.StepBreakdown: breakdown.StepBreakdown,
        m.StepTotals: breakdown.StepTotals,
        m.Communication: breakdown.Communication,
        m.RooflineResult: roofline.RooflineResult,
        m.RooflineRow: roofline.RooflineRow,
        m.Roofs: roofline.Roofs,
        m.MfuResult: mfu.MfuResult,
        m.SteadyState: steady_state.SteadyState,
        m.Phase: steady_state.Phase,
        m.Growth: run_memory.Growth,
        m.AllocatorCounts: run_memory.AllocatorCounts,
        m.JobSection: job_section.JobSection,
        m.FailedRank: job_section.FailedRank,
        m.Straggler: job_section.Straggler,
        m.BreakdownOutlier: job_section.BreakdownOutlier,
        m.JobCollectiveWait: job_section.JobCollectiveWait,
        m.WorstCollective: job_section.WorstCollective,
        m.CollectivesFree: job_section.CollectivesFree,
    }
    assert all(a is b for a, b in shared.items())
    assert issubclass(m.RunMemorySection, run_memory.RunMemory)
    hints = typing.get_type_hints(m.RankSection)
    assert hints["roofline"] == roofline.RooflineResult | None and hints["mfu"] == mfu.MfuResult | None
    assert typing.get_type_hints(m.DeviceSection)["steps"] == list[breakdown.StepBreakdown]
    assert typing.get_type_hints(m.RunSection)["steady_state"] == steady_state.SteadyState | None
    assert typing.get_type_hints(m.Report)["job"] == job_section.JobSection | msgspec.UnsetType
