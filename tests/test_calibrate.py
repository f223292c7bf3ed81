"""perfdoctor calibrate in quick mode on CPU: measures, stores per machine, reloads as measured roofs."""

from __future__ import annotations

import json

import pytest

from perfdoctor.analysis.work import calibration as cal
from perfdoctor.cli import main
from perfdoctor.errors import PerfDoctorError


def test_quick_cpu_calibration_roundtrip(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PERFDOCTOR_HOME", str(tmp_path))
    assert main(["calibrate", "--quick", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    files = list((tmp_path / "calibration").glob("*.json"))
    assert len(files) == 1 and str(files[0]) in out
    record = json.loads(files[0].read_text())
    cpu = record["devices"]["cpu"]
    assert set(cpu["peak_flops"]) == {"fp32", "bf16"} and all(v > 1e6 for v in cpu["peak_flops"].values())
    assert cpu["copy_bytes_per_s"] > 1e7 and cpu["method"]["quick"] is True
    roofs = cal.roofs_from_calibration(cal.load_calibration(), "cpu")
    assert roofs.kind == "measured" and roofs.peak("fp32") == cpu["peak_flops"]["fp32"]
    assert roofs.source.startswith("measured: perfdoctor calibrate")
    with pytest.raises(PerfDoctorError, match="no 'cuda:0' measurement"):
        cal.roofs_from_calibration(record, "cuda:0")


def test_missing_calibration_is_one_line_error(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PERFDOCTOR_HOME", str(tmp_path))
    assert main(["calibrate", "--show"]) == 2
    assert "run `perfdoctor calibrate`" in capsys.readouterr().err


def test_matmul_measure_counts_2n3():
    flops = cal.measure_matmul("cpu", "fp32", 128, 2)
    assert 1e6 < flops < 1e14


def test_machine_id_is_stable():
    assert cal.machine_id("GPU X") == cal.machine_id("GPU X") != cal.machine_id("GPU Y")


def test_load_note_flags_a_busy_machine():
    assert cal.load_note(8.0, 2).startswith("measured under load (1-minute load average 8.0 on 2 cores)")
    assert cal.load_note(1.0, 2) == "" and cal.load_note(None, 2) == ""


def test_calibration_under_load_warns_and_is_not_used(tmp_path, monkeypatch, capsys):
    from perfdoctor.capture import run_data

    monkeypatch.setenv("PERFDOCTOR_HOME", str(tmp_path))
    monkeypatch.setattr(cal.os, "getloadavg", lambda: (4096.0, 4096.0, 4096.0))
    assert main(["calibrate", "--quick", "--device", "cpu"]) == 0
    assert "warning: measured under load" in capsys.readouterr().out
    record = cal.load_calibration()
    assert record["under_load"] and record["load_average_1min"] == 4096.0

    env = run_data.RunEnvironment(cuda_available=False, hostname=record["hostname"])
    cpu = run_data.RunCpu(model=record["cpu_model"])
    assert run_data.measured_cpu_roofs(env, cpu) is None
    monkeypatch.setattr(cal, "load_calibration", lambda: {**record, "under_load": ""})
    assert run_data.measured_cpu_roofs(env, cpu) is not None
