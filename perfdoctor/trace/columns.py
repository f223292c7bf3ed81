"""Turn decoded events into per-table numpy columns, one chunk at a time.

Every event gets a ``kind`` from its Kineto phase and category (both category
generations: 2021's ``Operator``/``Kernel``/``Runtime``/``Memcpy``/``Memset``
and today's ``cpu_op``/``kernel``/``cuda_runtime``/...), and goes straight to
its table with only the columns that table needs, so no wide per-event
array is ever built (memory stays near the size of the tables). Names are
interned into one string table shared by all tables (``name_id``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import repeat
from operator import attrgetter, is_
from typing import Any

import numpy as np

from perfdoctor.trace.fields import ARG_FIELDS, EVENT_FIELDS, INT64_MAX, INT64_MIN, MAX_NESTING, TraceField
from perfdoctor.trace.schema import Event
from perfdoctor.trace.splitter import nesting_depth

# Event kinds (int8 codes).
OTHER, CPU_OP, ANNOTATION, GPU_ANNOTATION, PYTHON, KERNEL, MEMCPY, MEMSET = range(8)
RUNTIME, DRIVER, SYNC, FLOW_START, FLOW_END, MEMORY, META, TRACE = range(8, 16)
OVERHEAD = 16  # Kineto's own 'overhead' records (CUPTI's "Activity Buffer Request", "Instrumentation", ...)

_CAT_KIND = {
    "cpu_op": CPU_OP,
    "operator": CPU_OP,
    "user_annotation": ANNOTATION,
    "gpu_user_annotation": GPU_ANNOTATION,
    "python_function": PYTHON,
    "kernel": KERNEL,
    "gpu_memcpy": MEMCPY,
    "memcpy": MEMCPY,
    "gpu_memset": MEMSET,
    "memset": MEMSET,
    "cuda_runtime": RUNTIME,
    "runtime": RUNTIME,
    "cuda_driver": DRIVER,
    "cuda_sync": SYNC,
    # other accelerators Kineto records with the same event shape (device, stream, correlation): Meta's MTIA
    # (read as HolisticTraceAnalysis does: CCP events are its kernels), Intel XPU (XPUPTI), PrivateUse1 backends
    "mtia_ccp_events": KERNEL,
    "mtia_runtime": RUNTIME,
    "xpu_runtime": RUNTIME,
    "xpu_driver": DRIVER,
    "privateuse1_runtime": RUNTIME,
    "privateuse1_driver": DRIVER,
    "trace": TRACE,
    "overhead": OVERHEAD,
}

# table -> the event kinds it holds
TABLE_KINDS: dict[str, tuple[int, ...]] = {
    "cpu_ops": (CPU_OP,),
    "annotations": (ANNOTATION,),
    "gpu_annotations": (GPU_ANNOTATION,),
    "python_functions": (PYTHON,),
    "kernels": (KERNEL,),
    "memcpy": (MEMCPY,),
    "memset": (MEMSET,),
    "runtime": (RUNTIME, DRIVER),
    "syncs": (SYNC,),
    "flows": (FLOW_START, FLOW_END),
    "memory": (MEMORY,),
    # the profiler's own records: its span ("PyTorch Profiler (0)", pid "Spans") and its overhead events
    "profiler": (TRACE, OVERHEAD),
}
# columns that come from the event's kind and category, not from a field: (name, dtype)
DERIVED: dict[str, tuple[tuple[str, type], ...]] = {
    "runtime": (("is_driver", bool),),
    "profiler": (("is_span", bool),),
    "flows": (("cat_id", np.int32), ("is_start", bool)),
}
COMMON = ("name_id", "ts_us", "dur_us", "pid", "tid")
_NARROW_COMMON = {"name_id", "cat_id", "pid", "tid"}
_KIND_TABLE = {k: t for t, kinds in TABLE_KINDS.items() for k in kinds}
_INT_TEXT = re.compile(r"-?[0-9]{1,19}")  # an integer id written as text ("7"); int64 has 19 digits
STRING_ID_BASE = -1_000_000  # a string pid/tid/id that is no integer is stored as STRING_ID_BASE - its code
_ID_COLUMNS = ("pid", "tid", "flow_id")  # the columns of the ``id`` fields (see perfdoctor.trace.fields)


def table_fields(fields: tuple[TraceField, ...]) -> dict[str, tuple[TraceField, ...]]:
    """Per table, the fields that make its columns (in table order; ``fills`` fields excluded)."""
    return {t: tuple(f for f in fields if t in f.tables and not f.fills) for t in TABLE_KINDS}


def _empty(f: TraceField | None, col: str) -> np.ndarray:
    """A zero-length column of the dtype the field's column has."""
    if f is None:
        derived = dict(d for ds in DERIVED.values() for d in ds)
        return np.empty(0, dtype=np.float64 if col.endswith("_us") else derived.get(col, np.int64))
    return np.empty(
        0, dtype=object if f.kind in ("str", "json_list") else np.float64 if f.kind == "float" else np.int64
    )


def _absent_as(values: Sequence[Any], fill: float, dtype: type) -> np.ndarray:
    """``values`` as a ``dtype`` array with None replaced by ``fill`` (C-level loops only)."""
    absent = values.count(None)
    if absent == len(values):
        return np.full(len(values), fill, dtype=dtype)
    if absent == 0:
        return np.array(values, dtype=dtype)
    arr = np.fromiter(values, dtype=object, count=len(values))
    arr[np.fromiter(map(is_, values, repeat(None)), dtype=bool, count=len(values))] = fill
    return arr.astype(dtype)


#: table -> (event kinds, columns beyond name_id/ts_us/dur_us/pid/tid), for the default field table
TABLES: dict[str, tuple[tuple[int, ...], tuple[str, ...]]] = {
    t: (TABLE_KINDS[t], tuple(f.col for f in fs) + tuple(c for c, _ in DERIVED.get(t, ())))
    for t, fs in table_fields(EVENT_FIELDS + ARG_FIELDS).items()
}


def kind_of(ph: str, cat: str, name: str) -> int:
    """Kind code of one event from its phase, category and name."""
    if ph == "X":
        return _CAT_KIND.get(cat.lower(), OTHER)
    if ph in ("s", "t"):
        return FLOW_START
    if ph == "f":
        return FLOW_END
    if ph in ("i", "I") and name == "[memory]":
        return MEMORY
    if ph == "M":
        return META
    return OTHER


@dataclass
class StringTable:
    """Interned strings: ``ids[s]`` is the code stored in ``*_id`` columns."""

    ids: dict[str, int] = field(default_factory=dict)

    def codes(self, values: Sequence[str]) -> np.ndarray:
        ids = self.ids
        for v in dict.fromkeys(values):
            if v not in ids:
                ids[v] = len(ids)
        return np.fromiter(map(ids.__getitem__, values), dtype=np.int32, count=len(values))

    def strings(self) -> list[str]:
        return list(self.ids)


@dataclass
class TableColumns:
    """Chunks of columns per table, the metadata events, and the string tables."""

    fields: tuple[TraceField, ...] = EVENT_FIELDS + ARG_FIELDS
    names: StringTable = field(default_factory=StringTable)
    cats: StringTable = field(default_factory=StringTable)
    ids: StringTable = field(default_factory=StringTable)  # string pids/tids
    phases: StringTable = field(default_factory=StringTable)  # "ph" values
    chunks: dict[str, list[dict[str, np.ndarray]]] = field(default_factory=lambda: {t: [] for t in TABLE_KINDS})
    meta: list[tuple[str, int, int, str]] = field(default_factory=list)  # (name, pid, tid, label)
    n_events: int = 0
    ignored: dict[str, int] = field(default_factory=dict)  # column -> values not of the field's type, set absent
    # the largest integer id at or below STRING_ID_BASE read (INT64_MIN: none; a wrapped pthread id is often
    # negative): one within the string ids' codes could not be told from a string's code after the fact
    low_int_max: int = INT64_MIN

    def __post_init__(self) -> None:
        self._by_table = table_fields(self.fields)
        self._fills = {f.fills: f for f in self.fields if f.fills}

    def _id(self, v: int | str) -> int:
        if type(v) is int:
            if v <= STRING_ID_BASE and v > self.low_int_max:
                self.low_int_max = v
            return v
        text = str(v).strip()
        if _INT_TEXT.fullmatch(text) and INT64_MIN <= int(text) <= INT64_MAX:
            return int(text)
        if text.startswith("stream "):
            tail = text[7:].split(" ", 1)[0]
            if _INT_TEXT.fullmatch(tail) and 0 <= int(tail) <= INT64_MAX:
                return int(tail)
        return STRING_ID_BASE - self.ids.ids.setdefault(text, len(self.ids.ids))

    def _ints(self, values: list[Any]) -> np.ndarray:
        """int64 column; string ids ("stream 7", "Traces") go through _id, once per distinct value."""
        try:
            arr = np.array(values, dtype=np.int64)
            low = arr[arr <= STRING_ID_BASE]
            if low.size:
                self.low_int_max = max(self.low_int_max, int(low.max()))
            return arr
        except (TypeError, ValueError, OverflowError):
            # few distinct pids/tids: each mapped once (an int and its text stay distinct keys, as in _id)
            as_id = {v: self._id(v) for v in dict.fromkeys(values)}
            return np.fromiter(map(as_id.__getitem__, values), dtype=np.int64, count=len(values))

    def _json_list(self, col: str, raw: bytes) -> bytes | None:
        """``raw`` when it is a JSON list nested at most MAX_NESTING deep, else None (counted in ``ignored``)."""
        if raw[:1] == b"[" and (raw.count(b"[") + raw.count(b"{") <= MAX_NESTING or nesting_depth(raw) <= MAX_NESTING):
            return raw
        self.ignored[col] = self.ignored.get(col, 0) + 1
        return None

    def _kinds(self, ph: Sequence[str], cat_codes: np.ndarray, name_ids: np.ndarray) -> np.ndarray:
        """Kind codes: by category for complete (``X``) events, by phase (and the ``[memory]`` name) otherwise."""
        cat_kind = np.array([_CAT_KIND.get(c.lower(), OTHER) for c in self.cats.ids], dtype=np.int8)
        kinds: np.ndarray = cat_kind[cat_codes]
        ph_codes = self.phases.codes(ph)
        ph_kind = np.array([kind_of(p, "", "") for p in self.phases.ids], dtype=np.int8)
        not_x = ph_codes != self.phases.ids.get("X", -1)
        kinds[not_x] = ph_kind[ph_codes[not_x]]
        memory = self.names.ids.get("[memory]")
        if memory is not None:  # an instant named [memory] (kind_of's rule, per event)
            instant = [self.phases.ids[p] for p in ("i", "I") if p in self.phases.ids]
            kinds[np.isin(ph_codes, instant) & (name_ids == memory)] = MEMORY
        return kinds

    def add(self, events: list[Event]) -> None:
        """Columnise one decoded chunk into its tables (the events can then be freed).

        Beyond one list comprehension per field, every per-event step is a C-level pass (map, dict, numpy): a
        Python loop per event costs as much as the decode itself on a 2-million-event trace.
        """
        n = len(events)
        if n == 0:
            return
        self.n_events += n
        # a list comprehension per field: faster than one attrgetter pass transposed by zip (Python 3.11)
        ph = [e.ph for e in events]
        cat = [e.cat for e in events]
        name = [e.name for e in events]
        ts = [e.ts for e in events]
        dur = [e.dur for e in events]
        pid = [e.pid for e in events]
        tid = [e.tid for e in events]
        args = [e.args for e in events]
        cat_codes = self.cats.codes(cat)
        name_ids = self.names.codes(name)
        kinds = self._kinds(ph, cat_codes, name_ids)
        ts_a = np.array(ts, dtype=np.float64)
        dur_a = np.array(dur, dtype=np.float64)
        pid_a = self._ints(pid)
        tid_a = self._ints(tid)
        all_args = np.fromiter(args, dtype=object, count=n)
        order = np.argsort(kinds, kind="stable")
        sorted_kinds = kinds[order]
        bounds = np.flatnonzero(np.diff(sorted_kinds)) + 1
        for group in np.split(order, bounds):
            kind = int(kinds[group[0]])
            if kind == META:
                self._add_meta(events, group, name_ids)
                continue
            table = _KIND_TABLE.get(kind)
            if table is None:
                continue
            cols = {
                "name_id": name_ids[group],
                "ts_us": ts_a[group],
                "dur_us": dur_a[group],
                "pid": pid_a[group],
                "tid": tid_a[group],
            }
            cols.update(self._extra(table, kind, events, group, all_args[group].tolist(), cat_codes[group]))
            self.chunks[table].append(cols)

    def _add_meta(self, events: list[Event], group: np.ndarray, name_ids: np.ndarray) -> None:
        for i in group.tolist():
            e = events[i]
            label = e.args.name if e.args.name is not None else e.args.labels
            if isinstance(label, str):
                self.meta.append((e.name, self._id(e.pid), self._id(e.tid), label))

    def _extra(
        self, table: str, kind: int, events: list[Event], group: np.ndarray, args: list[Any], cat_codes: np.ndarray
    ) -> dict[str, np.ndarray]:
        """The table's field columns (from :mod:`perfdoctor.trace.fields`) and derived columns of one chunk;
        ``group``: the chunk's events in this table, ``args``: their ``args`` structs."""
        out: dict[str, np.ndarray] = {}
        fields = self._by_table[table]
        for f in fields:
            if f.in_args:  # one C-level pass per field (faster than one pass transposed by zip)
                out[f.col] = self._column(f, list(map(attrgetter(f.attr), args)), args)
        own = [f for f in fields if not f.in_args]
        if own:
            evs = np.fromiter(events, dtype=object, count=len(events))[group].tolist()
            for f in own:
                out[f.col] = self._column(f, list(map(attrgetter(f.attr), evs)), args)
        out = {f.col: out[f.col] for f in fields}  # table order
        n = len(args)
        if table == "runtime":
            out["is_driver"] = np.full(n, kind == DRIVER)
        if table == "profiler":
            out["is_span"] = np.full(n, kind == TRACE)
        if table == "flows":
            out["cat_id"] = cat_codes
            out["is_start"] = np.full(n, kind == FLOW_START)
        return out

    def _column(self, f: TraceField, values: list[Any], args: list[Any]) -> np.ndarray:
        """One column from the values of field ``f`` (absent values are ``f.default``)."""
        if f.kind == "id":
            return self._ints(values)
        if f.kind == "int":
            arr = np.array(values, dtype=np.int64) if f.default is not None else _absent_as(values, -1, np.int64)
            older = self._fills.get(f.col)
            if older is not None and (arr < 0).any():
                arr = np.where(arr >= 0, arr, np.array(list(map(attrgetter(older.attr), args)), dtype=np.int64))
            return arr
        if f.kind == "float":
            return _absent_as(values, np.nan, np.float64)
        if f.kind != "json_list":
            return np.fromiter(values, dtype=object, count=len(values))  # faster than assigning a list to a slice
        objs = np.empty(len(values), dtype=object)
        for i in [i for i, v in enumerate(values) if v]:
            objs[i] = self._json_list(f.col, bytes(values[i]))
        return objs

    def ambiguous_ids(self) -> bool:
        """An integer id was read among the codes this table gave its string ids (``STRING_ID_BASE - code``)."""
        return self.low_int_max > STRING_ID_BASE - len(self.ids.ids)

    def absorb(self, part: TableColumns) -> None:
        """Append the columns of ``part``, decoded on its own (in a worker process) from the events that follow
        this one's, as if they had been added here: its name, category and string-id codes become this table's
        (new strings get the next codes, in ``part``'s order of first appearance, as :meth:`add` gives them).

        Raises:
            ValueError: ``part`` read an integer id among the codes of its string ids (see :meth:`ambiguous_ids`);
                read its events here instead.
        """
        if part.ambiguous_ids():
            raise ValueError("integer ids in the range of string-id codes")
        names = self.names.codes(part.names.strings())
        cats = self.cats.codes(part.cats.strings())
        ids = np.array([self._id(s) for s in part.ids.strings()], dtype=np.int64)  # STRING_ID_BASE - code
        for table, chunks in part.chunks.items():
            for cols in chunks:
                cols["name_id"] = names[cols["name_id"]]
                if "cat_id" in cols:
                    cols["cat_id"] = cats[cols["cat_id"]]
                for col in _ID_COLUMNS if ids.size else ():
                    if col in cols:
                        low = (cols[col] <= STRING_ID_BASE) & (cols[col] > STRING_ID_BASE - ids.size)
                        if low.any():
                            cols[col] = cols[col].copy()
                            cols[col][low] = ids[STRING_ID_BASE - cols[col][low]]
                self.chunks[table].append(cols)
        for name, pid, tid, label in part.meta:
            if STRING_ID_BASE - ids.size < pid <= STRING_ID_BASE:
                pid = int(ids[STRING_ID_BASE - pid])
            if STRING_ID_BASE - ids.size < tid <= STRING_ID_BASE:
                tid = int(ids[STRING_ID_BASE - tid])
            self.meta.append((name, pid, tid, label))
        self.n_events += part.n_events
        self.low_int_max = max(self.low_int_max, part.low_int_max)
        for col, n in part.ignored.items():
            self.ignored[col] = self.ignored.get(col, 0) + n

    def concat(self) -> dict[str, dict[str, np.ndarray]]:
        """Per-table columns as single arrays; chunk lists are freed as they go."""
        out: dict[str, dict[str, np.ndarray]] = {}
        for table, fields in self._by_table.items():
            chunks = self.chunks[table]
            cols: dict[str, np.ndarray] = {}
            spec: list[tuple[str, TraceField | None]] = [(c, None) for c in COMMON]
            spec += [(f.col, f) for f in fields] + [(c, None) for c, _ in DERIVED.get(table, ())]
            for col, f in spec:
                arr = np.concatenate([c.pop(col) for c in chunks]) if chunks else _empty(f, col)
                narrow = f.narrow if f is not None else col in _NARROW_COMMON
                if narrow and arr.dtype == np.int64 and arr.size and arr.min() >= -(2**31) and arr.max() < 2**31:
                    arr = arr.astype(np.int32)
                cols[col] = arr
            self.chunks[table] = []
            out[table] = cols
        return out
