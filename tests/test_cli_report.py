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
    assert doc["schema"] == "perfdoctor.report" and doc["schema_version"] == 2
    step = doc["ranks"][0]["devices"][0]["steps"][0]
    assert step["dur_us"] == 1000 and step["busy_us"] == 300 and step["categories_us"]["matmul"] == 300


def test_output_file_never_overwritten_without_force(tmp_path):
    trace = small_trace(tmp_path)
    out = tmp_path / "report.json"
    out.write_text("precious")
    r = run("report", trace, "-o", str(out))
    assert r.returncode == 2 and "already exists" in r.stderr and out.read_text() == "precious"
    r = run("report", trace, "-o", str(out), "--force")
    assert r.returncode == 0 and json.loads(out.read_text())["schema_version"] == 2


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
        r = subprocess.run(
            [sys.executable, "-m", "perfdoctor", "report", t], stdout=full, stderr=subprocess.PIPE, text=True
        )
    assert r.returncode == 2 and "No space left on device" in r.stderr and "Traceback" not in r.stderr


def test_closed_pipe_is_a_quiet_exit_0(tmp_path):
    t = small_trace(tmp_path)
    for extra in ([], ["--format", "md"]):
        p = subprocess.Popen(
            [sys.executable, "-m", "perfdoctor", "report", t, *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        p.stdout.read(5)
        p.stdout.close()  # `perfdoctor report X | head -c 5`
        err = p.stderr.read().decode()
        assert p.wait() == 0 and "Traceback" not in err and "Broken pipe" not in err


def test_bad_model_flags_are_one_line_errors(tmp_path):
    t = small_trace(tmp_path)
    base = ["--params", "1e9", "--layers", "2", "--seq-len", "16"]
    cases = [
        (["--heads", "0", "--d-model", "0", "--tokens-per-step", "1"], "all sizes must be positive"),
        (["--heads", "7", "--d-model", "512", "--tokens-per-step", "1"], "d_model 512 is not divisible by n_heads 7"),
        (["--heads", "8", "--d-model", "512", "--tokens-per-step", "-1"], "--tokens-per-step must be positive"),
    ]
    for extra, msg in cases:
        r = run("report", t, *base, *extra)
        assert r.returncode == 2 and msg in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_two_traces_of_one_rank_are_refused(tmp_path):
    # each holds one step: a trace without a timed event is refused before ranks are compared
    a, b = (
        str(TraceBuilder(rank=0, world_size=2).step(1, 0, 1000).write(tmp_path / name))
        for name in ("run1.json", "run2.json")
    )
    r = run("report", a, b)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "rank 0 is also the rank of" in r.stderr and "report each file separately" in r.stderr
    assert f"perfdoctor diff {a} {b}" in r.stderr


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
    assert err.strip().splitlines() == [
        "perfdoctor: error: /sys/perfdoctor-x.html: cannot write the report there (Permission denied)"
    ]
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


def _one_gpu_run(path, device_name, rank=None, world_size=None):
    tb = TraceBuilder(device_name=device_name, rank=rank, world_size=world_size)
    tb.step(1, 0, 1000).step(2, 1000, 1000)
    tb.launch("volta_sgemm_128x64_nn", launch_ts=10, start=100, dur=300)
    tb.launch("volta_sgemm_128x64_nn", launch_ts=1010, start=1100, dur=300)
    return str(tb.write(path))


def test_two_runs_on_different_gpus_are_not_one_job(tmp_path):
    # neither trace names a rank, they name different GPUs and hold no collective: two runs, refused
    a = _one_gpu_run(tmp_path / "a.json", "Tesla V100-DGXS-32GB")
    b = _one_gpu_run(tmp_path / "b.json", "NVIDIA GeForce RTX 3060")
    r = run("report", a, b)
    assert r.returncode == 2 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "look like separate runs, not ranks of one job" in r.stderr
    assert "1 × Tesla V100-DGXS-32GB vs 1 × NVIDIA GeForce RTX 3060" in r.stderr
    assert f"perfdoctor diff {a} {b}" in r.stderr


def test_real_traces_of_two_runs_are_refused():
    # the case: a V100 ResNet (rank 0 from its file name "worker0") and an RTX 3060 LM (no rank)
    a = str(shared_trace("kineto__resnet50_num_workers_0__worker0.pt.trace.json.gz"))
    b = str(shared_trace("luatil__rtx3060_compile_default__trace_04.json"))
    r = run("report", a, b)
    assert r.returncode == 2 and "look like separate runs" in r.stderr and f"perfdoctor diff {a} {b}" in r.stderr


def test_ranks_taken_from_input_order_are_named(tmp_path):
    # same GPU model, no rank in either trace: one job of 2 ranks, numbered by position, with a warning each
    a = _one_gpu_run(tmp_path / "a.json", "NVIDIA A100-SXM4-80GB")
    b = _one_gpu_run(tmp_path / "b.json", "NVIDIA A100-SXM4-80GB")
    r = run("report", a, b, "--format", "json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert [x["rank"] for x in doc["ranks"]] == [0, 1]
    renumbered = [w for w in doc["warnings"] if "the trace names no rank" in w]
    assert renumbered == [
        f"{a}: the trace names no rank (no distributedInfo.rank, none in the file name); "
        "taken as rank 0, its position among the inputs",
        f"{b}: the trace names no rank (no distributedInfo.rank, none in the file name); "
        "taken as rank 1, its position among the inputs",
    ]


def test_named_ranks_on_different_gpus_stay_one_job(tmp_path):
    # distributedInfo says rank 0 and rank 1 of a world of 2: a (heterogeneous) job, not refused, no renumbering
    a = _one_gpu_run(tmp_path / "a.json", "Tesla V100-DGXS-32GB", rank=0, world_size=2)
    b = _one_gpu_run(tmp_path / "b.json", "NVIDIA GeForce RTX 3060", rank=1, world_size=2)
    r = run("report", a, b, "--format", "json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert [x["rank"] for x in doc["ranks"]] == [0, 1]
    assert not any("the trace names no rank" in w for w in doc["warnings"])


def test_same_rank_on_different_gpus_reads_as_two_runs(tmp_path):
    # both say rank 0 of a world of 2 but name different GPUs and hold no collective: the separate-runs line
    a = _one_gpu_run(tmp_path / "a.json", "Tesla V100-DGXS-32GB", rank=0, world_size=2)
    b = _one_gpu_run(tmp_path / "b.json", "NVIDIA GeForce RTX 3060", rank=0, world_size=2)
    r = run("report", a, b)
    assert r.returncode == 2 and "look like separate runs" in r.stderr and "also the rank of" not in r.stderr
    assert f"perfdoctor diff {a} {b}" in r.stderr


def closed_pipe_run(*args, cwd=None):
    """``perfdoctor ARGS | head -0``: stdout is a pipe whose reader is gone before the first write (so the write
    fails whatever the output's size); returns (exit code, stderr)."""
    import os

    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        r = subprocess.run(
            [sys.executable, "-m", "perfdoctor", *args], stdout=write_end, stderr=subprocess.PIPE, text=True, cwd=cwd
        )
    finally:
        os.close(write_end)
    return r.returncode, r.stderr


def test_closed_pipe_keeps_the_gate_exit_code_and_writes_o_files(tmp_path):
    """A reader that closes stdout early (`| head -1`) does not turn a failing gate into exit 0, and the -o file
    is written before anything goes to stdout."""
    from test_diff import steps_trace

    # the gate's verdict, without a pipe: resnet50 nw0 has a high finding (33% of the step waits on the
    # DataLoader); AFTER is 10% slower than BEFORE in every step, so --fail-on-regression 5 fires
    trace = str(shared_trace("kineto__resnet50_num_workers_0__worker0.pt.trace.json.gz"))
    assert run("report", trace, "--fail-on", "high").returncode == 1
    b = steps_trace(tmp_path / "b.json", [1000, 1010, 990, 1000, 1005, 995], [("k", 300)])
    a = steps_trace(tmp_path / "a.json", [1100, 1111, 1089, 1100, 1105, 1095], [("k", 400)])
    assert run("diff", str(b), str(a), "--fail-on-regression", "5").returncode == 1
    cases = [
        (["report", trace, "--fail-on", "high"], 1),
        (["report", trace, "--fail-on", "high", "--format", "json"], 1),
        (["diff", str(b), str(a), "--fail-on-regression", "5"], 1),
        (["diff", str(b), str(a), "--fail-on-regression", "5", "--format", "md"], 1),
        (["report", trace, "-o", str(tmp_path / "p.md")], 0),
        (["diff", str(b), str(a), "-o", str(tmp_path / "d.json")], 0),
    ]
    for args, want in cases:
        rc, err = closed_pipe_run(*args)
        assert rc == want and "Traceback" not in err and "Broken pipe" not in err, (args, rc, err)
    assert (tmp_path / "p.md").read_text().startswith("# ")
    assert json.loads((tmp_path / "d.json").read_text())["verdict"] == "slower"


def test_o_never_overwrites_a_run_directorys_inputs_nor_takes_an_empty_name_or_a_directory(tmp_path):
    """-o over a run directory's run.json, steps.csv, rank0.json or trace is refused even with --force (the
    guard used to protect only the paths given); -o "" is an error (it was silently ignored); -o DIR says it is
    a directory (it said "cannot tell the report format from the extension")."""
    import shutil
    from pathlib import Path

    run_dir = tmp_path / "run"
    shutil.copytree(Path(__file__).parent.parent / "sample_traces" / "tiny_gpt_cpu_run", run_dir)
    before = {p.name: p.read_bytes() for p in run_dir.iterdir()}
    assert sorted(before) == ["rank0.json", "run.json", "steps.csv", "trace.rank0.pt.trace.json.gz"]
    for name in before:
        target = str(run_dir / name)
        for cmd in (["report", str(run_dir)], ["diff", str(run_dir), str(run_dir)]):
            r = run(*cmd, "-o", target, "--force")
            assert r.returncode == 2 and "Traceback" not in r.stderr, (cmd, name, r.stderr)
            assert len(r.stderr.strip().splitlines()) == 1 and "refusing to write" in r.stderr, r.stderr
    assert {p.name: p.read_bytes() for p in run_dir.iterdir()} == before
    for cmd in (["report", str(run_dir)], ["diff", str(run_dir), str(run_dir)]):
        r = run(*cmd, "-o", "")
        assert r.returncode == 2 and r.stderr.strip() == (
            "perfdoctor: error: -o: empty file name; give the report file, e.g. -o report.html"
        )
        r = run(*cmd, "-o", str(tmp_path))
        assert r.returncode == 2 and r.stderr.strip().startswith(f"perfdoctor: error: {tmp_path}: is a directory")
    # a report next to the run's data is still written, and rewritten with --force
    r = run("report", str(run_dir), "-o", str(run_dir / "report.json"), "--force")
    assert r.returncode == 0 and json.loads((run_dir / "report.json").read_text())["schema"] == "perfdoctor.report"


def test_run_dir_with_a_corrupt_trace_is_reported_from_its_run_data(tmp_path):
    """A run directory whose trace is cut short (a Ctrl-C while `perfdoctor profile` exported it, before
    exports were atomic) is reported from its run data with one warning naming the file, not exit 2."""
    import gzip
    import shutil
    import zlib
    from pathlib import Path

    run_dir = tmp_path / "run"
    shutil.copytree(Path(__file__).parent.parent / "sample_traces" / "tiny_gpt_cpu_run", run_dir)
    trace = run_dir / "trace.rank0.pt.trace.json.gz"
    raw = bytearray(trace.read_bytes())
    raw[-8:-4] = (zlib.crc32(b"not the data") & 0xFFFFFFFF).to_bytes(4, "little")  # a wrong CRC, as observed
    trace.write_bytes(bytes(raw))
    try:
        gzip.decompress(bytes(raw))
        raise AssertionError("the trace should be corrupt")
    except gzip.BadGzipFile:
        pass
    steps_in_csv = len((run_dir / "steps.csv").read_text().strip().splitlines()) - 1
    r = run("report", str(run_dir), "--format", "json", "--width", "400")
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    doc = json.loads(r.stdout)
    assert doc["ranks"] == [] and doc["run"]["steps_completed"] == steps_in_csv
    warnings = [w for w in doc["warnings"] if str(trace) in w]
    assert len(warnings) == 1 and "trace analysis failed" in warnings[0] and "\n" not in warnings[0]


def test_the_same_file_twice_is_said_so_and_one_rank_is_singular(tmp_path):
    """`report X X` says the same file was given twice (it suggested `perfdoctor diff X X`); a job of one
    analysed rank and one failed trace reads "1 rank analysed" (it read "1 ranks analysed")."""
    t = small_trace(tmp_path)
    for args in ([t, t], [t, str(tmp_path / "." / "t.json")]):
        r = run("report", *args)
        assert r.returncode == 2 and "Traceback" not in r.stderr and "perfdoctor diff" not in r.stderr
        assert r.stderr.strip() == (
            f"perfdoctor: error: {args[1]}: the same file was given twice ({t} and {args[1]}); give each trace or "
            "directory once"
        )
    import shutil

    job = tmp_path / "job"
    job.mkdir()
    shutil.copy(shared_trace("hta__trace_filter__sampled_rank-0.json.gz"), job)
    (job / "rank1.json").write_text("{not json")
    r = run("report", str(job), "--jobs", "1", "--width", "200")
    assert r.returncode == 0, r.stderr
    assert "Job: 1 rank analysed;" in r.stdout and "1 ranks" not in r.stdout


def test_own_report_and_diff_json_in_a_trace_directory_are_left_out_with_a_note(tmp_path):
    """A perfdoctor report (or diff) JSON beside the traces of a directory is recognised by its schema and left
    out with a note; it used to be analysed as a trace ("1 trace(s) could not be analysed")."""
    import shutil

    job = tmp_path / "job"
    job.mkdir()
    trace = job / "hta__trace_filter__sampled_rank-0.json.gz"
    shutil.copy(shared_trace(trace.name), trace)
    alone = run("report", str(trace), "--format", "json")
    assert alone.returncode == 0, alone.stderr
    (job / "rep.json").write_text(alone.stdout)  # what `perfdoctor report T --format json > rep.json` writes
    d = run("diff", str(trace), str(trace), "-o", str(job / "d.json"))
    assert d.returncode == 0, d.stderr
    r = run("report", str(job), "--format", "json")
    assert r.returncode == 0, r.stderr
    err = " ".join(r.stderr.split())  # the notes as printed, unwrapped
    for name in ("d.json", "rep.json"):
        assert f"note: {job / name}: a perfdoctor report, not a trace; left out" in err
    assert err.count("note: ") == 2 and "could not be analysed" not in err
    doc = json.loads(r.stdout)
    assert not doc.get("job") and doc["ranks"] == json.loads(alone.stdout)["ranks"]


def test_model_flops_flags_must_be_finite(tmp_path):
    """--params nan reached the report model and failed there with msgspec's 'Expected float, got null';
    now the flag is named in one line, exit 2."""
    flags = ["--layers", "2", "--heads", "2", "--d-model", "8", "--seq-len", "4"]
    r = run("report", small_trace(tmp_path), "--params", "nan", "--tokens-per-step", "16", *flags)
    assert (r.returncode, r.stderr) == (2, "perfdoctor: error: --params: must be a finite number, got nan\n")
    r = run("report", small_trace(tmp_path), "--params", "1e6", "--tokens-per-step=-inf", *flags)
    assert (r.returncode, r.stderr) == (2, "perfdoctor: error: --tokens-per-step: must be a finite number, got -inf\n")
