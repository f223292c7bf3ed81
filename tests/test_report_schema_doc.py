"""docs/report-schema.md against the typed report model: each documented table lists exactly its Struct's fields.

A field added to (or removed from) a section of perfdoctor/model/report.py without its row in the document (or
the reverse) fails here, naming the section and the keys.
"""

from __future__ import annotations

import re

import msgspec
import pytest
from conftest import REPO

from perfdoctor.model import report as m

DOC = REPO / "docs" / "report-schema.md"

# heading of each documented table -> the Struct it documents (prefix: keys of a nested list, "devices[].x")
SECTIONS: list[tuple[str, type[msgspec.Struct], str]] = [
    ("## Top level", m.Report, ""),
    ("## inputs", m.InputFile, ""),
    ("## ranks", m.RankSection, ""),
    ("### Device breakdown", m.DeviceSection, ""),
    ("### Step breakdown", m.StepBreakdown, ""),
    ("### memory", m.MemorySection, ""),
    ("### memory", m.MemoryDevice, "devices[]."),
    ("### Memory over the step", m.MemoryOverStep, ""),
    ("### Memory over the step", m.MemoryStepPeak, "steps[]."),
    ("## summary", m.Summary, ""),
    ("## findings", m.FindingSection, ""),
    ("## job", m.JobSection, ""),
]


def _table_keys(heading: str) -> list[str]:
    """Backticked names in the first column of the first table after ``heading`` (a cell may hold several,
    ``devices[].a``, ``b`` continuing the first one's prefix)."""
    text = DOC.read_text()
    start = text.index("\n" + heading + "\n")
    lines = text[start:].splitlines()[1:]
    keys: list[str] = []
    in_table = False
    for line in lines:
        if line.startswith("|"):
            in_table = True
            first = line.split("|")[1]
            names = re.findall(r"`([^`]+)`", first)
            prefix = names[0].rsplit(".", 1)[0] + "." if names and "[]." in names[0] else ""
            keys += [n if "." in n or not prefix else prefix + n for n in names]
        elif in_table:
            break
    return keys


@pytest.mark.parametrize("heading, struct, prefix", SECTIONS, ids=[f"{h} {s.__name__}" for h, s, _ in SECTIONS])
def test_documented_keys_are_the_model_fields(heading: str, struct: type[msgspec.Struct], prefix: str):
    documented = {
        k[len(prefix) :] for k in _table_keys(heading) if k.startswith(prefix) and "." not in k[len(prefix) :]
    }
    if not prefix:
        documented = {k for k in _table_keys(heading) if "." not in k}
    fields = set(struct.__struct_fields__)
    assert documented == fields, (
        f"{DOC.name} {heading!r} vs {struct.__name__}: undocumented {sorted(fields - documented)}, "
        f"documented but not in the model {sorted(documented - fields)}"
    )


def test_documented_schema_version_is_the_models():
    assert f"version {m.SCHEMA_VERSION}" in DOC.read_text().splitlines()[0]
    assert f"| `schema_version` | int | `{m.SCHEMA_VERSION}` |" in DOC.read_text()
