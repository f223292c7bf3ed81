"""PD107 compile-graph-breaks: a torch.compile program runs several compiled graphs per entry, split by graph breaks.

From :func:`perfdoctor.analysis.timing.compiled.compiled_steps`: per analysed step, the ``Torch-Compiled Region`` runs,
the outermost of them (entries from eager code) and the rest (graph breaks: a resume frame's region is recorded
inside the region of the frame that broke), the eager ops between the graphs and the time entering each extra
graph costs. The saving is the replay's
(:func:`perfdoctor.replay.transforms.compiled.merge_graphs`): each break's cache lookup and wrapper time go.
"""

from __future__ import annotations

from dataclasses import dataclass

from perfdoctor.analysis.timing.compiled import CompiledSteps, compiled_steps
from perfdoctor.checks.common import cold_reason, count_text, replay_fields, steps_over
from perfdoctor.checks.context import Outcome, RankContext, passed, replayed_outcome, skipped
from perfdoctor.findings import Evidence
from perfdoctor.replay.transforms.compiled import merge_graphs

CODE = "PD107"
METRICS = {
    "breaks_per_step": "graph breaks per step: compiled regions entered from inside another region",
    "graphs_per_step": "Torch-Compiled Region runs per step",
    "eager_us": "mean µs per step of eager ops run between the compiled graphs",
    "overhead_us": "mean µs per step the breaks' extra graph entries cost (cache lookup, Dynamo/AOT wrapper)",
}

# every field a hit gives the TOML message and headline (its evidence values and fields; checked at load)
MESSAGE_FIELDS = (
    "breaks",
    "graphs",
    "entries",
    "eager_text",
    "overhead_ms",
    "backward_graphs",
    "recorded_ms",
    "frames",
)


@dataclass(frozen=True)
class Thresholds:
    """``[thresholds]`` of rules/PD107.toml: names and types checked when the catalogue loads."""

    min_saving_pct: float
    min_breaks_per_step: float


# the fix, by what the trace shows between the graphs
SCALAR_OPS = ("aten::item", "aten::_local_scalar_dense", "aten::nonzero", "aten::tolist", "aten::is_nonzero")
FIX_SCALAR = """
The graphs are split where the compiled code reads a tensor's value on the host (the eager ops between them are
`.item()`-like: listed in the evidence). Keep the value on the device (`torch.where(x.abs().max() > 1e6, ...)`,
or check it every N steps outside the compiled function), or let Dynamo trace it:
`torch._dynamo.config.capture_scalar_outputs = True` (and `capture_dynamic_output_shape_ops = True` for
`nonzero()`). `TORCH_LOGS=graph_breaks python train.py` names each break's line."""
FIX_PYTHON = """
No op runs between the graphs: the breaks are Python that Dynamo does not trace (a `print`, logging, an
unsupported library call, `torch._dynamo.graph_break()`). Run `TORCH_LOGS=graph_breaks python train.py` to see
each break's line and reason, then move that code out of the compiled function (log after it returns), or mark a
logging function reorderable (`torch._dynamo.config.reorderable_logging_functions.add(print)`).
`torch.compile(model, fullgraph=True)` turns every remaining break into an error with its reason."""
EXAMPLE_SCALAR = """
def forward(self, x):
    x = self.block1(x)
    if x.abs().max().item() > 1e6:      # .item(): a graph break
        raise FloatingPointError
    return self.block2(x)
"""
EXAMPLE_SCALAR_AFTER = """
def forward(self, x):
    x = self.block1(x)
    self.max_act = x.abs().max().detach()   # stays on the device; checked outside, every N steps
    return self.block2(x)
"""


def _eager_text(c: CompiledSteps) -> str:
    """ "aten::item ×3, 0.01 ms" or the statement that no op runs between the graphs."""
    eager_ms = float(c.eager_us.mean()) / 1000
    if not c.eager_ops:
        return "no op runs between the graphs (the breaks are Python: a print, logging, an unsupported call)"
    names = ", ".join(f"{name} ×{count_text(n)}" for name, n in c.eager_ops)
    return f"{names} per step, {eager_ms:.2f} ms"


def check(ctx: RankContext) -> Outcome:
    th = ctx.thresholds(Thresholds)
    if reason := cold_reason(ctx):
        return skipped(reason)
    steps = ctx.steps
    c = compiled_steps(ctx.tables, steps.host_start_us, steps.host_end_us)
    if c is None:
        return passed(breaks_per_step=0.0, graphs_per_step=0.0, eager_us=0.0, overhead_us=0.0)
    metrics = {
        "breaks_per_step": float(c.breaks.mean()),
        "graphs_per_step": float(c.regions.mean()),
        "eager_us": float(c.eager_us.mean()),
        "overhead_us": float(c.overhead_us.mean()),
    }
    if metrics["breaks_per_step"] < th.min_breaks_per_step:
        return passed(**metrics)
    eager_text = _eager_text(c)
    whatif = merge_graphs(ctx.replay(), c.overhead_cut, c.pid, metrics["breaks_per_step"], eager_text)
    saving, per_step, method = ctx.replayed_saving(whatif)
    if saving <= 0:
        return passed(**metrics)
    ev = Evidence(
        values={
            "breaks_per_step": metrics["breaks_per_step"],
            "graphs_per_step": metrics["graphs_per_step"],
            "eager_between_ms": metrics["eager_us"] / 1000,
            "overhead_ms": metrics["overhead_us"] / 1000,
            "frames": ", ".join(c.frames),
        },
        steps=steps_over(per_step, ctx.per_step(lambda s: s.dur_us), th.min_saving_pct, ctx.step_numbers),
    )
    fields = {
        "breaks": count_text(metrics["breaks_per_step"]),
        "graphs": count_text(metrics["graphs_per_step"]),
        "entries": count_text(float(c.entries.mean())),
        "eager_text": eager_text,
        "overhead_ms": metrics["overhead_us"] / 1000,
        "backward_graphs": count_text(float(c.backward_graphs.mean())),
        "frames": ", ".join(c.frames),
        **replay_fields(ctx),
    }
    scalar = any(name in SCALAR_OPS for name, _ in c.eager_ops)
    advice = (
        {"fix": FIX_SCALAR, "example_before": EXAMPLE_SCALAR, "example_after": EXAMPLE_SCALAR_AFTER}
        if scalar
        else ({"fix": FIX_PYTHON} if not c.eager_ops else {})
    )
    return replayed_outcome(ctx, metrics, ev, saving, method, fields, advice, min_saving_pct=th.min_saving_pct)
