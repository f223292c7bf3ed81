"""HTML renderer of a diff: one self-contained, offline, deterministic page.

The report page's rules (:mod:`perfdoctor.render.html`): jinja2 with autoescape on (``templates/diff.html.j2``),
inline CSS, the waterfall as inline SVG, no script, the same Content-Security-Policy forbidding every network
load, and the diff JSON embedded through ``tojson`` (HTML-safe: a kernel named ``</script>`` stays data). No
wall-clock text unless ``generated_at`` is given.
"""

from __future__ import annotations

import msgspec
from markupsafe import Markup

from perfdoctor.diff.model import Diff
from perfdoctor.render import diff_view
from perfdoctor.render.diff_svg import waterfall
from perfdoctor.render.html import CSP, base_env


def render_diff_html(diff: Diff, generated_at: str | None = None) -> str:
    """The diff as one HTML page (str); ``generated_at`` stamps the footer (None keeps output byte-stable)."""
    tables = diff_view.tables(diff, 25, 160)
    context = {
        "diff": diff,
        "csp": CSP,
        "generated_at": generated_at,
        "facts": diff_view.verdict_facts(diff),
        "sides": [diff_view.side_line("BEFORE", diff.before), diff_view.side_line("AFTER", diff.after)],
        "tables": [t for t in tables if t.rows],
        "waterfall": Markup(waterfall(diff)),
        "data": msgspec.to_builtins(diff),
    }
    return str(base_env().get_template("diff.html.j2").render(**context))
