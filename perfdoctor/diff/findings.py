"""Findings on both sides (resolved / new / persisting) and predicted vs measured savings.

A rule's finding is matched by its code; on a multi-rank job each report already merges a rule's hits into one
finding. "Resolved" needs evidence: the rule ran on AFTER and found nothing (``passed_checks``). A finding whose
rule AFTER skipped (it lacked the data) is ``not-checked``, never resolved.

Predicted vs measured: for each BEFORE finding that was resolved or whose saving shrank, the predicted saving is
saving before − saving after (µs per step); the measured change is the verdict's mean step before − after (µs,
positive = faster), which every change between the two runs shares. A saving is ``replayed`` when its rule computed
it by replaying the step's dependency graph with the fix applied (its ``saving_method`` starts with "replay",
:meth:`perfdoctor.checks.context.RankContext.replayed_saving`), else ``upper-bound`` (an interval rule's estimate).
"""

from __future__ import annotations

from perfdoctor.diff.model import FindingDelta, Prediction
from perfdoctor.diff.sides import findings_of, passed_of, skipped_of
from perfdoctor.model import Report
from perfdoctor.model.report import FindingSection

REPLAYED_PREFIX = "replay"  # saving_method of a replayed saving: "replay of the step's dependency graph ..."
UPPER_BOUND_NOTE = ("Predicted savings are the rules' upper-bound estimates; the measured change is the whole step's, "
                    "shared by every change between the two runs.")
REPLAYED_NOTE = ("Predicted savings marked 'replayed' come from replaying the step's dependency graph with the fix "
                 "applied, the others are upper-bound estimates; the measured change is the whole step's, shared by "
                 "every change between the two runs (a finding that shrank without its own fix shares it too).")


def _by_code(model: Report) -> dict[str, FindingSection]:
    out: dict[str, FindingSection] = {}
    for f in findings_of(model):
        prev = out.get(f.code)
        if prev is None or f.saving_us_per_step > prev.saving_us_per_step:
            out[f.code] = f
    return out


def _saving(f: FindingSection) -> tuple[float, str]:
    """(µs per step, "replayed" | "upper-bound")."""
    return float(f.saving_us_per_step), "replayed" if f.saving_method.startswith(REPLAYED_PREFIX) else "upper-bound"


def _absent(code: str, model: Report, side: str, status: str) -> tuple[str, str]:
    """``status`` when the rule ran on ``side`` and found nothing, else ``not-checked`` with the reason."""
    skipped = {s.code: s.reason for s in skipped_of(model)}
    if code in skipped:
        return "not-checked", f"{side} skipped the check: {skipped[code]}"
    if code not in (passed_of(model) or []):
        return "not-checked", f"{side} did not run the check"
    return status, ""


def compare_findings(before: Report, after: Report) -> list[FindingDelta]:
    """One row per code that fired on either side: persisting first, then resolved, new, not-checked."""
    fb, fa = _by_code(before), _by_code(after)
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
        rows.append(FindingDelta(code=code, name=f.name, status=status,
                                 saving_before_us=_saving(b)[0] if b else None,
                                 saving_after_us=_saving(a)[0] if a else None,
                                 severity_before=b.severity if b else None,
                                 severity_after=a.severity if a else None, note=note))
    order = {"persisting": 0, "resolved": 1, "new": 2, "not-checked": 3}
    rows.sort(key=lambda r: (order[r.status], -max(r.saving_before_us or 0.0, r.saving_after_us or 0.0), r.code))
    return rows


def predictions(before: Report, after: Report, rows: list[FindingDelta], measured_us: float,
                measured_ci_us: list[float] | None) -> tuple[list[Prediction], str]:
    """Predicted vs measured rows for resolved or shrunk BEFORE findings, and the note on how to read them."""
    fb, fa = _by_code(before), _by_code(after)
    out = []
    for r in rows:
        if r.status not in ("resolved", "persisting") or r.code not in fb:
            continue
        saving_b, kind = _saving(fb[r.code])
        saving_a = _saving(fa[r.code])[0] if r.code in fa else 0.0
        predicted = saving_b - saving_a
        if predicted <= 0:
            continue
        error = measured_us - predicted
        status = "resolved" if r.status == "resolved" else "shrank"
        out.append(Prediction(code=r.code, name=r.name, status=status, predicted_us=predicted,
                              predicted_kind=kind, measured_us=measured_us, measured_ci95_us=measured_ci_us,
                              error_us=error, error_pct=100.0 * error / predicted))
    out.sort(key=lambda p: (p.status != "resolved", -p.predicted_us, p.code))
    note = REPLAYED_NOTE if any(p.predicted_kind == "replayed" for p in out) else UPPER_BOUND_NOTE
    return out, note
