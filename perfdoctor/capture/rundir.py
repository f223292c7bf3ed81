"""Run directories: a new one each time, never overwriting a user's files.

Layout of a run directory (rank ``R``; rank 0 is also the coordinator)::

    run.json                          run facts; written at start, final at the end
    steps.csv                         rank 0's steps (other ranks: steps.rank<R>.csv)
    trace.rank<R>.pt.trace.json.gz    the profiled window (``--repeat``: .w<K> before .pt)
    memory_snapshot.rank<R>.pickle    allocator history of the profiled window (``--memory-snapshot``, CUDA)
    rank<R>.json                      what rank R recorded; its presence = rank R is done
    tensorboard/rank<R>/              per-step scalars as TensorBoard events
    report.html / report.json         the report (coordinator only)
    timeline.json.gz                  the annotated timeline of the median and slowest step (coordinator only)
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Mapping
from pathlib import Path

from perfdoctor.errors import PerfDoctorError

DEFAULT_PARENT = "perfdoctor-runs"


def new_run_dir(
    stem: str,
    out: str | os.PathLike[str] | None = None,
    parent: str | os.PathLike[str] | None = None,
    now: float | None = None,
) -> Path:
    """Create and return a fresh run directory.

    ``out`` given: it must not exist, or be an empty directory. Otherwise
    ``<parent or ./perfdoctor-runs>/<stem>-<YYYYmmdd-HHMMSS>[-N]``.

    Raises:
        PerfDoctorError: ``out`` exists and is not an empty directory, or cannot be created.
    """
    if out is not None:
        path = Path(out)
        if path.exists() and (not path.is_dir() or any(path.iterdir())):
            raise PerfDoctorError(
                f"--out {path}: already exists and is not an empty directory; "
                "choose a new path (run directories are never overwritten)"
            )
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise PerfDoctorError(f"--out {path}: cannot create directory ({exc.strerror})") from None
        return path
    base = Path(parent or DEFAULT_PARENT)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    for n in range(1000):
        path = base / (f"{stem}-{stamp}" if n == 0 else f"{stem}-{stamp}-{n}")
        try:
            path.mkdir(parents=True, exist_ok=False)
            return path
        except FileExistsError:
            continue
        except OSError as exc:
            raise PerfDoctorError(f"cannot create run directory {path} ({exc.strerror})") from None
    raise PerfDoctorError(f"cannot find a free run directory name under {base}")


def steps_csv_name(rank: int) -> str:
    return "steps.csv" if rank == 0 else f"steps.rank{rank}.csv"


def trace_name(rank: int, window: int, repeat: int) -> str:
    """``trace.rank<R>.pt.trace.json.gz``; with several windows ``trace.rank<R>.w<K>.pt.trace.json.gz``."""
    return f"trace.rank{rank}.pt.trace.json.gz" if repeat == 1 else f"trace.rank{rank}.w{window}.pt.trace.json.gz"


SNAPSHOT_STEM = "memory_snapshot"


def snapshot_name(rank: int, window: int, repeat: int) -> str:
    """``memory_snapshot.rank<R>.pickle``; with several windows ``memory_snapshot.rank<R>.w<K>.pickle``."""
    return f"{SNAPSHOT_STEM}.rank{rank}.pickle" if repeat == 1 else f"{SNAPSHOT_STEM}.rank{rank}.w{window}.pickle"


def rank_json_name(rank: int) -> str:
    return f"rank{rank}.json"


def write_json(path: Path, data: Mapping[str, object]) -> None:
    """Write ``data`` atomically (temp file + rename), so readers never see half a file."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")
    os.replace(tmp, path)


def is_run_dir(path: str) -> bool:
    """A directory written by ``perfdoctor profile`` (it holds a ``run.json``)."""
    return os.path.isdir(path) and os.path.isfile(os.path.join(path, "run.json"))


def run_inputs(path: str) -> list[str]:
    """The files of run directory ``path`` that a report reads (run.json, steps*.csv, rank*.json, the traces,
    finished or not): what ``-o`` must never overwrite, even with ``--force``."""
    patterns = ("run.json", "steps*.csv", "rank*.json", "trace.rank*")
    return sorted({str(f) for pattern in patterns for f in Path(path).glob(pattern) if f.is_file()})


_TRACE_NAME = re.compile(r"trace\.rank(\d+)(?:\.w(\d+))?\.pt\.trace")


def trace_rank_window(name: str) -> tuple[int, int] | None:
    """(rank, window) of a trace file named by :func:`trace_name` (window 0 without ``.w<K>``), else None."""
    m = _TRACE_NAME.search(os.path.basename(name))
    return (int(m.group(1)), int(m.group(2) or 0)) if m else None


def steps_csv_rank(name: str) -> int:
    """The rank of a steps file named by :func:`steps_csv_name` (``steps.csv`` is rank 0)."""
    base = os.path.basename(name)
    return 0 if base == "steps.csv" else int(base.split(".rank")[1].split(".")[0])


def last_window_per_rank(path: str, traces: list[Path]) -> tuple[list[str], str | None]:
    """The last profiled window's trace of each rank of a run directory (``trace.rank<R>[.w<K>]...``), and a
    note naming the windows left out when a rank has several (``perfdoctor profile --repeat``).

    A trace whose name does not parse counts as the next unseen rank's only window."""
    best: dict[int, tuple[int, str]] = {}
    per_rank: dict[int, int] = {}
    for t in traces:
        rank, window = trace_rank_window(str(t)) or (len(best), 0)
        per_rank[rank] = per_rank.get(rank, 0) + 1
        if rank not in best or window > best[rank][0]:
            best[rank] = (window, str(t))
    chosen = [best[r][1] for r in sorted(best)]
    several = max(per_rank.values(), default=1)
    note = None
    if several > 1:
        note = (
            f"{path}: {several} profiled windows per rank; this report analyses the last one "
            f"({', '.join(os.path.basename(c) for c in chosen[:2])}{', ...' if len(chosen) > 2 else ''}): the "
            "steady state a long run extrapolates to; `perfdoctor report` on another window's trace file "
            "analyses that one"
        )
    return chosen, note
