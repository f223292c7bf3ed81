"""PD901 trace-quality: what the trace lacks, and which checks that disabled.

Runs after every other check of the rank and lists their skip reasons, so a
missing ``ProfilerStep``, too few steps, unrecorded shapes or memory, an
absent device, or an export that lost its activity
(:mod:`perfdoctor.analysis.lost_activity`) never makes a check pass silently.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from perfdoctor.analysis.lost_activity import lost_activity
from perfdoctor.checks.context import Outcome, RankContext, passed
from perfdoctor.findings import Evidence, Hit

CODE = "PD901"
METRICS = {"n_lacks": "number of things the trace lacks", "n_steps": "steps analysed"}

# what a hit's evidence/fields add to METRICS for the TOML message (its placeholders are checked at load)
MESSAGE_FIELDS = ("lacks_text", "n_disabled")


@dataclass(frozen=True)
class Thresholds:
    """``[thresholds]`` of rules/PD901.toml: names and types checked when the catalogue loads."""

    min_steps: int


def _lacks(ctx: RankContext) -> list[str]:
    t = ctx.tables
    out = []
    if ctx.rank.steps.source == "whole-trace":
        out.append("ProfilerStep#N annotations (no per-step numbers)")
    elif ctx.n_steps < ctx.th["min_steps"]:
        out.append(f"enough steps ({ctx.n_steps} < {ctx.th['min_steps']})")
    if len(t.cpu_ops) == 0:
        out.append("host ops (cpu_op events)")
    elif not np.not_equal(t.cpu_ops["input_dims"], None).any():  # type: ignore[call-overload]
        out.append("input shapes (record_shapes=True)")
    if lost := lost_activity(t):  # an overflowed or cut export: say what it lost, with the numbers
        out.append(f"the activity its export lost: {lost.text()}")
    elif not t.has_device_activity and t.names_matching(r"^(cuda|hip)").any():
        out.append("device activity (kernels, memcpys) although CUDA/HIP calls are present")
    if t.has_device_activity and len(t.memory) == 0:
        out.append("memory events (profile_memory=True)")
    if t.has_device_activity and not t.device_properties:
        out.append("deviceProperties (GPU model unknown)")
    return out


def check(ctx: RankContext) -> Outcome:
    lacks = _lacks(ctx)
    disabled = {code: reason for code, reason in ctx.cache.get("skipped", [])}
    metrics = {"n_lacks": float(len(lacks)), "n_steps": float(ctx.n_steps)}
    if not lacks:
        return passed(**metrics)
    ev = Evidence(
        values={
            "lacks": lacks,
            "lacks_text": "; ".join(lacks),
            "disabled_checks": disabled,
            "n_disabled": len(disabled),
            "path": ctx.tables.path,
        },
        steps=ctx.step_numbers,
    )
    return Outcome(metrics=metrics, hit=Hit(evidence=ev, estimate=None))
