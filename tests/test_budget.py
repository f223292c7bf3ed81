"""Budget planning: the issue's worked figures at 40% MFU on H100 (989 TFLOP/s bf16 dense)."""

from __future__ import annotations

import json

import pytest

from perfdoctor.analysis.work.hardware import spec_by_name
from perfdoctor.budget.measured import measured_on, mfu_from_report
from perfdoctor.budget.plan import activation_bytes, plan
from perfdoctor.cli import main
from perfdoctor.errors import PerfDoctorError

H100 = spec_by_name("H100").peak("bf16")


@pytest.mark.parametrize(
    "params,gpus,tokens_b,flops,hours",
    [
        (124e6, 1, "2.5", "1.8e+18", "1.3"),
        (1.3e9, 8, "26.0", "2.0e+20", "17.8"),
        (7e9, 64, "140.0", "5.9e+21", "64.5"),
    ],
)
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


# report ranks as `perfdoctor report --format json` writes them (fields trimmed to those budget reads):
# the H100 one from tracelens__h100__bert-small-uncased, the CPU one from sample_traces/tiny_gpt_cpu_run after
# `perfdoctor calibrate` on the machine that recorded it
H100_SPEC = (
    "spec: NVIDIA H100 Tensor Core GPU datasheet (2023); dense = printed sparse figure ÷ 2 for TF32/BF16/FP16/FP8"
)
CPU_PEAK = (
    "measured: perfdoctor calibrate on vm (Intel(R) Xeon(R) Processor) at 2026-11-30T21:13:06+00:00, "
    "best-of-5 2048³ matmul and 256 MiB copy"
)


def gpu_rank(
    mfu,
    name="NVIDIA H100 80GB HBM3",
    cc="9.0",
    sms=132,
    mem=85018279936,
    dtype="bf16",
    peak=989.5e12,
    source=H100_SPEC,
    rank=0,
):
    return {
        "rank": rank,
        "primary_device": 0,
        "device_properties": [{"compute_capability": cc, "id": 0, "memory_bytes": mem, "name": name, "sm_count": sms}],
        "mfu": {"mfu": mfu, "dtype": dtype, "on_gpu": True, "peak_flops_per_s": peak, "peak_source": source},
    }


def cpu_rank(mfu):
    return {
        "rank": 0,
        "primary_device": -1,
        "device_properties": [],
        "mfu": {
            "mfu": mfu,
            "dtype": "fp32",
            "on_gpu": False,
            "peak_flops_per_s": 135060780556.26,
            "peak_source": CPU_PEAK,
        },
    }


def budget_from(tmp_path, ranks, *flags):
    report = tmp_path / "run1.json"
    report.write_text(json.dumps({"schema": "perfdoctor.report", "ranks": ranks}))
    return main(["budget", "--params", "1.3e9", "--gpus", "8", "--from-report", str(report), *flags])


def test_mfu_from_report():
    h100 = spec_by_name("H100")
    two = {"ranks": [gpu_rank(0.2), gpu_rank(0.3, rank=1)]}
    assert mfu_from_report(two, "r.json", h100, "bf16", H100) == pytest.approx(0.25)
    with pytest.raises(PerfDoctorError, match=r"r.json: .*ranks\[i\].mfu.mfu"):
        mfu_from_report({"ranks": [{}]}, "r.json", h100, "bf16", H100)
    with pytest.raises(PerfDoctorError, match=r"^r.json: ranks\[0\].mfu.mfu is 1.5, not an MFU in \(0, 1\]$"):
        mfu_from_report({"ranks": [gpu_rank(1.5)]}, "r.json", h100, "bf16", H100)


def test_cli(tmp_path, capsys):
    assert main(["budget", "--params", "1.3e9", "--gpus", "8", "--gpu", "H100"]) == 0
    out = capsys.readouterr().out
    assert "26.0B" in out and "2.0e+20 FLOP" in out and "17.8 h" in out and "20.8 GB" in out and "2.6 GB" in out
    report = tmp_path / "report.json"
    report.write_text(json.dumps({"ranks": [gpu_rank(0.2)]}))
    assert main(["budget", "--params", "1.3e9", "--gpus", "8", "--gpu", "H100", "--from-report", str(report)]) == 0
    assert "35.6 h" in capsys.readouterr().out  # half the MFU, twice the hours
    report.write_text(json.dumps({"ranks": [{}]}))
    assert main(["budget", "--params", "1e9", "--gpus", "8", "--gpu", "H100", "--from-report", str(report)]) == 2
    assert "ranks[i].mfu.mfu" in capsys.readouterr().err
    assert main(["budget", "--params", "1e9", "--gpus", "8", "--gpu", "V100", "--dtype", "bf16"]) == 2


@pytest.mark.parametrize(
    "flag, value",
    [
        ("--params", "nan"),
        ("--params", "inf"),
        ("--mfu", "nan"),
        ("--mfu", "inf"),
        ("--tokens-per-param", "nan"),
        ("--tokens-per-param", "-inf"),
    ],
)
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
    assert capsys.readouterr().err == (
        "perfdoctor: error: --dtype: NVIDIA Tesla V100 SXM2 has no dense bf16 peak "
        "in the hardware table (it has: fp64, fp32, fp16)\n"
    )
    assert main(["budget", "--params", "1e9", "--gpus", "8", "--gpu", "H100", "--dtype", "int8"]) == 2
    assert "--dtype: 'int8' is not one of" in capsys.readouterr().err


def test_from_report_refuses_a_cpu_mfu(tmp_path, capsys):
    assert budget_from(tmp_path, [cpu_rank(0.036)], "--gpu", "H100") == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err == (
        f"perfdoctor: error: {tmp_path / 'run1.json'}: the run's MFU (3.6%) was measured on a CPU "
        "(Intel(R) Xeon(R) Processor), not on the target NVIDIA H100 SXM5 80GB; an MFU does not carry over to another "
        "device: pass --mfu explicitly (a report can give it only when measured on NVIDIA H100 SXM5 80GB)\n"
    )


@pytest.mark.parametrize(
    "gpu, target",
    [("A100", "NVIDIA A100 80GB SXM4"), ("h100-pcie", "NVIDIA H100 PCIe 80GB"), ("MI300X", "AMD Instinct MI300X")],
)
def test_from_report_refuses_another_gpu_model(tmp_path, capsys, gpu, target):
    assert budget_from(tmp_path, [gpu_rank(0.2)], "--gpu", gpu) == 2
    err = capsys.readouterr().err
    assert (
        f"run1.json: the run's MFU (20.0%) was measured on NVIDIA H100 SXM5 80GB, not on the target {target}; " in err
    )
    assert "pass --mfu explicitly" in err and err.count("\n") == 1


def test_from_report_same_gpu_is_used(tmp_path, capsys):
    # 6 × 1.3e9 × 26e9 = 2.028e20 FLOP ÷ (8 × 989.5e12 FLOP/s × 0.2) = 128,095 s = 35.6 h
    assert budget_from(tmp_path, [gpu_rank(0.2)], "--gpu", "H100", "--json") == 0
    b = json.loads(capsys.readouterr().out)
    assert b["mfu"] == 0.2 and b["mfu_source"] == f"measured in {tmp_path / 'run1.json'}"
    assert f"{b['hours']:.1f}" == "35.6"
    # an MI300X report's device_properties (tracelens__mi300__ddp_resnet18) matches --gpu MI300X
    mi300 = gpu_rank(
        0.3,
        name="AMD Instinct MI300X",
        cc="9.4",
        sms=304,
        mem=206141652992,
        peak=1307.4e12,
        source="spec: AMD Instinct MI300X data sheet (2023)",
    )
    assert budget_from(tmp_path, [mi300], "--gpu", "MI300X") == 0
    assert "MFU           30.0% (measured in " in capsys.readouterr().out


def test_from_report_refuses_unknown_or_unrecorded_device(tmp_path, capsys):
    assert budget_from(tmp_path, [gpu_rank(0.2, name="NVIDIA H20", sms=78)], "--gpu", "H100") == 2
    assert (
        "run1.json: the run's MFU (20.0%) was measured on 'NVIDIA H20', which is not in the hardware table, "
        "not on the target NVIDIA H100 SXM5 80GB" in capsys.readouterr().err
    )
    assert budget_from(tmp_path, [{"mfu": {"mfu": 0.2}}], "--gpu", "H100") == 2
    assert "measured on a device the report does not record (no ranks[i].device_properties)" in capsys.readouterr().err


def test_from_report_names_the_mismatched_rank(tmp_path, capsys):
    a100 = gpu_rank(0.3, name="NVIDIA A100-SXM4-80GB", cc="8.0", sms=108, mem=85e9, peak=312e12, rank=1)
    assert budget_from(tmp_path, [gpu_rank(0.2), a100], "--gpu", "H100") == 2
    assert (
        "rank 1's MFU (30.0%) was measured on NVIDIA A100 80GB SXM4, not on the target NVIDIA H100"
        in capsys.readouterr().err
    )


def test_from_report_refuses_another_peak(tmp_path, capsys):
    assert budget_from(tmp_path, [gpu_rank(0.2)], "--gpu", "H100", "--dtype", "fp8") == 2
    assert capsys.readouterr().err.endswith(
        "run1.json: the run's MFU is relative to the bf16 peak of NVIDIA H100 SXM5 80GB, the plan uses its fp8 peak; "
        "pass --dtype bf16 to plan at the measured precision, or give --mfu explicitly\n"
    )
    measured = gpu_rank(0.3, peak=700e12, source="measured: perfdoctor calibrate on node1 (NVIDIA H100 80GB HBM3)")
    assert budget_from(tmp_path, [measured], "--gpu", "H100") == 2
    assert (
        "run1.json: the run's MFU is relative to a 700 TFLOP/s peak (measured: perfdoctor calibrate on node1 "
        "(NVIDIA H100 80GB HBM3)), not the 989.5 TFLOP/s bf16 datasheet peak" in capsys.readouterr().err
    )


def _real_report(capsys, trace, model_flags):
    """`perfdoctor report --format json` of a real trace, its first rank's MFU set to 0.2 where the report
    withholds one: what is under test is the device the report records, not the MFU's plausibility checks."""
    assert main(["report", str(trace), "--format", "json", *model_flags]) == 0
    report = json.loads(capsys.readouterr().out)
    mfu = report["ranks"][0]["mfu"]
    if mfu.get("mfu") is None:
        mfu.update(mfu=0.2, peak_flops_per_s=mfu.get("peak_flops_per_s") or (H100 if mfu["on_gpu"] else 1.35e11))
    return report


def test_from_real_reports(tmp_path, capsys, shared):
    h100 = _real_report(
        capsys,
        shared("tracelens__h100__bert-small-uncased.json.gz"),
        [
            "--params",
            "29e6",
            "--layers",
            "4",
            "--heads",
            "8",
            "--d-model",
            "512",
            "--seq-len",
            "128",
            "--tokens-per-step",
            "4096",
        ],
    )
    assert measured_on(h100["ranks"][0]) == ("NVIDIA H100 SXM5 80GB", "h100-sxm")
    assert h100["ranks"][0]["mfu"]["dtype"] == "bf16"
    cpu = _real_report(
        capsys,
        "sample_traces/tiny_gpt_cpu.pt.trace.json.gz",
        [
            "--params",
            "1e6",
            "--layers",
            "2",
            "--heads",
            "4",
            "--d-model",
            "128",
            "--seq-len",
            "64",
            "--tokens-per-step",
            "512",
        ],
    )
    assert measured_on(cpu["ranks"][0]) == ("a CPU", None)
    for name, report in (("h100.json", h100), ("cpu.json", cpu)):
        (tmp_path / name).write_text(json.dumps(report))
    plan_from = ["budget", "--params", "1.3e9", "--gpus", "8", "--from-report"]
    assert main([*plan_from, str(tmp_path / "h100.json"), "--gpu", "H100"]) == 0
    assert f"MFU           {h100['ranks'][0]['mfu']['mfu']:.1%} (measured in" in capsys.readouterr().out
    assert main([*plan_from, str(tmp_path / "h100.json"), "--gpu", "A100"]) == 2
    assert "measured on NVIDIA H100 SXM5 80GB, not on the target NVIDIA A100 80GB SXM4" in capsys.readouterr().err
    assert main([*plan_from, str(tmp_path / "cpu.json"), "--gpu", "H100"]) == 2
    assert (
        "cpu.json: the run's MFU (20.0%) was measured on a CPU, not on the target NVIDIA H100 SXM5 80GB; "
        in capsys.readouterr().err
    )


def test_memory_fit_70b_on_8_h100(capsys):
    # 16 B × 70e9 = 1120 GB (DDP), ÷ 8 = 140 GB (ZeRO-3); activations 34 × 80 × 4096 × 1 × 8192 B = 91.3 GB
    flags = [
        "budget",
        "--params",
        "70e9",
        "--gpus",
        "8",
        "--gpu",
        "H100",
        "--seq-len",
        "4096",
        "--micro-batch",
        "1",
        "--d-model",
        "8192",
        "--layers",
        "80",
    ]
    assert main(flags) == 0
    out = capsys.readouterr().out
    assert "GPU memory    80 GB per GPU\n" in out
    assert (
        "model state   1120.0 GB/GPU under DDP (does not fit in 80 GB), 140.0 GB/GPU under ZeRO-3/FSDP "
        "(does not fit in 80 GB); 16 B/param, mixed-precision Adam\n"
    ) in out
    assert "activations   91.3 GB/GPU per micro-batch (does not fit in 80 GB); 34·L·s·b·h" in out
    assert (
        "total         1211.3 GB/GPU under DDP (does not fit in 80 GB), 231.3 GB/GPU under ZeRO-3/FSDP "
        "(does not fit in 80 GB)\n"
    ) in out
    assert out.endswith(
        "warning       nothing fits in 80 GB per GPU: model state alone needs 140.0 GB/GPU even under "
        "ZeRO-3/FSDP (use more GPUs, or tensor/pipeline parallelism); activations alone need 91.3 "
        "GB/GPU (use a smaller micro-batch, recompute activations or shard the sequence)\n"
    )
    assert main(flags + ["--json"]) == 0
    b = json.loads(capsys.readouterr().out)
    assert b["gpu_memory_bytes"] == 80e9 and b["activation_bytes"] == 34 * 80 * 4096 * 8192
    assert b["fits"] == {
        "model_state_ddp": False,
        "model_state_sharded": False,
        "activations": False,
        "total_ddp": False,
        "total_sharded": False,
    }
    assert len(b["warnings"]) == 1 and b["warnings"][0].startswith("nothing fits in 80 GB per GPU: ")


def test_memory_fit_marks(capsys):
    # 70e9 on 8 × H200 (141 GB): ZeRO-3 state 140 GB fits, DDP 1120 GB does not; no warning
    assert main(["budget", "--params", "70e9", "--gpus", "8", "--gpu", "H200"]) == 0
    out = capsys.readouterr().out
    assert "1120.0 GB/GPU under DDP (does not fit in 141 GB), 140.0 GB/GPU under ZeRO-3/FSDP (fits in 141 GB)" in out
    assert "warning" not in out
    assert main(["budget", "--params", "1.3e9", "--gpus", "8", "--gpu", "H100", "--json"]) == 0
    b = json.loads(capsys.readouterr().out)
    assert b["fits"] == {"model_state_ddp": True, "model_state_sharded": True} and b["warnings"] == []


def test_memory_fit_total_only():
    # 7e9 on 8 × H100: state 112 GB (DDP) / 14 GB (ZeRO-3); activations 34 × 32 × 4096 × 4 × 4096 B = 73.0 GB fit
    # alone, but 14 + 73 = 87.0 GB under ZeRO-3 does not
    b = plan(
        7e9,
        8,
        "H100",
        H100,
        0.4,
        seq_len=4096,
        micro_batch=4,
        d_model=4096,
        n_layers=32,
        gpu_memory_bytes=spec_by_name("H100").memory_bytes,
    )
    assert b.fits == {
        "model_state_ddp": False,
        "model_state_sharded": True,
        "activations": True,
        "total_ddp": False,
        "total_sharded": False,
    }
    assert b.warnings == [
        (
            "nothing fits in 80 GB per GPU: ZeRO-3/FSDP model state plus activations need 87.0 "
            "GB/GPU (use a smaller micro-batch, recompute activations, or use more GPUs)"
        )
    ]
    assert plan(7e9, 8, "H100", H100, 0.4).fits == {}  # no capacity given: nothing judged


@pytest.mark.parametrize(
    "flags, label, tokens",
    [
        ([], "(20 tokens/param, Chinchilla, Hoffmann et al. 2022)", "26.0B"),
        (["--tokens-per-param", "20"], "(20 tokens/param, Chinchilla, Hoffmann et al. 2022)", "26.0B"),
        (["--tokens-per-param", "0.0001"], "(0.0001 tokens/param, user-given)", "130000"),
        (["--tokens-per-param", "100"], "(100 tokens/param, user-given)", "130.0B"),
    ],
)
def test_tokens_label(capsys, flags, label, tokens):
    assert main(["budget", "--params", "1.3e9", "--gpus", "8", "--gpu", "H100", *flags]) == 0
    assert f"tokens        {tokens} {label}\n" in capsys.readouterr().out
    assert main(["budget", "--params", "1.3e9", "--gpus", "8", "--gpu", "H100", "--json", *flags]) == 0
    b = json.loads(capsys.readouterr().out)
    assert b["tokens_source"] == ("user-given" if "user-given" in label else "Chinchilla, Hoffmann et al. 2022")


@pytest.mark.parametrize(
    "flags, err",
    [
        (
            ["--heads", "15", "--d-model", "2048"],
            "--heads: 15 heads do not divide --d-model 2048 (2048 / 15 = 136.5, not a whole head size)",
        ),
        (
            ["--heads", "15", "--d-model", "2048", "--seq-len", "2048", "--micro-batch", "1", "--layers", "24"],
            "--heads: 15 heads do not divide --d-model 2048 (2048 / 15 = 136.5, not a whole head size)",
        ),
        (["--params=0"], "--params: must be a positive parameter count (e.g. 1.3e9), got 0"),
        (["--params=-1e9"], "--params: must be a positive parameter count (e.g. 1.3e9), got -1e+09"),
        (["--gpus", "0"], "--gpus: must be at least 1, got 0"),
        (["--gpus=-2"], "--gpus: must be at least 1, got -2"),
        (["--mfu", "0"], "--mfu: must be a fraction in (0, 1] (0.4 for 40%), got 0"),
        (["--mfu", "40"], "--mfu: must be a fraction in (0, 1] (0.4 for 40%), got 40"),
        (["--tokens-per-param", "0"], "--tokens-per-param: must be positive, got 0"),
        (
            ["--seq-len", "0", "--micro-batch", "1", "--d-model", "8", "--layers", "2"],
            "--seq-len: must be at least 1, got 0",
        ),
        (["--heads", "0", "--d-model", "8"], "--heads: must be at least 1, got 0"),
        (
            ["--d-model", "2048", "--layers", "24"],
            (
                "--d-model, --layers given without --seq-len, --micro-batch: "
                "activation memory needs --seq-len, --micro-batch, --d-model and "
                "--layers together"
            ),
        ),
    ],
)
def test_cli_validates_inputs(capsys, flags, err):
    args = {"--params": "1e9", "--gpus": "8"}
    for f in flags:
        args.pop(f.split("=")[0], None)
    base = [x for kv in args.items() for x in kv]
    assert main(["budget", *base, "--gpu", "H100", *flags]) == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err == f"perfdoctor: error: {err}\n"


def test_plan_rejects_heads_not_dividing_d_model():
    with pytest.raises(ValueError, match=r"heads \(15\) must divide d-model \(2048\)"):
        plan(1e9, 8, "H100", H100, 0.4, seq_len=2048, micro_batch=1, d_model=2048, n_layers=24, n_heads=15)
    with pytest.raises(ValueError, match="gpus must be positive, got 0"):
        plan(1e9, 0, "H100", H100, 0.4)


def test_report_mfu_caveats_one_step_and_low_mfu():
    from perfdoctor.budget.measured import report_mfu_caveats

    one_step = {"ranks": [{"primary_device": 0, "devices": [{"device": 0, "steps": [{}]}]}]}
    c = report_mfu_caveats(one_step, 0.002)
    assert len(c) == 2 and c[0].startswith("the report's MFU comes from 1 step(s)") and "MFU of 0.2%" in c[1]
    many = {"ranks": [{"primary_device": 0, "devices": [{"device": 0, "steps": [{}, {}, {}]}]}]}
    assert report_mfu_caveats(many, 0.4) == []


def test_from_report_prints_the_caveat(tmp_path, capsys):
    assert budget_from(tmp_path, [gpu_rank(0.02)], "--gpu", "H100") == 0
    assert "warning       an MFU of 2.0% describes a toy" in capsys.readouterr().out
