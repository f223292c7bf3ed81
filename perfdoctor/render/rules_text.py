"""Terminal text of one rule (``perfdoctor rule``) and of the report's findings section."""

from __future__ import annotations

from typing import Any

from msgspec import UNSET
from rich.console import Group, JustifyMethod
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from perfdoctor.model import Report
from perfdoctor.model.report import SkippedCheck
from perfdoctor.render import view


def rule_text(spec: Any, metrics: dict[str, str], implemented: bool = True) -> Group:
    """A rule's TOML half as rich renderables (``spec`` is a catalogue.RuleSpec)."""
    parts: list[Any] = [
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


def _finding_cell(message: str, method: str) -> Text:
    """A finding's message and, on the next line, how its saving is estimated (the assumption behind the number in
    the "saves" column: the brief's rule that every saving shows its assumption next to it)."""
    if not method:
        return Text(message)
    return Text.assemble(message, "\n", (f"saving: {method}", "dim"))


def findings_renderables(report: Report) -> list[Any]:
    """The findings section of the terminal report: ranked table, fixes, skipped checks, the note."""
    if report.findings is UNSET:
        return []
    findings = report.findings
    out: list[Any] = []
    if not findings:
        out.append(Text("Findings: none", style="bold green"))
    else:
        t = Table(title="Findings, ranked by estimated saving per step", title_justify="left", show_lines=False)
        columns: tuple[tuple[str, JustifyMethod], ...] = (
            ("#", "right"),
            ("code", "left"),
            ("severity", "left"),
            ("saves", "right"),
            ("finding", "left"),
        )
        for col, just in columns:
            t.add_column(col, justify=just, overflow="fold")
        for f in findings:
            saving = (
                f"{'≈' if f.replayed else '≤'} {view.saving_ms(f.saving_us_per_step, 1)} ({f.saving_pct_of_step:.1f}%)"
                if f.saving_method
                else "-"
            )
            if f.saving_method and view.saving_once(f):
                saving += "\n" + view.saving_once(f)
            t.add_row(
                "-" if f.position is None else str(f.position),
                f"{f.code}\n{f.name}",
                Text(f.severity, style=_SEV_STYLE.get(f.severity, "")),
                saving,
                _finding_cell(f.message, f.saving_method),
            )
        out.append(t)
        if view.denominator_text(report):
            out.append(Text(view.denominator_text(report), style="dim"))
        for f in findings:
            out.append(Text.assemble((f"{f.code} fix: ", "bold"), f.fix))
        out.append(Text(report.findings_note if report.findings_note is not UNSET else "", style="dim"))
        out.append(Text("`perfdoctor rule CODE` shows the before/after example.", style="dim"))
    skipped = report.skipped_checks if report.skipped_checks is not UNSET else []
    if skipped:
        out.append(Text(f"Skipped checks ({len(skipped)}):", style="bold"))
        by_reason: dict[str, list[SkippedCheck]] = {}
        for s in skipped:
            by_reason.setdefault(s.reason, []).append(s)
        for reason, group in by_reason.items():  # checks sharing one reason: one line, their codes listed
            who = f"{group[0].code} {group[0].name}" if len(group) == 1 else ", ".join(s.code for s in group)
            out.append(Text(f"  {who}: {reason}", style="dim"))
    return out
