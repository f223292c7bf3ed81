"""Budget planning: the issue's worked figures at 40% MFU on H100 (989 TFLOP/s bf16 dense)."""

from __future__ import annotations

import json

import pytest

from perfdoctor.analysis.budget import activation_bytes, mfu_from_report, plan
from perfdoctor.analysis.hardware import spec_by_name
from perfdoctor.cli import main
from perfdoctor.errors import PerfDoctorError

H100 = spec_by_name("H100").peak("bf16")


@pytest.mark.parametrize("params,gpus,tokens_b,flops,hours", [
    (124e6, 1, "2.5", "1.8e+18", "1.3"),
    (1.3e9, 8, "26.0", "2.0e+20", "17.8"),
    (7e9, 64, "140.0", "5.9e+21", "64.5"),
])
def test_worked_figures(params, gpus, tokens_b, flops, hours):
    b = plan(params, gpus, "H100", H100, 0.4)
    assert f"{b.tokens / 1e9:.1f}" == tokens_b  # billions, 1 decimal
    assert f"{b.total_flops:.1e}" == flops
    assert f"{b.hours:.1f}" == hours


def test_model_state_ddp_vs_fsdp():
    b = plan(1.3e9, 8, "H100", H100, 0.4)
    assert b.model_state_bytes_ddp == 16 * 1.3e9 and round(b.model_state_bytes_ddp / 1e9, 1) == 20.8
    assert round(b.model_state_bytes_sharded / 1e9, 1) == 2.6


def test_activation_bytes():
    assert activation_bytes(2048, 8, 2048, 24) == 24 * 34 * 2048 * 8 * 2048
    assert activation_bytes(2048, 8, 2048, 24, n_heads=16) == 24 * (34 * 2048 * 8 * 2048 + 5 * 16 * 2048**2 * 8)


def test_bad_mfu():
    with pytest.raises(ValueError):
        plan(1e9, 8, "H100", H100, 1.5)


def test_mfu_from_report(tmp_path):
    assert mfu_from_report({"ranks": [{"mfu": {"mfu": 0.2}}, {"mfu": {"mfu": 0.3}}]}, "r.json") == pytest.approx(0.25)
    with pytest.raises(PerfDoctorError, match=r"r.json: .*ranks\[i\].mfu.mfu"):
        mfu_from_report({"ranks": [{}]}, "r.json")


def test_cli(tmp_path, capsys):
    assert main(["budget", "--params", "1.3e9", "--gpus", "8", "--gpu", "H100"]) == 0
    out = capsys.readouterr().out
    assert "26.0B" in out and "2.0e+20 FLOP" in out and "17.8 h" in out and "20.8 GB" in out and "2.6 GB" in out
    report = tmp_path / "report.json"
    report.write_text(json.dumps({"ranks": [{"mfu": {"mfu": 0.2}}]}))
    assert main(["budget", "--params", "1.3e9", "--gpus", "8", "--gpu", "H100", "--from-report", str(report)]) == 0
    assert "35.6 h" in capsys.readouterr().out  # half the MFU, twice the hours
    report.write_text(json.dumps({"ranks": [{}]}))
    assert main(["budget", "--params", "1e9", "--gpus", "8", "--gpu", "H100", "--from-report", str(report)]) == 2
    assert "ranks[i].mfu.mfu" in capsys.readouterr().err
    assert main(["budget", "--params", "1e9", "--gpus", "8", "--gpu", "V100", "--dtype", "bf16"]) == 2
