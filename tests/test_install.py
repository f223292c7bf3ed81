"""The base install reads traces without torch; the commands that need torch say so in one line.

``pip install perfdoctor`` brings no torch, tensorboard or HolisticTraceAnalysis (issue 9): ``report``, ``rules``,
``rule`` and ``budget`` must never import them, and ``profile`` / ``calibrate`` must refuse with exit 2 and one
line naming ``pip install "perfdoctor[profile]"`` when torch is missing. Each check runs in a fresh interpreter so
that modules this test process already imported cannot hide an import.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from perfdoctor.analysis.work import calibration as cal

REPO = Path(__file__).resolve().parents[1]
TRACE = REPO / "sample_traces" / "tiny_gpt_cpu.pt.trace.json.gz"
RUN_DIR = REPO / "sample_traces" / "tiny_gpt_cpu_run"
HIDE_TORCH = "import sys; sys.modules['torch'] = None\n"  # `import torch` then raises ImportError


def _python(code: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "PERFDOCTOR_HOME": str(tmp_path / "home")}
    return subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )


def test_report_rules_rule_budget_and_every_help_work_without_importing_torch(tmp_path):
    code = f"""
import contextlib, io, os, sys
from perfdoctor.cli import build_parser, main
sink = open(os.devnull, "w")
sys.stdout = sink
codes = [
    main(["report", {str(TRACE)!r}, "-o", "report.html"]),
    main(["report", {str(RUN_DIR)!r}, "--format", "md"]),
    main(["rules"]), main(["rule", "PD101"]),
    main(["budget", "--params", "1.3e9", "--gpus", "8", "--gpu", "H100"]),
]
helps = []
for argv in (["--help"], *([c, "--help"] for c in ("report", "profile", "rules", "rule", "calibrate", "budget",
                                                    "diff"))):
    try:
        main(argv)
    except SystemExit as exc:
        helps.append(exc.code)
import perfdoctor.capture.run_data, perfdoctor.pipeline  # what `report` on a run directory reads
heavy = sorted(m for m in ("torch", "tensorboard", "hta", "pandas", "pyarrow") if m in sys.modules)
print(codes, helps, heavy, file=sys.stderr)
"""
    proc = _python(code, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == "[0, 0, 0, 0, 0] [0, 0, 0, 0, 0, 0, 0, 0] []"
    assert (tmp_path / "report.html").stat().st_size > 10_000


@pytest.mark.parametrize("argv", [["profile", "train.py", "--steps", "3"], ["calibrate", "--quick"]])
def test_commands_needing_torch_refuse_in_one_line_without_it(tmp_path, argv):
    proc = _python(HIDE_TORCH + f"from perfdoctor.cli import main\nsys.exit(main({argv!r}))", tmp_path)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"perfdoctor: error: perfdoctor {argv[0]} needs PyTorch")
    # the machine's torch build first (the CPU wheel index spelled out), then the extra (F10)
    msg = lines[0]
    cpu = "pip install torch --index-url https://download.pytorch.org/whl/cpu"
    assert "install the torch build for your machine first" in msg and cpu in msg
    assert msg.index("torch build for your machine") < msg.index(cpu) < msg.index('pip install "perfdoctor[profile]"')
    assert not (tmp_path / "perfdoctor-runs").exists()


def test_calibrate_show_needs_no_torch(tmp_path):
    proc = _python(HIDE_TORCH + "from perfdoctor.cli import main\nsys.exit(main(['calibrate', '--show']))", tmp_path)
    assert proc.returncode == 2
    assert "run `perfdoctor calibrate`" in proc.stderr and "PyTorch" not in proc.stderr


def _record(gpu: str | None, measured_at: str, peak: float, cpu_model: str | None = None) -> dict[str, object]:
    return {
        "machine_id": cal.machine_id(gpu),
        "hostname": socket.gethostname(),
        "cpu_model": cpu_model or cal.cpu_model(),
        "measured_at": measured_at,
        "devices": {
            "cpu": {
                "device_name": "cpu",
                "peak_flops": {"fp32": peak},
                "copy_bytes_per_s": 1e9,
                "method": {"repeats": 1, "matmul_n": 8, "copy_mib": 1, "quick": True},
            }
        },
    }


def test_stored_calibration_is_found_without_asking_torch_for_the_gpu(tmp_path, monkeypatch):
    """Without torch the GPU name (part of the file name) is unknown: the newest record of this host and CPU wins."""
    monkeypatch.setenv("PERFDOCTOR_HOME", str(tmp_path))
    monkeypatch.setitem(sys.modules, "torch", None)
    directory = tmp_path / "calibration"
    directory.mkdir()
    older = _record("GPU X", "2026-01-01T00:00:00+00:00", 1e9)
    newer = _record("GPU Y", "2026-02-01T00:00:00+00:00", 2e9)
    other_cpu = _record(None, "2026-03-01T00:00:00+00:00", 3e9, cpu_model="another CPU")
    other_cpu["machine_id"] = f"{cal.machine_id(None)}x"  # same host prefix, different CPU: never taken
    for record in (older, newer, other_cpu):
        (directory / f"{record['machine_id']}.json").write_text(json.dumps(record))
    assert cal.load_calibration()["devices"]["cpu"]["peak_flops"]["fp32"] == 2e9
