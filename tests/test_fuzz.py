"""Seeded mutation fuzzing of ``perfdoctor report`` over the bundled traces (perfdoctor.tools.fuzz).

CI runs a few dozen cases; a long run: ``PERFDOCTOR_FUZZ_CASES=10000 pytest tests/test_fuzz.py`` or
``python -m perfdoctor.tools.fuzz --cases 10000 --save /tmp/fuzz``. Any traceback, an exit 2 that is not
one line naming the file, a case slower than the timeout, a numpy RuntimeWarning or an absurd value
(a step over a day, a percentage outside 0–100) fails the test with the mutation that caused it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from perfdoctor.tools import fuzz

REPO = Path(__file__).resolve().parents[1]
CASES = int(os.environ.get("PERFDOCTOR_FUZZ_CASES", "40"))
SEED = int(os.environ.get("PERFDOCTOR_FUZZ_SEED", "20261201"))


@pytest.fixture(scope="module")
def docs():
    found = fuzz.corpus([REPO / "tests" / "data", REPO / "sample_traces"], 64 * 1024)
    if not found:
        pytest.skip("no small bundled traces to mutate")
    return found


def test_same_seed_same_cases(docs):
    a = [(c.name, c.data, c.mutations) for c in fuzz.cases(docs, 5, 7)]
    b = [(c.name, c.data, c.mutations) for c in fuzz.cases(docs, 5, 7)]
    assert a == b and len({d for _, d, _ in a}) == 5


def test_mutated_traces_end_in_a_report_or_one_line(docs):
    tally = fuzz.campaign(docs, CASES, SEED, timeout_s=30.0)
    problems = [f"{outcome}: {detail} <- {' '.join(case.mutations)}" for outcome, detail, case in tally.failures]
    assert problems == []
    assert tally.outcomes["report"] + tally.outcomes["clean_error"] == CASES


def test_a_crash_is_counted_with_its_place(tmp_path, monkeypatch):
    """The harness itself: an exception escaping the CLI is a 'traceback' naming where it was raised."""
    from perfdoctor.trace import tables

    def boom(raw):
        raise ZeroDivisionError("planted")

    monkeypatch.setattr(tables, "build_tables", boom)
    monkeypatch.setattr("perfdoctor.trace.build_tables", boom)
    case = fuzz.Case(b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "ts": 1, "dur": 1}]}', "t.json", ["planted"])
    outcome, detail, _ = fuzz.run_case(case, tmp_path, 30.0)
    # the last perfdoctor frame (the planted function lives in this test file)
    assert outcome == "traceback" and detail.startswith("ZeroDivisionError at trace/__init__.py:")
    assert detail.endswith("(load_trace)")


def test_impossible_shares_are_counted_and_relative_changes_are_not():
    """The harness itself: a share outside 0-100 (or a fraction outside 0-1) anywhere in a report is named; a
    change against a baseline (a straggler 250% above the median) is not a share."""
    report = {
        "ranks": [
            {
                "roofline": {"ops": [{"pct_of_attainable": 137.7, "note": "above its roof"}]},
                "devices": [{"idle_pct": 100.0, "utilization": 1.2}],
                "memory": {"devices": [{"peak_reserved_fraction": 0.5}]},
            }
        ],
        "findings": [{"saving_pct_of_step": -3.0, "evidence": {"excess_pct": 250.0, "peak_reserved_pct": 133.3}}],
    }
    assert fuzz.impossible_shares(report) == [
        "pct_of_attainable = 137.7",
        "peak_reserved_pct = 133.3",
        "saving_pct_of_step = -3",
        "utilization = 1.2",
    ]
