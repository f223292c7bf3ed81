"""The annotated timeline (``perfdoctor report --timeline``), read back with plain json/gzip.

Every check reads the file as a trace viewer would (Chrome's Trace Event Format: ``ph``, ``ts``, ``pid``, ``tid``,
``name``; ``dur`` on ``X`` events; rows named by ``M`` metadata events) and compares it with the JSON report of the
same run and, where the number comes from the trace itself, with the raw Kineto JSON read here independently.
"""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from conftest import shared_trace

from perfdoctor.cli import main

NW0 = "kineto__resnet50_num_workers_0__worker0.pt.trace.json.gz"
DLRM = "param__dlrm_8ranks"


def _load(path: Path) -> dict[str, Any]:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rb") as fh:
        doc = json.load(fh)
    assert isinstance(doc, dict) and isinstance(doc["traceEvents"], list)
    return doc


def _check_format(doc: dict[str, Any]) -> None:
    """The Trace Event Format's required fields on every event."""
    for e in doc["traceEvents"]:
        assert e["ph"] in ("X", "M"), e
        assert isinstance(e["name"], str) and isinstance(e["pid"], int) and isinstance(e["tid"], int), e
        assert isinstance(e["ts"], (int, float)), e
        if e["ph"] == "X":
            assert isinstance(e["dur"], (int, float)) and e["dur"] >= 0, e
        else:
            assert e["name"] in ("process_name", "thread_name", "process_sort_index", "thread_sort_index"), e


class Rows:
    """The file's slices by (process name, thread name), from its metadata events."""

    def __init__(self, doc: dict[str, Any]) -> None:
        ev = doc["traceEvents"]
        proc = {e["pid"]: e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "process_name"}
        thr = {(e["pid"], e["tid"]): e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
        self.by_row: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
        for e in ev:
            if e["ph"] == "X":
                self.by_row[(proc[e["pid"]], thr[(e["pid"], e["tid"])])].append(e)
        self.processes = set(proc.values())

    def row(self, process: str, thread: str) -> list[dict[str, Any]]:
        return self.by_row.get((process, thread), [])

    def rows_of(self, process: str, prefix: str) -> dict[str, list[dict[str, Any]]]:
        return {t: v for (p, t), v in self.by_row.items() if p == process and t.startswith(prefix)}


def _run(tmp: Path, trace: Path, *flags: str) -> tuple[dict[str, Any], dict[str, Any], Path]:
    out = tmp / ("timeline.json.gz" if "--plain" not in flags else "timeline.json")
    flags = tuple(f for f in flags if f != "--plain")
    rc = main(["report", str(trace), "-o", str(tmp / "r.json"), "--timeline", str(out), "-j", "1", *flags])
    assert rc in (0, 1)
    return json.loads((tmp / "r.json").read_text()), _load(out), out


@pytest.fixture(scope="module")
def nw0(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], dict[str, Any], Path]:
    return _run(tmp_path_factory.mktemp("nw0"), shared_trace(NW0))


@pytest.fixture(scope="module")
def dlrm(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], dict[str, Any], Path]:
    return _run(tmp_path_factory.mktemp("dlrm"), shared_trace(DLRM), "--plain")


def _steps(report: dict[str, Any], rank: int) -> dict[int, dict[str, Any]]:
    sec = next(r for r in report["ranks"] if r["rank"] == rank)
    dev = next(d for d in sec["devices"] if d["device"] == sec["primary_device"])
    return {s["step"]: s for s in dev["steps"]}


def _median_and_slowest(rows: dict[int, dict[str, Any]]) -> list[int]:
    by_len = sorted(rows, key=lambda n: (rows[n]["dur_us"], list(rows).index(n)))
    return sorted({by_len[(len(by_len) - 1) // 2], by_len[-1]})


def _check_rank(report: dict[str, Any], rows: Rows, rank: int, steps: list[int]) -> None:
    """Idle slices add up to the breakdown's idle per cause, the plan's step length, findings inside the step."""
    own = f"rank {rank}"
    table = _steps(report, rank)
    sec = next(r for r in report["ranks"] if r["rank"] == rank)
    idle = rows.rows_of(own, f"GPU {sec['primary_device']} idle")
    assert len(idle) == 1
    (slices,) = idle.values()
    for n in steps:
        start, end = table[n]["start_us"], table[n]["start_us"] + table[n]["dur_us"]
        sums: dict[str, float] = defaultdict(float)
        for e in slices:
            if e["args"]["step"] == n:
                assert start - 1e-6 <= e["ts"] and e["ts"] + e["dur"] <= end + 1e-6
                sums[e["name"]] += e["dur"]
        for cause, us in table[n]["idle_causes_us"].items():
            assert sums.get(cause, 0.0) == pytest.approx(us, abs=1e-3), (n, cause)
        assert sum(sums.values()) == pytest.approx(table[n]["idle_us"], abs=1e-3)
        for f in report["findings"]:
            if rank not in f["evidence"]["ranks"]:
                continue
            (mine,) = [e for e in rows.row(own, f"finding {f['code']}") if e["args"]["step"] == n]
            assert mine["name"].startswith(f["code"])
            assert mine["args"]["saving_us_per_step"] == f["saving_us_per_step"]
            assert start <= mine["ts"] and mine["ts"] + mine["dur"] <= end + 1e-6
    cp = rows.row(own, "critical path")
    for n in steps:  # the critical path covers each step once (its segments are disjoint and span the step)
        total = sum(e["dur"] for e in cp if e["args"]["step"] == n)
        assert total == pytest.approx(table[n]["dur_us"], rel=1e-9)


def test_nw0_timeline_format_idle_findings_and_plan(nw0: tuple[dict[str, Any], dict[str, Any], Path]) -> None:
    report, doc, path = nw0
    _check_format(doc)
    assert path.stat().st_size < 100e6
    rows = Rows(doc)
    table = _steps(report, 0)
    # steps 5..10: 187.9 ms is the slowest, the lower median of the six lengths is step 6's 175.2 ms
    steps = _median_and_slowest(table)
    assert steps == [5, 6]
    _check_rank(report, rows, 0, steps)
    assert [s["step"] for s in doc["perfdoctor"]["ranks"][0]["steps"]] == steps
    # the replayed step after the fix plan (PD101, PD103, PD203): the plan's last step_after_us is the mean over
    # the six steps of the per-step values; the drawn steps are two of them
    plan = report["plan"]
    meta = doc["perfdoctor"]["ranks"][0]
    assert meta["plan_codes"] == [p["code"] for p in plan] == ["PD101", "PD103", "PD203"]
    per_step = {int(k): v for k, v in meta["after_plan_step_us_by_step"].items()}
    assert sorted(per_step) == sorted(table)
    assert sum(per_step.values()) / len(per_step) == pytest.approx(plan[-1]["step_after_us"], abs=1e-3)
    after = rows.row("rank 0", "step after the fix plan")
    assert sorted(e["args"]["step"] for e in after) == steps
    for e in after:
        n = e["args"]["step"]
        assert e["dur"] == pytest.approx(per_step[n], abs=1e-6)
        assert e["ts"] == table[n]["start_us"]
        assert e["dur"] < table[n]["dur_us"]  # the plan saves time on every step
        # every replayed activity of the step lies inside the replayed step
        for acts in rows.rows_of("rank 0", "after the fix plan: GPU").values():
            mine = [a for a in acts if a["args"]["step"] == n]
            assert mine and all(a["ts"] >= e["ts"] and a["ts"] + a["dur"] <= e["ts"] + e["dur"] + 1e-6 for a in mine)


def test_nw0_timeline_events_match_the_raw_trace(nw0: tuple[dict[str, Any], dict[str, Any], Path]) -> None:
    """Kernels and PD203's slice against the raw Kineto JSON, read here without perfdoctor."""
    report, doc, _ = nw0
    with gzip.open(shared_trace(NW0), "rb") as fh:
        raw = json.load(fh)["traceEvents"]
    table = _steps(report, 0)
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    pd203 = next(f for f in report["findings"] if f["code"] == "PD203")
    cited = {e["name"] for e in pd203["evidence"]["events"]}
    rows = Rows(doc)
    for n in (5, 6):
        lo, hi = table[n]["start_us"], table[n]["start_us"] + table[n]["dur_us"]
        raw_k = sorted((e["ts"], e["name"]) for e in raw if e.get("cat") == "Kernel" and lo <= e["ts"] < hi)
        ours = sorted((e["ts"], e["name"]) for e in kernels if lo <= e["ts"] < hi)
        assert ours == raw_k and len(ours) > 1000
        spans = [(e["ts"], e["ts"] + e["dur"]) for e in raw if e.get("name") in cited and lo <= e["ts"] < hi]
        (drawn,) = [e for e in rows.row("rank 0", "finding PD203") if e["args"]["step"] == n]
        assert drawn["ts"] == min(s[0] for s in spans)
        assert drawn["ts"] + drawn["dur"] == pytest.approx(min(hi, max(s[1] for s in spans)))
        assert drawn["args"]["cited_events_in_step"] == len(spans)


def test_dlrm_job_timeline_shows_median_and_plan_ranks(dlrm: tuple[dict[str, Any], dict[str, Any], Path]) -> None:
    report, doc, _ = dlrm
    _check_format(doc)
    rows = Rows(doc)
    job = report["job"]
    # median step per rank 14.5, 19.9, 13.0, 18.7, 18.0, 17.8, 13.1, 12.5 ms: the lower median is rank 0's 14.5 ms;
    # the plan (PD103) speaks for rank 1, the slowest; no rank is an outlier
    meds = sorted((m, r) for r, m in zip(job["ranks"], job["step_median_us"], strict=True))
    median_rank = meds[(len(meds) - 1) // 2][1]
    plan_rank = next(f["rank"] for f in report["findings"] if f["plan_position"] == 1)
    assert (median_rank, plan_rank, job["outliers"]) == (0, 1, {})
    shown = {int(p.split()[1]) for p in rows.processes}
    assert shown == {0, 1} and len(rows.processes) == 2  # one process per rank
    for rank in (0, 1):
        _check_rank(report, rows, rank, [10])
    # one analysed step per rank: the plan's predicted step is rank 1's step 10 replayed with PD103
    (after,) = rows.row("rank 1", "step after the fix plan")
    # the track is rank 1 replayed with PD103, its collectives waiting for its peers as recorded (13,380 µs); the
    # job plan's last step is every rank replayed jointly with its fixes (10,506.5 µs: the peers speed up too)
    pd103 = next(f for f in report["findings"] if f["code"] == "PD103")
    assert after["dur"] == pytest.approx(13380.0, abs=1e-3)
    assert pd103["step_after_us"] == report["plan"][-1]["step_after_us"] == pytest.approx(10506.5, abs=0.5)


def test_timeline_steps_chosen_and_file_kept(tmp_path: Path) -> None:
    trace = shared_trace(NW0)
    out = tmp_path / "t.json"
    out.write_text("keep")
    assert main(["report", str(trace), "--timeline", str(out)]) == 2
    assert out.read_text() == "keep"
    assert main(["report", str(trace), "--timeline-steps", "7"]) == 2
    assert main(["report", str(trace), "--timeline", str(out), "--timeline-steps", "7,x"]) == 2
    assert main(["report", str(trace), "--timeline", str(out), "--timeline-steps", "7,9", "--force"]) in (0, 1)
    doc = _load(out)
    _check_format(doc)
    assert [s["step"] for s in doc["perfdoctor"]["ranks"][0]["steps"]] == [7, 9]
    assert {e["args"]["step"] for e in Rows(doc).row("rank 0", "finding PD101")} == {7, 9}


def test_size_cap_leaves_recorded_events_out(nw0: tuple[dict[str, Any], dict[str, Any], Path]) -> None:
    """Under a 2 MB cap the recorded events of a step go, perfdoctor's rows stay, and the file says so."""
    from perfdoctor import pipeline
    from perfdoctor.render.timeline import timeline_chunks

    report, doc, _ = nw0
    full = len(json.dumps(doc))
    built = pipeline.build([str(shared_trace(NW0))], timeline_steps=[])
    capped = json.loads(b"".join(timeline_chunks(built.model, built.timelines(), max_bytes=2_000_000)))
    _check_format(capped)
    assert len(json.dumps(capped)) < 2_000_000 < full
    left = capped["perfdoctor"]["left_out"]
    assert left and all("recorded events" in x for x in left)
    own = [e for e in capped["traceEvents"] if e.get("cat") == "perfdoctor"]
    assert len(own) == len([e for e in doc["traceEvents"] if e.get("cat") == "perfdoctor"])


def test_html_finding_says_where_to_look(nw0: tuple[dict[str, Any], dict[str, Any], Path]) -> None:
    from reporting import as_report

    from perfdoctor.render.formats import render_bytes

    report, _, _ = nw0
    html = render_bytes(as_report(report), "html").decode()
    table = _steps(report, 0)
    for f in report["findings"]:
        n = max(f["steps"], key=lambda s: table[s]["dur_us"])
        s = table[n]
        line = f"Where to look: step {n} (the slowest step it fires on): ts {s['start_us']:.0f} to "
        assert line + f"{s['start_us'] + s['dur_us']:.0f} µs" in html
    assert html.count("Where to look:") == len(report["findings"])


def test_choose_steps_median_and_slowest_by_hand() -> None:
    import numpy as np

    from perfdoctor.timeline.tracks import choose_steps

    numbers = np.array([5, 6, 7, 8])
    # lengths 10, 30, 20, 25 µs: sorted 10 (#5), 20 (#7), 25 (#8), 30 (#6); lower median = 2nd = #7; slowest #6
    assert choose_steps(numbers, np.array([10.0, 30.0, 20.0, 25.0]), []) == [(1, "slowest"), (2, "median")]
    assert choose_steps(numbers, np.array([10.0, 30.0, 20.0, 25.0]), [8, 99, 5]) == [(3, "asked"), (0, "asked")]
    assert choose_steps(np.array([3]), np.array([7.0]), []) == [(0, "median")]  # one step: median is slowest


def test_finding_span_by_hand() -> None:
    from perfdoctor.model.report import FindingSection
    from perfdoctor.render.timeline import finding_span
    from perfdoctor.timeline.tracks import Event

    def f(events: list[dict[str, Any]]) -> FindingSection:
        return FindingSection(
            code="PD203", name="n", category="c", severity="high", position=1, rank=0, message="m",
            saving_us_per_step=1.0, saving_pct_of_step=1.0, saving_method="", evidence={"events": events},
            steps=[1], fix="", example_before="", example_after="", references=[],
        )  # fmt: skip

    ev = [
        Event("gemm", "kernel", 50.0, 20.0, 0, 7),  # before the step [100, 1000): not counted
        Event("gemm", "kernel", 200.0, 30.0, 0, 7),
        Event("relu", "kernel", 300.0, 5.0, 0, 7),
        Event("gemm", "kernel", 980.0, 40.0, 0, 7),  # runs past the step's end: the slice stops at 1000
    ]
    assert finding_span(f([{"name": "gemm"}]), ev, 100.0, 1000.0) == (200.0, 800.0, 2)
    assert finding_span(f([{"name": "relu"}]), ev, 100.0, 1000.0) == (300.0, 5.0, 1)
    assert finding_span(f([]), ev, 100.0, 1000.0) == (100.0, 900.0, 0)  # cites nothing: the whole step


def test_timeline_steps_not_analysed_are_named_on_stderr(tmp_path: Path) -> None:
    """A step asked for with --timeline-steps that the trace does not hold is left out of the file, and the terminal
    says so (before, only the file's metadata did): the ResNet50 trace holds ProfilerStep#5 to #10, read here from
    the raw JSON, so of 7 and 99 only 7 is shown and 99 is named."""
    from reporting import cli

    trace = shared_trace(NW0)
    with gzip.open(trace, "rb") as fh:
        raw = json.load(fh)["traceEvents"]
    held = sorted({int(e["name"].split("#")[1]) for e in raw if str(e.get("name", "")).startswith("ProfilerStep#")})
    assert held == [5, 6, 7, 8, 9, 10]
    out = tmp_path / "t.json"
    rc, _, err = cli("report", str(trace), "--timeline", str(out), "--timeline-steps", "7,99")
    assert rc == 0, err
    assert [s["step"] for s in _load(out)["perfdoctor"]["ranks"][0]["steps"]] == [7]
    assert "warning: --timeline-steps: rank 0: not among this rank's analysed steps: 99" in " ".join(err.split())
    rc, _, err = cli("report", str(trace), "--timeline", str(tmp_path / "u.json"), "--timeline-steps", "7,8")
    assert rc == 0, err
    assert "--timeline-steps:" not in err
