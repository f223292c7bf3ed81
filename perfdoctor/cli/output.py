"""The files a command writes: refusing an output that would overwrite an input or an existing file, and writing
through a temporary file so a failed write leaves no half report (every command's ``-o``)."""

from __future__ import annotations

import os
from collections.abc import Iterable

from perfdoctor.errors import PerfDoctorError, TraceFormatError


def input_files(paths: list[str]) -> list[str]:
    """The files the inputs name: each path itself, a run directory's inputs, a directory's trace files."""
    from perfdoctor.capture.rundir import is_run_dir, run_inputs
    from perfdoctor.trace import trace_files_in

    files = list(paths)
    for p in paths:
        if is_run_dir(p):
            files += run_inputs(p)
        elif os.path.isdir(p):
            try:
                files += trace_files_in(p)
            except TraceFormatError:  # no trace there: the analysis says so
                pass
    return files


def check_output(path: str, inputs: list[str], force: bool) -> None:
    """Refuse an ``-o`` that is empty, a directory, an input (even with ``--force``), an existing file without
    ``--force``, or in a directory that is missing or takes no new file.

    Raises:
        PerfDoctorError: one of those, in one line.
    """
    if not path:
        raise PerfDoctorError("-o: empty file name; give the report file, e.g. -o report.html")
    if os.path.isdir(path):
        raise PerfDoctorError(f"{path}: is a directory; give the report file, e.g. -o {os.path.join(path, 'r.html')}")
    out = os.path.realpath(path)
    for p in input_files(inputs):
        if os.path.realpath(p) == out:
            raise PerfDoctorError(f"{path}: refusing to write the report over an input ({p}), even with --force")
    if os.path.exists(out) and not force:
        raise PerfDoctorError(f"{path}: already exists; use --force to overwrite")
    parent = os.path.dirname(out) or "."
    if not os.path.isdir(parent):
        raise PerfDoctorError(f"{path}: directory {parent} does not exist")
    _probe_writable(path, parent)


def _probe_writable(path: str, parent: str) -> None:
    """Create and remove an empty file in ``parent`` (the report is written through a temporary file there), so
    an unwritable ``-o`` fails before minutes of analysis; ``os.access`` is not enough (root passes it on a
    read-only /sys).

    Raises:
        PerfDoctorError: ``parent`` does not accept new files (permissions, read-only file system).
    """
    import tempfile

    try:
        with tempfile.NamedTemporaryFile(dir=parent, prefix=".perfdoctor-probe-"):
            pass
    except OSError as exc:
        raise PerfDoctorError(f"{path}: cannot write the report there ({exc.strerror or exc})") from None


def write_report(path: str, data: bytes | Iterable[bytes]) -> None:
    """Write ``data`` (bytes, or its pieces in order) to ``path`` through a temporary file, so a failed write
    leaves no half report.

    Raises:
        PerfDoctorError: the file cannot be written (permissions, a full disk, a read-only file system).
    """
    tmp = path + ".tmp"
    try:
        with open(tmp, "wb") as fh:
            for piece in [data] if isinstance(data, bytes) else data:
                fh.write(piece)
        os.replace(tmp, path)
    except BaseException as exc:  # the pieces are made while writing: whatever fails leaves no half report
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(exc, OSError):
            raise PerfDoctorError(f"{path}: cannot write the report ({exc.strerror or exc})") from None
        raise
