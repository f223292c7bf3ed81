"""Run directories: a new one each time, never overwriting a user's files.

Layout of a run directory (rank ``R``; rank 0 is also the coordinator)::

    run.json                          run facts; written at start, final at the end
    steps.csv                         rank 0's steps (other ranks: steps.rank<R>.csv)
    trace.rank<R>.pt.trace.json.gz    the profiled window (``--repeat``: .w<K> before .pt)
    rank<R>.json                      what rank R recorded; its presence = rank R is done
    tensorboard/rank<R>/              per-step scalars as TensorBoard events
    report.html / report.json         the report (coordinator only)
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from perfdoctor.errors import PerfDoctorError

DEFAULT_PARENT = "perfdoctor-runs"


def new_run_dir(stem: str, out: str | os.PathLike | None = None, parent: str | os.PathLike | None = None,
                now: float | None = None) -> Path:
    """Create and return a fresh run directory.

    ``out`` given: it must not exist, or be an empty directory. Otherwise
    ``<parent or ./perfdoctor-runs>/<stem>-<YYYYmmdd-HHMMSS>[-N]``.

    Raises:
        PerfDoctorError: ``out`` exists and is not an empty directory, or cannot be created.
    """
    if out is not None:
        path = Path(out)
        if path.exists() and (not path.is_dir() or any(path.iterdir())):
            raise PerfDoctorError(f"--out {path}: already exists and is not an empty directory; "
                                  "choose a new path (run directories are never overwritten)")
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


def rank_json_name(rank: int) -> str:
    return f"rank{rank}.json"


def write_json(path: Path, data: dict) -> None:
    """Write ``data`` atomically (temp file + rename), so readers never see half a file."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")
    os.replace(tmp, path)
