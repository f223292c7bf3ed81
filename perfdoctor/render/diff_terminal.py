"""Terminal renderer of a diff (rich; fixed width in tests)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from perfdoctor.diff.model import Diff
from perfdoctor.render import diff_view

_STYLE = {"faster": "bold green", "slower": "bold red", "no-change": "bold", "inconclusive": "bold yellow"}


def _table(view: diff_view.TableView) -> Table:
    table = Table(title=view.title, title_justify="left", caption=view.note or None, caption_justify="left")
    for head, align in zip(view.header, view.align):
        table.add_column(head, justify="right" if align == "r" else "left", overflow="fold")
    for row in view.rows:
        table.add_row(*row)
    return table


def render_diff_terminal(diff: Diff, console: Console) -> None:
    """Print the verdict, the facts behind it, and each table that has rows."""
    console.print(Text(diff.headline, style=_STYLE.get(diff.verdict, "bold")))
    console.print(diff_view.side_line("BEFORE", diff.before, 7), highlight=False, markup=False)
    console.print(diff_view.side_line("AFTER", diff.after, 7), highlight=False, markup=False)
    for label, value in diff_view.verdict_facts(diff):
        console.print(Text.assemble((f"{label}: ", "bold"), value))
    for w in diff.warnings:
        console.print(Text(f"warning: {w}", style="yellow"))
    views = diff_view.tables(diff, 10, 70)
    for view in views:
        if view.rows:
            console.print(_table(view))
