"""The rule engine: select rules, run their checks, merge ranks, rank findings.

Flow: :func:`load_catalogue` (TOML halves) + :func:`check_modules` (code
halves, ``perfdoctor/checks/pdNNN_*.py``) -> :func:`select_codes` (``--select``
/ ``--ignore``, ruff's longest-prefix rule) -> :func:`rank_outcomes` per rank (where the rank is analysed) and
:func:`combine` for the job -> a
:class:`CheckResults` whose :meth:`CheckResults.to_report` is merged into the
report dict (``findings``, ``skipped_checks``, ``findings_note``).

A check whose data is missing (``requires`` in its TOML, or the check's own
test) is *skipped with the reason*; it never passes silently.
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import ModuleType
from typing import TYPE_CHECKING, Any

from perfdoctor import text
from perfdoctor.analysis.rank import Analysis, RankResult
from perfdoctor.checks import after, contract, requirements, restate
from perfdoctor.checks import context as cx
from perfdoctor.checks.catalogue import REQUIREMENTS, Catalogue, RuleSpec
from perfdoctor.checks.common import shown_steps_text
from perfdoctor.checks.denominator import StepDenominator, step_denominator
from perfdoctor.errors import PerfDoctorError
from perfdoctor.findings import (
    FINDINGS_NOTE,
    Estimate,
    Evidence,
    Finding,
    Hit,
    rank_findings,
    severity_for,
    severity_level,
)

if TYPE_CHECKING:
    from perfdoctor.checks.config import RuleOptions
    from perfdoctor.crossrank.joint import JobFixAll, JointInputs

_MODULE_RX = re.compile(r"^pd\d{3}_\w+$")


def check_modules() -> dict[str, ModuleType]:
    """The check modules by code (``CODE`` attribute of each ``pdNNN_*`` module)."""
    import perfdoctor.checks as pkg

    out: dict[str, ModuleType] = {}
    for info in pkgutil.iter_modules(pkg.__path__):
        if _MODULE_RX.match(info.name):
            mod = importlib.import_module(f"perfdoctor.checks.{info.name}")
            out[mod.CODE] = mod
    return out


# -- selection ------------------------------------------------------------------


def _matches(cat: Catalogue, selector: str) -> dict[str, int]:
    """Codes a selector matches, with its specificity (prefix length; a name counts as a full code)."""
    s = selector.strip()
    rule = cat.by_name(s)
    if rule is not None:
        return {rule.code: len(rule.code) + 1}
    up = s.upper()
    return {c: len(up) for c in cat.rules if c.startswith(up)} if up else {}


def select_codes(
    cat: Catalogue,
    select: list[str] | None,
    ignore: list[str] | None,
    select_source: str = "--select",
    ignore_source: str = "--ignore",
) -> list[str]:
    """Codes enabled by ``select`` (default: all) minus ``ignore``; the longest matching selector wins.

    Selectors are codes, code prefixes (``PD3``) or kebab-case names; at equal
    length ``ignore`` wins. ``ALL`` selects everything.

    Raises:
        PerfDoctorError: a selector matches no rule (names the option and the selector), or the
            selection is empty (everything selected is ignored again): a run of no rules would
            print "Findings: none" and look like a clean bill of health.
    """
    best: dict[str, tuple[int, bool]] = {}
    sel = list(select) if select else ["ALL"]
    for sign, items, option in ((True, sel, select_source), (False, list(ignore or []), ignore_source)):
        for s in items:
            matched = {c: 0 for c in cat.rules} if s.strip().upper() == "ALL" else _matches(cat, s)
            if not matched:
                raise PerfDoctorError(f"{option}: {s!r} matches no rule code, prefix or name (see `perfdoctor rules`)")
            for code, spec_len in matched.items():
                cur = best.get(code)
                if cur is None or spec_len > cur[0] or (spec_len == cur[0] and not sign):
                    best[code] = (spec_len, sign)
    codes = sorted(c for c, (_, on) in best.items() if on)
    if not codes:
        raise PerfDoctorError(
            f"{ignore_source} {','.join(ignore or [])} removes every rule {select_source} "
            f"{','.join(sel)} selects: no rule left to run"
        )
    return codes


# -- running --------------------------------------------------------------------


@dataclass
class CheckResults:
    """What the engine found: ranked findings, skipped checks, and every check's metrics."""

    findings: list[Finding] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)
    passed: list[str] = field(default_factory=list)
    metrics: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)  # code -> rank -> metrics
    fix_all_note: str = ""  # what the findings' fixes together do to the mean step, replayed
    denominator: StepDenominator | None = None  # the step every saving is a share of (None: no step)
    pace_ranks: set[int] = field(default_factory=set)  # the ranks whose mean step is the job's (tied for longest)

    def shown(self, codes: list[str], note: str = "") -> CheckResults:
        """These results with only the findings, skips and passes of ``codes`` (``--select``): the same numbers and
        firing decisions as the full results; ``note`` (:func:`ignored_note`) is added to the findings note."""
        keep = set(codes)
        return dataclasses.replace(
            self,
            findings=[f for f in self.findings if f.code in keep],
            skipped=[s for s in self.skipped if s["code"] in keep],
            passed=[c for c in self.passed if c in keep],
            fix_all_note=(self.fix_all_note + (" " + note if note else "")).strip(),
        )

    def to_report(self) -> dict[str, Any]:
        """The report keys: ``findings`` (ranked dicts), ``skipped_checks``, ``passed_checks``, ``findings_note``,
        ``denominator`` (``{value_us, definition, rank}``, or None)."""
        d = self.denominator
        return {
            "denominator": None if d is None else {"value_us": d.value_us, "definition": d.definition, "rank": d.rank},
            "findings": [f.to_dict() for f in self.findings],
            "skipped_checks": list(self.skipped),
            "passed_checks": list(self.passed),
            "findings_note": (self.fix_all_note + " " + FINDINGS_NOTE).strip(),
        }


@dataclass(frozen=True)
class _Stated:
    """A hit's saving as its finding states it: ``estimate`` (its saving the marginal one where it has one),
    ``pct`` / ``pct_after`` (% of the report's denominator: the stated saving, the saving after the fixes above
    it), ``alone_us`` (µs, the saving alone when the stated one is marginal) and the message's ``after`` clause."""

    estimate: Estimate | None
    pct: float | None = None
    pct_after: float | None = None
    alone_us: float | None = None
    after: text.After | None = None


def _stated(hit: Hit, denom: StepDenominator | None) -> _Stated:
    """How ``hit``'s saving is stated, as a share of ``denom`` (the report's one denominator; 0% without one): a
    hit with a saving after the fixes above it in the fix plan (or, off the plan, after the whole plan) states that
    marginal saving (headline, share, severity), its saving alone kept in the message."""
    est = hit.estimate
    if est is None:
        return _Stated(None)
    pct = denom.pct(est.saving_us) if denom is not None else 0.0
    if est.after_us is None or (est.plan_position is None and not est.after_codes):
        return _Stated(est, pct)
    pct_after = denom.pct(est.after_us) if denom is not None else 0.0
    after_clause = None
    if est.after_codes:
        # a hit that builds on another fix (PD103's graphs on PD101's prefetched batches) measured its saving on
        # top of that fix already: its saving alone is the one its check stated apart
        alone_text_us = est.saving_us
        alone_ms = hit.evidence.values.get("saving_alone_ms")
        if hit.builds_on and isinstance(alone_ms, int | float):
            alone_text_us = float(alone_ms) * 1000.0
        after_clause = text.After(alone_text_us, est.after_us, est.after_codes, pct_after)
    marginal = replace(est, saving_us=est.after_us, basis=est.basis.of_after())
    return _Stated(marginal, pct_after, pct_after, est.saving_us, after_clause)


def _finding(
    spec: RuleSpec,
    hit: Hit,
    cat: Catalogue,
    denom: StepDenominator | None,
    where: text.Where,
    whole_trace: bool = False,
) -> Finding:
    """The finding of ``hit``; ``where``: the trace rank its numbers come from, the ranks it fired on and the
    job's rank count; its saving's share is of ``denom``, the report's one denominator (0% without one);
    ``whole_trace``: the rank's trace has no step markers (its message says what "per step" means)."""
    stated = _stated(hit, denom)
    est = hit.estimate  # its saving alone fills the templates' saving_ms and saving_pct
    alone_pct = None if est is None else denom.pct(est.saving_us) if denom is not None else 0.0
    fields = text.template_fields(hit.evidence.values, hit.fields, None if est is None else est.saving_us, alone_pct)
    body, headline = (
        text.fill(spec.message, fields, spec.path, spec.code),
        text.fill(spec.headline, fields, spec.path, spec.code),
    )
    advice = hit.advice
    return Finding(
        code=spec.code,
        name=spec.name,
        category=spec.category,
        severity=severity_for(stated.pct, spec.severity, cat.severity_high_pct, cat.severity_medium_pct),
        message=text.finding_message(body, where, stated.after, whole_trace),
        headline=text.finding_headline(headline, where),
        estimate=stated.estimate,
        evidence=hit.evidence,
        fix=advice.get("fix", spec.fix),
        example_before=advice.get("example_before", spec.example_before),
        example_after=advice.get("example_after", spec.example_after),
        references=list(spec.references),
        ranks=list(where.fired),
        rank=where.rank,
        saving_pct=stated.pct or 0.0,
        saving_after_pct=stated.pct_after,
        alone_us=stated.alone_us,
        plan_note=_plan_note(stated.estimate),
    )


def _plan_note(est: Estimate | None) -> str:
    """Why a replayed saving is off the fix plan: "no further saving once PD101, PD103 are fixed" ("" in the plan,
    or without a replayed saving)."""
    if est is None or est.plan_position is not None or not est.after_codes:
        return ""
    return text.plan_note(est.saving_us, est.after_codes)


# an outcome's rank: a trace rank, its str in the metrics dict (user metric rules), or None / "None" for the job
RankKey = int | str | None


def _as_rank(key: RankKey) -> int | None:
    """A trace rank from an outcome key (an int, its str in the metrics dict, or None / "None" for the job)."""
    return None if key is None or key == "None" else int(key)


FOLD_SKIPS_ABOVE = 2  # ranks; more skip reasons than this are folded by their wording (8 ranks printed 8 copies)
_NUMBER = re.compile(r"\d+(\.\d+)?")


def _folded(skips: list[tuple[RankKey, str]]) -> str:
    """Skip reasons of many ranks, one per wording (numbers aside): ``on N ranks, e.g. rank R: reason``."""
    groups: dict[str, list[tuple[RankKey, str]]] = {}
    for r, s in skips:
        groups.setdefault(_NUMBER.sub("#", s), []).append((r, s))
    return "; ".join(
        f"on {len(g)} rank{'s' if len(g) > 1 else ''}, e.g. rank {g[0][0]}: {g[0][1]}" for g in groups.values()
    )


def _merge_rank_outcomes(
    spec: RuleSpec,
    outcomes: Sequence[tuple[RankKey, cx.Outcome]],
    res: CheckResults,
    cat: Catalogue,
    whole_trace: Mapping[int | None, bool] | None = None,
) -> None:
    """One finding from the per-rank outcomes (the rank with the largest saving speaks), or a skip / pass; its
    saving's share is of ``res.denominator`` (the report's one denominator, set by :func:`combine`).

    ``outcomes`` pairs a trace rank (None for a job-level check, a str in user metric rules) with its outcome.
    """
    hits = [(r, o.hit) for r, o in outcomes if o.hit is not None]
    if hits:
        best_rank, best = max(hits, key=lambda rh: rh[1].estimate.saving_us if rh[1].estimate else 0.0)
        pace = None if res.denominator is None else res.denominator.rank
        on_pace = [(r, h) for r, h in hits if pace is not None and _as_rank(r) in (res.pace_ranks or {pace})]
        if len(outcomes) > 1 and on_pace:  # the job's step is its slowest rank's: that rank's plan speaks (of ranks
            # tied for the longest step, the one its fix saves most on)
            best_rank, best = max(on_pace, key=lambda rh: rh[1].estimate.saving_us if rh[1].estimate else 0.0)
        if len(outcomes) > 1 and any(h.estimate for _, h in hits):
            best.evidence.values["saving_us_by_rank"] = {
                str(r): round(h.estimate.saving_us, 3) for r, h in hits if h.estimate
            }
        fired = sorted(r for r in {h.rank if h.rank is not None else _as_rank(r) for r, h in hits} if r is not None)
        off_pace = len(outcomes) > 1 and pace is not None and not on_pace and best.estimate is not None
        own_ms = best.estimate.saving_us / 1000.0 if best.estimate is not None else 0.0  # alone on its rank
        if off_pace:
            best = _off_pace(best, pace, _as_rank(best_rank))
        rank = _as_rank(best_rank)
        # a trace without step markers is one window: its message says what "per step" means
        window = (whole_trace or {}).get(rank if rank is not None else (fired[0] if fired else None), False)
        f = _finding(spec, best, cat, res.denominator, text.Where(rank, fired, len(outcomes)), window)
        if off_pace:  # its saving on its own rank stands beside the job's nothing
            f.plan_note = text.off_pace_note(pace)
            f.alone_us = own_ms * 1000.0
        res.findings.append(f)
        return
    skips = [(r, o.skip) for r, o in outcomes if o.skip]
    if skips and len(skips) == len(outcomes):
        reasons = sorted({s for _, s in skips})
        reason = (
            reasons[0]
            if len(reasons) == 1
            else ("; ".join(f"rank {r}: {s}" for r, s in skips) if len(skips) <= FOLD_SKIPS_ABOVE else _folded(skips))
        )
        res.skipped.append({"code": spec.code, "name": spec.name, "reason": reason})
    else:
        res.passed.append(spec.code)


def _off_pace(hit: Hit, pace: int | None, rank: int | None) -> Hit:
    """A rank-scope ``hit`` that fires only on ranks other than ``pace`` (the rank whose mean step is the job's),
    stated for the job: the job's step is its longest rank's, so a fix on other ranks alone saves it nothing (the
    ranks move in lock-step; a faster rank waits longer in its collectives). Its saving on its own rank stays in
    the message and the method."""
    est = hit.estimate
    assert est is not None
    own = est.saving_us  # alone on its rank
    method = text.off_pace_method(est.method, rank, pace, own)
    fields = {**hit.fields, "saving_ms": own / 1000.0}
    job_est = dataclasses.replace(
        est, saving_us=0.0, method=method, after_us=None, after_codes=(), step_after_us=None, plan_position=None
    )
    return dataclasses.replace(hit, estimate=job_est, fields=fields)


def _metric_rule(spec: RuleSpec, res: CheckResults, modules: dict[str, ModuleType], cat: Catalogue) -> None:
    when = spec.when or {}
    src, metric = when["metric"].split(".", 1)
    for key in ("metric", "saving_metric"):
        if key in when:
            c, m = when[key].split(".", 1)
            if c not in modules or m not in getattr(modules[c], "METRICS", {}):
                raise PerfDoctorError(
                    f"{spec.path}: when.{key} {when[key]!r} is not a metric of a built-in check "
                    f"(`perfdoctor rule {c}` lists them)"
                )
    per_rank = res.metrics.get(src, {})
    outcomes: list[tuple[str | None, cx.Outcome]] = []
    for rank_key, metrics in per_rank.items():
        value = metrics.get(metric)
        if value is None:
            outcomes.append((rank_key, cx.skipped(f"metric {src}.{metric} unavailable on this trace")))
            continue
        fires = value > when["above"] if "above" in when else value < when["below"]
        if not fires:
            outcomes.append((rank_key, cx.passed()))
            continue
        est = None
        if "saving_metric" in when:
            sc, sm = when["saving_metric"].split(".", 1)
            sv = res.metrics.get(sc, {}).get(rank_key, {}).get(sm)
            if sv is not None:
                est = Estimate(float(sv), f"user rule: {when['saving_metric']}")
        ev = Evidence(values={"metric": when["metric"], "value": value})
        outcomes.append((rank_key, cx.Outcome(hit=Hit(evidence=ev, estimate=est))))
    if not outcomes:
        outcomes = [(None, cx.skipped(f"metric {when['metric']} unavailable: {src} did not run"))]
    _merge_rank_outcomes(spec, outcomes, res, cat)


def check_order(cat: Catalogue, selected: list[str]) -> list[str]:
    """Built-in codes to run for ``selected`` (plus those selected user metric rules read), in run order
    (rules with ``runs_after_others = true`` in their TOML at the end: they read the others' skip reasons)."""
    user = [w for c in selected if (w := cat.rules[c].when) is not None]  # the user rules' [when] tables
    needed = (
        set(selected)
        | {w["metric"].split(".")[0] for w in user}
        | {w["saving_metric"].split(".")[0] for w in user if "saving_metric" in w}
    )
    return sorted(
        (c for c in needed if c in cat.rules and cat.rules[c].when is None),
        key=lambda c: (cat.rules[c].runs_after_others, c),
    )


def rank_outcomes(
    analysis: Analysis[RankResult],
    ctx: cx.RankContext,
    cat: Catalogue,
    order: list[str],
    modules: dict[str, ModuleType] | None = None,
    denominator_us: float | None = None,
) -> dict[str, cx.Outcome]:
    """The outcome of every rank-scope check in ``order`` on one rank (``ctx``), by code, each replayed saving
    also on top of the fixes above it in the plan (:func:`perfdoctor.checks.after.plan`).

    Needs only this rank's data, so it runs where the rank is analysed (a pool or Dask worker):
    the ``multi_rank`` and ``run`` requirements are the job's and are judged in :func:`combine`.
    ``denominator_us``: the report's one denominator, which decides which higher-ranked hits fire; None (a job's
    worker, which does not know the job's step) uses the rank's own step (its unprofiled one in a profile run),
    and :func:`combine` judges the thresholds again on the job's.
    """
    modules = modules if modules is not None else check_modules()
    out: dict[str, cx.Outcome] = {}
    for code in order:
        spec = cat.rules[code]
        mod = modules.get(code)
        if mod is None:
            continue
        if spec.scope == "job":  # a job rule's part that needs the rank's tables (its replay), where they are
            part = getattr(mod, "rank_part", None)
            if part is not None:
                ctx.spec = spec
                out[code] = part(ctx)
                if out[code].hit is not None:
                    ctx.earlier[code] = out[code]
            continue
        ctx.spec = spec
        reason = next((m for m in (requirements.missing(q, analysis, ctx.rank) for q in spec.requires) if m), None)
        o = cx.skipped(reason) if reason else mod.check(ctx)
        if not o.skip:
            o.metrics.setdefault("step_us", ctx.step_us)
        ctx.earlier[code] = o  # a later check may build on it (builds_on; runs_after_others reads skip reasons)
        out[code] = o
    rr = ctx.built_replay()
    if rr is not None:
        hits = {c: o.hit for c, o in out.items() if o.hit is not None}
        rr.fired = after.plan(rr, hits, ctx.base_step_us if denominator_us is None else denominator_us)
    return out


def requirement_reasons(analysis: Analysis[RankResult], rank: RankResult) -> dict[str, str]:
    """Why ``rank`` lacks each requirement it lacks (all but the job's ``multi_rank`` and ``run``), for a
    rank summary: :func:`combine` judges job-scope rules from these without the rank's tables."""
    out = {}
    for q in REQUIREMENTS:
        if q in requirements.JOB_REQUIREMENTS:
            continue
        reason = requirements.missing(q, analysis, rank)
        if reason:
            out[q] = reason
    return out


def combine(
    analysis: Analysis[RankResult],
    rank_ctx: list[cx.RankContext],
    per_rank: Sequence[Mapping[str, cx.Outcome]],
    cat: Catalogue,
    selected: list[str],
    modules: dict[str, ModuleType] | None = None,
) -> CheckResults:
    """Merge the ranks' outcomes (:func:`rank_outcomes`, one dict per entry of ``rank_ctx``) and run the
    job-scope checks: the findings, skips and metrics of the report.

    Rank checks that read cross-rank results (``CROSS_RANK = True`` in their module: PD301 reads the
    collective wait) are run again here from the rank's step rows once the job has them, so a rank's outcome
    never depends on where it was analysed. ``rank_ctx`` holds the ranks read back from their summaries
    (:class:`perfdoctor.jobs.summary.SummarisedRank`: step rows and requirement reasons, no tables). A rank saving
    measured on the profiled window is restated for a profile run's unprofiled step, and one measured on the run's
    unprofiled steps for the report's denominator (:mod:`perfdoctor.checks.restate`).
    """
    modules = modules if modules is not None else check_modules()
    res = CheckResults(denominator=step_denominator(analysis, rank_ctx), pace_ranks=_pace_ranks(rank_ctx))
    wanted = set(selected)
    whole_trace = {c.rank.rank: c.rank.steps.source == "whole-trace" for c in rank_ctx}
    analysed = {c.rank.rank: c.step_numbers for c in rank_ctx}
    rank_hits: dict[int, dict[str, Hit]] = {}  # each rank's replayed hits that fire, for the job's plan
    for code in check_order(cat, selected):
        spec = cat.rules[code]
        mod = modules.get(code)
        why_not = _cannot_run(spec, mod is not None, analysis, rank_ctx)
        if why_not is not None or mod is None:
            if code in wanted:
                res.skipped.append({"code": code, "name": spec.name, "reason": why_not or ""})
            continue
        outcomes = _rule_outcomes(mod, spec, analysis, rank_ctx, per_rank, res.denominator)
        res.metrics[code] = {str(r): o.metrics for r, o in outcomes if o.metrics}
        for r, o in outcomes:
            if r is not None and o.hit is not None and o.hit.estimate is not None:
                rank_hits.setdefault(int(r), {})[code] = o.hit
        if code in wanted:
            _report_rule(spec, outcomes, res, cat, whole_trace, analysed)
    for spec in (cat.rules[c] for c in selected if cat.rules[c].when is not None):
        _metric_rule(spec, res, modules, cat)
    if len(rank_ctx) > 1:
        _job_plan(res, rank_ctx, rank_hits, cat)
    res.findings = rank_findings(res.findings)
    res.fix_all_note = _fix_all_note(rank_ctx, res.findings)
    return res


def _cannot_run(
    spec: RuleSpec, implemented: bool, analysis: Analysis[RankResult], rank_ctx: list[cx.RankContext]
) -> str | None:
    """Why a rule cannot run on this report at all (no check module; no trace for a rule that reads one), or None."""
    if not implemented:
        return "no check is implemented for this rule yet"
    needs_trace = spec.scope != "job" or any(q != "run" for q in spec.requires)
    if needs_trace and not rank_ctx:
        reason = analysis.no_trace and "no trace in the run directory (why: the warning above)"
        return reason or "no trace to analyse"
    return None


def _rule_outcomes(
    mod: ModuleType,
    spec: RuleSpec,
    analysis: Analysis[RankResult],
    rank_ctx: list[cx.RankContext],
    per_rank: Sequence[Mapping[str, cx.Outcome]],
    denominator: StepDenominator | None,
) -> list[tuple[int | None, cx.Outcome]]:
    """One rule's outcome on each rank (its trace rank; None for a job rule's one outcome), stated for the report:
    a rank outcome re-run with the job's cross-rank results (:func:`_rerun_cross_rank`) and restated for a profile
    run's unprofiled step, then every saving restated on the report's ``denominator`` and its threshold judged
    there (:mod:`perfdoctor.checks.restate`, :func:`perfdoctor.checks.after.gate`)."""
    code = spec.code
    outcomes: list[tuple[int | None, cx.Outcome]]
    if spec.scope == "job":
        parts = [per.get(code) if code in per else None for per in per_rank]
        outcomes = [(None, _run_job(mod, spec, analysis, rank_ctx, parts))]
    else:
        outcomes = [  # a saving measured on the profiled window, stated for a profile run's unprofiled step
            (ctx.rank.rank, restate.on_unprofiled_step(_rerun_cross_rank(mod, spec, analysis, ctx, out), ctx))
            for ctx, per in zip(rank_ctx, per_rank)
            for out in [per[code] if code in per else cx.skipped(NOT_RUN_ON_RANK)]
        ]
    denom_us = denominator.value_us if denominator is not None else 0.0
    outcomes = [(r, restate.on_denominator(o, denom_us)) for r, o in outcomes]
    return [(r, after.gate(o, denom_us)) for r, o in outcomes]  # thresholds left to the engine


def _report_rule(
    spec: RuleSpec,
    outcomes: list[tuple[int | None, cx.Outcome]],
    res: CheckResults,
    cat: Catalogue,
    whole_trace: dict[int | None, bool],
    analysed: dict[int | None, list[int]],
) -> None:
    """Add a shown rule's finding, skip or pass to ``res`` (:func:`_merge_rank_outcomes`), its finding saying what
    "per step" means on a trace without step markers (``whole_trace``, by trace rank) and which of the averaged
    steps (``analysed``, by trace rank) its evidence's steps are."""
    sub = CheckResults(denominator=res.denominator, pace_ranks=res.pace_ranks)
    _merge_rank_outcomes(spec, outcomes, sub, cat, whole_trace if spec.whole_trace_note else None)
    for f in sub.findings:
        _note_shown_steps(f, analysed.get(f.rank))
    res.findings += sub.findings
    res.skipped += sub.skipped
    res.passed += sub.passed


def _job_plan(
    res: CheckResults, rank_ctx: list[cx.RankContext], rank_hits: dict[int, dict[str, Hit]], cat: Catalogue
) -> None:
    """Restate a job's fix plan for the job's step: entry k takes the job from the longest rank step with entries
    1..k-1 in to the longest with entries 1..k in, where a rank's step with a set of fixes is its mean step less
    the marginal savings of those fixes in its own plan (:func:`perfdoctor.checks.after.plan`; a fix that does not
    fire on a rank leaves it as it is). A fix that then saves the job nothing leaves the plan and says why. In
    place on ``res.findings``."""
    plan = sorted((f for f in res.findings if f.plan_position is not None), key=lambda f: (f.plan_position, f.code))
    if not plan or res.denominator is None:
        return
    base = {int(c.rank.rank or 0): float(c.base_step_us) for c in rank_ctx if c.n_steps and c.step_us > 0}
    if not base:
        return

    def step_with(codes: set[str]) -> float:
        out = 0.0
        for r, b in base.items():
            hits = rank_hits.get(r, {})
            gone = sum(
                h.estimate.after_us or 0.0
                for c, h in hits.items()
                if c in codes and h.estimate is not None and h.estimate.plan_position is not None
            )
            out = max(out, b - gone)
        return out

    prev, n = max(base.values()), 0
    chosen: list[str] = []
    own_methods = {f.code: f.estimate.method for f in plan if f.estimate is not None}  # each fix's on its rank
    for f in plan:
        est = f.estimate
        assert est is not None
        after_us = step_with({*chosen, f.code})
        saving = max(prev - after_us, 0.0)
        if saving < 5.0:
            f.estimate = dataclasses.replace(
                est, saving_us=0.0, after_us=0.0, step_after_us=None, plan_position=None, after_codes=tuple(chosen)
            )
            f.saving_pct, f.saving_after_pct, f.severity = 0.0, 0.0, "low"
            f.plan_note = text.JOB_PLAN_NOTHING
            continue
        n += 1
        f.estimate = dataclasses.replace(
            est,
            saving_us=saving,
            after_us=saving,
            basis=dataclasses.replace(est.basis, from_us=prev, after_from_us=prev),
            step_after_us=after_us,
            plan_position=n,
            after_codes=tuple(chosen),
            method=text.method_with(est.method, text.JOB_PLAN_CLAUSE),
        )
        pct = res.denominator.pct(saving)
        f.saving_pct = f.saving_after_pct = pct
        f.severity = severity_for(pct, cat.rules[f.code].severity, cat.severity_high_pct, cat.severity_medium_pct)
        chosen.append(f.code)
        prev = after_us
    _joint_last_entry(res, rank_ctx, chosen, own_methods)


def _joint_last_entry(
    res: CheckResults, rank_ctx: list[cx.RankContext], chosen: list[str], own_methods: Mapping[str, str]
) -> None:
    """The job plan's last entry taken to the step of every rank replayed jointly with its fixes
    (:func:`_joint_fix_all`: each collective ends when its last rank arrives, so peers that are fixed too stop
    making a rank wait) when that replay's fixes are exactly the plan's: the whole plan's prediction is then the
    findings note's job figure, the entries above it each rank with its peers as recorded. ``own_methods``: each
    entry's method on its rank, before the job's plan restated it."""
    joint, _ = _joint_fix_all(rank_ctx, set(chosen))
    if joint is None or set(joint.codes) != set(chosen) or res.denominator is None:
        return
    last = next(f for f in res.findings if f.plan_position == len(chosen))
    est = last.estimate
    assert est is not None and est.basis.from_us is not None
    after_us = joint.after[1]
    saving = max(est.basis.from_us - after_us, 0.0)
    last.estimate = dataclasses.replace(
        est,
        saving_us=saving,
        after_us=saving,
        step_after_us=after_us,
        method=text.method_with(own_methods[last.code], text.JOINT_PLAN_CLAUSE),
    )
    last.saving_pct = last.saving_after_pct = res.denominator.pct(saving)


# a rank whose summary holds no outcome for a rule (made with other rules selected)
NOT_RUN_ON_RANK = "the rule did not run where this rank was analysed"


def _pace_ranks(rank_ctx: list[cx.RankContext]) -> set[int]:
    """The trace ranks whose mean step (:attr:`~perfdoctor.checks.context.RankContext.base_step_us`) is the
    longest: the job's step (the ranks move in lock-step); several when they tie."""
    timed = [(c.base_step_us, c.rank.rank) for c in rank_ctx if c.n_steps and c.step_us > 0 and c.rank.rank is not None]
    if not timed:
        return set()
    longest = max(t for t, _ in timed)
    return {int(r) for t, r in timed if t >= longest}


def _note_shown_steps(f: Finding, analysed: list[int] | None) -> None:
    """Say in a rank finding's saving method which of the averaged steps its steps (where the problem shows) are
    (PD205 on ResNet50 nw0 listed steps #6–#10 beside "mean over 6 analysed steps (#5–#10)")."""
    if f.estimate is None or not f.estimate.method or analysed is None:
        return
    note = shown_steps_text(list(f.evidence.steps), analysed)
    if note:
        f.estimate = replace(f.estimate, method=text.method_with(f.estimate.method, note))


def _fix_all_note(rank_ctx: list[cx.RankContext], findings: list[Finding]) -> str:
    """ "Fixing the N findings with a replayed saving together would take the mean step from A to B ms", per rank
    (fixed alone, its collectives still wait for the unchanged peers: :mod:`perfdoctor.crossrank.bounds`); for a
    job, the job's figure first: every rank with its own fixes replayed jointly
    (:func:`perfdoctor.crossrank.joint.job_fix_all` on the ranks' :class:`JointInputs`), its step the longest
    rank's; where the ranks cannot be replayed jointly, the slowest rank each fixed alone with its peers unchanged
    (:func:`perfdoctor.crossrank.bounds.job_fix_all`), and the note says why."""
    from perfdoctor.crossrank.bounds import job_fix_all

    fixes: list[text.FixAll] = []
    reported = {f.code for f in findings}
    reps: dict[int, dict[str, Any]] = {}
    for ctx in rank_ctx:  # each rank read back from its summary: its encoded report section holds the replay
        summary = ctx.rank.summary
        rep = summary.replay() if summary is not None else None
        if not isinstance(rep, dict):
            continue
        fix = rep.get("fix_all")
        if not fix or not isinstance(fix, dict) or not set(fix["codes"]) <= reported:
            reps[int(ctx.rank.rank or 0)] = {**rep, "fix_all": None}
            continue
        reps[int(ctx.rank.rank or 0)] = rep
        fixes.append(
            text.FixAll(
                ctx.rank.rank if len(rank_ctx) > 1 else None,
                list(fix["codes"]),
                float(fix["recorded_mean_step_us"]),
                float(fix["replayed_mean_step_us"]),
            )
        )
    parts = text.fix_all_sentences(fixes)
    if len(rank_ctx) < 2 or not parts:
        return text.sentences(parts)
    joint, why = _joint_fix_all(rank_ctx, reported)
    if joint is not None:
        return _joint_note(joint)
    job = job_fix_all(reps)
    if job is None:
        return text.sentences(parts)
    codes, recorded, replayed, slowest = job
    return text.job_fix_all_note(codes, recorded, replayed, slowest, why, parts)


def _joint_fix_all(rank_ctx: list[cx.RankContext], reported: set[str]) -> tuple[JobFixAll | None, str]:
    """The ranks with their fixes replayed jointly (:func:`perfdoctor.crossrank.joint.job_fix_all`), a rank's fixes
    applied when every code of them is ``reported``; (None, why not) otherwise. Each rank summary carries its
    :class:`perfdoctor.crossrank.joint.JointInputs`."""
    from perfdoctor.crossrank.joint import job_fix_all

    inputs: dict[int, JointInputs] = {}
    fixed: dict[int, bool] = {}
    for ctx in rank_ctx:
        summary = ctx.rank.summary
        ji = summary.joint if summary is not None else None
        if ji is None:
            return None, f"rank {ctx.rank.rank} has no collective kernels or no replay"
        inputs[int(ctx.rank.rank or 0)] = ji
        fixed[int(ctx.rank.rank or 0)] = bool(ji.codes) and set(ji.codes) <= reported
    return job_fix_all(inputs, fixed)


def _joint_note(joint: JobFixAll) -> str:
    """The findings note's job figure from a :class:`perfdoctor.crossrank.joint.JobFixAll`."""
    (_, before), (last, after_us) = joint.before, joint.after
    return text.joint_note(joint.codes, before, after_us, last, joint.recorded_us, joint.replayed_us)


def _rerun_cross_rank(
    mod: ModuleType, spec: RuleSpec, analysis: Analysis[RankResult], ctx: cx.RankContext, outcome: cx.Outcome
) -> cx.Outcome:
    """``outcome`` again from ``ctx`` when the check reads cross-rank results the job now has."""
    if outcome.skip or not getattr(mod, "CROSS_RANK", False) or analysis.collective_wait is None:
        return outcome
    ctx.spec = spec
    ctx.earlier[spec.code] = outcome  # what the rank's own run measured (its replay): RankContext.rank_pass
    o: cx.Outcome = mod.check(ctx)
    if not o.skip:
        o.metrics.setdefault("step_us", ctx.step_us)
    return o


def prepare(opts: RuleOptions) -> tuple[Catalogue, list[str]]:
    """Load the catalogue (with ``opts.rules_dirs``) and the codes to *run*: every rule but those ``opts.ignore``
    names (an ignored fix is one the user will not make: the plan is computed without it). ``--select`` does not
    change what runs, only what is shown (:func:`shown_codes`): a finding that fires on top of other fixes fires
    with or without them selected, with the same numbers.

    Raises PerfDoctorError for a bad rule file or selector, before any trace is read.
    """
    from perfdoctor.checks.catalogue import load_catalogue

    cat = load_catalogue(opts.rules_dirs)
    contract.validate(cat, check_modules())
    shown_codes(cat, opts)  # a bad --select fails here, before any trace is read
    codes = select_codes(
        cat, None, opts.ignore, opts.source.get("select", "--select"), opts.source.get("ignore", "--ignore")
    )
    return cat, codes


def shown_codes(cat: Catalogue, opts: RuleOptions) -> list[str]:
    """The codes whose findings, skips and passes the report shows: ``opts.select`` less ``opts.ignore``.

    Raises PerfDoctorError for a selector that matches no rule, or a selection that ignores everything.
    """
    return select_codes(
        cat, opts.select, opts.ignore, opts.source.get("select", "--select"), opts.source.get("ignore", "--ignore")
    )


def ignored_note(cat: Catalogue, opts: RuleOptions) -> str:
    """The one sentence saying which fixes the plan assumes unfixed (``--ignore``), or ""."""
    if not opts.ignore:
        return ""
    run = set(select_codes(cat, None, opts.ignore))
    return text.ignored_note(sorted(set(cat.rules) - run), opts.source.get("ignore", "--ignore"))


def exit_code(results: CheckResults, fail_on: str | None) -> int:
    """1 when a finding is at or above ``fail_on`` severity, else 0 (``fail_on`` None: always 0)."""
    if fail_on is None:
        return 0
    level = severity_level(fail_on)
    return 1 if any(severity_level(f.severity) >= level for f in results.findings) else 0


def _run_job(
    mod: ModuleType,
    spec: RuleSpec,
    analysis: Analysis[RankResult],
    rank_ctx: list[cx.RankContext],
    parts: list[cx.Outcome | None] | None = None,
) -> cx.Outcome:
    """A job rule's outcome; ``parts``: its ``rank_part`` outcome on each rank (None where it has none), which
    :attr:`perfdoctor.checks.context.JobContext.rank_parts` hands the check."""
    for q in spec.requires:
        for ctx in rank_ctx:
            reason = requirements.missing(q, analysis, ctx.rank)
            if reason:
                return cx.skipped(reason)
    job = cx.JobContext(analysis, rank_ctx, spec)
    job.rank_parts = list(parts or [])
    outcome: cx.Outcome = mod.check(job)
    return outcome
