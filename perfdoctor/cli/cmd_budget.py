"""`perfdoctor budget`: compute-optimal tokens, FLOPs, hours and memory per GPU for a training run."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from perfdoctor.cli.numbers import check_finite, flag
from perfdoctor.errors import PerfDoctorError

if TYPE_CHECKING:
    from perfdoctor.analysis.work.hardware import DeviceSpec
    from perfdoctor.budget.plan import Budget
    from perfdoctor.trace.json_value import JsonValue

NAME = "budget"
HELP = "plan a training run: compute-optimal tokens, 6·N·D FLOPs, wall-clock hours at an MFU, memory per GPU"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--params", type=float, required=True, help="model parameters, e.g. 1.3e9")
    parser.add_argument("--gpus", type=int, required=True, help="number of GPUs")
    parser.add_argument("--gpu", required=True, help="GPU model from the hardware table, e.g. H100, A100, MI300X")
    parser.add_argument(
        "--dtype",
        default=None,
        help="GEMM dtype whose dense peak is used: fp64, fp32, tf32, bf16, fp16, fp8 (default: bf16, "
        "or fp16 on GPUs without bf16 tensor cores such as V100 and T4)",
    )
    src = parser.add_mutually_exclusive_group()
    src.add_argument("--mfu", type=float, default=None, help="assumed MFU as a fraction (default 0.4)")
    src.add_argument("--from-report", metavar="REPORT_JSON", help="use the MFU a perfdoctor JSON report measured")
    parser.add_argument(
        "--tokens-per-param",
        type=float,
        default=20.0,
        help="tokens per parameter (default 20: Chinchilla, Hoffmann et al. 2022)",
    )
    parser.add_argument("--seq-len", type=int, help="sequence length (activation memory)")
    parser.add_argument("--micro-batch", type=int, help="micro-batch size per GPU (activation memory)")
    parser.add_argument("--d-model", type=int, help="hidden size (activation memory)")
    parser.add_argument("--layers", type=int, help="transformer layers (activation memory)")
    parser.add_argument("--heads", type=int, help="attention heads: adds the stored attention scores (no flash)")
    parser.add_argument("--json", action="store_true", help="print the budget as JSON")


def _load_json(path: str) -> JsonValue:
    """The parsed JSON of ``path``, of any shape: the budget's readers check it is a perfdoctor report.

    Raises:
        PerfDoctorError: the file cannot be read or is not JSON.
    """
    try:
        with open(path, "rb") as fh:
            doc: JsonValue = json.load(fh)
            return doc
    except OSError as exc:
        raise PerfDoctorError(f"{path}: cannot read report ({exc.strerror})") from None
    except ValueError:
        raise PerfDoctorError(f"{path}: not a JSON report") from None


def _read_report(path: str, spec: DeviceSpec, dtype: str, peak: float) -> float:
    """The report's MFU, refused unless measured on ``spec`` at ``dtype``'s peak (see mfu_from_report)."""
    from perfdoctor.budget.measured import mfu_from_report

    return mfu_from_report(_load_json(path), path, spec, dtype, peak)


def _why(dtype: str, wanted: str | None) -> str:
    """Why the figure is not bf16 when the user did not choose: the table has no bf16 peak for the GPU."""
    return f"{dtype} because this GPU has no bf16 tensor peak; " if wanted is None and dtype != "bf16" else ""


def _si(value: float) -> str:
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6)):
        if value >= scale:
            return f"{value / scale:.1f}{unit}"
    return f"{value:.0f}"


NUMERIC = ("params", "gpus", "mfu", "tokens_per_param", "seq_len", "micro_batch", "d_model", "layers", "heads")


SHAPE = ("seq_len", "micro_batch", "d_model", "layers")


def _check_inputs(args: argparse.Namespace) -> None:
    """Raise PerfDoctorError naming the flag for any input a plan cannot use: non-finite or
    non-positive numbers, fewer than 1 GPU, MFU outside (0, 1], heads not dividing d-model, or
    only part of the activation shape (activations need all of --seq-len --micro-batch
    --d-model --layers; --heads only adds to them)."""
    check_finite(args, NUMERIC)
    if args.params <= 0:
        raise PerfDoctorError(f"--params: must be a positive parameter count (e.g. 1.3e9), got {args.params:g}")
    if args.gpus < 1:
        raise PerfDoctorError(f"--gpus: must be at least 1, got {args.gpus}")
    if args.mfu is not None and not 0 < args.mfu <= 1:
        raise PerfDoctorError(f"--mfu: must be a fraction in (0, 1] (0.4 for 40%), got {args.mfu:g}")
    if args.tokens_per_param <= 0:
        raise PerfDoctorError(f"--tokens-per-param: must be positive, got {args.tokens_per_param:g}")
    for name in (*SHAPE, "heads"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise PerfDoctorError(f"{flag(name)}: must be at least 1, got {value}")
    if args.heads is not None and args.d_model is not None and args.d_model % args.heads:
        raise PerfDoctorError(
            f"--heads: {args.heads} heads do not divide --d-model {args.d_model} "
            f"({args.d_model} / {args.heads} = {args.d_model / args.heads:.4g}, "
            "not a whole head size)"
        )
    given = [n for n in (*SHAPE, "heads") if getattr(args, n) is not None]
    missing = [flag(n) for n in SHAPE if getattr(args, n) is None]
    if given and missing:
        raise PerfDoctorError(
            f"{', '.join(map(flag, given))} given without {', '.join(missing)}: activation "
            "memory needs --seq-len, --micro-batch, --d-model and --layers together"
        )


def _dtype_and_peak(spec: DeviceSpec, wanted: str | None) -> tuple[str, float]:
    """The GEMM dtype (``wanted``, else the GPU's best 16-bit tensor dtype) and its dense peak, FLOP/s."""
    from perfdoctor.analysis.work.hardware import DTYPES

    have = ", ".join(d for d in DTYPES if d in spec.peak_flops)
    if wanted is not None:
        dtype = wanted.strip().lower()
        if dtype not in DTYPES:
            raise PerfDoctorError(f"--dtype: {wanted!r} is not one of {', '.join(DTYPES)}")
        peak = spec.peak(dtype)
        if peak is None:
            raise PerfDoctorError(
                f"--dtype: {spec.name} has no dense {dtype} peak in the hardware table (it has: {have})"
            )
        return dtype, peak
    best = spec.best_16bit_dtype()
    peak = None if best is None else spec.peak(best)
    if best is None or peak is None:
        raise PerfDoctorError(
            f"{spec.name} has no 16-bit tensor peak in the hardware table (it has: {have}); choose one with --dtype"
        )
    return best, peak


def _fit(b: Budget, name: str, capacity_bytes: float) -> str:
    """``"fits in 80 GB"`` or ``"does not fit in 80 GB"`` for one per-GPU memory figure of ``b`` on a GPU of
    ``capacity_bytes``."""
    return f"{'fits' if b.fits[name] else 'does not fit'} in {capacity_bytes / 1e9:g} GB"


def _memory_lines(b: Budget, spec: DeviceSpec, peak_source: str) -> list[str]:
    """Terminal lines for GPU memory, model state, activations and their totals, each marked fits or not."""
    mem_src, cap = spec.source_of("memory"), spec.memory_bytes  # the capacity the plan was given
    lines = [
        f"GPU memory    {cap / 1e9:g} GB per GPU" + ("" if mem_src == peak_source else f" ({mem_src})"),
        (
            f"model state   {b.model_state_bytes_ddp / 1e9:.1f} GB/GPU under DDP ({_fit(b, 'model_state_ddp', cap)}), "
            f"{b.model_state_bytes_sharded / 1e9:.1f} GB/GPU under ZeRO-3/FSDP "
            f"({_fit(b, 'model_state_sharded', cap)}); "
            "16 B/param, mixed-precision Adam"
        ),
    ]
    if b.activation_bytes is None:
        lines.append("activations   not estimated (give --seq-len --micro-batch --d-model --layers)")
        return lines
    lines.append(
        f"activations   {b.activation_bytes / 1e9:.1f} GB/GPU per micro-batch ({_fit(b, 'activations', cap)}); "
        f"{b.activation_formula}"
    )
    lines.append(
        f"total         {(b.model_state_bytes_ddp + b.activation_bytes) / 1e9:.1f} GB/GPU under DDP "
        f"({_fit(b, 'total_ddp', cap)}), {(b.model_state_bytes_sharded + b.activation_bytes) / 1e9:.1f} GB/GPU "
        f"under ZeRO-3/FSDP ({_fit(b, 'total_sharded', cap)})"
    )
    return lines


def run(args: argparse.Namespace) -> int:
    from perfdoctor.analysis.work.hardware import spec_by_name
    from perfdoctor.budget.plan import plan

    _check_inputs(args)
    spec = spec_by_name(args.gpu)
    dtype, peak = _dtype_and_peak(spec, args.dtype)
    if args.from_report:
        mfu, source = _read_report(args.from_report, spec, dtype, peak), f"measured in {args.from_report}"
    else:
        mfu, source = (0.4 if args.mfu is None else args.mfu), "--mfu" if args.mfu is not None else "default 0.4"
    try:
        b = plan(
            args.params,
            args.gpus,
            spec.name,
            peak,
            mfu,
            source,
            args.tokens_per_param,
            args.seq_len,
            args.micro_batch,
            args.d_model,
            args.layers,
            args.heads,
            dtype,
            spec.memory_bytes,
        )
    except ValueError as exc:
        raise PerfDoctorError(str(exc)) from None
    if args.from_report:
        from perfdoctor.budget.measured import report_mfu_caveats

        b.warnings.extend(report_mfu_caveats(_load_json(args.from_report), mfu))
    if args.json:
        print(json.dumps(b.to_dict(), indent=2))
        return 0
    lines = [
        f"model         {_si(b.n_params)} parameters on {b.n_gpus} × {spec.name}",
        f"peak          {peak / 1e12:.1f} TFLOP/s dense {dtype} per GPU ({_why(dtype, args.dtype)}"
        f"{spec.source_of(dtype)})",
        f"MFU           {b.mfu:.1%} ({b.mfu_source})",
        f"tokens        {_si(b.tokens)} ({b.tokens_per_param:g} tokens/param, {b.tokens_source})",
        f"compute       {b.total_flops:.1e} FLOP (6·N·D)",
        f"wall-clock    {b.hours:.1f} h ({b.hours / 24:.1f} days)",
        *_memory_lines(b, spec, spec.source_of(dtype)),
        *(f"warning       {w}" for w in b.warnings),
    ]
    print("\n".join(lines))
    return 0
