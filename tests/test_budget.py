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


@pytest.mark.parametrize("flag, value", [
    ("--params", "nan"), ("--params", "inf"), ("--mfu", "nan"), ("--mfu", "inf"),
    ("--tokens-per-param", "nan"), ("--tokens-per-param", "-inf"),
])
def test_cli_rejects_non_finite_numbers(capsys, flag, value):
    flags = {"--params": "1e9", "--gpus": "8", "--gpu": "H100", flag: value}
    assert main(["budget"] + [f"{k}={v}" for k, v in flags.items()]) == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err == f"perfdoctor: error: {flag}: must be a finite number, got {float(value)}\n"


def test_plan_rejects_non_finite_and_non_positive_shapes():
    with pytest.raises(ValueError, match="params must be a finite number, got nan"):
        plan(float("nan"), 8, "H100", H100, 0.4)
    with pytest.raises(ValueError, match="seq-len must be positive, got 0"):
        plan(1e9, 8, "H100", H100, 0.4, seq_len=0, micro_batch=1, d_model=4, n_layers=2)


@pytest.mark.parametrize("gpu, hours", [("V100", "83.3"), ("t4", "160.3")])
def test_cli_falls_back_to_fp16_without_bf16(capsys, gpu, hours):
    # 1e9 params × 20 tokens × 6 = 1.2e20 FLOP ÷ (8 × peak × 0.4): V100 SXM2 125, T4 65 TFLOP/s fp16 tensor
    assert main(["budget", "--params", "1e9", "--gpus", "8", "--gpu", gpu]) == 0
    out = capsys.readouterr().out
    peak = {"V100": "125.0", "t4": "65.0"}[gpu]
    assert f"peak          {peak} TFLOP/s dense fp16 per GPU (fp16 because this GPU has no bf16 tensor peak; " in out
    assert f"wall-clock    {hours} h" in out
    assert main(["budget", "--params", "1e9", "--gpus", "8", "--gpu", gpu, "--json"]) == 0
    b = json.loads(capsys.readouterr().out)
    assert b["dtype"] == "fp16" and b["peak_flops_per_s"] == float(peak) * 1e12


def test_cli_dtype_flag(capsys):
    assert main(["budget", "--params", "1e9", "--gpus", "8", "--gpu", "V100", "--dtype", "fp32"]) == 0
    assert "15.7 TFLOP/s dense fp32 per GPU (NVIDIA Tesla V100" in capsys.readouterr().out
    assert main(["budget", "--params", "1e9", "--gpus", "8", "--gpu", "H100", "--dtype", "fp8", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["peak_flops_per_s"] == 1979e12
    assert main(["budget", "--params", "1e9", "--gpus", "8", "--gpu", "V100", "--dtype", "bf16"]) == 2
    assert capsys.readouterr().err == ("perfdoctor: error: --dtype: NVIDIA Tesla V100 SXM2 has no dense bf16 peak "
                                       "in the hardware table (it has: fp64, fp32, fp16)\n")
    assert main(["budget", "--params", "1e9", "--gpus", "8", "--gpu", "H100", "--dtype", "int8"]) == 2
    assert "--dtype: 'int8' is not one of" in capsys.readouterr().err
