"""Each replayed saving alone and on top of the fixes of the higher-ranked findings ("after fixing X, this saves Y").

Host time can hide device work: a fix that shortens kernels saves little while the host sets the step's pace and
much once the host-side fixes are in (ResNet50 FP32 on a V100, nw0: faster GEMMs save 2.7 ms replayed alone, 19.0 ms
on top of prefetched batches, CUDA graphs and a fused optimizer). So, per rank with a replay, the engine orders the
hits with a replayed saving by their saving alone (the report's ranking), and gives each its saving on top of the
fixes of the hits ranked above it that fire: the step replayed with theirs − replayed with theirs and its own, both
the mean over the analysed steps (:func:`after_savings`). A hit whose check leaves its threshold to the engine
(:attr:`perfdoctor.findings.Hit.min_saving_pct`) fires when either saving reaches the threshold as a share of the
report's one denominator (:func:`passes`), so a finding is never hidden below its threshold when its saving after
the others passes it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from perfdoctor.findings import Hit

# a finding states its saving after the others when it differs from its saving alone by at least this share of the
# larger of the two and :data:`AFTER_SHOWN_MIN_US` (smaller differences are within the replay's own error)
AFTER_SHOWN_FRACTION = 0.25
AFTER_SHOWN_MIN_US = 100.0


def passes(hit: Hit, denominator_us: float) -> bool:
    """Whether ``hit`` fires: its saving alone or after the higher-ranked fixes is at least its
    ``min_saving_pct`` of ``denominator_us`` (µs, the report's one denominator); True when the check judged
    its threshold itself (``min_saving_pct`` None)."""
    est = hit.estimate
    if hit.min_saving_pct is None or est is None:
        return True
    best_us = max(est.saving_us, est.after_us or 0.0)
    return denominator_us > 0 and 100.0 * best_us / denominator_us >= hit.min_saving_pct


def stated_after(hit: Hit, alone_pct: float) -> bool:
    """Whether ``hit`` is stated with its saving after the higher-ranked fixes: it fires on that saving only (its
    saving alone, ``alone_pct`` % of the report's denominator, is under its ``min_saving_pct``). Its headline, share
    and severity are then all that one number (ResNet50 FP32 on a V100: PD203's GEMM fix saves 1.6% alone, 10.7% once
    PD101, PD103 and PD205 are fixed)."""
    est = hit.estimate
    return (
        est is not None
        and est.after_us is not None
        and hit.min_saving_pct is not None
        and alone_pct < hit.min_saving_pct
    )


def gate(outcome: Any, denominator_us: float) -> Any:
    """``outcome`` (:class:`perfdoctor.checks.context.Outcome`), or a pass with its metrics when its hit does not
    fire (:func:`passes`)."""
    hit = outcome.hit
    if hit is None or passes(hit, denominator_us):
        return outcome
    return dataclasses.replace(outcome, hit=None)


def after_savings(rr: Any, hits: dict[str, Hit], denominator_us: float) -> list[str]:
    """Fill ``estimate.after_us`` / ``after_codes`` of the replayed hits in ``hits`` (code -> hit, in place) and
    return the codes that fire (:func:`passes`) with a positive saving, by rank.

    ``rr``: the rank's :class:`perfdoctor.replay.rank.RankReplay`, whose ``whatifs`` hold the transformation each
    check replayed its saving with; ``denominator_us``: the report's one denominator (µs). Ranked by saving alone
    (descending, then code, as :func:`perfdoctor.findings.rank_findings`); a hit's after-saving is on top of the
    hits above it that fire, replayed together (:meth:`perfdoctor.replay.rank.RankReplay.fix_all`), never below 0.
    """
    ranked = sorted(
        ((c, h) for c, h in hits.items() if h.estimate is not None and c in rr.whatifs),
        key=lambda ch: (-ch[1].estimate.saving_us if ch[1].estimate else 0.0, ch[0]),
    )
    fired: list[str] = []
    base_us: float | None = None  # mean replayed step with the fired fixes together
    for code, hit in ranked:
        est = hit.estimate
        assert est is not None
        if fired and base_us is not None:
            both = rr.fix_all([*fired, code])
            if both is not None:
                est = dataclasses.replace(
                    est, after_us=max(base_us - both[1], 0.0), after_codes=tuple(fired), after_from_us=base_us
                )
                hit.estimate = est
        if passes(hit, denominator_us) and max(est.saving_us, est.after_us or 0.0) > 0:
            fired.append(code)
            both = rr.fix_all(fired)
            base_us = None if both is None else both[1]
    return fired


def after_shown(saving_us: float, after_us: float | None, after_codes: tuple[str, ...] | list[str]) -> bool:
    """Whether a finding states its saving after the others: it has one, and it differs from the saving alone by
    at least :data:`AFTER_SHOWN_FRACTION` of the larger and :data:`AFTER_SHOWN_MIN_US`."""
    if after_us is None or not after_codes:
        return False
    diff = abs(after_us - saving_us)
    return diff >= AFTER_SHOWN_MIN_US and diff >= AFTER_SHOWN_FRACTION * max(after_us, saving_us)


def after_text(saving_us: float, after_us: float, after_codes: tuple[str, ...] | list[str], pct: float) -> str:
    """ "saves 2.70 ms now; 19.00 ms (10.7%) once PD101, PD103, PD205 are fixed (replayed together)"."""
    codes = list(after_codes)
    which = ", ".join(codes) + (" is" if len(codes) == 1 else " are")
    return (
        f"saves {saving_us / 1000:,.2f} ms now; {after_us / 1000:,.2f} ms ({pct:.1f}%) once {which} fixed "
        "(replayed together)"
    )
