"""The HTML diff in headless Chromium: the ResNet50 pair and a hostile kernel name, opened as a reviewer would."""

from __future__ import annotations

import pytest
from browser import browser, save_screenshot  # noqa: F401  (browser is a fixture)
from conftest import shared_trace
from test_diff import HOSTILE, steps_trace

from perfdoctor.cli import main

pytestmark = pytest.mark.browser


def test_resnet_diff_page_opens_cleanly(browser, tmp_path, capsys):  # noqa: F811
    out = tmp_path / "diff.html"
    before = shared_trace("kineto__resnet50_num_workers_0__worker0.pt.trace.json.gz")
    after = shared_trace("kineto__resnet50_num_workers_4__worker0.pt.trace.json.gz")
    assert main(["diff", str(before), str(after), "-o", str(out)]) == 0
    page = browser.open_page(out)
    assert save_screenshot("diff_resnet50", page.png).stat().st_size > 10_000
    assert page.errors == [], page.errors
    assert page.requests == [] and page.dialogs == []
    assert page.title.startswith("perfdoctor diff — faster")
    assert page.scroll_width <= 1200, "the page overflows horizontally"
    for text in ("Where the time moved", "Predicted vs measured", "PD101", "resolved", "Top movers: kernels"):
        assert text in page.text


def test_hostile_kernel_name_renders_as_text(browser, tmp_path):  # noqa: F811
    b = steps_trace(tmp_path / "b.json", [1000, 1100, 900, 1000], [(HOSTILE, 300)])
    a = steps_trace(tmp_path / "a.json", [800, 850, 750, 800], [(HOSTILE, 200)])
    out = tmp_path / "diff.html"
    assert main(["diff", str(b), str(a), "-o", str(out)]) == 0
    page = browser.open_page(out, bypass_csp=True)  # even without the CSP no script runs
    assert page.dialogs == [] and page.requests == []
    assert "</script><script>alert(1)</script>" in page.text
