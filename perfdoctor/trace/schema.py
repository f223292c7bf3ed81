"""Typed msgspec view of one Chrome/Kineto trace event, generated from :mod:`perfdoctor.trace.fields`.

Only the fields perfdoctor reads are declared; msgspec skips every other key
without building Python objects for it, which is what makes decoding fast.
The struct types carry each field's range (``msgspec.Meta``), so a value out
of range fails the typed decode like a wrong type does; such an event then
goes through :func:`event_from_dict`, the generic fallback generated from the
same table, which coerces what it can (a string ``ts``, a float id) and raises
:class:`BadEvent` naming the key for what it cannot.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Annotated, Any

import msgspec

from perfdoctor.trace.fields import ARG_FIELDS, EVENT_FIELDS, TraceField

_NO_RAW = msgspec.Raw(b"")


class BadEvent(ValueError):
    """An event the reader drops; ``reason`` says which key and why (short, for counting)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _struct_type(f: TraceField) -> Any:
    """The msgspec annotation of one field: its type, range and optionality."""
    meta = msgspec.Meta(ge=f.lo, le=f.hi) if f.lo is not None or f.hi is not None else None
    base: Any
    if f.kind == "int":
        base = Annotated[int, meta] if meta else int
    elif f.kind == "float":
        base = Annotated[float, meta] if meta else float
    elif f.kind == "id":
        base = (Annotated[int, meta] if meta else int) | str
    elif f.kind == "json_list":
        return msgspec.Raw  # kept undecoded; an empty Raw means absent
    else:
        base = str
    return base | None if f.default is None else base


def _struct_field(f: TraceField) -> tuple[str, Any, Any]:
    default = _NO_RAW if f.kind == "json_list" else f.default
    return (f.attr, _struct_type(f), msgspec.field(default=default, name=f.key))


if TYPE_CHECKING:  # the generated types, as the type checker sees them
    Args = Any
    Event = Any
else:
    Args = msgspec.defstruct("Args", [_struct_field(f) for f in ARG_FIELDS], gc=False,
                             module=__name__)
    Event = msgspec.defstruct(
        "Event", [*(_struct_field(f) for f in EVENT_FIELDS), ("args", Args, msgspec.field(default_factory=Args))],
        gc=False, module=__name__)

EVENTS_DECODER = msgspec.json.Decoder(list[Event])
ONE_EVENT_DECODER = msgspec.json.Decoder(Event)
LENIENT_DECODER = msgspec.json.Decoder()


def _number(f: TraceField, value: object) -> float | int | None:
    """``value`` as a number of ``f``'s kind, or None when it is not a number (nor a numeric string)."""
    if isinstance(value, bool):
        value = int(value)
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            return None
    if not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        raise BadEvent(f"'{f.key}' is not finite")
    if (f.lo is not None and value < f.lo) or (f.hi is not None and value > f.hi):
        raise BadEvent(f"'{f.key}' out of range")
    return int(value) if f.kind in ("int", "id") else float(value)


def _coerce(f: TraceField, raw: dict[str, Any]) -> object:
    """The value of field ``f`` from a generically decoded object; raises BadEvent."""
    if f.key not in raw:
        return _NO_RAW if f.kind == "json_list" else f.default
    value = raw[f.key]
    if f.kind == "json_list":
        return msgspec.Raw(msgspec.json.encode(value)) if isinstance(value, list) else _NO_RAW
    if f.kind == "str":
        if isinstance(value, (dict, list)):
            raise BadEvent(f"'{f.key}' is not a string")
        return str(value) if value is not None or f.default is not None else None
    if f.kind == "id" and isinstance(value, str):
        return value
    if value is None:
        return f.default
    num = _number(f, value)
    return f.default if num is None else num


def event_from_dict(raw: object) -> Any:
    """Build an ``Event`` from a generically decoded dict, coercing types.

    Used for the rare events whose field types do not match the typed schema
    (a string ``ts``, a float ``bytes``). A numeric string becomes a number; a
    value that is not a number where one is expected counts as absent.

    Raises:
        BadEvent: ``raw`` is not an object, or a value is out of its field's
            range (see :mod:`perfdoctor.trace.fields`) or not finite.
    """
    if not isinstance(raw, dict):
        raise BadEvent("not a JSON object")
    a = raw.get("args")
    a = a if isinstance(a, dict) else {}
    args = Args(**{f.attr: _coerce(f, a) for f in ARG_FIELDS})
    return Event(**{f.attr: _coerce(f, raw) for f in EVENT_FIELDS}, args=args)
