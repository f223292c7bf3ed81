"""Turn decoded events into flat numpy columns, one chunk at a time.

Every event gets a ``kind`` code from its Kineto phase and category (both
category generations: 2021's ``Operator``/``Kernel``/``Runtime``/``Memcpy``/
``Memset`` and today's ``cpu_op``/``kernel``/``cuda_runtime``/...). Names are
interned into one string table shared by all tables (``name_id``).
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass, field

import numpy as np

from perfdoctor.trace.schema import Event

# Event kinds (int8 codes). Tables are cut from the flat columns by kind.
OTHER, CPU_OP, ANNOTATION, GPU_ANNOTATION, PYTHON, KERNEL, MEMCPY, MEMSET = range(8)
RUNTIME, DRIVER, SYNC, FLOW_START, FLOW_END, MEMORY, META, TRACE = range(8, 16)

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
    "trace": TRACE,
}

_NAN = math.nan
_SPARSE_FIELDS = operator.attrgetter("input_dims", "collective", "mem_bytes", "name", "labels")
_SPARSE_INTS = ("in_nelems", "group_size", "mem_bytes", "total_allocated", "total_reserved", "device_id", "device_type")


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

    def codes(self, values: list[str]) -> np.ndarray:
        ids = self.ids
        for v in dict.fromkeys(values):
            if v not in ids:
                ids[v] = len(ids)
        return np.fromiter(map(ids.__getitem__, values), dtype=np.int32, count=len(values))

    def strings(self) -> list[str]:
        return list(self.ids)


_COLUMNS = (
    "kind", "name_id", "cat_id", "ts_us", "dur_us", "pid", "tid", "flow_id",
    "correlation", "external_id", "device", "stream", "bytes", "input_dims",
    "input_type", "collective", "in_nelems", "dtype", "group_size", "mem_bytes",
    "total_allocated", "total_reserved", "device_id", "device_type", "label",
)


@dataclass
class ChunkColumns:
    """Columns of all events decoded so far (lists of per-chunk arrays)."""

    names: StringTable = field(default_factory=StringTable)
    cats: StringTable = field(default_factory=StringTable)
    ids: StringTable = field(default_factory=StringTable)  # string pids/tids
    parts: dict[str, list[np.ndarray]] = field(default_factory=lambda: {c: [] for c in _COLUMNS})
    n_events: int = 0

    def _id(self, v: int | str) -> int:
        if type(v) is int:
            return v
        text = str(v).strip()
        if text.lstrip("-").isdigit():
            return int(text)
        if text.startswith("stream "):
            tail = text[7:].split(" ", 1)[0]
            if tail.isdigit():
                return int(tail)
        return -1_000_000 - self.ids.ids.setdefault(text, len(self.ids.ids))

    def _ints(self, values: list) -> np.ndarray:
        """int64 column; string ids ("stream 7", "Traces") go through _id."""
        try:
            return np.array(values, dtype=np.int64)
        except (TypeError, ValueError, OverflowError):
            ident = self._id
            return np.array([v if type(v) is int else ident(v) for v in values], dtype=np.int64)

    def add(self, events: list[Event]) -> None:
        """Columnise one decoded chunk (the event objects can then be freed)."""
        n = len(events)
        if n == 0:
            return
        p = self.parts
        phs = [e.ph for e in events]
        cats = [e.cat for e in events]
        names = [e.name for e in events]
        ts = [e.ts for e in events]
        dur = [e.dur for e in events]
        pid = [e.pid for e in events]
        tid = [e.tid for e in events]
        fid = [e.id for e in events]
        args = [e.args for e in events]
        p["name_id"].append(self.names.codes(names))
        cat_codes = self.cats.codes(cats)
        p["cat_id"].append(cat_codes)
        p["kind"].append(self._kinds(phs, cat_codes, names))
        p["ts_us"].append(np.array(ts, dtype=np.float64))
        p["dur_us"].append(np.array(dur, dtype=np.float64))
        p["pid"].append(self._ints(pid))
        p["tid"].append(self._ints(tid))
        p["flow_id"].append(self._ints(fid))
        corr = np.array([a.correlation for a in args], dtype=np.int64)
        ext = np.array([a.external_id for a in args], dtype=np.int64)
        ext_old = np.array([a.external_id_old for a in args], dtype=np.int64)
        device = np.array([a.device for a in args], dtype=np.int64)
        stream = np.array([a.stream for a in args], dtype=np.int64)
        nbytes = np.array([a.bytes for a in args], dtype=np.int64)
        p["correlation"].append(corr)
        p["external_id"].append(np.where(ext >= 0, ext, ext_old))
        p["device"].append(device)
        p["stream"].append(stream)
        p["bytes"].append(nbytes)
        self._add_sparse(args, n)
        self.n_events += n

    def _kinds(self, phs: list, cat_codes: np.ndarray, names: list) -> np.ndarray:
        """Kind per event, from (phase, category) with a per-category lookup table."""
        cat_strings = self.cats.strings()
        cat_kind = np.array([_CAT_KIND.get(c.lower(), OTHER) for c in cat_strings], dtype=np.int8)
        kinds = cat_kind[cat_codes]
        ph = np.array(phs)
        not_x = ph != "X"
        if not_x.any():
            idx = np.flatnonzero(not_x)
            kinds[idx] = [kind_of(phs[i], "", names[i]) for i in idx.tolist()]
        return kinds

    def _add_sparse(self, args: list, n: int) -> None:
        """Columns present on few events, kept as object or -1-filled arrays."""
        p = self.parts
        dims = np.empty(n, dtype=object)
        types = np.empty(n, dtype=object)
        label = np.empty(n, dtype=object)
        coll = np.empty(n, dtype=object)
        dtype = np.empty(n, dtype=object)
        ints = {c: np.full(n, -1, dtype=np.int64) for c in _SPARSE_INTS}
        sparse = [
            i for i, (d, c, m, nm, lb) in enumerate(map(_SPARSE_FIELDS, args))
            if d or c is not None or m is not None or nm is not None or lb is not None
        ]
        for i in sparse:
            a = args[i]
            if a.input_dims:
                dims[i] = bytes(a.input_dims)
                if a.input_type:
                    types[i] = bytes(a.input_type)
            if a.collective is not None:
                coll[i] = a.collective
                dtype[i] = a.dtype
                ints["in_nelems"][i] = a.in_nelems if a.in_nelems is not None else -1
                ints["group_size"][i] = a.group_size if a.group_size is not None else -1
            if a.mem_bytes is not None:
                ints["mem_bytes"][i] = a.mem_bytes
                for col in ("total_allocated", "total_reserved", "device_id", "device_type"):
                    v = getattr(a, col)
                    ints[col][i] = v if v is not None else -1
            if a.name is not None or a.labels is not None:
                label[i] = a.name if a.name is not None else a.labels
        p["input_dims"].append(dims)
        p["input_type"].append(types)
        p["label"].append(label)
        p["collective"].append(coll)
        p["dtype"].append(dtype)
        for col, arr in ints.items():
            p[col].append(arr)

    def concat(self) -> dict[str, np.ndarray]:
        """All columns as single arrays (empty arrays when nothing was added)."""
        out = {}
        for col, chunks in self.parts.items():
            out[col] = np.concatenate(chunks) if chunks else np.empty(0, dtype=_DTYPES.get(col, np.int64))
        return out


_DTYPES = {
    "kind": np.int8, "name_id": np.int32, "cat_id": np.int32, "ts_us": np.float64, "dur_us": np.float64,
    "input_dims": object, "input_type": object, "label": object, "collective": object, "dtype": object,
}
