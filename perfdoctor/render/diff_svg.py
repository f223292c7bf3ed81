"""The waterfall chart of a diff: from the BEFORE step to the AFTER step, one bar per category's change.

Inline SVG with the report charts' conventions (:mod:`perfdoctor.render.svg`: stable 1-decimal coordinates,
escaped text, tooltips in ``<title>``). Horizontal bars, one row each: the BEFORE step (full bar), each busy or
idle category whose time per step changed by at least :data:`MIN_SHARE` of the BEFORE step (floating bar from the
running total; green = less time, red = more), the rest summed into one row, and the AFTER step (full bar).
"""

from __future__ import annotations

from perfdoctor.diff.model import Diff
from perfdoctor.render.svg import _f, _open, _t, fmt_num, nice_ticks

MIN_SHARE = 0.005
_LESS, _MORE, _TOTAL = "#2E7D32", "#C62828", "#4E5D73"


def _rows(diff: Diff) -> list[tuple[str, float, float, str]]:
    """(label, start ms, end ms, colour) per row."""
    before = (diff.category_step_us.before or 0.0) / 1e3
    after = (diff.category_step_us.after or 0.0) / 1e3
    cats = [c for c in diff.categories if c.group in ("busy", "idle")]
    big = [c for c in cats if abs(c.delta_us) / 1e3 >= MIN_SHARE * max(before, 1e-9)]
    rest = sum(c.delta_us for c in cats if c not in big) / 1e3
    rows = [("BEFORE step", 0.0, before, _TOTAL)]
    level = before
    for label, delta in [(c.label, c.delta_us / 1e3) for c in big] + ([("other changes", rest)] if rest else []):
        rows.append(
            (
                f"{label} ({'+' if delta > 0 else '−'}{abs(delta):,.2f} ms)",
                level,
                level + delta,
                _MORE if delta > 0 else _LESS,
            )
        )
        level += delta
    rows.append(("AFTER step", 0.0, after, _TOTAL))
    return rows


def waterfall(diff: Diff, width: int = 860) -> str:
    """The waterfall as an SVG string ("" when neither side has a breakdown)."""
    rows = _rows(diff)
    hi = max((max(a, b) for _, a, b, _ in rows), default=0.0)
    if hi <= 0:
        return ""
    label_w, right, top, row_h = 330, 16, 28, 22
    plot_w = width - label_w - right
    height = top + row_h * len(rows) + 24
    ticks = nice_ticks(0, hi)
    scale = plot_w / max(ticks[-1], hi)
    title = "Waterfall: mean step time from BEFORE to AFTER, by category (ms per step)"
    out = _open(width, height, title)
    out.append(f'<text x="{label_w}" y="16" class="lg">{_t(title)}</text>')
    for tv in ticks:
        x = label_w + tv * scale
        out.append(f'<line x1="{_f(x)}" x2="{_f(x)}" y1="{top - 4}" y2="{top + row_h * len(rows)}" class="grid"/>')
        out.append(
            f'<text x="{_f(x)}" y="{top + row_h * len(rows) + 14}" class="ax" '
            f'text-anchor="middle">{_t(fmt_num(tv))}</text>'
        )
    for i, (label, a, b, col) in enumerate(rows):
        y = top + i * row_h
        x0, x1 = label_w + min(a, b) * scale, label_w + max(a, b) * scale
        out.append(f'<text x="{label_w - 6}" y="{_f(y + 15)}" class="ax" text-anchor="end">{_t(label)}</text>')
        out.append(
            f'<rect x="{_f(x0)}" y="{_f(y + 3)}" width="{_f(max(x1 - x0, 1.0))}" height="{row_h - 6}" '
            f'fill="{col}"><title>{_t(label)}: {_t(f"{a:,.2f}")} → {_t(f"{b:,.2f}")} ms</title></rect>'
        )
    out.append("</svg>")
    return "\n".join(out)
