"""Shared fixtures: the real traces, from ../shared/traces or else the small licensed copies in tests/data.

A fresh clone has tests/data only (real GPU traces under 1 MiB compressed, their origin and licence in
tests/data/README.md); the large traces and those without a licence to redistribute live in ../shared/traces next
to the repository, and a test that needs one of them skips saying so. ``PERFDOCTOR_SHARED_TRACES`` points at
another copy of that folder (set it to a missing path to run as a fresh clone does).
"""

from __future__ import annotations

import ast
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


# what a test calls to reach the real traces (the ``shared`` fixture by its argument name): a test that reaches one
# of these, directly or through a module-level helper, fixture, constant or parametrization, behaves differently
# without ../shared/traces, so it is what `.ci/run` runs a second time with the shared folder hidden
_SHARED_NAMES = frozenset(
    ("SHARED_TRACES", "REAL_TRACES", "shared_trace", "real_trace_names", "real_rank_files", "shared")
)


def _names_in(node: ast.AST) -> set[str]:
    """Every identifier a definition uses: names, attributes, arguments (fixtures), decorators included."""
    out: set[str] = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            out.add(n.id)
        elif isinstance(n, ast.Attribute):
            out.add(n.attr)
        elif isinstance(n, ast.arg):
            out.add(n.arg)
    return out


def _reaching(path: Path) -> set[str]:
    """The module-level names of a test module (functions, fixtures, classes, constants) that reach the real traces:
    those using a name of :data:`_SHARED_NAMES` or of another such definition, to a fixed point."""
    if path.suffix != ".py" or path.name == "conftest.py":
        return set()
    tree = ast.parse(path.read_text(encoding="utf-8"))
    uses: dict[str, set[str]] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            uses[node.name] = _names_in(node)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                for name in _names_in(t):
                    uses[name] = uses.get(name, set()) | _names_in(node.value)
    reach: set[str] = set()
    grown = True
    while grown:
        new = {name for name, used in uses.items() if name not in reach and used & (_SHARED_NAMES | reach)}
        reach |= new
        grown = bool(new)
    return reach


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark ``shared_traces`` every test that reaches the real traces through this file (:func:`_reaching`: the
    test function, or its class, is one of its module's definitions that do)."""
    seen: dict[Path, set[str]] = {}
    for item in items:
        path = Path(str(item.fspath))
        if path not in seen:
            seen[path] = _reaching(path)
        cls = getattr(item, "cls", None)
        name = getattr(item, "originalname", None) or item.name
        if name in seen[path] or (cls is not None and cls.__name__ in seen[path]):
            item.add_marker(pytest.mark.shared_traces)
