"""Run directories written by hand, as ``perfdoctor profile`` writes them: ``run.json`` and ``steps.csv`` rows with the
values a test works out (memory columns in bytes, cumulative allocator counters as ``memory_stats()`` gives them)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from perfdoctor.capture.step_record import STEP_FIELDS

MiB = 1 << 20
GiB = 1 << 30


def write_run(
    path: Path,
    n_steps: int,
    columns: dict[str, Callable[[int], Any]],
    window: range = range(0),
    run_json: dict[str, Any] | None = None,
) -> Path:
    """A run directory of ``n_steps`` steps of 0.1 s; ``columns[name](step)`` gives a column's value (None: empty);
    the steps in ``window`` are the profiler's active steps. ``run.json``: a complete run, updated with
    ``run_json``."""
    path.mkdir(parents=True, exist_ok=True)
    facts: dict[str, Any] = {
        "status": "complete",
        "partial": False,
        "steps_completed": n_steps,
        "environment": {"cuda_available": False},
    }
    facts.update(run_json or {})
    (path / "run.json").write_text(json.dumps(facts))
    lines = [",".join(STEP_FIELDS)]
    for i in range(n_steps):
        row = {"step": i, "start_s": f"{0.1 * i:.6f}", "duration_s": "0.100000", "eval_s": "0", "checkpoint_s": "0"}
        row["profiler_phase"] = "active" if i in window else "none"
        for name, fn in columns.items():
            v = fn(i)
            row[name] = "" if v is None else v
        lines.append(",".join(str(row.get(f, "")) for f in STEP_FIELDS))
    (path / "steps.csv").write_text("\n".join(lines) + "\n")
    return path
