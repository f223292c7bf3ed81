"""Trace text is hostile: kernel, op, annotation, device and file names carrying HTML/JS payloads
render as text in the HTML report (and in Markdown), never as markup or script."""

from __future__ import annotations

import pytest
from reporting import embedded_json, write_reports
from test_html_report import assert_self_contained
from tracebuilder import TraceBuilder

SCRIPT = "</script><script>alert(1)</script>"
IMG = "<img src=x onerror=alert(1)>"
SVG = "<svg onload=alert(document.domain)>"
QUOTE = "\"'><iframe src=javascript:alert(1)>"
PAYLOADS = (SCRIPT, IMG, SVG, QUOTE)


def hostile_trace(tmp_path):
    tb = TraceBuilder(device_name=f"GPU {IMG}")
    tb.step(1, 0, 1000).step(2, 1000, 1000)
    for base in (0, 1000):
        tb.cpu_op(f"aten::{IMG}", base + 5, 50)
        tb.annotation(f"annotation {SVG}", base + 60, 20)
        tb.launch(f"void kernel_{SCRIPT}(float*)", launch_ts=base + 10, start=base + 100, dur=300)
        tb.launch(f"sgemm {QUOTE}", launch_ts=base + 20, start=base + 400, dur=100)
        tb.cpu_op(f"aten::mm {SCRIPT}", base + 15, 30)
    folder = tmp_path / f"run {SVG}"
    folder.mkdir()
    return str(tb.write(folder / f"trace {IMG}.json"))


@pytest.fixture
def hostile(tmp_path):
    return write_reports([hostile_trace(tmp_path)], tmp_path, stem="hostile")


def test_html_shows_payloads_only_as_text(hostile):
    html = hostile["html"].read_text()
    assert_self_contained(html)  # exactly one (inert, JSON) script element, no handlers, no URLs
    for p in PAYLOADS:
        assert p not in html
    assert "<img" not in html and "<svg onload" not in html and "<iframe" not in html
    # shown escaped in the top-kernel / top-op tables and the input file list
    assert "void kernel_&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;(float*)" in html
    assert "aten::&lt;img src=x onerror=alert(1)&gt;" in html
    assert "trace &lt;img src=x onerror=alert(1)&gt;.json" in html
    assert "sgemm &#34;&#39;&gt;&lt;iframe src=javascript:alert(1)&gt;" in html
    # the embedded data keeps the exact strings (escaped as \u003c inside the JSON)
    data = embedded_json(html)
    names = [k["name"] for k in data["ranks"][0]["top_kernels"]]
    assert f"void kernel_{SCRIPT}(float*)" in names
    assert data["inputs"][0]["path"].endswith(f"trace {IMG}.json")
    assert data == hostile["report"]


def test_markdown_escapes_payloads(hostile):
    md = hostile["md"].read_text()
    for p in PAYLOADS:
        assert p not in md
    # every < is backslash-escaped: no raw HTML in a PR comment but the collapsed method blocks perfdoctor writes
    ours = md.replace("<details><summary>method</summary>", "").replace("</details>", "")
    assert "<" not in ours.replace("\\<", "")
    assert r"trace \<img src=x onerror=alert(1)\>.json" in md


def test_browser_runs_no_payload(hostile):
    from browser import Chromium, save_screenshot

    b = Chromium()
    try:
        # CSP off: the page itself must not contain anything executable
        page = b.open_page(hostile["html"], bypass_csp=True)
    finally:
        b.close()
    save_screenshot("xss", page.png)
    assert page.dialogs == []
    assert page.errors == []
    assert page.requests == []
    assert f"trace {IMG}.json" in page.text  # the payload is visible as text
    assert f"void kernel_{SCRIPT}(float*)" in page.text
