"""Real runs of the example scripts under the in-process runner (torch on CPU)."""

from __future__ import annotations

import csv
import gzip
import json
import os
import textwrap
from pathlib import Path

import pytest

from perfdoctor.capture.run_data import load_run_dir
from perfdoctor.capture.run_section import throughput
from perfdoctor.capture.runner import profile_script, run_profile
from perfdoctor.capture.schedule import ProfileConfig
from perfdoctor.capture.step_record import STEP_FIELDS
from perfdoctor.errors import PerfDoctorError

ROOT = Path(__file__).resolve().parents[1]
TINY_GPT = str(ROOT / "examples" / "tiny_gpt.py")
MLP = str(ROOT / "examples" / "mlp.py")
SMALL_GPT = ["--n-layer", "1", "--d-model", "32", "--seq-len", "32", "--batch-size", "4", "--log-every", "0"]
STEADY_MLP = [
    "--dim",
    "32",
    "--hidden",
    "64",
    "--batch-size",
    "16",
    "--log-every",
    "0",
    "--slow-getitem-ms",
    "1",
    "--threads",
    "1",
]
SMALL_MLP = ["--dim", "32", "--hidden", "64", "--depth", "3", "--batch-size", "16", "--log-every", "0"]


def rows(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def quiet(msg: str) -> None:
    pass


def test_tiny_gpt_run_directory(tmp_path):
    run_dir = profile_script(TINY_GPT, SMALL_GPT, steps=60, out=tmp_path / "run")
    steps = rows(run_dir / "steps.csv")
    assert len(steps) == 60
    assert list(steps[0]) == list(STEP_FIELDS)
    assert [int(r["step"]) for r in steps] == list(range(60))
    assert all(int(r["tokens"]) == 4 * 32 and int(r["samples"]) == 4 for r in steps)
    assert all(int(r["rss_bytes"]) > 10 * 2**20 for r in steps)
    # CPU time per step from the second step on (the first starts at the forward, where none was read): the loop's
    # thread never more than its process (1 ms for the clocks' granularity), the process never more than its
    # cores for the step's wall time
    assert steps[0]["cpu_s"] == "" and steps[0]["main_cpu_s"] == "" and steps[0]["main_wait_s"] == ""
    cores = os.cpu_count() or 1
    for r in steps[1:]:
        cpu, main, wall = float(r["cpu_s"]), float(r["main_cpu_s"]), float(r["duration_s"])
        assert 0 < main <= cpu + 1e-3 and cpu <= cores * wall + 1e-2
        if r["main_wait_s"]:  # Linux: the thread's run-queue wait fits in the step beside its CPU time
            assert 0 <= float(r["main_wait_s"]) and main + float(r["main_wait_s"]) <= wall + 1e-2
    busy = [r for r in steps[1:] if r["machine_cpu_s"]]
    if busy:  # Linux /proc/stat: over the run, the machine's cores were busy at least the process's CPU time and
        # at most every core for the wall time (a 10 ms clock tick of slack per step)
        machine = sum(float(r["machine_cpu_s"]) for r in busy)
        process = sum(float(r["cpu_s"]) for r in busy)
        wall = sum(float(r["duration_s"]) for r in busy)
        assert process - 0.01 * len(busy) <= machine <= cores * wall + 0.01 * len(busy)
    # minor page faults per step from the second step on, whole numbers (getrusage's ru_minflt differences)
    assert steps[0]["minor_faults"] == "" and all(int(r["minor_faults"]) >= 0 for r in steps[1:])
    # default schedule for 60 steps: wait 24, warmup 5, active 10 -> steps 29..38 recorded
    assert [r["profiler_phase"] for r in steps[24:40]] == ["warmup"] * 5 + ["active"] * 10 + ["none"]
    assert steps[1]["profiler_phase"] == "flops"
    run = json.loads((run_dir / "run.json").read_text())
    assert run["status"] == "complete" and run["partial"] is False and run["exit_code"] == 0
    assert run["steps_completed"] == 60
    # the page-fault probe after the run: one fault per 4 KiB page of its 64 MiB mapping
    assert run["ranks"][0]["fault_probe"]["faults"] == 16384 and run["ranks"][0]["fault_probe"]["us_per_fault"] > 0
    assert run["profiler"] == {
        "steps": 60,
        "wait": 24,
        "warmup": 5,
        "active": 10,
        "repeat": 1,
        "record_shapes": True,
        "with_stack": False,
        "profile_memory": True,  # [memory] events on CPU too (docs/profile.md "Memory": what they cost)
        "memory_snapshot": False,
        "trace": True,
    }
    # the limits PD503 projects a growing series against, read at the start
    mem = run["memory"]
    assert mem["host_available_bytes"] > 0 and mem["rss_bytes"] > 0
    assert run["environment"]["torch"].startswith("2.")
    assert run["world_size"] == 1 and run["launcher"] == "single"
    assert run["param_dtypes"] == ["float32"] and run["autocast"] == []
    assert run["tokens_per_step"] == 128 and run["samples_per_step"] == 4
    assert run["traces"] == ["trace.rank0.pt.trace.json.gz"]
    assert isinstance(run["cpu"]["flags"], list)
    trace = json.loads(gzip.open(run_dir / "trace.rank0.pt.trace.json.gz").read())
    names = {e.get("name", "") for e in trace["traceEvents"]}
    assert {f"ProfilerStep#{i}" for i in range(29, 39)} <= names
    assert "aten::scaled_dot_product_attention" in names or any("attention" in n for n in names)
    assert list((run_dir / "tensorboard" / "rank0").glob("events.out.tfevents.*"))


def test_mlp_flops_and_parameter_count_are_exact(tmp_path):
    # 4 linear layers: 32x64, 64x64, 64x64, 64x10 weights; batch 16, no grad accumulation.
    run_dir = profile_script(MLP, SMALL_MLP, steps=20, out=tmp_path / "run")
    run = json.loads((run_dir / "run.json").read_text())
    w_all = 32 * 64 + 64 * 64 + 64 * 64 + 64 * 10
    w_first = 32 * 64
    # forward 2*B*W; backward: weight grads 2*B*W + input grads 2*B*(W - first layer)
    assert run["flops_per_step"] == 2 * 16 * (2 * w_all + (w_all - w_first))
    assert run["parameter_count"] == w_all + 64 + 64 + 64 + 10
    assert run["samples_per_step"] == 16 and run["tokens_per_step"] is None


def test_dataloader_workers_are_recorded_for_pd104(tmp_path):
    # examples/mlp.py iterates one DataLoader with --num-workers; PD104 counts its workers among the busy threads
    import torch.utils.data

    original = torch.utils.data.DataLoader.__iter__
    for workers in (0, 2):
        run_dir = profile_script(
            MLP, [*SMALL_MLP, "--num-workers", str(workers)], steps=8, out=tmp_path / f"w{workers}"
        )
        run = json.loads((run_dir / "run.json").read_text())
        assert run["ranks"][0]["dataloader_workers"] == workers
        assert run["environment"]["dataloader_workers"] == workers
    assert torch.utils.data.DataLoader.__iter__ is original  # the session's wrapper is gone after the run


def test_grad_accum_counts_optimizer_steps_and_autocast_is_seen(tmp_path):
    run_dir = profile_script(MLP, [*SMALL_MLP, "--grad-accum", "3", "--bf16-autocast"], steps=20, out=tmp_path / "run")
    steps = rows(run_dir / "steps.csv")
    assert len(steps) == 20
    assert {int(r["samples"]) for r in steps} == {48}
    run = json.loads((run_dir / "run.json").read_text())
    assert run["autocast"] == ["cpu:bfloat16"] and run["param_dtypes"] == ["float32"]


def test_raise_at_step_50_writes_partial_outputs(tmp_path):
    cfg = ProfileConfig(steps=200, wait=20, warmup=2, active=5)
    result = run_profile(TINY_GPT, [*SMALL_GPT, "--raise-at", "50"], cfg, out=tmp_path / "run", progress=quiet)
    assert result.exit_code == 1 and result.partial
    assert "deliberate failure at step 50" in result.traceback
    assert "runpy" not in result.traceback
    assert len(rows(result.run_dir / "steps.csv")) == 50
    run = json.loads((result.run_dir / "run.json").read_text())
    assert run["partial"] is True and run["status"] == "partial" and run["exit_code"] == 1
    assert "RuntimeError" in run["stop_reason"]
    assert run["traces"] == ["trace.rank0.pt.trace.json.gz"]  # window 22-26 completed
    assert run["ranks"][0]["windows"][0]["complete"] is True


def test_stop_inside_window_keeps_no_incomplete_trace(tmp_path):
    cfg = ProfileConfig(steps=200, wait=45, warmup=2, active=10)
    result = run_profile(TINY_GPT, [*SMALL_GPT, "--raise-at", "50"], cfg, out=tmp_path / "run", progress=quiet)
    run = json.loads((result.run_dir / "run.json").read_text())
    assert run["traces"] == [] and not list(result.run_dir.glob("trace.*"))
    assert run["ranks"][0]["windows"] == [
        {"index": 0, "first_step": 47, "last_step": 56, "complete": False, "path": None}
    ]


def test_script_that_exits_early_is_partial(tmp_path):
    result = run_profile(
        MLP, [*SMALL_MLP, "--steps", "30"], ProfileConfig(steps=100, wait=5), out=tmp_path / "run", progress=quiet
    )
    assert result.exit_code == 0 and result.partial
    assert result.reason == "script finished after 30 of 100 steps"
    assert len(rows(result.run_dir / "steps.csv")) == 30


def test_stopping_skips_the_scripts_remaining_work(tmp_path, capsys):
    ckpt = tmp_path / "ckpt.pt"
    profile_script(MLP, [*SMALL_MLP, "--ckpt", str(ckpt)], steps=15, out=tmp_path / "run")
    out = capsys.readouterr().out
    assert not ckpt.exists() and "final eval loss" not in out


def test_sys_exit_status_is_propagated(tmp_path):
    script = tmp_path / "exits.py"
    script.write_text(
        textwrap.dedent("""
        import sys, torch
        m = torch.nn.Linear(4, 4); opt = torch.optim.SGD(m.parameters(), lr=0.1)
        for i in range(10):
            m(torch.randn(2, 4)).sum().backward(); opt.step()
        sys.exit(3)
    """)
    )
    result = run_profile(str(script), [], ProfileConfig(steps=50), out=tmp_path / "run", progress=quiet)
    assert result.exit_code == 3 and result.partial and result.steps_completed == 10


def test_perfdoctor_step_api_without_optimizer(tmp_path):
    script = tmp_path / "manual.py"
    script.write_text(
        textwrap.dedent("""
        import torch, perfdoctor
        w = torch.zeros(8, requires_grad=True)
        for i in range(1000):
            (w * torch.randn(8)).sum().backward()
            with torch.no_grad():
                w -= 0.01 * w.grad; w.grad = None
            perfdoctor.step()
    """)
    )
    result = run_profile(str(script), [], ProfileConfig(steps=25), out=tmp_path / "run", progress=quiet)
    assert result.exit_code == 0 and not result.partial and result.steps_completed == 25


def test_module_mode_and_arguments(tmp_path, monkeypatch):
    pkg = tmp_path / "mypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "train.py").write_text(
        textwrap.dedent("""
        import json, os, sys, torch
        if __name__ == "__main__":
            json.dump({"argv": sys.argv, "path0": sys.path[0], "cwd": os.getcwd()}, open("seen.json", "w"))
            m = torch.nn.Linear(4, 4); opt = torch.optim.SGD(m.parameters(), lr=0.1)
            for i in range(100):
                m(torch.randn(2, 4)).sum().backward(); opt.step(); opt.zero_grad()
    """)
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    result = run_profile(
        "mypkg.train", ["--lr", "3"], ProfileConfig(steps=12), module=True, out=tmp_path / "run", progress=quiet
    )
    seen = json.loads((tmp_path / "seen.json").read_text())
    assert seen["argv"] == [str(pkg / "train.py"), "--lr", "3"]
    assert seen["path0"] == str(tmp_path) and seen["cwd"] == str(tmp_path)
    assert result.steps_completed == 12 and result.exit_code == 0


def test_nanogpt_style_configurator_and_key_value_args(tmp_path, monkeypatch):
    (tmp_path / "configurator.py").write_text(
        textwrap.dedent("""
        import sys
        from ast import literal_eval
        for arg in sys.argv[1:]:
            key, val = arg[2:].split("=")
            globals()[key] = literal_eval(val)
    """)
    )
    (tmp_path / "helper.py").write_text("SCALE = 2\n")
    script = tmp_path / "train.py"
    script.write_text(
        textwrap.dedent("""
        import json, sys, torch
        from helper import SCALE
        batch_size = 1
        max_iters = 5
        exec(open('configurator.py').read())
        json.dump({"batch_size": batch_size, "max_iters": max_iters, "scale": SCALE,
                   "argv0": sys.argv[0], "path0": sys.path[0]}, open("config_seen.json", "w"))
        m = torch.nn.Linear(4, 4); opt = torch.optim.AdamW(m.parameters())
        for i in range(max_iters):
            m(torch.randn(batch_size, 4)).sum().backward(); opt.step(); opt.zero_grad()
    """)
    )
    monkeypatch.chdir(tmp_path)
    result = run_profile(
        "train.py", ["--batch_size=6", "--max_iters=40"], ProfileConfig(steps=30), out=tmp_path / "run", progress=quiet
    )
    seen = json.loads((tmp_path / "config_seen.json").read_text())
    assert seen == {"batch_size": 6, "max_iters": 40, "scale": 2, "argv0": "train.py", "path0": str(tmp_path)}
    assert result.steps_completed == 30
    assert {int(r["samples"]) for r in rows(result.run_dir / "steps.csv")} == {6}


def test_script_with_its_own_profiler_gets_a_clear_message(tmp_path):
    script = tmp_path / "own_profiler.py"
    script.write_text(
        textwrap.dedent("""
        import torch
        m = torch.nn.Linear(4, 4); opt = torch.optim.SGD(m.parameters(), lr=0.1)
        with torch.profiler.profile() as prof:
            for i in range(5):
                m(torch.randn(2, 4)).sum().backward(); opt.step()
    """)
    )
    result = run_profile(str(script), [], ProfileConfig(steps=50), out=tmp_path / "run", progress=quiet)
    assert result.exit_code == 2
    assert "starts its own torch.profiler" in result.error
    assert f"{script}:4" in result.error
    import torch

    assert torch.profiler.profile.start.__name__ == "start"  # guard removed again
    assert not torch.autograd.profiler._is_profiler_enabled


def test_bad_input_is_a_perfdoctor_error(tmp_path):
    with pytest.raises(PerfDoctorError, match="no such file"):
        run_profile(str(tmp_path / "missing.py"), [], ProfileConfig(steps=5), out=tmp_path / "r")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("user data")
    with pytest.raises(PerfDoctorError, match="already exists"):
        run_profile(MLP, [], ProfileConfig(steps=5), out=tmp_path / "full")
    assert (tmp_path / "full" / "keep.txt").read_text() == "user data"
    with pytest.raises(PerfDoctorError, match="must be <= steps"):
        run_profile(MLP, [], ProfileConfig(steps=10, wait=8, active=5), out=tmp_path / "r2")
    with pytest.raises(PerfDoctorError, match="no module"):
        run_profile("no_such_module_xyz", [], ProfileConfig(steps=5), module=True, out=tmp_path / "r3")


def test_default_run_dirs_are_new_each_time(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    a = profile_script(MLP, SMALL_MLP, steps=8)
    b = profile_script(MLP, SMALL_MLP, steps=8)
    assert a != b and a.parent == b.parent == Path("perfdoctor-runs")
    assert a.name.startswith("mlp-") and (a / "steps.csv").exists() and (b / "steps.csv").exists()


@pytest.mark.slow
def test_slowdown_mid_run_is_a_phase_change(tmp_path):
    # steps dominated by a 16 ms sleep in __getitem__, so CPU contention on a shared CI box barely shows
    run_dir = profile_script(
        MLP,
        [*STEADY_MLP, "--slowdown-at", "120", "--slowdown-factor", "2.5"],
        steps=200,
        out=tmp_path / "run",
        wait=40,
        warmup=2,
        active=5,
    )
    data = load_run_dir(run_dir)
    ss = data.steady_state
    assert ss.phase_change and len(ss.phases) == 2
    assert abs(ss.phases[1].start_step - 120) <= 6
    assert 2.0 <= ss.phases[1].median_s / ss.phases[0].median_s <= 3.2
    assert ss.median_s == pytest.approx(ss.phases[1].median_s)
    assert ss.window_ratio < 0.6  # the window (steps 42-46) sits in the earlier, faster phase


@pytest.mark.slow
def test_steady_run_has_one_phase_and_window_in_steady_state(tmp_path):
    run_dir = profile_script(MLP, STEADY_MLP, steps=150, out=tmp_path / "run")
    data = load_run_dir(run_dir)
    ss = data.steady_state
    assert not ss.phase_change and not ss.trend_detected and ss.warmup_steps < 50
    assert 0.7 < ss.window_neighbor_ratio < 1.3
    tp = throughput(data.steps, data.steady_state, data.facts.wall_s)
    assert tp["train_samples_per_s"]["samples"] == 16 * tp["train_samples_per_s"]["steps"]
    assert tp["wall_samples_per_s"]["value"] < tp["train_samples_per_s"]["value"]


def test_cpu_info_reads_flags_and_onednn_cap():
    from perfdoctor.capture.environment import cpu_info

    cpuinfo = "model name\t: Intel(R) Xeon(R) Platinum 8480C\nflags\t\t: fpu avx2 avx512f amx_bf16 amx_tile\n"
    native = cpu_info(cpuinfo, env={})
    assert native["model"] == "Intel(R) Xeon(R) Platinum 8480C"
    assert native["flags"] == ["amx_bf16", "amx_tile", "avx512f", "avx2"]
    assert native["bf16_matrix_units"] is True and native["onednn_max_cpu_isa"] is None
    capped = cpu_info(cpuinfo, env={"ONEDNN_MAX_CPU_ISA": "avx512_core"})
    assert capped["onednn_max_cpu_isa"] == "AVX512_CORE" and capped["bf16_matrix_units"] is False
    assert cpu_info(cpuinfo, env={"DNNL_MAX_CPU_ISA": "AVX512_CORE_AMX"})["bf16_matrix_units"] is True
    assert cpu_info("flags : fpu avx2 fma\n", env={})["bf16_matrix_units"] is False


def test_trace_export_is_atomic(tmp_path: Path) -> None:
    """A Ctrl-C while the trace is exported leaves no file under the trace's name (it left a gzip with a bad
    CRC) and no temporary file; a finished export is the profiler's own trace, gzip'd, under the final name."""
    import torch

    from perfdoctor.capture.session import export_trace

    final = tmp_path / "trace.rank0.pt.trace.json.gz"

    class InterruptedExport:
        def export_chrome_trace(self, path: str) -> None:
            with gzip.open(path, "wt") as fh:  # half written, as torch does before the Ctrl-C lands
                fh.write('{"traceEvents": [')
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        export_trace(InterruptedExport(), final)  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        torch.ones(8, 8) @ torch.ones(8, 8)
    export_trace(prof, final)
    assert [p.name for p in tmp_path.iterdir()] == [final.name]
    events = json.loads(gzip.decompress(final.read_bytes()))["traceEvents"]
    assert any(e.get("name") == "aten::mm" for e in events)
