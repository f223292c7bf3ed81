"""Which perfdoctor code made a rank summary, and the reducer's refusal to mix summaries made by different code.

On a Dask cluster every worker runs the perfdoctor installed where it runs. Two workers of one job can run
different releases, or one release patched differently (an editable checkout mid-edit, a hot fix on some
nodes): their ranks' numbers then come from different analyses and cannot be compared. Each summary
carries the version and :func:`code_fingerprint` of the code that made it and the worker that ran it;
:func:`mixed_code` is the one-line refusal when the ranks' fingerprints differ, :func:`reducer_differs` the
warning when they agree with each other but not with the process that reduces them (its cross-rank analyses
and job rules are its own code).
"""

from __future__ import annotations

import functools
import hashlib
import os
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from perfdoctor import __version__

if TYPE_CHECKING:
    from perfdoctor.jobs.summary import RankSummary

MAX_WORKERS_NAMED = 3  # workers named per group in the refusal; the rest are counted


@functools.cache
def code_fingerprint() -> str:
    """16 hex digits of the sha256 over this perfdoctor's source (every ``*.py`` under the package: relative
    path as "perfdoctor/<path>" and a NUL byte, then its bytes, in the sorted order of those paths) and its
    built-in rule catalogue (each ``rules/*.toml`` likewise, as "rules/<name>").

    Computed once per process: 8-12 ms for ~160 files (1.06 MB) with the files cached, 41 ms cold, on the
    2-core test machine. A rule's thresholds travel with the catalogue the reducer sends, but its check module
    is the worker's own: both are hashed here.
    """
    from perfdoctor.checks.catalogue import builtin_rules_dir

    pkg = Path(__file__).resolve().parent.parent
    h = hashlib.sha256()
    for root, pattern in ((pkg, "**/*.py"), (builtin_rules_dir(), "*.toml")):
        for rel, path in sorted((p.relative_to(root).as_posix(), p) for p in root.glob(pattern)):
            h.update(f"{root.name}/{rel}\0".encode())
            h.update(path.read_bytes())
    return h.hexdigest()[:16]


def worker_name() -> str:
    """The Dask worker's address on a Dask worker, else "<host> pid <pid>" (a pool worker or this process)."""
    if "distributed" in sys.modules:  # never imported for it: a pool worker would pay ~0.5 s
        try:
            from distributed import get_worker

            return str(get_worker().address)
        except ValueError:  # not inside a Dask task
            pass
    return f"{socket.gethostname()} pid {os.getpid()}"


def _code(s: RankSummary) -> str:
    return f"perfdoctor {s.perfdoctor_version or '?'} (code {s.code_fingerprint or '?'})"


def mixed_code(summaries: list[RankSummary]) -> str | None:
    """The one-line refusal when ``summaries`` (:class:`~perfdoctor.jobs.summary.RankSummary`, analysed ones)
    were made by different perfdoctor code, naming each group's ranks and workers (largest group first); None
    when they agree."""
    from perfdoctor.checks.common import rank_list_text

    groups: dict[str, list[RankSummary]] = {}
    for s in sorted(summaries, key=lambda s: s.rank if s.rank is not None else s.index):
        groups.setdefault(_code(s), []).append(s)
    if len(groups) < 2:
        return None
    parts = []
    for code, members in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        ranks = [int(s.rank if s.rank is not None else s.index) for s in members]
        workers = sorted({s.worker or "?" for s in members})
        named = ", ".join(workers[:MAX_WORKERS_NAMED])
        more = f" and {len(workers) - MAX_WORKERS_NAMED} more" if len(workers) > MAX_WORKERS_NAMED else ""
        who = f"rank{'s' if len(ranks) > 1 else ''} {rank_list_text(ranks)}"
        parts.append(f"{who} (worker{'s' if len(workers) > 1 else ''} {named}{more}) ran {code}")
    return (
        "the ranks were analysed by different perfdoctor code, so their numbers cannot be compared: "
        + "; ".join(parts)
        + ": install the same perfdoctor on every worker"
    )


def reducer_differs(summaries: list[RankSummary]) -> str | None:
    """The warning when the ranks agree on their code but this process runs another (None otherwise)."""
    if not summaries or mixed_code(summaries):
        return None
    s = summaries[0]
    if (s.perfdoctor_version, s.code_fingerprint) == (__version__, code_fingerprint()):
        return None
    return (
        f"the workers ran {_code(s)}, this process perfdoctor {__version__} (code {code_fingerprint()}): the "
        "per-rank numbers come from the workers' code, the cross-rank findings from this process's"
    )
