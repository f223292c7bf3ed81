"""The HTML report in headless Chromium, as a reviewer opens it: loads with no console error and no
network request, shows every finding code, and leaves a full-page screenshot in tests/_artifacts/."""

from __future__ import annotations

import re

import pytest
from browser import Chromium, browser, save_screenshot  # noqa: F401  (browser is a fixture)
from conftest import shared_trace
from reporting import write_reports

pytestmark = pytest.mark.browser

CASES = {
    "resnet50": ["kineto__resnet50_num_workers_0__worker0.pt.trace.json.gz"],
    "dlrm_8ranks": ["param__dlrm_8ranks"],
    "bert_h100": ["tracelens__h100__bert-small-uncased.json.gz"],
    "cpu_only": ["hta__cpu_only__rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"],
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_report_opens_cleanly_and_shows_every_finding(case, browser, tmp_path):  # noqa: F811
    out = write_reports([str(shared_trace(n)) for n in CASES[case]], tmp_path, stem=case)
    page = browser.open_page(out["html"])
    shot = save_screenshot(f"report_{case}", page.png)
    assert shot.stat().st_size > 10_000
    assert page.errors == [], page.errors
    assert page.requests == [], page.requests
    assert page.dialogs == []
    assert page.title.startswith("perfdoctor report")
    assert page.scroll_width <= 1200, "the page overflows horizontally"  # open_page's viewport width
    for heading in ("1. Summary", "2. Fix plan", "3. Where the time goes"):
        assert heading in page.text
    # sections are numbered without gaps when one is absent (issue 11: a CPU trace has no roofline section)
    numbers = [int(n) for n in re.findall(r"^(\d+)\. [A-Z]", page.text, flags=re.M)]
    assert numbers == list(range(1, len(numbers) + 1)) and len(numbers) >= 5, numbers
    assert re.search(rf"^{numbers[-1]}\. How it was measured", page.text, flags=re.M)
    report = out["report"]
    codes = [f["code"] for f in report.get("findings", [])]
    for code in codes:
        assert code in page.visible_codes and code in page.text
    if case == "resnet50":
        assert "PD101" in codes  # DataLoader starvation fires on num_workers=0
    if case == "dlrm_8ranks":
        assert "rank spread" in page.text and "59.1%" in page.text


def test_harness_catches_errors_requests_and_dialogs(browser, tmp_path):  # noqa: F811
    """The checks above can fail: a page that logs an error, loads an image and alerts is caught."""
    bad = tmp_path / "bad.html"
    bad.write_text(
        "<!DOCTYPE html><html><head><title>bad</title></head><body><p>hi</p>"
        '<img src="http://198.51.100.7/x.png"><script>console.error("boom"); alert("x")</script>'
        "</body></html>"
    )
    page = browser.open_page(bad)
    assert any("boom" in e for e in page.errors)
    assert page.requests == ["http://198.51.100.7/x.png"]
    assert page.dialogs == ["x"]
