"""Model FLOPs utilisation (MFU), and hardware FLOPs.

MFU = model FLOPs per step ÷ step time ÷ peak FLOP/s of *this* device at the dtype
the GEMMs actually ran in (Chowdhery et al., "PaLM", 2022, Appendix B). It is
computed per rank: a rank's local FLOPs over its local device's peak. Model FLOPs
exclude activation recomputation; hardware FLOPs (the op-level sum from the trace)
include it, so HFU ≥ MFU when recomputation is on.

Sources of model FLOPs, in order of preference: ``perfdoctor profile``'s
FlopCounterMode measurement, the op-level sum (:mod:`perfdoctor.analysis.work.roofline`),
or the transformer estimate :func:`transformer_flops_per_token`.

Every function taking plain numbers is exact (no rounding); callers round for display.
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import TYPE_CHECKING, Literal

import msgspec

from perfdoctor.analysis.missing import MissingReason
from perfdoctor.analysis.work.roofline import RooflineResult, Roofs

if TYPE_CHECKING:
    from perfdoctor.analysis.steps.steps import Steps
    from perfdoctor.trace.tables import TraceTables


def transformer_flops_per_token(n_params: float, n_layers: int, n_heads: int, d_model: int, seq_len: int) -> float:
    """Training FLOPs per token of a decoder-only transformer: 6N + 12·L·H·Q·T.

    N: non-embedding parameters excluding position embeddings; L layers; H heads;
    Q = d_model / H the head size; T the *actual* sequence length of the step (not the
    configured maximum). 6N is forward + backward of the weight matmuls (2N + 4N);
    12·L·H·Q·T the attention score and value matmuls. Source: Chowdhery et al.,
    "PaLM: Scaling Language Modeling with Pathways" (2022), Appendix B.

    Raises:
        ValueError: d_model not divisible by n_heads, or a non-positive size.
    """
    if min(n_params, n_layers, n_heads, d_model, seq_len) <= 0:
        raise ValueError("all sizes must be positive")
    if d_model % n_heads:
        raise ValueError(f"d_model {d_model} is not divisible by n_heads {n_heads}")
    q = d_model // n_heads
    return 6.0 * n_params + 12.0 * n_layers * n_heads * q * seq_len


def model_flops_per_step(flops_per_token: float, tokens_per_step: float) -> float:
    """FLOP per optimizer step = FLOP/token × tokens processed by this rank per step."""
    return flops_per_token * tokens_per_step


def achieved_flops_per_s(flops_per_step: float, step_time_s: float) -> float:
    """FLOP/s = FLOP per step ÷ step time in seconds. Raises ValueError for step_time_s ≤ 0."""
    if step_time_s <= 0:
        raise ValueError("step time must be positive")
    return flops_per_step / step_time_s


def mfu(flops_per_step: float, step_time_s: float, peak_flops_per_s: float) -> float:
    """Model FLOPs utilisation as a fraction (0.23 = 23%): achieved FLOP/s ÷ peak FLOP/s."""
    return achieved_flops_per_s(flops_per_step, step_time_s) / peak_flops_per_s


def gemm_dtype(tables: TraceTables, steps: Steps | None = None) -> tuple[str | None, dict[str, float]]:
    """The dtype the GEMMs ran in, weighted by GEMM kernel time.

    Returns ``(dominant dtype or None, {dtype: µs})``. On GPU: the GEMM/conv kernels of
    :func:`perfdoctor.analysis.timing.kernel_dtype.gemm_mask` (the same set PD203 judges) by the dtype their names
    say (:mod:`perfdoctor.analysis.timing.kernel_dtype`), only those of the analysed steps when ``steps``
    (:class:`perfdoctor.analysis.steps.steps.Steps`, kernels by
    :meth:`~perfdoctor.analysis.steps.steps.Steps.activity_step`)
    is given, else the whole trace. In a CPU-only trace from the ``Input type`` of matmul-family cpu_ops
    (weighted by their duration).
    """
    from perfdoctor.analysis.timing.kernel_dtype import gemm_mask, gemm_time_by_dtype
    from perfdoctor.analysis.timing.kernel_ops import kernel_labels

    shares: dict[str, float] = defaultdict(float)
    names = tables.names
    k = tables.kernels
    if len(k):
        sel = gemm_mask(names, k["name_id"], kernel_labels(tables).category)
        if steps is not None:
            sel &= steps.activity_step(tables, "kernels") >= 0
        shares.update(gemm_time_by_dtype(names, k["name_id"][sel], k["dur_us"][sel]))
    else:
        from perfdoctor.analysis.work.op_args import OpCost
        from perfdoctor.analysis.work.op_flops import cost_op

        ops = tables.cpu_ops
        for nid, dims, types, dur in zip(
            ops["name_id"].tolist(), ops["input_dims"], ops["input_type"], ops["dur_us"].tolist()
        ):
            if names[nid] in ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::linear"):
                c = cost_op(names[nid], dims, types)
                if isinstance(c, OpCost) and c.dtype:  # an Uncosted op has no dtype
                    shares[c.dtype] += dur
    dominant = max(shares, key=lambda dt: shares[dt]) if shares else None
    return dominant, dict(shares)


# where a rank's model FLOPs per step come from: FlopCounterMode in ``perfdoctor profile``, the op-level sum of
# the trace (:mod:`perfdoctor.analysis.work.roofline`), or :func:`transformer_flops_per_token` × tokens
FlopsSource = Literal["flop_counter", "op_sum", "transformer_formula"]


class ModelFlops(msgspec.Struct, frozen=True):
    """A rank's model FLOP per optimizer step (``per_step``, FLOP; no recomputation) and where it comes from."""

    per_step: float
    source: FlopsSource = "flop_counter"


class MfuResult(msgspec.Struct, kw_only=True):
    """MFU of one rank (the report's ``mfu``). FLOP per step, s, FLOP/s, fractions 0-1; ``None`` where the input
    was missing, and ``mfu`` None with inputs computed but no ratio reported (``note`` says why).

    ``model_flops_per_step`` / ``flops_source``: the :class:`ModelFlops` used; ``peak_source``: the Roofs source
    string; ``on_gpu``: False for CPU traces (an MFU against a GPU peak would be meaningless there, so CPU MFU uses
    measured peaks only)."""

    model_flops_per_step: float
    step_time_s: float
    achieved_flops_per_s: float
    dtype: str | None
    peak_flops_per_s: float | None
    mfu: float | None
    hardware_flops_per_step: float | None
    hfu: float | None
    flops_source: str
    peak_source: str | None
    on_gpu: bool
    note: str = ""


# model FLOPs above this multiple of the op-level (hardware) FLOP count, with the ops well covered, cannot both
# describe one trace: the model FLOP inputs (tokens per step, sizes) do not match it
MAX_MODEL_OVER_HARDWARE = 2.0


def compute_mfu(
    model_flops: ModelFlops,
    step_time_s: float,
    roofs: Roofs | None,
    dtype: str | None,
    on_gpu: bool,
    hardware_flops: float | None = None,
    busy_fraction: float | None = None,
    hardware_flops_complete: bool = False,
) -> MfuResult:
    """MFU (and HFU when ``hardware_flops`` differs) of one rank.

    Two consistency checks keep an impossible MFU out of the report (``mfu`` None, the reason in ``note``):
    the device can only do FLOPs while busy, so MFU ≤ ``busy_fraction`` (busy time ÷ step time); and model
    FLOPs (no recomputation) cannot exceed the op-level FLOPs actually run by more than
    :data:`MAX_MODEL_OVER_HARDWARE` when ``hardware_flops_complete`` (almost all op time was costed).

    Args:
        model_flops: model FLOP per step on this rank, and their source.
        step_time_s: median step time, s.
        roofs: this rank's device ceilings (spec or measured); None → mfu None.
        dtype: GEMM math dtype (:func:`gemm_dtype`); its peak is the denominator.
        on_gpu: recorded in the result.
        hardware_flops: op-level FLOP per step including recomputation, if known.
        busy_fraction: device (CPU trace: host-op) busy time ÷ step time, 0–1, if known.
        hardware_flops_complete: ``hardware_flops`` covers almost all op time (see ``MAX_UNCOSTED_SHARE``).
    """
    achieved = achieved_flops_per_s(model_flops.per_step, step_time_s)
    peak, note = _peak(roofs, dtype, on_gpu)
    hfu = achieved_flops_per_s(hardware_flops, step_time_s) / peak if hardware_flops is not None and peak else None
    if peak and max(achieved / peak, hfu or 0.0) > 1.0:
        note = _above_peak(max(achieved, (hfu or 0) * peak), peak, roofs, model_flops.source)
        peak, hfu = None, None
    if peak and model_flops.source != "op_sum":
        problem = _model_flops_mismatch(
            achieved / peak, model_flops.per_step, hardware_flops, busy_fraction, hardware_flops_complete
        )
        if problem:
            note = f"MFU not reported: {problem}; check the model FLOP inputs ({model_flops.source})"
            peak = None
    return MfuResult(
        model_flops_per_step=model_flops.per_step,
        step_time_s=step_time_s,
        achieved_flops_per_s=achieved,
        dtype=dtype,
        peak_flops_per_s=peak,
        mfu=achieved / peak if peak else None,
        hardware_flops_per_step=hardware_flops,
        hfu=hfu if peak else None,
        flops_source=model_flops.source,
        peak_source=roofs.source if roofs else None,
        on_gpu=on_gpu,
        note=note,
    )


def _peak(roofs: Roofs | None, dtype: str | None, on_gpu: bool) -> tuple[float | None, str]:
    """The peak FLOP/s MFU is taken against (None: none that means anything) and why it is missing ("" if not)."""
    peak = roofs.peak(dtype) if roofs else None
    note = ""
    if roofs is not None and peak is None:
        note = f"no {dtype or 'GEMM dtype'} peak for {roofs.device}"
    if not on_gpu and roofs is not None and roofs.kind != "measured":
        peak, note = None, "CPU trace: only a measured peak (perfdoctor calibrate) is meaningful"
    if roofs is None:
        note = (
            "no measured CPU peak: run `perfdoctor calibrate` on the machine that recorded the trace (a GPU "
            "datasheet peak means nothing for a CPU run)"
            if not on_gpu
            else "the device is not in the hardware table and no measured peak was given (perfdoctor calibrate)"
        )
    return peak, note


def _above_peak(rate: float, peak: float, roofs: Roofs | None, flops_source: str) -> str:
    """Why no ratio is shown when the achieved ``rate`` (FLOP/s) beats the ``peak``: the peak (a measured one) or
    the FLOP count (against a datasheet peak, which cannot be beaten) is wrong."""
    blame = (
        "that peak is too low (re-run `perfdoctor calibrate` on an idle machine, without --quick)"
        if roofs is not None and roofs.kind == "measured"
        else f"a datasheet peak cannot be beaten, so the FLOP count ({flops_source}) is too high for this trace"
    )
    return (
        f"achieved {rate / 1e12:.3g} TFLOP/s exceeds the {peak / 1e12:.3g} TFLOP/s "
        f"peak ({roofs.source if roofs else '?'}): {blame}; MFU not reported"
    )


def _model_flops_mismatch(
    mfu_value: float,
    model_flops: float,
    hardware_flops: float | None,
    busy_fraction: float | None,
    hardware_complete: bool,
) -> str:
    """Why model FLOPs of ``model_flops`` per step cannot describe this trace ("" when they can)."""
    if busy_fraction is not None and mfu_value > busy_fraction * 1.05 + 0.005:
        return (
            f"the model FLOPs per step would be an MFU of {mfu_value:.1%} on a device busy only "
            f"{busy_fraction:.1%} of the step (it would have to run at {mfu_value / max(busy_fraction, 1e-9):.0%} "
            "of its peak while busy)"
        )
    if hardware_complete and hardware_flops and model_flops > MAX_MODEL_OVER_HARDWARE * hardware_flops:
        return (
            f"the model FLOPs per step ({model_flops:.3g}) are {model_flops / hardware_flops:.1f}x the FLOPs of the "
            f"ops the trace ran ({hardware_flops:.3g})"
        )
    return ""


def roofs_for_trace(tables: TraceTables, measured: Roofs | None = None, prefer: str = "spec") -> Roofs | None:
    """The roofs one rank's analysis should use.

    GPU trace: the datasheet roofs of the matched device (``prefer="spec"``), or the
    measured ones when ``prefer="measured"`` and given; None when the device is unknown
    and nothing was measured. CPU-only trace: only ``measured`` (never a datasheet).
    """
    from perfdoctor.analysis.work.hardware import device_for_trace
    from perfdoctor.analysis.work.roofline import roofs_from_spec

    if not tables.has_device_activity:
        return measured
    if prefer == "measured" and measured is not None:
        return measured
    spec = device_for_trace(tables.device_properties)
    if spec is None and not tables.device_properties:
        from perfdoctor.analysis.timing.arch import infer_from_tables

        guess = infer_from_tables(tables)  # no deviceProperties: the family's datasheet, the assumption stated
        if guess is not None and guess.spec is not None:
            roofs = roofs_from_spec(guess.spec)
            return msgspec.structs.replace(
                roofs,
                device=f"{roofs.device} (assumed: {guess.label})",
                source=f"{roofs.source}; assumed from kernel names ({guess.evidence}): {guess.assumption}",
            )
    return roofs_from_spec(spec) if spec else measured


# Op-level FLOPs stand in for model FLOPs only when they cover the device time:
# above this share of uncosted time the sum would understate the work (a wrong MFU).
MAX_UNCOSTED_SHARE = 0.05
# communication ops move data, they do no model FLOPs: not counted as uncosted compute
_COMM_OP = re.compile(r"record_param_comms|^nccl:|^c10d::|gloo|all_?reduce|all_?gather|reduce_?scatter|broadcast")
_GIVE_FLOPS = "(perfdoctor profile measures them; or pass --params/--layers/--heads/--d-model/--seq-len)"


def op_sum_unusable(roofline: RooflineResult | None) -> MissingReason | None:
    """Why the op-level FLOP sum can't stand in for model FLOPs (None when it can).

    Codes: ``no_shapes`` (no roofline: shapes not recorded), ``no_costed_op``, ``uncosted_ops`` (ops that
    could not be costed, communication left out, take more than :data:`MAX_UNCOSTED_SHARE` of op time).
    """
    if roofline is None:
        return MissingReason(
            code="no_shapes",
            message="no input shapes recorded (profile with record_shapes=True), "
            f"and no model FLOPs given {_GIVE_FLOPS}",
        )
    uncosted = sum(u.time_us for u in roofline.uncosted if not _COMM_OP.search(u.name))
    total = roofline.costed_time_us + uncosted
    if total <= 0 or roofline.total_flops <= 0:
        return MissingReason(code="no_costed_op", message="no op could be costed from the recorded shapes")
    share = uncosted / total
    if share > MAX_UNCOSTED_SHARE:
        return MissingReason(
            code="uncosted_ops",
            message=(
                f"ops that could not be costed take {share:.0%} of op time, so the op-level FLOP sum would "
                "understate the work; give model FLOPs (perfdoctor profile, or --params/--layers/--heads/--d-model/"
                "--seq-len)"
            ),
        )
    return None


def trace_mfu(
    tables: TraceTables,
    roofs: Roofs | None,
    step_time_s: float,
    n_steps: int,
    model_flops: ModelFlops | None = None,
    roofline: RooflineResult | None | Literal["compute"] = "compute",
    busy_fraction: float | None = None,
) -> MfuResult | MissingReason:
    """MFU of one rank from its trace: the one MFU path (``perfdoctor report`` runs it through
    :func:`add_efficiency`).

    Hardware FLOPs per step = the op-level FLOP sum of the whole trace (``roofline``, computed from
    ``tables`` when "compute"; None = shapes not recorded) ÷ ``n_steps`` (the trace should hold whole steps).
    Model FLOPs are ``model_flops`` when given (FlopCounterMode from ``perfdoctor profile``, or
    :func:`transformer_flops_per_token` × tokens); else the op sum (source ``"op_sum"``), but only
    when :func:`op_sum_unusable` finds no reason against it — else that reason is returned, so MFU is left
    out, never understated. ``step_time_s``: the step time (s) MFU is taken over; ``busy_fraction``: device
    busy time ÷ step time (0–1), the most of a step it could compute in (see :func:`compute_mfu`).

    Raises:
        ValueError: ``n_steps`` or ``step_time_s`` not positive.
    """
    from perfdoctor.analysis.work.roofline import roofline_table

    if n_steps <= 0:
        raise ValueError("n_steps must be positive")
    if isinstance(roofline, str):
        roofline = roofline_table(tables, roofs, top=0, chart_points=0)
    dtype, _ = gemm_dtype(tables)
    on_gpu = bool(tables.has_device_activity)
    op_sum = roofline.total_flops / n_steps if roofline is not None else None
    unusable = op_sum_unusable(roofline)
    if model_flops is not None:
        return compute_mfu(
            model_flops,
            step_time_s,
            roofs,
            dtype,
            on_gpu,
            op_sum,
            busy_fraction=busy_fraction,
            hardware_flops_complete=unusable is None,
        )
    if unusable is not None or op_sum is None:
        return unusable or MissingReason(code="no_shapes", message="no op-level FLOPs")
    return compute_mfu(ModelFlops(op_sum, "op_sum"), step_time_s, roofs, dtype, on_gpu, op_sum)
