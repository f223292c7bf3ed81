"""Markdown renderer of a diff, sized for a pull-request comment (always under :data:`MAX_CHARS`).

Trace text (kernel and op names, paths) is escaped with the report renderer's rules, so a name cannot open a
link, an image, raw HTML or break a table row. Tables are cut to :data:`MAX_ROWS` rows, names to
:data:`NAME_WIDTH` characters; if the text still exceeds the limit, tables are dropped from the end.
"""

from __future__ import annotations

from perfdoctor.diff.model import Diff, SideInfo
from perfdoctor.render import diff_view
from perfdoctor.render.markdown import esc

MAX_CHARS = 60_000  # GitHub's limit for a comment body is 65,536 characters
MAX_ROWS = 12
NAME_WIDTH = 80
_ICON = {"faster": "✅", "slower": "❌", "no-change": "➖", "inconclusive": "❔"}


def _table(view: diff_view.TableView) -> list[str]:
    if not view.rows:
        return []
    out = [
        f"### {view.title}",
        "",
        "| " + " | ".join(esc(h) for h in view.header) + " |",
        "|" + "|".join("---:" if a == "r" else "---" for a in view.align) + "|",
    ]
    out += ["| " + " | ".join(esc(c) for c in row) + " |" for row in view.rows[:MAX_ROWS]]
    if len(view.rows) > MAX_ROWS:
        out.append(f"\n_{len(view.rows) - MAX_ROWS} more rows in the JSON / HTML diff._")
    if view.note:
        out += ["", f"_{esc(view.note)}_"]
    return out + [""]


def _side(label: str, info: SideInfo) -> str:
    """``- **BEFORE**: path (kind, ranks, device)``, the side line of :func:`diff_view.side_line` with its label in
    bold."""
    return f"- **{label}**: " + esc(diff_view.side_line(label, info).removeprefix(f"{label}: "))


def render_diff_markdown(diff: Diff) -> str:
    """The diff as Markdown (str), at most :data:`MAX_CHARS` characters."""
    head = [
        f"## perfdoctor diff: {_ICON.get(diff.verdict, '')} {esc(diff.headline)}",
        "",
        _side("BEFORE", diff.before),
        _side("AFTER", diff.after),
    ]
    head += [f"- **{esc(label)}**: {esc(value)}" for label, value in diff_view.verdict_facts(diff)]
    head += [f"- ⚠️ {esc(w)}" for w in diff.warnings]
    head.append("")
    sections = [_table(v) for v in diff_view.tables(diff, MAX_ROWS, NAME_WIDTH)]
    text = "\n".join(head)
    for sec in sections:
        block = "\n".join(sec)
        if len(text) + len(block) + 200 > MAX_CHARS:
            text += "\n_Further tables left out to keep this comment under 60,000 characters._\n"
            break
        text += "\n" + block if block else ""
    return text[:MAX_CHARS]
