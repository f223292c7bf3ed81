"""Typed msgspec view of one Chrome/Kineto trace event, generated from :mod:`perfdoctor.trace.fields`.

Only the fields perfdoctor reads are declared; msgspec skips every other key
without building Python objects for it, which is what makes decoding fast.
The struct types carry each field's range (``msgspec.Meta``), so a value out
of range fails the typed decode like a wrong type does; such an event then
goes through :meth:`Schema.from_dict`, the generic fallback generated from the
same table, which coerces what it can (a string ``ts``, a float id) and raises
:class:`BadEvent` naming the key for what it cannot. :func:`build` generates all of
it from a field table; :data:`DEFAULT` is the one the reader uses.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Protocol, cast

import msgspec

from perfdoctor.trace.fields import ARG_FIELDS, EVENT_FIELDS, TraceField
from perfdoctor.trace.json_value import JsonObject

_NO_RAW = msgspec.Raw(b"")


class EventArgs(Protocol):
    """A generated ``Args`` struct as code reads it by name (every other field is read through the field table)."""

    @property
    def name(self) -> str | None: ...
    @property
    def labels(self) -> str | None: ...


class TraceEvent(Protocol):
    """A generated ``Event`` struct as code reads it by name (:data:`perfdoctor.trace.fields.EVENT_FIELDS`: kind
    ``str`` fields default to "", ``ts`` to NaN, ``dur`` to 0, the ``id`` fields are an int or a string)."""

    @property
    def ph(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def cat(self) -> str: ...
    @property
    def ts(self) -> float: ...
    @property
    def dur(self) -> float: ...
    @property
    def pid(self) -> int | str: ...
    @property
    def tid(self) -> int | str: ...
    @property
    def args(self) -> EventArgs: ...


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


def _coerce(f: TraceField, raw: JsonObject) -> object:
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


@dataclass(frozen=True)
class Schema:
    """The structs, decoders and fallback parser generated from one pair of field tables.

    Attributes:
        event_fields, arg_fields: the tables (see :mod:`perfdoctor.trace.fields`).
        event_type, args_type: the msgspec Struct types (``Event`` holds ``args: Args``).
        events_decoder: decodes ``[{event}, ...]``; one_decoder: decodes one ``{event}``.
    """

    event_fields: tuple[TraceField, ...]
    arg_fields: tuple[TraceField, ...]
    event_type: Callable[..., TraceEvent]
    args_type: Callable[..., EventArgs]
    events_decoder: msgspec.json.Decoder[list[TraceEvent]]
    one_decoder: msgspec.json.Decoder[TraceEvent]

    def from_dict(self, raw: object) -> TraceEvent:
        """Build an event from a generically decoded dict, coercing types.

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
        args = self.args_type(**{f.attr: _coerce(f, a) for f in self.arg_fields})
        return self.event_type(**{f.attr: _coerce(f, raw) for f in self.event_fields}, args=args)


def build(
    event_fields: tuple[TraceField, ...] = EVENT_FIELDS, arg_fields: tuple[TraceField, ...] = ARG_FIELDS
) -> Schema:
    """Generate the structs and decoders of a field table (the default one: :data:`DEFAULT`)."""
    args_type = msgspec.defstruct("Args", [_struct_field(f) for f in arg_fields], gc=False, module=__name__)
    event_type = msgspec.defstruct(
        "Event",
        [*(_struct_field(f) for f in event_fields), ("args", args_type, msgspec.field(default_factory=args_type))],
        gc=False,
        module=__name__,
    )
    # the structs are made at run time from the table: the Protocols above are what the code reads of them
    return Schema(
        event_fields,
        arg_fields,
        cast("Callable[..., TraceEvent]", event_type),
        cast("Callable[..., EventArgs]", args_type),
        cast("msgspec.json.Decoder[list[TraceEvent]]", msgspec.json.Decoder(list[event_type])),  # type: ignore[valid-type]
        cast("msgspec.json.Decoder[TraceEvent]", msgspec.json.Decoder(event_type)),
    )


DEFAULT = build()
LENIENT_DECODER = msgspec.json.Decoder()
if TYPE_CHECKING:  # the generated types, as the type checker sees them
    Args = EventArgs
    Event = TraceEvent
else:
    Args, Event = DEFAULT.args_type, DEFAULT.event_type
EVENTS_DECODER = DEFAULT.events_decoder
ONE_EVENT_DECODER = DEFAULT.one_decoder
event_from_dict = DEFAULT.from_dict
