"""One side of a diff: any ``perfdoctor report`` input, or a report JSON written earlier.

Every side becomes the typed report (:class:`perfdoctor.model.Report`): traces and run directories through the
report pipeline, a report JSON through :func:`perfdoctor.model.from_json` (which refuses another schema or
version in one line). So a baseline kept as one small JSON file compares exactly as its trace does. A report
holds each rank's top 20 kernels and CPU ops, so a name missing from one side may just be below its list
(:mod:`perfdoctor.diff.movers` says so).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import msgspec

from perfdoctor.analysis.work.batch_shape import BatchShape
from perfdoctor.errors import PerfDoctorError
from perfdoctor.model import Report, from_json
from perfdoctor.model.report import FindingSection, RankSection, SkippedCheck

if TYPE_CHECKING:
    from perfdoctor.checks.config import RuleOptions

TOP_LIST_LIMIT = 20  # rows of top_kernels / top_cpu_ops in a report (perfdoctor.analysis.summary)
_SNIFF_MAX_BYTES = 256 << 20  # a report JSON is far smaller; larger files are traces


class _Header(msgspec.Struct):
    schema: object = None


@dataclass
class Side:
    """A loaded side: ``kind`` is ``trace``, ``run`` or ``report``; ``model`` its typed report. Read from its traces
    (none for a report JSON, which does not keep them): ``batches``, each rank's input batch by rank number
    (:func:`perfdoctor.analysis.work.batch_shape.batch_shape`), and ``input_shapes``, its first rank's first ``Input
    Dims`` per op name (:func:`perfdoctor.analysis.work.batch_shape.input_shapes`)."""

    path: str
    kind: str
    model: Report
    batches: dict[int, BatchShape] = field(default_factory=dict)
    input_shapes: dict[str, str] = field(default_factory=dict)


def read_report_json(path: str) -> Report | None:
    """The report if ``path`` is a perfdoctor JSON document; None if it is something else (a trace).

    Raises:
        PerfDoctorError: a perfdoctor JSON of another schema (a diff) or another report schema version, or a
            damaged report (:func:`perfdoctor.model.from_json`).
    """
    if not os.path.isfile(path) or path.endswith(".gz") or os.path.getsize(path) > _SNIFF_MAX_BYTES:
        return None
    with open(path, "rb") as fh:
        data = fh.read()
    if b'"schema"' not in data or b"perfdoctor." not in data:
        return None
    try:
        header = msgspec.json.decode(data, type=_Header)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None  # not a JSON object (a damaged trace, an old array trace): the trace reader says what it is
    if not isinstance(header.schema, str) or not header.schema.startswith("perfdoctor."):
        return None
    return from_json(data, path)


def _filter_findings(model: Report, codes: list[str] | None) -> Report:
    """Only the selected rules' findings (a report JSON was written with its own selection)."""
    if codes is None:
        return model
    keep = set(codes)
    found, skipped, passed = model.findings, model.skipped_checks, model.passed_checks
    return msgspec.structs.replace(
        model,
        findings=[f for f in found if f.code in keep] if isinstance(found, list) else found,
        skipped_checks=[s for s in skipped if s.code in keep] if isinstance(skipped, list) else skipped,
        passed_checks=[c for c in passed if c in keep] if isinstance(passed, list) else passed,
    )


def load_side(
    path: str, rule_options: RuleOptions | None = None, codes: list[str] | None = None, step_marker: str | None = None
) -> Side:
    """Load one side: a report JSON as written, or traces / a run directory through the report pipeline.

    Raises:
        PerfDoctorError: the path is missing, not a trace, or a JSON of another schema / version.
    """
    from perfdoctor import pipeline

    if not os.path.exists(path):
        raise PerfDoctorError(f"{path}: no such file or directory")
    model = read_report_json(path)
    if model is not None:
        return Side(path, "report", _filter_findings(model, codes))
    built = pipeline.build([path], step_marker=step_marker, rule_options=rule_options)
    summaries = built.job.summaries if built.job is not None else []
    batches = {(s.rank if s.rank is not None else s.index): s.batch for s in summaries if s.batch is not None}
    shapes = next((s.input_shapes for s in summaries if s.input_shapes), {})
    return Side(path, "run" if pipeline.is_run_dir(path) else "trace", built.model, batches, dict(shapes))


def runs_in(path: str) -> list[str] | None:
    """The run directories a directory of runs holds (its subdirectories with a ``run.json``, sorted by name), or
    None when ``path`` is not such a directory (a trace, a run directory, a directory of per-rank traces).

    A directory of runs was refused as input before (a directory that holds a run directory is not a directory
    of per-rank traces: :func:`perfdoctor.trace.trace_files_in`), so reading it as several runs is unambiguous.

    Raises:
        PerfDoctorError: the directory holds run directories and also trace files outside them.
    """
    from perfdoctor.capture.rundir import is_run_dir

    if not os.path.isdir(path) or is_run_dir(path):
        return None
    children = sorted(os.path.join(path, c) for c in os.listdir(path))
    runs = [c for c in children if is_run_dir(c)]
    if not runs:
        return None
    for c in children:
        if c in runs:
            continue
        files = [c] if os.path.isfile(c) else [os.path.join(r, f) for r, _, names in os.walk(c) for f in names]
        stray = [f for f in files if f.endswith((".json", ".json.gz")) and os.path.basename(f) != "run.json"]
        if stray:
            raise PerfDoctorError(
                f"{path}: holds {len(runs)} run directories and also {stray[0]}, which is not in one: name the "
                "runs themselves (perfdoctor diff B1 B2 --vs A1 A2)"
            )
    return runs


def expand(paths: list[str], side: str) -> list[str]:
    """A side's runs: each path as given, a directory of runs as its run directories (:func:`runs_in`).

    Raises:
        PerfDoctorError: a path named twice on the side, or a directory of runs holding other traces.
    """
    out: list[str] = []
    for p in paths:
        out += runs_in(p) or [p]
    seen: set[str] = set()
    for p in out:
        key = os.path.realpath(p)
        if key in seen:
            raise PerfDoctorError(f"{p}: given twice on the {side} side: each run counts once")
        seen.add(key)
    return out


def findings_of(model: Report) -> list[FindingSection]:
    return model.findings if isinstance(model.findings, list) else []


def skipped_of(model: Report) -> list[SkippedCheck]:
    return model.skipped_checks if isinstance(model.skipped_checks, list) else []


def passed_of(model: Report) -> list[str] | None:
    """Codes of the rules that ran and found nothing; None when the report ran no rules."""
    return model.passed_checks if isinstance(model.passed_checks, list) else None


def rank_number(rank: RankSection, index: int) -> int:
    return rank.rank if rank.rank is not None else index
