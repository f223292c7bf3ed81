"""The suite runs in a fresh clone: no ../shared beside it, any folder name, fuzz reproducers never taken as traces.

`.ci/run` runs the fast tests a second time with ``PERFDOCTOR_SHARED_TRACES`` pointing nowhere; these tests keep
that run meaningful: every test reaches the shared traces through tests/conftest.py (the one place that reads the
variable), and the fallback to tests/data lists real traces only.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from conftest import DATA_TRACES, real_rank_files

TESTS = Path(__file__).resolve().parent
# a path built to the shared folder: `... / "shared"`, `"../shared/..."` in a Path(...) or os.path.join
SHARED_PATH = re.compile(r"""/\s*["']shared["']|Path\(\s*["'][./]*shared|join\([^)]*["']shared["']""")


def test_only_conftest_finds_the_shared_folder():
    found = [
        f"{p.relative_to(TESTS)}:{n}"
        for p in sorted(TESTS.rglob("*.py"))
        if p.name not in ("conftest.py", Path(__file__).name)
        for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if SHARED_PATH.search(line)
    ]
    assert found == [], "use conftest.SHARED_TRACES / shared_trace() so PERFDOCTOR_SHARED_TRACES is honoured"


def test_fallback_rank_files_are_the_real_traces_of_tests_data():
    # listed here with os.walk: top-level trace files and the files of job directories, nothing under fuzz/,
    # no deliberately damaged bad__ file
    expected = set()
    for root, dirs, files in os.walk(DATA_TRACES):
        depth = len(Path(root).relative_to(DATA_TRACES).parts)
        dirs[:] = [d for d in dirs if d != "fuzz"]
        for name in files:
            if depth <= 1 and ".json" in name and not name.startswith("bad__"):
                expected.add(Path(root) / name)
    got = real_rank_files(DATA_TRACES)
    assert set(got) == expected and len(got) == len(expected)
    assert not any("fuzz" in p.relative_to(DATA_TRACES).parts for p in got)
    assert sum(p.parent.name == "param__dlrm_8ranks" for p in got) == 8  # the 8-rank job's per-rank files


def test_no_assertion_reads_the_clones_folder_name():
    # a clone in a folder named like the package (…/perfdoctor/perfdoctor/...) must not confuse a frame filter
    from perfdoctor.tools import fuzz

    assert fuzz._package_relative(str(Path(fuzz.__file__))) == "tools/fuzz.py"
    assert fuzz._package_relative(str(TESTS / "test_fuzz.py")) is None
    assert fuzz._package_relative("/somewhere/perfdoctor/.venv/lib/numpy/core.py") is None


def test_tests_that_read_real_traces_are_marked_for_the_hidden_shared_run(request):
    # `.ci/run` runs `-m "shared_traces ..."` with the shared folder hidden: a test that reaches conftest's helpers
    # carries the mark, directly (the one above calls real_rank_files) or through a module-level definition
    # (test_rules_golden.py's golden test, through its INPUTS constant built from SHARED_TRACES); one that does not
    # is left out (this one, every test of test_intervals.py)
    from conftest import _reaching

    mine = {
        i.name: i.get_closest_marker("shared_traces") is not None
        for i in request.session.items
        if i.fspath == request.node.fspath
    }
    assert mine["test_fallback_rank_files_are_the_real_traces_of_tests_data"] and not mine[request.node.name]
    assert "test_rules_on_shared_traces_match_golden" in _reaching(TESTS / "test_rules_golden.py")
    text = (TESTS / "test_intervals.py").read_text(encoding="utf-8")
    assert "shared" not in text.lower() and "REAL_TRACES" not in text  # its tests cannot tell the difference
    assert not {n for n in _reaching(TESTS / "test_intervals.py") if n.startswith("test_")}
