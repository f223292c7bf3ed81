"""Kernel names that mean the same work across library versions, GPUs and dtypes.

A kernel's name carries its template arguments (``<float, 128, 6, ...>``), an architecture prefix (cuBLAS /
CUTLASS: ``volta_``, ``ampere_``, ``sm80_``, ``sm90_xmma_``) and dtype tokens (``sgemm``/``hgemm``, ``fp16``,
``bf16``, ``s16816``). :func:`normalise` strips them in three stages, so a match can say which stage was needed
(the ``how`` of a mover). Names are matched together with their category, so a normalised name never joins a
GEMM to an elementwise kernel.
"""

from __future__ import annotations

import re

_ARCH = re.compile(
    r"^(?:sm_?\d{2,3}a?_|volta_|turing_|ampere_|hopper_|ada_|blackwell_|maxwell_|pascal_|kepler_)", re.IGNORECASE
)
_ARCH_INNER = re.compile(r"(?<![a-z0-9])(?:sm_?\d{2,3}a?|volta|turing|ampere|hopper|ada|blackwell)_", re.IGNORECASE)
_ARCH_SUFFIX = re.compile(r"_sm_?\d{2,3}a?$", re.IGNORECASE)  # fmha_cutlassF_f16_aligned_64x64_rf_sm80
_CUTLASS_ARCH = re.compile(r"(?<![a-z0-9])(cutlass_?)\d{2,3}a?_", re.IGNORECASE)  # cutlass_80_tensorop_... → cutlass_
# dtype atoms; a run of them is one token (cuBLAS: `f32f32_f32f32_f32`, `bf16bf16_bf16f32_f32`)
_ATOMS = r"bf16|fp32|fp16|fp8|tf32|f64|f32|f16|e4m3|e5m2|i8|s8|u8|i32|s32"
_DTYPE_WORDS = (
    rf"(?:{_ATOMS})+|bfloat16|float16|float32|half|float|double|int8|"
    r"c10::half|c10::bfloat16|__half|__nv_bfloat16|s\d{3,5}|h\d{3,5}|i\d{4,5}|bf\d{4,5}"
)
_DTYPE = re.compile(rf"(?<![a-z0-9])(?:{_DTYPE_WORDS})(?![a-z0-9])", re.IGNORECASE)
_PARAMS = re.compile(r"\([^()]*\)\s*$")  # a trailing parameter list: `kernel(int, float*)`
_GEMM_DTYPE = re.compile(r"(?<![a-z0-9])[shdcz](gemm|gemv)", re.IGNORECASE)  # sgemm / hgemm / dgemm → gemm


def strip_templates(name: str) -> str:
    """Drop ``void``, template arguments ``<...>`` (nested) and a trailing parameter list ``(...)`` of a kernel name."""
    out: list[str] = []
    depth = 0
    for ch in name:
        if ch == "<":
            depth += 1
        elif ch == ">" and depth:
            depth -= 1
        elif depth == 0:
            out.append(ch)
    text = _PARAMS.sub("", "".join(out))
    text = re.sub(r"^\s*void\s+", "", text)
    return re.sub(r"\s+", " ", text).strip()


def strip_arch(name: str) -> str:
    """Drop architecture prefixes (``sm80_``, ``volta_``, ``ampere_``...) wherever a name component starts,
    ``cutlass_80_``'s number, and a trailing ``_sm80``."""
    return _ARCH_SUFFIX.sub("", _CUTLASS_ARCH.sub(r"\1", _ARCH_INNER.sub("", _ARCH.sub("", name))))


def strip_dtype(name: str) -> str:
    """Replace dtype tokens with ``{dtype}`` (``sgemm`` → ``gemm``; ``fp16``, ``bf16``, ``s16816`` → ``{dtype}``)."""
    return _DTYPE.sub("{dtype}", _GEMM_DTYPE.sub(r"\1", name))


STAGES = (("template arguments", strip_templates), ("architecture prefix", strip_arch), ("dtype", strip_dtype))


def normalise(name: str, stages: int = 3) -> str:
    """``name`` after the first ``stages`` normalisation stages (0 = unchanged)."""
    for _, fn in STAGES[:stages]:
        name = fn(name)
    return name


def how_matched(before: list[str], after: list[str]) -> str:
    """Which stages two groups of names needed to meet: e.g. ``"template arguments + dtype"``.

    A stage was needed when the names still differ with every other stage applied and that one left out; when
    no stage is needed on its own, the first stage that alone makes them meet is named.
    """
    if set(before) == set(after):
        return "same name"
    used = []
    for skip, (label, _) in enumerate(STAGES):

        def without(x: str, skip: int = skip) -> str:
            for i, (_, fn) in enumerate(STAGES):
                if i != skip:
                    x = fn(x)
            return x

        if {without(x) for x in before} != {without(x) for x in after}:
            used.append(label)
    if used:
        return " + ".join(used)
    # several stages would each do alone (a dtype inside template arguments): name the first in order
    return next(
        (label for label, fn in STAGES if {fn(x) for x in before} == {fn(x) for x in after}),
        "template arguments + architecture prefix + dtype",
    )
