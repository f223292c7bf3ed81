"""Split a merged multi-rank trace (several ranks' processes in one file) into one table set per rank.

Placeholder until the splitter lands: every file is one rank.
"""

from __future__ import annotations

from perfdoctor.trace.tables import TraceTables


def split_ranks(tables: TraceTables) -> list[tuple[TraceTables, str | None]]:
    """``[(tables of one rank, note)]``: the file's ranks; a single-rank file gives ``[(tables, None)]``."""
    return [(tables, None)]
