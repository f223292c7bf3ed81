"""Formatting shared by the diff renderers (terminal, Markdown, HTML): tables of labelled, unit-bearing strings.

Reads a :class:`perfdoctor.diff.model.Diff` and computes nothing new except a row's change in % (after ÷ before
− 1) where a table shows one.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from perfdoctor.diff.compare import mean_step_words
from perfdoctor.diff.model import Diff, Mover, Pair, Prediction, SideInfo, WorkComparison, WorkSide
from perfdoctor.diff.stats import signed_pct
from perfdoctor.render.view import ms, nbytes, pct


@dataclass
class TableView:
    """A titled table: ``header`` and ``rows`` of display strings, ``align`` per column (``l``/``r``)."""

    title: str
    header: list[str]
    rows: list[list[str]]
    align: list[str]
    note: str = ""
    classes: list[str] = field(default_factory=list)  # one CSS class per row (HTML)
    waterfall: bool = False  # the HTML draws the waterfall chart above this table


def signed_ms(us: float | None) -> str:
    """µs → "+1.23 ms" / "−1.23 ms" ("–" for None)."""
    if us is None:
        return "–"
    sign = "+" if us > 0 else "−" if us < 0 else "±"
    return f"{sign}{abs(us) / 1000:,.2f} ms"


def change_pct(p: Pair) -> float | None:
    if p.before is None or p.after is None or not p.before:
        return None
    return 100.0 * (p.after / p.before - 1.0)


def side_line(label: str, info: SideInfo, width: int = 0) -> str:
    """``BEFORE: path (run, 1 rank(s), CPU)``; several runs: ``BEFORE: 3 runs: a, b, c (run, ...)``; ``width``
    pads ``label:`` (the terminal aligns BEFORE and AFTER)."""
    runs = f"{len(info.runs)} runs: " if len(info.runs) > 1 else ""
    return f"{label + ':':<{width}} {runs}{info.path} ({info.kind}, {info.n_ranks} rank(s), {info.device})"


def several_runs(d: Diff) -> bool:
    return max(len(d.before.runs), len(d.after.runs)) > 1


def verdict_facts(d: Diff) -> list[tuple[str, str]]:
    """(label, value) lines under the headline."""
    s = d.statistics
    ci = f"{signed_pct(d.ci95_pct[0])} to {signed_pct(d.ci95_pct[1])}" if d.ci95_pct else "–"
    out = [
        (mean_step_words(s.source), f"{ms(d.mean_step_us.before)} → {ms(d.mean_step_us.after)}"),
        ("change", f"{signed_pct(d.change_pct)} (95% CI {ci})"),
        (
            "steps",
            (
                f"{int(s.steps.before or 0):,} before, {int(s.steps.after or 0):,} after (effective "
                f"{s.effective_steps.before or 0:,.0f} / {s.effective_steps.after or 0:,.0f}); {s.source}"
            ),
        ),
        ("why this verdict", s.reason),
        ("run-to-run noise", _run_noise_text(s.run_noise_pct, s.run_noise_source)),
        ("method", s.method + f"; noise threshold ±{s.noise_threshold_pct:g}%"),
    ]
    if several_runs(d):
        out[2] = ("steps", out[2][1].replace(" (effective", " over all runs (effective", 1))
        out.insert(2, ("runs", _runs_text(d)))
        out[5] = ("run-to-run noise", s.run_noise_source)
    if s.more_steps_needed and d.ci95_pct is not None:  # without an interval "why this verdict" says it
        out.insert(3, ("inconclusive", f"{s.more_steps_needed:,} more steps per side would decide"))
    out = work_facts(d.work) + out
    if d.work.basis != "per-step":  # the step's own verdict, shown beside the one per unit of work
        out = [(f"per step: {k}" if k in ("change", "why this verdict") else k, v) for k, v in out]
        out.insert(0, ("why this verdict", d.work.verdict_reason or d.work.reason))
    out += [
        (
            f"{'train-only' if t.key.startswith('train') else 'wall-clock'} throughput",
            f"{_rate(t.before)} → {_rate(t.after)} {t.unit} ({signed_pct(t.change_pct)})",
        )
        for t in d.throughput
    ]
    return out


def work_words(w: WorkSide) -> str:
    """``4 samples, 1,024 tokens per step (job)`` or ``unknown``."""
    parts = [f"{v:,.10g} {unit}" for v, unit in ((w.job_samples, "samples"), (w.job_tokens, "tokens")) if v is not None]
    if not parts:
        return "unknown"
    ranks = f" (job of {w.ranks} ranks)" if w.ranks > 1 else ""
    return ", ".join(parts) + f" per step{ranks}"


def work_facts(w: WorkComparison) -> list[tuple[str, str]]:
    """(label, value) lines on the work per step and, per unit, the change of the time per unit and the
    throughput; nothing more than the basis when the work is unknown on both sides and the steps are alike."""
    out = [("compared", w.reason)]
    if w.before.origin == "unknown" and w.after.origin == "unknown" and w.basis == "per-step":
        return out
    out += [
        ("work before", f"{work_words(w.before)}; {w.before.source}"),
        ("work after", f"{work_words(w.after)}; {w.after.source}"),
    ]
    if w.unit is not None:
        ci = f" (95% CI {signed_pct(w.ci95_pct[0])} to {signed_pct(w.ci95_pct[1])})" if w.ci95_pct else ""
        tci = w.throughput_ci95_pct
        t_ci = f" (95% CI {signed_pct(tci[0])} to {signed_pct(tci[1])})" if tci else ""
        per = w.mean_us_per_unit
        out += [
            (
                f"time per {w.unit}",
                f"{per.before or 0:,.4g} → {per.after or 0:,.4g} µs: {signed_pct(w.change_pct)}{ci}",
            ),
            (f"{w.unit}s/s", f"{signed_pct(w.throughput_change_pct)}{t_ci}; per-step verdict: {w.step_verdict}"),
        ]
    if w.shapes_differ and w.basis == "cannot-tell":
        out.append(("input shapes that differ", "; ".join(w.shapes_differ)))
    return out


def throughput_table(d: Diff) -> TableView:
    """samples/s and tokens/s of the job and of each rank (:attr:`WorkComparison.rates`)."""
    rows = [
        [
            "job" if r.rank is None else f"rank {r.rank}",
            r.unit,
            _rate(r.before),
            _rate(r.after),
            signed_pct(r.change_pct),
        ]
        for r in d.work.rates
    ]
    return TableView(
        "Throughput (work per step ÷ step time)",
        ["", "unit", "before", "after", "change"],
        rows,
        ["l", "l", "r", "r", "r"],
        "The job: its work per step ÷ the verdict's mean step; a rank: its work per step ÷ its mean profiled step. "
        "Positive = more work per second.",
    )


def _runs_text(d: Diff) -> str:
    s = d.statistics
    dof = f", {s.dof:.1f} degrees of freedom (Welch–Satterthwaite over the runs)" if s.dof is not None else ""
    return (
        f"{len(d.before.runs)} before, {len(d.after.runs)} after; each side's mean step is the mean of its runs' "
        f"means (each run weighs equally; the Runs table lists them){dof}"
    )


def _run_noise_text(sigma_pct: float, source: str) -> str:
    value = f"σ_run {sigma_pct:g}% (±{1.96 * sigma_pct:.1f}% at 95%)" if sigma_pct > 0 else "σ_run 0, none included"
    return f"{value}: {source}" if source else value


def _rate(v: float | None) -> str:
    return "–" if v is None else f"{v:,.1f}"


def categories_table(d: Diff) -> TableView:
    rows = [[c.label, ms(c.before_us), ms(c.after_us), signed_ms(c.delta_us)] for c in d.categories]
    rows.append(
        [
            "step (mean over ranks)" if d.category_step_source else "step (trace mean)",
            ms(d.category_step_us.before),
            ms(d.category_step_us.after),
            signed_ms((d.category_step_us.after or 0) - (d.category_step_us.before or 0)),
        ]
    )
    return TableView(
        "Where the time moved (per step, every rank's mean)"
        if d.category_step_source
        else "Where the time moved (per step)",
        ["category", "before", "after", "Δ"],
        rows,
        ["l", "r", "r", "r"],
        "Busy categories and idle causes add up to the trace's mean step; (detail) rows are not in "
        "the sum. The verdict's mean step may come from more steps than the trace's."
        + (" Several runs a side: the mean over its runs' traces." if several_runs(d) else "")
        + (f" Rows: {d.category_step_source}." if d.category_step_source else ""),
        [c.group for c in d.categories] + ["total"],
        waterfall=True,
    )


def runs_table(d: Diff) -> TableView:
    """One row per run when a side has several: its steps and mean step against its side's mean (no rows with
    one run per side)."""
    if not several_runs(d):
        return TableView("Runs", [], [], [])
    rows = []
    for label, info, mean in (("BEFORE", d.before, d.mean_step_us.before), ("AFTER", d.after, d.mean_step_us.after)):
        for r in info.runs:
            vs = signed_pct(100.0 * (r.mean_step_us / mean - 1.0)) if mean else "–"
            rows.append([label, r.path, r.kind, f"{r.steps:,}", ms(r.mean_step_us), vs])
    s = d.statistics
    cv = [f"{side} {c:.1f}%" for side, c in (("before", s.run_cv_pct.before), ("after", s.run_cv_pct.after)) if c]
    note = "Each side's mean step is the mean of its runs' means."
    if cv:
        note += f" Run means vary by {', '.join(cv)} (standard deviation ÷ mean): the measured run-to-run noise."
    return TableView(
        "Runs (mean step of each)",
        ["side", "run", "kind", "steps", "mean step", "vs side mean"],
        rows,
        ["l", "l", "l", "r", "r", "r"],
        note,
    )


def _mover_name(m: Mover, width: int) -> str:
    if m.name_before and m.name_after and m.name_before != m.name_after:
        text = f"{m.name_before} → {m.name_after}"
    else:
        text = m.name_before or m.name_after or m.key
    return text if len(text) <= width else text[: width - 1] + "…"


def _match_text(m: Mover) -> str:
    if m.match == "normalised":
        return f"normalised ({m.how})"
    if m.match == "unlisted":
        return f"{m.how} (< {ms(m.bound_us, 3)})"
    return m.match


def movers_table(d: Diff, which: str, limit: int = 15, width: int = 90) -> TableView:
    movers = d.kernels if which == "kernels" else d.cpu_ops
    rows = [
        [
            _mover_name(m, width),
            m.category,
            ms(m.before_us, 3),
            ms(m.after_us, 3),
            signed_ms(m.delta_us),
            _match_text(m),
        ]
        for m in movers[:limit]
    ]
    title = "Top movers: kernels (per step" if which == "kernels" else "Top movers: CPU ops (per step, inclusive"
    title += ", every rank's mean)" if d.category_step_source else ")"
    return TableView(
        title, ["name", "category", "before", "after", "Δ", "matched"], rows, ["l", "l", "r", "r", "r", "l"]
    )


def findings_table(d: Diff) -> TableView:
    rows = [[f.code, f.name, f.status, ms(f.saving_before_us), ms(f.saving_after_us), f.note] for f in d.findings]
    return TableView(
        "Findings",
        ["code", "rule", "status", "saving before", "saving after", "note"],
        rows,
        ["l", "l", "l", "r", "r", "l"],
        "Savings are per step.",
    )


KIND_WORDS = {
    "replayed": "replayed",
    "upper-bound": "upper bound",
    "replayed-together": "replayed together",
    "sum": "sum of the parts",
}


def _in_ci(p: Prediction) -> str:
    if p.within_ci95 is None:
        return "cannot tell: interval wider than the step" if p.measured_ci95_us else "–"
    return "yes" if p.within_ci95 else "no"


def predictions_table(d: Diff) -> TableView:
    """The resolved findings' prediction (one row; several findings: one combined row, then its parts) against the
    measured change with its 95% interval, then the persisting findings whose saving shrank (no error)."""
    header = ["finding(s)", "status", "predicted saving", "measured (95% CI)", "prediction in CI", "error", "error %"]
    rows: list[list[str]] = []
    classes: list[str] = []
    p = d.predicted_vs_measured
    if p is not None:
        ci = f" ({ms(p.measured_ci95_us[0])} to {ms(p.measured_ci95_us[1])})" if p.measured_ci95_us else ""
        who = " + ".join(p.codes) if p.shared else f"{p.codes[0]} {p.parts[0].name}"
        status = f"resolved together ({len(p.codes)}), measured change shared" if p.shared else "resolved"
        rows.append(
            [
                who,
                status,
                f"{ms(p.predicted_us)} ({KIND_WORDS.get(p.predicted_kind, p.predicted_kind)})",
                ms(p.measured_us) + ci,
                _in_ci(p),
                signed_ms(p.error_us),
                signed_pct(p.error_pct),
            ]
        )
        classes.append("")
        if p.shared:
            for part in p.parts:
                rows.append(
                    [
                        f"  {part.code} {part.name}",
                        "resolved (part of the row above)",
                        f"{ms(part.predicted_us)} ({KIND_WORDS.get(part.predicted_kind, part.predicted_kind)})",
                        "–",
                        "–",
                        "–",
                        "–",
                    ]
                )
                classes.append("detail")
    for s in d.shrunk:
        rows.append(
            [
                f"{s.code} {s.name}",
                "persisting, smaller",
                f"saving {ms(s.saving_before_us)} → {ms(s.saving_after_us)}",
                "–",
                "–",
                "–",
                "–",
            ]
        )
        classes.append("detail")
    return TableView(
        "Predicted vs measured (per step)", header, rows, ["l", "l", "r", "r", "l", "r", "r"], d.predicted_note, classes
    )


def efficiency_table(d: Diff) -> TableView:
    rows = []
    for r in d.efficiency:
        who = "job" if r.rank is None else f"rank {r.rank}"
        rows.append(
            [
                who,
                f"{ms(r.median_step_us.before)} → {ms(r.median_step_us.after)}",
                f"{pct(r.utilization.before)} → {pct(r.utilization.after)}",
                f"{pct(r.mfu.before)} → {pct(r.mfu.after)}",
                f"{nbytes(r.memory_peak_bytes.before)} → {nbytes(r.memory_peak_bytes.after)}",
            ]
        )
    note = ""
    if d.straggler is not None:
        s = d.straggler
        note = (
            f"longest median step: rank {s.slowest_rank_before} before, rank {s.slowest_rank_after} after; "
            f"spread {_pct_num(s.spread_pct.before)} → {_pct_num(s.spread_pct.after)}"
        )
    return TableView(
        "Efficiency", ["", "median step", "utilization", "MFU", "memory peak"], rows, ["l", "r", "r", "r", "r"], note
    )


def scaling_table(d: Diff) -> TableView:
    """Scaling efficiency and its waterfall (no rows when both sides have the same number of ranks)."""
    sc = d.scaling
    if sc is None:
        return TableView("Scaling efficiency", [], [], [], "")
    small, large = ("BEFORE", "AFTER") if sc.smaller == "before" else ("AFTER", "BEFORE")
    per = "step" if sc.unit == "step" else sc.unit + "s"
    rate = f"{per}/s"
    rows = [
        [
            "ranks",
            f"{sc.ranks.before:.0f} → {sc.ranks.after:.0f}",
            f"ideal speed-up {sc.ideal_speedup:.2f}×, measured {sc.speedup:.2f}×",
        ],
        [
            "scaling efficiency",
            f"{sc.efficiency_pct:.1f}%",
            f"{large}'s throughput per rank ÷ {small}'s ({_rate(sc.throughput_per_rank.before)} → "
            f"{_rate(sc.throughput_per_rank.after)} {rate} per rank; the job: {_rate(sc.job_throughput.before)} → "
            f"{_rate(sc.job_throughput.after)} {rate})",
        ],
        [
            "lost per step",
            signed_ms(sc.lost_us),
            f"{large}'s step {ms(sc.step_us.after if small == 'BEFORE' else sc.step_us.before)} − ideal "
            f"{ms(sc.ideal_step_us)} ({small}'s step at {large}'s work per rank)",
        ],
    ]
    for p in sc.parts:
        rows.append([f"  {p.label}", signed_ms(p.lost_us), f"{ms(p.smaller_us)} → {ms(p.larger_us)} per step"])
    return TableView("Scaling efficiency", ["", "value", "detail"], rows, ["l", "r", "l"], sc.method)


def _pct_num(x: float | None) -> str:
    return "–" if x is None else f"{x:.1f}%"


def tables(d: Diff, movers_limit: int, name_width: int) -> list[TableView]:
    """The diff's tables in the order every renderer shows them: the runs (several a side only), throughput (when a
    side's work per step is known), categories, kernel
    and CPU-op movers (the top ``movers_limit`` each, names cut to ``name_width`` characters), findings, predicted
    vs measured, efficiency."""
    return [
        runs_table(d),
        throughput_table(d),
        categories_table(d),
        movers_table(d, "kernels", movers_limit, name_width),
        movers_table(d, "cpu_ops", movers_limit, name_width),
        findings_table(d),
        predictions_table(d),
        efficiency_table(d),
        scaling_table(d),
    ]
