"""Split a Chrome/Kineto trace byte stream into whole events, without parsing them.

A trace is ``{"...": ..., "traceEvents": [ {event}, {event}, ... ], "...": ...}``
(or a bare ``[ {event}, ... ]``). Decoding the whole document at once needs the
whole decompressed file in memory plus one Python object per event, which is
~2x the file size. Instead the file is read in blocks and each block is cut at
the last *complete* event, found with a vectorised bracket-depth scan: quotes
are located with numpy, brackets inside strings are discarded by the parity of
the quotes before them, and the depth is the cumulative sum of the remaining
``{[`` / ``]}``. Every piece handed out is ``{ev},{ev},...,{ev}`` and can be
decoded as ``[piece]``.

This is also what makes truncated files (a killed exporter) loadable: whatever
follows the last complete event is reported, not decoded.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

_QUOTE = ord('"')
_BACKSLASH = ord("\\")
_OPEN = (ord("{"), ord("["))
_CLOSE_OBJ = ord("}")
_CLOSE_ARR = ord("]")
_WS_COMMA = b" \t\r\n,"
_WS = b" \t\r\n"
_COMMA = ord(",")


@dataclass
class SplitResult:
    """What the splitter saw besides the events.

    Attributes:
        header: bytes of the top-level object with the event array emptied
            (``{"schemaVersion": 1, "traceEvents": [], ...}``); ``b"[]"`` for a
            bare-array trace; ``b""`` when no event array was found.
        complete: True when the event array was closed by ``]``.
        trailing_bytes: bytes after the last complete event that could not be
            decoded as events (non-zero for a truncated file).
        unclosed_object: no event array was found and the top-level object
            never closed (a file cut inside the metadata before ``traceEvents``).
        damaged_header: the event array was found only by its key, at the wrong depth: the
            JSON before it is malformed (``header`` is then empty).
    """

    header: bytes = b""
    complete: bool = False
    trailing_bytes: int = 0
    found_array: bool = False
    unclosed_object: bool = False
    bare_array: bool = False
    damaged_header: bool = False
    _prefix: bytearray = field(default_factory=bytearray)
    _suffix: bytearray = field(default_factory=bytearray)


def _unescaped_quotes(buf: np.ndarray) -> np.ndarray:
    """Positions of ``"`` that are not escaped by an odd run of backslashes."""
    quotes = np.flatnonzero(buf == _QUOTE)
    if quotes.size == 0:
        return quotes
    maybe = quotes[(quotes > 0) & (buf[np.maximum(quotes - 1, 0)] == _BACKSLASH)]
    if maybe.size == 0:
        return quotes
    escaped = []
    for q in maybe.tolist():  # rare: only quotes right after a backslash
        run = 0
        i = q - 1
        while i >= 0 and buf[i] == _BACKSLASH:
            run += 1
            i -= 1
        if run % 2 == 1:
            escaped.append(q)
    if not escaped:
        return quotes
    return np.setdiff1d(quotes, np.asarray(escaped, dtype=quotes.dtype), assume_unique=True)


def _structure(buf: np.ndarray, depth0: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Brackets outside strings: (positions, byte values, depth after each).

    ``buf`` must start outside a string at depth ``depth0``.
    """
    quotes = _unescaped_quotes(buf)
    mask = np.zeros(buf.shape, dtype=bool)
    for b in (ord("{"), ord("["), _CLOSE_OBJ, _CLOSE_ARR):
        mask |= buf == b
    pos = np.flatnonzero(mask)
    if quotes.size:
        inside = (np.searchsorted(quotes, pos) % 2) == 1
        pos = pos[~inside]
    vals = buf[pos]
    delta = np.where((vals == _OPEN[0]) | (vals == _OPEN[1]), 1, -1).astype(np.int32)
    depth = depth0 + np.cumsum(delta, dtype=np.int32)
    return pos, vals, depth


def nesting_depth(data: bytes) -> int:
    """Deepest ``{``/``[`` nesting in ``data`` (JSON text), outside strings; vectorised, no recursion."""
    _, _, depth = _structure(np.frombuffer(data, dtype=np.uint8), 0)
    return int(depth.max()) if depth.size else 0


class EventSplitter:
    """Feed decompressed blocks; whole events are handed to ``consume``.

    ``consume(piece) -> bool`` decodes ``piece`` (``[{ev},...,{ev}]``) and says
    whether it was valid. The fast path cuts each block at its last
    ``}`` ``,`` ``{`` separator and lets the decoder validate the cut (a cut
    inside a string or a nested object cannot decode); when three candidate
    cuts fail, or at the end of the stream, the exact bracket-depth scan finds
    every event boundary and ``consume_each`` decodes the events one by one.

    Usage::

        sp = EventSplitter(consume, consume_each)
        for block in blocks:
            sp.feed(block)
        result = sp.finish()   # header, completeness, trailing bytes
    """

    def __init__(
        self, consume: Callable[[bytes | memoryview], bool], consume_each: Callable[[list[bytes]], None]
    ) -> None:
        self.result = SplitResult()
        self._consume = consume
        self._consume_each = consume_each
        self._pending = bytearray()
        self._array_depth = -1  # depth inside the event array, once found
        self._done = False

    # -- header phase -------------------------------------------------------
    def _find_array(self, relaxed: bool = False) -> bool:
        """Find the event array; ``relaxed`` accepts a ``"traceEvents": [`` at any depth (damaged header)."""
        data = bytes(self._pending)
        stripped = data.lstrip()
        if not stripped:
            return False
        if stripped[:1] == b"[":
            self.result.bare_array = True
            self.result.found_array = True
            self._array_depth = 1
            del self._pending[: len(data) - len(stripped) + 1]
            return True
        buf = np.frombuffer(data, dtype=np.uint8)
        search_from = 0
        while True:
            key = data.find(b'"traceEvents"', search_from)
            if key < 0:
                return False
            search_from = key + 1
            if relaxed:
                if _unescaped_quotes(buf[:key]).size % 2:
                    continue  # inside a string
            else:
                _, _, depth = _structure(buf[:key], 0)
                if (depth[-1] if depth.size else 0) != 1:
                    continue  # a "traceEvents" string nested deeper, or inside a string
            colon = data.find(b":", key + 13)
            if colon < 0:
                return False
            rest = data[colon + 1 :].lstrip()
            if not rest:
                return False
            if rest[:1] != b"[":
                continue
            bracket = len(data) - len(rest)
            self.result._prefix += data[:bracket]
            self.result.found_array = True
            self._array_depth = 2
            del self._pending[: bracket + 1]
            return True

    # -- event phase ----------------------------------------------------------
    def feed(self, block: bytes) -> None:
        """Append a decompressed block and consume the complete events in it."""
        if self._done:
            self.result._suffix += block
            return
        self._pending += block
        if self._array_depth < 0:
            if not self._find_array():
                return
        self._cut_fast()

    def _last_separator(self, end: int) -> int:
        """Index of the last ``}`` before ``end`` followed by ``,`` and ``{``."""
        buf = self._pending
        i = buf.rfind(b"}", 0, end)
        while i >= 0:
            j = i + 1
            n = len(buf)
            while j < n and buf[j] in _WS:
                j += 1
            if j < n and buf[j] == _COMMA:
                j += 1
                while j < n and buf[j] in _WS:
                    j += 1
                if j < n and buf[j] == _OPEN[0]:
                    return i
            i = buf.rfind(b"}", 0, i)
        return -1

    def _cut_fast(self) -> None:
        end = len(self._pending)
        for _ in range(3):
            cut = self._last_separator(end)
            if cut < 0:
                return
            if self._consume_in_place(cut):
                self._drop(cut + 1)
                return
            end = cut
        self._cut_exact()

    def _consume_in_place(self, cut: int) -> bool:
        """Decode ``pending[..cut]`` as ``[events]`` without copying it.

        The byte before the first event (whitespace, a comma or the array's own
        ``[``) is overwritten with ``[`` and the byte after ``cut`` (whitespace or
        the separating comma) with ``]`` for the duration of the decode.
        """
        buf = self._pending
        first = buf.find(b"{", 0, cut + 1)
        if first < 0:
            return True  # nothing but separators
        if first == 0 or buf[:first].strip(_WS_COMMA):
            return self._consume(b"[" + bytes(buf[first : cut + 1]) + b"]")
        before, after = buf[first - 1], buf[cut + 1]
        buf[first - 1] = _OPEN[1]
        buf[cut + 1] = _CLOSE_ARR
        try:
            view = memoryview(buf)
            piece = view[first - 1 : cut + 2]
            try:
                return self._consume(piece)
            finally:
                # a sampling profiler (Dask's worker profiler) may briefly hold the decoding frame, and with it the
                # events whose Raw fields still reference the view: then the views are freed with those events
                for v in (piece, view):
                    try:
                        v.release()
                    except BufferError:
                        pass
        finally:
            buf[first - 1] = before
            buf[cut + 1] = after

    def _drop(self, n: int) -> None:
        try:
            del self._pending[:n]
        except BufferError:  # a decoded value still references the buffer: copy instead
            self._pending = bytearray(self._pending[n:])

    def _cut_exact(self) -> None:
        """Find every event end with the depth scan; consume events one by one."""
        if not self._pending:
            return
        data = bytes(self._pending)
        buf = np.frombuffer(data, dtype=np.uint8)
        pos, vals, depth = _structure(buf, self._array_depth)
        ends = pos[(vals == _CLOSE_OBJ) & (depth == self._array_depth)]
        closing = pos[(vals == _CLOSE_ARR) & (depth == self._array_depth - 1)]
        consumed = 0
        if closing.size:
            close_at = int(closing[0])
            ends = ends[ends < close_at]
            self.result._suffix += data[close_at + 1 :]
            self._done = True
            self.result.complete = True
            consumed = len(data)
        elif ends.size:
            consumed = int(ends[-1]) + 1
        pieces, start = [], 0
        for end in ends.tolist():
            pieces.append(data[start : end + 1].lstrip(_WS_COMMA))
            start = end + 1
        if pieces:
            joined = b"[" + b",".join(pieces) + b"]"
            if not self._consume(joined):
                self._consume_each(pieces)
        self._drop(consumed)

    def finish(self) -> SplitResult:
        """Close the stream; returns what was seen besides the events."""
        res = self.result
        if not res.found_array and self._find_array(relaxed=True):
            res.damaged_header = True  # brackets before "traceEvents" do not balance (a trimmed header)
            res._prefix.clear()
        if res.found_array and not self._done:
            self._cut_exact()
        if res.found_array and not self._done:
            res.trailing_bytes = len(bytes(self._pending).strip(_WS_COMMA))
        if not res.found_array:
            data = bytes(self._pending)
            if data.lstrip()[:1] == b"{":
                _, _, depth = _structure(np.frombuffer(data, dtype=np.uint8), 0)
                res.unclosed_object = bool(depth.size) and int(depth[-1]) > 0
        if res.found_array:
            if res.bare_array:
                res.header = b"[]"
            elif not res.damaged_header:
                res.header = bytes(res._prefix) + b"[]" + bytes(res._suffix)
        return res
