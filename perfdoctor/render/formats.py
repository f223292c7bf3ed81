"""Report file formats by extension, and rendering a report dict to the bytes of one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from perfdoctor.errors import PerfDoctorError

EXTENSIONS = {".html": "html", ".htm": "html", ".md": "md", ".markdown": "md", ".json": "json"}


def format_for(path: str) -> str:
    """"html", "md" or "json" from the file extension.

    Raises:
        PerfDoctorError: the extension is none of .html/.htm, .md/.markdown, .json.
    """
    fmt = EXTENSIONS.get(Path(path).suffix.lower())
    if fmt is None:
        raise PerfDoctorError(f"{path}: cannot tell the report format from the extension; use .html, .md or .json")
    return fmt


def render_bytes(report: dict[str, Any], fmt: str) -> bytes:
    """The report in ``fmt`` ("html", "md", "json") as UTF-8 bytes."""
    if fmt == "json":
        from perfdoctor.render.json_out import render_json

        return render_json(report)
    if fmt == "md":
        from perfdoctor.render.markdown import render_markdown

        return render_markdown(report).encode()
    if fmt == "html":
        from perfdoctor.render.html import render_html

        return render_html(report).encode()
    raise ValueError(f"unknown report format {fmt!r}")
