"""Why an analysis is absent: a stable code to branch on and the sentence to show.

Checks read :attr:`MissingReason.code` / :attr:`MissingReason.message` instead of parsing warning text; the
report carries the same value (``ranks[].mfu_missing``).
"""

from __future__ import annotations

import msgspec


class MissingReason(msgspec.Struct, frozen=True, kw_only=True):
    """``code``: a short snake_case key (e.g. MFU's ``no_steps``); ``message``: one sentence for the reader."""

    code: str
    message: str
