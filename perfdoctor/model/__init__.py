"""The typed report model (:mod:`perfdoctor.model.report`) and its JSON round trip (:mod:`.codec`)."""

from perfdoctor.analysis.missing import MissingReason
from perfdoctor.model.codec import from_json, to_builtins, to_json
from perfdoctor.model.report import SCHEMA, SCHEMA_VERSION, Report

__all__ = ["SCHEMA", "SCHEMA_VERSION", "MissingReason", "Report", "from_json", "to_builtins", "to_json"]
