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
    assert "idle: waiting for DataLoader" in r.stdout and "33.4%" in r.stdout
    assert "177.59 ms" in r.stdout  # mean step time (TensorBoard plugin: 177.6 ms)


def test_missing_file_is_one_line(tmp_path):
    r = run("report", str(tmp_path / "nope.json"))
    assert r.returncode == 2 and "Traceback" not in r.stderr and "no such file" in r.stderr


def test_unwritable_output_and_full_disk_are_one_line_errors(tmp_path):
    t = small_trace(tmp_path)
    for target in ("/proc/perfdoctor_report.html", "/sys/perfdoctor_report.json"):
        r = run("report", t, "-o", target)
        assert r.returncode == 2 and "Traceback" not in r.stderr
        assert f"{target}: cannot write the report" in r.stderr
    with open("/dev/full", "w") as full:
        r = subprocess.run([sys.executable, "-m", "perfdoctor", "report", t], stdout=full, stderr=subprocess.PIPE,
                           text=True)
    assert r.returncode == 2 and "No space left on device" in r.stderr and "Traceback" not in r.stderr


def test_closed_pipe_is_a_quiet_exit_0(tmp_path):
    t = small_trace(tmp_path)
    for extra in ([], ["--format", "md"]):
        p = subprocess.Popen([sys.executable, "-m", "perfdoctor", "report", t, *extra], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
        p.stdout.read(5)
        p.stdout.close()  # `perfdoctor report X | head -c 5`
        err = p.stderr.read().decode()
        assert p.wait() == 0 and "Traceback" not in err and "Broken pipe" not in err


def test_bad_model_flags_are_one_line_errors(tmp_path):
    t = small_trace(tmp_path)
    base = ["--params", "1e9", "--layers", "2", "--seq-len", "16"]
    cases = [(["--heads", "0", "--d-model", "0", "--tokens-per-step", "1"], "all sizes must be positive"),
             (["--heads", "7", "--d-model", "512", "--tokens-per-step", "1"], "d_model 512 is not divisible by n_heads 7"),
             (["--heads", "8", "--d-model", "512", "--tokens-per-step", "-1"], "--tokens-per-step must be positive")]
    for extra, msg in cases:
        r = run("report", t, *base, *extra)
        assert r.returncode == 2 and msg in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_two_traces_of_one_rank_are_refused(tmp_path):
    # each holds one step: a trace without a timed event is refused before ranks are compared
    a, b = (str(TraceBuilder(rank=0, world_size=2).step(1, 0, 1000).write(tmp_path / name))
            for name in ("run1.json", "run2.json"))
    r = run("report", a, b)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "rank 0 is also the rank of" in r.stderr and "report each file separately" in r.stderr


def test_unwritable_output_fails_before_the_analysis(tmp_path):
    """F15: ``-o`` in a directory that takes no new file is one line, exit 2, before any analysis: nothing on
    stdout (the terminal report used to be printed in full, then the write failed)."""
    from reporting import cli

    tb = TraceBuilder()
    tb.step(1, 0, 1000)
    tb.launch("volta_sgemm_128x64_nn", launch_ts=10, start=100, dur=300)
    trace = str(tb.write(tmp_path / "t.json"))
    rc, out, err = cli("report", trace, "-o", "/sys/perfdoctor-x.html")  # sysfs: not even root can add a file
    assert rc == 2 and out == ""
    assert err.strip().splitlines() == ["perfdoctor: error: /sys/perfdoctor-x.html: cannot write the report there "
                                        "(Permission denied)"]
    # a writable directory: the report is written and the probe leaves nothing behind
    rc, _, err = cli("report", trace, "-o", str(tmp_path / "r.json"))
    assert rc == 0, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json", "t.json"]


def test_jobs_zero_is_refused_in_one_line(tmp_path):
    """F15: ``--jobs 0`` was accepted silently with one input; now exit 2 and one line, whatever the inputs."""
    from reporting import cli

    tb = TraceBuilder()
    tb.step(1, 0, 1000)
    trace = str(tb.write(tmp_path / "t.json"))
    for n in ("0", "-3"):
        rc, out, err = cli("report", trace, "--jobs", n)
        assert rc == 2 and out == ""
        assert err.strip().splitlines() == [f"perfdoctor: error: --jobs must be at least 1 (got {n})"]
