"""The HTML report's invariants: one self-contained file, no network, CSP, escaped, complete, stable, small."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest
from conftest import shared_trace
from reporting import as_report, cli, csp, embedded_json, write_reports
from tracebuilder import TraceBuilder

from perfdoctor.render.html import render_html

RESNET = "kineto__resnet50_num_workers_0__worker0.pt.trace.json.gz"
DLRM = "param__dlrm_8ranks"
MEMORY = "switchtransformers__a100_moe_profile_memory.json.gz"
ALLOWED_TAGS = {
    "html",
    "head",
    "meta",
    "title",
    "style",
    "body",
    "main",
    "header",
    "nav",
    "a",
    "section",
    "h1",
    "h2",
    "h3",
    "div",
    "p",
    "span",
    "strong",
    "em",
    "code",
    "pre",
    "ul",
    "ol",
    "li",
    "table",
    "thead",
    "tbody",
    "tr",
    "th",
    "td",
    "details",
    "summary",
    "footer",
    "script",
    "svg",
    "rect",
    "line",
    "text",
    "polyline",
    "circle",
    "g",
}
_URL = re.compile(r"^\s*(?:[a-z][a-z0-9+.-]*:|//)", re.I)


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))


def assert_self_contained(html: str) -> None:
    """No way for the page to load or run anything: only known tags, no event handlers, no URL in any
    attribute, one inert JSON script, no CSS import/url(), and a CSP that forbids every load."""
    parser = _Tags()
    parser.feed(html)
    tags = parser.tags
    assert {t for t, _ in tags} <= ALLOWED_TAGS, {t for t, _ in tags} - ALLOWED_TAGS
    scripts = [a for t, a in tags if t == "script"]
    assert scripts == [{"type": "application/json", "id": "report-data"}]
    for tag, attrs in tags:
        for name, value in attrs.items():
            assert not name.startswith("on"), (tag, name)
            if name == "xmlns":
                assert value == "http://www.w3.org/2000/svg"
            elif name == "href":
                assert value and value.startswith("#"), value
            elif name not in ("content", "style"):  # CSS: no url( anywhere, checked below
                assert not _URL.match(value or ""), (tag, name, value)
    assert "@import" not in html and "url(" not in html
    policy = csp(html)
    assert policy["default-src"] == ["'none'"] and policy["script-src"] == ["'none'"]
    assert policy["connect-src"] == ["'none'"] and policy["img-src"] == ["data:"]


@pytest.fixture(scope="module")
def resnet(tmp_path_factory):
    return write_reports([str(shared_trace(RESNET))], tmp_path_factory.mktemp("resnet"))


@pytest.fixture(scope="module")
def dlrm(tmp_path_factory):
    return write_reports([str(shared_trace(DLRM))], tmp_path_factory.mktemp("dlrm"))


def test_resnet_report_is_self_contained_and_complete(resnet):
    html = resnet["html"].read_text()
    assert_self_contained(html)
    report = resnet["report"]
    assert embedded_json(html) == report  # every number on the page is in the embedded data
    for heading in (
        "1. Summary",
        "2. Fix plan",
        "3. Where the time goes",
        "4. Step timeline",
        "6. Top kernels, CPU ops, communication and memory",
        "7. How it was measured",
    ):
        assert f"<h2>{heading}</h2>" in html
    assert "5. Roofline" not in html or report["ranks"][0].get("roofline")
    # summary numbers from the breakdown (TensorBoard: 177.6 ms mean, 33.4% DataLoader)
    assert "Tesla V100-DGXS-32GB" in html
    assert "177.44 ms" in html and "p10–p90 170.27 ms – 185.06 ms" in html  # median and spread
    assert "56.6%" in html  # busy ÷ step time
    assert "<td>idle: waiting for DataLoader</td>" not in html  # swatch precedes the label
    totals = report["ranks"][0]["devices"][0]["totals"]
    dl_ms = totals["idle_causes_us"]["dataloader"] / totals["n_steps"] / 1000
    assert 59 < dl_ms < 60.5  # 33.4% of a 177.6 ms step (the fetches themselves, on the critical path)
    row = f'<td class="num">{dl_ms:.2f} ms</td><td class="num">33.4%</td>'
    assert f'idle: waiting for DataLoader <span class="code">→ PD101</span></td>{row}' in html
    # how it was measured: file size and sha256 of the input (1.11 MiB for the shared copy; tests/data holds the
    # same events re-compressed, 990.33 KiB)
    size = shared_trace(RESNET).stat().st_size
    shown = f"{size / 2**20:.2f} MiB" if size >= 2**20 else f"{size / 2**10:.2f} KiB"
    assert report["inputs"][0]["sha256"] in html and shown in html
    assert "ProfilerStep#5" in html and "ProfilerStep#10" in html
    # top kernel with a C++ template name is shown escaped, not as markup
    assert "cudnn::detail::dgrad_engine&lt;float, 512, 6, 5, 3, 3, 3, false&gt;" in html


def test_every_finding_code_visible(resnet):
    report, html = resnet["report"], resnet["html"].read_text()
    codes = [f["code"] for f in report.get("findings", [])]
    assert "PD101" in codes  # num_workers=0: 33% of each step waits on the DataLoader
    for code in codes:
        assert f'<span class="code">{code}</span>' in html
    for s in report.get("skipped_checks", []):
        assert s["code"] in html and (s.get("reason") or "") in html.replace("&#39;", "'").replace("&quot;", '"')


def test_multi_rank_report_has_per_rank_table_and_spread(dlrm):
    html, report = dlrm["html"].read_text(), dlrm["report"]
    assert_self_contained(html)
    assert len(report["ranks"]) == 8
    table = html[html.index('<table class="ranks">') :]
    table = table[: table.index("</table>")]
    assert table.count("<tr>") == 9  # header + 8 ranks
    # one step per rank: the rank with the longest step is not "the slowest" (issue 11: it started first and waited)
    assert "59.1%" in html and "rank 1 has the longest median step time, rank 7 the shortest" in html
    assert "no straggler measure" in html and "slowest rank" not in html
    assert "<td>1 (longest steps)</td>" in table
    assert "all_reduce" in html and "send_recv" in html  # communication by collective
    assert html.count("<details>") >= 7 * 2  # other ranks folded, one per section


@pytest.mark.parametrize(
    "name",
    [
        RESNET,
        DLRM,
        MEMORY,
        "tracelens__h100__bert-small-uncased.json.gz",
        "param__linear_kineto.json.gz",
        "hta__cpu_only__rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz",
    ],
)
def test_real_trace_reports_are_small_and_self_contained(name, tmp_path):
    out = tmp_path / "r.html"
    rc, _, err = cli("report", str(shared_trace(name)), "-o", str(out))
    assert rc == 0, err
    data = out.read_bytes()
    assert len(data) < 2_000_000, len(data)
    assert_self_contained(data.decode())


def test_memory_section_from_profile_memory_trace(tmp_path):
    out = tmp_path / "m.html"
    assert cli("report", str(shared_trace(MEMORY)), "-o", str(out))[0] == 0
    html = out.read_text()
    # peak reserved 23,616,028,672 B of an 84,987,740,160 B A100: 21.99 GiB, 27.8%
    assert "21.99 GiB" in html and "79.15 GiB" in html and "27.8%" in html
    assert "<code>cudaMalloc</code> × 168" in html
    assert "<td>profile_memory</td>" in html


def test_same_input_gives_same_bytes(tmp_path):
    tb = TraceBuilder()
    tb.step(1, 0, 1000).step(2, 1000, 1000)
    tb.launch("volta_sgemm_128x64_nn", launch_ts=10, start=100, dur=300)
    tb.launch("volta_sgemm_128x64_nn", launch_ts=1010, start=1100, dur=500)
    trace = str(tb.write(tmp_path / "t.json"))
    outs = []
    for i in range(2):
        out = tmp_path / f"r{i}.html"
        assert cli("report", trace, "-o", str(out))[0] == 0
        outs.append(out.read_bytes())
    assert outs[0] == outs[1]
    assert not re.search(rb"20\d\d-\d\d-\d\d", outs[0])  # no wall-clock date unless asked for


def test_generated_at_only_when_asked():
    tb_report = _tiny_report()
    assert "on 2030-01-02" in render_html(tb_report, generated_at="2030-01-02")
    assert "on 2030-01-02" not in render_html(tb_report)


def _tiny_report():
    """:func:`_tiny_doc` read as a report."""
    return as_report(_tiny_doc())


def _tiny_doc():
    """A report written before the rule engine ran (its JSON without the findings keys, as an older perfdoctor or a
    tool that strips them writes it), as the JSON document's dicts."""
    import tempfile
    from pathlib import Path

    from perfdoctor import pipeline

    tb = TraceBuilder()
    tb.step(1, 0, 1000)
    tb.launch("volta_sgemm_128x64_nn", launch_ts=10, start=100, dur=300)
    with tempfile.TemporaryDirectory() as d:
        path = str(tb.write(Path(d) / "t.json"))
        report = pipeline.build([path]).report
    for key in ("findings", "plan", "skipped_checks", "passed_checks", "findings_note", "denominator", "verdict"):
        report.pop(key, None)
    return report


def test_output_format_from_extension_and_no_overwrite(tmp_path):
    tb = TraceBuilder()
    tb.step(1, 0, 1000)
    trace = str(tb.write(tmp_path / "t.json"))
    out = tmp_path / "r.html"
    assert cli("report", trace, "-o", str(out))[0] == 0
    assert out.read_text().startswith("<!DOCTYPE html>")
    first = out.read_bytes()
    rc, _, err = cli("report", trace, "-o", str(out))
    assert rc == 2 and "already exists" in err and out.read_bytes() == first
    assert cli("report", trace, "-o", str(out), "--force")[0] == 0
    rc, _, err = cli("report", trace, "-o", str(tmp_path / "r.txt"))
    assert rc == 2 and ".html, .md or .json" in err and not (tmp_path / "r.txt").exists()
    assert cli("report", trace, "-o", str(tmp_path / "r.md"))[0] == 0
    assert (tmp_path / "r.md").read_text().startswith("# perfdoctor report\n")


def test_roofline_section_when_the_report_has_roofline_data(tmp_path):
    """Section 5 appears only with roofline data: ops drawn against the device's roofs, sized by time."""
    import json

    import msgspec
    from analysed import rank_analysis

    from perfdoctor import pipeline
    from perfdoctor.analysis.work import hardware, roofline

    path = shared_trace("tracelens__h100__bert-small-uncased.json.gz")
    a = rank_analysis(path)
    report = pipeline.build([str(path)]).report
    assert "5. Roofline" not in render_html(as_report(report)) or report["ranks"][0].get("roofline")
    if not report["ranks"][0].get("roofline"):
        t = a.ranks[0].tables
        spec = hardware.device_for_trace(t.device_properties, a.ranks[0].primary.device)
        result = roofline.roofline_table(t, roofline.roofs_from_spec(spec))
        report["ranks"][0]["roofline"] = json.loads(msgspec.json.encode(result))
    rl = report["ranks"][0]["roofline"]
    html = render_html(as_report(report))
    assert_self_contained(html)
    assert "<h2>5. Roofline</h2>" in html
    section = html[html.index('<section id="roofline">') : html.index('<section id="details">')]
    drawn = [c for c in rl["chart"] if c["ai"] and c["achieved_flops_per_s"]]
    assert len(drawn) >= 5 and section.count('class="pt"') == len(drawn)
    assert "bf16 peak 989.5 TFLOP/s" in section and "memory 3.35 TB/s" in section  # H100 SXM datasheet roofs


def test_run_timeline_marks_warmup_steady_state_and_phase_change():
    """With run data from `perfdoctor profile`, section 4 draws the whole run with its warm-up and phases."""
    report = _tiny_doc()
    times = [0.030] * 3 + [0.010] * 20 + [0.015] * 20
    n = len(times)
    report["run"] = {  # a whole typed run section; the timeline reads steps and steady_state
        "path": "run",
        "partial": False,
        "stop_reason": None,
        "steps_completed": n,
        "wall_s": None,
        "flops_per_step": None,
        "parameter_count": None,
        "tokens_per_step": None,
        "samples_per_step": None,
        "steps": {
            "step": list(map(float, range(n))),
            "duration_s": times,
            "train_s": times,
            "eval_s": [None] * n,
            "checkpoint_s": [None] * n,
            "tokens": [None] * n,
            "samples": [None] * n,
            "profiler_phase": ["none"] * n,
        },
        "steady_state": {
            "n_steps": n,
            "warmup_steps": 3,
            "phases": [
                {"start_step": 3, "end_step": 23, "median_s": 0.010},
                {"start_step": 23, "end_step": 43, "median_s": 0.015},
            ],
            "median_s": 0.015,
            "p10_s": 0.010,
            "p90_s": 0.015,
            "trend_us_per_step": 0.0,
            "trend_rise_ratio": 0.0,
            "trend_detected": False,
            "window_median_s": None,
            "window_ratio": None,
            "window_neighbor_median_s": None,
            "window_neighbor_ratio": None,
            "notes": [],
            "phase_change": True,
            "steady_start_step": 23,
        },
        "throughput": {},
        "non_training": {"eval_s": 0.0, "eval_steps": 0, "checkpoint_s": 0.0, "checkpoint_steps": 0},
    }
    html = render_html(as_report(report))
    assert_self_contained(html)
    section = html[html.index('<section id="timeline">') : html.index('<section id="details">')]
    assert "Step time over the whole run" in section
    assert "warm-up (3 steps)" in section and "steady state" in section
    assert "phase change at step 23: median 15.00 ms after" in section
    assert section.count('class="dot"') == len(times)
    assert "first 3 step(s) were warm-up" in html


def test_band_labels_of_a_short_warmup_stack_instead_of_overlapping():
    import re

    from perfdoctor.render import svg

    out = svg.step_line(
        list(range(60)),
        [1.0] * 60,
        "ms",
        "t",
        bands=[svg.Band(0, 3, "warm-up (3 steps)", "warmup"), svg.Band(3, 59, "steady state", "steady")],
    )
    ys = dict(
        (label, int(y))
        for y, label in re.findall(r'<text x="[^"]*" y="(\d+)" class="ax">(warm-up[^<]*|steady state)', out)
    )
    assert ys["steady state"] == ys["warm-up (3 steps)"] + 12
    wide = svg.step_line(
        list(range(60)),
        [1.0] * 60,
        "ms",
        "t",
        bands=[svg.Band(0, 30, "warm-up (30 steps)", "warmup"), svg.Band(30, 59, "steady state", "steady")],
    )
    ys = dict(
        (label, int(y))
        for y, label in re.findall(r'<text x="[^"]*" y="(\d+)" class="ax">(warm-up[^<]*|steady state)', wide)
    )
    assert ys["steady state"] == ys["warm-up (30 steps)"]


def test_evidence_leaves_out_what_the_title_already_says():
    from perfdoctor.model.report import FindingSection
    from perfdoctor.render import view

    def finding(code, message, evidence):
        return FindingSection(
            code=code,
            name="",
            category="",
            severity="low",
            position=None,
            rank=None,
            message=message,
            saving_us_per_step=0.0,
            saving_pct_of_step=0.0,
            saving_method="",
            evidence=evidence,
            steps=[],
            fix="",
            example_before="",
            example_after="",
            references=[],
        )

    f = view.finding(
        finding(
            "PD202",
            "492 separate elementwise ops per step",
            {"what": "ops", "ranks": [0], "elementwise_ms": 17.7, "events": []},
        )
    )
    assert [k for k, _ in f["evidence"]] == ["elementwise"]
    multi = view.finding(finding("PD303", "rank 3 is slow", {"ranks": [0, 3]}))
    assert [k for k, _ in multi["evidence"]] == ["ranks"]


def test_roofline_rows_above_the_roof_say_why():
    from perfdoctor import pipeline

    report = pipeline.build([str(shared_trace("kineto__resnet50_num_workers_0__worker0.pt.trace.json.gz"))]).report
    rows = report["ranks"][0]["roofline"]["ops"]
    above = [r for r in rows[:15] if r["bound"] == "above_roof"]
    assert above and all("Winograd" in r["note"] and r["pct_of_attainable"] is None for r in above)
    assert all(0 <= r["pct_of_attainable"] <= 100 for r in rows if r["pct_of_attainable"] is not None)
    html = render_html(as_report(report))
    assert html.count('title="26.4 TFLOP/s is above') + html.count('title="21.1 TFLOP/s is above') == len(above)
    assert '<p class="note">* 26.4 TFLOP/s is above the fp32 peak of 15.7: the FLOP count' in html


def test_how_it_was_measured_matches_the_numbers(resnet):
    """F20: savings are % of the MEAN step of the analysed steps; idle causes name every cause the table can show
    (Python / host outside any op included) and the critical path, not an order; the replay's assumptions are
    on the page, not only in the embedded JSON."""
    import html as html_mod

    page = html_mod.unescape(resnet["html"].read_text())
    defs = page[page.index("<h3>Definitions</h3>") : page.index("<h3>Warnings about the input</h3>")]
    assert "median step time" not in defs.split("estimated saving")[1].split("</tr>")[0]
    assert "% of the median" not in page
    assert "share of the report's one denominator: the mean step time of the analysed steps" in defs
    # saving 59.x ms of DataLoader wait on a mean step: the % printed is the saving ÷ the mean step (not the median)
    f = next(f for f in resnet["report"]["findings"] if f["code"] == "PD101")
    mean_us = resnet["report"]["ranks"][0]["replay"]["recorded_mean_step_us"]
    assert abs(f["saving_pct_of_step"] - 100 * f["saving_us_per_step"] / mean_us) < 0.01
    idle = defs.split("idle causes")[1].split("</tr>")[0]
    assert "attributed in order" not in idle and "critical path" in idle
    for label in (
        "idle: waiting for DataLoader",
        "idle: host synchronization",
        "idle: host busy, nothing queued",
        "Python / host outside any op",
        "idle: other cause",
    ):
        assert label in idle
    replay_row = defs.split("Replay model")[1].split("</tr>")[0]
    for a in resnet["report"]["ranks"][0]["replay"]["assumptions"]:
        assert a in replay_row
    assert "reproduces the recording by construction" in replay_row


def test_label_columns_do_not_collapse(resnet):
    """F15/F22: the evidence table's key column and the skipped checks' code column keep their words whole
    (nowrap, overflow-wrap normal) beside long values; the kernel table's category cells do not wrap. (Checked
    by eye in chromium on luatil trace_04 and param dlrm_8ranks; here the CSS and the classes that carry it.)"""
    page = resnet["html"].read_text()
    css = page[page.index("<style>") : page.index("</style>")]
    rule = re.search(r"table\.evidence td:first-child, table\.skipped td:first-child \{([^}]*)\}", css)
    assert rule and "white-space: nowrap" in rule.group(1) and "overflow-wrap: normal" in rule.group(1)
    assert re.search(r"td\.cat \{[^}]*white-space: nowrap", css)
    assert re.search(r"\.code \{[^}]*white-space: nowrap", css)
    assert '<table class="skipped">' in page and '<table class="evidence">' in page
    # F15 (PD205): the steps row is the steps the finding fires on, not the analysed steps the mean is over
    # (the method names those: "mean over N analysed step(s) (#a–#b)")
    assert "<td>steps it fires on</td>" in page and "<td>steps</td>" not in page
    assert "analysed step(s) (#" in page


def _bars(page: str, code: str) -> tuple[str, str]:
    """The before / after labels of ``code``'s bars in an HTML page (a plan entry's start from the step with the
    entries above it)."""
    svg_text = re.search(
        rf'<svg class="chart before-after"[^>]*(?:fix of {code}|and with {code} too)">(.*?)</svg>', page, re.S
    )
    assert svg_text is not None, code
    now, fixed = re.findall(r'font-size="11">([^<]+ ms)</text>', svg_text.group(1))
    return now, fixed


def test_before_after_bars_show_the_steps_the_message_names():
    """ResNet50 V100 num_workers=0: PD103's saving is measured on top of PD101's prefetched batches, and its message
    says "takes it from A ms to B ms" with A the replayed prefetched step, not the recorded 177.6 ms. Its bars show
    A and B; PD101's "now" bar reads exactly as the denominator sentence does (one formatting, one value: it was
    177.60 ms beside 177.59 ms, rebuilt from the rounded saving share)."""
    from perfdoctor import pipeline

    rep = pipeline.build([str(shared_trace("kineto__resnet50_num_workers_0__worker0.pt.trace.json.gz"))]).model
    page = render_html(rep)
    by = {f.code: f for f in rep.findings}
    for code in ("PD101", "PD103"):
        took = re.search(r"takes it from ([\d.]+) ms to ([\d.]+) ms", by[code].message)
        assert took is not None
        now, fixed = _bars(page, code)
        assert f"{float(now.split()[0].replace(',', '')):.1f}" == took.group(1)
        assert f"{float(fixed.split()[0].replace(',', '')):.1f}" == took.group(2)
    # PD103's base is the step with PD101's fix: the recorded step less PD101's saving (its own replay)
    pd103_from = by["PD103"].saving_from_us_per_step
    assert pd103_from is not None
    assert abs(pd103_from - (rep.denominator.value_us - by["PD101"].saving_us_per_step)) < 1.0
    assert f"Saving percentages are of {_bars(page, 'PD101')[0]} per step" in page
