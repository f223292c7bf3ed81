"""One side of a diff: any ``perfdoctor report`` input, or a report JSON written earlier.

A thin adapter over the report dict (schema ``perfdoctor.report`` v1, docs/report-schema.md): the diff reads
the report a side produced, so a baseline kept as one small JSON file compares exactly as its trace does. A report
holds each rank's top 20 kernels and CPU ops, so a name missing from one side may just be below its list
(:mod:`perfdoctor.diff.movers` says so).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import orjson

from perfdoctor.errors import PerfDoctorError

REPORT_SCHEMA = "perfdoctor.report"
REPORT_SCHEMA_VERSION = 1
TOP_LIST_LIMIT = 20  # rows of top_kernels / top_cpu_ops in a report JSON (perfdoctor.analysis.summary)
_SNIFF_MAX_BYTES = 256 << 20  # a report JSON is far smaller; larger files are traces


@dataclass
class Side:
    """A loaded side. ``kind``: ``trace``, ``run`` or ``report``; ``kernels``/``cpu_ops``: rank → rows
    ``{name, category, count, total_us}`` over the analysed steps (the report's top lists); ``complete``: whether
    those lists hold every name (False: a list of TOP_LIST_LIMIT rows may have left names out)."""

    path: str
    kind: str
    report: dict[str, Any]
    kernels: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    cpu_ops: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    complete: bool = False


def read_report_json(path: str) -> dict[str, Any] | None:
    """The report dict if ``path`` is a perfdoctor report JSON; None if it is something else (a trace).

    Raises:
        PerfDoctorError: a perfdoctor JSON of another schema (a diff) or another schema version, or a report
            missing its ``ranks`` list.
    """
    if not os.path.isfile(path) or path.endswith(".gz") or os.path.getsize(path) > _SNIFF_MAX_BYTES:
        return None
    with open(path, "rb") as fh:
        data = fh.read()
    if b'"schema"' not in data or b"perfdoctor." not in data:
        return None
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None  # a damaged trace: the trace reader says what is wrong with it
    schema = doc.get("schema") if isinstance(doc, dict) else None
    if not isinstance(schema, str) or not schema.startswith("perfdoctor."):
        return None
    if schema != REPORT_SCHEMA:
        raise PerfDoctorError(f"{path}: a {schema} document, not a perfdoctor report; diff takes traces, run "
                              "directories or report JSON files")
    if doc.get("schema_version") != REPORT_SCHEMA_VERSION:
        raise PerfDoctorError(f"{path}: report schema version {doc.get('schema_version')!r}; this perfdoctor reads "
                              f"version {REPORT_SCHEMA_VERSION} (write the report again with this version)")
    if not isinstance(doc.get("ranks"), list):
        raise PerfDoctorError(f"{path}: malformed perfdoctor report (no 'ranks' list)")
    return dict(doc)


def _filter_findings(report: dict[str, Any], codes: list[str] | None) -> None:
    """Keep only the selected rules' findings (a report JSON was written with its own selection)."""
    if codes is None:
        return
    keep = set(codes)
    for key in ("findings", "skipped_checks"):
        if isinstance(report.get(key), list):
            report[key] = [f for f in report[key] if isinstance(f, dict) and f.get("code") in keep]
    if isinstance(report.get("passed_checks"), list):
        report["passed_checks"] = [c for c in report["passed_checks"] if c in keep]


def _lists_from_report(report: dict[str, Any]) -> tuple[dict[int, list[dict[str, Any]]],
                                                        dict[int, list[dict[str, Any]]]]:
    kernels, ops = {}, {}
    for i, r in enumerate(report.get("ranks") or []):
        rank = r.get("rank") if isinstance(r.get("rank"), int) else i
        kernels[rank] = [k for k in r.get("top_kernels") or [] if isinstance(k, dict)]
        ops[rank] = [k for k in r.get("top_cpu_ops") or [] if isinstance(k, dict)]
    return kernels, ops


def load_side(path: str, rule_options: Any = None, codes: list[str] | None = None,
              step_marker: str | None = None) -> Side:
    """Load one side: a report JSON as written, or traces / a run directory through the report pipeline.

    Raises:
        PerfDoctorError: the path is missing, not a trace, or a JSON of another schema / version.
    """
    from perfdoctor import pipeline

    if not os.path.exists(path):
        raise PerfDoctorError(f"{path}: no such file or directory")
    doc = read_report_json(path)
    if doc is not None:
        _filter_findings(doc, codes)
        kernels, ops = _lists_from_report(doc)
        return Side(path, "report", doc, kernels, ops, complete=False)
    built = pipeline.build([path], step_marker=step_marker, rule_options=rule_options)
    kernels, ops = _lists_from_report(built.report)
    return Side(path, "run" if pipeline.is_run_dir(path) else "trace", built.report, kernels, ops, complete=False)

