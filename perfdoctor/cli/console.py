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


def stdout_console(width: int | None = None) -> Console:
    """A Console on stdout whose broken pipe raises ``BrokenPipeError`` (:func:`show_then_exit` keeps the
    decided exit code; the CLI's ``main`` makes any other a quiet exit 0) instead of rich's default
    ``SystemExit(1)``, which would read as "a finding at or above --fail-on"."""
    console = Console(width=width) if width else Console()

    def on_broken_pipe() -> None:
        silence_stdout()
        raise BrokenPipeError

    console.on_broken_pipe = on_broken_pipe  # type: ignore[method-assign]  # rich calls this on EPIPE
    return console
