"""`perfdoctor budget`: compute-optimal tokens, FLOPs, hours and memory per GPU for a training run."""

from __future__ import annotations

import argparse
import json
import math

from perfdoctor.errors import PerfDoctorError

NAME = "budget"
HELP = "plan a training run: compute-optimal tokens, 6·N·D FLOPs, wall-clock hours at an MFU, memory per GPU"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--params", type=float, required=True, help="model parameters, e.g. 1.3e9")
    parser.add_argument("--gpus", type=int, required=True, help="number of GPUs")
    parser.add_argument("--gpu", required=True, help="GPU model from the hardware table, e.g. H100, A100, MI300X")
    parser.add_argument("--dtype", default=None,
                        help="GEMM dtype whose dense peak is used: fp64, fp32, tf32, bf16, fp16, fp8 (default: bf16, "
                             "or fp16 on GPUs without bf16 tensor cores such as V100 and T4)")
    src = parser.add_mutually_exclusive_group()
    src.add_argument("--mfu", type=float, default=None, help="assumed MFU as a fraction (default 0.4)")
    src.add_argument("--from-report", metavar="REPORT_JSON", help="use the MFU a perfdoctor JSON report measured")
    parser.add_argument("--tokens-per-param", type=float, default=20.0, help="tokens per parameter (Chinchilla: 20)")
    parser.add_argument("--seq-len", type=int, help="sequence length (activation memory)")
    parser.add_argument("--micro-batch", type=int, help="micro-batch size per GPU (activation memory)")
    parser.add_argument("--d-model", type=int, help="hidden size (activation memory)")
    parser.add_argument("--layers", type=int, help="transformer layers (activation memory)")
    parser.add_argument("--heads", type=int, help="attention heads: adds the stored attention scores (no flash)")
    parser.add_argument("--json", action="store_true", help="print the budget as JSON")


def _read_report(path: str) -> float:
    from perfdoctor.analysis.budget import mfu_from_report

    try:
        with open(path, "rb") as fh:
            report = json.load(fh)
    except OSError as exc:
        raise PerfDoctorError(f"{path}: cannot read report ({exc.strerror})") from None
    except ValueError:
        raise PerfDoctorError(f"{path}: not a JSON report") from None
    return mfu_from_report(report, path)


def _why(dtype: str, wanted: str | None) -> str:
    """Why the figure is not bf16 when the user did not choose: the table has no bf16 peak for the GPU."""
    return f"{dtype} because this GPU has no bf16 tensor peak; " if wanted is None and dtype != "bf16" else ""


def _si(value: float) -> str:
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6)):
        if value >= scale:
            return f"{value / scale:.1f}{unit}"
    return f"{value:.0f}"


NUMERIC = ("params", "gpus", "mfu", "tokens_per_param", "seq_len", "micro_batch", "d_model", "layers", "heads")


def _check_finite(args: argparse.Namespace) -> None:
    """Raise PerfDoctorError for a NaN or infinite numeric flag (argparse's float() accepts "nan" and "inf")."""
    for name in NUMERIC:
        value = getattr(args, name, None)
        if value is not None and not math.isfinite(value):
            raise PerfDoctorError(f"--{name.replace('_', '-')}: must be a finite number, got {value}")


def _dtype_and_peak(spec, wanted: str | None) -> tuple[str, float]:
    """The GEMM dtype (``wanted``, else the GPU's best 16-bit tensor dtype) and its dense peak, FLOP/s."""
    from perfdoctor.analysis.hardware import DTYPES

    have = ", ".join(d for d in DTYPES if d in spec.peak_flops)
    if wanted is not None:
        dtype = wanted.strip().lower()
        if dtype not in DTYPES:
            raise PerfDoctorError(f"--dtype: {wanted!r} is not one of {', '.join(DTYPES)}")
        if spec.peak(dtype) is None:
            raise PerfDoctorError(f"--dtype: {spec.name} has no dense {dtype} peak in the hardware table "
                                  f"(it has: {have})")
        return dtype, spec.peak(dtype)
    dtype = spec.best_16bit_dtype()
    if dtype is None:
        raise PerfDoctorError(f"{spec.name} has no 16-bit tensor peak in the hardware table (it has: {have}); "
                              "choose one with --dtype")
    return dtype, spec.peak(dtype)


def run(args: argparse.Namespace) -> int:
    from perfdoctor.analysis.budget import plan
    from perfdoctor.analysis.hardware import spec_by_name

    _check_finite(args)
    spec = spec_by_name(args.gpu)
    dtype, peak = _dtype_and_peak(spec, args.dtype)
    if args.from_report:
        mfu, source = _read_report(args.from_report), f"measured in {args.from_report}"
    else:
        mfu, source = (0.4 if args.mfu is None else args.mfu), "--mfu" if args.mfu is not None else "default 0.4"
    try:
        b = plan(args.params, args.gpus, spec.name, peak, mfu, source, args.tokens_per_param, args.seq_len,
                 args.micro_batch, args.d_model, args.layers, args.heads, dtype)
    except ValueError as exc:
        raise PerfDoctorError(str(exc)) from None
    if args.json:
        print(json.dumps(b.to_dict(), indent=2))
        return 0
    lines = [
        f"model         {_si(b.n_params)} parameters on {b.n_gpus} × {spec.name}",
        f"peak          {peak / 1e12:.1f} TFLOP/s dense {dtype} per GPU ({_why(dtype, args.dtype)}"
        f"{spec.source_of(dtype)})",
        f"MFU           {b.mfu:.1%} ({b.mfu_source})",
        f"tokens        {_si(b.tokens)} ({args.tokens_per_param:g} tokens/param, Chinchilla)",
        f"compute       {b.total_flops:.1e} FLOP (6·N·D)",
        f"wall-clock    {b.hours:.1f} h ({b.hours / 24:.1f} days)",
        f"model state   {b.model_state_bytes_ddp / 1e9:.1f} GB/GPU under DDP, "
        f"{b.model_state_bytes_sharded / 1e9:.1f} GB/GPU under ZeRO-3/FSDP (16 B/param, mixed-precision Adam)",
    ]
    if b.activation_bytes is not None:
        lines.append(f"activations   {b.activation_bytes / 1e9:.1f} GB/GPU per micro-batch ({b.activation_formula})")
    else:
        lines.append("activations   not estimated (give --seq-len --micro-batch --d-model --layers)")
    print("\n".join(lines))
    return 0
