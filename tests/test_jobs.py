"""Many ranks: rank summaries reproduce the in-process analysis exactly; pool, Dask and cache give the same
report; a corrupt rank is reported while the others are analysed; cross-rank statistics by hand."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import shared_trace

from perfdoctor import pipeline
from perfdoctor.checks import config, engine
from perfdoctor.crossrank.job_section import robust_z
from perfdoctor.jobs import summary as js
from perfdoctor.jobs.executors import DaskCluster, InProcess, LocalPool, memory_limited_jobs
from perfdoctor.jobs.reduce import reduce
from perfdoctor.model import to_builtins
from perfdoctor.model.build import build_report


def _today(paths: list[str]) -> dict[str, Any]:
    """The report as a pool of two worker processes makes it (each rank's summary made in another process)."""
    pool = LocalPool(2)
    try:
        return pipeline.build(paths, executor=pool).report
    finally:
        pool.close()


def _canon(report: dict[str, Any]) -> str:
    return json.dumps({k: v for k, v in report.items() if k != "job"}, sort_keys=True)


def _dlrm() -> list[str]:
    d = shared_trace("param__dlrm_8ranks")
    return sorted(str(p) for p in Path(d).glob("*.json.gz"))


def _hta_two(tmp_path: Path) -> list[str]:
    out = []
    for r in (0, 1):
        src = shared_trace(f"hta__trace_filter__sampled_rank-{r}.json.gz")
        dst = tmp_path / src.name
        shutil.copy(src, dst)
        out.append(str(dst))
    return out


@pytest.mark.parametrize("which", ["dlrm", "hta"])
def test_summaries_reproduce_per_rank_numbers_exactly(which: str, tmp_path: Path) -> None:
    paths = _dlrm() if which == "dlrm" else _hta_two(tmp_path)
    built = pipeline.build(paths)
    assert _canon(built.report) == _canon(_today(paths))
    # the serialised summaries reduce to the same report
    opts = config.resolve()
    cat, codes = engine.prepare(opts)
    again = js.decode(js.encode(built.job.summaries))
    job = reduce(again, cat, codes)
    job.analysis.checks = job.checks
    report = to_builtins(build_report(job.analysis, sections=job.sections()))
    assert _canon(report) == _canon(built.report)


def test_summary_size_does_not_hold_events() -> None:
    built = pipeline.build(_dlrm()[:2])
    for s in built.job.summaries:
        size = len(js.encode([s]))
        # a rank's summary is a small fraction of its trace's JSON (these traces hold ~1 MB of JSON each)
        assert size < 0.2 * s.input["uncompressed_bytes"], size
        assert len(s.collectives.dur_us) == len(s.collectives.kind) > 0


def test_pool_and_dask_give_the_same_report() -> None:
    paths = _dlrm()[:4]
    base = _canon(pipeline.build(paths).report)
    done: list[int] = []
    pool = LocalPool(2, on_done=lambda part: done.append(len(part)))
    assert _canon(pipeline.build(paths, executor=pool).report) == base
    assert done == [1, 1, 1, 1] and pool.workers_used == 2
    distributed = pytest.importorskip("distributed", reason="Dask is the optional extra perfdoctor[dask]")
    Client, LocalCluster = distributed.Client, distributed.LocalCluster

    with (
        LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=":0") as cluster,
        Client(cluster) as client,
    ):
        dask = DaskCluster(client)
        assert _canon(pipeline.build(paths, executor=dask).report) == base


def test_corrupt_rank_reported_others_analysed(tmp_path: Path) -> None:
    paths = _dlrm()[:3]
    bad = tmp_path / "worker3_step_12.pt.trace.json"
    bad.write_text('{"traceEvents": [{"ph": "X", "name": "a", "ts": 1')  # cut inside the first event
    built = pipeline.build(paths + [str(bad)])
    job = built.report["job"]
    assert job["n_ranks"] == 3 and [r["rank"] for r in built.report["ranks"]] == [0, 1, 2]
    assert len(job["failed"]) == 1 and job["failed"][0]["path"] == str(bad)
    assert str(bad) in job["failed"][0]["error"] and "\n" not in job["failed"][0]["error"]
    assert any("rank not analysed" in w for w in built.report["warnings"])
    # a lone corrupt file still fails the report with its error
    with pytest.raises(Exception, match="worker3_step_12"):
        pipeline.build([str(bad)])


def test_cache_reused_when_sha256_matches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    paths = []
    for p in _dlrm()[:2]:
        shutil.copy(p, tmp_path / Path(p).name)
        paths.append(str(tmp_path / Path(p).name))
    monkeypatch.setenv("PERFDOCTOR_HOME", str(tmp_path / "home"))
    first = pipeline.build(paths, cache=True)
    # one entry per trace under $PERFDOCTOR_HOME/cache, named by sha256("<trace sha256>/<options fingerprint>");
    # nothing is written next to the traces
    cached = sorted((tmp_path / "home" / "cache").iterdir())
    assert len(cached) == 2 and sorted(tmp_path.iterdir()) == sorted([tmp_path / "home", *map(Path, paths)])
    import msgspec

    from perfdoctor.jobs.task import _CacheFile

    entries = {c.name: msgspec.msgpack.decode(c.read_bytes(), type=_CacheFile).key for c in cached}
    # each entry is keyed "<sha256 of the trace bytes>/<options fingerprint>" and named by that key's sha256
    assert sorted(k.split("/")[0] for k in entries.values()) == sorted(
        hashlib.sha256(Path(p).read_bytes()).hexdigest() for p in paths
    )
    assert all(name == hashlib.sha256(k.encode()).hexdigest() + js.CACHE_SUFFIX for name, k in entries.items())
    assert not any("--cache" in w for w in first.report["warnings"])
    import perfdoctor.jobs.task as task

    def boom(*a: Any, **k: Any) -> Any:
        raise AssertionError("summary not reused from the cache")

    monkeypatch.setattr(task, "_summarise", boom)
    assert _canon(pipeline.build(paths, cache=True).report) == _canon(first.report)
    # another trace under the same name: the sha256 differs, so the rank is analysed again
    shutil.copy(_dlrm()[5], paths[1])
    monkeypatch.undo()
    third = pipeline.build(paths, cache=True)
    assert third.report["inputs"][1]["sha256"] != first.report["inputs"][1]["sha256"]


def test_memory_guard_limits_workers(tmp_path: Path) -> None:
    f = tmp_path / "t.json"
    f.write_bytes(b" " * 1000)
    # 3 bytes of memory per JSON byte: 10 kB available holds 3 ranks of 1 kB
    assert memory_limited_jobs(8, [str(f)], available=10_000) == 3
    assert memory_limited_jobs(2, [str(f)], available=10_000) == 2
    assert memory_limited_jobs(8, [str(f)], available=100) == 1


def test_robust_z_by_hand() -> None:
    x = np.array([10.0, 11.0, 9.0, 10.0, 30.0])
    # median 10, |dev| = 0 1 1 0 20 → MAD 1; z = 0.6745 × (x − 10)
    assert np.allclose(robust_z(x), 0.6745 * (x - 10.0))
    y = np.array([5.0, 5.0, 5.0, 9.0])
    # MAD 0 → mean absolute deviation 1.0 × 1.253314
    assert np.allclose(robust_z(y), (y - 5.0) / 1.253314)


def test_in_process_executor_reports_each_file() -> None:
    seen: list[str] = []
    built = pipeline.build(_dlrm()[:2], executor=InProcess(on_done=lambda part: seen.extend(s.path for s in part)))
    assert seen == _dlrm()[:2] and built.report["job"]["n_ranks"] == 2


def _merged(tmp_path: Path, layout: str) -> tuple[Path, list[str]]:
    """A merged file of DLRM ranks 0-3 built as a merge tool writes it (independently of perfdoctor's splitter)."""
    import gzip

    paths = _dlrm()[:4]
    docs = [json.loads(gzip.open(p).read()) for p in paths]
    if layout == "array":
        out: Any = docs
    else:
        events = []
        for r, d in enumerate(docs):
            for ev in d["traceEvents"]:
                ev = dict(ev)
                args = dict(ev.get("args") or {})
                if layout == "args_rank":  # TraceLens TraceFusion: args.rank, offset pid/correlation with _raw
                    args["rank"] = r
                    if isinstance(ev.get("pid"), int):
                        args["pid_raw"] = ev["pid"]
                        ev["pid"] += r * 10_000_000
                    if "correlation" in args:
                        args["correlation_raw"] = args["correlation"]
                        args["correlation"] += r * 10_000_000
                else:  # pid per rank, named by process_name
                    if ev.get("ph") == "M" and ev.get("name") == "process_name":
                        args["name"] = f"rank {r} {args.get('name', '')}"
                    ev["pid"] = f"r{r}-{ev.get('pid')}"
                ev["args"] = args
                events.append(ev)
        out = {"traceEvents": events, "deviceProperties": docs[0]["deviceProperties"]}
    f = tmp_path / f"merged_{layout}.json"
    f.write_bytes(json.dumps(out).encode())
    return f, paths


@pytest.mark.parametrize("layout", ["args_rank", "pid_label", "array"])
def test_merged_file_split_into_ranks(tmp_path: Path, layout: str) -> None:
    merged, paths = _merged(tmp_path, layout)
    built = pipeline.build([str(merged)])
    ranks = built.report["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1, 2, 3]
    assert built.report["job"]["n_ranks"] == 4
    assert any("merged trace of 4 ranks" in w for w in built.report["warnings"])
    per_file = pipeline.build(paths).report["ranks"]
    for got, want in zip(ranks, per_file):
        # the same step breakdown and kernels as the rank's own file
        assert got["devices"][0]["steps"] == want["devices"][0]["steps"]
        assert got["top_kernels"] == want["top_kernels"]


def test_fsspec_url_read_by_the_worker(tmp_path: Path) -> None:
    fsspec = pytest.importorskip("fsspec")
    src = _dlrm()[0]
    url = "memory://perfdoctor-test/worker0.pt.trace.json.gz"
    with fsspec.open(url, "wb") as fh:
        fh.write(Path(src).read_bytes())
    from perfdoctor.jobs.task import summarise_file

    cat, codes = engine.prepare(config.resolve())
    [s] = summarise_file(url, 0, js.SummaryOptions(codes=codes), cat)
    [local] = summarise_file(src, 0, js.SummaryOptions(codes=codes), cat)
    assert s.error is None and s.path == url and s.input["sha256"] == local.input["sha256"]
    assert [r.dur_us for r in s.step_rows] == [r.dur_us for r in local.step_rows]


def test_ranks_with_different_step_counts() -> None:
    from perfdoctor.crossrank.job_section import job_section

    built = pipeline.build(_dlrm()[:3])
    job = built.job
    # rank 2 lost its only step (e.g. a trace cut before it): a hole in the rank × step matrix, not a zero
    job.summaries[2].step_rows = []
    sec = job_section(job)
    assert sec.steps == [10] and sec.step_time_us[2] == [None]
    assert sec.step_time_us[0][0] == pytest.approx(job.summaries[0].step_rows[0].dur_us)
    assert sec.step_median_us[2] is None


def test_straggler_and_breakdown_outlier_by_hand() -> None:
    from perfdoctor.crossrank.job_section import _breakdown_outliers, _stragglers

    compute = np.array([[10.0], [10.2], [9.9], [10.1], [10.0], [15.0]]) * 1000  # µs, one step
    # median 10,050; |dev| 50 150 150 50 50 4,950 → MAD 100; z(rank 5) = 0.6745 × 4,950 / 100 = 33.39
    [s] = _stragglers(list(range(6)), compute)
    assert s.rank == 5 and s.z == pytest.approx(0.6745 * 4950 / 100)
    assert s.median_compute_us == pytest.approx(10_050.0)
    # a rank 8% above the median is robustly far on a tight job but under the 10% floor: not a straggler
    assert _stragglers(list(range(6)), np.array([[10.0], [10.0], [10.0], [10.01], [10.0], [10.8]])) == []
    # rank 5's 4,950 µs excess is under 5% of a 100 ms job step (5,000 µs): immaterial, not a straggler
    assert _stragglers(list(range(6)), compute, job_step_us=100_000.0) == []
    assert len(_stragglers(list(range(6)), compute, job_step_us=99_000.0)) == 1
    shares = [
        {"idle: dataloader": 0.02},
        {"idle: dataloader": 0.03},
        {"idle: dataloader": 0.02},
        {"idle: dataloader": 0.35},
        {"idle: dataloader": 0.025},
    ]
    [b] = _breakdown_outliers(list(range(5)), shares)
    assert b.rank == 3 and b.category == "idle: dataloader" and b.median_share == pytest.approx(0.025)


def test_cli_jobs_and_per_rank() -> None:
    import subprocess
    import sys

    files = _dlrm()[:2]

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "perfdoctor", "report", *files, "--width", "120", *args],
            capture_output=True,
            text=True,
            check=False,
        )

    r = cli("--jobs", "2", "--format", "json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["job"]["n_ranks"] == 2 and [x["rank"] for x in doc["ranks"]] == [0, 1]
    job_view, per_rank = cli("--jobs", "1"), cli("--jobs", "1", "--per-rank")
    assert "Job: 2 ranks analysed" in job_view.stdout and "Rank 1\ntrace:" not in job_view.stdout
    assert "Rank 1\ntrace:" in per_rank.stdout and "Job: 2 ranks" not in per_rank.stdout
    bad = cli("--jobs", "0")
    assert bad.returncode == 2 and "--jobs must be at least 1" in bad.stderr and "Traceback" not in bad.stderr


def test_unreachable_dask_scheduler_is_one_line() -> None:
    pytest.importorskip("distributed", reason="Dask is the optional extra perfdoctor[dask]")
    from perfdoctor.errors import PerfDoctorError

    with pytest.raises(PerfDoctorError, match=r"--dask tcp://127.0.0.1:9: cannot reach the Dask scheduler"):
        DaskCluster("tcp://127.0.0.1:9", timeout_s=1.0)
    # an in-process address of another process (a LocalCluster(processes=False) elsewhere): distributed raises
    # ValueError, which printed a traceback
    with pytest.raises(PerfDoctorError, match=r"--dask inproc://10.0.0.1/1/1: cannot reach the Dask scheduler"):
        DaskCluster("inproc://10.0.0.1/1/1", timeout_s=1.0)


def test_collective_timeline_kind_and_bytes_from_the_trace() -> None:
    import orjson

    from perfdoctor.jobs.task import summarise_file

    src = shared_trace("ykcai__a100x2_moe_1layer_before") / "rank0.pt.trace.json"
    raw = orjson.loads(src.read_bytes())["traceEvents"]
    nccl = sorted((e for e in raw if e.get("cat") == "kernel" and "nccl" in e["name"]), key=lambda e: e["ts"])
    cat, codes = engine.prepare(config.resolve())
    [s] = summarise_file(str(src), 0, js.SummaryOptions(codes=codes), cat)
    c = s.collectives
    assert c is not None and len(c.dur_us) == len(nccl)  # the whole trace is one window here
    first = nccl[0]["args"]
    assert c.kind[0] == first["Collective name"] == "all_to_allv"
    assert c.bytes[0] == first["In msg nelems"] * 4 == 8192  # Float: 4 bytes
    assert c.dur_us == [e["dur"] for e in nccl]


def test_cache_not_writable_warns_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # $PERFDOCTOR_HOME is a file, so $PERFDOCTOR_HOME/cache cannot be made: the report is still made, with one
    # warning line for both ranks, and nothing is written next to the traces
    home = tmp_path / "home"
    home.write_text("")
    monkeypatch.setenv("PERFDOCTOR_HOME", str(home))
    paths = []
    for p in _dlrm()[:2]:
        shutil.copy(p, tmp_path / Path(p).name)
        paths.append(str(tmp_path / Path(p).name))
    built = pipeline.build(paths, cache=True)
    assert built.report["job"]["n_ranks"] == 2
    lines = [w for w in built.report["warnings"] if "--cache" in w]
    assert len(lines) == 1 and "summaries not cached" in lines[0] and str(home / "cache") in lines[0]
    assert sorted(tmp_path.iterdir()) == sorted([home, *map(Path, paths)])


def _code_fingerprint_by_hand() -> str:
    """sha256 over perfdoctor/**/*.py then rules/*.toml: "<dir>/<relative path>\\0" + bytes, sorted by path."""
    import os

    import perfdoctor

    h = hashlib.sha256()
    pkg = os.path.dirname(os.path.abspath(perfdoctor.__file__))
    rules = os.path.join(os.path.dirname(pkg), "rules")
    py = sorted(
        os.path.relpath(os.path.join(d, f), pkg).replace(os.sep, "/")
        for d, _, names in os.walk(pkg)
        for f in names
        if f.endswith(".py")
    )
    for top, rels in (("perfdoctor", py), ("rules", sorted(f for f in os.listdir(rules) if f.endswith(".toml")))):
        for rel in rels:
            h.update(f"{top}/{rel}\0".encode())
            h.update(Path(pkg if top == "perfdoctor" else rules, rel).read_bytes())
    return h.hexdigest()[:16]


def test_dask_workers_running_different_code_are_refused() -> None:
    distributed = pytest.importorskip("distributed", reason="Dask is the optional extra perfdoctor[dask]")
    from perfdoctor import __version__
    from perfdoctor.errors import PerfDoctorError

    paths = _dlrm()[:4]
    cat, codes = engine.prepare(config.resolve())
    with (
        distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0") as cl,
        distributed.Client(cl) as client,
    ):
        addresses = set(client.scheduler_info()["workers"])
        summaries = DaskCluster(client).summarise(paths, js.SummaryOptions(codes=codes), cat)
    # every summary names the code that made it and the Dask worker it ran on
    made_by = {(s.perfdoctor_version, s.code_fingerprint) for s in summaries}
    assert made_by == {(__version__, _code_fingerprint_by_hand())}
    assert {s.worker for s in summaries} <= addresses
    assert reduce(summaries, cat, codes).summaries  # one code: reduced as usual
    # rank 2's worker "runs other code" (a patched install of the same version)
    odd = next(s for s in summaries if s.rank == 2)
    odd.code_fingerprint = "0123456789abcdef"
    with pytest.raises(PerfDoctorError) as err:
        reduce(summaries, cat, codes)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("the ranks were analysed by different perfdoctor code")
    same = sorted({s.worker for s in summaries if s.rank != 2})
    assert f"ranks 0, 1, 3 (worker{'s' if len(same) > 1 else ''} {', '.join(same)}) ran perfdoctor {__version__}" in msg
    assert f"rank 2 (worker {odd.worker}) ran perfdoctor {__version__} (code 0123456789abcdef)" in msg
    # every worker agrees, on code other than this process's: reduced, with a warning
    for s in summaries:
        s.code_fingerprint = "0123456789abcdef"
    warnings = reduce(summaries, cat, codes).analysis.warnings
    assert any(w.startswith("the workers ran perfdoctor") and "0123456789abcdef" in w for w in warnings)


def _report_here(argv: list[str]) -> tuple[int, str, str, bool]:
    """``perfdoctor`` in this process: (exit code, stdout, stderr, whether this process is daemonic)."""
    import contextlib
    import io
    import multiprocessing

    from perfdoctor.cli import main

    out, err = io.TextIOWrapper(io.BytesIO(), encoding="utf-8"), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
        out.flush()
    return code, out.buffer.getvalue().decode(), err.getvalue(), multiprocessing.current_process().daemon  # type: ignore[attr-defined]


def test_ranks_analysed_from_a_daemonic_worker_fall_back_to_this_process(tmp_path: Path) -> None:
    # found by the fuzzer: a directory of ranks reported through perfdoctor.cli.main from a multiprocessing.Pool
    # worker (daemonic: it may not start processes) raised "daemonic processes are not allowed to have children"
    # from the job's pool. The same report as from a process that may, with a note and no traceback
    import multiprocessing

    for f in _dlrm()[:3]:  # a directory of three ranks
        shutil.copy(f, tmp_path / Path(f).name)
    argv = ["report", str(tmp_path), "--format", "json", "--jobs", "2"]
    code, normal, err, daemonic = _report_here(argv)
    assert code in (0, 1) and not daemonic and "daemonic" not in err, err
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        got_code, got, got_err, in_daemon = pool.apply(_report_here, (argv,))
    assert in_daemon and got_code == code and "Traceback" not in got_err
    assert json.loads(got) == json.loads(normal) and json.loads(got)["job"]["n_ranks"] == 3
    assert "daemonic multiprocessing worker" in got_err and "the 3 ranks were analysed in this process" in got_err
