"""Shared fixtures: the real traces in ../shared/traces (skip when absent)."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_TRACES = REPO.parent / "shared" / "traces"
sys.path.insert(0, str(Path(__file__).resolve().parent))
# hermetic: no test may see this machine's `perfdoctor calibrate` results (subprocesses inherit this)
os.environ["PERFDOCTOR_HOME"] = tempfile.mkdtemp(prefix="perfdoctor-home-")


def shared_trace(name: str) -> Path:
    """Path of a real trace in ../shared/traces; skips the test when it is absent."""
    p = SHARED_TRACES / name
    if not p.exists():
        pytest.skip(f"real trace {name} not available (../shared/traces is absent)")
    return p


@pytest.fixture
def shared() -> type[Path]:
    return shared_trace
