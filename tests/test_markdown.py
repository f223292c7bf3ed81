"""Markdown and JSON outputs compared exactly with golden files; Markdown escaping and content.

Refresh the goldens after an intended change: ``PERFDOCTOR_UPDATE_GOLDEN=1 pytest tests/test_markdown.py``
(then read the diff).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import REPO, shared_trace
from reporting import cli, write_reports
from tracebuilder import TraceBuilder

from perfdoctor.render.markdown import esc, esc_prose, render_markdown

GOLDEN = Path(__file__).resolve().parent / "golden"
UPDATE = os.environ.get("PERFDOCTOR_UPDATE_GOLDEN") == "1"
SAMPLES = sorted(p for p in (REPO / "sample_traces").glob("*") if p.is_dir() or p.name.endswith((".json", ".json.gz")))


def check_golden(name: str, data: bytes) -> None:
    path = GOLDEN / name
    if UPDATE:
        path.write_bytes(data)
    assert path.exists(), f"no golden {path}; run with PERFDOCTOR_UPDATE_GOLDEN=1 to create it"
    assert data.decode() == path.read_text(), f"{name} differs from its golden (PERFDOCTOR_UPDATE_GOLDEN=1 to refresh)"


def synthetic_trace(tmp_path: Path) -> str:
    """Two 1 ms steps: a 300/500 µs GEMM, a 100 µs H2D copy, a DataLoader fetch that leaves the GPU idle."""
    tb = TraceBuilder()
    for i, base in enumerate((0, 1000)):
        tb.step(i + 1, base, 1000)
        tb.annotation("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", base + 1, 80)
        tb.memcpy(launch_ts=base + 90, start=base + 100, dur=100)
        tb.launch("volta_sgemm_128x64_nn", launch_ts=base + 200, start=base + 250, dur=300 + 200 * i)
    tb.write(tmp_path / "two_steps.json")
    return "two_steps.json"


@pytest.mark.parametrize("fmt", ["md", "json"])
def test_synthetic_trace_golden(fmt, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the report names the trace as given: a relative path
    rc, out, err = cli("report", synthetic_trace(tmp_path), "--format", fmt)
    assert rc == 0, err
    check_golden(f"synthetic_two_steps.{fmt}", out.encode())


@pytest.mark.parametrize("sample", SAMPLES, ids=[p.name for p in SAMPLES])
@pytest.mark.parametrize("fmt", ["md", "json"])
def test_sample_trace_golden(sample, fmt, monkeypatch):
    monkeypatch.chdir(REPO)
    rc, out, err = cli("report", sample.relative_to(REPO).as_posix(), "--format", fmt)
    assert rc == 0, err
    check_golden(f"{sample.name}.{fmt}", out.encode())


def test_markdown_of_resnet_names_the_fix_and_the_breakdown(tmp_path, monkeypatch):
    trace = shared_trace("kineto__resnet50_num_workers_0__worker0.pt.trace.json.gz")
    monkeypatch.chdir(trace.parent)  # the trace named as a user types it: the length below is the clone's anywhere
    out = write_reports([trace.name], tmp_path)
    md = out["md"].read_text()
    assert md.startswith("# perfdoctor report\n")
    assert "| median step time | **177.44 ms** |" in md
    # the replayed saving of prefetched batches (56.8 ms: the 59.0 ms of the fetches as 0 µs hand-offs, less the
    # hand-off: the 19.3 MB batch copy 1.43 ms longer in each step (0.074 ns/B) and, in the first, freeing the
    # previous batch (0.25 ns/B, 4.8 ms) with no device work to hide it); CUDA graphs' replayed saving ranks above it
    assert "**PD101** " in md and "saves about 56.76" in md  # a replayed point estimate, not a bound
    assert "| 1 | **PD101** |" in md and "| about 56.76 ms (32.0%) | 120.84 ms |" in md  # the plan's first row
    assert "| idle: waiting for DataLoader → **PD101** | 59.26" in md and "| 33.4% |" in md
    assert "| **step (total)** | **177.59 ms** | **100.0%** |" in md
    assert "`prefetch_factor` 2-4" in md  # each fix whole: Markdown has no --details
    assert len(md) < 20_000  # fits a pull-request comment (GitHub's limit: 65,536 characters)


def test_esc_neutralises_markdown_and_html():
    assert esc("a|b") == r"a\|b"
    assert esc("[x](javascript:alert(1))") == r"\[x\](javascript:alert(1))"
    assert esc("<img src=x>") == r"\<img src=x\>"
    assert esc("line1\nline2") == "line1 line2"
    assert esc("__init__ `x` *y*") == r"\_\_init\_\_ \`x\` \*y\*"
    assert esc_prose("use `num_workers=N` <b>") == r"use `num_workers=N` \<b\>"


def test_markdown_without_findings_says_the_engine_did_not_run():
    from test_html_report import _tiny_report

    md = render_markdown(_tiny_report())
    assert "_The rule engine did not run on this report: no findings are available._" in md


def test_every_format_lists_the_findings_in_the_engines_order(tmp_path):
    """ResNet50 FP32 V100 nw0: the JSON positions are the fix plan's order (each the fix that saves most on top of
    the ones above it: PD203's 19.02 ms is on top of PD101 and PD103), then PD205, which saves nothing once those
    are in; Markdown and HTML keep the positions, and a saving on top of other fixes says which."""
    from html import unescape

    out = write_reports([str(shared_trace("kineto__resnet50_num_workers_0__worker0.pt.trace.json.gz"))], tmp_path)
    ranked = sorted((f for f in out["report"]["findings"] if f["position"]), key=lambda f: f["position"])
    codes = [f["code"] for f in ranked]
    assert codes == ["PD101", "PD103", "PD203", "PD205"]
    md = out["md"].read_text()
    html = unescape(out["html"].read_text())
    for text in (md, html):
        at = [text.index(f"{c}</span>" if text is html else f"**{c}**") for c in codes]
        assert at == sorted(at), codes
    assert "saves about 19.02 ms/step (10.7%) once PD101, PD103 are fixed" in md
    assert "off the plan: no further saving once PD101, PD103, PD203 are fixed" in md
    assert "saves about 16.25 ms/step (9.2%) once PD101 is fixed" in md
    assert "per step (10.7%) once PD101, PD103 are fixed" in html
