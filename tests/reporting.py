"""Run `perfdoctor report` in-process as a user would and read back what it wrote."""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson

from perfdoctor.cli import main
from perfdoctor.model import Report, from_json


def cli(*args: str) -> tuple[int, str, str]:
    """``perfdoctor ARGS...`` in this process: (exit code, stdout, stderr)."""
    raw = io.BytesIO()
    out, err = io.TextIOWrapper(raw, encoding="utf-8"), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(list(args))
    out.flush()
    return rc, raw.getvalue().decode("utf-8"), err.getvalue()


def write_reports(paths: list[str], out_dir: Path, stem: str = "report") -> dict[str, Any]:
    """Write ``stem.html``, ``stem.md`` and ``stem.json`` with ``perfdoctor report PATHS -o ...``.

    Returns ``{"html": Path, "md": Path, "json": Path, "report": the JSON report dict}``.
    """
    res: dict[str, Any] = {}
    for fmt in ("json", "html", "md"):
        dest = out_dir / f"{stem}.{fmt}"
        rc, _, err = cli("report", *paths, "-o", str(dest))
        assert rc == 0, err
        res[fmt] = dest
    res["report"] = json.loads(res["json"].read_text())
    return res


def embedded_json(html: str) -> Any:
    """The report JSON embedded in the page's ``<script type="application/json" id="report-data">``."""
    start = html.index('<script type="application/json" id="report-data">') + len(
        '<script type="application/json" id="report-data">'
    )
    return json.loads(html[start : html.index("</script>", start)])


def csp(html: str) -> dict[str, list[str]]:
    """The Content-Security-Policy meta tag's directives."""
    import re

    m = re.search(r'<meta http-equiv="Content-Security-Policy" content="([^"]+)">', html)
    assert m, "no CSP meta tag"
    out = {}
    for part in m.group(1).replace("&#39;", "'").split(";"):
        words = part.split()
        if words:
            out[words[0]] = words[1:]
    return out


def as_report(doc: Report | Mapping[str, object], source: str = "report") -> Report:
    """``doc`` itself, or a report-shaped mapping (the JSON document as dicts, as a test edits it) read back the way
    perfdoctor reads a report file (:func:`perfdoctor.model.from_json`)."""
    if isinstance(doc, Report):
        return doc
    return from_json(orjson.dumps(doc, option=orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY), source)
