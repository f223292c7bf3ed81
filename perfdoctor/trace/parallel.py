"""Decode a large trace's events in worker processes, with exactly the columns the serial reader makes.

The reader (:mod:`perfdoctor.trace.reader`) inflates the file and cuts it into pieces of whole events in this
process, as always; :class:`ParallelDecoder` sends each piece to a forked worker, which decodes and columnises it
(the two costs that grow with the events: about 1 and 1.7 CPU-s per 100 MB of JSON) and returns its columns. The
pieces' columns are absorbed back here in file order, their name/category/string-id codes renumbered as the
serial reader would have numbered them (:meth:`~perfdoctor.trace.columns.TableColumns.absorb`), so the tables
are the same, bit for bit.

The serial reader learns whether a cut between two events was right by decoding the piece at once; here a piece
is sent before it is decoded. Whenever a worker cannot take a piece exactly (it is not valid JSON, or it mixes
string ids with integer ids in their code range), or a worker dies, :class:`Fallback` is raised and the reader
reads the whole file again in this process: damaged files are small and rare, and are read as before.

Workers are used only when :data:`DEFAULT_ON` is True or :data:`WORKERS_ENV` asks for them: on the 2-core
benchmark machine under other load they gave no speed-up on the 446 MB V100 trace (best of 3: 18.2 s with 2
workers, 17.2 s without) and raised the peak RSS from 1.29x to 1.65x the JSON (pieces in flight), over the 1.5x
target. When on, for files of at least :data:`MIN_PARALLEL_BYTES` of JSON, on machines with more than one usable
core, from a process that is not itself a worker of a pool (a job's ranks are already spread over the cores).
:data:`WORKERS_ENV` sets the count whatever the file's size (0: none, the events are decoded in this process;
1: one worker, which decodes while this process inflates and cuts).
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import signal
import struct
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor

from perfdoctor.trace.columns import TableColumns

WORKERS_ENV = "PERFDOCTOR_LOAD_WORKERS"
DEFAULT_ON = False
MIN_PARALLEL_BYTES = 64 << 20  # JSON bytes (uncompressed) from which workers pay: see benchmarks/trace_load.py
MAX_WORKERS = 8
_IN_FLIGHT_PER_WORKER = 2  # pieces sent and not yet absorbed, per worker (bounds the memory they hold)

# set in this process before the workers fork, so they inherit it: decodes one piece into the columns given
_decode_piece: Callable[[bytes, TableColumns], bool] | None = None


class Fallback(Exception):
    """The workers could not decode a piece exactly as the serial reader would: read the file in this process."""


def uncompressed_estimate(path: str, file_bytes: int) -> int:
    """The JSON bytes of ``path`` (bytes): a gzip file's ISIZE trailer (its size mod 2**32, RFC 1952 §2.3.1),
    never less than the file itself; the file's size when it is not gzip."""
    with open(path, "rb") as fh:
        if fh.read(2) != b"\x1f\x8b" or file_bytes < 18:
            return file_bytes
        fh.seek(-4, os.SEEK_END)
        (isize,) = struct.unpack("<I", fh.read(4))
    return max(int(isize), file_bytes)


def worker_count(path: str, file_bytes: int) -> int:
    """Worker processes to decode ``path`` with (0: decode in this process). See the module docstring."""
    env = os.environ.get(WORKERS_ENV, "").strip()
    if "fork" not in multiprocessing.get_all_start_methods():
        return 0
    if env:
        try:
            n = int(env)
        except ValueError:
            n = -1
        return min(max(n, 0), 64)
    if not DEFAULT_ON or multiprocessing.parent_process() is not None:
        return 0
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if cores < 2 or uncompressed_estimate(path, file_bytes) < MIN_PARALLEL_BYTES:
        return 0
    return min(cores, MAX_WORKERS)


def _start_worker() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle (it stops the pool)
    gc.disable()  # as in the reader: millions of short-lived objects, no cycles


def _decode(piece: bytes) -> TableColumns | None:
    """In a worker: the columns of one piece (``[{ev},...]``), or None when it does not decode as a whole."""
    columns = TableColumns()
    assert _decode_piece is not None
    if not _decode_piece(piece, columns) or columns.ambiguous_ids():
        return None
    return columns


class ParallelDecoder:
    """Sends pieces to ``workers`` forked processes and absorbs their columns into ``columns``, in order.

    Create it before any other thread of the reader starts (the workers fork at once). ``piece`` answers True
    for every piece (it is decoded later); :meth:`drain` absorbs what was sent and raises :class:`Fallback` when
    a piece could not be taken. Use as a context manager: the pool stops on exit, also on an error.
    """

    def __init__(self, columns: TableColumns, workers: int, decode_piece: Callable[[bytes, TableColumns], bool]):
        global _decode_piece
        _decode_piece = decode_piece
        self.columns = columns
        self._max_in_flight = workers * _IN_FLIGHT_PER_WORKER
        self._pending: deque[Future[TableColumns | None]] = deque()
        fork = multiprocessing.get_context("fork")
        self._pool = ProcessPoolExecutor(workers, mp_context=fork, initializer=_start_worker)
        try:
            self._pool.submit(int).result()  # fork every worker now, before the inflating thread starts
        except Exception as exc:
            self.close()
            raise Fallback(f"workers did not start ({exc})") from None

    def __enter__(self) -> ParallelDecoder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def piece(self, piece: bytes | memoryview) -> bool:
        """Send ``piece`` (``[{ev},...]``) to a worker; absorbs the oldest pieces first when enough are waiting."""
        while len(self._pending) >= self._max_in_flight:
            self._absorb_oldest()
        self._pending.append(self._pool.submit(_decode, bytes(piece)))
        return True

    def drain(self) -> None:
        """Absorb every piece sent, in order; raises :class:`Fallback` when one could not be taken."""
        while self._pending:
            self._absorb_oldest()

    def _absorb_oldest(self) -> None:
        try:
            part = self._pending.popleft().result()
        except Exception as exc:  # a worker died (BrokenProcessPool) or ran out of memory: read here instead
            raise Fallback(f"a decoding worker failed ({type(exc).__name__})") from None
        if part is None:
            raise Fallback("a piece is not valid JSON as cut")
        try:
            self.columns.absorb(part)
        except ValueError as exc:
            raise Fallback(str(exc)) from None

    def close(self) -> None:
        """Stop the workers (pieces not yet decoded are dropped)."""
        for f in self._pending:
            f.cancel()
        self._pending.clear()
        self._pool.shutdown(wait=True, cancel_futures=True)
