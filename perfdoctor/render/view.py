"""Formatting shared by the HTML and Markdown renderers.

Reads the typed report (:class:`perfdoctor.model.Report`, see docs/report-schema.md)
and turns its numbers into labelled, unit-bearing strings. It computes no new
metric: the only arithmetic is per-step means (a total ÷ the number of steps)
and shares of the step time, both stated in the definitions below.
"""

from __future__ import annotations

from typing import NotRequired, TypedDict

from msgspec import UNSET

from perfdoctor.findings import FINDINGS_NOTE
from perfdoctor.model import Report
from perfdoctor.model.report import (
    CollectivesFree,
    DeviceSection,
    Distribution,
    EventValue,
    EvidenceValue,
    FindingSection,
    RankSection,
    RunSection,
    StepBreakdown,
)
from perfdoctor.text import first_clause, says
from perfdoctor.vocab import (
    GPU_IDLE_CAUSES,
    GPU_PRIORITY,
    Category,
    IdleCause,
    category_label,
    explaining_code,
    idle_label,
)

CAT_LABELS = {c.value: c.label for c in Category}
IDLE_LABELS = {c.value: c.label for c in IdleCause}

# Generated from the vocabulary (perfdoctor/vocab.py) and the replay's attribution (perfdoctor/replay/attribution.py)
# so the definitions cannot drift from what the analysis does.
_IDLE_TEXT = (
    "Step time − busy, split by what held up the replay's critical path (the chain of host work, launches and "
    "device work that bounds the step, walked back from its end; perfdoctor/replay/attribution.py) at each idle "
    "µs: "
    + "; ".join(f"{IdleCause(c).label}: {IdleCause(c).definition}" for c in GPU_IDLE_CAUSES)
    + ". They add up to idle."
)
_CATEGORY_TEXT = (
    "Busy time split exclusively by priority "
    + " > ".join(Category(c).label for c in GPU_PRIORITY)
    + ", so the categories add up to busy. Per step = total over analysed steps ÷ number of steps."
)

DEFINITIONS: list[tuple[str, str]] = [
    (
        "step window",
        "From a ProfilerStep#N annotation's start (or the previous window's end, if later) to its end; the last "
        "GPU work launched inside step N (joined by correlation id) extends it. As the TensorBoard profiler "
        "plugin cuts steps; windows never overlap.",
    ),
    ("step time", "end − start of the step window, in ms. Median, p10/p90 and min/max are over the analysed steps."),
    (
        "busy",
        "Union over all streams of kernels, memcpys and memsets inside the step window (overlapping streams "
        "count once).",
    ),
    (
        "device utilization",
        "numerator: busy time summed over analysed steps; denominator: step time summed over "
        "the same steps. For CPU-only traces: time inside any host op ÷ step time.",
    ),
    ("category time", _CATEGORY_TEXT),
    ("share", "numerator: that row's time; denominator: step time (both summed over analysed steps)."),
    (
        "communication total / overlapped / exposed",
        "total: union of communication kernels; overlapped: the part "
        "running while any compute kernel runs; exposed: total − overlapped. Overlap % = overlapped ÷ total.",
    ),
    ("idle causes", _IDLE_TEXT),
    (
        "top kernels",
        "GPU kernels, memcpys and memsets starting inside the analysed steps, grouped by name. "
        "share: that name's summed duration ÷ the summed duration of all GPU activity (overlapping streams count "
        "twice here).",
    ),
    (
        "top CPU ops",
        "Host ops starting inside the analysed steps, grouped by name; inclusive durations, so a "
        "parent and its children both count.",
    ),
    ("rank spread", "(longest median step time of a rank − shortest) ÷ shortest, in %."),
    (
        "memory peak",
        "Largest total_allocated / total_reserved seen in the trace's [memory] events for that "
        "device (needs profile_memory=True); capacity from deviceProperties.totalGlobalMem.",
    ),
    (
        "MFU",
        "Model FLOPs per step ÷ median step time (achieved FLOP/s), ÷ the device's dense peak FLOP/s at the "
        "math dtype; the FLOP source (FlopCounter, op sum, formula) and the peak's source are shown with the value.",
    ),
    (
        "roofline",
        "Per op group: arithmetic intensity = FLOPs ÷ bytes moved; attainable = min(peak, intensity × "
        "memory bandwidth); % of attainable = achieved FLOP/s ÷ attainable.",
    ),
    (
        "estimated saving",
        "Each finding's own estimate of the step time it would remove, in ms per step, with the "
        "method the check names, and as a share of the report's one denominator: the mean step time of the analysed "
        "steps (of a job: its longest rank's), named under Top fixes. " + FINDINGS_NOTE,
    ),
]


def definitions(rep: Report) -> list[tuple[str, str]]:
    """:data:`DEFINITIONS` plus a "Replay model" row: the replay assumptions (``ranks[].replay.assumptions``) of
    the rank the summary shows."""
    rows = list(DEFINITIONS)
    main = summary_rank(rep) if rep.ranks else None
    rp = getattr(main, "replay", None)
    if rp is not None and rp is not UNSET and rp.assumptions:
        who = f" (rank {main.rank})" if len(rep.ranks) > 1 and main is not None else ""
        rows.append(
            (
                "Replay model",
                "Replayed savings come from the step's dependency graph (perfdoctor/replay) "
                f"replayed with and without each fix. Its assumptions{who}: " + "; ".join(rp.assumptions) + ".",
            )
        )
    return rows


def ms(us: float | None, digits: int = 2) -> str:
    """µs → "12.34 ms" ("–" for None)."""
    return "–" if us is None else f"{us / 1000:,.{digits}f} ms"


def saving_ms(us: float, digits: int = 2) -> str:
    """A saving per step: "12.34 ms" (``digits`` decimals from 1 ms), "0.42 ms", "35 µs": never "0.0 ms"."""
    if abs(us) >= 1000:
        return f"{us / 1000:,.{digits}f} ms"
    return f"{us / 1000:.2f} ms" if abs(us) >= 100 else f"{us:,.0f} µs"


def step_time_text(st: Distribution) -> str:
    """A step-time distribution (``median``, ``p10``... in µs, ``n`` steps) in words: percentiles only where
    there are several steps."""
    if int(st.n or 0) <= 1:
        return f"{ms(st.median)} (one step: no spread to report)"
    return f"median {ms(st.median)} (p10 {ms(st.p10)}, p90 {ms(st.p90)}; min {ms(st.min)}, max {ms(st.max)})"


def dur(us: float | None) -> str:
    """A duration for tables of short events: "1.23 ms" from 100 µs up, else "12.3 µs"."""
    if us is None:
        return "–"
    return f"{us / 1000:,.2f} ms" if abs(us) >= 100 else f"{us:,.1f} µs"


def pct(x: float | None, digits: int = 1) -> str:
    """fraction → "12.3%"; a positive share too small for ``digits`` decimals reads "< 0.1%", not "0.0%"."""
    if x is None:
        return "–"
    floor = 10.0**-digits
    if 0 < 100 * x < floor / 2:
        return f"< {floor:.{digits}f}%"
    return f"{100 * x:.{digits}f}%"


def nbytes(n: float | None) -> str:
    """bytes → "1.23 GiB" (binary units)."""
    if n is None:
        return "–"
    v = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(v) < 1024 or unit == "TiB":
            return f"{v:,.0f} {unit}" if unit == "B" else f"{v:,.2f} {unit}"
        v /= 1024
    return f"{v:,.2f} TiB"


def primary(rank: RankSection) -> DeviceSection:
    """The device section the summary uses (the busiest GPU, or the host)."""
    return rank.primary


def device_name(rank: RankSection, device: int) -> str:
    if device < 0:
        if rank.device_properties:  # a GPU trace without its device side: host ops only, not CPU training
            return "host ops only (the trace lists GPUs but holds no GPU activity)"
        return "CPU (host ops)"
    for p in rank.device_properties:
        # a generic name ("AMD Radeon Graphics") gives the product identified from the architecture, with the basis
        name = p.identified if isinstance(p.identified, str) else (p.name or "").strip()
        if p.id == device and name:  # an empty name gives "GPU 2", not "GPU 2: "
            return f"GPU {device}: {name}"
    return f"GPU {device}"


def n_steps(dev: DeviceSection) -> int:
    return max(dev.totals.n_steps, 1)


class BreakdownRow(TypedDict):
    """A row of the step-time table (:func:`breakdown_rows`): µs over the analysed steps and per step, the share
    of step time (None without a step), ``kind`` "row" or "subtotal", the finding that explains an idle row."""

    key: str
    label: str
    total_us: float
    per_step_us: float
    share: float | None
    kind: str
    finding: str | None


class FindingView(TypedDict):
    """A finding prepared for display (:func:`finding`): the model's fields under the names the templates use, the
    texts built for display, evidence as (label, value text) pairs and event rows as texts; ``look``, where to open
    a trace viewer, is set by :func:`findings`."""

    code: str
    name: str
    title: str
    headline: str
    plan_position: int | None
    step_after_us: float | None
    plan_note: str
    alone_us: float | None
    severity: str
    category: str
    priority: int | None
    rank: int | None
    order: int
    ranks: list[int]
    saving_us: float | None
    saving_frac: float | None
    replayed: bool
    about: str
    method: str
    after_us: float | None
    after_frac: float | None
    after_codes: list[str]
    once: str
    now_us: float | None
    evidence: list[tuple[str, str]]
    events: list[dict[str, str]]
    steps: list[int]
    fix: str
    source: str
    frames: list[str]
    before: str
    after: str
    references: list[str]
    look: NotRequired[str]


def breakdown_rows(dev: DeviceSection, codes: list[str] | None = None) -> list[BreakdownRow]:
    """Rows ``{key, label, per_step_us, total_us, share, kind, finding}`` of the step-time table: categories
    (largest first), the busy subtotal, idle causes (largest first), the idle subtotal. ``key`` is ``idle:<cause>``
    for idle causes; ``kind`` is "row" or "subtotal"; ``finding`` the code of the report's finding (among
    ``codes``, in report order) that explains an idle row (:func:`perfdoctor.vocab.explaining_code`), else None.
    Categories / causes with zero time are dropped."""
    t = dev.totals
    n, dur = n_steps(dev), t.dur_us

    def row(key: str, label: str, us: float, kind: str = "row") -> BreakdownRow:
        return {
            "key": key,
            "label": label,
            "total_us": us,
            "per_step_us": us / n,
            "share": us / dur if dur else None,
            "kind": kind,
            "finding": explaining_code(key[5:], codes or []) if key.startswith("idle:") else None,
        }

    cats = sorted(((us, c) for c, us in t.categories_us.items() if us > 0), key=lambda x: (-x[0], x[1]))
    idle = sorted(((us, c) for c, us in t.idle_causes_us.items() if us > 0), key=lambda x: (-x[0], x[1]))
    gpu = dev.kind == "gpu"
    rows = [row(c, category_label(c), us) for us, c in cats]
    rows.append(
        row(
            "busy",
            "busy (sum of the categories above)" if gpu else "inside ops (sum of the above)",
            t.busy_us,
            "subtotal",
        )
    )
    rows += [row(f"idle:{c}", idle_label(c), us) for us, c in idle]
    rows.append(row("idle", "idle (sum of the causes above)" if gpu else "outside ops", t.idle_us, "subtotal"))
    return rows


def evidence_value(name: str, value: EvidenceValue) -> str:
    """One evidence number with its unit, read from the name's suffix (``_us``, ``_ms``, ``_pct``, ``_bytes``)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        if isinstance(value, list):
            return ", ".join(str(v) for v in value) if value else "–"
        if isinstance(value, dict):
            unit = name[: -len("_by_rank")] if name.endswith("_by_rank") else name
            return "; ".join(f"{k}: {evidence_value(unit, v)}" for k, v in value.items()) or "–"  # type: ignore[arg-type]
        return str(value)
    if name.endswith("_us"):
        return dur(value)
    if name.endswith("_ms"):
        return f"{value:,.3f} ms"
    if name.endswith("_pct"):
        return f"{value:.1f}%"
    if name.endswith("_bytes"):
        return nbytes(value)
    if isinstance(value, float):
        # 4 significant digits, never in e-notation: 19,270,000 not 1.927e+07
        return f"{value:,.0f}" if abs(value) >= 1e4 else f"{value:,.4g}"
    return f"{value:,}"


def _event_value(name: str, value: EventValue) -> str:
    return evidence_value(name, value if not isinstance(value, list) else list(value))


def _shown(key: str, value: EvidenceValue, title: str) -> bool:
    """Whether an evidence entry adds to the finding's title: words the message already says (``what``:
    "ops", a ``reason``) and the rank list of a single-rank report are left out."""
    if key == "events":
        return False
    if key == "ranks":
        return isinstance(value, list) and len(value) > 1
    return not (isinstance(value, str) and says(title, value))


def _unitless(name: str) -> str:
    """``total_us`` -> ``total``: the formatted value carries its own unit (ms, µs, KB...)."""
    for suffix in ("_us", "_ms", "_bytes"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def finding(f: FindingSection, order: int = 0, denominator_us: float | None = None) -> FindingView:
    """One finding (see perfdoctor/findings.py) prepared for display: texts, saving, evidence, snippets.
    ``now_us`` is the step its saving is taken from: the finding's ``saving_from_us_per_step`` (the message's "from
    A ms"), else ``denominator_us`` (the report's denominator, µs); None without a saving."""
    pairs = [(_unitless(k), evidence_value(k, v)) for k, v in f.evidence.items() if _shown(k, v, f.message)]
    events = [{_unitless(k): _event_value(k, v) for k, v in e.items()} for e in f.events]
    estimated = bool(f.saving_method) or bool(f.saving_us_per_step)
    return {
        "code": f.code,
        "name": f.name,
        "title": f.message,
        "headline": headline(f),
        "plan_position": f.plan_position,
        "step_after_us": f.step_after_us,
        "plan_note": f.plan_note,
        "alone_us": f.saving_alone_us_per_step,
        "severity": f.severity,
        "category": f.category,
        "priority": f.position,
        "rank": f.rank,
        "order": order,
        "ranks": f.ranks,
        "saving_us": f.saving_us_per_step if estimated else None,
        "saving_frac": f.saving_pct_of_step / 100.0 if estimated else None,
        "replayed": f.replayed,
        "about": "about" if f.replayed else "up to",
        "method": f.saving_method,
        "after_us": f.saving_after_us_per_step,
        "after_frac": None if f.saving_after_pct_of_step is None else f.saving_after_pct_of_step / 100.0,
        "after_codes": list(f.saving_after_codes),
        "once": saving_once(f),
        "now_us": (f.saving_from_us_per_step if f.saving_from_us_per_step is not None else denominator_us)
        if estimated
        else None,
        "evidence": pairs,
        "events": events,
        "steps": list(f.steps),
        "fix": f.fix.strip(),
        "source": source_text(f),
        "frames": list(f.source.frames) if f.source is not None else [],
        "before": f.example_before.strip("\n"),
        "after": f.example_after.strip("\n"),
        "references": list(f.references),
    }


def source_text(f: FindingSection) -> str:
    """Where in the user's code the finding's time starts, in one clause: "at train.py:42 in step → Tensor.item"
    (the line of the call), "in step (train.py:30, the function's first line)" (a trace without each call's line),
    the module first for a module's finding, the share when other lines have some of the time; without Python stacks
    the hint that would name it; "" when neither."""
    src = f.source
    if src is None:
        return f.source_hint
    where = (
        f"at {src.location} in {src.function}"
        if src.exact
        else f"in {src.function} ({src.location}, the function's first line)"
    )
    if src.calls:
        where += f" → {src.calls}"
    if src.module:
        where = f"module {src.module}, {where}"
    if src.share_pct < 99.95:
        where += f" ({src.share_pct:.0f}% of it)"
    return where


HEADLINE_MAX = 120  # characters: a finding's headline is one sentence with its key number


def first_sentence(text: str) -> str:
    """The text up to its first sentence end (". " or ": " followed by a capital or backquote), whole otherwise."""
    for i, ch in enumerate(text):
        if ch == "." and text[i + 1 : i + 2] == " " and text[i + 2 : i + 3][:1].isupper():
            return text[: i + 1]
    return text


def clip_words(text: str, limit: int) -> str:
    """``text`` cut at a word boundary to at most ``limit`` characters, "…" marking the cut."""
    if len(text) <= limit:
        return text
    cut = text[: limit - 1].rsplit(" ", 1)[0].rstrip(",;:(")
    return cut + "…"


def headline(f: FindingSection) -> str:
    """A finding's headline (its rule's ``headline`` template); for a report without one, its message's first
    clause, cut at a word to :data:`HEADLINE_MAX` characters."""
    if f.headline:
        return f.headline
    return clip_words(first_clause(f.message), HEADLINE_MAX)


def short_fix(fix: str, limit: int = 200) -> str:
    """A fix text's first sentence, cut at a word to ``limit`` characters (the whole text is one flag away)."""
    return clip_words(first_sentence(" ".join(fix.split())), limit)


def saving_once(f: FindingSection) -> str:
    """ "once PD101, PD103 are fixed" when the finding's stated saving is the one on top of other fixes (a plan
    entry's marginal saving on top of the entries above it), so that a saving read beside the others says what it
    builds on; "" otherwise (and off the plan, where :attr:`FindingSection.plan_note` says it)."""
    codes = list(f.saving_after_codes)
    if (
        not codes
        or f.plan_note
        or f.saving_after_us_per_step is None
        or f.saving_after_us_per_step != f.saving_us_per_step
    ):
        return ""
    return f"once {', '.join(codes)} {'is' if len(codes) == 1 else 'are'} fixed"


def denominator_text(report: Report) -> str:
    """The one sentence naming the step every saving % is a share of ("" when the report has none): each renderer
    prints it once, next to the findings."""
    d = report.denominator
    if d is UNSET or d is None:
        return ""
    return f"Saving percentages are of {ms(d.value_us)} per step: {d.definition}."


def finding_codes(report: Report) -> list[str]:
    """The report's finding codes in report order ([] without findings)."""
    found = report.findings
    return [] if found is UNSET else [f.code for f in found]


def findings(rep: Report) -> list[FindingView]:
    """All findings, ranked by estimated saving (largest first); unestimated ones last, in engine order."""
    found, d = rep.findings, rep.denominator
    denominator_us = None if d is UNSET or d is None else d.value_us
    items = [finding(f, i, denominator_us) for i, f in enumerate(found if found is not UNSET else [])]
    looks = where_to_look(rep, found if found is not UNSET else [])
    for item, look in zip(items, looks, strict=True):
        item["look"] = look
    # the engine's order (``position``): by saving alone, each finding after the fixes its stated saving builds on;
    # re-sorting by the stated saving put PD203's 19.0 ms after-the-others figure above the fixes it needs first in
    # the Markdown and HTML, and below them in the terminal and JSON
    return sorted(items, key=lambda f: (f["priority"] is None, f["priority"] or 0, f["order"]))


def where_to_look(report: Report, found: list[FindingSection]) -> list[str]:
    """Per finding, the step and time range to open in a trace viewer: on its rank (the one its numbers come
    from, else the first it fired on, else the report's first), the slowest of the steps it fires on (else of the
    rank's analysed steps), with the step's window in the trace's own clock (µs, the primary device's step row);
    "" where the report has no step rows for that rank."""
    ranks = {f.rank if f.rank is not None else (f.ranks[0] if f.ranks else None) for f in found}
    rows: dict[int | None, list[StepBreakdown]] = {}
    for r in report.ranks:  # a many-rank job's sections decode as read: stop once every rank needed is found
        if (r.rank in ranks or None in ranks) and r.rank not in rows:
            dev = [d for d in r.devices if d.device == r.primary_device]
            rows[r.rank] = list(dev[0].steps) if dev else []
            rows.setdefault(None, rows[r.rank])
        if all(k in rows for k in ranks):
            break
    out = []
    for f in found:
        rank = f.rank if f.rank is not None else (f.ranks[0] if f.ranks else None)
        steps = rows.get(rank, [])
        fired = [s for s in steps if s.step in set(f.steps)]
        if not steps:
            out.append("")
            continue
        s = max(fired or steps, key=lambda x: x.dur_us)
        on = f" on rank {rank}" if rank is not None and len(report.ranks) > 1 else ""
        which = "the slowest step it fires on" if fired else "the slowest analysed step"
        out.append(
            f"step {s.step}{on} ({which}): ts {s.start_us:.0f} to {s.start_us + s.dur_us:.0f} µs ({ms(s.dur_us)})"
        )
    return out


def skipped(report: Report) -> list[tuple[str, str]]:
    """Skipped checks as ("CODE name", reason)."""
    sc = report.skipped_checks
    return [(" ".join(x for x in (s.code, s.name) if x), s.reason) for s in (sc if sc is not UNSET else [])]


def step_range(dev: DeviceSection) -> str:
    nums = [s.step for s in dev.steps]
    if not nums:
        return "none"
    return f"#{nums[0]}" if len(nums) == 1 else f"#{nums[0]}–#{nums[-1]}"


def _device_summary(report: Report) -> str:
    """ "8 ranks × GPU: Tesla V100 (1 GPU with activity per rank)" style text."""
    used: dict[str, int] = {}
    for r in report.ranks:
        for d in r.devices:
            if d.kind != "gpu":
                continue
            name = device_name(r, d.device).split(": ", 1)[-1]
            used[name] = used.get(name, 0) + 1
    if not used:
        listed = sorted({str(p.name) for r in report.ranks for p in r.device_properties})
        if listed:
            return (
                f"no GPU activity recorded, although the trace lists {', '.join(listed)} (profiled without "
                "ProfilerActivity.CUDA?): host side only"
            )
        return "CPU only (no GPU activity in the trace)"
    parts = [f"{n} × {name}" for name, n in sorted(used.items())]
    return ", ".join(parts) + (f" across {len(report.ranks)} ranks" if len(report.ranks) > 1 else "")


def summary_rank(rep: Report) -> RankSection | None:
    """The rank the summary describes: the slowest rank (by median step time) of a multi-rank report;
    None for a run-only report (a ``perfdoctor profile`` run that stopped before its profiled window)."""
    if not rep.ranks:
        return None
    slow = rep.summary.slowest_rank
    return next((r for r in rep.ranks if slow is not UNSET and r.rank == slow), rep.ranks[0])


def flops(value: float, unit: str) -> str:
    """FLOP or FLOP/s with an SI prefix that keeps 3–4 significant digits (G on CPUs, T on GPUs)."""
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M")):
        if abs(value) >= scale:
            return (
                f"{value / scale:,.3g} {prefix}{unit}"
                if value / scale < 100
                else f"{value / scale:,.0f} {prefix}{unit}"
            )
    return f"{value:,.0f} {unit}"


def _mfu_text(rank: RankSection) -> tuple[str, str] | None:
    """(value, numerator/denominator text) of the rank's MFU (:class:`perfdoctor.analysis.work.mfu.MfuResult`)."""
    m = rank.mfu
    if m is None:
        return None
    if m.mfu is None or m.peak_flops_per_s is None:
        achieved = (
            f"achieved {flops(m.model_flops_per_step, 'FLOP')} per step ({m.flops_source}) ÷ "
            f"{m.step_time_s * 1e3:,.2f} ms median step = {flops(m.achieved_flops_per_s, 'FLOP/s')}; "
            if m.model_flops_per_step and m.step_time_s and m.achieved_flops_per_s
            else ""
        )
        return ("not computed", achieved + (m.note or "no model FLOP count or no device peak"))
    num = (
        f"numerator: {flops(m.model_flops_per_step, 'FLOP')} per step ({m.flops_source}) ÷ "
        f"{m.step_time_s * 1e3:,.2f} ms median step = {flops(m.achieved_flops_per_s, 'FLOP/s')}"
    )
    den = f"denominator: {flops(m.peak_flops_per_s, 'FLOP/s')} {m.dtype or ''} peak ({m.peak_source})"
    hfu = f"; HFU {pct(m.hfu)}" if m.hfu is not None and m.hfu != m.mfu else ""
    return (pct(m.mfu), f"{num}; {den}{hfu}" + (f". {m.note}" if m.note else ""))


def _run(report: Report) -> RunSection | None:
    return report.run if report.run is not UNSET else None


def _partial_fact(report: Report) -> tuple[str, str, str] | None:
    run = _run(report)
    if not ((run is not None and run.partial) or report.partial is True):
        return None
    return (
        "PARTIAL RUN",
        str((run.stop_reason if run else None) or "the run did not complete"),
        f"{run.steps_completed if run else None} steps ran; everything recorded until then is analysed",
    )


_Fact = tuple[str, str, str]


def _dtype_fact(rank: RankSection) -> _Fact:
    """The GEMM dtype row: MFU's dtype, else the dominant one of the matmul/convolution kernels."""
    dtype = (rank.mfu.dtype if rank.mfu is not None else None) or rank.gemm_dtype.dominant
    return (
        "GEMM dtype",
        str(dtype) if dtype else "not recorded",
        "the math dtype of the matmul/convolution kernels, weighted by their time (from kernel names, or "
        "the ops' input types on CPU)"
        if dtype
        else "no GEMM kernel or matmul op says which dtype it ran in",
    )


def _step_facts(report: Report, rank: RankSection, who: str) -> list[_Fact]:
    """The steps analysed and the median step time (with its spread) of the summary's rank, named by ``who``."""
    dev = rank.primary
    n = len(dev.steps)
    analysed = (
        "steps analysed",
        f"{n} ({rank.steps_source} {step_range(dev)})"
        if rank.steps_source != "whole-trace"
        else "whole trace as one window (no step markers)",
        _skipped_steps(report),
    )
    st = dev.step_time_us
    median = (
        f"median step time{who}",
        ms(st.median),
        f"p10–p90 {ms(st.p10)} – {ms(st.p90)}; min–max {ms(st.min)} – {ms(st.max)}; std {ms(st.std)}; n = {st.n} steps"
        if int(st.n or 0) > 1
        else "one step: no spread to report",
    )
    return [analysed, median]


def _spread_fact(report: Report, steps_per_rank: int) -> _Fact | None:
    """The rank spread row of a multi-rank report (None with one rank or no spread); ``steps_per_rank``: the
    summary rank's step count (one step makes the spread no straggler measure)."""
    s = report.summary
    if len(report.ranks) <= 1 or s.n_ranks <= 1 or s.spread_pct is UNSET:
        return None
    return (
        "rank spread",
        f"{s.spread_pct:.1f}%",
        f"rank {s.slowest_rank} has the longest median step time, rank {s.fastest_rank} the shortest"
        + (
            "; one step per rank: the rank that started first waits longest, so this is no straggler measure"
            if steps_per_rank <= 1
            else ""
        ),
    )


def _utilization_fact(dev: DeviceSection, who: str) -> _Fact:
    """Device utilization (busy ÷ step; on a GPU also kernels alone, as the TensorBoard profiler plugin counts
    it), or the host's busy share in ops on a CPU-only rank."""
    t = dev.totals
    label = "device utilization" if dev.kind == "gpu" else "host busy in ops"
    detail = (
        f"busy {ms(t.busy_us / n_steps(dev))} ÷ step {ms(t.dur_us / n_steps(dev))} "
        f"per step (means over {t.n_steps} steps)"
    )
    if dev.kind == "gpu" and t.dur_us:
        kernels = t.busy_us - t.categories_us.get(Category.MEMCPY, 0) - t.categories_us.get(Category.MEMSET, 0)
        detail += (
            f"; kernels only (memcpy/memset left out, as the TensorBoard profiler plugin's GPU utilization): "
            f"{pct(kernels / t.dur_us)}"
        )
    return (label + who, pct(dev.utilization), detail)


def summary_facts(rep: Report) -> list[tuple[str, str, str]]:
    """(label, value, detail) rows of the report's summary, in the order the issue lists them."""
    rank = summary_rank(rep)
    if rank is None:
        return _run_only_facts(rep)
    dev = rank.primary
    who = f" (rank {rank.rank}, longest median step)" if len(rep.ranks) > 1 else ""
    partial = _partial_fact(rep)
    facts: list[_Fact] = [partial] if partial else []
    facts.append(
        ("devices", _device_summary(rep), "GPUs with kernel/memcpy activity; node properties from deviceProperties")
    )
    facts.append(_dtype_fact(rank))
    facts += _step_facts(rep, rank, who)
    spread = _spread_fact(rep, int(dev.step_time_us.n or 0))
    if spread:
        facts.append(spread)
    facts.extend(throughput_facts(rep))
    facts.append(_utilization_fact(dev, who))
    mfu = _mfu_text(rank)
    if mfu:
        facts.append(("MFU" + who, mfu[0], mfu[1]))
    return facts


def _run_only_facts(report: Report) -> list[tuple[str, str, str]]:
    """Summary rows of a report with no trace: what the run's step series (``report.run``) says."""
    facts = []
    partial = _partial_fact(report)
    if partial:
        facts.append(partial)
    facts.append(("trace", "none", str(report.no_trace if report.no_trace is not UNSET else "no trace to analyse")))
    run = _run(report)
    ss = run.steady_state if run is not None else None
    if ss is not None and ss.median_s:
        facts.append(
            (
                "median step time (steady state)",
                ms(ss.median_s * 1e6),
                (
                    f"the steps repeat in a cycle of {ss.cycle_steps}: the median mean of {ss.cycle_steps} consecutive "
                    "steps and its "
                    if ss.cycle_steps > 1
                    else ""
                )
                + f"p10–p90 {ms(ss.p10_s * 1e6)} – {ms(ss.p90_s * 1e6)}; {ss.n_steps} steps ran, "
                f"the first {ss.warmup_steps} were warm-up and are left out",
            )
        )
    facts.extend(throughput_facts(report))
    return facts


def _skipped_steps(report: Report) -> str:
    run = _run(report)
    ss = run.steady_state if run is not None else None
    if ss is not None:
        if ss.warmup_steps == 0:
            return (
                "the run showed no warm-up (its first steps were as fast as the rest); the profiled steps are "
                "analysed as recorded"
            )
        return (
            f"the run's first {ss.warmup_steps} step(s) were warm-up (slower than the first phase) and are left "
            "out of the run statistics; the profiled steps are analysed as recorded"
        )
    return "no step skipped by perfdoctor (torch.profiler's own wait/warm-up steps are not in the trace)"


def throughput_facts(report: Report) -> list[tuple[str, str, str]]:
    """Throughput rows from the run section's ``throughput`` (written by ``perfdoctor profile``), then the
    evaluation / checkpoint time found inside training steps, when there was any."""
    run = _run(report)
    if run is None:
        return []
    out = []
    nt = run.non_training
    if nt.eval_s or nt.checkpoint_s:
        out.append(
            (
                "not training, inside steps",
                f"{nt.eval_s + nt.checkpoint_s:,.2f} s",
                f"evaluation {nt.eval_s:,.2f} s in {nt.eval_steps} step(s) (model.eval() to "
                f"model.train()), checkpoint saving {nt.checkpoint_s:,.2f} s in "
                f"{nt.checkpoint_steps} step(s) (torch.save); left out of train-only step times, "
                "steady state and train throughput",
            )
        )
    for key, v in run.throughput.items():
        detail = "; ".join(
            x
            for x in (
                f"numerator: {v.numerator}" if v.numerator else "",
                f"denominator: {v.denominator}" if v.denominator else "",
            )
            if x
        )
        out.append(
            (
                f"throughput ({key.replace('_', ' ')})",
                f"{v.value:,.1f} {v.unit}".strip() if v.value is not None else "None",
                detail,
            )
        )
    return out + run_memory_facts(run)


def run_memory_facts(run: RunSection) -> list[tuple[str, str, str]]:
    """Rows of the run's memory (``run.memory``): each series' peak and slope, the allocator's counts per steady
    step over the whole run, and each memory snapshot's peak with the command that gives its whole report."""
    mem = run.memory
    if mem is None:
        return []
    out = []
    for g in mem.series:
        slope = (
            f"{nbytes(g.slope_bytes_per_step)} per step (95% interval {nbytes(g.slope_low_bytes_per_step)} to "
            f"{nbytes(g.slope_high_bytes_per_step)})"
            if g.slope_bytes_per_step
            else "flat"
        )
        detail = f"at step {g.peak_step}; over the steady steps {g.first_step}–{g.last_step}: {slope}"
        if g.steps_to_limit is not None and g.limit_bytes is not None:
            detail += f"; reaches {nbytes(g.limit_bytes)} ({g.limit_source}) in ~{g.steps_to_limit:,.0f} more steps"
        out.append((f"peak {g.words} (run)", nbytes(g.peak_bytes), detail))
    a = mem.allocator
    if a is not None:
        mallocs = f"{a.mallocs_per_step:,.2f}" if a.mallocs_per_step is not None else "unknown"
        retries = f"{a.retries_per_step:,.2f}" if a.retries_per_step is not None else "unknown"
        at = f" (steps {', '.join(map(str, a.retry_steps))})" if a.retry_steps else ""
        out.append(
            (
                "allocator per steady step (run)",
                f"{mallocs} cudaMalloc" if a.mallocs_per_step is not None else f"{retries} retries",
                f"{retries} allocator retries per step{at}; over {a.n_steps} steady-state unprofiled steps from step "
                f"{a.first_step} (torch.cuda.memory_stats: num_device_alloc, num_alloc_retries)",
            )
        )
    for sn in mem.snapshots:
        frag = f"{sn.fragmentation:.0%}" if sn.fragmentation is not None else "unknown"
        top = f"; most held by {sn.top_site} ({nbytes(sn.top_site_bytes)})" if sn.top_site else ""
        out.append(
            (
                f"memory snapshot, device {sn.device}",
                f"peak {nbytes(sn.peak_allocated_bytes)}",
                f"{sn.path}: peak reserved {nbytes(sn.peak_reserved_bytes)}, fragmentation {frag}, "
                f"{sn.cuda_malloc_calls} cudaMalloc, {sn.cache_flushes_then_malloc} cache flushes then cudaMalloc, "
                f"{sn.ooms} out-of-memory{top}; the whole report: perfdoctor report {run.path}/{sn.path}",
            )
        )
    return out


def collectives_free_text(cf: CollectivesFree) -> str:
    """One line for a job's ``collectives_free`` (:func:`perfdoctor.crossrank.job_section.collectives_free`): the
    job's step measured and with every collective free, and the share communication and the wait for peers cost."""
    ratio = cf.ratio
    return (
        f"with every collective free (transfer free and overlapped, on every rank): job step {ms(cf.step_us)} "
        f"(rank {cf.step_rank}) → {ms(cf.free_step_us)} (rank {cf.free_rank}), {pct(ratio)} of the measured "
        f"step; communication and waiting for peers cost at most {pct(1.0 - ratio)} of it"
    )
