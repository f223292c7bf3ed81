"""`perfdoctor report` end to end: outputs, exit codes, never overwriting."""

import json
import subprocess
import sys

from conftest import shared_trace
from tracebuilder import TraceBuilder


def run(*args):
    return subprocess.run([sys.executable, "-m", "perfdoctor", *args], capture_output=True, text=True)


def small_trace(tmp_path):
    tb = TraceBuilder()
    tb.step(1, 0, 1000)
    tb.launch("volta_sgemm_128x64_nn", launch_ts=10, start=100, dur=300)
    return str(tb.write(tmp_path / "t.json"))


def test_json_to_stdout_has_versioned_schema(tmp_path):
    r = run("report", small_trace(tmp_path), "--format", "json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["schema"] == "perfdoctor.report" and doc["schema_version"] == 1
    step = doc["ranks"][0]["devices"][0]["steps"][0]
    assert step["dur_us"] == 1000 and step["busy_us"] == 300 and step["categories_us"]["matmul"] == 300


def test_output_file_never_overwritten_without_force(tmp_path):
    trace = small_trace(tmp_path)
    out = tmp_path / "report.json"
    out.write_text("precious")
    r = run("report", trace, "-o", str(out))
    assert r.returncode == 2 and "already exists" in r.stderr and out.read_text() == "precious"
    r = run("report", trace, "-o", str(out), "--force")
    assert r.returncode == 0 and json.loads(out.read_text())["schema_version"] == 1


def test_refuses_to_write_over_input(tmp_path):
    trace = small_trace(tmp_path)
    before = open(trace).read()
    r = run("report", trace, "-o", trace, "--force")
    assert r.returncode == 2 and "input" in r.stderr and open(trace).read() == before


def test_terminal_summary_on_real_trace():
    r = run("report", str(shared_trace("kineto__resnet50_num_workers_0__worker0.pt.trace.json.gz")), "--width", "100")
    assert r.returncode == 0, r.stderr
    assert "Tesla V100-DGXS-32GB" in r.stdout
    assert "idle: waiting for DataLoader" in r.stdout and "33.5%" in r.stdout
    assert "177.59 ms" in r.stdout  # mean step time (TensorBoard plugin: 177.6 ms)


def test_missing_file_is_one_line(tmp_path):
    r = run("report", str(tmp_path / "nope.json"))
    assert r.returncode == 2 and "Traceback" not in r.stderr and "no such file" in r.stderr
