"""Every finding's headline on every real trace: one line of at most 120 characters that states the measured claim,
not the method (issue 19 item 4).

The real traces are those the "every real trace" tests walk (``conftest.REAL_TRACES``: ../shared/traces, else the
licensed copies in tests/data), trace files and multi-rank job folders alike; fuzz reproducers are not traces of a
run and are left out. Each trace's report is computed once per test session and shared with the golden test of
every rule on every shared trace (``conftest.corpus_report``), so this test adds about nothing to a full run.
"""

from __future__ import annotations

import pytest
from conftest import REAL_TRACES

from perfdoctor.errors import PerfDoctorError

MAX_HEADLINE = 120
INPUTS = sorted(
    p.name
    for p in REAL_TRACES.iterdir()
    if (p.is_dir() and p.name != "fuzz" and any(p.glob("*.json*"))) or p.name.endswith((".json", ".json.gz"))
)


@pytest.fixture
def findings_of(corpus_report):
    """The findings of a real trace by name (None: the trace is refused in one line), each trace's report computed
    once per session (``conftest.corpus_report``, shared with tests/test_rules_golden.py)."""

    def get(name: str) -> list[dict] | None:
        report = corpus_report(REAL_TRACES / name)
        return None if isinstance(report, PerfDoctorError) else report["findings"]

    return get


@pytest.mark.parametrize("name", INPUTS)
def test_every_headline_is_one_line_of_at_most_120_characters(findings_of, name):
    findings = findings_of(name)
    if findings is None:
        pytest.skip(f"{name} is refused (a damaged trace): no findings")
    for f in findings:
        h = f["headline"]
        assert h and "\n" not in h and h == h.strip(), (f["code"], h)
        assert len(h) <= MAX_HEADLINE, f"{name} {f['code']}: {len(h)} characters: {h}"
        # the claim, not the method or the saving: those have their own fields and columns
        assert "replay" not in h and "saves" not in h and "{" not in h, (f["code"], h)
        if f["rank"] is not None and len(f["evidence"]["ranks"]) > 1:
            assert h.startswith(f"rank {f['rank']}: "), (f["code"], h)


def test_the_corpus_has_findings_to_check(findings_of):
    """The headline test proves something only where rules fire: at least 5 traces, 10 findings, 8 rules."""
    found = [f for name in INPUTS for f in (findings_of(name) or [])]
    assert len({f["code"] for f in found}) >= 8 and len(found) >= 10
    assert sum(bool(findings_of(name)) for name in INPUTS) >= 5
