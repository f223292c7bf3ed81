"""``perfdoctor report SNAPSHOT`` in every format and ``perfdoctor diff BEFORE AFTER`` of two snapshots."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import msgspec
import pytest
from snapshotbuilder import frames, hand_snapshot, write

from perfdoctor.cli import main
from perfdoctor.snapshot.report import SnapshotReport


def test_report_terminal(tmp_path: Path, capsys) -> None:
    path = write(tmp_path / "s.pickle", hand_snapshot())
    assert main(["report", str(path), "--width", "200"]) == 0
    out = capsys.readouterr().out
    assert "device 0: peak 0.00 GiB allocated" in out.splitlines()[0]
    assert "peak allocated: 3,800,000 B (0.00 GiB) at event 3 of 7, 0.2 ms into the 0.5 ms history" in out
    assert "peak reserved: 6,291,456 B (0.01 GiB)" in out
    assert "p/model.py:20:forward" in out and "_call_impl" not in out  # torch frames are not call sites
    assert "1 OOM" in out and "out-of-memory errors" in out
    assert "the history starts mid-run" in out


def test_report_files_and_json_stdout(tmp_path: Path, capsys) -> None:
    path = write(tmp_path / "s.pickle", hand_snapshot())
    for ext in ("json", "md", "html"):
        assert main(["report", str(path), "-o", str(tmp_path / f"r.{ext}")]) == 0
    report = msgspec.json.decode((tmp_path / "r.json").read_bytes(), type=SnapshotReport)
    assert report.devices[0].peak_allocated_bytes == 3_800_000
    md = (tmp_path / "r.md").read_text()
    assert "3,800,000 B" in md and "| 2,000,000 | 0.00 | 52.6% | 1 | p/model.py:20:forward |" in md
    html = (tmp_path / "r.html").read_text()
    assert "3,800,000 B" in html and "<script" not in html
    capsys.readouterr()
    assert main(["report", str(path), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["schema"] == "perfdoctor.snapshot"
    assert main(["report", str(path), "-o", str(tmp_path / "r.json")]) == 2  # kept without --force


def test_hostile_frame_names_render_as_text(tmp_path: Path) -> None:
    data = hand_snapshot()
    data["device_traces"][0][2]["frames"] = frames("/p/</script><script>alert(1)</script>.py:1:x|y*z")
    path = write(tmp_path / "s.pickle", data)
    assert main(["report", str(path), "-o", str(tmp_path / "r.html")]) == 0
    assert main(["report", str(path), "-o", str(tmp_path / "r.md")]) == 0
    html = (tmp_path / "r.html").read_text()
    assert "<script>alert(1)" not in html and "&lt;script&gt;alert(1)" in html
    md = (tmp_path / "r.md").read_text()
    assert "<script>" not in md and "x\\|y\\*z" in md


def test_snapshot_with_a_trace_is_refused(tmp_path: Path, capsys) -> None:
    path = write(tmp_path / "s.pickle", hand_snapshot())
    trace = tmp_path / "t.json"
    trace.write_text('{"traceEvents": []}')
    assert main(["report", str(path), str(trace)]) == 2
    assert "give snapshots or traces, not both" in capsys.readouterr().err


def _grown() -> dict:
    """The hand snapshot with C's allocation 3,000,000 bytes instead of 2,000,000 (block and event): peak
    3,800,000 → 4,800,000 (+26.3%); model.py:20 grows by 1,000,000."""
    data = copy.deepcopy(hand_snapshot())
    data["device_traces"][0][2]["size"] = 3_000_000
    data["segments"][1]["blocks"][0]["requested_size"] = 3_000_000
    data["segments"][1]["blocks"][0]["size"] = 3 << 20
    data["segments"][1]["total_size"] = 3 << 20
    return data


def test_diff_two_snapshots_and_the_gate(tmp_path: Path, capsys) -> None:
    before = write(tmp_path / "before.pickle", hand_snapshot())
    after = write(tmp_path / "after.pickle", _grown())
    assert main(["diff", str(before), str(after), "--format", "json"]) == 0
    diff = json.loads(capsys.readouterr().out)
    (dev,) = diff["devices"]
    assert (dev["before_peak_allocated_bytes"], dev["after_peak_allocated_bytes"]) == (3_800_000, 4_800_000)
    assert dev["peak_allocated_change_pct"] == pytest.approx(100 * 1_000_000 / 3_800_000)  # +26.3%
    assert dev["grew"] == [
        {
            "site": "/p/model.py:20:forward",
            "before_bytes": 2_000_000,
            "after_bytes": 3_000_000,
            "change_bytes": 1_000_000,
        }
    ]
    assert dev["shrank"] == []
    # 4 MiB + 2 MiB → 4 MiB + 3 MiB reserved
    assert (dev["before_peak_reserved_bytes"], dev["after_peak_reserved_bytes"]) == (6 << 20, 7 << 20)
    assert main(["diff", str(before), str(after), "--fail-on-regression", "30"]) == 0
    capsys.readouterr()
    assert main(["diff", str(before), str(after), "--fail-on-regression", "25"]) == 1
    assert "peak allocated grew +26.3%" in capsys.readouterr().err
    assert main(["diff", str(after), str(before), "--fail-on-regression", "0"]) == 0  # it shrank
    for ext in ("md", "html"):
        assert main(["diff", str(before), str(after), "-o", str(tmp_path / f"d.{ext}")]) == 0
        assert "4,800,000 B" in (tmp_path / f"d.{ext}").read_text()


def test_diff_refuses_other_shapes(tmp_path: Path, capsys) -> None:
    a = write(tmp_path / "a.pickle", hand_snapshot())
    b = write(tmp_path / "b.pickle", hand_snapshot())
    assert main(["diff", str(a), "--vs", str(b)]) == 2
    assert main(["diff", str(a), str(a)]) == 2
    err = capsys.readouterr().err
    assert "exactly BEFORE.pickle AFTER.pickle" in err and "the same file was given twice" in err


def test_snapshot_report_and_diff_need_no_torch(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[1]
    a = write(tmp_path / "a.pickle", hand_snapshot())
    b = write(tmp_path / "b.pickle", _grown())
    code = f"""
import sys
sys.modules["torch"] = None  # `import torch` raises ImportError
from perfdoctor.cli import main
codes = [main(["report", {str(a)!r}, "-o", "r.html"]), main(["diff", {str(a)!r}, {str(b)!r}, "--format", "md"])]
print(codes, sorted(m for m in ("torch", "scipy") if sys.modules.get(m)), file=sys.stderr)
"""
    env = {**os.environ, "PYTHONPATH": str(repo)}
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert proc.stderr.strip().splitlines()[-1] == "[0, 0] []", proc.stderr
