"""F16: a replayed saving is a point estimate ("saves ≈" / "saves about"); only an upper bound keeps "≤" /
"up to"."""

from __future__ import annotations

import io
import re

from reporting import as_report
from rich.console import Console
from rules_helpers import DL, SGEMM
from tracebuilder import TraceBuilder

from perfdoctor import pipeline
from perfdoctor.model import to_builtins
from perfdoctor.render.html import render_html
from perfdoctor.render.markdown import render_markdown
from perfdoctor.render.terminal import render_terminal
from perfdoctor.text import is_replayed


def _report(tmp_path):
    tb = TraceBuilder()
    for n in range(3):
        s = 1000 * n
        tb.step(n + 1, s, 1000)
        tb.annotation(DL, s, 500)  # half of each step fetching the batch
        tb.launch(SGEMM, launch_ts=s + 510, start=s + 520, dur=470)
    return pipeline.build_report([str(tb.write(tmp_path / "t.json"))])


def _terminal(rep) -> str:
    buf = io.StringIO()
    render_terminal(rep, Console(file=buf, width=200, color_system=None))
    return buf.getvalue()


def test_is_replayed():
    assert is_replayed("replay of the step's dependency graph with the fix applied (x; source: y): ...")
    assert not is_replayed("replay of the step's dependency graph with the fix applied (x); an upper bound: z")
    assert not is_replayed("per-step fixed cost (device idle) × (1 − 1/g)")
    assert not is_replayed("")


def test_replayed_saving_prints_about_and_bound_prints_up_to(tmp_path):
    full = to_builtins(_report(tmp_path))
    full["findings"] = [f for f in full["findings"] if f["code"] == "PD101"]  # (PD203 fires too, as a bound)
    rep = as_report(full)
    pd101 = rep.findings[0]
    assert pd101.replayed
    assert pd101.saving_us_per_step == 500.0  # the 500 µs fetch per 1000 µs step, gone with prefetching
    ms = "0.50 ms"
    assert f"saves about {ms}" in render_markdown(rep) and "saves up to" not in render_markdown(rep)
    page = render_html(rep)
    assert f"saves about {ms} per step" in page and f"Saves about {ms} per step" in page
    assert "saves up to" not in page
    term = _terminal(rep)
    assert "≈ " in term and "≤" not in term
    # the same finding with a heuristic (upper-bound) method: "up to" / "≤"
    doc = to_builtins(rep)
    for f in doc["findings"]:
        f["saving_method"] = "upper bound: DataLoader idle per step"
    bound = as_report(doc)
    assert f"saves up to {ms}" in render_markdown(bound)
    assert f"Saves up to {ms} per step" in render_html(bound)
    term = _terminal(bound)
    assert "≤ " in term and "≈" not in term


def test_every_saving_shows_its_method_next_to_it_in_terminal_and_markdown(tmp_path):
    """Every assumption behind a saving is one step away from its number: the terminal's `--details` prints each
    finding's method under its evidence, the Markdown item its method in a collapsed block under the finding (the
    HTML in a collapsed block, the JSON as `method`)."""
    rep = _report(tmp_path)
    estimated = [f for f in rep.findings if f.saving_method]
    assert {f.code for f in estimated} >= {"PD101", "PD203"}  # a replayed saving and an upper bound
    buf = io.StringIO()
    render_terminal(rep, Console(file=buf, width=2000, color_system=None), details=True)
    text = buf.getvalue()
    md = render_markdown(rep)
    for f in estimated:
        assert f.method == f.saving_method
        assert f"method: {f.saving_method}" in text
        item = next(i for i, line in enumerate(md.splitlines()) if re.match(rf"\d+\. \*\*{f.code}\*\*", line))
        block = "\n".join(md.splitlines()[item : item + 10]).replace("\\", "")
        assert "<details><summary>method</summary>" in block and f.saving_method in block
