"""PD109 cuda-graph-rerecording: CUDA graphs recorded again inside analysed (warm) steps.

From :func:`perfdoctor.analysis.timing.compiled.graph_recording`: per analysed step, the union of cudagraph trees'
``CUDAGraphNode.record (dynamo_timed)`` ranges (``torch.compile(mode="reduce-overhead")``), of stream captures
(``cudaStreamBeginCapture`` to ``cudaStreamEndCapture``, a manual ``torch.cuda.graph``) and of
``cudaGraphInstantiate`` calls. A graph is recorded once and replayed after that; a recording in a warm step is a
re-recording. The saving is the replay's (:func:`perfdoctor.replay.transforms.compiled.no_rerecording`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from perfdoctor.analysis.timing.compiled import graph_recording
from perfdoctor.checks.common import cold_reason, count_text, pct, replay_fields, replayed_estimate
from perfdoctor.checks.context import Outcome, RankContext, passed, skipped
from perfdoctor.findings import Evidence, Hit
from perfdoctor.replay.transforms.compiled import no_rerecording

CODE = "PD109"
METRICS = {
    "record_us": "mean µs per analysed step spent recording CUDA graphs",
    "record_pct": "record_us as % of the mean step",
    "recordings_per_step": "graph recordings started per analysed step",
}

# every field a hit gives the TOML message and headline (its evidence values and fields; checked at load)
MESSAGE_FIELDS = ("n_steps", "api", "recordings", "record_ms", "recorded_ms", "record_pct")


@dataclass(frozen=True)
class Thresholds:
    """``[thresholds]`` of rules/PD109.toml: names and types checked when the catalogue loads."""

    min_saving_pct: float


def check(ctx: RankContext) -> Outcome:
    th = ctx.thresholds(Thresholds)
    if reason := cold_reason(ctx):
        return skipped(reason)
    steps = ctx.steps
    rec = graph_recording(ctx.tables, steps.host_start_us, steps.host_end_us)
    mean = float(rec.record_us.mean()) if rec.record_us.size else 0.0
    metrics = {
        "record_us": mean,
        "record_pct": pct(mean, ctx.step_us),
        "recordings_per_step": float(rec.recordings.mean()) if rec.recordings.size else 0.0,
    }
    hit_steps = np.flatnonzero(rec.record_us > 0)
    if hit_steps.size == 0:
        return passed(**metrics)
    saving, _, method = ctx.replayed_saving(no_rerecording(ctx.replay(), rec.cut, rec.api))
    if saving <= 0:
        return passed(**metrics)
    numbers = ctx.step_numbers
    ev = Evidence(
        values={
            "record_ms_per_step": mean / 1000,
            "record_pct": metrics["record_pct"],
            "recording_steps": ", ".join(f"#{numbers[k]}" for k in hit_steps.tolist()),
            "each_ms": "; ".join(f"{rec.record_us[k] / 1000:,.2f}" for k in hit_steps.tolist()),
        },
        steps=[numbers[k] for k in hit_steps.tolist()],
    )
    fields = {
        "n_steps": f"{hit_steps.size} of {ctx.n_steps}",
        "api": rec.api,
        "recordings": count_text(metrics["recordings_per_step"]),
        "record_ms": mean / 1000,
        **replay_fields(ctx),
    }
    return Outcome(
        metrics=metrics,
        hit=Hit(
            min_saving_pct=th.min_saving_pct,
            evidence=ev,
            estimate=replayed_estimate(saving, method, fields),
            fields=fields,
        ),
    )
