"""Read one trace file (``.json`` or ``.json.gz``) into flat columns, tolerantly.

The file is streamed: decompressed in blocks, cut into whole events by
:mod:`perfdoctor.trace.splitter`, decoded with msgspec into typed events and
columnised chunk by chunk, so peak memory stays near the size of the columns
rather than the size of the JSON.

Recoverable damage (a killed exporter's truncated tail, a trailing comma, a
missing closing bracket, an odd event) loads what is complete and adds one
warning that says how many events were recovered. Anything that is not a
trace raises :class:`~perfdoctor.errors.TraceFormatError` naming the file.
"""

from __future__ import annotations

import contextlib
import gc
import os
import queue
import re
import threading
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import msgspec
import numpy as np

from perfdoctor.errors import TraceFormatError
from perfdoctor.trace import parallel, schema
from perfdoctor.trace.columns import TableColumns
from perfdoctor.trace.fields import MAX_NESTING
from perfdoctor.trace.json_value import JsonObject
from perfdoctor.trace.metadata import sanitize_metadata
from perfdoctor.trace.splitter import EventSplitter, SplitResult, nesting_depth

BLOCK_BYTES = 1 << 20  # compressed bytes read at a time
MAX_BLOCK_OUT = 16 << 20  # decompressed bytes handed to the splitter at a time
_TRAILING_COMMA = re.compile(rb",(\s*[}\]])")
_GZIP_MAGIC = b"\x1f\x8b"


@dataclass
class RawTrace:
    """Columns of every event in one file plus its top-level metadata.

    Attributes:
        path: the file read.
        tables: per-table numpy columns, unsorted (see :mod:`perfdoctor.trace.columns`).
        meta: metadata events as (name, pid, tid, label), e.g. process_name.
        names: ``name_id`` -> string.
        metadata: top-level keys other than ``traceEvents`` (``deviceProperties``,
            ``distributedInfo``, ``baseTimeNanoseconds``, ...).
        n_events: events decoded.
        n_dropped: events that could not be decoded (malformed).
        warnings: human-readable notes about recovered damage.
        file_bytes: size on disk; uncompressed_bytes: size of the JSON text.
    """

    path: str
    tables: dict[str, dict[str, np.ndarray]]
    names: list[str]
    metadata: JsonObject
    n_events: int
    cats: list[str] = field(default_factory=list)
    meta: list[tuple[str, int, int, str]] = field(default_factory=list)
    n_dropped: int = 0
    truncated: bool = False
    warnings: list[str] = field(default_factory=list)
    file_bytes: int = 0
    uncompressed_bytes: int = 0


def _blocks(path: str, on_progress: Callable[[int], None] | None, state: dict[str, int]) -> Iterator[bytes]:
    """Yield decompressed blocks of the file; raises TraceFormatError on bad gzip.

    Sets ``state["gzip_incomplete"]`` when a gzip stream ends before its trailer, and
    ``state["junk_bytes"]`` to the bytes after a complete gzip stream that do not
    start another gzip member (padding, a partial copy): those are not read.
    """
    with open(path, "rb") as fh:
        magic = fh.read(2)
        fh.seek(0)
        gz = magic == _GZIP_MAGIC
        inflater = zlib.decompressobj(wbits=47) if gz else None
        while True:
            raw = fh.read(BLOCK_BYTES)
            if not raw:
                break
            if on_progress:
                on_progress(len(raw))
            if inflater is None:
                yield raw
                continue
            data = raw
            while data:
                try:
                    out = inflater.decompress(data, MAX_BLOCK_OUT)
                except zlib.error as exc:
                    raise TraceFormatError(f"{path}: corrupted gzip data ({exc})") from None
                if out:
                    yield out
                if inflater.eof:  # concatenated gzip members
                    data = inflater.unused_data
                    if data and not _GZIP_MAGIC.startswith(data[:2]):
                        rest = os.fstat(fh.fileno()).st_size - fh.tell()
                        state["junk_bytes"] = len(data) + max(rest, 0)
                        return
                    if data:
                        inflater = zlib.decompressobj(wbits=47)
                else:
                    data = inflater.unconsumed_tail
        if inflater is not None:
            tail = inflater.flush()
            if tail:
                yield tail
            state["gzip_incomplete"] = int(not inflater.eof)


class _Prefetch:
    """Decompress in a background thread while the caller decodes (zlib and file reads release the GIL, so
    inflating the next blocks overlaps the msgspec decode of this one on a second core; on one core it costs
    only the thread switches). At most ``depth`` blocks (of at most MAX_BLOCK_OUT bytes) wait in the queue.

    Progress is counted in the thread and reported on the caller's thread, with the block it came with;
    an exception in the thread (TraceFormatError, OSError) is raised again in the caller.
    """

    def __init__(self, path: str, state: dict[str, int], depth: int = 3) -> None:
        # (a block, None at the end, or the thread's exception; the file bytes read for it)
        self._queue: queue.Queue[tuple[bytes | BaseException | None, int]] = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._read = 0
        self._thread = threading.Thread(target=self._run, args=(path, state), name="perfdoctor-inflate", daemon=True)
        self._thread.start()

    def _count(self, n: int) -> None:
        self._read += n

    def _put(self, item: tuple[bytes | BaseException | None, int]) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _run(self, path: str, state: dict[str, int]) -> None:
        try:
            for block in _blocks(path, self._count, state):
                read, self._read = self._read, 0
                if not self._put((block, read)):
                    return
            self._put((None, self._read))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread, which raises it
            self._put((exc, 0))

    def blocks(self, on_progress: Callable[[int], None] | None) -> Iterator[bytes]:
        """Yield the decompressed blocks in order; stops the thread when the caller stops early."""
        try:
            while True:
                block, read = self._queue.get()
                if on_progress and read:
                    on_progress(read)
                if block is None:
                    return
                if isinstance(block, BaseException):
                    raise block
                yield block
        finally:
            self._stop.set()
            self._thread.join()


def _text_start(path: str, block: bytes) -> bytes:
    """The first block without a UTF-8 byte-order mark; raises TraceFormatError for UTF-16/32 text."""
    if block.startswith(b"\xef\xbb\xbf"):
        return block[3:]
    head = block[:4]

    def ascii_at(*ix: int) -> bool:
        return all(0 < head[i] < 0x80 for i in ix)

    wide = (
        head.startswith((b"\xff\xfe", b"\xfe\xff"))
        or len(head) == 4
        and (head[1] == head[3] == 0 and ascii_at(0, 2) or head[0] == head[2] == 0 and ascii_at(1, 3))
    )
    if wide:
        raise TraceFormatError(
            f"{path}: UTF-16 or UTF-32 text; a trace is UTF-8 JSON (convert it, e.g. iconv -f UTF-16 -t UTF-8)"
        )
    return block


class _Decoder:
    """Decodes pieces of whole events into columns and counts the events it drops, by reason."""

    def __init__(self, columns: TableColumns, kinds: schema.Schema) -> None:
        self.columns = columns
        self.schema = kinds
        self.bad = 0  # not JSON, or not an object
        self.dropped: dict[str, int] = {}  # a field out of range / not finite / too deeply nested

    def piece(self, piece: bytes | memoryview) -> bool:
        """Decode ``[{ev},...]``; False (and nothing added) when it is not valid."""
        return _decode_piece(piece, self.columns, self.schema)

    def each(self, pieces: list[bytes]) -> None:
        events = []
        for one in pieces:
            try:
                ev = _decode_event(one, self.schema)
            except schema.BadEvent as exc:
                self.dropped[exc.reason] = self.dropped.get(exc.reason, 0) + 1
                continue
            if ev is None:
                self.bad += 1
            else:
                events.append(ev)
        self.columns.add(events)


def _decode_piece(piece: bytes | memoryview, columns: TableColumns, kinds: schema.Schema = schema.DEFAULT) -> bool:
    """Decode ``[{ev},...]`` into ``columns``; False (and nothing added) when it is not valid."""
    try:
        events = kinds.events_decoder.decode(piece)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return False
    columns.add(events)
    del events
    return True


def _decode_event(raw: bytes, kinds: schema.Schema) -> schema.TraceEvent | None:
    """One event: typed, else generically and coerced; None when it is not JSON.

    Raises:
        schema.BadEvent: a field out of range, or nested deeper than MAX_NESTING.
    """
    try:
        return kinds.one_decoder.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        pass
    if nesting_depth(raw) > MAX_NESTING:
        raise schema.BadEvent(f"nested deeper than {MAX_NESTING} levels")
    try:
        return kinds.from_dict(schema.LENIENT_DECODER.decode(raw))
    except msgspec.DecodeError:
        return None


def _decode_header(path: str, header: bytes, warnings: list[str]) -> JsonObject:
    """The trace's top-level keys other than ``traceEvents`` (:func:`~perfdoctor.trace.metadata.sanitize_metadata`);
    {} with a warning when they cannot be read."""
    if header in (b"", b"[]"):
        return {}
    if nesting_depth(header) > MAX_NESTING:
        warnings.append(f"{path}: trace metadata nested deeper than {MAX_NESTING} levels; ignored")
        return {}
    try:
        doc = msgspec.json.decode(header)
    except msgspec.DecodeError:
        try:
            doc = msgspec.json.decode(_TRAILING_COMMA.sub(rb"\1", header))
            warnings.append(f"{path}: malformed JSON around the trace metadata (a trailing comma); ignored")
        except msgspec.DecodeError:
            doc = _decode_truncated_header(header)
            if doc is None:
                warnings.append(f"{path}: trace metadata after the events could not be read; ignored")
                return {}
    if not isinstance(doc, dict):
        return {}
    doc.pop("traceEvents", None)
    return sanitize_metadata(path, doc, warnings)


def _decode_truncated_header(header: bytes) -> JsonObject | None:
    """The metadata before the events, when the file ends before its closing brace."""
    cut = header.find(b"[]")
    if cut < 0:
        return None
    head = header[: cut + 2]
    try:
        doc = msgspec.json.decode(head + b"}")
    except msgspec.DecodeError:
        return None
    return doc if isinstance(doc, dict) else None


def read_trace_file(
    path: str | os.PathLike[str],
    on_progress: Callable[[int], None] | None = None,
    kinds: schema.Schema = schema.DEFAULT,
) -> RawTrace:
    """Read one Kineto/Chrome trace file into columns.

    Args:
        path: a ``.json`` or ``.json.gz`` (gzip is detected by its magic bytes).
        on_progress: called with the number of file bytes consumed per block.
        kinds: the generated schema (the fields read and their columns); the default one unless a
            test adds a field.

    Returns:
        A :class:`RawTrace`; ``warnings`` says what damage was recovered from.

    Raises:
        TraceFormatError: missing/unreadable/empty file, corrupted gzip, not
            JSON, or JSON without a ``traceEvents`` array of events.
    """
    p = str(path)
    if not os.path.exists(p):
        raise TraceFormatError(f"{p}: no such file")
    if os.path.isdir(p):
        raise TraceFormatError(f"{p}: is a directory, not a trace file")
    file_bytes = os.path.getsize(p)
    if file_bytes == 0:
        raise TraceFormatError(f"{p}: empty file, not a trace")
    try:
        workers = parallel.worker_count(p, file_bytes) if kinds is schema.DEFAULT else 0
    except OSError as exc:
        raise TraceFormatError(f"{p}: cannot read ({exc.strerror or exc})") from None
    if workers:
        try:
            return _read(p, file_bytes, on_progress, kinds, workers)
        except parallel.Fallback:
            on_progress = None  # the bytes read were reported once
    return _read(p, file_bytes, on_progress, kinds, 0)


@dataclass
class _Streamed:
    """What streaming a file through the splitter gave: the splitter's result, the first bytes of the text (for
    :func:`_not_a_trace_reason`) and the text's size (bytes)."""

    result: SplitResult
    first: bytes
    total: int


def _read(
    p: str, file_bytes: int, on_progress: Callable[[int], None] | None, kinds: schema.Schema, workers: int
) -> RawTrace:
    """:func:`read_trace_file` with the events decoded in this process (``workers`` 0) or in ``workers`` forked
    processes (raises :class:`~perfdoctor.trace.parallel.Fallback` when they cannot)."""
    columns = TableColumns(kinds.event_fields + kinds.arg_fields)
    decoder = _Decoder(columns, kinds)
    state: dict[str, int] = {"gzip_incomplete": 0, "junk_bytes": 0}
    streamed = _stream(p, on_progress, decoder, state, workers)
    result = streamed.result
    if not result.found_array:
        raise TraceFormatError(_no_event_array_reason(p, streamed, state))
    warnings: list[str] = []
    metadata = _decode_header(p, result.header, warnings)
    if result.damaged_header:
        warnings.append(
            f"{p}: the JSON before 'traceEvents' is malformed (its brackets do not balance: a trimmed "
            "header?); its metadata (deviceProperties, distributedInfo) is ignored, the events are read"
        )
    damage = _damage(p, result, decoder, state)
    if damage:
        warnings.insert(0, damage)
    if columns.ignored:
        what_ignored = ", ".join(f"{n} '{col}'" for col, n in sorted(columns.ignored.items()))
        warnings.append(
            f"{p}: {what_ignored} value(s) that are not a JSON list nested at most {MAX_NESTING} "
            "deep ignored (shapes unknown for those ops)"
        )
    if columns.n_events == 0:
        raise TraceFormatError(_no_event_reason(p, result, decoder))
    return RawTrace(
        path=p,
        tables=columns.concat(),
        meta=columns.meta,
        names=columns.names.strings(),
        cats=columns.cats.strings(),
        metadata=metadata,
        n_events=columns.n_events,
        n_dropped=decoder.bad + sum(decoder.dropped.values()),
        truncated=bool(not result.complete or state["gzip_incomplete"]),
        warnings=warnings,
        file_bytes=file_bytes,
        uncompressed_bytes=streamed.total,
    )


def _stream(
    p: str, on_progress: Callable[[int], None] | None, decoder: _Decoder, state: dict[str, int], workers: int
) -> _Streamed:
    """Inflate the file (in a background thread), cut it into whole events and decode them into ``decoder``'s
    columns, here or in ``workers`` forked processes; ``state``: the gzip stream's damage (see :func:`_blocks`).

    Raises:
        TraceFormatError: the file cannot be read, is UTF-16/32 text or holds corrupted gzip data.
    """
    total = 0
    first = b""
    gc_was_enabled = gc.isenabled()
    gc.disable()  # millions of short-lived tuples; the cyclic GC only slows them down
    try:
        with contextlib.ExitStack() as stack:
            if workers:  # the workers fork before the inflating thread starts
                pool = stack.enter_context(parallel.ParallelDecoder(decoder.columns, workers, _decode_piece))

                def each(pieces: list[bytes]) -> None:
                    pool.drain()  # the pieces sent come first
                    decoder.each(pieces)

                splitter = EventSplitter(pool.piece, each)
            else:
                splitter = EventSplitter(decoder.piece, decoder.each)
            for block in _Prefetch(p, state).blocks(on_progress):
                if total == 0 and block:
                    block = _text_start(p, block)
                if len(first) < 64:
                    first += block[:64]
                total += len(block)
                splitter.feed(block)
            result = splitter.finish()
            if workers:
                pool.drain()
    except OSError as exc:
        raise TraceFormatError(f"{p}: cannot read ({exc.strerror or exc})") from None
    finally:
        if gc_was_enabled:
            gc.enable()
    return _Streamed(result, first, total)


def _no_event_array_reason(p: str, streamed: _Streamed, state: dict[str, int]) -> str:
    """Why a file in which the splitter found no event array is not a trace: corrupted gzip, a file cut before
    its ``traceEvents``, or not a trace at all (:func:`_not_a_trace_reason`)."""
    if state["gzip_incomplete"]:
        return f"{p}: corrupted or truncated gzip data, no trace events in it"
    if streamed.result.unclosed_object:
        return (
            f"{p}: the file is truncated before any 'traceEvents' list (the JSON ends "
            "inside its top-level object, e.g. the trace metadata): no events to analyse"
        )
    return _not_a_trace_reason(p, streamed.first, streamed.total)


def _dropped_reasons(decoder: _Decoder) -> str:
    """The reasons events were dropped, most frequent first, each with its count."""
    return ", ".join(f"{why} ({n})" for why, n in sorted(decoder.dropped.items(), key=lambda kv: -kv[1]))


def _damage(p: str, result: SplitResult, decoder: _Decoder, state: dict[str, int]) -> str | None:
    """The one-line warning of the damage recovered from (a truncated file, an early end of the gzip stream, bytes
    after it, malformed events, events with invalid fields); None when the file is whole."""
    truncated = not result.complete
    bad, dropped = decoder.bad, sum(decoder.dropped.values())
    if not (truncated or bad or dropped or state["junk_bytes"]):
        return None
    what = []
    if truncated:
        what.append("the file ends before the event list is closed (truncated)")
    if state["gzip_incomplete"]:
        what.append("the gzip stream ends early")
    if state["junk_bytes"]:
        what.append(f"{state['junk_bytes']} byte(s) that are not gzip data after the gzip stream ignored")
    if bad:
        what.append(f"{bad} malformed event(s) skipped")
    if dropped:
        what.append(f"{dropped} event(s) with invalid fields dropped: {_dropped_reasons(decoder)}")
    return f"{p}: recovered {decoder.columns.n_events} events; " + "; ".join(what)


def _no_event_reason(p: str, result: SplitResult, decoder: _Decoder) -> str:
    """Why a file with an event array yielded no event: every event had invalid fields, the events were cut
    or malformed, or the list is empty."""
    bad, dropped = decoder.bad, sum(decoder.dropped.values())
    if dropped:
        return (
            f"{p}: no valid trace event: {dropped} event(s) with invalid fields "
            f"dropped ({_dropped_reasons(decoder)})" + (f", {bad} malformed" if bad else "")
        )
    if not result.complete or bad:
        return f"{p}: no complete trace event could be read"
    return f"{p}: the trace holds no events"


def _not_a_trace_reason(path: str, first: bytes, total: int) -> str:
    text = first.lstrip()
    if total == 0 or not text:
        return f"{path}: empty file, not a trace"
    if b"\x00" in first or not _is_text(first):
        return f"{path}: binary data, not a JSON trace"
    if text[:1] not in (b"{", b"["):
        if text.split()[0] in (b"null", b"true", b"false") or text[:1] in b'"-0123456789':
            return f"{path}: valid JSON but not a trace (the top level is not an object with 'traceEvents')"
        return f"{path}: not JSON (starts with {text[:16]!r})"
    return f"{path}: JSON without a 'traceEvents' list: not a Kineto/Chrome trace"


def _is_text(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc.start >= len(data) - 4  # a multibyte char cut at the boundary
    return True


def trace_files_in(path: str | os.PathLike[str]) -> list[str]:
    """The trace files a path names: itself, or the traces inside a directory.

    A directory (a ``tensorboard_trace_handler`` log dir, or one file per rank)
    yields its ``*.json`` / ``*.json.gz`` files, sorted; raises
    TraceFormatError when it holds none.
    """
    p = Path(path)
    if not p.is_dir():
        return [str(p)]
    run_dirs = sorted(str(r.parent) for r in p.rglob("run.json"))
    if run_dirs:
        raise TraceFormatError(
            f"{p}: holds a perfdoctor run directory ({run_dirs[0]}); pass the run directory "
            "itself to `perfdoctor report`"
        )
    found = sorted(
        str(f) for f in p.rglob("*") if f.is_file() and (f.name.endswith(".json") or f.name.endswith(".json.gz"))
    )
    found = [f for f in found if not f.endswith(("run.json", "report.json"))]
    if not found:
        raise TraceFormatError(f"{p}: directory holds no .json or .json.gz trace files")
    return found
