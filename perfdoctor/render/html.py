"""HTML renderer: one self-contained, offline, deterministic page from the report dict.

jinja2 with autoescape on renders ``templates/report.html.j2``; CSS is inline,
charts are inline SVG from :mod:`perfdoctor.render.svg`, the page runs no
script, and a Content-Security-Policy meta tag forbids every network load.
The full report is embedded as JSON (``<script type="application/json">``)
through ``tojson``, whose HTML-safe escaping keeps a kernel named
``</script>`` inside the data. No wall-clock text unless ``generated_at`` is given.
"""

from __future__ import annotations

import re
from typing import TypedDict

import jinja2
import orjson
from markupsafe import Markup, escape
from msgspec import UNSET

from perfdoctor.model import Report, to_builtins
from perfdoctor.model.report import DeviceSection, MemoryOverStep, MemoryStepPeak, RankSection, RunSection
from perfdoctor.render import memory_view, svg, view
from perfdoctor.vocab import CHART_ORDER, category_label, idle_label

_BREAKDOWN_ORDER = CHART_ORDER
CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; img-src data:; script-src 'none'; "
    "connect-src 'none'; font-src 'none'; base-uri 'none'; form-action 'none'"
)


def _dumps(obj: object, **_: object) -> str:
    """``tojson``'s encoder: sorted keys, numpy values as numbers (byte-stable output)."""
    return orjson.dumps(
        obj, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY
    ).decode()


def base_env() -> jinja2.Environment:
    """The jinja2 environment every HTML page of perfdoctor renders with: the package's templates, autoescape on,
    ``tojson`` through :func:`_dumps` (sorted keys, byte-stable output)."""
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("perfdoctor.render", "templates"),
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.policies["json.dumps_function"] = _dumps
    return env


def _env() -> jinja2.Environment:
    env = base_env()
    env.filters.update(
        ms=view.ms, pct=view.pct, nbytes=view.nbytes, dur=view.dur, code_spans=code_spans, saving=view.saving_ms
    )
    env.globals["rv_rows"] = view.breakdown_rows
    env.globals["swatch"] = svg.color
    env.globals["before_after"] = before_after
    return env


def code_spans(text: str) -> Markup:
    """Escape ``text``, then show its `backtick` spans as <code> (the only markup rule prose gets)."""
    escaped = str(escape(text))
    return Markup(re.sub(r"`([^`]+)`", r"<code>\1</code>", escaped))


def _series_for_steps(dev: DeviceSection) -> list[svg.Series]:
    steps = dev.steps
    keys = [k for k in _BREAKDOWN_ORDER if any(s.categories_us.get(k, 0) > 0 for s in steps)]
    out = [svg.Series(k, category_label(k), [s.categories_us.get(k, 0.0) / 1000 for s in steps]) for k in keys]
    causes = sorted({c for s in steps for c in s.idle_causes_us})
    for c in causes:
        out.append(svg.Series(f"idle:{c}", idle_label(c), [s.idle_causes_us.get(c, 0.0) / 1000 for s in steps]))
    return out


def _steps_chart(rank: RankSection, dev: DeviceSection) -> Markup:
    labels = [f"#{s.step}" for s in dev.steps]
    title = f"Step time by category, per step — rank {rank.rank}, {view.device_name(rank, dev.device)}"
    return Markup(svg.stacked_bars(labels, _series_for_steps(dev), "ms", title))


def _ranks_chart(report: Report) -> Markup:
    """Mean step time by category, one bar per rank (multi-rank reports)."""
    ranks = report.ranks
    devs = [r.primary for r in ranks]
    keys = [k for k in _BREAKDOWN_ORDER if any(d.totals.categories_us.get(k, 0) > 0 for d in devs)]
    series = [
        svg.Series(k, category_label(k), [d.totals.categories_us.get(k, 0.0) / view.n_steps(d) / 1000 for d in devs])
        for k in keys
    ]
    causes = sorted({c for d in devs for c in d.totals.idle_causes_us})
    series += [
        svg.Series(
            f"idle:{c}", idle_label(c), [d.totals.idle_causes_us.get(c, 0.0) / view.n_steps(d) / 1000 for d in devs]
        )
        for c in causes
    ]
    return Markup(
        svg.stacked_bars(
            [f"rank {r.rank}" for r in ranks], series, "ms per step", "Mean step time by category, per rank"
        )
    )


def _timeline_chart(rank: RankSection, dev: DeviceSection) -> Markup | None:
    steps = dev.steps
    if len(steps) < 2:
        return None
    st = dev.step_time_us
    return Markup(
        svg.step_line(
            [float(s.step) for s in steps],
            [s.dur_us / 1000 for s in steps],
            "ms",
            f"Step time per step — rank {rank.rank}",
            ref_y=(st.median / 1000, f"median {view.ms(st.median)}"),
        )
    )


def _run_series(run: RunSection) -> tuple[list[float], list[float]]:
    """(step numbers, train-only step times in ms) of the whole run; steps whose time is unknown left out."""
    pairs = [
        (float(x), float(y) * 1e3)
        for x, y in zip(run.steps.step, run.steps.train_s, strict=False)
        if x is not None and y is not None
    ]
    return [x for x, _ in pairs], [y for _, y in pairs]


def _run_chart(run: RunSection) -> Markup | None:
    """The whole run's step-time series from ``perfdoctor profile`` with warm-up, steady state and phase changes
    (``steady_state`` as written by :mod:`perfdoctor.analysis.steps.steady_state`: warmup_steps, phases[start_step])."""
    xs, ys = _run_series(run)
    if not xs:
        return None
    ss = run.steady_state
    phases = ss.phases if ss is not None else []
    warm = ss.warmup_steps if ss is not None else 0
    start = phases[-1].start_step if phases else warm
    bands = []
    if warm > 0:
        bands.append(svg.Band(xs[0], xs[min(warm, len(xs) - 1)], f"warm-up ({warm} steps)", "warmup"))
    if ss is not None:
        bands.append(svg.Band(xs[min(start, len(xs) - 1)], xs[-1], "steady state", "steady"))
    marks = [
        (
            xs[min(p.start_step, len(xs) - 1)],
            f"phase change at step {p.start_step}: median {p.median_s * 1000:,.2f} ms after",
        )
        for p in phases[1:]
    ]
    nt = run.non_training
    title = (
        "Train-only step time over the whole run (evaluation and checkpoint saving left out)"
        if nt.eval_s or nt.checkpoint_s
        else "Step time over the whole run (perfdoctor profile)"
    )
    return Markup(svg.step_line(xs, ys, "ms", title, bands=bands, marks=marks))


_BOUND_COLOUR = {"compute": "matmul", "bandwidth": "elementwise", "latency": "idle:synchronization"}


def _roofline_chart(rank: RankSection) -> Markup | None:
    rl = rank.roofline
    if rl is None or not rl.chart:
        return None
    roofs = rl.roofs
    peaks = roofs.peak_flops if roofs is not None else {}
    used = {c.dtype for c in rl.chart}
    roof_list = [
        svg.Roof(f"{d} peak {v / 1e12:,.1f} TFLOP/s", peak_tflops=v / 1e12)
        for d, v in sorted(peaks.items())
        if d in used and v
    ]
    if roofs is not None and roofs.hbm_bytes_per_s:
        bw = roofs.hbm_bytes_per_s
        roof_list.append(svg.Roof(f"memory {bw / 1e12:,.2f} TB/s", bw_tbps=bw / 1e12))
    pts = [
        svg.Point(
            c.ai,
            c.achieved_flops_per_s / 1e12,
            c.time_us or 0.0,
            f"{c.name} [{c.dtype}] — {c.ai:,.1f} FLOP/B, "
            f"{c.achieved_flops_per_s / 1e12:,.2f} TFLOP/s, {view.ms(c.time_us)}, {c.bound}",
            _BOUND_COLOUR.get(c.bound, "other"),
        )
        for c in rl.chart
        if c.ai and c.achieved_flops_per_s
    ]
    device = roofs.device if roofs is not None else "device"
    return Markup(svg.roofline(pts, roof_list, f"Roofline — rank {rank.rank} ({device})"))


class MemoryView(TypedDict):
    """A device's memory over the step as the template shows it (:func:`_memory_over_step`)."""

    dev: MemoryOverStep
    line: str
    chart: Markup
    peak: MemoryStepPeak


class RankView(TypedDict):
    """Everything the template shows for one rank (:func:`rank_view`)."""

    rank: RankSection
    dev: DeviceSection
    name: str
    rows: list[view.BreakdownRow]
    n: int
    steps_chart: Markup | None
    timeline_chart: Markup | None
    roofline_chart: Markup | None
    others: list[tuple[str, DeviceSection]]
    memory_over_step: list[MemoryView]


def rank_view(rank: RankSection) -> RankView:
    """Everything the template shows for one rank (formatted, charts as SVG markup)."""
    dev = rank.primary
    return {
        "rank": rank,
        "dev": dev,
        "name": view.device_name(rank, dev.device),
        "rows": view.breakdown_rows(dev),
        "n": view.n_steps(dev),
        "steps_chart": _steps_chart(rank, dev) if dev.steps else None,
        "timeline_chart": _timeline_chart(rank, dev),
        "roofline_chart": _roofline_chart(rank),
        "others": [(view.device_name(rank, d.device), d) for d in rank.devices if d is not dev],
        "memory_over_step": _memory_over_step(rank),
    }


def _memory_over_step(rank: RankSection) -> list[MemoryView]:
    """Per device with memory over the step: its peak line, contributors, chart (SVG) and per-step rows."""
    return [
        {
            "dev": d,
            "line": memory_view.peak_line(d),
            "chart": Markup(memory_view.memory_chart(d, rank.rank)),
            "peak": next(s for s in d.steps if s.step == d.peak_step),
        }
        for d in memory_view.over_step(rank)
    ]


def before_after(f: view.FindingView) -> Markup:
    """A finding's step now and with its fix, as two bars: the step its saving is taken from (``now_us``, the
    message's "from A ms", else the report's denominator) and that less the saving, labelled by :func:`view.ms` as
    everywhere else. Empty without a saving."""
    saving, now = f.get("saving_us"), f.get("now_us")
    if not saving or not now or now <= 0:
        return Markup("")
    fixed = max(now - saving, 0.0)
    above = f.get("after_codes") or []
    if f.get("plan_position") and above:  # a plan entry's bars start from the step with the entries above it in
        title = f"mean step with {', '.join(above)} fixed, and with {f.get('code', '')} too"
        labels = ("before", "after")
    else:
        title = f"mean step now and with the fix of {f.get('code', '')}"
        labels = ("now", "fixed")
    return Markup(svg.before_after(now / 1000, fixed / 1000, (view.ms(now), view.ms(fixed)), title, labels))


def render_html(report: Report, generated_at: str | None = None) -> str:
    """The report as one self-contained HTML page (str).

    Args:
        report: the typed report.
        generated_at: text stamped in the footer; None (default) keeps output byte-stable.
    """
    from perfdoctor.render import job_html

    rep = job_html.slim_report(report)
    main = view.summary_rank(rep)
    ranks = [rank_view(r) for r in rep.ranks]
    run = rep.run if rep.run is not UNSET else None
    context = {
        "report": rep,
        "report_data": to_builtins(rep),
        "csp": CSP,
        "generated_at": generated_at,
        "facts": view.summary_facts(rep),
        "findings": view.findings(rep),
        "codes": view.finding_codes(rep),
        "skipped": view.skipped(rep),
        "findings_note": rep.findings_note if rep.findings_note is not UNSET else None,
        "denominator": view.denominator_text(rep),
        "has_findings_key": rep.findings is not UNSET,
        "multi": len(rep.ranks) > 1,
        "ranks": ranks,
        "main": next((rv for rv in ranks if rv["rank"] is main), None),
        "no_trace": (rep.no_trace if rep.no_trace is not UNSET else "") or "no trace to analyse",
        "ranks_chart": _ranks_chart(rep) if len(rep.ranks) > 1 else None,
        "run_chart": _run_chart(run) if run is not None else None,
        "definitions": view.definitions(rep),
        "cat_labels": view.CAT_LABELS,
        "jv": job_html.job_view(rep, len(report.ranks)) if rep.job is not UNSET else None,
    }
    return _env().get_template("report.html.j2").render(**context)
