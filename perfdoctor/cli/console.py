"""The rich Console that commands print their results to (stdout)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

from rich.console import Console


def silence_stdout() -> None:
    """Point stdout at /dev/null: the reader closed the pipe (``perfdoctor report X | head``), so the
    interpreter's final flush must not fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def show_then_exit(show: Callable[[], None], exit_code: int) -> int:
    """Run ``show`` (it writes the result to stdout) and return ``exit_code``, the code the command decided
    before printing: a reader that closes the pipe early (``perfdoctor diff A B --fail-on-regression 5 | head``)
    must not turn a failing gate into exit 0. Files named by ``-o`` are written before this is called."""
    try:
        show()
        sys.stdout.flush()
    except BrokenPipeError:
        silence_stdout()
    return exit_code


PIPE_WIDTH = 120  # columns of output that is not a terminal (a file, a CI log) without $COLUMNS


def output_width(width: int | None = None, stream: object = None) -> int | None:
    """Columns to print to: ``width`` when given; for a stream that is not a terminal, ``$COLUMNS`` when it is a
    positive number, else :data:`PIPE_WIDTH` (rich would take 80 and wrap a table to a few words a line); None for
    a terminal (rich asks it)."""
    if width:
        return width
    out = stream if stream is not None else sys.stdout
    isatty = getattr(out, "isatty", None)
    if callable(isatty) and isatty():
        return None
    cols = os.environ.get("COLUMNS", "")
    return int(cols) if cols.isdigit() and int(cols) > 0 else PIPE_WIDTH


def stdout_console(width: int | None = None) -> Console:
    """A Console on stdout, :func:`output_width` columns wide, whose broken pipe raises ``BrokenPipeError``
    (:func:`show_then_exit` keeps the decided exit code; the CLI's ``main`` makes any other a quiet exit 0) instead
    of rich's default ``SystemExit(1)``, which would read as "a finding at or above --fail-on"."""
    cols = output_width(width)
    console = Console(width=cols) if cols else Console()

    def on_broken_pipe() -> None:
        silence_stdout()
        raise BrokenPipeError

    console.on_broken_pipe = on_broken_pipe  # type: ignore[method-assign]  # rich calls this on EPIPE
    return console
