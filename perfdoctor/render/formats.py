"""Report file formats by extension, and rendering a report to the bytes of one."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from perfdoctor.errors import PerfDoctorError

if TYPE_CHECKING:
    from perfdoctor.model import Report

EXTENSIONS = {".html": "html", ".htm": "html", ".md": "md", ".markdown": "md", ".json": "json"}


def format_for(path: str) -> str:
    """ "html", "md" or "json" from the file extension.

    Raises:
        PerfDoctorError: the extension is none of .html/.htm, .md/.markdown, .json.
    """
    fmt = EXTENSIONS.get(Path(path).suffix.lower())
    if fmt is None:
        raise PerfDoctorError(f"{path}: cannot tell the report format from the extension; use .html, .md or .json")
    return fmt


def render_chunks(report: Report, fmt: str) -> Iterator[bytes]:
    """:func:`render_bytes` in pieces (JSON: a rank at a time, :func:`perfdoctor.model.codec.json_chunks`), for a
    writer that need not hold the whole report: a 4,096-rank JSON report is ~300 MB."""
    if fmt == "json":
        from perfdoctor.model.codec import json_chunks

        yield from json_chunks(report)
    else:
        yield render_bytes(report, fmt)


def render_bytes(report: Report, fmt: str) -> bytes:
    """The report in ``fmt`` ("html", "md", "json") as UTF-8 bytes."""
    if fmt == "json":
        from perfdoctor.model import to_json

        return to_json(report)
    if fmt == "md":
        from perfdoctor.render.markdown import render_markdown

        return render_markdown(report).encode()
    if fmt == "html":
        from perfdoctor.render.html import render_html

        return render_html(report).encode()
    raise ValueError(f"unknown report format {fmt!r}")
