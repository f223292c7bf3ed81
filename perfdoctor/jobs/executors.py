"""Where the per-rank tasks run: this process, a local process pool, or an existing Dask cluster.

Every executor has ``summarise(files, opts, cat, cache, indices=None, quiet=False) ->
list[RankSummary]`` and calls ``on_done(summaries_of_one_file)`` as each file finishes (for a progress bar), and
``close()``. ``indices``: each file's index among the job's inputs (default: its position in ``files``);
``quiet``: no progress and no exception for a lone file, for the second round that re-analyses the ranks that
arrived last with their peers' arrivals (:mod:`perfdoctor.jobs.rounds`), on the same workers. Only the summaries
travel back: workers read the trace paths themselves (a shared file system, or fsspec URLs on a cluster).

Memory guard (:func:`memory_limited_jobs`): a rank's analysis holds its decoded event columns, about
``MEMORY_PER_JSON_BYTE`` bytes per byte of trace JSON at the peak, so no more ranks run at once than the
available memory holds for the largest of them.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from functools import partial
from multiprocessing.context import BaseContext
from types import FrameType
from typing import TYPE_CHECKING, Protocol

from perfdoctor.errors import PerfDoctorError
from perfdoctor.jobs.summary import RankSummary, SummaryOptions
from perfdoctor.jobs.task import summarise_file, summarise_files

if TYPE_CHECKING:
    from distributed import Client

    from perfdoctor.checks.catalogue import Catalogue

# peak resident bytes of one rank's analysis per byte of trace JSON: benchmarks/trace_load.py measures 0.97× for
# load + breakdown (README, "Measured"); replay, roofline and the rules add to it, unmeasured: 3× leaves headroom
MEMORY_PER_JSON_BYTE = 3.0
# gzip'd Kineto JSON expands about 8-14× (the shared DLRM traces: 60 kB → 0.8 MB); when the gzip size field
# cannot be trusted
GZIP_RATIO = 12.0

OnDone = Callable[[list[RankSummary]], None]
# one rank task with its options bound: (path, index) -> the file's summaries
RankTask = Callable[[str, int], list[RankSummary]]

# what a pool worker imports before its first rank: the forkserver imports them once and every worker it forks
# inherits them (the modules a rank's analysis imports lazily are listed too: they cost a worker ~50 ms of CPU
# on its first rank otherwise, also in the second round's fresh pool)
PRELOAD = [
    "perfdoctor.jobs.task",
    "perfdoctor.pipeline",
    "perfdoctor.checks.engine",
    "perfdoctor.analysis.work.mfu",
    "perfdoctor.analysis.memory.peaks",
    "perfdoctor.analysis.summary",
    "perfdoctor.analysis.trace_info",
    "perfdoctor.model.build",
    "perfdoctor.replay.transforms.batch",
    "perfdoctor.replay.transforms.kernels",
    "perfdoctor.trace.ranks",
]


class Executor(Protocol):
    """What runs the rank tasks (:class:`InProcess`, :class:`LocalPool`, :class:`DaskCluster`; the module docstring
    says what each argument is)."""

    def summarise(
        self,
        files: list[str],
        opts: SummaryOptions,
        cat: Catalogue,
        cache: bool = False,
        indices: list[int] | None = None,
        quiet: bool = False,
    ) -> list[RankSummary]:
        """The summaries of ``files``."""
        ...

    def close(self) -> None:
        """Release the workers."""
        ...


def _indices(files: list[str], indices: list[int] | None) -> list[int]:
    """Each file's index among the job's inputs: ``indices``, or the positions of ``files``."""
    if indices is None:
        return list(range(len(files)))
    if len(indices) != len(files):
        raise ValueError(f"{len(indices)} indices for {len(files)} files")
    return list(indices)


def json_bytes(path: str) -> int:
    """Bytes of trace JSON in ``path``: its size, or for .gz the size gzip recorded (mod 2**32) when larger
    than the compressed size, else the compressed size × :data:`GZIP_RATIO`. 0 for a URL or missing file."""
    try:
        size = os.path.getsize(path)
    except OSError:
        return 0
    if not path.endswith(".gz"):
        return size
    try:
        with open(path, "rb") as fh:
            fh.seek(-4, os.SEEK_END)
            isize = int.from_bytes(fh.read(4), "little")
    except OSError:
        isize = 0
    return isize if isize > size else int(size * GZIP_RATIO)


def available_memory_bytes() -> int:
    """``MemAvailable`` of /proc/meminfo (bytes), or 0 when unknown (not Linux)."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def memory_limited_jobs(jobs: int, files: list[str], available: int | None = None) -> int:
    """At most ``jobs`` workers, and no more than the available memory holds for the largest file
    (:data:`MEMORY_PER_JSON_BYTE` × its JSON bytes each); at least 1."""
    avail = available_memory_bytes() if available is None else available
    need = MEMORY_PER_JSON_BYTE * max((json_bytes(f) for f in files), default=0)
    if avail <= 0 or need <= 0:
        return max(1, jobs)
    return max(1, min(jobs, int(avail // need)))


class InProcess:
    """Run every task here, one after another (the default for one file; exact errors for a lone file)."""

    def __init__(self, on_progress: Callable[[int], None] | None = None, on_done: OnDone | None = None) -> None:
        self.on_progress = on_progress
        self.on_done = on_done

    def summarise(
        self,
        files: list[str],
        opts: SummaryOptions,
        cat: Catalogue,
        cache: bool = False,
        indices: list[int] | None = None,
        quiet: bool = False,
    ) -> list[RankSummary]:
        """The summaries of ``files`` (the module docstring says what each argument is)."""
        out: list[RankSummary] = []
        lone = len(files) == 1 and not quiet
        for i, f in zip(_indices(files, indices), files):
            part = summarise_file(f, i, opts, cat, cache, None if quiet else self.on_progress, raise_errors=lone)
            out += part
            if self.on_done and not quiet:
                self.on_done(part)
        return out

    def close(self) -> None:
        """Nothing to release."""


class LocalPool:
    """A local process pool of ``jobs`` workers (capped by :func:`memory_limited_jobs`).

    A worker process that dies (SIGKILL, e.g. from the out-of-memory killer; ``os._exit``; a crash in native
    code) breaks the whole pool: every rank in flight then fails with ``BrokenProcessPool``, not only the one
    that killed it. Those ranks are set aside, the ranks not yet started go to a fresh pool, and each set-aside
    rank is then analysed alone, one at a time, in its own one-worker pool (alone, a rank killed for memory has
    the machine's memory to itself): a rank whose worker dies again is the culprit and gets that rank's one-line
    error; the others are analysed as usual. An exception a task raises (it catches the analysis errors itself,
    so this is e.g. a MemoryError while its result is sent back) is that rank's one-line error too. In a process
    that may not start one (:func:`pool_unavailable`: a daemonic ``multiprocessing`` worker) the ranks are
    analysed in this process, and :attr:`fallback_note` says so.
    """

    def __init__(self, jobs: int | None = None, on_done: OnDone | None = None) -> None:
        self.jobs = jobs or os.cpu_count() or 1
        self.on_done = on_done
        self.workers_used = 0
        self._report: OnDone | None = on_done
        #: why the ranks were analysed in this process instead (None: the pool ran, or one worker sufficed)
        self.fallback_note: str | None = None

    def summarise(
        self,
        files: list[str],
        opts: SummaryOptions,
        cat: Catalogue,
        cache: bool = False,
        indices: list[int] | None = None,
        quiet: bool = False,
    ) -> list[RankSummary]:
        """The summaries of ``files`` (the module docstring says what each argument is), in index order."""
        n = min(memory_limited_jobs(self.jobs, files), len(files))
        if not quiet:
            self.workers_used = n
        self._report = None if quiet else self.on_done
        no_pool = pool_unavailable() if n > 1 else None
        if no_pool and not quiet:
            self.fallback_note = f"{no_pool}: the {len(files)} ranks were analysed in this process, one after another"
        if n <= 1 or no_pool:
            if not quiet:
                self.workers_used = 1
            one = InProcess(on_done=self._report)
            return one.summarise(files, opts, cat, cache, indices, quiet)
        task = partial(summarise_file, opts=opts, cat=cat, cache=cache)
        import multiprocessing

        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(PRELOAD)
        start_forkserver_deaf_to_ctrl_c()
        results: dict[int, list[RankSummary]] = {}
        todo = list(zip(_indices(files, indices), files))
        suspects: list[tuple[int, str]] = []
        while todo:  # each broken pool sets its ranks in flight aside and hands the rest to a fresh one
            done_before = len(results)
            left, lost = self._run(todo, n, task, ctx, results)
            if len(left) == len(todo) and not lost and len(results) == done_before:
                lost, left = left, []  # a pool that broke before running anything: every rank alone
            todo, suspects = left, suspects + lost
        for i, f in sorted(suspects):
            if any(self._run([(i, f)], 1, task, ctx, results)):  # its worker died again (or never started)
                self._collect(i, [RankSummary(index=i, path=f, error=died(f))], results)
        return [s for i in sorted(results) for s in results[i]]

    def _run(
        self,
        items: list[tuple[int, str]],
        n: int,
        task: RankTask,
        ctx: BaseContext,
        results: dict[int, list[RankSummary]],
    ) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
        """Analyse ``items`` ((index, path)) on a pool of ``n`` workers into ``results``; returns the items not
        started and the items in flight when a worker died (both empty when none died)."""
        queue = items[::-1]
        pool = ProcessPoolExecutor(max_workers=n, mp_context=ctx)
        try:
            left = self._drain(pool, queue, n, task, results)
        except BaseException:  # Ctrl-C (or any error): stop the workers, wait for nothing, let it through
            abandon(pool)
            raise
        pool.shutdown(wait=True)
        return left

    def _drain(
        self,
        pool: ProcessPoolExecutor,
        queue: list[tuple[int, str]],
        n: int,
        task: RankTask,
        results: dict[int, list[RankSummary]],
    ) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
        """:meth:`_run`'s loop on ``pool``: ``queue`` holds the items in reverse order."""
        pending: dict[Future[list[RankSummary]], tuple[int, str]] = {}
        while queue or pending:
            broken = False
            try:
                while queue and len(pending) < 2 * n:  # a bounded queue: results are collected as they come
                    i, f = queue[-1]
                    with ctrl_c_deferred():  # submit may be starting a worker: see ctrl_c_deferred
                        fut = pool.submit(task, f, i)
                    pending[fut] = (i, f)
                    queue.pop()
            except BrokenProcessPool:  # a worker died since the last wait: submit refuses
                broken = True
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            lost = []
            for fut in done:
                item = pending.pop(fut)
                if not self._take(fut, item, results):
                    lost.append(item)
            if lost or broken:  # the pool is broken: every future still pending fails or has finished
                wait(pending)
                lost += [item for fut, item in pending.items() if not self._take(fut, item, results)]
                return queue[::-1], lost
        return [], []

    def _take(
        self, fut: Future[list[RankSummary]], item: tuple[int, str], results: dict[int, list[RankSummary]]
    ) -> bool:
        """Collect ``fut``'s summaries for ``item``; False when its worker died (the pool broke)."""
        i, f = item
        try:
            part = fut.result()
        except BrokenProcessPool:
            return False
        except Exception as exc:  # noqa: BLE001  # the task's own errors are caught inside it: anything else
            part = [RankSummary(index=i, path=f, error=f"{f}: could not be analysed ({type(exc).__name__}: {exc})")]
        self._collect(i, part, results)
        return True

    def _collect(self, i: int, part: list[RankSummary], results: dict[int, list[RankSummary]]) -> None:
        results[i] = part
        if self._report:
            self._report(part)

    def close(self) -> None:
        """Nothing to release: each :meth:`summarise` shuts its pool down."""


def pool_unavailable() -> str | None:
    """Why this process cannot start a process pool, or None when it can.

    A daemonic ``multiprocessing`` process (a ``multiprocessing.Pool`` worker, a ``Process(daemon=True)``) may
    not have children: ``multiprocessing`` refuses to start one (``AssertionError: daemonic processes are not
    allowed to have children``, ``multiprocessing/process.py``), so its caller's ranks run in process instead.
    """
    import multiprocessing

    me = multiprocessing.current_process()
    if me.daemon:
        return f"this process ({me.name}) is a daemonic multiprocessing worker, which may not start a process pool"
    return None


def start_forkserver_deaf_to_ctrl_c() -> None:
    """Start the forkserver (when not yet running) with SIGINT ignored, which it and the workers it forks
    inherit: Ctrl-C reaches the whole process group, and a worker or a forkserver still importing its preload
    printed its own ``KeyboardInterrupt`` traceback beside "perfdoctor: interrupted". This process alone
    handles Ctrl-C and stops the workers (:func:`abandon`). Only the main thread may set signal handlers."""
    import signal
    import threading
    from multiprocessing import forkserver

    if threading.current_thread() is not threading.main_thread():
        forkserver.ensure_running()
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        forkserver.ensure_running()
    finally:
        signal.signal(signal.SIGINT, previous)


@contextlib.contextmanager
def ctrl_c_deferred() -> Iterator[None]:
    """A Ctrl-C (SIGINT) inside is acted on when the block ends, as the handler that was in place would have.

    ``ProcessPoolExecutor.submit`` starts the pool's workers: it sends the forkserver the worker's pickled
    process object, whose call queue holds a named POSIX semaphore, and waits for the new pid. A Ctrl-C in that
    wait (seconds while the forkserver still imports its preload on a loaded machine) left a worker this process
    did not know of, so :func:`abandon` could not kill it; this process then exited, unlinking the semaphore,
    and the worker printed ``FileNotFoundError`` from ``SemLock._rebuild`` beside "perfdoctor: interrupted"
    (19 of 20 Ctrl-Cs sent to the process group just after the forkserver appeared; 0 of 20 with the
    Ctrl-C deferred). Deferred to the end of ``submit``, the worker is in the pool's process table and is
    killed. Only the main thread may set signal handlers: elsewhere the block runs as is.
    """
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[FrameType | None] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: caught.append(frame))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if caught and callable(previous):  # the default handler raises KeyboardInterrupt here
            previous(signal.SIGINT, caught[0])
        elif caught and previous == signal.SIG_DFL:
            signal.raise_signal(signal.SIGINT)


def abandon(pool: ProcessPoolExecutor) -> None:
    """Shut ``pool`` down at once: kill its workers, cancel what is queued, join nothing.

    A Ctrl-C can land inside ``submit`` after the pool made its manager thread but before that thread started;
    ``shutdown(wait=True)`` (what ``with`` does on the way out) then raises ``RuntimeError: cannot join thread
    before it is started`` over the ``KeyboardInterrupt``, and the CLI printed a traceback instead of
    "interrupted". Killing the workers lets a manager thread that did start see a broken pool and end.
    """
    for proc in list((getattr(pool, "_processes", None) or {}).values()):
        try:
            proc.kill()
        except (OSError, ValueError, AttributeError):  # already gone, or closed
            pass
    try:
        pool.shutdown(wait=False, cancel_futures=True)
    except RuntimeError:  # a manager thread half started: nothing to wait for
        pass


def died(path: str) -> str:
    """The one-line error of a rank whose worker process died, again when analysed alone."""
    return (
        f"{path}: the worker process analysing this trace died, also when it ran alone (killed, e.g. by the "
        "out-of-memory killer, or it exited); the other ranks were analysed"
    )


class DaskCluster:
    """An existing Dask distributed cluster (``address`` ``tcp://host:8786``) or a ``distributed.Client``.

    Each task reads its traces where it runs; only the summaries come back. Small traces go several to a task
    (:func:`dask_batches`). ``dashboard_link`` is the cluster's dashboard URL (for the progress line).
    :meth:`close` closes the client this object opened (not one it was given).

    Raises:
        PerfDoctorError: Dask distributed is not installed (``pip install perfdoctor[dask]``) or the
            scheduler cannot be reached.
    """

    def __init__(self, address: str | Client, on_done: OnDone | None = None, timeout_s: float = 10.0) -> None:
        try:
            from distributed import Client
        except ImportError:
            raise PerfDoctorError("--dask needs Dask distributed: pip install 'perfdoctor[dask]'") from None
        if isinstance(address, Client):
            self.client, self._own = address, False
        else:
            try:
                self.client, self._own = Client(address, timeout=timeout_s), True  # type: ignore[no-untyped-call]
            except (OSError, TimeoutError, ValueError) as exc:  # ValueError: an address of another process (inproc:)
                raise PerfDoctorError(f"--dask {address}: cannot reach the Dask scheduler ({exc})") from None
        self.on_done = on_done
        self.dashboard_link: str = str(getattr(self.client, "dashboard_link", "") or "")
        self.tasks_sent: list[int] = []  # tasks submitted by each summarise (each holds one or more files)

    def summarise(
        self,
        files: list[str],
        opts: SummaryOptions,
        cat: Catalogue,
        cache: bool = False,
        indices: list[int] | None = None,
        quiet: bool = False,
    ) -> list[RankSummary]:
        """The summaries of ``files`` (the module docstring says what each argument is), in index order.

        A task that fails as a whole (its worker died more often than the cluster allows: ``KilledWorker``)
        gives each of its files that one-line error; the other tasks' ranks are analysed.
        """
        import uuid

        from distributed import as_completed

        # the rule catalogue (~50 kB pickled) and the options go to every worker once, not with every task
        shared = self.client.scatter([opts, cat], broadcast=True, hash=False)  # type: ignore[no-untyped-call]
        threads = sum(self.client.nthreads().values()) or 1  # type: ignore[no-untyped-call]
        batches = dask_batches(list(zip(_indices(files, indices), files)), threads)
        token = uuid.uuid4().hex[:8]  # a second round's keys must differ from the first's
        futures = {
            self.client.submit(
                summarise_files, batch, *shared, cache, pure=False, key=f"perfdoctor-ranks-{batch[0][0]}-{token}"
            ): batch
            for batch in batches
        }
        self.tasks_sent.append(len(futures))
        results: dict[int, list[RankSummary]] = {}
        # results are gathered by the client's event loop as the tasks finish (no round trip per result here)
        for fut, value in as_completed(futures, with_results=True, raise_errors=False):  # type: ignore[no-untyped-call]
            batch = futures[fut]
            if fut.status == "error":
                exc = value[1]
                parts = [
                    [RankSummary(index=i, path=f, error=f"{f}: could not be analysed ({type(exc).__name__}: {exc})")]
                    for i, f in batch
                ]
            else:
                parts = value
            fut.release()
            for (i, _), part in zip(batch, parts):
                results[i] = part
                if self.on_done and not quiet:
                    self.on_done(part)
        return [s for i in sorted(results) for s in results[i]]

    def close(self) -> None:
        """Close the client when this object opened it."""
        if self._own:
            self.client.close()  # type: ignore[no-untyped-call]


# a Dask task costs about 3 ms of worker time (median gap between a worker's tasks 3.4-3.7 ms, from the task
# stream of a 2-worker LocalCluster on the 256-rank job of benchmarks/many_ranks.py, load 6) and about 3 ms of
# the scheduler's CPU (its process's CPU beyond its idle ~48 ms per second); a rank of the 0.8 MB DLRM traces
# ~65 ms of CPU; at 4,096 ranks on 64 workers, one rank a task would need ~12 s of scheduler CPU
BATCH_JSON_BYTES = 4 << 20  # a task holds files of up to ~4 MB of trace JSON together (~0.3 s of analysis)
MIN_TASKS_PER_THREAD = 16  # ... and every worker thread still gets at least 16 tasks (the last one idles the rest)


def dask_batches(items: list[tuple[int, str]], threads: int) -> list[list[tuple[int, str]]]:
    """``items`` ((index, path), in order) cut into consecutive tasks of ``k`` files: ``k`` = the files that fit
    :data:`BATCH_JSON_BYTES` at their mean JSON size (:func:`json_bytes`), at most ``len(items) // (threads ×``
    :data:`MIN_TASKS_PER_THREAD` ``)``, at least 1; 1 when a file's size is unknown (a URL)."""
    sizes = [json_bytes(f) for _, f in items]
    k = 1
    if items and min(sizes) > 0:
        by_bytes = int(BATCH_JSON_BYTES // (sum(sizes) / len(sizes)))
        k = max(1, min(by_bytes, len(items) // (max(threads, 1) * MIN_TASKS_PER_THREAD)))
    return [items[j : j + k] for j in range(0, len(items), k)]
