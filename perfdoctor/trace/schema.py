"""Typed msgspec view of one Chrome/Kineto trace event.

Only the fields perfdoctor reads are declared; msgspec skips every other key
without building Python objects for it, which is what makes decoding fast.
Field names follow Kineto's JSON (``"External id"`` in new traces,
``"external id"`` in the 2021 ``Kernel``/``Runtime`` generation).
"""

from __future__ import annotations

import msgspec

Num = int | float
IntOrStr = int | str


class Args(msgspec.Struct, gc=False):
    """The ``args`` keys perfdoctor uses; integer ids default to -1 (absent)."""

    correlation: int = -1
    external_id: int = msgspec.field(default=-1, name="External id")
    external_id_old: int = msgspec.field(default=-1, name="external id")
    device: int = -1
    stream: int = -1
    bytes: int = -1
    # kept undecoded (empty Raw when absent): only roofline analysis needs shapes
    input_dims: msgspec.Raw = msgspec.field(default=msgspec.Raw(b""), name="Input Dims")
    input_type: msgspec.Raw = msgspec.field(default=msgspec.Raw(b""), name="Input type")
    concrete_inputs: msgspec.Raw = msgspec.field(default=msgspec.Raw(b""), name="Concrete Inputs")
    collective: str | None = msgspec.field(default=None, name="Collective name")
    in_nelems: int | None = msgspec.field(default=None, name="In msg nelems")
    dtype: str | None = None
    group_size: int | None = msgspec.field(default=None, name="Group size")
    # memory instant events ("[memory]")
    mem_bytes: int | None = msgspec.field(default=None, name="Bytes")
    total_allocated: int | None = msgspec.field(default=None, name="Total Allocated")
    total_reserved: int | None = msgspec.field(default=None, name="Total Reserved")
    device_id: int | None = msgspec.field(default=None, name="Device Id")
    device_type: int | None = msgspec.field(default=None, name="Device Type")
    # metadata events (process_name / thread_name)
    name: str | None = None
    labels: str | None = None
    flops: Num | None = None


class Event(msgspec.Struct, gc=False):
    """One trace event; ``ts``/``dur`` are microseconds (Chrome trace format)."""

    ph: str = ""
    name: str = ""
    cat: str = ""
    ts: float = float("nan")
    dur: float = 0.0
    pid: IntOrStr = -1
    tid: IntOrStr = -1
    id: IntOrStr = -1
    s: str = ""
    args: Args = msgspec.field(default_factory=Args)


EVENTS_DECODER = msgspec.json.Decoder(list[Event])
ONE_EVENT_DECODER = msgspec.json.Decoder(Event)
LENIENT_DECODER = msgspec.json.Decoder()


def _to_int(value: object) -> int:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value == value:
        return int(value)
    if isinstance(value, str):
        try:
            return int(float(value))
        except ValueError:
            return -1
    return -1


def _to_float(value: object, default: float) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return default
    return default


def event_from_dict(raw: object) -> Event | None:
    """Build an :class:`Event` from a generically decoded dict, coercing types.

    Used for the rare events whose field types do not match the typed schema
    (a string ``ts``, a float ``bytes``); returns None for a non-object.
    """
    if not isinstance(raw, dict):
        return None
    a = raw.get("args") if isinstance(raw.get("args"), dict) else {}
    args = Args(
        correlation=_to_int(a.get("correlation", -1)),
        external_id=_to_int(a.get("External id", -1)),
        external_id_old=_to_int(a.get("external id", -1)),
        device=_to_int(a.get("device", -1)),
        stream=_to_int(a.get("stream", -1)),
        bytes=_to_int(a.get("bytes", -1)),
        input_dims=msgspec.Raw(msgspec.json.encode(a["Input Dims"])) if "Input Dims" in a else msgspec.Raw(b""),
        input_type=msgspec.Raw(msgspec.json.encode(a["Input type"])) if "Input type" in a else msgspec.Raw(b""),
        concrete_inputs=(msgspec.Raw(msgspec.json.encode(a["Concrete Inputs"])) if "Concrete Inputs" in a
                         else msgspec.Raw(b"")),
        collective=str(a["Collective name"]) if "Collective name" in a else None,
        in_nelems=_to_int(a["In msg nelems"]) if "In msg nelems" in a else None,
        dtype=str(a["dtype"]) if "dtype" in a else None,
        group_size=_to_int(a["Group size"]) if "Group size" in a else None,
        mem_bytes=_to_int(a["Bytes"]) if "Bytes" in a else None,
        total_allocated=_to_int(a["Total Allocated"]) if "Total Allocated" in a else None,
        total_reserved=_to_int(a["Total Reserved"]) if "Total Reserved" in a else None,
        device_id=_to_int(a["Device Id"]) if "Device Id" in a else None,
        device_type=_to_int(a["Device Type"]) if "Device Type" in a else None,
        name=str(a["name"]) if isinstance(a.get("name"), str) else None,
        labels=str(a["labels"]) if isinstance(a.get("labels"), str) else None,
        flops=_to_float(a.get("flops"), 0.0) if "flops" in a else None,
    )

    def as_id(v: object) -> int | str:
        return v if isinstance(v, (int, str)) and not isinstance(v, bool) else -1

    return Event(
        ph=str(raw.get("ph", "")),
        name=str(raw.get("name", "")),
        cat=str(raw.get("cat", "")),
        ts=_to_float(raw.get("ts"), float("nan")),
        dur=_to_float(raw.get("dur"), 0.0),
        pid=as_id(raw.get("pid", -1)),
        tid=as_id(raw.get("tid", -1)),
        id=as_id(raw.get("id", -1)),
        s=str(raw.get("s", "")),
        args=args,
    )
