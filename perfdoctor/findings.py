"""Findings: what a rule found, with its evidence and the time a fix would save.

A check (``perfdoctor/checks/pdNNN_*.py``) returns a :class:`Hit` (evidence and
an :class:`Estimate`); the engine joins it with the rule's TOML half into a
:class:`Finding` and ranks the findings by estimated saving per step.

Replayed savings form the *fix plan* (:func:`perfdoctor.checks.after.plan`): each plan entry's saving is on top of
the entries above it, so the plan's savings add up to its fix-all; other savings are upper bounds.
:data:`FINDINGS_NOTE` says so in every report.

The report's finding dict (read by every renderer; keep it stable)::

    {"code": "PD101", "name": "dataloader-starvation", "category": "input-pipeline",
     "severity": "high" | "medium" | "low",
     "position": 1..n by saving, or None when the rule gives no saving estimate,
     "rank": the trace rank the message's numbers come from (the rank with the largest saving),
             or None for a job-level finding (one computed across ranks),
     "message": str (the rule's template filled from the evidence; on a multi-rank job prefixed
                "rank R: " and followed by "(fires on ranks ... of N)"),
     "headline": str (the rule's headline template filled from the same fields: one sentence, the claim with its key
                 number, at most 120 characters; "rank R: " before it on a multi-rank job),
     "saving_us_per_step": float (µs, upper bound; 0.0 when not estimated; for a finding that fires on its saving
                           after the higher-ranked fixes only, that saving: perfdoctor.checks.after.stated_after),
     "saving_pct_of_step": float (saving ÷ the report's one denominator × 100: see
                            perfdoctor.checks.denominator; the engine computes it, a check never does),
     "saving_method": str (how the saving was computed; "" when not estimated),
     "saving_after_us_per_step": float | None (µs the fix saves once the fixes of the higher-ranked findings
                                 that fired are in, replayed together; None when not replayed or none fired),
     "saving_after_pct_of_step": float | None (that as % of the report's one denominator),
     "saving_after_codes": [codes of those higher-ranked findings, by rank],
     "saving_from_us_per_step": float | None (the mean step the saving is taken from, µs; None: the denominator),
     "evidence": {name: number | str | list, ...,  "events": [{"name":..., ...}] (optional),
                  "ranks": [ranks it fired on]},
     "source": {"location": "train.py:42", "function", "exact", "calls", "frames", "skipped", "share_pct",
                "module"} | None (the user's line the time starts at:
                perfdoctor.analysis.timing.source_lines.SourceLine),
     "source_hint": str (without Python stacks, what would name that line; "" otherwise),
     "steps": [step numbers it fired on],
     "fix": str, "example_before": str, "example_after": str, "references": [str, ...]}
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeAlias

from perfdoctor.analysis.timing.source_lines import SourceLine
from perfdoctor.text import is_replayed

# what an evidence entry holds: numbers and words, lists of them, or named tables of them (the report's JSON, read
# back by perfdoctor.model.report with the same shapes); read-only views, so that a check's list[int] or
# dict[str, float] is one
Scalar = bool | int | float | str | None
EventValue = Scalar | Sequence[Scalar]
EvidenceItem = Scalar | Mapping[str, EventValue]
EvidenceValue = Scalar | Sequence[EvidenceItem] | Mapping[str, EventValue]
# a value of the report's finding dict (:meth:`Finding.to_dict`): its fields, its codes and references, its
# evidence, its source line
FindingValue: TypeAlias = Scalar | Sequence[str] | Sequence[int] | Mapping[str, EvidenceValue] | Mapping[str, object]

SEVERITIES = ("low", "medium", "high")
FINDINGS_NOTE = (
    "Savings are per step. The fix plan's savings add up: each is the step replayed with the fixes above it minus "
    "the step replayed with them and this one (the step's dependency graph replayed with the fixes; each fix's "
    "assumption is stated with it); a saving off the plan is on top of the whole plan, with its saving alone beside "
    "it; '≤' marks an upper bound."
)
# no finding is medium or above when its saving is under this share of the step
MIN_MEDIUM_PCT = 1.0


def severity_level(severity: str) -> int:
    """0 (low), 1 (medium), 2 (high). Raises ValueError for anything else."""
    return SEVERITIES.index(severity)


@dataclass(frozen=True)
class Basis:
    """Which step a saving is measured against (µs); a saving is restated onto another step with
    :meth:`Estimate.rescaled`, which scales it and these alike.

    Attributes:
        from_us: the mean step the saving is taken from, where the check's message names it ("takes it from A ms
            to B ms"): the rank's recorded mean analysed step, or the step replayed with another finding's fix the
            saving is measured on top of (PD103 on PD101's prefetched batches). None: the report's denominator.
        after_from_us: the mean step the after-fixes saving (``Estimate.after_us``) is taken from: the step replayed
            with the fixes of ``Estimate.after_codes`` together (None without an after-fixes saving).
        step_us / step_words: the step the saving was measured as a part of, and what it is ("the run's unprofiled
            steady steps' median"), when that is another kind of step than the report's denominator (a profile
            run's unprofiled step vs its profiled window); the engine restates the saving as the same share of the
            report's step (:func:`perfdoctor.checks.restate.restated`). None: measured on that step.
    """

    from_us: float | None = None
    after_from_us: float | None = None
    step_us: float | None = None
    step_words: str = ""

    def of_after(self) -> Basis:
        """The basis of the after-fixes saving stated as the saving: it is taken from ``after_from_us``."""
        return dataclasses.replace(self, from_us=self.after_from_us)


@dataclass(frozen=True)
class Estimate:
    """A saving: µs per step and how it was computed. A check gives no share of the step: the engine states every
    saving as a share of the report's one denominator (:mod:`perfdoctor.checks.denominator`).

    Attributes:
        saving_us: µs per step the fix saves (mean over the steps analysed): a replay's point estimate or an
            upper bound, as ``method`` says.
        method: one line naming how ``saving_us`` was computed.
        after_us: µs per step the fix saves once the fixes of the higher-ranked findings ``after_codes`` are in
            (the step replayed with theirs − replayed with theirs and this one: :mod:`perfdoctor.checks.after`);
            None when not replayed, or no higher-ranked finding fired.
        after_codes: the codes of those findings, by rank.
        basis: which step the saving (and ``after_us``) is measured against (:class:`Basis`).
        step_after_us: the mean step (µs) predicted once this fix and every fix above it in the rank's fix plan are
            in, replayed together (:func:`perfdoctor.checks.after.plan`); None when the fix is not in the plan.
        plan_position: 1-based place in the rank's fix plan (the greedy order of marginal savings); None when the
            fix is not in the plan (its saving falls under its threshold once the plan's fixes are in, or it was
            not replayed). In the plan, ``after_us`` is the marginal saving and ``after_codes`` the fixes above it.
    """

    saving_us: float
    method: str
    after_us: float | None = None
    after_codes: tuple[str, ...] = ()
    basis: Basis = Basis()
    step_after_us: float | None = None
    plan_position: int | None = None

    def rescaled(self, ratio: float) -> Estimate:
        """The saving stated on a step ``ratio`` times the one it was measured on (its share unchanged): the saving,
        the after-fixes saving and the steps they are taken from × ``ratio``; the basis is then that step (no
        ``step_us``). The one place a saving's basis is rescaled."""

        def times(v: float | None) -> float | None:
            return None if v is None else v * ratio

        return dataclasses.replace(
            self,
            saving_us=self.saving_us * ratio,
            after_us=times(self.after_us),
            basis=Basis(from_us=times(self.basis.from_us), after_from_us=times(self.basis.after_from_us)),
        )


@dataclass
class Evidence:
    """The numbers behind a finding.

    Attributes:
        values: named numbers (units in the names: ``_us``, ``_pct``, ``_bytes``, ``n_``).
        steps: the step numbers (``ProfilerStep#N``) the problem shows in.
        events: the top events / kernels / ops involved (dicts with ``name`` and numbers).
        source: the line of the user's code where the finding's time starts, read from the trace's Python stacks
            (:mod:`perfdoctor.analysis.timing.source_lines`); None without stacks, or for a rule that names no line.
        source_hint: what would name that line when the trace has no Python stacks ("" otherwise).
    """

    values: dict[str, EvidenceValue] = field(default_factory=dict)
    steps: list[int] = field(default_factory=list)
    events: Sequence[Mapping[str, EventValue]] = field(default_factory=list)
    source: SourceLine | None = None
    source_hint: str = ""


@dataclass
class Hit:
    """What a check returns when its rule fires (rule metadata is added by the engine).

    ``estimate`` None means the rule cannot estimate a saving (e.g. memory near
    capacity); the finding then keeps the rule's default severity and no position.
    ``fields`` fills the message template in addition to ``evidence.values``.
    ``rank`` names the trace rank a job-level hit points at (e.g. the straggler);
    it is listed among the ranks the finding fired on.
    ``advice`` replaces the rule's ``fix`` / ``example_before`` / ``example_after``
    text where the check knows better (e.g. the optimizer class found in the trace).
    ``min_saving_pct``: the rule's firing threshold, left to the engine: it reports the hit when its saving, alone
    or once the higher-ranked findings' fixes are in (``estimate.after_us``), is at least this share of the
    report's one denominator, and demotes it to a pass otherwise (:func:`perfdoctor.checks.after.gate`). None:
    the check judged its threshold itself.
    ``builds_on``: codes of findings whose fix this hit's saving is measured on top of (PD103's CUDA graphs on
    PD101's prefetched batches): in the fix plan it is a candidate only once those fixes are in.
    """

    evidence: Evidence
    estimate: Estimate | None
    fields: Mapping[str, object] = field(default_factory=dict)
    rank: int | None = None
    advice: dict[str, str] = field(default_factory=dict)
    min_saving_pct: float | None = None
    builds_on: tuple[str, ...] = ()


@dataclass
class Finding:
    """One ranked finding of the report (see the module docstring for the dict).

    ``ranks``: trace ranks the rule fired on; ``rank``: the trace rank the numbers
    come from (None for job-level findings); ``position``: 1..n in the ranking;
    ``saving_pct``: the saving as % of the report's one denominator (set by the engine); ``headline``: the claim
    with its key number in one sentence (the rule's ``headline`` template), ``message`` the full text.
    """

    code: str
    name: str
    category: str
    severity: str
    message: str
    estimate: Estimate | None
    evidence: Evidence
    fix: str
    example_before: str
    example_after: str
    references: list[str]
    ranks: list[int] = field(default_factory=list)
    rank: int | None = None
    position: int | None = None
    saving_pct: float = 0.0
    saving_after_pct: float | None = None  # estimate.after_us as % of the report's denominator
    # the saving alone (µs) of a finding stated by its marginal saving (on top of the fixes above it in the fix
    # plan, or of the whole plan: perfdoctor.checks.after.plan); None: ``saving_us`` is the saving alone
    alone_us: float | None = None
    # why a finding with a replayed saving is not in the fix plan ("no further saving once PD101, PD103 are fixed",
    # "rank 0 does not set the job's step"); "" in the plan or without a replayed saving
    plan_note: str = ""
    headline: str = ""

    @property
    def saving_us(self) -> float:
        """The finding's stated saving (µs per step): its headline, share and severity."""
        return self.estimate.saving_us if self.estimate else 0.0

    @property
    def rank_us(self) -> float:
        """The saving alone (µs): it orders the findings off the plan."""
        return self.alone_us if self.alone_us is not None else self.saving_us

    @property
    def plan_position(self) -> int | None:
        """1-based place in the fix plan, or None (off the plan, or no replayed saving)."""
        return None if self.estimate is None else self.estimate.plan_position

    @property
    def replayed(self) -> bool:
        """Whether the saving is the replay's point estimate (not an upper bound, not absent)."""
        return self.estimate is not None and is_replayed(self.estimate.method)

    def to_dict(self) -> dict[str, FindingValue]:
        """The finding's dict of the report (the module docstring lists its keys)."""
        evidence: dict[str, EvidenceValue] = dict(self.evidence.values)
        if self.evidence.events:
            evidence["events"] = self.evidence.events
        evidence["ranks"] = list(self.ranks)
        return {
            "code": self.code,
            "name": self.name,
            "category": self.category,
            "severity": self.severity,
            "position": self.position,
            "rank": self.rank,
            "message": self.message,
            "headline": self.headline,
            "saving_us_per_step": round(self.saving_us, 3),
            "saving_pct_of_step": round(self.saving_pct, 3) if self.estimate else 0.0,
            "saving_method": self.estimate.method if self.estimate else "",
            "saving_after_us_per_step": (
                None if self.estimate is None or self.estimate.after_us is None else round(self.estimate.after_us, 3)
            ),
            "saving_after_pct_of_step": None if self.saving_after_pct is None else round(self.saving_after_pct, 3),
            "saving_after_codes": list(self.estimate.after_codes) if self.estimate else [],
            "saving_from_us_per_step": (
                None
                if self.estimate is None or self.estimate.basis.from_us is None
                else round(self.estimate.basis.from_us, 3)
            ),
            "saving_alone_us_per_step": None if self.alone_us is None else round(self.alone_us, 3),
            "plan_position": self.plan_position,
            "step_after_us": (
                None
                if self.estimate is None or self.estimate.step_after_us is None
                else round(self.estimate.step_after_us, 3)
            ),
            "plan_note": self.plan_note,
            "method": self.estimate.method if self.estimate else "",
            "evidence": evidence,
            "source": None if self.evidence.source is None else self.evidence.source.to_dict(),
            "source_hint": self.evidence.source_hint,
            "steps": list(self.evidence.steps),
            "fix": self.fix,
            "example_before": self.example_before,
            "example_after": self.example_after,
            "references": list(self.references),
        }


def severity_for(pct: float | None, cap: str, high_pct: float, medium_pct: float) -> str:
    """Severity from the saving share, never above the rule's own severity ``cap``.

    ``pct`` None (no estimate) gives ``cap``. Cut-offs come from ``rules/engine.toml``.
    """
    if pct is None:
        return cap
    level = "high" if pct >= high_pct else "medium" if pct >= medium_pct else "low"
    if pct < MIN_MEDIUM_PCT:
        level = "low"
    return SEVERITIES[min(severity_level(level), severity_level(cap))]


def rank_findings(findings: list[Finding]) -> list[Finding]:
    """The report's order: the fix plan (by plan position), then the other replayed savings (by saving alone), then
    savings that are upper bounds (by saving), then findings without an estimate; severity, then code, break ties.
    Numbers the estimated ones 1..n in that order (``position``: a plan entry's equals its plan position when the
    plan's entries all fired); findings without an estimate get ``position = None``.
    """

    def key(f: Finding) -> tuple[int, float, int, str]:
        if f.plan_position is not None:
            return (0, float(f.plan_position), 0, f.code)
        group = 1 if f.replayed else 2 if f.estimate is not None else 3
        return (group, -f.rank_us, -severity_level(f.severity), f.code)

    out = sorted(findings, key=key)
    n = 0
    for f in out:
        if f.estimate is None:
            f.position = None
        else:
            n += 1
            f.position = n
    return out
