"""One vocabulary: the breakdown's categories and idle causes, each with its label, colour and definition.

The analyses write these names as the keys of ``categories_us`` / ``idle_causes_us`` (plain strings in the
report JSON); the checks read them; every renderer labels and colours them from here. A new category or
cause is one entry in :class:`Category` / :class:`IdleCause` and one row in its table below.

Colours: Okabe & Ito's colour-blind-safe palette ("Color Universal Design", 2008) plus greys; idle causes in
light tints so busy time stands out.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Category(StrEnum):
    """A category of busy time (GPU kernels, or host ops in a CPU-only trace)."""

    MATMUL = "matmul"
    ATTENTION = "attention"
    CONV = "conv"
    REDUCTION_NORM = "reduction_norm"
    ELEMENTWISE = "elementwise"
    OPTIMIZER = "optimizer"
    OTHER = "other"
    COMMUNICATION = "communication"
    MEMCPY = "memcpy"
    MEMSET = "memset"
    DATALOADER = "dataloader"  # host only
    OTHER_OPS = "other_ops"  # host only
    HOST_COLLECTIVE = "host_collective"  # host only: gloo collectives run on the CPU

    @property
    def label(self) -> str:
        """Display label (GPU breakdown)."""
        return _CATEGORY[self].label

    @property
    def colour(self) -> str:
        return _CATEGORY[self].colour

    @property
    def definition(self) -> str:
        return _CATEGORY[self].definition


class IdleCause(StrEnum):
    """A cause of idle device time (``python``: the host outside any op; in a CPU-only trace its time outside
    any op)."""

    DATALOADER = "dataloader"
    SYNCHRONIZATION = "synchronization"
    HOST_LAUNCH_BOUND = "host_launch_bound"
    OTHER = "other"
    PYTHON = "python"  # host only

    @property
    def label(self) -> str:
        return _IDLE[self].label

    @property
    def colour(self) -> str:
        return _IDLE[self].colour

    @property
    def definition(self) -> str:
        return _IDLE[self].definition

    @property
    def as_reason(self) -> str:
        """The cause as the reason for lost device time (e.g. why MFU is low)."""
        return _IDLE[self].reason

    @property
    def key(self) -> str:
        """The cause's series key in charts and breakdown rows (``idle:<cause>``)."""
        return f"idle:{self.value}"


@dataclass(frozen=True)
class _Info:
    label: str
    colour: str
    definition: str
    reason: str = ""


_CATEGORY: dict[Category, _Info] = {
    Category.MATMUL: _Info("matmul / GEMM", "#0072B2", "GEMM kernels (cuBLAS, CUTLASS, Triton mm) and matmul ops"),
    Category.ATTENTION: _Info("attention", "#56B4E9", "fused attention kernels (flash, memory-efficient, SDPA)"),
    Category.CONV: _Info("convolution", "#009E73", "convolution kernels (cuDNN, implicit GEMM) and ops"),
    Category.REDUCTION_NORM: _Info(
        "reduction / norm", "#CC79A7", "reductions, softmax and normalisation (layer/batch/group/RMS norm)"
    ),
    Category.ELEMENTWISE: _Info("elementwise", "#E69F00", "pointwise kernels and ops (add, mul, activations, copies)"),
    Category.OPTIMIZER: _Info(
        "optimizer", "#D55E00", "non-GEMM work launched inside Optimizer.step (the optimizer's own kernels)"
    ),
    Category.OTHER: _Info("other kernels", "#999999", "kernels no rule classifies"),
    Category.COMMUNICATION: _Info(
        "communication (exposed)",
        "#7F3C8D",
        "collective and point-to-point kernels (NCCL, RCCL) not overlapped by compute (lower priority than compute)",
    ),
    Category.MEMCPY: _Info("memcpy", "#F0E442", "copies (h2d, d2h, d2d) not overlapped by kernels"),
    Category.MEMSET: _Info("memset", "#BDB76B", "memsets not overlapped by kernels or copies"),
    Category.DATALOADER: _Info("DataLoader (host)", "#8C564B", "host time inside DataLoader __next__"),
    Category.OTHER_OPS: _Info("other ops", "#999999", "host ops no rule classifies"),
    Category.HOST_COLLECTIVE: _Info(
        "host collectives (gloo, on the CPU)",
        "#7F3C8D",
        "collective calls the host runs itself (gloo on CPU tensors, c10d annotations)",
    ),
}

_IDLE: dict[IdleCause, _Info] = {
    IdleCause.DATALOADER: _Info(
        "idle: waiting for DataLoader",
        "#E7C9A9",
        "the host was inside DataLoader __next__ while the device had nothing queued",
        reason="device idle waiting for the DataLoader",
    ),
    IdleCause.SYNCHRONIZATION: _Info(
        "idle: host synchronization",
        "#F4A6A6",
        "the host was blocked in a synchronize call or a blocking copy",
        reason="device idle after host synchronisations",
    ),
    IdleCause.HOST_LAUNCH_BOUND: _Info(
        "idle: host busy, nothing queued",
        "#C7D4E8",
        "the host was busy in ops or runtime calls and had queued nothing",
        reason="device idle while the host launches work (launch-bound)",
    ),
    IdleCause.OTHER: _Info(
        "idle: other cause",
        "#E5E5E5",
        "idle time none of the causes above explains",
        reason="device idle for other reasons",
    ),
    IdleCause.PYTHON: _Info(
        "Python / host outside any op",
        "#E5E5E5",
        "the host was outside any op (Python between ops) while the device had nothing queued; "
        "in a CPU-only trace, host time outside any op",
        reason="device idle while the host runs Python outside any op",
    ),
}

# Exclusive split of busy time on a GPU: the first category of this order that covers an instant owns it.
GPU_PRIORITY: tuple[str, ...] = tuple(
    c.value
    for c in (
        Category.MATMUL,
        Category.ATTENTION,
        Category.CONV,
        Category.REDUCTION_NORM,
        Category.ELEMENTWISE,
        Category.OPTIMIZER,
        Category.OTHER,
        Category.COMMUNICATION,
        Category.MEMCPY,
        Category.MEMSET,
    )
)
# The same on the host of a CPU-only trace.
HOST_PRIORITY: tuple[str, ...] = tuple(
    c.value
    for c in (
        Category.DATALOADER,
        Category.HOST_COLLECTIVE,
        Category.OPTIMIZER,
        Category.ATTENTION,
        Category.MATMUL,
        Category.CONV,
        Category.REDUCTION_NORM,
        Category.ELEMENTWISE,
        Category.OTHER_OPS,
    )
)
# Kernel categories that compute (communication, copies and memsets do not).
COMPUTE_CATEGORIES: tuple[str, ...] = tuple(
    c.value
    for c in (
        Category.MATMUL,
        Category.ATTENTION,
        Category.CONV,
        Category.ELEMENTWISE,
        Category.REDUCTION_NORM,
        Category.OPTIMIZER,
        Category.OTHER,
    )
)
# Stacking order of charts and tables: compute first, then host-only work, then data movement.
CHART_ORDER: tuple[str, ...] = tuple(
    c.value
    for c in (
        Category.MATMUL,
        Category.ATTENTION,
        Category.CONV,
        Category.REDUCTION_NORM,
        Category.ELEMENTWISE,
        Category.OPTIMIZER,
        Category.OTHER,
        Category.DATALOADER,
        Category.OTHER_OPS,
        Category.HOST_COLLECTIVE,
        Category.COMMUNICATION,
        Category.MEMCPY,
        Category.MEMSET,
    )
)
# Idle attribution on a GPU, in the order gaps are charged.
GPU_IDLE_CAUSES: tuple[str, ...] = tuple(
    c.value
    for c in (
        IdleCause.DATALOADER,
        IdleCause.SYNCHRONIZATION,
        IdleCause.HOST_LAUNCH_BOUND,
        IdleCause.PYTHON,
        IdleCause.OTHER,
    )
)


def category_label(key: str) -> str:
    """Label of a category key as written in the report (the key itself when it is not in the vocabulary)."""
    try:
        return Category(key).label
    except ValueError:
        return key


def idle_label(key: str) -> str:
    """Label of an idle-cause key as written in the report (the key itself when unknown)."""
    try:
        return IdleCause(key).label
    except ValueError:
        return key


def colour(key: str) -> str | None:
    """Colour of a chart series key: a category, or ``idle:<cause>``; None when not in the vocabulary."""
    if key.startswith("idle:"):
        try:
            return IdleCause(key[5:]).colour
        except ValueError:
            return None
    try:
        return Category(key).colour
    except ValueError:
        return None


# an idle cause -> the rules whose findings explain it, the first that fired names it beside the breakdown's row
# (the breakdown's largest idle row is the first thing a reader asks about)
EXPLAINED_BY: dict[str, tuple[str, ...]] = {
    IdleCause.DATALOADER.value: ("PD101",),
    IdleCause.SYNCHRONIZATION.value: ("PD401", "PD501", "PD102"),
    IdleCause.HOST_LAUNCH_BOUND.value: ("PD103", "PD205", "PD501"),
    IdleCause.PYTHON.value: ("PD106", "PD105"),
}


def explaining_code(cause: str, codes: list[str]) -> str | None:
    """The first of the rules explaining idle ``cause`` (:data:`EXPLAINED_BY`) among the report's finding
    ``codes`` (in report order), or None."""
    wanted = EXPLAINED_BY.get(cause, ())
    return next((c for c in codes if c in wanted), None)
