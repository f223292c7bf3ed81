"""The one exception type perfdoctor raises for a user-facing problem.

The CLI turns a :class:`PerfDoctorError` into one clear line on stderr and its
``exit_code`` (memray's model); anything else escaping is a bug.
"""

from __future__ import annotations


class PerfDoctorError(Exception):
    """A problem the user can act on (bad input file, bad option, ...).

    Args:
        message: one line naming the file or option and what is wrong.
        exit_code: process exit status the CLI uses (2 = usage / input error).
    """

    def __init__(self, message: str, exit_code: int = 2) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code

    def __str__(self) -> str:  # pragma: no cover - trivial
        return self.message


class TraceFormatError(PerfDoctorError):
    """The file is not a Kineto / Chrome trace (empty, binary, wrong shape, bad gzip)."""
