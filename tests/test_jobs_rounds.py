"""The second round (the ranks that arrived last, analysed again with their peers' arrivals) runs on the job's
workers, not in the reducing process; small traces go several to a Dask task; a Dask task that fails costs only
its own files. Every report is compared with the in-process one (the reference the other job tests pin to the
full-tables analysis)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from analysed import rank_analysis
from conftest import shared_trace

from perfdoctor import pipeline
from perfdoctor.jobs import executors
from perfdoctor.jobs.executors import DaskCluster, LocalPool, dask_batches
from perfdoctor.jobs.fingerprint import worker_name
from perfdoctor.jobs.rounds import peer_ends
from perfdoctor.jobs.summary import _enc  # the summaries' own encode hook: the test compares what they store


def _canon(report: dict[str, Any]) -> str:
    return json.dumps({k: v for k, v in report.items() if k != "job"}, sort_keys=True)


def _dlrm() -> list[str]:
    return sorted(str(p) for p in Path(shared_trace("param__dlrm_8ranks")).glob("*.json.gz"))


@pytest.fixture(scope="module")
def in_process() -> pipeline.BuiltReport:
    return pipeline.build(_dlrm())


def _second_round(built: pipeline.BuiltReport, again: list[str]) -> dict[str, Any]:
    """The summaries of ``again`` and the options fingerprint of the others (the cache key's second half)."""
    first = {s.key.split("/")[1] for s in built.job.summaries if s.path not in again}
    assert len(first) == 1  # every first-round rank was made with the same options
    return {s.path: s for s in built.job.summaries if s.path in again and s.key.split("/")[1] not in first}


def test_ranks_that_arrived_last_are_analysed_again_on_the_pool(in_process: pipeline.BuiltReport) -> None:
    paths = _dlrm()
    # ranks 5 and 7 of the DLRM job arrive last by more than their margin (tests/test_replay_peers.py: rank 7
    # ~4.7 ms after rank 5): the two ranks jobs/rounds.py analyses again
    again = sorted(peer_ends(in_process.job.summaries))
    assert [Path(p).name.split("_")[0] for p in again] == ["worker5", "worker7"]
    done: list[str] = []
    pool = LocalPool(2, on_done=lambda part: done.extend(s.path for s in part))
    built = pipeline.build(paths, executor=pool)
    assert _canon(built.report) == _canon(in_process.report)
    assert sorted(done) == paths  # one progress tick per file: the second round reports none
    redone = _second_round(built, again)
    assert sorted(redone) == again  # made with the peers' arrivals (other options) ...
    me = worker_name()
    assert all(s.worker != me and s.worker.split(" pid ")[0] == me.split(" pid ")[0] for s in redone.values())
    # ... by pool workers, not by this process


def test_dask_batches_by_hand(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(executors, "BATCH_JSON_BYTES", 4000)
    monkeypatch.setattr(executors, "MIN_TASKS_PER_THREAD", 2)
    files = []
    for i in range(10):
        f = tmp_path / f"rank{i}.json"
        f.write_bytes(b" " * 1000)  # 1,000 bytes of JSON each: 4 fit 4,000 bytes
        files.append((i, str(f)))
    # one thread: at most 10 // (1 × 2) = 5 a task, 4 by size
    assert [[i for i, _ in b] for b in dask_batches(files, 1)] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    # two threads: at most 10 // (2 × 2) = 2 a task
    assert [len(b) for b in dask_batches(files, 2)] == [2, 2, 2, 2, 2]
    # eleven threads: 10 // 22 = 0, so one a task
    assert [len(b) for b in dask_batches(files, 11)] == [1] * 10
    # a file of unknown size (a URL): one a task
    assert [len(b) for b in dask_batches(files + [(10, "s3://bucket/rank10.json")], 1)] == [1] * 11
    # 3,000-byte files: 4,000 // 3,000 = 1 a task
    for _, f in files:
        Path(f).write_bytes(b" " * 3000)
    assert [len(b) for b in dask_batches(files, 1)] == [1] * 10


def test_dask_batched_tasks_and_second_round(in_process: pipeline.BuiltReport, monkeypatch: pytest.MonkeyPatch) -> None:
    distributed = pytest.importorskip("distributed", reason="Dask is the optional extra perfdoctor[dask]")
    monkeypatch.setattr(executors, "MIN_TASKS_PER_THREAD", 1)
    paths = _dlrm()
    again = sorted(peer_ends(in_process.job.summaries))
    with (
        distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0") as cl,
        distributed.Client(cl) as client,
    ):
        done: list[list[str]] = []
        dask = DaskCluster(client, on_done=lambda part: done.append([s.path for s in part]))
        built = pipeline.build(paths, executor=dask)
        addresses = set(client.scheduler_info()["workers"])
    # 8 files of ~0.8 MB of JSON (gzip's size field), 2 threads: 8 // 2 = 4 a task (4 MB would hold 5), 2
    # tasks; the second round, ranks 5 and 7: 2 // 2 = 1 a task, 2 tasks
    sizes = [executors.json_bytes(p) for p in paths]
    assert all(700_000 < b < 1_000_000 for b in sizes), sizes
    assert dask.tasks_sent == [2, 2]
    assert _canon(built.report) == _canon(in_process.report)
    assert sorted(p for part in done for p in part) == paths and all(len(part) == 1 for part in done)
    redone = _second_round(built, again)
    assert sorted(redone) == again and {s.worker for s in redone.values()} <= addresses


def test_dask_task_that_fails_costs_its_files_only(monkeypatch: pytest.MonkeyPatch) -> None:
    distributed = pytest.importorskip("distributed", reason="Dask is the optional extra perfdoctor[dask]")
    paths = _dlrm()[:4]
    real = executors.summarise_files

    def fails_for_rank_2(items: list[tuple[int, str]], *args: Any) -> Any:
        if any("worker2_" in p for _, p in items):
            raise RuntimeError("test: the task failed")
        return real(items, *args)

    monkeypatch.setattr(executors, "summarise_files", fails_for_rank_2)  # one file a task (4 < 16 per thread)
    with (
        distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=":0") as cl,
        distributed.Client(cl) as client,
    ):
        built = pipeline.build(paths, executor=DaskCluster(client))
    job = built.report["job"]
    victim = next(p for p in paths if "worker2_" in p)
    assert job["failed"] == [
        {"path": victim, "error": f"{victim}: could not be analysed (RuntimeError: test: the task failed)"}
    ]
    assert job["ranks"] == [0, 1, 3]


def test_outcomes_travel_encoded_and_decode_to_the_ranks_own(in_process: pipeline.BuiltReport) -> None:
    """A rank's rule outcomes reach the reducer as bytes (a few kB, not ~35 kB of objects) and decode to what the
    rules returned on the rank's full tables (engine.rank_outcomes, in this process)."""
    import msgspec

    from perfdoctor.analysis.rank import Analysis, InputFile
    from perfdoctor.checks import config, engine
    from perfdoctor.checks import context as cx
    from perfdoctor.jobs.summary import Outcomes

    paths = _dlrm()
    s = next(s for s in in_process.job.summaries if s.rank == 0)
    assert s.outcomes and all(isinstance(b, bytes) for b in s.outcomes.values())
    assert sum(len(b) for b in s.outcomes.values()) < 20_000
    analysis = rank_analysis(paths[0])  # rank 0 alone, its full tables (the per-rank stage)
    ra = analysis.ranks[0]
    assert isinstance(analysis.inputs[0], InputFile) and isinstance(analysis, Analysis)
    cat, _ = engine.prepare(config.resolve())
    order = engine.check_order(cat, list(cat.rules))
    direct = engine.rank_outcomes(analysis, cx.RankContext(analysis, ra), cat, order)
    decoded = Outcomes(s.outcomes)
    assert sorted(decoded) == sorted(direct) and len(decoded) == len(direct)
    for code, o in direct.items():
        assert msgspec.to_builtins(decoded[code]) == msgspec.to_builtins(o, enc_hook=_enc), code
    assert decoded["PD102"] is not decoded["PD102"]  # decoded afresh on each read, nothing kept


def test_gc_paused_restores_the_collector() -> None:
    import gc

    from perfdoctor.jobs.reduce import gc_paused

    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()  # off before: left off
    finally:
        gc.enable()
    with pytest.raises(ValueError), gc_paused():
        raise ValueError("on the way out the collector is back on")
    assert gc.isenabled()
