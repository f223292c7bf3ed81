"""The type of a document parsed from JSON without a schema (``json.loads``, ``msgspec.json.decode`` untyped): what
perfdoctor holds of a file whose keys it reads one by one (``run.json``, a trace's metadata), checking each value's
type where it reads it."""

from __future__ import annotations

from typing import TypeAlias

JsonValue: TypeAlias = "None | bool | int | float | str | list[JsonValue] | dict[str, JsonValue]"
JsonObject: TypeAlias = "dict[str, JsonValue]"


def number(value: JsonValue) -> float | None:
    """``value`` as a float when it is a JSON number (a bool is not one), else None."""
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def member(value: JsonValue, key: str) -> JsonValue:
    """``value[key]`` when ``value`` is a JSON object holding ``key``, else None."""
    return value.get(key) if isinstance(value, dict) else None
