"""JSON renderer: the report dict, stable bytes (sorted keys, 2-space indent)."""

from __future__ import annotations

from typing import Any

import orjson

_OPTS = orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY


def render_json(report: dict[str, Any]) -> bytes:
    """The report as UTF-8 JSON bytes; NaN/inf become null (orjson's rule)."""
    return orjson.dumps(report, option=_OPTS) + b"\n"
