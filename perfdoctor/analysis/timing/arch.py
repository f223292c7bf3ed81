"""The GPU's architecture read from kernel names, for traces without ``deviceProperties``.

Old Kineto traces (before PyTorch 1.9) and hand-trimmed files carry no ``deviceProperties``, yet their
library kernels name the architecture they were built for: cuBLAS ``volta_sgemm_128x64_nn`` /
``turing_*`` / ``ampere_*``, cuDNN and CUTLASS ``sm80_xmma_*`` / ``sm86_*`` / ``sm90_xmma_*`` /
``sm100_*``, cuBLASLt ``nvjet_*`` (Hopper and later), Tensile ``..._ISA90a_`` / ``..._ISA942_`` and
MIOpen/CK on AMD. A library kernel runs only on its own architecture or a later one (cuBLAS also picks
older-generation kernels on newer GPUs: ``volta_*`` kernels run on a T4), so the *newest* architecture
named is the device's architecture or a lower bound of it; that is what is reported, and said to be
inferred.

The datasheet figures (roofline, MFU, tensor-core speedup) then come from the one device of that
family in :mod:`perfdoctor.analysis.work.hardware` that a trace of that family most likely ran on, with the
assumption stated (:attr:`ArchGuess.assumption`); where a family's models differ by more than ~25% in
peak (Ampere GA10x, Ada, Turing), no figure is assumed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from perfdoctor.analysis.work.hardware import SPECS_BY_KEY, DeviceSpec
from perfdoctor.trace.tables import TraceTables


@dataclass(frozen=True)
class ArchGuess:
    """An architecture inferred from kernel names.

    Attributes:
        family: ``"volta"``, ``"turing"``, ``"ampere"``, ``"ampere-ga10x"``, ``"ada"``, ``"hopper"``,
            ``"blackwell"``, ``"cdna2"`` (gfx90a), ``"cdna3"`` (gfx942).
        vendor: ``"nvidia"`` or ``"amd"``.
        compute_capability: (major, minor) as ``deviceProperties`` would give it.
        evidence: one kernel name that named it.
        spec_key: the :data:`~perfdoctor.analysis.work.hardware.SPECS` entry assumed for datasheet figures, or None.
        assumption: one sentence: what was assumed and why (for the report).
    """

    family: str
    vendor: str
    compute_capability: tuple[int, int]
    evidence: str
    spec_key: str | None
    assumption: str

    @property
    def spec(self) -> DeviceSpec | None:
        return SPECS_BY_KEY.get(self.spec_key) if self.spec_key else None

    @property
    def label(self) -> str:
        """E.g. ``"Volta GPU (inferred from kernel names)"``."""
        return f"{self.family.capitalize()} GPU (architecture inferred from kernel names)"

    def as_device_properties(self) -> dict[str, object]:
        """A ``deviceProperties``-like dict (no name, no memory): what downstream code can trust."""
        return {
            "id": 0,
            "name": "",
            "computeMajor": self.compute_capability[0],
            "computeMinor": self.compute_capability[1],
            "inferred": True,
        }


# (rank, family, vendor, cc, pattern, assumed spec, why that spec). Newest first; the highest rank found wins.
_FAMILIES: tuple[tuple[int, str, str, tuple[int, int], str, str | None, str], ...] = (
    (
        90,
        "blackwell",
        "nvidia",
        (10, 0),
        r"\bsm100_|_sm100\b|sm100a",
        "b200",
        "B200 datasheet figures assumed (sm100 kernels: B200/GB200)",
    ),
    (
        80,
        "hopper",
        "nvidia",
        (9, 0),
        r"\bsm90a?_|_sm90a?\b|sm90_xmma|nvjet_|wgmma|FlashAttnFwdSm90|_sm90\w*_kernel",
        "h100-sxm",
        ("H100 SXM5 datasheet figures assumed (H100 PCIe is ~25% lower, H800/H200 SXM share the compute peaks)"),
    ),
    (70, "ada", "nvidia", (8, 9), r"\bsm89_|_sm89\b", None, "Ada models differ too much to assume one (L4 to L40S)"),
    (
        60,
        "ampere-ga10x",
        "nvidia",
        (8, 6),
        r"\bsm86_|_sm86\b",
        None,
        "GA10x models differ too much to assume one (RTX 3060 to A40)",
    ),
    (
        50,
        "ampere",
        "nvidia",
        (8, 0),
        r"\bampere_|\bsm80_|_sm80\b",
        "a100-40gb",
        "A100 datasheet figures assumed (sm80 kernels; GA10x GPUs also run ampere_* kernels at far lower peaks)",
    ),
    (
        40,
        "turing",
        "nvidia",
        (7, 5),
        r"\bturing_|\bsm75_|_sm75\b",
        None,
        "Turing models differ too much to assume one (T4 to RTX 2080 Ti)",
    ),
    (
        30,
        "volta",
        "nvidia",
        (7, 0),
        r"\bvolta_|\bsm70_|_sm70\b",
        "v100-sxm2",
        (
            "Tesla V100 SXM2 datasheet figures assumed (V100 PCIe is ~10% lower, V100S ~4% higher; a Turing GPU "
            "running volta_* kernels would have lower peaks)"
        ),
    ),
    (85, "cdna3", "amd", (9, 4), r"ISA942|gfx942", "mi300x", "MI300X datasheet figures assumed (gfx942)"),
    (
        35,
        "cdna2",
        "amd",
        (9, 0),
        r"ISA90a|gfx90a",
        "mi250x-gcd",
        "MI250X (one GCD) datasheet figures assumed (gfx90a; MI250/MI210 are ~5% lower)",
    ),
)
_RX = tuple((rank, fam, vendor, cc, re.compile(rx), key, why) for rank, fam, vendor, cc, rx, key, why in _FAMILIES)


def infer_arch(names: Iterable[str]) -> ArchGuess | None:
    """The newest architecture the kernel ``names`` name, or None when none does.

    Args:
        names: kernel names (any iterable of str; duplicates are fine).
    """
    best: tuple[int, str, str, tuple[int, int], str | None, str, str] | None = None
    for name in names:
        for rank, fam, vendor, cc, rx, key, why in _RX:
            if (best is None or rank > best[0]) and rx.search(name):
                best = (rank, fam, vendor, cc, key, why, name)
    if best is None:
        return None
    _, fam, vendor, cc, key, why, name = best
    return ArchGuess(fam, vendor, cc, name[:80], key, why)


def infer_from_tables(tables: TraceTables) -> ArchGuess | None:
    """:func:`infer_arch` over a trace's kernel names, only when it has no usable ``deviceProperties``."""
    if tables.device_properties or not len(tables.kernels):
        return None
    import numpy as np

    ids = np.unique(tables.kernels["name_id"]).tolist()
    return infer_arch(tables.names[i] for i in ids)
