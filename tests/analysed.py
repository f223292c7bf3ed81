"""The production path's stages, for tests that look inside them.

``perfdoctor report`` analyses each rank with :func:`perfdoctor.jobs.rank_stage.analyse_rank` (steps, breakdown,
replay, roofline, MFU) and builds the report with :func:`perfdoctor.pipeline.build`; tests that need a rank's
tables, replay or breakdown run that same per-rank stage here, never a test-only path.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from perfdoctor import pipeline
from perfdoctor.analysis.rank import Analysis, InputFile
from perfdoctor.jobs.rank_stage import analyse_rank
from perfdoctor.jobs.summary import SummaryOptions
from perfdoctor.trace import load_trace, trace_files_in


def rank_analysis(path: str | Path, step_marker: str | None = None, rank: int = 0) -> Analysis:
    """One trace file through the per-rank stage: an :class:`Analysis` of its one rank (``rank`` when the trace
    names none)."""
    tables = load_trace(str(path))
    if tables.rank is None:
        tables.rank = rank
    info = InputFile(str(path), os.path.getsize(path), None, tables.n_events, tables.uncompressed_bytes)
    analysis: Analysis = analyse_rank(tables, info, SummaryOptions(step_marker=step_marker, hash_inputs=False))
    return analysis


def rank_analyses(paths: list[str | Path]) -> list[Analysis]:
    """Every trace file under ``paths`` (files or directories of per-rank traces) through the per-rank stage."""
    files = [f for p in paths for f in trace_files_in(str(p))]
    return [rank_analysis(f, rank=i) for i, f in enumerate(files)]


def report(paths: list[str | Path], **kwargs: Any) -> dict[str, Any]:
    """The JSON report ``perfdoctor report PATHS`` makes (``kwargs``: :func:`perfdoctor.pipeline.build`'s)."""
    out: dict[str, Any] = pipeline.build([str(p) for p in paths], **kwargs).report
    return out
