"""Terminal text of one rule (``perfdoctor rule``) and of the report's findings section."""

from __future__ import annotations

from msgspec import UNSET
from rich.console import Group, JustifyMethod, RenderableType
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from perfdoctor.checks.catalogue import RuleSpec
from perfdoctor.model import Report
from perfdoctor.model.report import FindingSection, SkippedCheck
from perfdoctor.render import view


def rule_text(spec: RuleSpec, metrics: dict[str, str], implemented: bool = True) -> Group:
    """A rule's TOML half as rich renderables."""
    parts: list[RenderableType] = [
        Text(f"{spec.code} {spec.name}", style="bold"),
        Text(f"category: {spec.category}   severity (at most): {spec.severity}   scope: {spec.scope}"),
    ]
    if not implemented:
        parts.append(
            Text("no check is implemented for this rule yet: it is always reported as skipped", style="yellow")
        )
    if spec.requires:
        parts.append(Text(f"needs: {', '.join(spec.requires)}"))
    for title, body in (
        ("What it detects", spec.summary),
        ("Why it costs time", spec.why),
        ("How the saving is estimated", spec.saving),
        ("Fix", spec.fix),
        # the fixes a check picks by what the trace shows (fix_<situation> of the TOML)
        *((f"Fix ({k[4:]})", v) for k, v in sorted(spec.variants.items()) if k.startswith("fix_")),
    ):
        parts += [Text(""), Text(title, style="bold underline"), Text(body)]
    for title, code in (("Before", spec.example_before), ("After", spec.example_after)):
        parts += [Text(""), Text(title, style="bold underline"), Syntax(code.strip("\n"), "python", theme="ansi_dark")]
    if spec.thresholds:
        t = Table(title="Thresholds (override with --rules DIR)", title_justify="left")
        t.add_column("key")
        t.add_column("value", justify="right")
        for k, v in spec.thresholds.items():
            t.add_row(k, str(v))
        parts += [Text(""), t]
    if spec.when:
        parts += [Text(""), Text(f"user metric rule: {spec.when}")]
    if metrics:
        t = Table(title="Metrics (usable in user rules as CODE.metric)", title_justify="left")
        t.add_column("metric")
        t.add_column("meaning", overflow="fold")
        for k, v in metrics.items():
            t.add_row(f"{spec.code}.{k}", v)
        parts += [Text(""), t]
    if spec.references:
        parts += [Text(""), Text("References", style="bold underline")] + [Text(f"- {r}") for r in spec.references]
    parts.append(Text(f"\nsource: {spec.path}", style="dim"))
    return Group(*parts)


_SEV_STYLE = {"high": "bold red", "medium": "yellow", "low": "cyan"}


def _saves(f: FindingSection) -> str:
    """The "saves" cell: "≈ 56.8 ms (32.0%)", "≤ …" for an upper bound, "-" without an estimate."""
    if not f.saving_method:
        return "-"
    return f"{'≈' if f.replayed else '≤'} {view.saving_ms(f.saving_us_per_step, 1)} ({f.saving_pct_of_step:.1f}%)"


def _plan_table(report: Report, plan: list[FindingSection]) -> Table:
    """The fix plan as a table of headlines: #, code, headline, saves (marginal), predicted step after."""
    job = len(report.ranks) > 1 or (report.summary.n_ranks > 1)
    t = Table(title="Fix plan: each fix's saving on top of the fixes above it (replayed)", title_justify="left")
    columns: tuple[tuple[str, JustifyMethod], ...] = (
        ("#", "right"),
        ("code", "left"),
        ("finding", "left"),
        ("saves", "right"),
        ("step after", "right"),
    )
    for col, just in columns:
        t.add_column(col, justify=just, no_wrap=col != "finding")
    for f in plan:
        head = view.headline(f)
        if job and f.ranks:
            head += f" [{len(f.ranks)} of {report.summary.n_ranks} ranks]"
        t.add_row(
            str(f.plan_position),
            Text(f.code, style=_SEV_STYLE.get(f.severity, "")),
            head,
            _saves(f),
            view.ms(f.step_after_us, 1),
        )
    return t


def _others(title: str, findings: list[FindingSection], note: bool) -> list[RenderableType]:
    """Findings off the plan, a line each: code, headline, and why (``note``) or their saving."""
    if not findings:
        return []
    out: list[RenderableType] = [Text(title, style="bold")]
    for f in findings:
        alone = f.saving_alone_us_per_step
        tail = f.plan_note + (f"; {view.saving_ms(alone, 1)} alone" if alone is not None else "") if note else _saves(f)
        out.append(Text.assemble("  ", (f.code, _SEV_STYLE.get(f.severity, "")), f" {view.headline(f)}"))
        out.append(Text(f"        {tail}", style="dim"))
    return out


def _details(f: FindingSection) -> list[RenderableType]:
    """A finding's evidence (key/value table) and method, for ``--details``."""
    view_f = view.finding(f)
    t = Table(title=f"{f.code} {f.name}: evidence", title_justify="left", show_header=False)
    t.add_column("measured")
    t.add_column("value", overflow="fold")
    for k, v in view_f["evidence"]:
        t.add_row(k, v)
    out: list[RenderableType] = [t, Text(f.message)]
    if f.saving_method:
        out.append(Text.assemble(("method: ", "bold"), (f.saving_method, "dim")))
    out.append(Text.assemble((f"{f.code} fix: ", "bold"), f.fix.strip()))
    if f.source is not None and f.source.frames:
        out.append(Text.assemble(("source: ", "bold"), " ← ".join(f.source.frames)))
    return out


def findings_renderables(report: Report, details: bool = False) -> list[RenderableType]:
    """The findings section of the terminal report: the fix plan as a table of headlines, each plan entry's fix in
    one or two lines, the findings off the plan a line each, skipped checks; ``details`` adds every finding's
    evidence, message and method, and every skip's reason."""
    if report.findings is UNSET:
        return []
    findings = report.findings
    out: list[RenderableType] = []
    plan = [f for f in findings if f.plan_position is not None]
    off = [f for f in findings if f.plan_position is None and f.plan_note]
    rest = [f for f in findings if f.plan_position is None and not f.plan_note]
    if not findings:
        out.append(Text("Findings: none", style="bold green"))
    else:
        if plan:
            out.append(_plan_table(report, plan))
        out += _others("Off the plan (replayed):", off, note=True)
        out += _others(
            "Other findings (each saving alone; ≤: an upper bound, not replayed, which may count time the plan's fixes "
            "remove; -: not estimated):"
            if plan or off
            else "Findings:",
            rest,
            note=False,
        )
        if view.denominator_text(report):
            out.append(Text(view.denominator_text(report), style="dim"))
        shown = [] if details else plan or rest[:1]  # --details prints every finding's whole fix below
        for f in shown:
            where = view.source_text(f) if f.source is not None else ""
            fix = view.short_fix(f.fix)
            out.append(Text.assemble((f"{f.code} fix: ", "bold"), fix, (f" [{where}]" if where else "", "dim")))
        hints = {f.source_hint for f in shown if f.source is None and f.source_hint}
        if hints:  # once, not beside every fix
            out.append(Text(f"Source lines: {sorted(hints)[0]}.", style="dim"))
        if details:
            for f in findings:
                out += _details(f)
        note = report.findings_note if report.findings_note is not UNSET else ""
        out.append(Text(note if details else view.first_sentence(note), style="dim"))
        out.append(
            Text(
                "--details: each finding's evidence and method; `perfdoctor rule CODE`: the before/after example.",
                style="dim",
            )
        )
    skipped = report.skipped_checks if report.skipped_checks is not UNSET else []
    if skipped and not details:
        out.append(
            Text(f"Skipped checks ({len(skipped)}): {', '.join(s.code for s in skipped)} (--details: why)", style="dim")
        )
    elif skipped:
        out.append(Text(f"Skipped checks ({len(skipped)}):", style="bold"))
        by_reason: dict[str, list[SkippedCheck]] = {}
        for s in skipped:
            by_reason.setdefault(s.reason, []).append(s)
        for reason, group in by_reason.items():  # checks sharing one reason: one line, their codes listed
            who = f"{group[0].code} {group[0].name}" if len(group) == 1 else ", ".join(s.code for s in group)
            out.append(Text(f"  {who}: {reason}", style="dim"))
    return out
