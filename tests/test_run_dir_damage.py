"""A run directory damaged the ways real runs damage it.

Each case starts from the real ``sample_traces/tiny_gpt_cpu_run`` (a ``perfdoctor profile`` run of 500
steps, window at steps 205-214) and changes it as a killed run, a broken file or a deleted trace leaves it;
the expected lines are worked out from the files themselves (csv module, run.json), not from perfdoctor.
"""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
from pathlib import Path

from perfdoctor.capture.schedule import ProfileConfig, Schedule

SAMPLE = Path(__file__).parent.parent / "sample_traces" / "tiny_gpt_cpu_run"


def report(run_dir: Path) -> tuple[subprocess.CompletedProcess[str], dict]:
    r = subprocess.run(
        [sys.executable, "-m", "perfdoctor", "report", str(run_dir), "--format", "json", "--width", "400"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    return r, json.loads(r.stdout)


def copy(tmp_path: Path, trace: bool = False) -> Path:
    d = tmp_path / "run"
    shutil.copytree(SAMPLE, d)
    if not trace:  # the steps.csv cases need no trace analysis; the report then covers the run data only
        (d / "trace.rank0.pt.trace.json.gz").unlink()
    return d


def csv_steps(path: Path) -> list[int]:
    with open(path, newline="") as f:
        return [int(r["step"]) for r in csv.DictReader(f)]


def test_a_partial_last_row_is_left_out_with_its_line_and_the_report_goes_on(tmp_path):
    """F16: ``80,5.6`` appended (what SIGKILL leaves) failed the whole report with a schema error."""
    d = copy(tmp_path, trace=True)
    steps = csv_steps(d / "steps.csv")
    n_lines = len((d / "steps.csv").read_text().splitlines())  # header + one line per step
    with open(d / "steps.csv", "a") as f:
        f.write("500,5.6")
    _, doc = report(d)
    n_fields = len((d / "steps.csv").read_text().splitlines()[0].split(","))  # this older file has 11
    want = f"{d / 'steps.csv'}: line {n_lines + 1}: incomplete row (2 of {n_fields} fields;"
    assert [w for w in doc["warnings"] if "steps.csv" in w] == [
        want + " the run stopped while writing it?); that row is left out"
    ]
    assert doc["run"]["steps"]["step"] == steps and len(steps) == 500
    assert doc["ranks"] and doc["run"]["steady_state"] is not None


def test_a_row_that_is_not_a_number_is_left_out_not_a_traceback(tmp_path):
    """F17: ``garbage,,`` raised ValueError out of read_steps_csv."""
    d = copy(tmp_path)
    n_lines = len((d / "steps.csv").read_text().splitlines())
    with open(d / "steps.csv", "a") as f:
        f.write("garbage,,\n")
    _, doc = report(d)
    assert [w for w in doc["warnings"] if "steps.csv" in w] == [
        f"{d / 'steps.csv'}: line {n_lines + 1}: step is not a number ('garbage'); that row is left out"
    ]
    assert len(doc["run"]["steps"]["step"]) == 500


def test_an_empty_steps_file_warns(tmp_path):
    d = copy(tmp_path)
    (d / "steps.csv").write_text("")
    _, doc = report(d)
    assert any(w.startswith(f"{d / 'steps.csv'}: no step rows") for w in doc["warnings"]), doc["warnings"]
    assert doc["run"]["steps"]["step"] == []


def test_a_killed_run_is_said_killed_before_its_window_not_told_to_call_step(tmp_path):
    """F20: run.json left at ``"status": "running"`` (the runner's first write) and 72 rows of steps: it was
    diagnosed "no training step was seen ... call perfdoctor.step()" beside "72 steps ran"."""
    d = copy(tmp_path)
    run = json.loads((d / "run.json").read_text())
    first_keys = list(run)[: list(run).index("status")]  # what the runner writes before the script starts
    (d / "run.json").write_text(json.dumps({**{k: run[k] for k in first_keys}, "status": "running"}))
    lines = (d / "steps.csv").read_text().splitlines()
    (d / "steps.csv").write_text("\n".join(lines[:73]) + "\n")  # header + steps 0-71
    prof = run["profiler"]
    first = prof["wait"] + prof["warmup"]
    assert (first, first + prof["active"] - 1) == (205, 214)  # the window the run never reached
    r, doc = report(d)
    want = (
        f"{d}: run.json still says the run is running and steps.csv stops at step 71 (72 steps): the run was "
        "killed (SIGKILL, e.g. the out-of-memory killer) before its profiled window (steps 205–214)"
    )
    assert doc["no_trace"].startswith(want), doc["no_trace"]
    assert "perfdoctor.step()" not in r.stderr + r.stdout and "no training step" not in r.stderr + r.stdout


def test_a_profiler_conflict_is_not_told_to_call_step(tmp_path):
    """F20: the runner's own error (the script opens torch.profiler) was followed by the no-step advice."""
    d = copy(tmp_path)
    run = json.loads((d / "run.json").read_text())
    error = "the script starts its own torch.profiler (own.py:3); perfdoctor profile already profiles it"
    run.update(
        status="partial",
        partial=True,
        steps_completed=0,
        exit_code=2,
        stop_reason="the script starts its own torch.profiler",
        error=error,
        traces=[],
    )
    run["ranks"][0]["windows"] = []
    (d / "run.json").write_text(json.dumps(run))
    (d / "steps.csv").write_text((d / "steps.csv").read_text().splitlines()[0] + "\n")
    r, doc = report(d)
    assert doc["no_trace"] == (
        f"{d}: the run stopped before its first training step ({error}), so there is no trace and no step series"
    )
    assert "perfdoctor.step()" not in r.stderr + r.stdout


def test_a_deleted_trace_is_said_missing_not_a_run_that_stopped_early(tmp_path):
    """F18: run.json says 500 of 500 steps and the window 205-214 complete, naming its trace file."""
    d = copy(tmp_path)
    r, doc = report(d)
    assert doc["no_trace"].startswith(f"{d / 'trace.rank0.pt.trace.json.gz'}: listed in run.json but missing")
    assert "stopped" not in doc["no_trace"] and "fewer --steps" not in doc["no_trace"]


def test_a_window_at_the_start_of_the_run_is_warned_about():
    """F21: --steps 1 profiled step 0 (wait 0, warm-up 0) without a word. The default schedule (schedule.py:
    active = max(1, min(10, n // 5)), warm-up = min(5, max(1, n // 10)), wait = max(min(2, n - warm-up -
    active), int(0.4 n))) puts the window at step 0 for --steps 1, step 4 for --steps 9 (wait 3, warm-up 1)
    and step 5 for --steps 10 (wait 4, warm-up 1), the first at step 5 or later."""
    one = Schedule.resolve(ProfileConfig(steps=1)).cold_window_warning()
    assert one is not None and one.startswith("the profiled window starts at step 0 (wait 0, warm-up 0)")
    assert "use --steps 10 or more" in one
    nine = Schedule.resolve(ProfileConfig(steps=9)).cold_window_warning()
    assert nine is not None and nine.startswith("the profiled window starts at step 4 (wait 3, warm-up 1)")
    assert Schedule.resolve(ProfileConfig(steps=10)).cold_window_warning() is None
    assert Schedule.resolve(ProfileConfig(steps=500, wait=0, warmup=2)).cold_window_warning() is not None
