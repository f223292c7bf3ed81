"""One text builder: every sentence of a finding, and the one place that reads one.

A finding speaks in three layers (STYLE.md): a *headline* and a *message* (its rule's TOML templates filled from
typed fields: :func:`fill`), *evidence* (measured values, as data) and a *method* (how the saving was computed:
:func:`replayed_method`, with the clauses the engine adds: :func:`method_with`). The rule's words live in
``rules/*.toml``; the engine's and the replay's words (the rank a job's numbers come from, the saving after the
other fixes, why a fix is off the plan, the fix-all note, a saving's parts) live here. Code elsewhere passes
typed values in and reads typed values back: nothing outside this module appends to, searches or re-splits a
message, headline or method (``tests/test_text_builder.py`` holds the package to it).

Every number is µs in and ms out (``/ 1000``, two decimals) unless a name says otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from perfdoctor.errors import PerfDoctorError

# how a replayed saving's method begins (:func:`replayed_method`); a replay that does not reproduce the recording
# says :data:`UPPER_BOUND` in its method
REPLAY_METHOD = "replay of the step's dependency graph"
UPPER_BOUND = "an upper bound"


def is_replay_method(method: str) -> bool:
    """True when ``method`` is a replay's (it begins with :data:`REPLAY_METHOD`), point estimate or not."""
    return method.startswith(REPLAY_METHOD)


def is_replayed(method: str) -> bool:
    """True when a saving with this method is the replay's point estimate (printed "about" / "≈"), False for an
    upper bound (printed "up to" / "≤"): a heuristic, or a replay that did not reproduce the recording."""
    return is_replay_method(method) and UPPER_BOUND not in method


# -- the rule's templates ---------------------------------------------------------


def template_fields(
    values: Mapping[str, object], extra: Mapping[str, object], saving_us: float | None, pct: float | None
) -> dict[str, object]:
    """The fields a rule's message and headline templates are filled from: the evidence ``values``, the check's
    ``extra`` fields, and for an estimated saving (``saving_us`` µs, ``pct`` % of the report's denominator)
    ``saving_ms``, ``saving_pct`` and, where the message says "from A ms to B ms" (``recorded_ms``),
    ``replayed_ms``: the recorded step less the saving alone its parts add up to."""
    fields: dict[str, object] = {**values, **extra}
    if saving_us is not None:
        fields.setdefault("saving_ms", saving_us / 1000.0)
        fields.setdefault("saving_pct", pct)
        recorded = fields.get("recorded_ms")
        if isinstance(recorded, int | float):
            fields.setdefault("replayed_ms", recorded - saving_us / 1000.0)
    return fields


def fill(template: str, fields: Mapping[str, object], path: str, code: str) -> str:
    """``template`` (a rule's ``message`` or ``headline``: a ``str.format`` template) filled from ``fields``.

    Raises:
        PerfDoctorError: a placeholder ``fields`` lacks, or a value its format spec does not fit (names the rule
            file ``path`` and the fields there are).
    """
    try:
        return template.format_map(fields)
    except (KeyError, ValueError, IndexError, AttributeError, TypeError) as exc:
        raise PerfDoctorError(
            f"{path}: message or headline template of {code} cannot be filled "
            f"({type(exc).__name__}: {exc}); fields available: {', '.join(sorted(fields))}"
        ) from None


# -- the engine's words around a rule's message -------------------------------------

LIST_RANKS_UP_TO = 12  # a finding lists the ranks it fired on up to this many, else counts them
WHOLE_TRACE_NOTE = " (no step markers: 'per step' means over the whole trace window)"


@dataclass(frozen=True)
class Where:
    """Where a finding's numbers come from on a job: ``rank`` (None for a job-level finding), the ranks it
    ``fired`` on, out of ``n_ranks``."""

    rank: int | None
    fired: Sequence[int]
    n_ranks: int

    def prefix(self) -> str:
        """ "rank R: " before the message and headline on a multi-rank job with a speaking rank, else ""."""
        return f"rank {self.rank}: " if self.n_ranks >= 2 and self.rank is not None else ""

    def suffix(self) -> str:
        """ " (fires on ranks 0, 3 of 8)" after the message on a multi-rank job, else ""."""
        n, fired = self.n_ranks, list(self.fired)
        if n < 2:
            return ""
        on = (
            f"all {n} ranks"
            if len(fired) == n
            else (f"rank{'s' if len(fired) > 1 else ''} {', '.join(str(r) for r in fired)} of {n}")
        )
        if LIST_RANKS_UP_TO < len(fired) < n:  # a big job: count them (the evidence lists them)
            on = f"{len(fired)} of {n} ranks"
        return f" (fires on {on})"


@dataclass(frozen=True)
class After:
    """A saving stated on top of other fixes: ``alone_us`` (µs) alone, ``after_us`` (µs, ``pct`` % of the
    report's denominator) once ``codes`` are fixed."""

    alone_us: float
    after_us: float
    codes: Sequence[str]
    pct: float


def _fixed(codes: Sequence[str]) -> str:
    """ "PD101 is" / "PD101, PD103 are": the subject of "... fixed"."""
    return ", ".join(codes) + (" is" if len(codes) == 1 else " are")


def after_text(after: After) -> str:
    """ "saves 2.70 ms alone; 19.00 ms (10.7%) once PD101, PD103, PD205 are fixed (replayed together)", or "saves
    15.90 ms alone; no further saving once PD101, PD103 are fixed (replayed together)" under 0.005 ms."""
    then = f"{after.after_us / 1000:,.2f} ms ({after.pct:.1f}%)" if after.after_us >= 5.0 else "no further saving"
    return f"saves {after.alone_us / 1000:,.2f} ms alone; {then} once {_fixed(after.codes)} fixed (replayed together)"


def finding_message(body: str, where: Where, after: After | None = None, whole_trace: bool = False) -> str:
    """A finding's message: the rule's filled ``body``, "rank R: " before it on a job, its saving after the fixes
    above it (``after``), the ranks it fires on, and what "per step" means on a trace without step markers
    (``whole_trace``)."""
    tail = "; " + after_text(after) if after is not None else ""
    return where.prefix() + body + tail + where.suffix() + (WHOLE_TRACE_NOTE if whole_trace else "")


def finding_headline(body: str, where: Where) -> str:
    """A finding's headline: the rule's filled ``body``, "rank R: " before it on a job."""
    return where.prefix() + body


# -- why a replayed saving is off the fix plan ---------------------------------------


def plan_note(saving_us: float, after_codes: Sequence[str]) -> str:
    """Why a replayed saving is off the fix plan: "no further saving once PD101, PD103 are fixed", or "only
    1.20 ms more once PD101 is fixed" (``saving_us``: its saving on top of ``after_codes``, µs)."""
    more = "no further saving" if saving_us < 5.0 else f"only {saving_us / 1000:,.2f} ms more"
    return f"{more} once {_fixed(after_codes)} fixed"


def off_pace_note(pace: int | None) -> str:
    """Why a rank's fix saves a job nothing: it fires only on ranks other than ``pace``, the job's longest."""
    return f"saves the job nothing: rank {pace} sets the job's step and this does not fire there"


JOB_PLAN_NOTHING = "saves the job nothing: a rank it does not speed up still sets the job's step"


# -- a saving's method -----------------------------------------------------------------


def method_with(method: str, *clauses: str) -> str:
    """``method`` followed by the ``clauses`` (each begins with its own separator: "; ...")."""
    return method + "".join(clauses)


def replayed_method(
    assumption: str,
    source: str,
    what: str,
    n_steps: int,
    steps: str,
    step_text: str,
    peers: str | None,
    fallback: str | None,
) -> str:
    """The method of a replayed saving: the fix's ``assumption`` and ``source``, ``what`` is subtracted, over how
    many analysed steps (``n_steps``, listed as ``steps``), the step it is taken from (``step_text``), how the
    collectives wait for their peers (``peers``, None on one rank) and, when the replay does not reproduce the
    recording, why (``fallback``: the saving is then :data:`UPPER_BOUND`)."""
    method = (
        f"{REPLAY_METHOD} with the fix applied ({assumption}; source: {source}): {what}, mean over {n_steps} "
        f"analysed step(s) ({steps})"
    )
    method += "; " + step_text
    if peers is not None:
        method += f"; {peers}"
    if fallback:
        method += f"; {UPPER_BOUND}: {fallback}"
    return method


def replayed_what(unprofiled: bool, after: str | None = None) -> str:
    """What a replayed saving subtracts: recorded − replayed (``unprofiled``: replayed without − with the fix, as
    the unprofiled step is no recording), or on top of another fix described by ``after`` (None: none)."""
    if after is not None:
        return f"the step replayed {after} − replayed with this fix as well"
    return "replayed step time without − with the fix" if unprofiled else "recorded − replayed step time"


def off_pace_method(method: str, rank: int | None, pace: int | None, own_us: float) -> str:
    """A rank's ``method`` stated for the job, where it fires only on ``rank`` (saving ``own_us`` µs there) and
    not on ``pace``, the rank that sets the job's step: the job's saving is 0."""
    return (
        f"{method}; on rank {rank} it saves {own_us / 1000:,.2f} ms of that rank's step, but the job's step is "
        f"rank {pace}'s (its longest mean step), where it does not fire: the job's saving is 0 (assumed: the ranks "
        "move in lock-step, so the job's step is its longest rank's)"
    )


JOB_PLAN_CLAUSE = (
    "; for the job: its step is its longest rank's, each rank's step replayed with the fixes above and this one "
    "that fire on it (its own plan's savings), its collectives waiting for its peers as recorded"
)
JOINT_PLAN_CLAUSE = (
    "; for the job, with the fixes above it: every rank's dependency graph replayed jointly with its own fixes, "
    "each collective ending when the last rank has arrived plus the transfer (the job's step is its longest "
    "rank's)"
)


def restated_clause(saving_us: float, step_words: str, step_us: float, target_words: str, target_us: float) -> str:
    """The method's clause of a saving measured as ``saving_us`` of another step (``step_us``, ``step_words``)
    and stated as the same share of ``target_us`` (``target_words``)."""
    share = 100.0 * saving_us / step_us
    return (
        f"; measured as {saving_us / 1000:,.2f} ms of {step_words or 'another step'} "
        f"({step_us / 1000:,.2f} ms), stated as the same share ({share:.1f}%) of {target_words} "
        f"({target_us / 1000:,.2f} ms)"
    )


# -- a replayed saving's parts (perfdoctor.replay.decompose) -----------------------------

# how a part is named in a message (cause keys of perfdoctor.vocab.IdleCause)
IDLE_WORDS = {
    "host_launch_bound": "launch idle",
    "python": "Python idle (host outside ops)",
    "synchronization": "sync idle",
    "dataloader": "DataLoader idle",
    "other": "other idle",
}
WORK_WORDS = {"memcpy": "copies", "communication": "collectives", "memset": "memsets"}
SHOWN_US = 5.0  # parts under 0.005 ms are not written (the messages' precision)


def saving_parts_text(
    idle_us: Mapping[str, float],
    busy_us: float,
    work_us: float,
    error_us: float,
    overlapping: Sequence[str],
    lead: tuple[str, ...] = (),
) -> str:
    """A replayed saving's parts (:class:`perfdoctor.replay.decompose.SavingParts`, µs) as a sum in ms, the
    causes in ``lead`` first and then by size: "11.41 ms launch idle (…) + 4.35 ms Python idle (…)"; a negative
    part reads "− x ms …", the replay's error "± replay error"."""
    items = [(c, v) for c, v in idle_us.items() if abs(v) >= SHOWN_US]
    items.sort(key=lambda cv: (cv[0] not in lead, lead.index(cv[0]) if cv[0] in lead else 0, -abs(cv[1])))
    words = [(v, IDLE_WORDS.get(c, f"{c} idle")) for c, v in items]
    if abs(work_us) >= SHOWN_US:
        words.append((work_us, "of device work gone (fewer or shorter activities)"))
    overlap_us = busy_us - work_us
    if abs(overlap_us) >= SHOWN_US:
        who = " and ".join(WORK_WORDS.get(c, f"{c} kernels") for c in overlapping[:1])
        what = (
            f"from {who or 'device work'} overlapping other device work"
            if overlap_us > 0
            else "of device work overlapping less"
        )
        words.append((overlap_us, what))
    if abs(error_us) >= SHOWN_US:
        words.append((error_us, "the replay's own error (recorded − replayed step)"))
    out = ""
    for i, (v, w) in enumerate(words):
        sign = ("− " if v < 0 else "") if i == 0 else (" − " if v < 0 else " + ")
        out += f"{sign}{abs(v) / 1000:,.2f} ms {w}"
    return out or "0.00 ms"


# -- the findings note: the fixes together ----------------------------------------------

MAX_RANKS_LISTED = 8  # above this many ranks the findings note names the job's figure only


@dataclass(frozen=True)
class FixAll:
    """A rank's fix-all replay: the ``codes`` fixed together take its mean step from ``recorded_us`` to
    ``replayed_us`` (µs); ``rank`` None on a one-rank report."""

    rank: int | None
    codes: Sequence[str]
    recorded_us: float
    replayed_us: float


def fix_all_sentence(fix: FixAll) -> str:
    """ "rank 0: fixing the 2 finding(s) with a replayed saving together (PD101, PD103) would take the mean step
    from A ms to B ms (replayed)"."""
    who = f"rank {fix.rank}: " if fix.rank is not None else ""
    return (
        f"{who}fixing the {len(fix.codes)} finding(s) with a replayed saving together "
        f"({', '.join(fix.codes)}) "
        f"would take the mean step from {fix.recorded_us / 1000:,.2f} ms to "
        f"{fix.replayed_us / 1000:,.2f} ms (replayed)"
    )


def fix_all_sentences(fixes: Sequence[FixAll]) -> list[str]:
    """Each rank's :func:`fix_all_sentence`; past four ranks, three of them and how many more (1024 ranks
    printed 1,469 lines)."""
    parts = [fix_all_sentence(f) for f in fixes]
    if len(parts) > 4:
        parts = parts[:3] + [f"… and {len(parts) - 3} more ranks (ranks[].replay.fix_all in the JSON report)"]
    return parts


def sentences(parts: Sequence[str]) -> str:
    """``parts`` joined as one sentence ("a; b."), "" without any."""
    return ("; ".join(parts) + ".") if parts else ""


def job_fix_all_note(
    codes: Sequence[str], recorded_us: float, replayed_us: float, slowest: int, why: str, parts: Sequence[str]
) -> str:
    """The findings note of a job whose ranks cannot be replayed jointly (``why``): each rank fixed alone with
    its peers unchanged, the job's step from ``recorded_us`` to ``replayed_us`` (µs; rank ``slowest`` then the
    longest), then each rank's sentence (``parts``)."""
    if len(parts) > MAX_RANKS_LISTED:
        parts = [f"{len(parts)} ranks, listed in the JSON report (ranks[].replay.fix_all)"]
    return (
        f"fixing the {len(codes)} finding(s) with a replayed saving ({', '.join(codes)}) on every rank would take "
        f"the job's mean step, set by its longest rank step, from {recorded_us / 1000:,.2f} ms to "
        f"{replayed_us / 1000:,.2f} ms (rank {slowest} is then the longest; replayed with each rank fixed alone, its "
        f"collectives waiting for the unchanged peers, as the ranks cannot be replayed jointly: {why}). "
        "Per rank: " + "; ".join(parts) + "."
    )


def joint_note(
    codes: Sequence[str],
    before_us: float,
    after_us: float,
    last: int,
    recorded_us: Mapping[int, float],
    replayed_us: Mapping[int, float],
) -> str:
    """The findings note's job figure from the ranks replayed jointly with their fixes (``codes``): the job's step
    from ``before_us`` to ``after_us`` (µs; rank ``last`` then the longest), and each rank's step recorded and
    replayed (``recorded_us``, ``replayed_us`` by rank) up to :data:`MAX_RANKS_LISTED` ranks."""
    per = [f"rank {r} {recorded_us[r] / 1000:,.2f} → {replayed_us[r] / 1000:,.2f} ms" for r in sorted(recorded_us)]
    listed = (
        " Per rank, replayed jointly: " + "; ".join(per) + " (each rank fixed alone, its peers unchanged: "
        "ranks[].replay.fix_all in the JSON report)."
        if len(per) <= MAX_RANKS_LISTED
        else ""
    )
    return (
        f"fixing the {len(codes)} finding(s) with a replayed saving ({', '.join(codes)}) on every rank "
        f"would take the job's mean step, set by its longest rank step, from {before_us / 1000:,.2f} ms to "
        f"{after_us / 1000:,.2f} ms (rank {last} is then the longest; replayed jointly: every rank's dependency graph "
        "with its own fixes at once, each collective ending when the last rank has arrived plus the transfer, the "
        "shortest recorded copy)." + listed
    )


def ignored_note(gone: Sequence[str], option: str) -> str:
    """The one sentence saying which fixes the plan assumes unfixed (``gone``, named by ``option``), or ""."""
    if not gone:
        return ""
    return (
        f"{_fixed(gone)} assumed unfixed ({option}): not checked, and the fix plan is computed without "
        f"{'its fix' if len(gone) == 1 else 'their fixes'}."
    )


# -- reading a finding's text back (reports written without a field) ------------------------


def says(text: str, value: str) -> bool:
    """Whether the finding's ``text`` already says ``value`` (an evidence word: "ops", a reason)."""
    return bool(value) and value in text


def first_clause(message: str) -> str:
    """A message's first clause (before "; " and " ("): the headline of a report written without one."""
    return message.split("; ")[0].split(" (")[0]
