"""The trace fields perfdoctor reads, as one table, with the bounds the reader enforces.

Each :class:`TraceField` row names a Kineto JSON key, its type, its value when
absent, its valid range and the tables that carry it as a column. From this
table :mod:`perfdoctor.trace.schema` generates the msgspec structs (the fast,
typed decode) and the fallback parser (one event at a time, for events whose
types do not match), and :mod:`perfdoctor.trace.columns` the table columns.
Adding a field is one row here.

Bounds (what the reader refuses; an event breaking one is dropped and counted):

- integers (ids, ranks, byte counts): within int64, ``[-2**63, 2**63 - 1]``, the
  width of the numpy columns they go to;
- ``ts`` (µs): finite and ``|ts| <= 2**53`` µs (about 285 years from the epoch),
  the largest value a float64 holds to 1 µs;
- ``dur`` (µs): finite and ``|dur| <=`` :data:`MAX_SPAN_US` (one day): a profiler
  records seconds to minutes, never a day, and a longer one is corrupt;
- nesting: an event nested deeper than :data:`MAX_NESTING` levels is dropped
  before it is decoded generically (no ``RecursionError``); a Kineto event is
  at most 4 levels deep (``args`` → ``Input Dims`` → a tensor's shape).

``MAX_SPAN_US`` also bounds where events may lie: :func:`perfdoctor.trace.tables.build_tables`
drops events more than one day from the trace's median timestamp (a ``ts`` of 0
among epoch timestamps would otherwise make a 53-year step).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
MAX_ABS_TS_US = float(2**53)
MAX_SPAN_US = 86_400e6  # one day in µs
MAX_NESTING = 32
MAX_RANK = 2**31 - 1  # c10d ranks are C ints

Kind = Literal["int", "float", "str", "id", "json_list"]


@dataclass(frozen=True)
class TraceField:
    """One field of a trace event.

    Attributes:
        attr: attribute name on the decoded struct (and the column name, unless ``column`` is set).
        key: the key in the Kineto JSON (inside ``args`` when ``in_args``).
        kind: ``int`` (int64), ``float``, ``str``, ``id`` (an int64 or a string, e.g. ``pid``
            "Spans"), ``json_list`` (a JSON list kept undecoded, e.g. ``Input Dims``).
        default: value when the key is absent; ``None`` marks an optional field.
        lo, hi: inclusive range of a number (None: no bound beyond the type's).
        tables: the tables that carry it as a column (see :mod:`perfdoctor.trace.columns`).
        in_args: the key sits in the event's ``args`` object.
        column: the column name when it differs from ``attr`` ("" = ``attr``).
        fills: another field's column this one fills where that one is absent (< 0): an older
            spelling of the same key.
        narrow: the column is stored as int32 when every value fits (ids that are small by nature).
    """

    attr: str
    key: str
    kind: Kind
    default: object
    lo: float | None = None
    hi: float | None = None
    tables: tuple[str, ...] = ()
    in_args: bool = True
    column: str = ""
    fills: str = ""
    narrow: bool = False

    @property
    def col(self) -> str:
        """The column name."""
        return self.column or self.attr


_DEV = ("gpu_annotations", "kernels", "memcpy", "memset", "syncs")
_GPU = ("kernels", "memcpy", "memset")
_EXT = ("cpu_ops", "annotations", "gpu_annotations", "kernels", "memcpy", "memset", "runtime", "syncs")
_I64 = (INT64_MIN, INT64_MAX)

#: The event's own keys (columns ``ts_us``, ``dur_us``, ``pid``, ``tid`` exist in every table).
EVENT_FIELDS: tuple[TraceField, ...] = (
    TraceField("ph", "ph", "str", "", in_args=False),
    TraceField("name", "name", "str", "", in_args=False),
    TraceField("cat", "cat", "str", "", in_args=False),
    TraceField("ts", "ts", "float", float("nan"), -MAX_ABS_TS_US, MAX_ABS_TS_US, in_args=False),
    TraceField("dur", "dur", "float", 0.0, -MAX_SPAN_US, MAX_SPAN_US, in_args=False),
    TraceField("pid", "pid", "id", -1, *_I64, in_args=False),
    TraceField("tid", "tid", "id", -1, *_I64, in_args=False),
    TraceField("id", "id", "id", -1, *_I64, ("flows",), in_args=False, column="flow_id"),
    TraceField("s", "s", "str", "", in_args=False),
)

#: The ``args`` keys perfdoctor reads, in the order their columns appear in each table.
ARG_FIELDS: tuple[TraceField, ...] = (
    TraceField("device", "device", "int", -1, *_I64, _DEV, narrow=True),
    TraceField("stream", "stream", "int", -1, *_I64, _DEV, narrow=True),
    TraceField("correlation", "correlation", "int", -1, *_I64, (*_GPU, "runtime", "syncs")),
    TraceField("external_id", "External id", "int", -1, *_I64, _EXT),
    # the 2021 Kineto generation's spelling
    TraceField("external_id_old", "external id", "int", -1, *_I64, fills="external_id"),
    TraceField("bytes", "bytes", "int", -1, *_I64, ("memcpy", "memset")),
    # gloo:* annotation ranges carry shapes too (host collectives)
    TraceField("input_dims", "Input Dims", "json_list", None, tables=("cpu_ops", "annotations")),
    TraceField("input_type", "Input type", "json_list", None, tables=("cpu_ops", "annotations")),
    TraceField("concrete_inputs", "Concrete Inputs", "json_list", None, tables=("cpu_ops",)),
    # NCCL kernels and record_param_comms ops name the collective, its message and its group
    TraceField("collective", "Collective name", "str", None, tables=("kernels", "cpu_ops")),
    TraceField("in_nelems", "In msg nelems", "int", None, *_I64, ("kernels", "cpu_ops")),
    TraceField("dtype", "dtype", "str", None, tables=("kernels", "cpu_ops")),
    TraceField("group_size", "Group size", "int", None, *_I64, ("kernels", "cpu_ops"), narrow=True),
    TraceField("mem_bytes", "Bytes", "int", None, *_I64, ("memory",)),
    TraceField("total_allocated", "Total Allocated", "int", None, *_I64, ("memory",)),
    TraceField("total_reserved", "Total Reserved", "int", None, *_I64, ("memory",)),
    TraceField("device_id", "Device Id", "int", None, *_I64, ("memory",), narrow=True),
    TraceField("device_type", "Device Type", "int", None, *_I64, ("memory",), narrow=True),
    TraceField("addr", "Addr", "int", None, *_I64, ("memory",)),
    # python_function events (``with_stack=True``): the frame's id and its caller's (null at a thread's root), and
    # the line the call was made from as ``perfdoctor profile --with-stack`` records it ("train.py(42): step"; Kineto
    # names a frame by its function's first line only)
    TraceField("python_id", "Python id", "int", -1, *_I64, ("python_functions",)),
    TraceField("python_parent_id", "Python parent id", "int", None, *_I64, ("python_functions",)),
    TraceField("python_caller", "Python caller", "str", None, tables=("python_functions",)),
    # metadata events (process_name / thread_name)
    TraceField("name", "name", "str", None),
    TraceField("labels", "labels", "str", None),
)
