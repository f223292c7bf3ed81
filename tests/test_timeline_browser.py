"""The HTML report in headless Chromium: every finding's block shows the step and time range to look at (the
slowest step it fires on and that step's window in the trace's clock), with a screenshot in tests/_artifacts/."""

from __future__ import annotations

import pytest
from browser import browser, save_screenshot  # noqa: F401  (browser is a fixture)
from conftest import shared_trace
from reporting import write_reports

pytestmark = pytest.mark.browser


def test_each_finding_shows_where_to_look(browser, tmp_path):  # noqa: F811
    out = write_reports([str(shared_trace("kineto__resnet50_num_workers_0__worker0.pt.trace.json.gz"))], tmp_path)
    page = browser.open_page(out["html"])
    save_screenshot("report_where_to_look", page.png)
    report = out["report"]
    sec = report["ranks"][0]
    rows = {s["step"]: s for d in sec["devices"] if d["device"] == sec["primary_device"] for s in d["steps"]}
    assert report["findings"]
    for f in report["findings"]:
        n = max(f["steps"], key=lambda k: rows[k]["dur_us"])  # nw0: step 5 (187.9 ms) for every finding
        start, end = rows[n]["start_us"], rows[n]["start_us"] + rows[n]["dur_us"]
        assert f"Where to look: step {n} (the slowest step it fires on): ts {start:.0f} to {end:.0f} µs" in page.text
