"""Memory-snapshot reports and snapshot diffs in the terminal, Markdown and HTML: each lays out the one
:class:`perfdoctor.render.snapshot_view.Page` (JSON is :func:`perfdoctor.snapshot.report.to_json`)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from perfdoctor.render.diff_view import TableView
from perfdoctor.render.snapshot_view import Page, diff_page, report_page
from perfdoctor.snapshot.report import SnapshotDiff, SnapshotReport, to_json


def page_of(doc: SnapshotReport | SnapshotDiff) -> Page:
    """The page of a report or a diff."""
    return report_page(doc) if isinstance(doc, SnapshotReport) else diff_page(doc)


def _rich_table(view: TableView) -> Table:
    table = Table(title=view.title, title_justify="left", caption=view.note or None, caption_justify="left")
    for head, align in zip(view.header, view.align):
        table.add_column(head, justify="right" if align == "r" else "left", overflow="fold")
    for row in view.rows:
        table.add_row(*row)
    return table


def render_terminal(doc: SnapshotReport | SnapshotDiff, console: Console) -> None:
    """Print the headline, the inputs, each section's facts and tables, then the notes."""
    page = page_of(doc)
    console.print(Text(page.headline, style="bold"))
    for line in page.inputs:
        console.print(Text(line, style="dim"))
    for section in page.sections:
        console.print()
        console.print(Text(section.title, style="bold underline"))
        for label, value in section.facts:
            console.print(Text.assemble((f"{label}: ", "bold"), value))
        for table in section.tables:
            console.print(_rich_table(table))
    for note in page.notes:
        console.print(Text(f"note: {note}", style="yellow"))


def _md(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;").replace("*", "\\*")


def render_markdown(doc: SnapshotReport | SnapshotDiff) -> str:
    """The page as GitHub Markdown (trace text escaped: ``|``, ``<``, ``*``)."""
    page = page_of(doc)
    out = [f"# {page.title}", "", f"**{_md(page.headline)}**", ""]
    out += [f"- {_md(line)}" for line in page.inputs] + [""]
    for section in page.sections:
        out += [f"## {_md(section.title)}", ""]
        out += [f"- **{_md(label)}**: {_md(value)}" for label, value in section.facts]
        out.append("")
        for t in section.tables:
            out += [f"### {_md(t.title)}", "", "| " + " | ".join(_md(h) for h in t.header) + " |"]
            out.append("|" + "|".join("---:" if a == "r" else "---" for a in t.align) + "|")
            out += ["| " + " | ".join(_md(c) for c in row) + " |" for row in t.rows]
            out += ["", f"_{_md(t.note)}_", ""] if t.note else [""]
    if page.notes:
        out += ["## Notes", ""] + [f"- {_md(n)}" for n in page.notes] + [""]
    return "\n".join(out)


def render_html(doc: SnapshotReport | SnapshotDiff) -> str:
    """The page as one self-contained HTML file (jinja2, autoescape on, no script, no network)."""
    from perfdoctor.render.html import CSP, base_env

    return str(base_env().get_template("snapshot.html.j2").render(page=page_of(doc), csp=CSP))


def render_bytes(doc: SnapshotReport | SnapshotDiff, fmt: str) -> bytes:
    """``fmt`` ("json", "md", "html") as UTF-8 bytes."""
    if fmt == "json":
        return to_json(doc)
    if fmt == "md":
        return render_markdown(doc).encode()
    if fmt == "html":
        return render_html(doc).encode()
    raise ValueError(f"unknown snapshot report format {fmt!r}")
