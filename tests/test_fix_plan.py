"""The fix plan a user reads first: filters never change a shown number, every format shows the same plan in the same
order, piped output fits a CI log (120 columns, no word broken, a bounded number of lines), and a job's savings are
of the job's step. Real V100 ResNet50 and A100 MoE traces (../shared/traces, or the copies in tests/data)."""

from __future__ import annotations

import json
import re
from html import unescape
from pathlib import Path
from typing import Any

import pytest
from conftest import shared_trace
from reporting import cli

NW0 = "kineto__resnet50_num_workers_0__worker0.pt.trace.json.gz"
NW4 = "kineto__resnet50_num_workers_4__worker0.pt.trace.json.gz"


def _json(*args: str) -> dict[str, Any]:
    rc, out, err = cli("report", *args, "--format", "json")
    assert rc in (0, 1), err
    report: dict[str, Any] = json.loads(out)
    return report


def _shown(f: dict[str, Any]) -> tuple[Any, ...]:
    """The numbers a reader sees of one finding."""
    return (
        f["code"],
        f["severity"],
        f["position"],
        f["plan_position"],
        f["saving_us_per_step"],
        f["saving_pct_of_step"],
        f["step_after_us"],
        f["saving_alone_us_per_step"],
        f["plan_note"],
    )


@pytest.mark.parametrize("name", [NW0, NW4])
def test_select_shows_the_full_reports_numbers(name: str) -> None:
    """PD203 fires only on top of the host-side fixes (under its 3% alone): ``--select PD203`` ran PD203 alone and
    reported nothing, so a gate ``--select PD203 --fail-on high`` passed; now it shows the full report's PD203."""
    path = str(shared_trace(name))
    full = {f["code"]: f for f in _json(path)["findings"]}
    only = _json(path, "--select", "PD203")
    assert [f["code"] for f in only["findings"]] == ["PD203"]
    assert _shown(only["findings"][0]) == _shown(full["PD203"])
    assert full["PD203"]["severity"] == "high"
    rc, _, _ = cli("report", path, "--select", "PD203", "--fail-on", "high")
    assert rc == 1
    # the plan lists the shown entries only, at their places in the full plan
    assert [e["code"] for e in only["plan"]] == ["PD203"]
    assert only["plan"][0]["step_after_us"] == full["PD203"]["step_after_us"]


def test_ignore_means_the_fix_will_not_be_made() -> None:
    """``--ignore PD101`` on nw0: PD101 is not checked, the report says it is assumed unfixed, and the plan is
    replayed without the prefetch: PD103's CUDA graphs are then measured alone (63.8 ms: with no worker to fetch
    batches, the graphs free the host to fetch the next batch while the device computes)."""
    path = str(shared_trace(NW0))
    full = {f["code"]: f for f in _json(path)["findings"]}
    rep = _json(path, "--ignore", "PD101")
    found = {f["code"]: f for f in rep["findings"]}
    assert "PD101" not in found
    assert "PD101 is assumed unfixed (--ignore)" in rep["findings_note"]
    assert rep["plan"][0]["code"] == "PD103"
    assert found["PD103"]["saving_after_codes"] == []
    assert found["PD103"]["saving_us_per_step"] > full["PD103"]["saving_us_per_step"] + 40_000
    # every entry is the step before it less its saving
    step = rep["denominator"]["value_us"]
    for e in rep["plan"]:
        assert e["step_after_us"] == pytest.approx(step - e["saving_us_per_step"], abs=0.01)
        step = e["step_after_us"]


def test_every_format_shows_the_same_plan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Terminal (piped), HTML, Markdown and JSON: the plan's codes in one order, with the same savings and steps;
    the HTML's top fixes are the plan's first entries; the verdict names the plan's first entry."""
    monkeypatch.delenv("COLUMNS", raising=False)
    path = str(shared_trace(NW0))
    for fmt in ("html", "md"):
        rc, _, err = cli("report", path, "-o", str(tmp_path / f"r.{fmt}"))
        assert rc == 0, err
    rep = _json(path)
    rc, term, _ = cli("report", path)
    assert rc == 0
    html = unescape((tmp_path / "r.html").read_text())
    md = (tmp_path / "r.md").read_text()
    plan = rep["plan"]
    assert [e["code"] for e in plan] == ["PD101", "PD103", "PD203"]
    assert plan[0]["code"] in rep["verdict"]
    for e in plan:
        saving = f"{e['saving_us_per_step'] / 1000:,.1f} ms ({e['saving_pct_of_step']:.1f}%)"
        row = re.search(rf"│ +\d+ │ {e['code']} +│.*│ +≈ ([\d.]+ ms \([\d.]+%\)) │ +([\d.]+) ms │", term)
        assert row is not None and row[1] == saving and float(row[2]) == round(e["step_after_us"] / 1000, 1)
        assert f"**{e['code']}** |" in md and f"| {e['step_after_us'] / 1000:,.2f} ms |" in md
    top = html[html.index("<h3>Top fixes</h3>") : html.index('id="denominator"')]
    assert [m for m in re.findall(r'<span class="code">(PD\d+)</span>', top)] == [e["code"] for e in plan]
    for text, marker in ((term, "│ {} "), (md, "**{}**"), (html, '<span class="code">{}</span>')):
        at = [text.index(marker.format(e["code"])) for e in plan]
        assert at == sorted(at)
    assert "PD205" in term and "no further saving once PD101, PD103, PD203 are fixed" in term


def test_piped_output_fits_a_ci_log(monkeypatch: pytest.MonkeyPatch) -> None:
    """Not a terminal, no $COLUMNS: 120 columns; the single-rank nw0 report fits 60 lines, no line is wider, and no
    word is broken across lines (each line's words are whole words of the report's text); $COLUMNS wins."""
    monkeypatch.delenv("COLUMNS", raising=False)
    path = str(shared_trace(NW0))
    rc, out, err = cli("report", path)
    assert rc == 0
    lines = (out + err).splitlines()
    assert len(lines) <= 60, len(lines)
    assert max(len(line) for line in lines) <= 120
    assert "step time: median 177.44 ms (p10 170.27 ms, p90 185.06 ms; min 165.98 ms, max 187.95 ms)" in out
    monkeypatch.setenv("COLUMNS", "100")
    _, out100, _ = cli("report", path)
    assert max(len(line) for line in out100.splitlines()) <= 100
    # --details adds each finding's evidence and method
    _, details, _ = cli("report", path, "--details")
    assert "method: replay of the step's dependency graph" in details and len(details) > len(out)


def test_a_job_states_savings_of_the_jobs_step() -> None:
    """ykcai MoE 3-layer on 2 A100s: rank 1's 23.17 ms step is the job's. PD203 fires on rank 0 only (11% of the
    job's step on rank 0): fixing it there leaves rank 1's step, so it saves the job nothing and is off the plan,
    with its saving on rank 0 beside it; PD301, on both ranks, is the plan's entry, its step after the job's."""
    rep = _json(str(shared_trace("ykcai__a100x2_moe_3layer_before")))
    found = {f["code"]: f for f in rep["findings"]}
    denom = rep["denominator"]
    assert denom["rank"] == 1 and denom["value_us"] == pytest.approx(23_170, abs=10)
    pd203 = found["PD203"]
    assert pd203["evidence"]["ranks"] == [0] and pd203["plan_position"] is None
    assert pd203["saving_us_per_step"] == 0.0 and pd203["saving_pct_of_step"] == 0.0
    assert pd203["plan_note"].startswith("saves the job nothing: rank 1 sets the job's step")
    assert pd203["saving_alone_us_per_step"] > 1000  # ~2.5 ms on rank 0
    assert [e["code"] for e in rep["plan"]] == ["PD301"]
    pd301 = found["PD301"]
    assert pd301["rank"] == 1  # the job's slowest rank speaks
    assert pd301["step_after_us"] == pytest.approx(denom["value_us"] - pd301["saving_us_per_step"], abs=0.01)
    for f in rep["findings"]:
        if f["saving_us_per_step"]:
            assert f["saving_pct_of_step"] == pytest.approx(100 * f["saving_us_per_step"] / denom["value_us"], abs=1e-3)
