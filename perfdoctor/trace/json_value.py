"""The type of a document parsed from JSON without a schema (``json.loads``, ``msgspec.json.decode`` untyped): what
perfdoctor holds of a file whose keys it reads one by one (``run.json``, a trace's metadata), checking each value's
type where it reads it."""

from __future__ import annotations

from typing import TypeAlias

JsonValue: TypeAlias = "None | bool | int | float | str | list[JsonValue] | dict[str, JsonValue]"
JsonObject: TypeAlias = "dict[str, JsonValue]"
