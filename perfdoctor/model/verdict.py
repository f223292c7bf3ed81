"""One line at the top of a report: what bounds the step, from the top finding and the breakdown.

Rules, first that applies:

0. A GPU trace without its device activity (it names GPUs, holds no kernel): no verdict, and why.
1. A cold-start finding (PD902) whose evidence says every analysed step is warm-up (``all_analysed_steps_cold``):
   "cold start: ...".
2. The top-ranked finding with a saving of at least :data:`MIN_SHARE_PCT` % of the step: its kind (its rule's
   ``[verdict]`` words in ``rules/PDnnn.toml``: :func:`rule_words`) and what its share is: for a replayed saving, the
   fix it was replayed with (``replayed_with``, or the finding's ``evidence["replayed_fix"]``), e.g. "input-bound:
   replaying the step with batches prefetched by DataLoader workers saves about 33% of it (PD101
   dataloader-starvation)"; for an upper bound, what fixing it saves at most, e.g.
   "elementwise-bound: fixing the unfused elementwise ops saves up to 11% of the step (PD202 ...)". The share is
   the finding's saving, never the share of the step the problem takes (PD202's elementwise ops take 21% of the
   tiny_gpt step; fusing saves at most half of that): so never "N% goes to".
3. Else the breakdown of the slowest rank's primary device: "busy X% of each step (largest: matmul Y%)" when
   utilization is at least :data:`BUSY_SHARE`, else its largest idle cause.

A finding about what the job computes rather than how fast (:data:`CORRECTNESS`: ranks reading the same data)
comes first, whatever the speed, as its headline: "correctness: Ranks 0, 1 read the same input batches at 8 of 8
steps (PD307 ranks-read-same-data); input-bound: ...".

It computes no number of its own: every share is a finding's ``saving_pct_of_step`` or a breakdown total ÷ the
step time total.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache

from perfdoctor.checks.catalogue import VerdictWords
from perfdoctor.model.report import FindingSection, RankSection
from perfdoctor.vocab import category_label, idle_label

MIN_SHARE_PCT = 5.0
BUSY_SHARE = 0.8
# a verdict word's {word} is the finding's evidence value of that name, the trace's own word (hipMalloc/hipFree,
# HIP graphs on ROCm); these stand in where the evidence has none (a report written before the evidence named it)
EVIDENCE_WORDS = {"alloc_api": "cudaMalloc/cudaFree", "graph_api": "CUDA"}


@cache
def rule_words() -> dict[str, VerdictWords]:
    """Each built-in rule's verdict words (``[verdict]`` in ``rules/PDnnn.toml``), by code."""
    from perfdoctor.checks.catalogue import load_catalogue

    return {code: spec.verdict for code, spec in load_catalogue().rules.items() if spec.verdict is not None}


def verdict(ranks: Sequence[RankSection], findings: list[FindingSection], slowest_rank: int | None = None) -> str:
    """The one-line verdict (see the module docstring); "" when the report has no rank. When the run data says the
    measurement itself is in doubt (PD601: the profiled window is a transient; PD603: the steady-state step
    times have no single level), the line says so after the verdict: every share is of that window's mean."""
    line = _verdict(ranks, findings, slowest_rank)
    faults = [f"correctness: {f.headline or f.message} ({f.code} {f.name})" for f in findings if f.code in CORRECTNESS]
    if faults:
        line = "; ".join([*faults, line] if line else faults)
    codes = {f.code for f in findings}
    caveats = [text for code, text in MEASUREMENT_CAVEATS.items() if code in codes]
    if ranks and all(_only_step_cut(r) for r in ranks):
        caveats.append(FRAGMENT_CAVEAT)
    return f"{line}; but {' and '.join(caveats)}" if line and caveats else line


FRAGMENT_CAVEAT = (
    "the only analysed step is the recorded start of a longer step (the profiler stopped recording inside it, see "
    "the warning): the shares are of that fragment"
)


def _only_step_cut(rank: RankSection) -> bool:
    """Whether the rank's one analysed step was cut where the recording stops (:func:`perfdoctor.analysis.steps.steps.
    find_steps` warns so): its breakdown is of the recorded start only (HTA's Triton trace, a
    13,336 ms ProfilerStep#1 of which 1.5 ms were recorded, read 'saves up to 100% of the step')."""
    from perfdoctor.analysis.steps.steps import STOPPED_INSIDE

    return len(rank.primary.steps) == 1 and any(STOPPED_INSIDE in w for w in rank.warnings)


# codes of the findings about what the job computes, not how fast: first in the verdict, whatever their saving
CORRECTNESS = ("PD307",)

# code -> what it puts in doubt, after "but" (run-data rules: the profiled steps may not be the run's)
MEASUREMENT_CAVEATS: dict[str, str] = {
    "PD601": "the profiled window is a transient, not the steady state (PD601)",
    "PD603": "the run's step times have no single level (PD603): the shares are of an unstable mean",
}


def _verdict(ranks: Sequence[RankSection], findings: list[FindingSection], slowest_rank: int | None) -> str:
    if ranks and all(r.primary.kind != "gpu" and r.device_properties for r in ranks):
        return (
            "no verdict: the trace names GPUs but holds no GPU activity (lost or not recorded, see the "
            "warnings); only host ops were analysed"
        )
    cold = next((f for f in findings if f.code == "PD902" and f.evidence.get("all_analysed_steps_cold") is True), None)
    if cold is not None:
        return (
            "cold start: the analysed steps are first-call work (compilation, algorithm search, lazy init), "
            "not the training loop (PD902): profile steady-state steps"
        )
    top = next((f for f in findings if f.position == 1), None)
    if top is not None and top.saving_pct_of_step >= MIN_SHARE_PCT:
        said = rule_words().get(top.code) or VerdictWords(top.name, f"what {top.code} names")
        words = {**EVIDENCE_WORDS, **{k: v for k, v in top.evidence.items() if isinstance(v, str)}}
        what = said.removes.format_map(words)
        kind = said.kind
        if top.replayed:  # the share is what the replayed fix removes, not an idle share: say so
            named = top.evidence.get("replayed_fix")
            fix = named if isinstance(named, str) else (said.replayed_with or "its fix").format_map(words)
            share = f"{top.saving_pct_of_step:.0f}%"
            return f"{kind}: replaying the step with {fix} saves about {share} of it ({top.code} {top.name})"
        return f"{kind}: fixing {what} saves up to {top.saving_pct_of_step:.0f}% of the step ({top.code} {top.name})"
    if not ranks:
        return ""
    rank = ranks[_position(ranks, slowest_rank)]
    dev = rank.primary
    t = dev.totals
    if not t.dur_us:
        return ""
    cats = sorted(t.categories_us.items(), key=lambda kv: -kv[1])
    idle = sorted(t.idle_causes_us.items(), key=lambda kv: -kv[1])
    where = "the device" if dev.kind == "gpu" else "the host"
    if (dev.utilization or 0.0) >= BUSY_SHARE or not idle or idle[0][1] <= 0:
        top_cat = f" (largest: {category_label(cats[0][0])} {cats[0][1] / t.dur_us:.0%})" if cats else ""
        return f"busy: {where} works {dev.utilization or 0.0:.0%} of each step{top_cat}; no finding saves 5% or more"
    return (
        f"no finding saves 5% or more; {where} is busy {dev.utilization or 0.0:.0%} of each step, the largest "
        f"idle is '{idle_label(idle[0][0])}' at {idle[0][1] / t.dur_us:.0%}"
    )


def _position(ranks: Sequence[RankSection], rank: int | None) -> int:
    """The position of the section of ``rank`` in ``ranks`` (0 when none is): from a
    :class:`~perfdoctor.model.sections.RankSections` without decoding the sections before it."""
    from perfdoctor.model.sections import RankSections

    names = ranks.ranks() if isinstance(ranks, RankSections) else [r.rank for r in ranks]
    return next((i for i, r in enumerate(names) if r == rank), 0)
