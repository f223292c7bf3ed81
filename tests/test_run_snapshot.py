"""`perfdoctor profile --memory-snapshot` (CUDA): the allocator history recorded around the active windows, the
snapshot written into the run directory and read back by `perfdoctor report RUN_DIR`. On CPU the CUDA calls are
stood in for (the order of calls and the files are what is tested); the snapshot is built in code
(tests/snapshotbuilder.py) with the figures worked out in tests/test_snapshot_analysis.py."""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path

import pytest
from runbuilder import GiB, write_run
from snapshotbuilder import MiB, hand_snapshot, write

from perfdoctor import pipeline
from perfdoctor.capture.memory_history import MAX_ENTRIES, MemoryHistory
from perfdoctor.capture.schedule import Schedule
from perfdoctor.render.formats import render_bytes

REPO = Path(__file__).resolve().parents[1]


class FakeCudaMemory:
    """Records the calls ``torch.cuda.memory`` would get; ``_dump_snapshot`` pickles the hand snapshot."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []

    def _record_memory_history(self, enabled: object = "all", max_entries: int = 0) -> None:
        self.calls.append(("record", enabled if enabled is None else max_entries))

    def _dump_snapshot(self, path: str) -> None:
        self.calls.append(("dump", Path(path).name))
        Path(path).write_bytes(pickle.dumps(hand_snapshot()))


def test_history_covers_each_active_window(tmp_path):
    # wait 3, warm-up 1, active 2, twice: active steps 4–5 and 10–11. Recording starts after step 3 (before
    # step 4 runs) and after step 9; each window is dumped and recording stopped after steps 5 and 11
    mem = FakeCudaMemory()
    h = MemoryHistory(Schedule(wait=3, warmup=1, active=2, repeat=2), tmp_path, 0, mem, lambda m: None)
    h.start_if_due(0)
    log = []
    for k in range(12):
        h.after_step(k)
        log.append((k, list(mem.calls)))
        mem.calls.clear()
    assert [(k, c) for k, c in log if c] == [
        (3, [("record", MAX_ENTRIES)]),
        (5, [("dump", "memory_snapshot.rank0.w0.pickle"), ("record", None)]),
        (9, [("record", MAX_ENTRIES)]),
        (11, [("dump", "memory_snapshot.rank0.w1.pickle"), ("record", None)]),
    ]
    assert [(w["first_step"], w["last_step"], w["complete"], w["path"]) for w in h.written] == [
        (4, 5, True, "memory_snapshot.rank0.w0.pickle"),
        (10, 11, True, "memory_snapshot.rank0.w1.pickle"),
    ]


def test_history_of_a_run_stopped_inside_its_window_is_kept(tmp_path):
    # one window, active steps 0–2 (no wait, no warm-up): recording starts before step 0; the run stops after step 1
    mem = FakeCudaMemory()
    h = MemoryHistory(Schedule(wait=0, warmup=0, active=3, repeat=1), tmp_path, 2, mem, lambda m: None)
    h.start_if_due(0)
    h.after_step(0)
    h.after_step(1)
    h.dump(complete=False)
    assert mem.calls == [("record", MAX_ENTRIES), ("dump", "memory_snapshot.rank2.pickle"), ("record", None)]
    assert h.written == [
        {"index": 0, "first_step": 0, "last_step": 2, "complete": False, "path": "memory_snapshot.rank2.pickle"}
    ]


def test_a_failed_dump_loses_nothing_else(tmp_path):
    class Failing(FakeCudaMemory):
        def _dump_snapshot(self, path: str) -> None:
            raise RuntimeError("no history")

    said = []
    h = MemoryHistory(Schedule(wait=0, warmup=0, active=1, repeat=1), tmp_path, 0, Failing(), said.append)
    h.start_if_due(0)
    h.after_step(0)
    assert h.written[0]["path"] is None and said == ["memory snapshot of steps 0-0 not written: no history"]


def test_report_of_a_run_directory_reads_its_snapshot(tmp_path):
    run = write_run(
        tmp_path / "run",
        30,
        {"cuda_reserved_bytes": lambda i: 6 * MiB, "cuda_alloc_retries": lambda i: 0},
        run_json={"environment": {"cuda_available": True}, "memory": {"device_total_bytes": 80 * GiB}},
    )
    write(run / "memory_snapshot.rank0.pickle", hand_snapshot())
    built = pipeline.build([str(run)])
    (snap,) = built.model.run.memory.snapshots
    # the hand snapshot's figures (tests/test_snapshot_analysis.py): peak 3,800,000 allocated, 6 MiB reserved,
    # one free block (fragmentation 0), one cudaMalloc in the history, one OOM; model.py:20 holds 2,000,000
    assert (snap.path, snap.device, snap.peak_allocated_bytes, snap.peak_reserved_bytes) == (
        "memory_snapshot.rank0.pickle",
        0,
        3_800_000,
        6 * MiB,
    )
    assert (snap.fragmentation, snap.cuda_malloc_calls, snap.cache_flushes_then_malloc, snap.ooms) == (0.0, 1, 0, 1)
    assert (snap.top_site, snap.top_site_bytes) == ("/p/model.py:20:forward", 2_000_000)
    for fmt in ("md", "html"):
        text = render_bytes(built.model, fmt).decode().replace("\\_", "_")  # Markdown escapes underscores
        assert "memory_snapshot.rank0.pickle" in text and "peak 3.62 MiB" in text, fmt


def test_a_damaged_snapshot_is_a_warning_not_a_failure(tmp_path):
    run = write_run(tmp_path / "run", 30, {"rss_bytes": lambda i: 100 * MiB})
    (run / "memory_snapshot.rank0.pickle").write_bytes(b"\x80\x04not a pickle")
    built = pipeline.build([str(run)])
    assert built.model.run.memory.snapshots == []
    (w,) = [w for w in built.model.warnings if "memory_snapshot" in w]
    assert w.startswith(f"{run / 'memory_snapshot.rank0.pickle'}: not a readable pickle")
    assert w.endswith("; the memory snapshot is left out of the report")


@pytest.mark.skipif(__import__("importlib").util.find_spec("torch") is None, reason="needs torch")
def test_memory_snapshot_on_cpu_stops_before_the_script(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    script = tmp_path / "train.py"
    script.write_text("open('ran', 'w').write('yes')\n")
    proc = subprocess.run(
        [sys.executable, "-m", "perfdoctor", "profile", str(script), "--memory-snapshot", "--out", str(tmp_path / "o")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "perfdoctor: error: profile: --memory-snapshot needs CUDA (it records the CUDA caching allocator's history) "
        "and torch sees no CUDA device here; run without it: on CPU the run's RSS and the trace's [memory] events "
        "are recorded"
    ]
    assert not (tmp_path / "ran").exists() and not (tmp_path / "o").exists()


def test_profile_writes_the_snapshot_of_its_active_window(tmp_path, monkeypatch):
    # a CPU machine standing in for CUDA: torch.cuda.is_available() says True (never initialised, so steps are
    # timed on the host) and torch.cuda.memory's history calls are recorded; no trace (the profiler would ask the
    # CUDA runtime). 8 steps: wait 3, warm-up 1, active step 4: recording starts after step 3, stops after step 4
    import torch

    from perfdoctor.capture.run_data import load_run_dir
    from perfdoctor.capture.runner import profile_script

    mem = FakeCudaMemory()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda.memory, "_record_memory_history", mem._record_memory_history)
    monkeypatch.setattr(torch.cuda.memory, "_dump_snapshot", mem._dump_snapshot)
    script = tmp_path / "train.py"
    script.write_text(
        "import torch\n"
        "w = torch.nn.Parameter(torch.ones(4))\n"
        "opt = torch.optim.SGD([w], lr=0.1)\n"
        "for _ in range(20):\n"
        "    (w * 2).sum().backward()\n"
        "    opt.step()\n"
        "    opt.zero_grad()\n"
    )
    run_dir = profile_script(str(script), steps=8, out=tmp_path / "run", trace=False, memory_snapshot=True)
    assert mem.calls == [("record", MAX_ENTRIES), ("dump", "memory_snapshot.rank0.pickle"), ("record", None)]
    run = load_run_dir(run_dir)
    assert run.run["profiler"]["memory_snapshot"] is True
    assert run.run["ranks"][0]["memory_snapshots"] == [
        {"index": 0, "first_step": 4, "last_step": 4, "complete": True, "path": "memory_snapshot.rank0.pickle"}
    ]
    assert [p.name for p in run.snapshots] == ["memory_snapshot.rank0.pickle"]
    (snap,) = pipeline.build([str(run_dir)]).model.run.memory.snapshots
    assert (snap.peak_allocated_bytes, snap.peak_reserved_bytes) == (3_800_000, 6 * MiB)
