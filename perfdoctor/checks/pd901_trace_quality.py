"""PD901 trace-quality: what the trace lacks, and which checks that lack disabled (only those: a check skipped
for another reason, such as a rule about multi-rank jobs on a single rank, is not counted).

Runs after every other check of the rank and lists their skip reasons, so a
missing ``ProfilerStep``, too few steps, unrecorded shapes or memory, an
absent device, or an export that lost its activity
(:mod:`perfdoctor.analysis.lost_activity`) never makes a check pass silently.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from perfdoctor.analysis.lost_activity import lost_activity
from perfdoctor.checks import requirements
from perfdoctor.checks.context import Outcome, RankContext, passed
from perfdoctor.findings import Evidence, Hit

CODE = "PD901"
METRICS = {"n_lacks": "number of things the trace lacks", "n_steps": "steps analysed"}

# every field a hit gives the TOML message and headline (its evidence values and fields; checked at load)
MESSAGE_FIELDS = ("lacks_short", "lacks_text", "n_disabled", "skipped_short", "skipped_text")


@dataclass(frozen=True)
class Thresholds:
    """``[thresholds]`` of rules/PD901.toml: names and types checked when the catalogue loads."""

    min_steps: int


@dataclass(frozen=True)
class Lack:
    """One thing the trace lacks: ``text`` for the message (with its numbers), ``short`` for the headline, and how
    a check that the lack skipped says so: the reason of one of ``requirements`` (a rule's ``requires``, the reason
    :mod:`perfdoctor.checks.requirements` gives) or a reason a check gave itself that ``own_reason`` finds."""

    text: str
    short: str
    requirements: tuple[str, ...]
    own_reason: re.Pattern[str]


def _lacks(ctx: RankContext) -> list[Lack]:
    th = ctx.thresholds(Thresholds)
    t = ctx.tables
    out = []
    if ctx.steps.source == "whole-trace":
        out.append(
            Lack(
                "ProfilerStep#N annotations (no per-step numbers)",
                "ProfilerStep#N",
                ("steps",),
                re.compile(r"ProfilerStep|step markers"),
            )
        )
    elif ctx.n_steps < th.min_steps:
        out.append(
            Lack(
                f"enough steps ({ctx.n_steps} < {th.min_steps})",
                f"enough steps ({ctx.n_steps} < {th.min_steps})",
                (),
                re.compile(r"\bonly \d+ (analysed )?step"),
            )
        )
    if len(t.cpu_ops) == 0:
        out.append(Lack("host ops (cpu_op events)", "host ops", ("shapes",), re.compile(r"cpu_op|host ops|shapes")))
    elif not np.not_equal(t.cpu_ops["input_dims"], None).any():  # type: ignore[call-overload]
        out.append(Lack("input shapes (record_shapes=True)", "input shapes", ("shapes", "mfu"), re.compile("shapes")))
    device_lost = ("device", "device_side", "host_only", "mfu")
    device_rx = re.compile(r"(GPU|device) activity|device side")
    if lost := lost_activity(t):  # an overflowed or cut export: say what it lost, with the numbers
        out.append(
            Lack(f"the activity its export lost: {lost.text()}", "activity its export lost", device_lost, device_rx)
        )
    elif not t.has_device_activity and t.names_matching(r"^(cuda|hip)").any():
        out.append(
            Lack(
                "device activity (kernels, memcpys) although CUDA/HIP calls are present",
                "device activity",
                device_lost,
                device_rx,
            )
        )
    if t.has_device_activity and len(t.memory) == 0:
        out.append(
            Lack(
                "memory events (profile_memory=True)",
                "memory events",
                ("memory",),
                re.compile(r"memory events|profile_memory|\[memory\]"),
            )
        )
    if t.has_device_activity and not t.device_properties:
        out.append(
            Lack(
                "deviceProperties (GPU model unknown)",
                "deviceProperties",
                ("device_properties",),
                re.compile("deviceProperties"),
            )
        )
    return out


def _skipped_for(ctx: RankContext, lacks: list[Lack]) -> dict[str, str]:
    """The checks of this rank that ``lacks`` skipped, code -> reason: not those skipped for another reason (a
    single-rank trace, a rule about CPU-only training on a GPU trace, no DataLoader)."""
    reasons = {
        why
        for lack in lacks
        for req in lack.requirements
        if (why := requirements.missing(req, ctx.analysis, ctx.rank)) is not None
    }
    return {
        code: why
        for code, why in ctx.skip_reasons()
        if why in reasons or any(lack.own_reason.search(why) for lack in lacks)
    }


def check(ctx: RankContext) -> Outcome:
    lacks = _lacks(ctx)
    metrics = {"n_lacks": float(len(lacks)), "n_steps": float(ctx.n_steps)}
    if not lacks:
        return passed(**metrics)
    disabled = _skipped_for(ctx, lacks)
    ev = Evidence(
        values={
            "lacks": [lack.text for lack in lacks],
            "lacks_text": "; ".join(lack.text for lack in lacks),
            "disabled_checks": disabled,
            "n_disabled": len(disabled),
            "path": ctx.tables.path,
        },
        steps=ctx.step_numbers,
    )
    n = len(disabled)
    fields = {
        "lacks_short": ", ".join(lack.short for lack in lacks),
        # "0 check(s) skipped" read as a contradiction beside the report's list of checks skipped for other reasons
        "skipped_short": f"{n} check(s) skipped" if n else "no check skipped for it",
        "skipped_text": (
            f"{n} check(s) need what it lacks and were skipped"
            if n
            else "no check needs what it lacks, so none was skipped for it (checks skipped for other reasons are "
            "listed with their reasons)"
        ),
    }
    return Outcome(metrics=metrics, hit=Hit(evidence=ev, estimate=None, fields=fields))
