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

All sizes decimal (1 GB = 1e9 B). Every function is exact; callers round.
"""

from __future__ import annotations

import math

from dataclasses import asdict, dataclass
from typing import Any

TOKENS_PER_PARAM = 20.0
MODEL_STATE_BYTES_PER_PARAM = 16.0


@dataclass
class Budget:
    """``tokens``; ``total_flops`` FLOP; ``hours`` h; ``model_state_bytes_ddp`` and
    ``model_state_bytes_sharded`` bytes per GPU; ``activation_bytes`` per GPU (None
    without the shape arguments); ``dtype`` the GEMM dtype whose dense peak
    ``peak_flops_per_s`` (FLOP/s) is."""

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

    def to_dict(self) -> dict[str, Any]:
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


def plan(n_params: float, n_gpus: int, gpu: str, peak_flops_per_s: float, mfu: float, mfu_source: str = "--mfu",
         tokens_per_param: float = TOKENS_PER_PARAM, seq_len: int | None = None, micro_batch: int | None = None,
         d_model: int | None = None, n_layers: int | None = None, n_heads: int | None = None,
         dtype: str = "bf16") -> Budget:
    """A compute-optimal training budget (``peak_flops_per_s``: dense peak at ``dtype``, FLOP/s).

    Raises:
        ValueError: a NaN or infinite number, a non-positive size, or MFU outside (0, 1].
    """
    numbers = {"params": n_params, "gpus": n_gpus, "peak": peak_flops_per_s, "MFU": mfu,
               "tokens-per-param": tokens_per_param, "seq-len": seq_len, "micro-batch": micro_batch,
               "d-model": d_model, "layers": n_layers, "heads": n_heads}
    for name, value in numbers.items():
        if value is not None and not math.isfinite(value):
            raise ValueError(f"{name} must be a finite number, got {value}")
        if value is not None and name not in ("MFU", "params", "gpus", "peak", "tokens-per-param") and value <= 0:
            raise ValueError(f"{name} must be positive, got {value}")
    if n_params <= 0 or n_gpus <= 0 or peak_flops_per_s <= 0 or tokens_per_param <= 0:
        raise ValueError("params, gpus, peak and tokens-per-param must be positive")
    if not 0 < mfu <= 1:
        raise ValueError(f"MFU must be in (0, 1], got {mfu}")
    tokens = tokens_per_param * n_params
    flops = training_flops(n_params, tokens)
    secs = wall_clock_seconds(flops, n_gpus, peak_flops_per_s, mfu)
    state = MODEL_STATE_BYTES_PER_PARAM * n_params
    act = formula = None
    if None not in (seq_len, micro_batch, d_model, n_layers):
        act = activation_bytes(seq_len, micro_batch, d_model, n_layers, n_heads)
        formula = ("L·s·b·h·(34 + 5·a·s/h)" if n_heads else "34·L·s·b·h (FlashAttention: scores not stored)")
    return Budget(n_params, n_gpus, gpu, peak_flops_per_s, mfu, mfu_source, tokens, flops, secs, secs / 3600.0,
                  state, state / n_gpus, act, formula, dtype)


def mfu_from_report(report: dict[str, Any], path: str) -> float:
    """The MFU a perfdoctor JSON report measured: mean of ``report["ranks"][i]["mfu"]["mfu"]``.

    Raises:
        PerfDoctorError: the key is missing or holds no number, naming the file and the key.
    """
    from perfdoctor.errors import PerfDoctorError

    values = []
    ranks = report.get("ranks") if isinstance(report, dict) else None
    for rank in ranks if isinstance(ranks, list) else []:
        value = (rank.get("mfu") or {}).get("mfu") if isinstance(rank, dict) else None
        if isinstance(value, (int, float)) and value > 0:
            values.append(float(value))
    if not values:
        raise PerfDoctorError(f"{path}: no measured MFU in the report (missing key ranks[i].mfu.mfu)")
    return sum(values) / len(values)
