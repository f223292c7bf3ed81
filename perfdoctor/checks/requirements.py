"""What a rule needs from the data (``requires`` in its TOML), as one table: requirement -> test.

Each test takes the analysis (:class:`perfdoctor.analysis.rank.Analysis`) and one rank's whole analysis (its
tables: :class:`perfdoctor.analysis.rank.RankAnalysis`) and returns the reason the rank lacks the requirement (one
line, shown in the report's skipped checks), or None when it has it. The
engine looks requirements up here and holds no rule- or requirement-specific branch; a new requirement is a
new function and a row of :data:`REQUIREMENTS` (``catalogue.REQUIREMENTS`` lists the same names, and the TOML
loader rejects any other).

``JOB_REQUIREMENTS`` are the job's (judged where all ranks meet); the others are judged on each rank, or read
from a rank summary's ``requirement_reasons`` when the rank was analysed elsewhere (``perfdoctor.jobs``).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from perfdoctor.analysis.rank import Analysis, RankAnalysis, RankResult
from perfdoctor.trace import launch_calls

Requirement = Callable[[Analysis[RankResult], RankAnalysis], "str | None"]  # judged on one rank's tables
JobRequirement = Callable[[Analysis[RankResult]], "str | None"]  # judged on the job

_PROFILED_WITHOUT_DEVICE = "the trace lists GPUs or holds CUDA/HIP launch calls but no GPU activity"


def _lists_gpus(rank: RankAnalysis) -> bool:
    """The trace names GPUs (deviceProperties) or holds CUDA/HIP launch calls."""
    t = rank.tables
    return bool(t.device_properties) or bool(launch_calls(t))


def steps(analysis: Analysis[RankResult], rank: RankAnalysis) -> str | None:
    """ProfilerStep#N windows (not the whole trace as one window)."""
    if rank.steps.source == "whole-trace":
        return (
            "no ProfilerStep#N annotations: per-step times unavailable (use torch.profiler's schedule and prof.step())"
        )
    return None


def device(analysis: Analysis[RankResult], rank: RankAnalysis) -> str | None:
    """GPU activity (kernels, memcpys, memsets) on the rank's primary device."""
    if rank.primary.kind == "gpu":
        return None
    if _lists_gpus(rank):
        return "no GPU activity in the trace (it lists GPUs or holds launch calls: profiled without its device side)"
    return "CPU-only trace: no kernels, memcpys or memsets"


def device_side(analysis: Analysis[RankResult], rank: RankAnalysis) -> str | None:
    """GPU activity, or a genuine CPU-only run (not a GPU trace that lost or never recorded its device side)."""
    if rank.primary.kind != "gpu" and _lists_gpus(rank):
        return f"{_PROFILED_WITHOUT_DEVICE}: host op times are not the GPU's, so the rule cannot judge them"
    return None


def host_only(analysis: Analysis[RankResult], rank: RankAnalysis) -> str | None:
    """CPU-only training: no GPU activity and no sign of a GPU."""
    if rank.primary.kind == "gpu":
        return "device trace: the rule is about CPU-only training"
    if _lists_gpus(rank):
        return f"{_PROFILED_WITHOUT_DEVICE}: a GPU run profiled without its device side, not CPU-only training"
    return None


def multi_rank(analysis: Analysis[RankResult]) -> str | None:
    """Traces of at least two ranks of one job."""
    return "single rank: needs the traces of several ranks of one job" if len(analysis.ranks) < 2 else None


def shapes(analysis: Analysis[RankResult], rank: RankAnalysis) -> str | None:
    """Input shapes of the CPU ops (``record_shapes=True``)."""
    ops = rank.tables.cpu_ops
    if len(ops) == 0 or not np.not_equal(ops["input_dims"], None).any():  # type: ignore[call-overload]
        return "shapes not recorded (torch.profiler record_shapes=True)"
    return None


def memory(analysis: Analysis[RankResult], rank: RankAnalysis) -> str | None:
    """Allocator events (``profile_memory=True``)."""
    return "no memory events (torch.profiler profile_memory=True)" if len(rank.tables.memory) == 0 else None


def device_properties(analysis: Analysis[RankResult], rank: RankAnalysis) -> str | None:
    """``deviceProperties`` naming the GPU model."""
    return None if rank.tables.device_properties else "no deviceProperties in the trace (GPU model unknown)"


def run(analysis: Analysis[RankResult]) -> str | None:
    """Run data (``run.json`` of a ``perfdoctor profile`` run directory)."""
    return "no run data (record with `perfdoctor profile` to get run.json)" if analysis.run_json() is None else None


def mfu(analysis: Analysis[RankResult], rank: RankAnalysis) -> str | None:
    """What MFU needs: a GPU trace with shapes recorded, or run data with model FLOPs."""
    if rank.primary.kind != "gpu":
        return "CPU-only trace: MFU against a datasheet peak is GPU-only"
    if shapes(analysis, rank) and analysis.run_json() is None:
        return "MFU needs a GPU trace with shapes recorded (record_shapes=True) or run data with model FLOPs"
    return None


RANK_REQUIREMENTS: dict[str, Requirement] = {
    "steps": steps,
    "device": device,
    "host_only": host_only,
    "shapes": shapes,
    "memory": memory,
    "device_properties": device_properties,
    "mfu": mfu,
    "device_side": device_side,
}
JOB_REQUIREMENTS: dict[str, JobRequirement] = {"multi_rank": multi_rank, "run": run}
REQUIREMENTS = (*RANK_REQUIREMENTS, *JOB_REQUIREMENTS)


def missing(req: str, analysis: Analysis[RankResult], rank: RankResult) -> str | None:
    """The reason ``rank`` lacks ``req``, or None when it has it.

    The job's requirements (:data:`JOB_REQUIREMENTS`) are judged on ``analysis``; the others on the rank's tables
    where it was analysed, or, for a rank read back from its summary, from the ``requirement_reasons`` its worker
    worked out (:func:`perfdoctor.checks.engine.requirement_reasons`).

    Raises:
        KeyError: ``req`` is not in :data:`REQUIREMENTS` (the TOML loader rejects such a rule first).
    """
    job = JOB_REQUIREMENTS.get(req)
    if job is not None:
        return job(analysis)
    test = RANK_REQUIREMENTS[req]
    trace = rank.trace
    return test(analysis, trace) if trace is not None else rank.requirement_reasons.get(req)
