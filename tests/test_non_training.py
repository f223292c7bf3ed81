"""Evaluation and checkpoint time inside training steps (perfdoctor.capture.non_training), on real runs."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

from perfdoctor.capture.non_training import NonTrainingClock

ROOT = Path(__file__).resolve().parents[1]

EVAL_LOOP = """
import sys, torch, torch.nn as nn
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Dropout(0.1), nn.Linear(256, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(32, 128), torch.randint(0, 10, (32,))
for step in range(1000):
    model.train()
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad(); loss.backward(); opt.step()
    if step % 10 == 9:                      # evaluation and a checkpoint every 10 steps
        model.eval()
        with torch.no_grad():
            for _ in range(30):
                model(torch.randn(512, 128))
        model.train()
        torch.save(model.state_dict(), sys.argv[1])
"""


def test_clock_counts_eval_and_save_inside_a_step(tmp_path):
    clock = NonTrainingClock()
    clock.install()
    try:
        m = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout())
        teacher = torch.nn.Linear(4, 4)
        teacher.eval()  # set once, never back to train: not an evaluation
        m.eval()
        time.sleep(0.05)
        m.train()
        torch.save({"w": m.state_dict()}, tmp_path / "c.pt")
        eval_s, ckpt_s = clock.take_step()
        assert 0.05 <= eval_s < 0.5 and ckpt_s > 0
        m.eval()  # trains in eval mode across an optimizer step: not evaluation
        clock.take_step()
        m.train()
        assert clock.take_step() == (0.0, 0.0)
        teacher.eval()  # already in eval mode: opens nothing
        m.train()
        assert clock.take_step() == (0.0, 0.0)
    finally:
        clock.uninstall()
    assert torch.nn.Module.train is not None and "perfdoctor" not in getattr(torch.save, "__module__", "")


def test_eval_and_checkpoints_in_the_loop_are_left_out_of_train_time(tmp_path):
    script = tmp_path / "evalloop.py"
    script.write_text(EVAL_LOOP)
    out = tmp_path / "run"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "perfdoctor",
            "profile",
            str(script),
            "--steps",
            "60",
            "--out",
            str(out),
            "--",
            str(tmp_path / "ckpt.pt"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    from perfdoctor.capture.run_data import load_run_dir

    run = load_run_dir(out)
    s = run.steps
    # the evaluation after optimizer step k runs in step k + 1's span
    assert np.flatnonzero(s["eval_s"] > 0).tolist() == [10, 20, 30, 40, 50]
    assert np.flatnonzero(s["checkpoint_s"] > 0).tolist() == [10, 20, 30, 40, 50]
    ev = s["eval_s"][[10, 20, 30, 40, 50]]
    # 30 no-grad forwards of 512 rows dominate those steps; what is left is one training step
    assert (ev > 0.5 * s["duration_s"][[10, 20, 30, 40, 50]]).all()
    np.testing.assert_allclose(s["train_s"], s["duration_s"] - s["eval_s"] - s["checkpoint_s"])
    from perfdoctor.capture.run_section import throughput

    tp = throughput(run.steps, run.steady_state, run.facts.wall_s)["train_samples_per_s"]
    steady = (np.arange(60) >= run.steady_state.steady_start_step) & (s["profiler_phase"] == "none")
    assert abs(tp["excluded_s"] - float((s["eval_s"] + s["checkpoint_s"])[steady].sum())) < 1e-9
    assert tp["seconds"] == float(s["train_s"][steady].sum())
    rep = subprocess.run(
        [sys.executable, "-m", "perfdoctor", "report", str(out), "--format", "json"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    doc = json.loads(rep.stdout)
    nt = doc["run"]["non_training"]
    assert nt["eval_steps"] == 5 and nt["checkpoint_steps"] == 5 and nt["eval_s"] == float(s["eval_s"].sum())
    assert "train-only times" in doc["run"]["throughput"]["train_samples_per_s"]["denominator"]
    # step 30 is profiled and holds an evaluation: the report says its breakdown counts it
    assert "active" == s["profiler_phase"][30]
    assert any("profiled step(s) #30 (" in w and "held evaluation" in w for w in doc["warnings"])
