"""The per-rank task: one trace file (a path or fsspec URL) → its rank summaries. Runs on a worker.

Pure function of its arguments and the file, so it can run in this process, a process-pool worker or a Dask
worker alike; it never prints. With ``cache`` it reuses the entry under :func:`~perfdoctor.jobs.summary.cache_dir`
named by the sha256 of (trace sha256, options fingerprint) and writes it otherwise; an entry that cannot be written
gives the rank a warning.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import shutil
from collections.abc import Callable
from typing import TYPE_CHECKING

import msgspec

from perfdoctor import __version__
from perfdoctor.errors import PerfDoctorError

if TYPE_CHECKING:
    from perfdoctor.checks.catalogue import Catalogue

from perfdoctor.jobs.fingerprint import code_fingerprint, worker_name
from perfdoctor.jobs.summary import (
    CACHE_SUFFIX,
    RankSummary,
    SummaryOptions,
    cache_dir,
    decode,
    encode,
    local_copy,
    rank_summary,
    sha256_of,
)


class _CacheFile(msgspec.Struct):
    key: str
    summaries: bytes


def summarise_file(
    path: str,
    index: int,
    opts: SummaryOptions,
    cat: Catalogue,
    cache: bool = False,
    on_progress: Callable[[int], None] | None = None,
    raise_errors: bool = False,
) -> list[RankSummary]:
    """Summaries of the rank(s) in the trace ``path`` (one per rank; a merged multi-rank file gives several).

    ``index``: the file's position among the job's inputs (its rank when the trace names none); ``cat``: the
    rule catalogue (``perfdoctor.checks.catalogue.Catalogue``).
    A file that cannot be analysed gives one summary with ``error`` set to its one-line reason, unless
    ``raise_errors`` (then the PerfDoctorError propagates, as for a report of one file). Every summary names
    the code that made it and this worker (:mod:`perfdoctor.jobs.fingerprint`).
    """
    out = _summarise_file(path, index, opts, cat, cache, on_progress, raise_errors)
    worker = worker_name()
    for s in out:
        s.perfdoctor_version, s.code_fingerprint, s.worker = __version__, code_fingerprint(), worker
    return out


def summarise_files(
    items: list[tuple[int, str]],
    opts: SummaryOptions,
    cat: Catalogue,
    cache: bool = False,
) -> list[list[RankSummary]]:
    """:func:`summarise_file` of each (index, path) of ``items``, in order: one list of summaries per file (one
    task of several small files, :func:`perfdoctor.jobs.executors.dask_batches`)."""
    return [summarise_file(path, index, opts, cat, cache) for index, path in items]


def _summarise_file(
    path: str,
    index: int,
    opts: SummaryOptions,
    cat: Catalogue,
    cache: bool,
    on_progress: Callable[[int], None] | None,
    raise_errors: bool,
) -> list[RankSummary]:
    try:
        with local_copy(path) as local:
            # a missing file or a directory is left to the reader, whose error names it
            sha = sha256_of(local) if (opts.hash_inputs or cache) and os.path.isfile(local) else None
            key = f"{sha}/{opts.fingerprint()}"
            cache_path = (
                os.path.join(cache_dir(), hashlib.sha256(key.encode()).hexdigest() + CACHE_SUFFIX)
                if cache and sha
                else None
            )
            if cache_path:
                hit = _read_cache(cache_path, key, path)
                if hit is not None:
                    return hit
            out = _summarise(local, path, index, opts, cat, sha, on_progress)
            for s in out:
                s.key = key
            if cache_path:
                problem = _write_cache(cache_path, key, out)
                if problem:
                    for s in out:
                        s.warnings.append(problem)
            return out
    except PerfDoctorError as exc:
        if raise_errors:
            raise
        return [RankSummary(index=index, path=path, error=str(exc))]
    except (ValueError, OSError, MemoryError, KeyError, IndexError, TypeError) as exc:
        if raise_errors:
            raise
        return [
            RankSummary(index=index, path=path, error=f"{path}: could not be analysed ({type(exc).__name__}: {exc})")
        ]


def _summarise(
    local: str,
    path: str,
    index: int,
    opts: SummaryOptions,
    cat: Catalogue,
    sha: str | None,
    on_progress: Callable[[int], None] | None,
) -> list[RankSummary]:
    from perfdoctor.analysis.rank import InputFile
    from perfdoctor.checks import engine
    from perfdoctor.jobs.rank_stage import analyse_rank
    from perfdoctor.trace import load_trace
    from perfdoctor.trace.device_side import named_gpus
    from perfdoctor.trace.ranks import split_merged

    split = split_merged(local)
    sources: list[tuple[str, str, str | None]]
    if split is None:
        sources = [(local, path, None)]
    else:
        sources = [(part.path, f"{path}#rank{part.rank}", part.note) for part in split[0]]
    order = engine.check_order(cat, opts.codes)
    out = []
    try:
        for src, name, note in sources:
            tabs = load_trace(src, on_progress if note is None else None)
            tabs.path = name
            if note is not None:  # a split rank's load warnings name its temporary file: name the rank instead
                tabs.warnings = [w.replace(src, name) for w in tabs.warnings]
            named = tabs.rank is not None
            if tabs.rank is None:
                tabs.rank = index
            info = InputFile(
                path=name,
                bytes=os.path.getsize(local),
                sha256=sha if opts.hash_inputs else None,
                events=tabs.n_events,
                uncompressed_bytes=tabs.uncompressed_bytes,
            )
            analysis = analyse_rank(tabs, info, opts, note)
            ra = analysis.ranks[0]
            joint = opts.joint or len(sources) > 1
            summary = rank_summary(analysis, ra, index, dataclasses.asdict(info), cat, order, note, joint)
            if opts.timeline_steps is not None:  # after the checks: the replay's fix plan is known
                from perfdoctor.timeline.tracks import rank_timeline

                summary.timeline = rank_timeline(ra, opts.timeline_steps)
            dist = tabs.metadata.get("distributedInfo")
            ws = dist.get("world_size") if isinstance(dist, dict) else None
            summary.rank_named, summary.devices = named, named_gpus(tabs)
            summary.world_size = ws if isinstance(ws, int) and ws > 0 else 0
            out.append(summary)
    finally:
        if split is not None:
            shutil.rmtree(split[1], ignore_errors=True)
    return out


def _read_cache(cache_path: str, key: str, path: str) -> list[RankSummary] | None:
    """The cached summaries when ``cache_path`` holds ones made with ``key``; None otherwise (or unreadable)."""
    try:
        with open(cache_path, "rb") as fh:
            entry = msgspec.msgpack.decode(fh.read(), type=_CacheFile)
        if entry.key != key:
            return None
        out = decode(entry.summaries)
    except (OSError, msgspec.DecodeError, msgspec.ValidationError):
        return None
    for s in out:
        s.path = path
        s.input["path"] = path
    return out


def _write_cache(cache_path: str, key: str, summaries: list[RankSummary]) -> str | None:
    """Write the cache entry through a temporary file; None, or the one-line warning when it cannot be written
    (the same line for every rank, so the report shows it once)."""
    tmp = f"{cache_path}.{os.getpid()}.tmp"
    try:
        os.makedirs(os.path.dirname(cache_path), exist_ok=True)
        with open(tmp, "wb") as fh:
            fh.write(msgspec.msgpack.encode(_CacheFile(key, encode(summaries))))
        os.replace(tmp, cache_path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        return (
            f"--cache: summaries not cached: cannot write {os.path.dirname(cache_path)} "
            f"({exc.strerror or type(exc).__name__}); set PERFDOCTOR_HOME to a writable directory"
        )
    return None
