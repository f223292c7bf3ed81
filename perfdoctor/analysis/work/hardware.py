"""Accelerator table: dense peak FLOP/s per dtype and memory bandwidth, with sources.

Every figure is a *dense* (no 2:4 structured sparsity) peak taken from the
vendor's datasheet or architecture whitepaper named in ``DeviceSpec.sources``.
Where a datasheet prints only the sparse figure (marked ``*`` in NVIDIA's Hopper,
Ada and Blackwell datasheets), the dense figure is that value ÷ 2, and the source
string says so. Sparse and dense figures are never mixed in one table.

Units: ``peak_flops`` in FLOP/s, ``hbm_bytes_per_s`` in bytes/s (decimal, as the
datasheets print TB/s = 1e12 B/s), ``memory_bytes`` in bytes (decimal GB).

Dtype keys: ``fp64``, ``fp32``, ``tf32``, ``bf16``, ``fp16``, ``fp8``. ``fp32`` is
the non-tensor (SIMT) rate on NVIDIA, the matrix-core (MFMA) rate on AMD CDNA
where rocBLAS runs FP32 GEMMs on matrix cores; ``fp64`` is the tensor/matrix-core
rate where one exists (DGEMM uses it). ``fp16`` and ``bf16`` are tensor-core rates
with FP32 accumulate (what PyTorch's GEMMs use). A dtype missing from
``peak_flops`` is not supported by the device's tensor cores or not printed in its
datasheet: never filled in by guess.

Matching (:func:`match_device`) uses the trace's ``deviceProperties`` entry: name,
compute capability, SM/CU count and memory size. A device that does not match
exactly one entry is unknown (None), never guessed. CPUs have no entry: their
peaks come only from ``perfdoctor calibrate`` (see
:mod:`perfdoctor.analysis.work.calibration`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeAlias

DTYPES = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8")

T = 1e12  # TFLOP/s -> FLOP/s
TBPS = 1e12  # TB/s -> B/s
GB = 1e9


@dataclass(frozen=True)
class DeviceSpec:
    """One accelerator's datasheet figures.

    Attributes:
        key: stable id, e.g. ``"h100-sxm"``.
        name: marketing name, e.g. ``"NVIDIA H100 SXM5 80GB"``.
        vendor: ``"nvidia"`` or ``"amd"``.
        peak_flops: dense peak FLOP/s per dtype key (see module docstring).
        hbm_bytes_per_s: peak device-memory bandwidth, B/s.
        memory_bytes: device memory capacity, bytes (decimal).
        sources: ``{"peak": ..., "bandwidth": ..., <dtype>: ...}``: the document
            each figure comes from; a dtype key overrides ``"peak"`` for it.
        sm_count: SMs (NVIDIA) or CUs (AMD) as the runtime reports them.
        compute_capability: ``(major, minor)`` as in ``deviceProperties``.
        notes: caveats (per-GCD halving, reference clocks ...).
    """

    key: str
    name: str
    vendor: str
    peak_flops: dict[str, float]
    hbm_bytes_per_s: float
    memory_bytes: float
    sources: dict[str, str]
    sm_count: int | None = None
    compute_capability: tuple[int, int] | None = None
    notes: str = ""
    aliases: tuple[str, ...] = field(default=())

    @property
    def has_tf32(self) -> bool:
        return "tf32" in self.peak_flops

    def peak(self, dtype: str) -> float | None:
        """Dense peak FLOP/s at ``dtype``, or None when the table has no figure."""
        return self.peak_flops.get(dtype)

    def best_16bit_dtype(self) -> str | None:
        """The 16-bit tensor dtype a mixed-precision run would use here: ``"bf16"`` where the table has
        it, else ``"fp16"`` (V100, T4, RTX 2080 Ti: tensor cores without bf16), else None."""
        return next((d for d in ("bf16", "fp16") if d in self.peak_flops), None)

    def ridge_point(self, dtype: str) -> float | None:
        """FLOP/byte where the roofline turns: peak(dtype) ÷ memory bandwidth."""
        peak = self.peak(dtype)
        return None if peak is None else peak / self.hbm_bytes_per_s

    def source_of(self, figure: str) -> str:
        """The document behind ``figure`` (a dtype key, ``"bandwidth"`` or ``"memory"``)."""
        if figure in self.sources:
            return self.sources[figure]
        return self.sources["bandwidth" if figure == "memory" else "peak"]

    def to_dict(self) -> dict[str, object]:
        """The spec as plain values (FLOP/s, B/s, B) with the source of each figure."""
        return {
            "key": self.key,
            "name": self.name,
            "vendor": self.vendor,
            "peak_flops": dict(self.peak_flops),
            "hbm_bytes_per_s": self.hbm_bytes_per_s,
            "memory_bytes": self.memory_bytes,
            "sources": {k: self.source_of(k) for k in (*self.peak_flops, "bandwidth", "memory")},
            "notes": self.notes,
        }


def _spec(
    key: str,
    name: str,
    vendor: str,
    tflops: dict[str, float | None],
    tbps: float,
    mem_gb: float,
    source: str,
    sms: int | None = None,
    cc: tuple[int, int] | None = None,
    notes: str = "",
    aliases: tuple[str, ...] = (),
    **src: str,
) -> DeviceSpec:
    """One table row: ``tflops`` in TFLOP/s per dtype (None = not supported), ``tbps`` in TB/s, ``mem_gb`` in GB;
    ``src`` names the source of a figure whose source differs from ``source`` (e.g. ``bandwidth=``)."""
    peaks = {d: v * T for d, v in tflops.items() if v is not None}
    sources = {"peak": source, "bandwidth": src.pop("bandwidth", source)}
    sources.update(src)
    return DeviceSpec(key, name, vendor, peaks, tbps * TBPS, mem_gb * GB, sources, sms, cc, notes, tuple(aliases))


_A100 = "NVIDIA A100 Tensor Core GPU datasheet (nvidia-a100-datasheet-us-nvidia-1758950-r4-web, Jun 2021)"
_H100 = "NVIDIA H100 Tensor Core GPU datasheet (2023); dense = printed sparse figure ÷ 2 for TF32/BF16/FP16/FP8"
_H800 = "NVIDIA H800 Tensor Core GPU datasheet (2023); dense = printed sparse figure ÷ 2 for TF32/BF16/FP16/FP8"
_V100 = "NVIDIA Tesla V100 GPU Accelerator datasheet (Jan 2020); fp16 = Tensor Performance"
_AMD_SPLIT = "per GCD: PyTorch sees each of the 2 GCDs as one device, so package figures are halved"

SPECS: tuple[DeviceSpec, ...] = (
    _spec(
        "v100-sxm2",
        "NVIDIA Tesla V100 SXM2",
        "nvidia",
        {"fp64": 7.8, "fp32": 15.7, "fp16": 125},
        0.9,
        32,
        _V100 + ", V100 SXM2 column",
        80,
        (7, 0),
        notes="assumed for DGX Station (V100-DGXS) and DGX-2 (V100-SXM3) boards too: their system datasheets give "
        "whole-system totals, not per-GPU FP32/tensor peaks, and were not checked against these figures",
        aliases=("V100",),
    ),
    _spec(
        "v100-pcie",
        "NVIDIA Tesla V100 PCIe",
        "nvidia",
        {"fp64": 7.0, "fp32": 14.0, "fp16": 112},
        0.9,
        32,
        _V100 + ", V100 PCIe column",
        80,
        (7, 0),
    ),
    _spec(
        "v100s-pcie",
        "NVIDIA Tesla V100S PCIe",
        "nvidia",
        {"fp64": 8.2, "fp32": 16.4, "fp16": 130},
        1.134,
        32,
        _V100 + ", V100S PCIe column",
        80,
        (7, 0),
    ),
    _spec(
        "t4",
        "NVIDIA T4",
        "nvidia",
        {"fp32": 8.1, "fp16": 65},
        0.32,
        16,
        "NVIDIA T4 Tensor Core GPU datasheet (2019); fp16 = mixed-precision (FP16/FP32) tensor figure",
        40,
        (7, 5),
    ),
    _spec(
        "rtx-2080-ti",
        "NVIDIA GeForce RTX 2080 Ti",
        "nvidia",
        {"fp32": 13.4, "fp16": 53.8},
        0.616,
        11,
        "NVIDIA Turing GPU Architecture whitepaper (WP-09183-001), Table 1, reference-clock column; "
        "fp16 = FP16 tensor with FP32 accumulate",
        68,
        (7, 5),
        notes="reference clocks (1545 MHz boost); Founders Edition is ~6% higher (14.2 / 56.9 TFLOPS)",
    ),
    _spec(
        "a100-40gb",
        "NVIDIA A100 40GB (SXM4 or PCIe)",
        "nvidia",
        {"fp64": 19.5, "fp32": 19.5, "tf32": 156, "bf16": 312, "fp16": 312},
        1.555,
        40,
        _A100,
        108,
        (8, 0),
        notes="SXM4 and PCIe 40GB share every figure here (fp64 = FP64 Tensor Core)",
        aliases=("A100-40GB",),
    ),
    _spec(
        "a100-80gb-sxm",
        "NVIDIA A100 80GB SXM4",
        "nvidia",
        {"fp64": 19.5, "fp32": 19.5, "tf32": 156, "bf16": 312, "fp16": 312},
        2.039,
        80,
        _A100,
        108,
        (8, 0),
        notes="PG509-210 boards report the A100-SXM4-80GB PCI device id (20B2)",
        aliases=("A100", "A100-80GB"),
    ),
    _spec(
        "a100-80gb-pcie",
        "NVIDIA A100 80GB PCIe",
        "nvidia",
        {"fp64": 19.5, "fp32": 19.5, "tf32": 156, "bf16": 312, "fp16": 312},
        1.935,
        80,
        _A100,
        108,
        (8, 0),
    ),
    _spec(
        "a10",
        "NVIDIA A10",
        "nvidia",
        {"fp32": 31.2, "tf32": 62.5, "bf16": 125, "fp16": 125},
        0.6,
        24,
        "NVIDIA A10 Tensor Core GPU datasheet (2021), dense column",
        72,
        (8, 6),
    ),
    _spec(
        "rtx-3090",
        "NVIDIA GeForce RTX 3090",
        "nvidia",
        {"fp32": 35.6, "tf32": 35.6, "bf16": 71, "fp16": 71},
        0.936,
        24,
        "NVIDIA Ampere GA102 GPU Architecture whitepaper v2.0, Appendix A, RTX 3090 column; "
        "fp16/bf16 = tensor with FP32 accumulate (GeForce runs it at half the FP16-accumulate rate)",
        82,
        (8, 6),
    ),
    _spec(
        "rtx-4090",
        "NVIDIA GeForce RTX 4090",
        "nvidia",
        {"fp32": 82.6, "tf32": 82.6, "bf16": 165.2, "fp16": 165.2, "fp8": 330.3},
        1.008,
        24,
        "NVIDIA Ada Lovelace GPU Architecture whitepaper v1.1, Appendix A, RTX 4090 column; tensor figures "
        "with FP32 accumulate",
        128,
        (8, 9),
    ),
    _spec(
        "l4",
        "NVIDIA L4",
        "nvidia",
        {"fp32": 30.3, "tf32": 60, "bf16": 121, "fp16": 121, "fp8": 242.5},
        0.3,
        24,
        "NVIDIA L4 Tensor Core GPU datasheet (2023); dense = printed sparse figure ÷ 2 for TF32/BF16/FP16/FP8",
        58,
        (8, 9),
    ),
    _spec(
        "l40s",
        "NVIDIA L40S",
        "nvidia",
        {"fp32": 91.6, "tf32": 183, "bf16": 362.05, "fp16": 362.05, "fp8": 733},
        0.864,
        48,
        "NVIDIA L40S GPU datasheet (2023), dense column",
        142,
        (8, 9),
    ),
    _spec(
        "h100-sxm",
        "NVIDIA H100 SXM5 80GB",
        "nvidia",
        {"fp64": 67, "fp32": 67, "tf32": 494.5, "bf16": 989.5, "fp16": 989.5, "fp8": 1979},
        3.35,
        80,
        _H100,
        132,
        (9, 0),
        aliases=("H100",),
    ),
    _spec(
        "h100-pcie",
        "NVIDIA H100 PCIe 80GB",
        "nvidia",
        {"fp64": 51, "fp32": 51, "tf32": 378, "bf16": 756.5, "fp16": 756.5, "fp8": 1513},
        2.0,
        80,
        _H100,
        114,
        (9, 0),
    ),
    _spec(
        "h800-sxm",
        "NVIDIA H800 SXM5 80GB",
        "nvidia",
        {"fp64": 1, "fp32": 67, "tf32": 494.5, "bf16": 989.5, "fp16": 989.5, "fp8": 1979},
        3.35,
        80,
        _H800,
        132,
        (9, 0),
        aliases=("H800",),
    ),
    _spec(
        "h800-pcie",
        "NVIDIA H800 PCIe 80GB",
        "nvidia",
        {"fp64": 0.8, "fp32": 51, "tf32": 378, "bf16": 756.5, "fp16": 756.5, "fp8": 1513},
        2.0,
        80,
        _H800,
        114,
        (9, 0),
    ),
    _spec(
        "h200-sxm",
        "NVIDIA H200 SXM 141GB",
        "nvidia",
        {"fp64": 67, "fp32": 67, "tf32": 494.5, "bf16": 989.5, "fp16": 989.5, "fp8": 1979},
        4.8,
        141,
        "NVIDIA H200 Tensor Core GPU datasheet (2024), H200 SXM column; dense = printed sparse figure ÷ 2",
        132,
        (9, 0),
        aliases=("H200",),
    ),
    _spec(
        "gh200-96gb",
        "NVIDIA GH200 Grace Hopper (96GB HBM3)",
        "nvidia",
        {"fp64": 67, "fp32": 67, "tf32": 494.5, "bf16": 989.5, "fp16": 989.5, "fp8": 1979},
        4.0,
        96,
        "NVIDIA GH200 Grace Hopper Superchip datasheet (2023), HBM3 96GB column; dense = sparse ÷ 2",
        132,
        (9, 0),
        aliases=("GH200",),
    ),
    _spec(
        "gh200-144gb",
        "NVIDIA GH200 Grace Hopper (144GB HBM3e)",
        "nvidia",
        {"fp64": 67, "fp32": 67, "tf32": 494.5, "bf16": 989.5, "fp16": 989.5, "fp8": 1979},
        4.9,
        144,
        "NVIDIA GH200 Grace Hopper Superchip datasheet (2024), HBM3e 144GB column; dense = sparse ÷ 2",
        132,
        (9, 0),
    ),
    _spec(
        "b200",
        "NVIDIA B200 (HGX)",
        "nvidia",
        {"fp64": 37, "fp32": 75, "tf32": 1100, "bf16": 2250, "fp16": 2250, "fp8": 4500},
        8.0,
        180,
        "NVIDIA HGX B200 datasheet (2024): 8-GPU totals ÷ 8; dense = printed sparse figure ÷ 2",
        148,
        (10, 0),
        aliases=("B200",),
    ),
    _spec(
        "mi250x-gcd",
        "AMD Instinct MI250X (one GCD)",
        "amd",
        {"fp64": 47.85, "fp32": 47.85, "bf16": 191.5, "fp16": 191.5},
        1.6384,
        64,
        "AMD Instinct MI250X datasheet (2021): FP64/FP32 matrix 95.7, FP16/BF16 383 TFLOPS, 3.2768 TB/s, "
        "128 GB per package; " + _AMD_SPLIT,
        110,
        (9, 0),
        notes=_AMD_SPLIT,
        aliases=("MI250X",),
    ),
    _spec(
        "mi250-gcd",
        "AMD Instinct MI250 / MI210 (one GCD)",
        "amd",
        {"fp64": 45.25, "fp32": 45.25, "bf16": 181.0, "fp16": 181.0},
        1.6384,
        64,
        "AMD Instinct MI250 datasheet (2021): FP64/FP32 matrix 90.5, FP16/BF16 362.1 TFLOPS, 3.2768 TB/s, "
        "128 GB per package; " + _AMD_SPLIT + "; AMD Instinct MI210 datasheet (2022) gives the same per-GCD "
        "figures (FP16 181.0, 1.6384 TB/s, 64 GB, 104 CUs), so the two are one entry",
        104,
        (9, 0),
        notes="a 104-CU gfx90a device is an MI250 GCD or an MI210; their figures coincide",
        aliases=("MI250", "MI210"),
    ),
    _spec(
        "mi300x",
        "AMD Instinct MI300X",
        "amd",
        {"fp64": 163.4, "fp32": 163.4, "tf32": 653.7, "bf16": 1307.4, "fp16": 1307.4, "fp8": 2614.9},
        5.3,
        192,
        "AMD Instinct MI300X data sheet (2023), dense (non-sparsity) column; fp64/fp32 = matrix",
        304,
        (9, 4),
        aliases=("MI300X",),
    ),
)

SPECS_BY_KEY: dict[str, DeviceSpec] = {s.key: s for s in SPECS}


def spec_by_name(name: str) -> DeviceSpec:
    """Look up a spec by key (``"h100-sxm"``) or alias (``"H100"``), case-insensitive.

    Raises:
        PerfDoctorError: no such device; the message lists the known names.
    """
    from perfdoctor.errors import PerfDoctorError

    wanted = name.strip().lower()
    for spec in SPECS:
        if wanted == spec.key or wanted in (a.lower() for a in spec.aliases):
            return spec
    known = ", ".join(sorted({a for s in SPECS for a in s.aliases} | set(SPECS_BY_KEY)))
    raise PerfDoctorError(f"unknown GPU '{name}'; known: {known}")


# one element of a trace's ``deviceProperties`` (Kineto's keys: name, computeMajor, numSms, totalGlobalMem, ...)
DeviceProperties: TypeAlias = Mapping[str, object]


def _int(value: object) -> int | None:
    """``value`` as an integer (a number or numeric string, as JSON gives them); None otherwise."""
    if not isinstance(value, (int, float, str, bytes)):
        return None
    try:
        return int(value)
    except ValueError:
        return None


def _is_amd(props: DeviceProperties, name: str) -> bool:
    return "AMD" in name or "gcnArchName" in props or "Radeon" in name or _int(props.get("warpSize")) == 64


def _match_amd(props: DeviceProperties, name: str) -> str | None:
    arch = str(props.get("gcnArchName", ""))
    cus = _int(props.get("numSms"))
    cc = (_int(props.get("computeMajor")), _int(props.get("computeMinor")))
    if "MI300X" in name or (arch.startswith("gfx942") or cc == (9, 4)) and cus == 304:
        mem = _int(props.get("totalGlobalMem")) or 0
        return "mi300x" if 180 * GB < mem < 230 * GB else None  # 192 GiB; MI325X (256 GB) is not in the table
    gfx90a = arch.startswith("gfx90a") or cc == (9, 0)
    if "MI250X" in name or (gfx90a and cus == 110):
        return "mi250x-gcd"
    if re.search(r"MI2(50|10)\b", name) or (gfx90a and cus == 104):
        return "mi250-gcd"
    return None


def _match_nvidia(props: DeviceProperties, name: str) -> str | None:
    sms = _int(props.get("numSms"))
    mem = _int(props.get("totalGlobalMem")) or 0
    pcie = bool(re.search(r"PCI-?E", name, re.I))
    if "V100" in name:
        if "V100S" in name:
            return "v100s-pcie"
        if pcie:
            return "v100-pcie"
        return "v100-sxm2" if re.search(r"SXM|DGX", name) else None
    if "A100" in name or re.search(r"\bPG509-2\d\d\b", name):
        if sms != 108:
            return None  # A100 7g/MIG slices and A800 variants differ
        if mem < 50 * GB:
            return "a100-40gb"
        if pcie:
            return "a100-80gb-pcie"
        return "a100-80gb-sxm" if re.search(r"SXM|PG509", name) else None
    for family in ("H100", "H800"):
        if family in name:
            if "NVL" in name:
                return None
            return {132: f"{family.lower()}-sxm", 114: f"{family.lower()}-pcie"}.get(sms or 0)
    if "GH200" in name:
        return "gh200-96gb" if mem < 120 * GB else "gh200-144gb"
    if "H200" in name:
        return None if "NVL" in name else "h200-sxm"
    simple = [
        (r"\bB200\b", "b200"),
        (r"\bL40S\b", "l40s"),
        (r"\bL4\b", "l4"),
        (r"\bA10\b", "a10"),
        (r"\bT4\b", "t4"),
        (r"RTX 3090(?! Ti)", "rtx-3090"),
        (r"RTX 4090(?! D)", "rtx-4090"),
        (r"RTX 2080 Ti", "rtx-2080-ti"),
    ]
    for pattern, key in simple:
        if re.search(pattern, name):
            return key
    return None


def match_device(device_properties: DeviceProperties | None) -> DeviceSpec | None:
    """The table entry for one ``deviceProperties`` element, or None when unknown.

    Args:
        device_properties: one element of the trace's ``deviceProperties`` list
            (keys ``name``, ``computeMajor``, ``computeMinor``, ``numSms``,
            ``totalGlobalMem``, on ROCm maybe ``gcnArchName``).

    The name decides the family; SM count tells H100/H800 SXM (132) from PCIe (114);
    memory tells A100 40 from 80 GB and GH200 96 from 144 GB; AMD devices that report
    a generic name ("AMD Radeon Graphics") are told apart by architecture
    (compute capability 9.0 = gfx90a, 9.4 = gfx942) and CU count. A name that names
    no form factor where the figures depend on it (e.g. "NVIDIA A100 80GB") is None.
    """
    if not isinstance(device_properties, Mapping):
        return None
    name = str(device_properties.get("name", ""))
    key = (
        _match_amd(device_properties, name)
        if _is_amd(device_properties, name)
        else _match_nvidia(device_properties, name)
    )
    spec = SPECS_BY_KEY.get(key) if key else None
    if spec is not None and spec.compute_capability is not None:
        cc = (_int(device_properties.get("computeMajor")), _int(device_properties.get("computeMinor")))
        if None not in cc and cc != spec.compute_capability:
            return None  # name and architecture disagree: do not guess
    return spec


# names that say nothing of the product: ROCm reports "AMD Radeon Graphics" for gfx9 Instinct parts when its
# device table lacks a product string (the shared MI250 trace, ROCm 6.2), and some writers leave the name empty
_GENERIC_NAME = re.compile(r"^\s*(AMD Radeon Graphics\s*)?$", re.I)
_AMD_ARCH = {(9, 0): "gfx90a", (9, 4): "gfx942"}


def identified_name(device_properties: DeviceProperties | None) -> str | None:
    """What to call a device whose ``deviceProperties`` name is generic ("AMD Radeon Graphics", or empty): the
    product :func:`match_device` identifies, its architecture and the basis, e.g. ``"AMD Instinct MI250 / MI210
    (one GCD), gfx90a (identified from compute capability 9.0 and 104 CUs; the trace names it 'AMD Radeon
    Graphics')"``. None when the name is specific or the device is not identified.
    """
    if not isinstance(device_properties, Mapping):
        return None
    name = str(device_properties.get("name") or "")
    spec = match_device(device_properties) if _GENERIC_NAME.match(name) else None
    if spec is None:
        return None
    cc = (_int(device_properties.get("computeMajor")), _int(device_properties.get("computeMinor")))
    arch = str(device_properties.get("gcnArchName") or "").split(":")[0] or _AMD_ARCH.get((cc[0] or 0, cc[1] or 0))
    parts = [f"compute capability {cc[0]}.{cc[1]}" if None not in cc else (arch or "")]
    cus = _int(device_properties.get("numSms"))
    parts.append(f"{cus} CUs" if cus else "")
    if spec.key == "mi300x":  # told from a 256 GB MI325X by its memory
        parts.append(f"{(_int(device_properties.get('totalGlobalMem')) or 0) / 2**30:.0f} GiB of memory")
    said = f"the trace names it '{name.strip()}'" if name.strip() else "the trace names none"
    basis = " and ".join(p for p in parts if p)
    return f"{spec.name}{f', {arch}' if arch else ''} (identified from {basis}; {said})"


def device_for_trace(device_properties: Sequence[DeviceProperties], device_id: int | None = None) -> DeviceSpec | None:
    """Spec for the trace's device ``device_id`` (default: the first listed), or None."""
    if not device_properties:
        return None
    if device_id is not None:
        for props in device_properties:
            if _int(props.get("id")) == device_id:
                return match_device(props)
    return match_device(device_properties[0])
