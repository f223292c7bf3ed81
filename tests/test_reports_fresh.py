"""reports/ holds the reports of every trace in sample_traces/; this fails when they are stale.

Regenerate with ``python -m perfdoctor.tools.regen_reports`` (from the repository root) and commit.
"""

from __future__ import annotations

import shutil

import pytest
from conftest import REPO
from test_html_report import assert_self_contained
from test_markdown import synthetic_trace

from perfdoctor.tools.regen_reports import main, regenerate, samples, stale


def test_committed_reports_are_fresh():
    if not samples(REPO):
        pytest.skip("sample_traces/ holds no trace yet: nothing to compare")
    bad = stale(REPO, REPO / "reports")
    assert bad == [], f"stale reports {bad}: run `python -m perfdoctor.tools.regen_reports` and commit reports/"


def test_committed_reports_are_self_contained_and_relative():
    if not samples(REPO):
        pytest.skip("sample_traces/ holds no trace yet: nothing to compare")
    for html in sorted((REPO / "reports").glob("*.html")):
        text = html.read_text()
        assert_self_contained(text)
        assert str(REPO) not in text and "/home/" not in text and "/work/" not in text  # no machine paths
        assert len(text.encode()) < 2_000_000


def test_regen_writes_three_formats_and_detects_staleness(tmp_path):
    (tmp_path / "sample_traces").mkdir()
    name = synthetic_trace(tmp_path / "sample_traces")
    written = regenerate(tmp_path, tmp_path / "reports")
    assert sorted(p.name for p in written) == ["two_steps.html", "two_steps.json", "two_steps.md"]
    html = (tmp_path / "reports" / "two_steps.html").read_text()
    assert "sample_traces/two_steps.json" in html and str(tmp_path) not in html  # path as given, relative
    assert stale(tmp_path, tmp_path / "reports") == []  # deterministic: a second run gives the same bytes
    assert main(["--root", str(tmp_path), "--check"]) == 0
    md = tmp_path / "reports" / "two_steps.md"
    md.write_text(md.read_text().replace("1.00 ms", "0.99 ms"))
    (tmp_path / "reports" / "old_sample.json").write_text("{}")
    assert stale(tmp_path, tmp_path / "reports") == ["old_sample.json", "two_steps.md"]
    assert main(["--root", str(tmp_path), "--check"]) == 1
    shutil.rmtree(tmp_path / "reports")
    assert stale(tmp_path, tmp_path / "reports") == ["two_steps.html", "two_steps.json", "two_steps.md"]
    assert name == "two_steps.json"
