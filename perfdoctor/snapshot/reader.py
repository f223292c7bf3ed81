"""Read a CUDA memory snapshot pickle without running any of its code, into typed records.

``torch.cuda.memory._dump_snapshot`` pickles the dict ``torch.cuda.memory._snapshot()`` returns: plain dicts,
lists, tuples, strings, numbers, booleans and None (the format is the docstring of ``_snapshot`` in
``torch/cuda/memory.py``: ``segments`` with ``blocks`` and ``frames``, ``device_traces`` of allocator actions).
A pickle may instead name any importable callable and have ``pickle.load`` call it (``os.system``, ...), so the
unpickler here admits no global at all: a file that asks for one is refused in one line before anything runs.

The dict is then checked field by field at this boundary and turned into frozen records; the analysis reads
only those.
"""

from __future__ import annotations

import io
import os
import pickle
from dataclasses import dataclass
from typing import NoReturn

from perfdoctor.errors import PerfDoctorError

SNAPSHOT_EXTENSIONS = (".pickle", ".pkl")
_MAX_INT = 1 << 62  # sizes and addresses beyond this are not a GPU's
# Work allowed per byte of file: a pickle can reference one list from many places (its memo), so a small file can
# unfold into a huge object graph. Real snapshots visit ~0.2 list items per byte (the training example: 711,179
# frames, 22,332 events and 1,041 blocks in 3.9 MB); the bound is ten times that and more.
_ITEMS_PER_BYTE = 2
_ITEMS_FLOOR = 100_000


class _Refused(pickle.UnpicklingError):
    """The pickle asked for a global or a persistent object: what it names is the message."""


class _NoGlobals(pickle.Unpickler):
    """An unpickler that refuses every global (class or function): a snapshot holds only builtin containers and
    scalars, which pickle rebuilds without a lookup."""

    def find_class(self, module: str, name: str, /) -> NoReturn:
        raise _Refused(f"{module}.{name}")

    def persistent_load(self, pid: object, /) -> NoReturn:
        raise _Refused("a persistent id")


@dataclass(frozen=True, slots=True)
class Frame:
    """One stack frame as the allocator recorded it (Python and C++ frames alike; C++ ones have line 0)."""

    filename: str
    line: int
    name: str


Stack = tuple[Frame, ...]  # innermost frame first, as recorded


@dataclass(frozen=True, slots=True)
class Block:
    """A piece of a segment: ``size`` bytes (rounded by the allocator), ``requested_size`` what the caller asked
    for; ``state`` is ``active_allocated``, ``active_awaiting_free`` / ``active_pending_free`` or ``inactive``
    (free, cached). ``address`` is the segment's address plus the sizes of the blocks before it."""

    address: int
    size: int
    requested_size: int
    state: str
    frames: Stack


@dataclass(frozen=True, slots=True)
class Segment:
    """Memory the allocator got from one cudaMalloc (or an expandable segment's mapped range): ``total_size``
    bytes on ``device``, split into ``blocks`` in address order."""

    device: int
    address: int
    total_size: int
    stream: int
    segment_type: str
    is_expandable: bool
    blocks: tuple[Block, ...]


@dataclass(frozen=True, slots=True)
class TraceEvent:
    """One allocator action of the recorded history (``_record_memory_history``): ``action`` is ``alloc``,
    ``free_requested``, ``free_completed``, ``segment_alloc``, ``segment_free``, ``segment_map``,
    ``segment_unmap``, ``oom`` or ``snapshot``; ``size`` in bytes; ``time_us`` when recorded; ``device_free``
    (OOM only) the bytes CUDA still reported free; ``category`` the event's ``category`` (written by
    ``torch.cuda._memory_viz.profile_plot``'s conversion) or else its ``user_metadata``
    (``torch.cuda.memory._set_memory_metadata``), when either is set."""

    action: str
    addr: int
    size: int
    stream: int
    time_us: int | None
    frames: Stack
    device_free: int | None
    category: str | None


@dataclass(frozen=True, slots=True)
class Annotation:
    """A ``START``/``END`` mark the recorder added (``external_annotations``: e.g. an optimizer step)."""

    stage: str
    name: str
    device: int
    time_us: int


@dataclass(frozen=True)
class Snapshot:
    """A memory snapshot read from ``path`` (``file_bytes`` on disk)."""

    path: str
    file_bytes: int
    segments: tuple[Segment, ...]
    device_traces: tuple[tuple[TraceEvent, ...], ...]
    allocator_settings: dict[str, str | int | float | bool]
    annotations: tuple[Annotation, ...]


def looks_like_snapshot(path: str) -> bool:
    """Whether ``path`` is a file to read as a memory snapshot: named ``*.pickle`` / ``*.pkl``, or starting with
    a pickle's protocol 2-5 header (``0x80 0x02``..``0x80 0x05``), which no JSON or gzip trace does."""
    if not os.path.isfile(path):
        return False
    if path.lower().endswith(SNAPSHOT_EXTENSIONS):
        return True
    try:
        with open(path, "rb") as fh:
            head = fh.read(2)
    except OSError:
        return False
    return len(head) == 2 and head[0] == 0x80 and 2 <= head[1] <= 5


def read_snapshot(path: str) -> Snapshot:
    """Read a ``_dump_snapshot`` pickle (or a pickled ``segments`` list, which ``_memory_viz`` also accepts).

    Raises:
        PerfDoctorError: the file cannot be read, is not a pickle, asks for any global (class or function: it
            would run code), or is not a snapshot's shape (a field missing or of the wrong type, a size out of
            range); one line naming the file.
    """
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise PerfDoctorError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if not data:
        raise PerfDoctorError(f"{path}: empty file, not a memory snapshot")
    try:
        raw = _NoGlobals(io.BytesIO(data)).load()
    except _Refused as exc:
        raise PerfDoctorError(
            f"{path}: refused: the pickle asks for {exc}, and a memory snapshot holds only plain dicts, lists, "
            "strings and numbers (nothing in it was run)"
        ) from None
    except pickle.UnpicklingError as exc:
        raise PerfDoctorError(f"{path}: not a readable pickle ({exc})"[:300]) from None
    except (EOFError, ValueError, TypeError, IndexError, KeyError, AttributeError, OverflowError, MemoryError) as exc:
        raise PerfDoctorError(f"{path}: not a readable pickle ({type(exc).__name__}: {exc})"[:300]) from None
    return _Converter(path, len(data)).snapshot(raw)


class _Converter:
    """The raw dict → records, checking each field once; frames are shared between events in real files, so a
    frame dict and a frames list are converted once each (by identity: the raw graph stays alive meanwhile, so
    an id is never reused)."""

    def __init__(self, path: str, file_bytes: int) -> None:
        self.path = path
        self.file_bytes = file_bytes
        self.budget = _ITEMS_PER_BYTE * file_bytes + _ITEMS_FLOOR
        self.frames_seen: dict[int, Frame] = {}
        self.stacks_seen: dict[int, Stack] = {}

    def bad(self, where: str, what: str) -> PerfDoctorError:
        return PerfDoctorError(f"{self.path}: not a memory snapshot: {where} {what}")

    def spend(self, n: int) -> None:
        self.budget -= n
        if self.budget < 0:
            raise PerfDoctorError(
                f"{self.path}: refused: the pickle unfolds into far more items than its {self.file_bytes:,} bytes "
                "can hold (shared lists repeated), not a memory snapshot"
            )

    def snapshot(self, raw: object) -> Snapshot:
        if isinstance(raw, list):  # segments only, as torch.cuda._memory_viz reads it
            raw = {"segments": raw, "device_traces": []}
        if not isinstance(raw, dict) or "segments" not in raw:
            kind = type(raw).__name__
            raise self.bad("the pickle", f"holds a {kind} without 'segments' (expected torch.cuda.memory._snapshot())")
        segments = tuple(self.segment(s, i) for i, s in enumerate(self.list_of(raw, "segments", "the snapshot")))
        traces = raw.get("device_traces", [])
        if not isinstance(traces, list):
            raise self.bad("'device_traces'", "is not a list")
        self.spend(len(traces))
        device_traces = tuple(
            tuple(self.event(e, d, i) for i, e in enumerate(self.list_of({"t": t}, "t", f"device_traces[{d}]")))
            for d, t in enumerate(traces)
        )
        return Snapshot(
            path=self.path,
            file_bytes=self.file_bytes,
            segments=segments,
            device_traces=device_traces,
            allocator_settings=self.settings(raw.get("allocator_settings")),
            annotations=self.annotations(raw.get("external_annotations")),
        )

    def list_of(self, d: dict[object, object], key: str, where: str) -> list[object]:
        v = d.get(key)
        if not isinstance(v, list):
            raise self.bad(where, f"has no list '{key}'")
        self.spend(len(v))
        return v

    def integer(self, d: dict[object, object], key: str, where: str, default: int | None = None) -> int:
        v = d.get(key, default)
        if type(v) is not int or not -_MAX_INT <= v <= _MAX_INT:
            raise self.bad(where, f"has no integer '{key}' (got {type(v).__name__})")
        return v

    def size(self, d: dict[object, object], key: str, where: str, default: int | None = None) -> int:
        v = self.integer(d, key, where, default)
        if v < 0:
            raise self.bad(where, f"has a negative '{key}' ({v})")
        return v

    def text(self, d: dict[object, object], key: str, where: str, default: str | None = None) -> str:
        v = d.get(key, default)
        if not isinstance(v, str):
            raise self.bad(where, f"has no string '{key}' (got {type(v).__name__})")
        return v

    def segment(self, s: object, i: int) -> Segment:
        where = f"segments[{i}]"
        if not isinstance(s, dict):
            raise self.bad(where, "is not a dict")
        address = self.integer(s, "address", where)
        blocks = []
        offset = address
        for j, b in enumerate(self.list_of(s, "blocks", where)):
            blocks.append(self.block(b, offset, f"{where}.blocks[{j}]"))
            offset += blocks[-1].size
        return Segment(
            device=self.size(s, "device", where, 0),
            address=address,
            total_size=self.size(s, "total_size", where),
            stream=self.integer(s, "stream", where, 0),
            segment_type=self.text(s, "segment_type", where, "large"),
            is_expandable=bool(s.get("is_expandable", False)),
            blocks=tuple(blocks),
        )

    def block(self, b: object, address: int, where: str) -> Block:
        if not isinstance(b, dict):
            raise self.bad(where, "is not a dict")
        size = self.size(b, "size", where)
        frames: object = b.get("frames")
        requested = b.get("requested_size")
        history = b.get("history")
        if frames is None and isinstance(history, list) and history and isinstance(history[0], dict):
            frames = history[0].get("frames", [])  # the format before torch 2.1 kept them in 'history'
            requested = requested if requested is not None else history[0].get("real_size")
        req = self.size({"r": size if requested is None else requested}, "r", f"{where} 'requested_size'")
        return Block(
            address=address,
            size=size,
            requested_size=req,
            state=self.text(b, "state", where),
            frames=self.stack(frames if frames is not None else [], where),
        )

    def event(self, e: object, device: int, i: int) -> TraceEvent:
        where = f"device_traces[{device}][{i}]"
        if not isinstance(e, dict):
            raise self.bad(where, "is not a dict")
        action = self.text(e, "action", where)
        time_us = e.get("time_us")
        device_free = e.get("device_free")
        category = e.get("category") or e.get("user_metadata")  # the writer's label, else _set_memory_metadata's
        return TraceEvent(
            action=action,
            addr=self.integer(e, "addr", where, 0),
            size=self.size(e, "size", where, 0),
            stream=self.integer(e, "stream", where, 0),
            time_us=time_us if type(time_us) is int else None,
            frames=self.stack(e.get("frames", []), where),
            device_free=device_free if type(device_free) is int else None,
            category=category if isinstance(category, str) and category else None,
        )

    def stack(self, frames: object, where: str) -> Stack:
        if not isinstance(frames, list):
            raise self.bad(where, "has 'frames' that are not a list")
        hit = self.stacks_seen.get(id(frames))
        if hit is not None:
            return hit
        self.spend(len(frames))
        out = tuple(self.frame(f, where) for f in frames)
        self.stacks_seen[id(frames)] = out
        return out

    def frame(self, f: object, where: str) -> Frame:
        hit = self.frames_seen.get(id(f))
        if hit is not None:
            return hit
        if not isinstance(f, dict):
            raise self.bad(where, "has a frame that is not a dict")
        line = f.get("line", 0)
        out = Frame(
            filename=self.text(f, "filename", f"{where} frame", "??"),
            line=line if type(line) is int else 0,
            name=self.text(f, "name", f"{where} frame", "??"),
        )
        self.frames_seen[id(f)] = out
        return out

    def settings(self, raw: object) -> dict[str, str | int | float | bool]:
        if not isinstance(raw, dict):
            return {}
        return {str(k): v for k, v in raw.items() if isinstance(k, str) and isinstance(v, str | int | float | bool)}

    def annotations(self, raw: object) -> tuple[Annotation, ...]:
        if not isinstance(raw, list):
            return ()
        self.spend(len(raw))
        out = []
        for a in raw:
            if isinstance(a, dict) and type(a.get("time_us")) is int:
                out.append(
                    Annotation(
                        stage=str(a.get("stage", "")),
                        name=str(a.get("name", "")),
                        device=a["device"] if type(a.get("device")) is int else 0,
                        time_us=a["time_us"],
                    )
                )
        return tuple(out)
