"""Event categories of a trace that look like device activity perfdoctor does not read.

Kineto names each accelerator's activity by category: ``kernel`` / ``gpu_memcpy`` / ``cuda_runtime`` (CUDA and
ROCm), ``mtia_ccp_events`` / ``mtia_runtime`` (Meta MTIA), ``xpu_runtime`` (Intel XPU), ``privateuse1_*``
(out-of-tree backends). The ones the trace layer maps (:data:`perfdoctor.trace.columns._CAT_KIND`) are analysed;
any other category whose name says it is device-side (an accelerator's name, ``runtime``, ``driver``, ``kernel``,
``device``) is reported by name, so a trace of an unsupported accelerator is never read silently as CPU training.
"""

from __future__ import annotations

import re

from perfdoctor.trace.columns import _CAT_KIND
from perfdoctor.trace.tables import TraceTables

DEVICE_LIKE = re.compile(
    r"mtia|xpu|hpu|npu|tpu|mps|gaudi|habana|privateuse|ccp|runtime|driver|kernel|device"
    r"|accelerator|gpu",
    re.IGNORECASE,
)
# flow and bookkeeping categories that name a device but carry no activity
NOT_ACTIVITY = frozenset(
    {"ac2g", "async", "async_cpu_to_gpu", "fwdbwd", "cpu_instant_event", "overhead", "trace", "gpu_user_annotation"}
)


def unread_device_categories(tables: TraceTables) -> list[str]:
    """Categories in ``tables.cats`` that look device-side and are not read into a table, sorted."""
    return sorted(
        {
            c
            for c in tables.cats
            if c and c.lower() not in _CAT_KIND and c.lower() not in NOT_ACTIVITY and DEVICE_LIKE.search(c)
        }
    )
