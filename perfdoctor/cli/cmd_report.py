"""``perfdoctor report PATH...``: diagnose Kineto / torch.profiler traces."""

from __future__ import annotations

import argparse
import dataclasses
import functools
import os
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

from perfdoctor.cli.output import check_output, write_report
from perfdoctor.errors import PerfDoctorError, TraceFormatError

if TYPE_CHECKING:
    from collections.abc import Callable

    from rich.console import Console

    from perfdoctor.analysis.work.mfu import ModelFlops
    from perfdoctor.capture.run_data import RunData
    from perfdoctor.checks.config import RuleOptions
    from perfdoctor.jobs.executors import DaskCluster, LocalPool, OnDone
    from perfdoctor.pipeline import BuiltReport

NAME = "report"
HELP = "Diagnose Kineto / torch.profiler traces (files, directories of per-rank traces, or a perfdoctor run directory)."


OWN_SCHEMAS = ("perfdoctor.report", "perfdoctor.diff")  # the top-level "schema" of our report and diff JSON
PROGRESS_MIN_BYTES = 8 << 20  # inputs smaller than this load too fast for a progress bar


def add_arguments(p: argparse.ArgumentParser) -> None:
    _add_inputs(p)
    _add_model_flops(p)
    _add_ranks(p)
    _add_views(p)


def _add_inputs(p: argparse.ArgumentParser) -> None:
    """The traces, where the report goes, and which rules run."""
    p.add_argument("paths", nargs="+", metavar="PATH", help="trace .json/.json.gz, a directory of traces, or a run dir")
    p.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        help="write the report file; the format comes from the extension: .html, .md or .json",
    )
    p.add_argument(
        "--format",
        choices=["terminal", "json", "md"],
        default="terminal",
        help="what to write to stdout (default: terminal summary)",
    )
    p.add_argument("--step-marker", metavar="REGEX", help="annotation regex marking steps (default ProfilerStep#N)")
    p.add_argument("--force", action="store_true", help="overwrite an existing output file")
    p.add_argument("--select", metavar="CODES", help="rules to run: codes, prefixes (PD3) or names, comma-separated")
    p.add_argument("--ignore", metavar="CODES", help="rules to leave out (same forms as --select)")
    p.add_argument("--rules", action="append", metavar="DIR", help="load user TOML rules from DIR (repeatable)")
    p.add_argument(
        "--fail-on",
        choices=["low", "medium", "high"],
        default=None,
        help="exit with status 1 when a finding at or above this severity exists (for CI)",
    )


def _add_model_flops(p: argparse.ArgumentParser) -> None:
    """The model's shape, for the transformer FLOPs estimate behind MFU."""
    g = p.add_argument_group("model FLOPs for MFU (transformer estimate 6N + 12·L·H·Q·T per token)")
    g.add_argument("--params", type=float, metavar="N", help="parameters, excluding position embeddings")
    g.add_argument("--layers", type=int, metavar="L")
    g.add_argument("--heads", type=int, metavar="H")
    g.add_argument("--d-model", type=int, metavar="C", help="model width (Q = C/H)")
    g.add_argument("--seq-len", type=int, metavar="T", help="the actual sequence length, not the configured maximum")
    g.add_argument("--tokens-per-step", type=float, metavar="TOKENS", help="tokens per optimizer step on one rank")


def _add_ranks(p: argparse.ArgumentParser) -> None:
    """Many ranks: the workers, the Dask cluster, the summary cache and the per-rank view."""
    j = p.add_argument_group("many ranks (one trace per rank, analysed in parallel)")
    j.add_argument(
        "--jobs",
        "-j",
        type=int,
        metavar="N",
        default=None,
        help="local worker processes (default: the machine's cores; fewer when memory cannot hold "
        "that many ranks at once)",
    )
    j.add_argument(
        "--dask",
        metavar="ADDR",
        default=os.environ.get("DASK_SCHEDULER_ADDRESS"),
        help="run the per-rank analyses on an existing Dask cluster (tcp://host:8786; default "
        "$DASK_SCHEDULER_ADDRESS); workers read the trace paths or fsspec URLs themselves",
    )
    j.add_argument(
        "--cache",
        action="store_true",
        help="reuse/store each rank's summary under $PERFDOCTOR_HOME/cache (default "
        "~/.cache/perfdoctor/cache), keyed by the trace's sha256 and the options",
    )
    j.add_argument(
        "--per-rank",
        action="store_true",
        help="print every rank's breakdown table (default on a multi-rank job: the job summary)",
    )


def _add_views(p: argparse.ArgumentParser) -> None:
    """What else is shown or written: the details, the annotated timeline."""
    p.add_argument(
        "--details",
        action="store_true",
        help="print each finding's evidence, message and method, and each skipped check's reason",
    )
    p.add_argument(
        "--timeline",
        metavar="FILE",
        help="write the annotated timeline (Chrome-trace JSON for ui.perfetto.dev; gzip when FILE ends .gz)",
    )
    p.add_argument(
        "--timeline-steps",
        metavar="STEPS",
        help="steps the timeline shows, comma-separated step numbers (default: each rank's median and slowest)",
    )
    p.add_argument("--width", type=int, default=None, help=argparse.SUPPRESS)


_MODEL_FLAGS = ("params", "layers", "heads", "d_model", "seq_len", "tokens_per_step")


def model_flops_per_step(args: argparse.Namespace) -> float | None:
    """Model FLOP per step from the transformer flags, None when none is given.

    Raises:
        PerfDoctorError: only some of the flags were given, or a size is not positive, or --d-model is not
            divisible by --heads.
    """
    from perfdoctor.cli.numbers import check_finite, flag

    given = {f: getattr(args, f, None) for f in _MODEL_FLAGS}
    if all(v is None for v in given.values()):
        return None
    check_finite(args, ("params", "tokens_per_step"))
    missing = [flag(f) for f, v in given.items() if v is None]
    if missing:
        raise PerfDoctorError(f"the transformer FLOPs estimate also needs {', '.join(missing)}")
    from perfdoctor.analysis.work.mfu import transformer_flops_per_token

    if args.tokens_per_step <= 0:
        raise PerfDoctorError(f"--tokens-per-step must be positive (got {args.tokens_per_step:g})")
    try:
        per_token = transformer_flops_per_token(args.params, args.layers, args.heads, args.d_model, args.seq_len)
    except ValueError as exc:
        raise PerfDoctorError(f"the transformer FLOPs estimate: {exc}") from None
    flops: float = per_token * args.tokens_per_step
    return flops


def _is_own_report(path: str) -> bool:
    """Whether ``path`` is a report or diff JSON that perfdoctor wrote (its top-level ``schema``), not a trace.
    The bytes are scanned for the schema name (fast) before the file is parsed to confirm."""
    import mmap

    import orjson

    if not path.endswith(".json"):
        return False  # we write reports as plain .json
    try:
        with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            if not any(buf.find(f'"{name}"'.encode()) >= 0 for name in OWN_SCHEMAS):
                return False
            doc = orjson.loads(buf[:])
    except (OSError, ValueError):  # empty, unreadable or not JSON: the analysis says what is wrong
        return False
    return isinstance(doc, dict) and doc.get("schema") in OWN_SCHEMAS


def _without_own_reports(paths: list[str]) -> tuple[list[str], list[str]]:
    """``paths`` with each trace directory that holds perfdoctor report or diff JSON files replaced by its
    other files, and a note naming each file left out."""
    from perfdoctor.capture.rundir import is_run_dir
    from perfdoctor.trace import trace_files_in

    kept: list[str] = []
    notes: list[str] = []
    for p in paths:
        if is_run_dir(p) or not os.path.isdir(p):
            kept.append(p)
            continue
        try:
            files = trace_files_in(p)
        except TraceFormatError:  # the analysis raises it again, in its place
            kept.append(p)
            continue
        ours = [f for f in files if _is_own_report(f)]
        notes += [f"{f}: a perfdoctor report, not a trace; left out" for f in ours]
        rest = [f for f in files if f not in ours]
        if ours and not rest:
            raise PerfDoctorError(f"{p}: holds only perfdoctor reports ({ours[0]}), no trace")
        kept += rest if ours else [p]
    return kept, notes


def _refuse_repeated(paths: list[str]) -> None:
    """Refuse a path given twice (``report X X`` read as two ranks of one job, then suggested ``diff X X``).

    Raises:
        PerfDoctorError: two of ``paths`` name the same file or directory.
    """
    seen: dict[str, str] = {}
    for p in paths:
        key = os.path.realpath(p)
        if key in seen:
            raise PerfDoctorError(
                f"{p}: the same file was given twice ({seen[key]} and {p}); give each trace or directory once"
            )
        seen[key] = p


def _executor(args: argparse.Namespace, n_files: int, on_done: OnDone) -> DaskCluster | LocalPool | None:
    """The executor for ``--dask`` / ``--jobs`` (None: this process, one file after another)."""
    from perfdoctor.jobs.executors import DaskCluster, LocalPool

    if args.jobs is not None and args.jobs < 1:
        raise PerfDoctorError(f"--jobs must be at least 1 (got {args.jobs})")
    if args.dask:
        return DaskCluster(args.dask, on_done=on_done)
    jobs = args.jobs if args.jobs is not None else (os.cpu_count() or 1)
    if n_files < 2 or jobs < 2:
        return None
    return LocalPool(jobs, on_done=on_done)


def timeline_steps(text: str | None) -> list[int]:
    """The step numbers of ``--timeline-steps`` ("5,7"); [] when not given (each rank's median and slowest).

    Raises:
        PerfDoctorError: an entry that is not a step number.
    """
    if not text:
        return []
    out = []
    for part in text.split(","):
        if not part.strip().isdigit():
            raise PerfDoctorError(f"--timeline-steps: {part.strip()!r} is not a step number (e.g. 5,7)")
        out.append(int(part))
    return out


@dataclass(frozen=True)
class _BuildOptions:
    """What the command hands :func:`perfdoctor.pipeline.build` besides the paths: the rules, the model FLOP per
    step from the transformer flags (None: FlopCounterMode's, from the run data) and its source, whether summaries
    are cached, and the annotated timeline's steps (None: no timeline)."""

    rules: RuleOptions
    model_flops: ModelFlops | None
    cache: bool
    timeline_steps: list[int] | None
    loaded_run: RunData | None = None


def _build_options(args: argparse.Namespace, rules: RuleOptions) -> _BuildOptions:
    """The build options of ``args``.

    Raises:
        PerfDoctorError: a transformer flag or ``--timeline-steps`` that cannot be used.
    """
    from perfdoctor.analysis.work.mfu import ModelFlops

    flops = model_flops_per_step(args) or None
    return _BuildOptions(
        rules,
        ModelFlops(flops, "transformer_formula") if flops else None,  # the flags' formula, else FlopCounterMode's
        bool(getattr(args, "cache", False)),
        timeline_steps(getattr(args, "timeline_steps", None)) if getattr(args, "timeline", None) else None,
    )


def _build(
    args: argparse.Namespace,
    options: _BuildOptions,
    executor: DaskCluster | LocalPool | None = None,
    on_progress: Callable[[int], None] | None = None,
) -> BuiltReport:
    """pipeline.build; a lone run directory whose trace cannot be read (cut short by a Ctrl-C while it
    was written, corrupt) is reported from its run data, with the reason naming the file as a warning."""
    from perfdoctor import pipeline
    from perfdoctor.capture.rundir import is_run_dir

    def attempt(executor: DaskCluster | LocalPool | None, without_traces: str | None) -> BuiltReport:
        return pipeline.build(
            args.paths,
            step_marker=args.step_marker,
            on_progress=on_progress,
            rule_options=options.rules,
            model_flops=options.model_flops,
            without_traces=without_traces,
            loaded_run=options.loaded_run,
            executor=executor,
            cache=options.cache,
            timeline_steps=options.timeline_steps,
        )

    try:
        return attempt(executor, None)
    except TraceFormatError as exc:
        if not (len(args.paths) == 1 and is_run_dir(args.paths[0])):
            raise
        return attempt(None, f"trace analysis failed: {exc.message}")


def _analyze(args: argparse.Namespace, err: Console, opts: RuleOptions) -> BuiltReport:
    """Load and analyse the inputs, with a progress bar over the input size (one file after another) or over
    the ranks (in parallel) when the inputs are large or many."""
    from rich.progress import BarColumn, DownloadColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from perfdoctor.capture.run_data import load_run_dir
    from perfdoctor.capture.rundir import is_run_dir
    from perfdoctor.trace import trace_files_in

    runs = {p: load_run_dir(p) for p in args.paths if is_run_dir(p)}  # read once, handed to the pipeline
    options = dataclasses.replace(_build_options(args, opts), loaded_run=next(iter(runs.values()), None))
    build = functools.partial(_build, args, options)
    files = [f for p in args.paths for f in ([str(t) for t in runs[p].traces] if p in runs else trace_files_in(p))]
    total = sum(os.path.getsize(f) for f in files if os.path.isfile(f))
    parallel = len(files) > 1 and (args.dask or (args.jobs or os.cpu_count() or 1) > 1)
    if parallel:
        columns = (TextColumn("analysing ranks"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
        with Progress(*columns, console=err, transient=True, disable=not err.is_terminal) as progress:
            task = progress.add_task("ranks", total=len(files))
            executor = _executor(args, len(files), lambda part: progress.advance(task, 1))
            link = getattr(executor, "dashboard_link", "")
            if link:
                err.print(f"Dask dashboard: {link}")
            try:
                built = build(executor=executor)
            finally:
                if executor is not None:
                    executor.close()
            fallback = getattr(executor, "fallback_note", None)
            if fallback:
                err.print(f"note: {fallback}", markup=False, highlight=False, soft_wrap=True)
            return built
    if total < PROGRESS_MIN_BYTES or not err.is_terminal:
        with err.status("reading traces…", spinner="dots"):
            return build()
    columns2 = (TextColumn("reading traces"), BarColumn(), DownloadColumn(), TimeRemainingColumn())
    with Progress(*columns2, console=err, transient=True) as progress:
        task = progress.add_task("read", total=total)
        return build(on_progress=lambda n: progress.advance(task, n))


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from perfdoctor.cli.console import output_width, show_then_exit, stdout_console
    from perfdoctor.render.formats import format_for, render_chunks
    from perfdoctor.render.terminal import render_terminal

    if args.jobs is not None and args.jobs < 1:
        raise PerfDoctorError(f"--jobs must be at least 1 (got {args.jobs})")
    _refuse_repeated(args.paths)
    from perfdoctor.cli.snapshot_cmds import report_snapshot, snapshot_inputs

    if snapshot_inputs(args.paths):  # torch.cuda.memory._dump_snapshot pickles: their own report
        return report_snapshot(args)
    out_format = None
    if args.output is not None:
        check_output(args.output, args.paths, args.force)
        out_format = format_for(args.output)
    if args.timeline is not None:
        check_output(args.timeline, args.paths, args.force)
        timeline_steps(args.timeline_steps)
    elif args.timeline_steps:
        raise PerfDoctorError("--timeline-steps: give --timeline FILE too")
    from perfdoctor.checks import config, engine

    opts = config.resolve(args.select, args.ignore, args.rules, args.fail_on)
    err = Console(stderr=True, width=output_width(None, sys.stderr))
    args.paths, notes = _without_own_reports(args.paths)
    for note in notes:
        err.print(f"note: {note}", markup=False, highlight=False, soft_wrap=True)
    built = _analyze(args, err, opts)
    report = built.model
    if args.output and out_format:  # out_format is set whenever args.output is; written before stdout, which
        write_report(args.output, render_chunks(report, out_format))  # a reader may close (`| head`)
        err.print(f"report written to {args.output}")
    if args.timeline:
        from perfdoctor.render.timeline import write_timeline
        from perfdoctor.timeline.tracks import MISSING_STEPS_NOTE

        timelines = built.timelines()
        write_timeline(args.timeline, report, timelines, force=args.force)
        err.print(f"timeline written to {args.timeline}")
        for tl in timelines:  # a step asked for that a rank did not analyse is left out: say so, not only in the file
            for note in tl.notes:
                if note.startswith(MISSING_STEPS_NOTE):
                    err.print(f"warning: --timeline-steps: rank {tl.rank}: {note}", markup=False, highlight=False)

    def show() -> None:
        if args.format in ("json", "md"):
            for piece in render_chunks(report, args.format):  # a rank at a time: thousands of ranks are ~300 MB
                sys.stdout.buffer.write(piece)
        else:
            render_terminal(report, stdout_console(args.width), err, per_rank=args.per_rank, details=args.details)

    return show_then_exit(show, engine.exit_code(built.checks, opts.fail_on))
