"""Every hostile-input reproducer in tests/data/fuzz: a report or one clear line, never a traceback.

The contract (issue 9): ``perfdoctor report FILE`` ends with exit 0/1 and a report, or exit 2 and exactly
one stderr line naming the file and the problem; no traceback, no raw numpy RuntimeWarning, no run longer
than the file's size warrants. Each case also pins what the trace boundary now says about the file.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
from conftest import SHARED_TRACES
from tracebuilder import TraceBuilder

from perfdoctor.cli import main

FUZZ = Path(__file__).resolve().parent / "data" / "fuzz"
# the shared folder the reproducers are copied from (beside the traces; absent in a fresh clone)
SHARED_FUZZ = SHARED_TRACES.parent / "fuzz"

# reproducer -> (exit code 2 for a refusal / None for a report, text the error or a report warning must hold)
EXPECTED: dict[str, tuple[int | None, str]] = {
    "crash01_ZeroDivisionError_pipeline_py_192.json": (None, ""),
    "crash02_RecursionError_reader_py_150.json.gz": (None, "trace metadata nested deeper than 32 levels"),
    "crash03_OverflowError_columns_py_93.json": (2, "'Total Reserved' out of range"),
    "crash04_RecursionError_reader_py_117.json.gz": (2, "nested deeper than 32 levels"),
    "crash05_OverflowError_columns_py_125.json.gz": (None, "5 event(s) with invalid fields dropped: 'id' out of range"),
    "crash06_RecursionError_reader_py_141.json.gz": (None, "1 event(s) with invalid fields dropped: nested deeper"),
    "crash07_OverflowError_columns_py_201": (2, "'In msg nelems' out of range"),
    "crash08_OverflowError_columns_py_202.json": (2, "'Group size' out of range"),
    "crash09_TypeError_json_out_py_14": (2, "nothing to analyse"),
    "crash10_BufferError_splitter_py_227.json.gz": (None, "79 event(s) with invalid fields dropped: 'external id'"),
    "crash11_OverflowError_columns_py_180.json": (2, "'device' out of range"),
    "crash12_OverflowError_columns_py_182.json": (2, "'External id' out of range"),
    "crash13_KeyError_pd201_small_batch_py_46.json": (None, "1 'input_dims' value(s) that are not a JSON list"),
    "crash14_OverflowError_steps_py_124.json": (None, ""),
    "crash15_RecursionError_reader_py_137.json.gz": (None, "1 event(s) with invalid fields dropped: nested deeper"),
    "crash16_OverflowError_svg_py_58.json": (2, "'ts' out of range"),
    "crash17_TypeError_html_py_29": (2, "nothing to analyse"),
    "crash18_OverflowError_columns_py_184_synthetic.json": (2, "'external id' out of range"),
    "crash19_OverflowError_schema_py_85.json": (2, "'ts' out of range"),
    "crash20_TypeError_pd203_fp32_matmul_without_tensor_cores_py_35.json": (
        None,
        "1 trace metadata value(s) of the wrong type or out of range",
    ),
    "crash21_IndexError_host_py_125.json.gz": (None, "246 event(s) with invalid fields dropped: 'dur' out of range"),
    "hang01_case5841.json.gz": (None, ""),
    "absurd01_idle_pct_111_zero_length_steps.json.gz": (None, "step(s) 1 left out"),
}


def trace_path(name: str) -> Path:
    p = FUZZ / name
    return next(p.iterdir()) if p.is_dir() else p


def run_inprocess(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str, list[str]]:
    """``perfdoctor`` in this process: (exit code, stdout, stderr, RuntimeWarnings raised)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err, [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]


def test_every_reproducer_is_listed():
    assert sorted(p.name for p in FUZZ.iterdir() if p.name.startswith(("crash", "hang", "absurd"))) == sorted(EXPECTED)


def test_every_shared_reproducer_is_copied_here():
    """A reproducer added to ../shared/fuzz is a regression test only once it is copied into tests/data/fuzz."""
    if not SHARED_FUZZ.is_dir():
        pytest.skip(f"no shared fuzz folder at {SHARED_FUZZ}: the copies in tests/data/fuzz are tested alone")
    for p in sorted(SHARED_FUZZ.iterdir()):
        if p.name.startswith(("crash", "hang", "absurd")):
            mine = FUZZ / p.name
            assert mine.exists(), f"{p.name} is in {SHARED_FUZZ} but not in tests/data/fuzz"
            pairs = [(f, mine / f.name) for f in sorted(p.iterdir())] if p.is_dir() else [(p, mine)]
            assert all(a.read_bytes() == b.read_bytes() for a, b in pairs), f"{p.name} differs from its copy"


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_reproducer_meets_the_contract(name, capsys, tmp_path):
    path = trace_path(name)
    code, text = EXPECTED[name]
    t0 = time.process_time()  # CPU seconds: wall time on a shared CI machine says little
    got, out, err, runtime_warnings = run_inprocess(["report", str(path), "--format", "json"], capsys)
    cpu_s = time.process_time() - t0
    assert runtime_warnings == []
    if code == 2:
        assert got == 2 and out == ""
        lines = err.strip().splitlines()
        assert len(lines) == 1 and str(path) in lines[0] and text in lines[0], err
        return
    assert got in (0, 1), err
    report = json.loads(out)
    assert report["schema"] == "perfdoctor.report"
    if text:
        assert any(text in w for w in report["warnings"]), report["warnings"]
    if name.startswith("hang"):
        # 50,001 ProfilerStep markers (10 MB of JSON) once took 182 s; the load and analysis are linear now
        # (about 6 s of CPU)
        assert sum(len(d["steps"]) for d in report["ranks"][0]["devices"]) == 50_000
        assert cpu_s < 40, cpu_s
        return
    # the HTML renderer (axis ticks, rank labels) on the same input
    html = tmp_path / "r.html"
    got, _, err, runtime_warnings = run_inprocess(["report", str(path), "--format", "json", "-o", str(html)], capsys)
    assert got in (0, 1) and html.read_text().startswith("<!DOCTYPE html>") and runtime_warnings == [], err


def test_one_reproducer_as_a_process():
    """The same contract seen from outside: one stderr line, no traceback."""
    path = trace_path("crash12_OverflowError_columns_py_182.json")
    r = subprocess.run(
        [sys.executable, "-m", "perfdoctor", "report", str(path), "--format", "json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines() == [
        f"perfdoctor: error: {path}: no valid trace event: 1 event(s) with invalid fields dropped "
        "('External id' out of range (1))"
    ]


def test_zero_length_step_with_model_flops_says_why_mfu_is_missing(capsys):
    """Found by the fuzzer (ProfilerStep markers of 0 µs): MFU asked for a rate over a 0 s step (ValueError)."""
    path = trace_path("crash01_ZeroDivisionError_pipeline_py_192.json")
    argv = [
        "report",
        str(path),
        "--format",
        "json",
        "--params",
        "1e9",
        "--layers",
        "2",
        "--heads",
        "8",
        "--d-model",
        "512",
        "--seq-len",
        "16",
        "--tokens-per-step",
        "16",
    ]
    got, out, err, runtime_warnings = run_inprocess(argv, capsys)
    assert got in (0, 1) and runtime_warnings == [], err
    rank = json.loads(out)["ranks"][0]
    assert rank["mfu"] is None and rank["mfu_missing"]["code"] == "zero_step_time"


def _percentages(node: object) -> list[float]:
    """Every ``*pct`` number in a report (JSON walked with its own code)."""
    if isinstance(node, dict):
        own = [float(v) for k, v in node.items() if k.endswith("pct") and isinstance(v, (int, float))]
        return own + [p for v in node.values() for p in _percentages(v)]
    if isinstance(node, list):
        return [p for v in node for p in _percentages(v)]
    return []


def test_zero_length_steps_after_a_left_out_step_keep_every_share_of_the_step(capsys):
    """Found by the fuzzer: 1,000 zero-length ProfilerStep markers inside the AMD trace's cold ProfilerStep#1;
    PD401 read 111% of the step (the replay pinned the first analysed window's start while the host before it
    moved). From the raw JSON: the analysed windows run from ProfilerStep#1's end (or #2's start, if later) to
    ProfilerStep#2's end (the zero-length ones in between end where #1 does), and the synchronizing calls
    (hipMemcpyWithStream) lie in ProfilerStep#1, which is left out: no analysed step holds one, so no saving and
    no PD401."""
    path = trace_path("absurd01_idle_pct_111_zero_length_steps.json.gz")
    with gzip.open(path, "rt") as fh:
        events = json.load(fh)["traceEvents"]
    marks = {e["name"]: e for e in events if e.get("cat") == "user_annotation" and "ProfilerStep#" in e["name"]}
    end1 = marks["ProfilerStep#1"]["ts"] + marks["ProfilerStep#1"]["dur"]
    end2 = marks["ProfilerStep#2"]["ts"] + marks["ProfilerStep#2"]["dur"]
    zero = [n for n, e in marks.items() if e["dur"] == 0]
    syncs = [e["ts"] for e in events if e.get("name") == "hipMemcpyWithStream"]
    assert len(zero) == 1000 and syncs and all(marks["ProfilerStep#1"]["ts"] <= t < end1 for t in syncs)
    got, out, err, _ = run_inprocess(["report", str(path), "--format", "json"], capsys)
    report = json.loads(out)
    replay = report["ranks"][0]["replay"]
    # windows as the TensorBoard plugin cuts them: the zero-length ones end where #1 does, #2 starts at the later
    # of #1's end and its own annotation's start
    start2 = max(end1, marks["ProfilerStep#2"]["ts"])
    assert replay["recorded_mean_step_us"] == pytest.approx((end2 - start2) / 1001, rel=1e-9)
    assert all(0 <= p <= 100 + 1e-9 for p in _percentages(report)), sorted(_percentages(report))[-3:]  # float sums
    assert "PD401" not in [f["code"] for f in report["findings"]]


def test_a_thousand_zero_length_steps_give_no_share_above_the_whole(tmp_path, capsys):
    """Hand-built: ProfilerStep#1 [0, 1000) with a GEMM and a synchronizing D2H copy, 1,000 zero-length
    ProfilerStep markers at 500 inside it, #2 [1000, 2000) and #3 [2000, 3000) with a GEMM each. The windows
    tile [0, 2320) (#3 is cut at the last recorded event, its GEMM's end at 2020 + 300), over 1,003 steps: a mean
    of 2320 / 1003 µs. Every share of a step in the report stays within 0-100%."""
    tb = TraceBuilder()
    tb.step(1, 0, 1000)
    tb.launch("volta_sgemm_128x64_nn", 10, 20, 300)
    tb.memcpy(400, 410, 5, kind="DtoH (Device -> Pageable)", nbytes=4)
    tb.runtime("cudaStreamSynchronize", 406, 20)
    for k in range(1000):
        tb.step(100 + k, 500, 0)
    for n in (2, 3):
        tb.step(n, 1000 * (n - 1), 1000)
        tb.launch("volta_sgemm_128x64_nn", 1000 * (n - 1) + 10, 1000 * (n - 1) + 20, 300)
    path = tb.write(tmp_path / "zero.json")
    got, out, err, runtime_warnings = run_inprocess(["report", str(path), "--format", "json"], capsys)
    assert got in (0, 1) and runtime_warnings == [], err
    report = json.loads(out)
    assert report["ranks"][0]["replay"]["recorded_mean_step_us"] == pytest.approx(2320 / 1003, rel=1e-9)
    shares = _percentages(report)
    assert shares and all(0 <= p <= 100 + 1e-9 for p in shares), sorted(shares)[-3:]
