"""The report's JSON round trip: :func:`to_json` and :func:`from_json` (``from_json(to_json(r)) == r``).

Bytes: keys sorted, 2-space indent, non-finite floats as ``null``, a final newline, UTF-8 — the same
bytes as the report's JSON before the typed model (orjson writes them; msgspec turns the Structs into
plain values first, leaving out the UNSET sections).
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Any

import msgspec
import orjson

from perfdoctor.errors import PerfDoctorError
from perfdoctor.model.report import SCHEMA, SCHEMA_VERSION, Report

_OPTS = orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY


class _Header(msgspec.Struct):
    """The two keys every perfdoctor report carries, read before the rest."""

    schema: object = None
    schema_version: object = None


def to_builtins(report: msgspec.Struct) -> dict[str, Any]:
    """The report (or one of its sections) as plain dicts/lists/numbers (the JSON document before encoding;
    int dict keys kept)."""
    from perfdoctor.model.sections import RankSections, as_builtins

    ranks = getattr(report, "ranks", None)
    if isinstance(ranks, RankSections):  # one rank's section decoded at a time, never all of them as objects
        out: dict[str, Any] = msgspec.to_builtins(msgspec.structs.replace(report, ranks=[]))
        out["ranks"] = [msgspec.to_builtins(s) for s in ranks]
        return out
    out = msgspec.to_builtins(report, enc_hook=as_builtins)
    return out


def to_json(report: Report) -> bytes:
    """The report as UTF-8 JSON bytes (sorted keys, 2-space indent, NaN/inf as null, final newline)."""
    return b"".join(json_chunks(report))


def json_chunks(report: Report) -> Iterator[bytes]:
    """The bytes of :func:`to_json` in pieces: the report around its ``ranks``, then each rank's section, made
    (decoded, converted, encoded) one at a time, so a writer holds one section, not all of them: the JSON report
    of 4,096 ranks is ~300 MB of text, ~1 GB as plain dicts.

    Each section is encoded on its own and indented to its place (a list item two levels deep: 4 spaces), which
    gives the bytes orjson writes for the whole document (tests/test_jobs_report.py compares them).
    """
    ranks = report.ranks
    if not ranks:
        yield orjson.dumps(to_builtins(report), option=_OPTS) + b"\n"
        return
    mark = f"perfdoctor-ranks-{secrets.token_hex(16)}"  # no trace text can guess it
    head = msgspec.to_builtins(msgspec.structs.replace(report, ranks=[]))
    head["ranks"] = [mark]
    before, after = orjson.dumps(head, option=_OPTS).split(f'"{mark}"'.encode(), 1)
    yield before
    for i, section in enumerate(ranks):
        if i:
            yield b",\n    "
        yield orjson.dumps(msgspec.to_builtins(section), option=_OPTS).replace(b"\n", b"\n    ")
    yield after + b"\n"


# version 1 lacks the fix plan's fields, which then read as their defaults (no plan): a kept baseline still diffs
READABLE_VERSIONS = (1, SCHEMA_VERSION)


def _check_header(header: _Header, source: str) -> None:
    if header.schema != SCHEMA:
        raise PerfDoctorError(f"{source}: not a perfdoctor report (schema {header.schema!r}, expected {SCHEMA!r})")
    if header.schema_version not in READABLE_VERSIONS:
        raise PerfDoctorError(
            f"{source}: report schema version {header.schema_version!r} is not supported "
            f"(this perfdoctor reads version {SCHEMA_VERSION}); re-run `perfdoctor report` on the "
            "traces to write a current one"
        )


def from_json(data: bytes | str, source: str = "report") -> Report:
    """Read a report written by :func:`to_json`.

    ``source`` names the file in error messages.

    Raises:
        PerfDoctorError: not JSON, not a JSON object, not a perfdoctor report, another schema version, or a
            field of the wrong type or missing (one line naming ``source`` and the field's JSON path).
    """
    try:
        header = msgspec.json.decode(data, type=_Header)
    except msgspec.ValidationError:
        raise PerfDoctorError(f"{source}: not a perfdoctor report (the JSON document is not an object)") from None
    except msgspec.DecodeError as exc:
        raise PerfDoctorError(f"{source}: not a perfdoctor report (not valid JSON: {exc})") from None
    _check_header(header, source)
    try:
        return msgspec.json.decode(data, type=Report)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise PerfDoctorError(f"{source}: damaged perfdoctor report ({exc})") from None
