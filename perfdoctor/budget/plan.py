"""Training budget: compute-optimal tokens, total FLOPs, wall-clock and memory per GPU.

Sources:
- tokens = 20 × parameters: Hoffmann et al., "Training Compute-Optimal Large Language
  Models" (Chinchilla, 2022), Table 3 (≈20 tokens per parameter).
- training FLOPs C = 6·N·D: Kaplan et al., "Scaling Laws for Neural Language Models"
  (2020), §2.1 (forward 2N + backward 4N per token).
- model state 16 bytes/param with mixed-precision Adam (fp16/bf16 weights 2 + grads 2,
  fp32 master weights 4 + momentum 4 + variance 4): Rajbhandari et al., "ZeRO" (2020),
  §3.1. DDP replicates it; ZeRO-3/FSDP full sharding divides it by the GPU count.
- activations per layer s·b·h·(34 + 5·a·s/h) bytes with 16-bit activations and no
  tensor/sequence parallelism: Korthikanti et al., "Reducing Activation Recomputation
  in Large Transformer Models" (2022), §4.1, eq. (1); with FlashAttention the a·s²
  scores are not stored, leaving 34·s·b·h.
- GPU memory capacity: the datasheet figure in :mod:`perfdoctor.analysis.work.hardware`
  (decimal GB, as printed). It is an upper bound: the CUDA context, the allocator's
  cache and fragmentation take some of it, so "fits" is necessary, not sufficient.

All sizes decimal (1 GB = 1e9 B). Every function is exact; callers round.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

TOKENS_PER_PARAM = 20.0  # Chinchilla (Hoffmann et al. 2022, Table 3)
MODEL_STATE_BYTES_PER_PARAM = 16.0


@dataclass
class Budget:
    """``tokens``; ``total_flops`` FLOP; ``hours`` h; ``model_state_bytes_ddp`` and
    ``model_state_bytes_sharded`` bytes per GPU; ``activation_bytes`` per GPU (None
    without the shape arguments); ``dtype`` the GEMM dtype whose dense peak
    ``peak_flops_per_s`` (FLOP/s) is; ``tokens_source`` says whether ``tokens_per_param``
    is Chinchilla's 20 or the user's; ``gpu_memory_bytes`` the GPU's capacity (None when
    not given), ``fits`` maps each per-GPU memory figure (``model_state_ddp``,
    ``model_state_sharded``, ``activations``, ``total_ddp``, ``total_sharded``) to whether
    it is at most that capacity; ``warnings`` one line each (e.g. nothing fits)."""

    n_params: float
    n_gpus: int
    gpu: str
    peak_flops_per_s: float
    mfu: float
    mfu_source: str
    tokens: float
    total_flops: float
    seconds: float
    hours: float
    model_state_bytes_ddp: float
    model_state_bytes_sharded: float
    activation_bytes: float | None
    activation_formula: str | None
    dtype: str = "bf16"
    tokens_per_param: float = TOKENS_PER_PARAM
    tokens_source: str = "Chinchilla, Hoffmann et al. 2022"
    gpu_memory_bytes: float | None = None
    fits: dict[str, bool] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, object]:
        """The budget as plain values (``--json``)."""
        return asdict(self)


def training_flops(n_params: float, tokens: float) -> float:
    """C = 6·N·D (Kaplan et al. 2020)."""
    return 6.0 * n_params * tokens


def wall_clock_seconds(total_flops: float, n_gpus: int, peak_flops_per_s: float, mfu: float) -> float:
    """Seconds = C ÷ (GPUs × peak × MFU)."""
    return total_flops / (n_gpus * peak_flops_per_s * mfu)


def activation_bytes(seq_len: int, micro_batch: int, d_model: int, n_layers: int, n_heads: int | None = None) -> float:
    """Activation memory of one micro-batch, bytes: L·s·b·h·(34 + 5·a·s/h) (Korthikanti
    et al. 2022); without ``n_heads`` the attention-score term is dropped (FlashAttention)."""
    per_layer = 34.0 * seq_len * micro_batch * d_model
    if n_heads:
        per_layer += 5.0 * n_heads * seq_len * seq_len * micro_batch
    return n_layers * per_layer


def tokens_source(tokens_per_param: float) -> str:
    """Where the tokens-per-parameter ratio comes from: Chinchilla's 20 (Hoffmann et al.
    2022, Table 3) only for exactly that ratio; any other value is the user's."""
    return "Chinchilla, Hoffmann et al. 2022" if tokens_per_param == TOKENS_PER_PARAM else "user-given"


def memory_fit(per_gpu_bytes: dict[str, float | None], capacity_bytes: float) -> dict[str, bool]:
    """Whether each per-GPU figure (bytes) is at most ``capacity_bytes``; None figures are left out."""
    return {name: value <= capacity_bytes for name, value in per_gpu_bytes.items() if value is not None}


def fit_warnings(state_sharded: float, act: float | None, fits: dict[str, bool], capacity_bytes: float) -> list[str]:
    """One line when the run fits under neither DDP nor ZeRO-3/FSDP (bytes per GPU), naming what is too big."""
    # ZeRO-3/FSDP never needs more per GPU than DDP, so when it does not fit nothing does
    if fits.get("total_sharded" if "total_sharded" in fits else "model_state_sharded", True):
        return []
    gb = capacity_bytes / 1e9
    why = []
    if state_sharded > capacity_bytes:
        why.append(
            f"model state alone needs {state_sharded / 1e9:.1f} GB/GPU even under ZeRO-3/FSDP "
            "(use more GPUs, or tensor/pipeline parallelism)"
        )
    if act is not None and act > capacity_bytes:
        why.append(
            f"activations alone need {act / 1e9:.1f} GB/GPU (use a smaller micro-batch, recompute "
            "activations or shard the sequence)"
        )
    if not why:
        why.append(
            f"ZeRO-3/FSDP model state plus activations need {(state_sharded + (act or 0)) / 1e9:.1f} GB/GPU "
            "(use a smaller micro-batch, recompute activations, or use more GPUs)"
        )
    return [f"nothing fits in {gb:g} GB per GPU: " + "; ".join(why)]


def _check_plan_inputs(numbers: dict[str, float | None], mfu: float, d_model: int | None, n_heads: int | None) -> None:
    """Raise ValueError for a NaN/infinite MFU or number, a non-positive size, MFU outside (0, 1]
    or a head count that does not divide the model width."""
    if not math.isfinite(mfu):
        raise ValueError(f"MFU must be a finite number, got {mfu}")
    for name, value in numbers.items():
        if value is not None and not math.isfinite(value):
            raise ValueError(f"{name} must be a finite number, got {value}")
        if value is not None and value <= 0:
            raise ValueError(f"{name} must be positive, got {value}")
    if not 0 < mfu <= 1:
        raise ValueError(f"MFU must be in (0, 1], got {mfu}")
    if d_model is not None and n_heads is not None and d_model % n_heads:
        raise ValueError(f"heads ({n_heads}) must divide d-model ({d_model})")


def plan(
    n_params: float,
    n_gpus: int,
    gpu: str,
    peak_flops_per_s: float,
    mfu: float,
    mfu_source: str = "--mfu",
    tokens_per_param: float = TOKENS_PER_PARAM,
    seq_len: int | None = None,
    micro_batch: int | None = None,
    d_model: int | None = None,
    n_layers: int | None = None,
    n_heads: int | None = None,
    dtype: str = "bf16",
    gpu_memory_bytes: float | None = None,
) -> Budget:
    """A compute-optimal training budget (``peak_flops_per_s``: dense peak at ``dtype``, FLOP/s;
    ``gpu_memory_bytes``: the GPU's capacity, bytes, to mark what fits).

    Raises:
        ValueError: a NaN or infinite number, a non-positive size, MFU outside (0, 1], or
            ``n_heads`` not dividing ``d_model``.
    """
    _check_plan_inputs(
        {
            "params": n_params,
            "gpus": n_gpus,
            "peak": peak_flops_per_s,
            "tokens-per-param": tokens_per_param,
            "seq-len": seq_len,
            "micro-batch": micro_batch,
            "d-model": d_model,
            "layers": n_layers,
            "heads": n_heads,
            "GPU memory": gpu_memory_bytes,
        },
        mfu,
        d_model,
        n_heads,
    )
    act, formula = _activations(seq_len, micro_batch, d_model, n_layers, n_heads)
    return _budget(
        n_params,
        n_gpus,
        gpu,
        (peak_flops_per_s, dtype),
        (mfu, mfu_source),
        tokens_per_param,
        (act, formula),
        gpu_memory_bytes,
    )


def _budget(
    n_params: float,
    n_gpus: int,
    gpu: str,
    peak: tuple[float, str],
    mfu: tuple[float, str],
    tokens_per_param: float,
    activations: tuple[float | None, str | None],
    gpu_memory_bytes: float | None,
) -> Budget:
    """The budget's figures from checked inputs (``peak``: FLOP/s and its dtype; ``mfu``: the fraction and where
    it came from; ``activations``: bytes per GPU and the formula, None when not known): tokens, 6·N·D FLOPs,
    wall-clock, model state per GPU and what fits (see :class:`Budget`)."""
    (peak_flops_per_s, dtype), (mfu_value, mfu_source), (act, formula) = peak, mfu, activations
    tokens = tokens_per_param * n_params
    flops = training_flops(n_params, tokens)
    secs = wall_clock_seconds(flops, n_gpus, peak_flops_per_s, mfu_value)
    state = MODEL_STATE_BYTES_PER_PARAM * n_params
    fits, warnings = _memory_plan(state, act, n_gpus, gpu_memory_bytes)
    return Budget(
        n_params=n_params,
        n_gpus=n_gpus,
        gpu=gpu,
        peak_flops_per_s=peak_flops_per_s,
        mfu=mfu_value,
        mfu_source=mfu_source,
        tokens=tokens,
        total_flops=flops,
        seconds=secs,
        hours=secs / 3600.0,
        model_state_bytes_ddp=state,
        model_state_bytes_sharded=state / n_gpus,
        activation_bytes=act,
        activation_formula=formula,
        dtype=dtype,
        tokens_per_param=tokens_per_param,
        tokens_source=tokens_source(tokens_per_param),
        gpu_memory_bytes=gpu_memory_bytes,
        fits=fits,
        warnings=warnings,
    )


def _activations(
    seq_len: int | None, micro_batch: int | None, d_model: int | None, n_layers: int | None, n_heads: int | None
) -> tuple[float | None, str | None]:
    """Activation bytes per GPU (:func:`activation_bytes`) and the formula used; (None, None) without the shape."""
    if seq_len is None or micro_batch is None or d_model is None or n_layers is None:
        return None, None
    formula = "L·s·b·h·(34 + 5·a·s/h)" if n_heads else "34·L·s·b·h (FlashAttention: scores not stored)"
    return activation_bytes(seq_len, micro_batch, d_model, n_layers, n_heads), formula


def _memory_plan(
    state: float, act: float | None, n_gpus: int, gpu_memory_bytes: float | None
) -> tuple[dict[str, bool], list[str]]:
    """What fits in ``gpu_memory_bytes`` per GPU (:func:`memory_fit`) of the model state (``state`` bytes, whole
    under DDP, divided by ``n_gpus`` under ZeRO-3/FSDP) with and without the activations (``act`` bytes), and the
    warning when nothing does; nothing without a capacity."""
    if gpu_memory_bytes is None:
        return {}, []
    per_gpu = {
        "model_state_ddp": state,
        "model_state_sharded": state / n_gpus,
        "activations": act,
        "total_ddp": None if act is None else state + act,
        "total_sharded": None if act is None else state / n_gpus + act,
    }
    fits = memory_fit(per_gpu, gpu_memory_bytes)
    return fits, fit_warnings(state / n_gpus, act, fits, gpu_memory_bytes)
