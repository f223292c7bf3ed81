"""A pool worker that dies (SIGKILL, os._exit, a MemoryError escaping the task) while analysing one rank: that
rank is reported once, in one line, and every other rank is analysed as in a run where nothing died.

The crash is the test's own task function, run by the real forkserver ProcessPoolExecutor (the worker imports
this module to unpickle it), so the pool really breaks (BrokenProcessPool); nothing in perfdoctor knows of it."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest
from conftest import shared_trace

from perfdoctor import pipeline
from perfdoctor.jobs import executors
from perfdoctor.jobs.executors import LocalPool
from perfdoctor.jobs.task import summarise_file

VICTIM = "worker2_"  # the file of rank 2 in the DLRM job


def _dies(path: str) -> bool:
    return VICTIM in os.path.basename(path)


def sigkill_task(path: str, index: int, **kwargs: Any) -> Any:
    """summarise_file, except that the worker analysing rank 2 is killed (SIGKILL, as the OOM killer does)."""
    if _dies(path):
        os.kill(os.getpid(), signal.SIGKILL)
    return summarise_file(path, index, **kwargs)


def exit_task(path: str, index: int, **kwargs: Any) -> Any:
    """summarise_file, except that the worker analysing rank 2 exits at once (os._exit: no cleanup, no result)."""
    if _dies(path):
        os._exit(3)
    return summarise_file(path, index, **kwargs)


def memory_task(path: str, index: int, **kwargs: Any) -> Any:
    """summarise_file, except that a MemoryError escapes the task of rank 2 (the worker lives on)."""
    if _dies(path):
        raise MemoryError("test: cannot allocate the result")
    return summarise_file(path, index, **kwargs)


TASKS = {"sigkill": sigkill_task, "exit": exit_task, "memory": memory_task}


def _dlrm() -> list[str]:
    return sorted(str(p) for p in Path(shared_trace("param__dlrm_8ranks")).glob("*.json.gz"))[:5]


@pytest.mark.parametrize("how", ["sigkill", "exit", "memory"])
def test_killed_worker_reports_its_rank_once(how: str, monkeypatch: pytest.MonkeyPatch) -> None:
    paths = _dlrm()
    victim = next(p for p in paths if VICTIM in os.path.basename(p))
    want = pipeline.build([p for p in paths if p != victim]).report  # the other four ranks, nothing killed
    monkeypatch.setattr(executors, "summarise_file", TASKS[how])
    done: list[str] = []
    pool = LocalPool(2, on_done=lambda part: done.extend(s.path for s in part))
    got = pipeline.build(paths, executor=pool).report
    job = got["job"]
    # rank 2 failed, once, in one line naming its file; ranks 0, 1, 3, 4 analysed
    assert [f["path"] for f in job["failed"]] == [victim]
    line = job["failed"][0]["error"]
    assert "\n" not in line and line.startswith(victim)
    if how == "memory":
        assert "MemoryError: test: cannot allocate the result" in line
    else:
        assert "worker process analysing this trace died, also when it ran alone" in line
    assert [w for w in got["warnings"] if victim in w] == [f"rank not analysed: {line}"]
    assert sorted(done) == sorted(paths)  # every file reported to the progress bar once
    assert job["ranks"] == [0, 1, 3, 4]
    # the other ranks' sections are those of a run without the dead worker
    assert got["ranks"] == want["ranks"]


def test_ctrl_c_inside_submit_is_interrupted_130(monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    """Ctrl-C landing inside ``ProcessPoolExecutor.submit`` after the pool made its manager thread but before
    the thread started (the reviewer's ~1 in 12 traceback: ``RuntimeError: cannot join thread before it is
    started`` raised over the KeyboardInterrupt, exit 1): the CLI says "interrupted", exit 130, and the
    workers it had started are gone."""
    import concurrent.futures.process as cfp

    from perfdoctor.cli import main

    made: list[Any] = []

    def interrupted_start(self: Any) -> None:
        made.append(self)
        raise KeyboardInterrupt

    monkeypatch.setattr(cfp._ExecutorManagerThread, "start", interrupted_start)
    spawned: list[Any] = []
    real_spawn = cfp.ProcessPoolExecutor._spawn_process

    def spawn(self: Any) -> None:
        real_spawn(self)
        spawned.extend(self._processes.values())

    monkeypatch.setattr(cfp.ProcessPoolExecutor, "_spawn_process", spawn)
    assert main(["report", *_dlrm()[:2], "--jobs", "2"]) == 130
    err = capsys.readouterr().err
    assert err.strip() == "perfdoctor: interrupted" and made and spawned
    for proc in spawned:
        proc.join(timeout=10)
        assert not proc.is_alive()


# Ctrl-C while submit waits for the forkserver to start a worker: the test's SIGINT is sent by this process to
# itself just before it reads the new worker's pid (the forkserver is then still importing its preload, seconds
# on a loaded machine, so the worker is forked only after this process has gone)
_CTRL_C_IN_SPAWN = """
import os, signal, sys
from multiprocessing import forkserver
real = forkserver.read_signed
sent = []
def read_signed(fd):
    if not sent:
        sent.append(1)
        os.kill(os.getpid(), signal.SIGINT)
    return real(fd)
forkserver.read_signed = read_signed
from perfdoctor.cli import main
sys.exit(main(["report", *sys.argv[1:], "--jobs", "2"]))
"""


def test_ctrl_c_while_a_worker_starts_is_one_line_130(tmp_path: Path) -> None:
    """The worker the forkserver was starting when Ctrl-C came is killed with the others: no ``FileNotFoundError``
    traceback from a worker that found the pool's semaphore unlinked (19 in 20 real Ctrl-Cs at that moment
    printed one, before the Ctrl-C was deferred to the end of ``submit``). The process group's stderr is read to
    its end, so a stray worker's traceback would be in it."""
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-c", _CTRL_C_IN_SPAWN, *_dlrm()[:4]],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)},
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # noqa: PLW1509  # as a shell starts it
    )
    assert (proc.returncode, proc.stderr.strip()) == (130, "perfdoctor: interrupted")


def test_ctrl_c_while_the_commands_load_is_one_line_130(monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    """Ctrl-C while ``perfdoctor`` imports its subcommands (building the parser: ~0.3 s into a run on a loaded
    machine printed a KeyboardInterrupt traceback and exited by SIGINT)."""
    import perfdoctor.cli as cli

    def interrupted() -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "build_parser", interrupted)
    assert cli.main(["report", "x.json"]) == 130
    assert capsys.readouterr().err.strip() == "perfdoctor: interrupted"
