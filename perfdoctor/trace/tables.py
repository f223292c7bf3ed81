"""Columnar event tables cut from a :class:`~perfdoctor.trace.reader.RawTrace`.

A :class:`Table` is a dict of equal-length numpy columns (no per-event Python
objects), sorted by ``ts_us``. :class:`TraceTables` holds one table per Kineto
event family, plus the trace's metadata. Timestamps and durations are
microseconds (Chrome trace format); ``ts_us`` is absolute, as in the file.

Columns common to all tables: ``name_id`` (index into ``TraceTables.names``),
``ts_us``, ``dur_us``, ``end_us``, ``pid``, ``tid``. Table-specific columns:

- cpu_ops: ``external_id``, ``input_dims`` / ``input_type`` / ``concrete_inputs`` (raw JSON bytes or None),
  the collective args of ``record_param_comms`` (``collective``, ``in_nelems``, ``dtype``, ``group_size``)
- annotations (``user_annotation`` and any ``ProfilerStep#N``), gpu_annotations,
  python_functions: ``external_id``
- kernels, memcpy, memset: ``device``, ``stream``, ``correlation``,
  ``external_id``; memcpy/memset add ``bytes``; kernels add the NCCL args
  ``collective``, ``in_nelems``, ``dtype``, ``group_size``
- runtime (``cuda_runtime`` and ``cuda_driver``/HIP): ``correlation``,
  ``external_id``, ``is_driver``
- syncs (``cuda_sync``: Event Sync, Context Sync, Stream Wait Event): ``device``, ``stream``, ``correlation``
- flows (``ac2g``, ``async``, ``fwdbwd`` ...): ``flow_id``, ``is_start``, ``cat_id``
- memory (``[memory]`` instants): ``mem_bytes``, ``total_allocated``,
  ``total_reserved``, ``device_id``, ``device_type``, ``addr`` (the block's address; -1 when absent)
- profiler (the profiler's own records: its ``Trace`` span, e.g. "PyTorch Profiler (0)", and Kineto's ``overhead``
  events such as CUPTI's "Activity Buffer Request"): ``is_span``
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from perfdoctor.errors import TraceFormatError
from perfdoctor.trace.fields import MAX_RANK, MAX_SPAN_US
from perfdoctor.trace.json_value import JsonObject
from perfdoctor.trace.reader import RawTrace

_STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")
# per pattern, whether each name seen so far matches it: the ranks of a job analysed in one worker share most of
# their kernel and op names (DLRM ranks: ~57 patterns x ~120 names searched again per rank, 14 ms of ~110 ms)
_NAME_MATCHES: dict[str | tuple[str, int], dict[str, bool]] = {}  # by pattern (and flags): name -> matches
_NAME_MATCHES_MAX = 200_000  # names remembered per pattern; past that the pattern's memory starts again


class Table:
    """Equal-length numpy columns; ``t["ts_us"]``, ``len(t)``, ``t.take(mask)``."""

    def __init__(self, cols: dict[str, np.ndarray]) -> None:
        self.cols = cols

    def __len__(self) -> int:
        return len(next(iter(self.cols.values()))) if self.cols else 0

    def __getitem__(self, name: str) -> np.ndarray:
        return self.cols[name]

    def __contains__(self, name: str) -> bool:
        return name in self.cols

    def take(self, index: np.ndarray) -> Table:
        """Rows selected by a boolean mask or an index array."""
        return Table({k: v[index] for k, v in self.cols.items()})

    def columns(self) -> list[str]:
        return list(self.cols)

    def to_pandas(self, names: list[str] | None = None) -> Any:
        """A pandas DataFrame of this table (adds a ``name`` column when ``names`` given)."""
        import pandas as pd

        df = pd.DataFrame(self.cols)
        if names is not None and "name_id" in self.cols:
            df.insert(0, "name", np.asarray(names, dtype=object)[self.cols["name_id"]])
        return df


@dataclass
class TraceTables:
    """All tables of one trace file (one rank).

    Attributes:
        path: the trace file; rank: ``distributedInfo.rank`` or inferred from the
            file name (``rank-3``, ``worker3``), else None.
        names: string table for every ``name_id`` column.
        metadata: the file's top-level keys other than ``traceEvents``.
        device_properties: ``deviceProperties`` list (may be empty).
        warnings: what was recovered or missing while loading.
    """

    path: str
    names: list[str]
    metadata: JsonObject
    tables: dict[str, Table]
    cats: list[str] = field(default_factory=list)
    rank: int | None = None
    truncated: bool = False
    warnings: list[str] = field(default_factory=list)
    n_events: int = 0
    file_bytes: int = 0
    uncompressed_bytes: int = 0
    process_names: dict[int, str] = field(default_factory=dict)
    thread_names: dict[tuple[int, int], str] = field(default_factory=dict)

    def __getattr__(self, name: str) -> Table:
        tables: dict[str, Table] | None = self.__dict__.get("tables")
        if tables is not None and name in tables:
            return tables[name]
        raise AttributeError(name)

    @property
    def device_properties(self) -> list[JsonObject]:
        """The trace's ``deviceProperties`` entries (objects, as :mod:`perfdoctor.trace.metadata` keeps them)."""
        props = self.metadata.get("deviceProperties")
        return [p for p in props if isinstance(p, dict)] if isinstance(props, list) else []

    @property
    def has_device_activity(self) -> bool:
        return len(self.kernels) + len(self.memcpy) + len(self.memset) > 0

    def name_array(self) -> np.ndarray:
        """``names`` as an object array, for vectorised lookups ``arr[name_id]``."""
        arr = self.__dict__.get("_name_array")
        if arr is None:
            arr = np.asarray(self.names, dtype=object)
            self.__dict__["_name_array"] = arr
        return arr

    def names_matching(self, pattern: str | re.Pattern[str]) -> np.ndarray:
        """Boolean mask over ``names``: which name ids match ``pattern`` (re.search)."""
        # rules and analyses ask the same few patterns many times: each is searched once per table set
        cache: dict[str | tuple[str, int], np.ndarray] = self.__dict__.setdefault("_matching", {})
        key = pattern if isinstance(pattern, str) else (pattern.pattern, pattern.flags)
        mask = cache.get(key)
        if mask is None or mask.size != len(self.names):
            rx = re.compile(pattern) if isinstance(pattern, str) else pattern
            seen = _NAME_MATCHES.setdefault(key, {})
            if len(seen) > _NAME_MATCHES_MAX:
                seen.clear()
            new = [n for n in dict.fromkeys(self.names) if n not in seen]
            seen.update(zip(new, (rx.search(n) is not None for n in new)))
            mask = np.fromiter(map(seen.__getitem__, self.names), dtype=bool, count=len(self.names))
            mask.flags.writeable = False  # shared by every caller
            cache[key] = mask
        return mask

    def iter_tables(self) -> Iterator[tuple[str, Table]]:
        return iter(self.tables.items())


def _rank_from(metadata: JsonObject, path: str, warnings: list[str]) -> int | None:
    """The trace's rank: ``distributedInfo.rank``, else a ``rank<N>`` / ``worker<N>`` in the file name (None:
    neither, or a number beyond MAX_RANK, with a warning)."""
    info = metadata.get("distributedInfo")
    rank = info.get("rank") if isinstance(info, dict) else None
    if isinstance(rank, int):  # validated by trace.metadata
        return int(rank)
    m = re.search(r"(?:rank|worker)[-_]?(\d+)", path.rsplit("/", 1)[-1])
    if m is None:
        return None
    if len(m.group(1)) > 10 or int(m.group(1)) > MAX_RANK:
        warnings.append(f"{path}: the rank number in the file name is beyond {MAX_RANK}; rank unknown")
        return None
    return int(m.group(1))


def _drop_outliers(cols_by_table: dict[str, dict[str, np.ndarray]], path: str, warnings: list[str]) -> None:
    """Drop events without a timestamp, and events more than MAX_SPAN_US from the median timestamp.

    A profiler records seconds to minutes; an event a day away from the rest (a ``ts`` of 0
    among epoch timestamps, a mutated digit) would stretch a step to years. Adds one
    warning per kind of drop, with the count.
    """
    stamps = [c["ts_us"] for c in cols_by_table.values() if c["ts_us"].size]
    if not stamps:
        return
    all_ts = np.concatenate(stamps)
    missing = int(np.isnan(all_ts).sum())
    known = all_ts[~np.isnan(all_ts)]
    far = 0
    if known.size:
        mid = float(np.median(known))
        lo, hi = mid - MAX_SPAN_US, mid + MAX_SPAN_US
        far = int(((known < lo) | (known > hi)).sum())
    if not (missing or far):
        return
    for cols in cols_by_table.values():
        ts = cols["ts_us"]
        keep = ~np.isnan(ts)
        if far:
            keep &= (ts >= lo) & (ts <= hi)
        if not keep.all():
            for col in list(cols):
                cols[col] = cols[col][keep]
    if missing:
        warnings.append(f"{path}: {missing} event(s) without a timestamp ('ts') dropped")
    if far:
        warnings.append(
            f"{path}: {far} event(s) more than {MAX_SPAN_US / 86_400e6:g} day from the trace's median "
            f"timestamp dropped (corrupt 'ts'; a profile spans seconds to minutes)"
        )


def _drop_capacity_below_reserved(
    metadata: JsonObject, memory: dict[str, np.ndarray], path: str, warnings: list[str]
) -> None:
    """Remove a GPU's ``totalGlobalMem`` that is below the peak ``Total Reserved`` (or ``Total Allocated``) its
    ``[memory]`` events record.

    The caching allocator cannot reserve more than the device holds, nor allocate more than it reserved, so one
    of the numbers is wrong (a mutated value, the properties of another device); the capacity is the one removed,
    so that no share of it (PD502's peak reserved ÷ capacity above 100%) is computed from it, and one warning
    names the device and both numbers."""
    props = metadata.get("deviceProperties")
    if not isinstance(props, list) or not memory["ts_us"].size:
        return
    held = np.maximum(memory["total_reserved"], memory["total_allocated"])
    for p in props:
        cap = p.get("totalGlobalMem") if isinstance(p, dict) else None
        if not isinstance(p, dict) or not isinstance(cap, int) or "id" not in p:
            continue
        mine = (memory["device_type"] == 1) & (memory["device_id"] == p["id"])
        peak = int(held[mine].max()) if mine.any() else 0
        if peak > cap:
            del p["totalGlobalMem"]
            warnings.append(
                f"{path}: device {p['id']}'s totalGlobalMem ({cap:,} B) is below the {peak:,} B its [memory] events "
                "record as reserved or allocated: one of the two is wrong, so its capacity is treated as unknown"
            )


def build_tables(raw: RawTrace) -> TraceTables:
    """Sort each table by ts and add ``end_us``.

    ProfilerStep#N events are moved to ``annotations`` whatever their category
    (the 2021 Kineto generation writes them as ``Operator``). Events without a
    timestamp are dropped.

    Raises:
        TraceFormatError: no event is a timed operator, kernel, copy, annotation or memory event.
    """
    cols_by_table = raw.tables
    _move_step_ops(cols_by_table, raw.names)
    warnings = list(raw.warnings)
    _drop_outliers(cols_by_table, raw.path, warnings)
    _drop_capacity_below_reserved(raw.metadata, cols_by_table["memory"], raw.path, warnings)
    if not any(c["ts_us"].size for c in cols_by_table.values()):
        raise TraceFormatError(
            f"{raw.path}: none of its {raw.n_events} event(s) is a timed operator, kernel, "
            "memory copy, annotation or memory event (each needs 'ph', 'cat' and 'ts'): "
            "nothing to analyse"
        )
    negative = sum(int((c["dur_us"] < 0).sum()) for c in cols_by_table.values())
    if negative:
        warnings.append(f"{raw.path}: {negative} event(s) with a negative duration were counted as 0 µs long")
    tables = {tname: _sorted_table(cols) for tname, cols in cols_by_table.items()}
    process_names, thread_names = _labels(raw.meta)
    return TraceTables(
        path=raw.path,
        names=raw.names,
        cats=raw.cats,
        metadata=raw.metadata,
        tables=tables,
        rank=_rank_from(raw.metadata, raw.path, warnings),
        truncated=raw.truncated,
        warnings=warnings,
        n_events=raw.n_events,
        file_bytes=raw.file_bytes,
        uncompressed_bytes=raw.uncompressed_bytes,
        process_names=process_names,
        thread_names=thread_names,
    )


def _move_step_ops(cols_by_table: dict[str, dict[str, np.ndarray]], names: list[str]) -> None:
    """Move the ``cpu_ops`` rows named ``ProfilerStep#N`` to ``annotations`` (in place)."""
    step_ids = np.fromiter((bool(_STEP_RE.match(n)) for n in names), dtype=bool, count=len(names))
    ops = cols_by_table["cpu_ops"]
    if not ops["name_id"].size:
        return
    is_step = step_ids[ops["name_id"]]
    if not is_step.any():
        return
    ann = cols_by_table["annotations"]
    for col in ann:
        ann[col] = np.concatenate([ann[col], ops[col][is_step].astype(ann[col].dtype, copy=False)])
    for col in list(ops):
        ops[col] = ops[col][~is_step]


def _sorted_table(cols: dict[str, np.ndarray]) -> Table:
    """One table's columns sorted by ``ts_us`` (stable; the columns are taken out of ``cols``), negative durations
    counted as 0 µs, and ``end_us`` = ``ts_us`` + ``dur_us``."""
    order = np.argsort(cols["ts_us"], kind="stable")
    sorted_cols = {}
    for col in list(cols):
        sorted_cols[col] = cols.pop(col)[order]
    dur = sorted_cols["dur_us"]
    sorted_cols["dur_us"] = np.where(dur > 0, dur, 0.0)
    sorted_cols["end_us"] = sorted_cols["ts_us"] + sorted_cols["dur_us"]
    return Table(sorted_cols)


def _labels(meta: list[tuple[str, int, int, str]]) -> tuple[dict[int, str], dict[tuple[int, int], str]]:
    """The trace's process names (by pid) and thread names (by pid, tid) from its metadata events."""
    process_names: dict[int, str] = {}
    thread_names: dict[tuple[int, int], str] = {}
    for name, pid, tid, label in meta:
        if name == "process_name":
            process_names[pid] = label
        elif name == "thread_name":
            thread_names[(pid, tid)] = label
    return process_names, thread_names
