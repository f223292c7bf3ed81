"""JSON renderer: the report's own JSON (:func:`perfdoctor.model.to_json`; sorted keys, 2-space indent)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from perfdoctor.model import Report, as_report, to_json


def render_json(report: Report | Mapping[str, Any]) -> bytes:
    """The report as UTF-8 JSON bytes; NaN/inf become null.

    Raises:
        PerfDoctorError: ``report`` is a mapping that is not a perfdoctor report of this schema version.
    """
    return to_json(as_report(report))
