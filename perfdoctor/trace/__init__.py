"""Kineto JSON -> columnar event tables. No opinions, no thresholds."""

from __future__ import annotations

from typing import Callable

from perfdoctor.trace.reader import read_trace_file, trace_files_in
from perfdoctor.trace.tables import Table, TraceTables, build_tables

__all__ = ["Table", "TraceTables", "build_tables", "load_trace", "read_trace_file", "trace_files_in"]


def load_trace(path: str, on_progress: Callable[[int], None] | None = None) -> TraceTables:
    """Read and tabulate one trace file.

    Raises:
        TraceFormatError: the file is not a readable Kineto/Chrome trace.
    """
    return build_tables(read_trace_file(path, on_progress))
