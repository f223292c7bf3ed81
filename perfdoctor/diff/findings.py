"""Findings on both sides (resolved / new / persisting) and predicted vs measured savings.

A rule's finding is matched by its code; on a multi-rank job each report already merges a rule's hits into one
finding. "Resolved" needs evidence: the rule ran on AFTER and found nothing (``passed_checks``). A finding whose
rule AFTER skipped (it lacked the data) is ``not-checked``, never resolved.

Predicted vs measured: the measured change is the verdict's mean step before − after (µs, positive = faster), the
whole step's, so it checks only the fixes that were applied, i.e. the BEFORE findings resolved in AFTER. They are
scored together, as one prediction (one finding: its own saving; several: BEFORE's replay of exactly those fixes
together when the report carries it, else the sum of their savings). A persisting finding whose saving shrank is
listed as shrunk ("persisting, smaller"), with no error: the finding is still there, and the diff cannot tell
whether its fix was applied in part (num_workers 0 → 2 with the loader still behind) or other changes shrank it
(host overhead once hidden behind a DataLoader wait that went away), so no change is attributed to it. A saving
is ``replayed`` when its rule computed it by replaying the step's dependency graph with the fix applied (its
``saving_method`` is a replay's: :func:`perfdoctor.text.is_replay_method`), else
``upper-bound`` (an interval rule's estimate).
"""

from __future__ import annotations

from dataclasses import dataclass

from perfdoctor.diff.model import FindingDelta, Pair, PredictedPart, Prediction, Shrunk
from perfdoctor.diff.sides import findings_of, passed_of, skipped_of
from perfdoctor.model import Report
from perfdoctor.model.report import FindingSection, FixAllSection
from perfdoctor.text import is_replay_method

MEASURED_NOTE = (
    "The measured change is the whole step's: it checks only the fixes that were applied, i.e. the "
    "findings resolved in AFTER, and it also holds any other change between the two runs."
)
SHARED_NOTE = (
    "{n} findings were resolved together ({codes}): their fixes are scored as one prediction ({how}) "
    "against the one measured change they share."
)
HOW = {
    "replayed-together": "BEFORE's replay of the step with exactly these fixes applied together",
    "sum": "the sum of their savings, which counts time that two fixes both remove twice",
}
SHRUNK_NOTE = (
    "Findings that persist with a smaller saving ('persisting, smaller') are listed without an error: the "
    "finding is still there, and the diff cannot tell whether its fix was applied in part or other changes "
    "shrank it, so the step's change is not attributed to it."
)
NONE_NOTE = "No BEFORE finding was resolved in AFTER: no applied fix to check a prediction against."
KIND_NOTE = {
    "replayed": "'replayed': the step's dependency graph replayed with the fix applied.",
    "upper-bound": "'upper-bound': the rule's interval estimate, an upper bound on the saving.",
}


def _by_code(model: Report) -> dict[str, FindingSection]:
    out: dict[str, FindingSection] = {}
    for f in findings_of(model):
        prev = out.get(f.code)
        if prev is None or f.saving_us_per_step > prev.saving_us_per_step:
            out[f.code] = f
    return out


@dataclass(frozen=True)
class Pooled:
    """A rule's finding over one side's runs: ``top`` the run's finding with the largest saving (name, severity),
    ``saving_us`` the mean saving per step over the runs that ran the rule (0 where it passed), ``kind``
    ``replayed`` when every run's saving was replayed, ``fired`` / ``runs`` the runs it fired in / all runs."""

    top: FindingSection
    saving_us: float
    kind: str
    fired: int
    runs: int


def _kind(f: FindingSection) -> str:
    return "replayed" if is_replay_method(f.saving_method) else "upper-bound"


def pooled(models: list[Report]) -> dict[str, Pooled]:
    """Each code that fired in any of a side's runs, pooled over the runs (one run: its finding as reported)."""
    per_run = [_by_code(m) for m in models]
    out = {}
    for code in sorted({c for found in per_run for c in found}):
        hits = [found[code] for found in per_run if code in found]
        passed = sum(code not in found and code in (passed_of(m) or []) for m, found in zip(models, per_run))
        saving = sum(float(h.saving_us_per_step) for h in hits) / (len(hits) + passed)
        kind = "replayed" if all(_kind(h) == "replayed" for h in hits) else "upper-bound"
        top = max(hits, key=lambda h: h.saving_us_per_step)
        out[code] = Pooled(top, saving, kind, len(hits), len(models))
    return out


def _absent(code: str, models: list[Report], side: str, status: str) -> tuple[str, str]:
    """``status`` when the rule ran on ``side`` (in at least one of its runs) and never fired, else
    ``not-checked`` with the reason."""
    checked = sum(code in (passed_of(m) or []) for m in models)
    skipped = [s.reason for m in models for s in skipped_of(m) if s.code == code]
    if checked == 0:
        if skipped:
            many = f" in {len(skipped)} of its {len(models)} runs" if len(models) > 1 else ""
            return "not-checked", f"{side} skipped the check{many}: {skipped[0]}"
        return "not-checked", f"{side} did not run the check"
    if checked < len(models):
        return status, f"checked in {checked} of {len(models)} {side} runs"
    return status, ""


def _fired_note(p: Pooled | None, side: str) -> str:
    return f"fired in {p.fired} of {p.runs} {side} runs" if p is not None and 1 < p.runs != p.fired else ""


def compare_findings(before: list[Report], after: list[Report]) -> list[FindingDelta]:
    """One row per code that fired on either side (in any of its runs): persisting first, then resolved, new,
    not-checked. Savings are pooled over each side's runs (:func:`pooled`)."""
    fb, fa = pooled(before), pooled(after)
    rows = []
    for code in sorted(set(fb) | set(fa)):
        b, a = fb.get(code), fa.get(code)
        if b and a:
            status, note = "persisting", ""
        elif b:
            status, note = _absent(code, after, "AFTER", "resolved")
        else:
            status, note = _absent(code, before, "BEFORE", "new")
        f = b or a
        assert f is not None
        notes = [n for n in (_fired_note(b, "BEFORE"), _fired_note(a, "AFTER"), note) if n]
        rows.append(
            FindingDelta(
                code=code,
                name=f.top.name,
                status=status,
                saving_before_us=b.saving_us if b else None,
                saving_after_us=a.saving_us if a else None,
                severity_before=b.top.severity if b else None,
                severity_after=a.top.severity if a else None,
                note="; ".join(notes),
                runs_fired=Pair(b.fired if b else 0, a.fired if a else 0),
            )
        )
    order = {"persisting": 0, "resolved": 1, "new": 2, "not-checked": 3}
    rows.sort(key=lambda r: (order[r.status], -max(r.saving_before_us or 0.0, r.saving_after_us or 0.0), r.code))
    return rows


def shrunk(rows: list[FindingDelta]) -> list[Shrunk]:
    """Persisting findings whose saving shrank (µs/step), largest shrink first."""
    out = [
        Shrunk(
            code=r.code,
            name=r.name,
            saving_before_us=r.saving_before_us,
            saving_after_us=r.saving_after_us,
            shrink_us=r.saving_before_us - r.saving_after_us,
        )
        for r in rows
        if r.status == "persisting"
        and r.saving_before_us is not None
        and r.saving_after_us is not None
        and r.saving_after_us < r.saving_before_us
    ]
    return sorted(out, key=lambda x: (-x.shrink_us, x.code))


def _fix_all_us(before: list[Report], codes: list[str]) -> float | None:
    """BEFORE's replayed saving (µs/step) of exactly ``codes`` fixed together: each run's one-rank
    ``replay.fix_all`` (recorded − replayed mean step), averaged over the runs; None when a run has no such
    replay (several ranks, no replay, or its fix-all covers other findings, or fewer, too)."""
    savings = []
    for model in before:
        if len(model.ranks) != 1:
            return None
        replay = model.ranks[0].replay
        fix = None if replay is None else replay.fix_all
        if not isinstance(fix, FixAllSection) or sorted(fix.codes) != sorted(codes):
            return None
        savings.append(float(fix.recorded_mean_step_us - fix.replayed_mean_step_us))
    return sum(savings) / len(savings) if savings else None


def predictions(
    before: list[Report],
    rows: list[FindingDelta],
    measured_us: float,
    measured_ci_us: list[float] | None,
    step_us: float | None = None,
) -> tuple[Prediction | None, str]:
    """The resolved BEFORE findings' predicted saving, together, against the measured change (None when no
    finding with a positive saving was resolved), and the note on how to read it. Several BEFORE runs: each
    finding's saving pooled over them (:func:`pooled`), a replay of the fixes together averaged over them.

    ``measured_us``: mean step before − after (µs, positive = faster); ``measured_ci_us``: its 95% interval;
    ``step_us``: BEFORE's mean step: an interval wider than it tests no prediction (``within_ci95`` None; two
    noisy runs a side gave −73,668 to +178 ms on a 180 ms step, and "yes").
    """
    fb = pooled(before)
    parts = []
    for r in rows:
        if r.status == "resolved" and r.code in fb and fb[r.code].saving_us > 0:
            p = fb[r.code]
            parts.append(PredictedPart(code=r.code, name=r.name, predicted_us=p.saving_us, predicted_kind=p.kind))
    tail = [SHRUNK_NOTE] if shrunk(rows) else []
    if not parts:
        return None, " ".join([NONE_NOTE, *tail])
    parts.sort(key=lambda p: (-p.predicted_us, p.code))
    codes = [p.code for p in parts]
    together = _fix_all_us(before, codes) if len(parts) > 1 else None
    if len(parts) == 1:
        predicted, kind = parts[0].predicted_us, parts[0].predicted_kind
    elif together is not None:
        predicted, kind = together, "replayed-together"
    else:
        predicted, kind = sum(p.predicted_us for p in parts), "sum"
    testable = measured_ci_us is not None and (step_us is None or measured_ci_us[1] - measured_ci_us[0] <= step_us)
    within = (measured_ci_us[0] <= predicted <= measured_ci_us[1]) if testable and measured_ci_us else None
    error = measured_us - predicted
    pred = Prediction(
        codes=codes,
        parts=parts,
        predicted_us=predicted,
        predicted_kind=kind,
        measured_us=measured_us,
        measured_ci95_us=measured_ci_us,
        within_ci95=within,
        error_us=error,
        error_pct=100.0 * error / predicted,
        shared=len(parts) > 1,
    )
    notes = [MEASURED_NOTE]
    if pred.shared:
        notes.append(SHARED_NOTE.format(n=len(codes), codes=", ".join(codes), how=HOW[kind]))
    notes += [KIND_NOTE[k] for k in ("replayed", "upper-bound") if any(p.predicted_kind == k for p in parts)]
    return pred, " ".join(notes + tail)
