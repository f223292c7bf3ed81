"""Kineto JSON -> columnar event tables. No opinions, no thresholds."""

from __future__ import annotations

from collections.abc import Callable

from perfdoctor.trace.device_side import check_device_side, launch_calls, named_gpus
from perfdoctor.trace.reader import read_trace_file, trace_files_in
from perfdoctor.trace.tables import Table, TraceTables, build_tables

__all__ = [
    "Table",
    "TraceTables",
    "build_tables",
    "launch_calls",
    "load_trace",
    "named_gpus",
    "read_trace_file",
    "trace_files_in",
]


def load_trace(path: str, on_progress: Callable[[int], None] | None = None) -> TraceTables:
    """Read and tabulate one trace file.

    Raises:
        TraceFormatError: the file is not a readable Kineto/Chrome trace, or it was cut before its device
            activity and may be a GPU trace (see :func:`~perfdoctor.trace.device_side.check_device_side`).
    """
    tables = build_tables(read_trace_file(path, on_progress))
    check_device_side(tables)
    return tables
