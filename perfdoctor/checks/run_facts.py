"""Typed reads of ``run.json``, the facts ``perfdoctor profile`` records (a JSON document without a schema): each
value's type is checked where a check reads it, and a value of another type reads as absent."""

from __future__ import annotations

from collections.abc import Mapping


def table(doc: Mapping[str, object], key: str) -> Mapping[str, object]:
    """``doc[key]`` when it is a table (a JSON object), else {}."""
    value = doc.get(key)
    return value if isinstance(value, dict) else {}


def tables(doc: Mapping[str, object], key: str) -> list[Mapping[str, object]]:
    """The tables of the list ``doc[key]`` (run.json's ``ranks``, a rank's ``batch_fingerprints``), in order; []
    when absent or not a list."""
    value = doc.get(key)
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def number(doc: Mapping[str, object], key: str) -> float | None:
    """``doc[key]`` when it is a number (a boolean is not), else None."""
    value = doc.get(key)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
