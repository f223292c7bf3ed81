"""The snapshot reader runs nothing from the pickle and refuses anything that is not a snapshot, in one line."""

from __future__ import annotations

import os
import pickle
import time
from pathlib import Path

import pytest
from snapshotbuilder import MiB, block, hand_snapshot, segment, write

from perfdoctor.cli import main
from perfdoctor.errors import PerfDoctorError
from perfdoctor.snapshot.reader import looks_like_snapshot, read_snapshot


class _RunsACommand:
    """Unpickling this with a plain ``pickle.load`` would run ``touch MARKER``."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, (f"touch {self.marker}",))


def test_a_pickle_that_would_run_a_command_is_refused_and_runs_nothing(tmp_path: Path, capsys) -> None:
    marker = tmp_path / "ran"
    evil = tmp_path / "snapshot.pickle"
    evil.write_bytes(pickle.dumps({"segments": [], "device_traces": [_RunsACommand(marker)]}))
    with pytest.raises(PerfDoctorError, match=r"snapshot\.pickle: refused: the pickle asks for (posix|os)\.system"):
        read_snapshot(str(evil))
    assert main(["report", str(evil)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "refused" in err and "nothing in it was run" in err
    assert not marker.exists()
    # the same file through pickle.load does run the command: the test's pickle is a real attack
    with open(evil, "rb") as fh:
        pickle.load(fh)
    assert marker.exists()


def test_a_class_instance_is_refused(tmp_path: Path) -> None:
    from collections import OrderedDict

    path = write(tmp_path / "s.pickle", OrderedDict(segments=[]))
    with pytest.raises(PerfDoctorError, match=r"asks for collections\.OrderedDict"):
        read_snapshot(str(path))


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "empty file"),
        (b'{"traceEvents": []}', "not a readable pickle"),
        (pickle.dumps({"segments": []})[:-3], "not a readable pickle"),
        (pickle.dumps(42), "holds a int without 'segments'"),
        (pickle.dumps({"segments": [{"address": 0, "blocks": []}]}), r"segments\[0\] has no integer 'total_size'"),
        (
            pickle.dumps(
                {"segments": [{"address": 0, "total_size": 5, "blocks": [{"size": -1, "state": "inactive"}]}]}
            ),
            "negative 'size'",
        ),
        (
            pickle.dumps({"segments": [], "device_traces": [[{"action": "alloc", "size": "big"}]]}),
            r"device_traces\[0\]\[0\] has no integer 'size'",
        ),
        (pickle.dumps({"segments": [], "device_traces": [[{"action": "alloc", "frames": "x"}]]}), "frames"),
    ],
)
def test_not_a_snapshot_is_one_line(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "bad.pickle"
    path.write_bytes(content)
    with pytest.raises(PerfDoctorError, match=message) as info:
        read_snapshot(str(path))
    assert str(path) in info.value.message and "\n" not in info.value.message


def test_shared_lists_that_unfold_far_beyond_the_file_are_refused_fast(tmp_path: Path) -> None:
    blocks = [{"size": 1, "requested_size": 1, "state": "inactive", "frames": []}] * 5_000
    seg = {"address": 0, "total_size": 5_000, "blocks": blocks}
    path = write(tmp_path / "bomb.pickle", {"segments": [seg] * 5_000})  # 25 M blocks from a ~40 kB file
    assert path.stat().st_size < 100_000
    start = time.perf_counter()
    with pytest.raises(PerfDoctorError, match="far more items than its"):
        read_snapshot(str(path))
    assert time.perf_counter() - start < 5


def test_segments_only_list_is_read(tmp_path: Path) -> None:
    path = write(tmp_path / "segs.pickle", [segment(0x1000, [block(MiB, "active_allocated")])])
    snap = read_snapshot(str(path))
    assert [s.total_size for s in snap.segments] == [MiB] and snap.device_traces == ()


def test_looks_like_snapshot(tmp_path: Path) -> None:
    unnamed = write(tmp_path / "dump.bin", hand_snapshot())  # found by the pickle header, whatever its name
    trace = tmp_path / "t.json"
    trace.write_text('{"traceEvents": []}')
    assert looks_like_snapshot(str(unnamed)) and not looks_like_snapshot(str(trace))
    assert not looks_like_snapshot(str(tmp_path))
