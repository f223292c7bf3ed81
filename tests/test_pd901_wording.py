"""PD901's headline and message when what the trace lacks disabled no check.

The CPU-only gloo trace of HolisticTraceAnalysis (rank 34) holds a single ProfilerStep, so PD901 fires for "enough
steps (1 < 3)"; no check needs three steps there, and the checks that are skipped (19) are skipped for other reasons
(no DataLoader, no kernels on a CPU-only trace, no run data). "0 check(s) skipped" printed beside "Skipped checks
(19)" read as a contradiction; the finding now says that nothing was skipped for what it lacks.
"""

from __future__ import annotations

import gzip
import json
import re

from conftest import shared_trace
from reporting import cli

TRACE = "hta__cpu_only__rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"


def _profiler_steps(path: object) -> list[str]:
    """ProfilerStep#N annotation names in the raw trace, read with the standard library only."""
    with gzip.open(str(path), "rt", encoding="utf-8") as fh:
        events = json.load(fh)["traceEvents"]
    return [e["name"] for e in events if str(e.get("name", "")).startswith("ProfilerStep#")]


def test_pd901_with_nothing_disabled_does_not_say_zero_checks_skipped():
    path = shared_trace(TRACE)
    steps = _profiler_steps(path)
    assert steps == ["ProfilerStep#551"]  # one step: below PD901's min_steps of 3

    rc, out, err = cli("report", str(path), "--format", "json")
    assert rc == 0, err
    report = json.loads(out)
    (pd901,) = [f for f in report["findings"] if f["code"] == "PD901"]
    assert pd901["evidence"]["lacks"] == ["enough steps (1 < 3)"]
    assert pd901["evidence"]["n_disabled"] == 0 and pd901["evidence"]["disabled_checks"] == {}
    assert pd901["headline"] == "The trace lacks enough steps (1 < 3): no check skipped for it"
    assert pd901["message"].startswith("The trace lacks enough steps (1 < 3); no check needs what it lacks")
    # the report does skip checks, each for its own reason, none of them for the number of steps
    assert len(report["skipped_checks"]) >= 19  # every rule that lacks its data, each with its reason
    assert not any(
        re.search(r"only \d+ (analysed )?step|enough steps|ProfilerStep", s["reason"]) for s in report["skipped_checks"]
    )

    rc, text, err = cli("report", str(path))
    assert rc == 0, err
    assert "0 check(s)" not in text
    assert "PD901 The trace lacks enough steps (1 < 3): no check skipped for it" in text
