"""Shared fixtures: the real traces, from ../shared/traces or else the small licensed copies in tests/data.

A fresh clone has tests/data only (real GPU traces under 1 MiB compressed, their origin and licence in
tests/data/README.md); the large traces and those without a licence to redistribute live in ../shared/traces next
to the repository, and a test that needs one of them skips saying so. ``PERFDOCTOR_SHARED_TRACES`` points at
another copy of that folder (set it to a missing path to run as a fresh clone does).
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_TRACES = Path(os.environ.get("PERFDOCTOR_SHARED_TRACES") or REPO.parent / "shared" / "traces")
DATA_TRACES = Path(__file__).resolve().parent / "data"
# the folder the "every real trace" tests walk: the full shared set when present, else the copies in tests/data
REAL_TRACES = SHARED_TRACES if SHARED_TRACES.exists() else DATA_TRACES
sys.path.insert(0, str(Path(__file__).resolve().parent))
# hermetic: no test may see this machine's `perfdoctor calibrate` results (subprocesses inherit this)
os.environ["PERFDOCTOR_HOME"] = tempfile.mkdtemp(prefix="perfdoctor-home-")


def shared_trace(name: str) -> Path:
    """Path of a real trace (file or per-rank directory): ../shared/traces, else tests/data; skips when neither
    has it."""
    for folder in (SHARED_TRACES, DATA_TRACES):
        if (folder / name).exists():
            return folder / name
    pytest.skip(
        f"real trace {name} is not in tests/data (over 1 MiB compressed, or no licence to copy it): it lives "
        f"in ../shared/traces next to the repository (see tests/data/README.md)"
    )


def real_trace_names(pattern: str = "*.json*") -> list[str]:
    """Names of the real trace files the "every real trace" tests run on (see ``REAL_TRACES``)."""
    return sorted(p.name for p in REAL_TRACES.glob(pattern))


def real_rank_files(folder: Path | None = None) -> list[Path]:
    """Every real rank trace the "every real trace" tests run on: each trace file of ``folder`` (default
    ``REAL_TRACES``) and each per-rank file of its job directories. Left out: ``bad__`` files (damaged on purpose,
    tested for their one-line error) and ``fuzz/`` (hostile-input reproducers, tests/test_fuzz_reproducers.py),
    which are not sample traces."""
    folder = REAL_TRACES if folder is None else folder
    if not folder.exists():
        return []
    out: list[Path] = []
    for p in sorted(folder.iterdir()):
        if p.is_dir() and p.name != "fuzz":
            out += sorted(q for q in p.glob("*.json*") if q.is_file() and not q.name.startswith("bad__"))
        elif p.is_file() and p.name.endswith((".json", ".json.gz")) and not p.name.startswith("bad__"):
            out.append(p)
    return out


@pytest.fixture
def shared() -> type[Path]:
    return shared_trace


@pytest.fixture(scope="session")
def corpus_report():
    """``get(path)``: the rule engine's report dict of a real trace (a file, or a folder of a job's per-rank traces)
    with every rule, computed once per test session and shared by the tests that walk the corpus (the golden of
    every rule on every shared trace, the headlines); a trace refused in one line gives its PerfDoctorError instead.
    """
    from rules_helpers import run_rules

    from perfdoctor.errors import PerfDoctorError

    done: dict[Path, dict | PerfDoctorError] = {}

    def get(path: Path) -> dict | PerfDoctorError:
        if path not in done:
            try:
                done[path] = run_rules(sorted(path.glob("*.json*")) if path.is_dir() else [path], None).report
            except PerfDoctorError as exc:
                done[path] = exc
        return done[path]

    return get


# what a test module calls to reach the real traces: a module naming one of these behaves differently without
# ../shared/traces, so it is what `.ci/run` runs a second time with the shared folder hidden
_SHARED_NAMES = ("SHARED_TRACES", "REAL_TRACES", "shared_trace", "real_trace_names", "real_rank_files", "shared)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark ``shared_traces`` every test of a module that reaches the real traces through this file."""
    seen: dict[Path, bool] = {}
    for item in items:
        path = Path(str(item.fspath))
        if path not in seen:
            text = path.read_text(encoding="utf-8") if path.suffix == ".py" else ""
            seen[path] = path.name != "conftest.py" and any(name in text for name in _SHARED_NAMES)
        if seen[path]:
            item.add_marker(pytest.mark.shared_traces)
