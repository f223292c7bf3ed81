"""``perfdoctor report PATH...``: diagnose Kineto / torch.profiler traces."""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

from perfdoctor.errors import PerfDoctorError

if TYPE_CHECKING:
    from rich.console import Console

    from perfdoctor.pipeline import Analysis

NAME = "report"
HELP = "Diagnose Kineto / torch.profiler traces (files, directories of per-rank traces, or a perfdoctor run directory)."


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("paths", nargs="+", metavar="PATH", help="trace .json/.json.gz, a directory of traces, or a run dir")
    p.add_argument("-o", "--output", metavar="FILE",
                   help="write the report file; the format comes from the extension: .html, .md or .json")
    p.add_argument("--format", choices=["terminal", "json", "md"], default="terminal",
                   help="what to write to stdout (default: terminal summary)")
    p.add_argument("--step-marker", metavar="REGEX", help="annotation regex marking steps (default ProfilerStep#N)")
    p.add_argument("--force", action="store_true", help="overwrite an existing output file")
    p.add_argument("--select", metavar="CODES", help="rules to run: codes, prefixes (PD3) or names, comma-separated")
    p.add_argument("--ignore", metavar="CODES", help="rules to leave out (same forms as --select)")
    p.add_argument("--rules", action="append", metavar="DIR", help="load user TOML rules from DIR (repeatable)")
    p.add_argument("--fail-on", choices=["low", "medium", "high"], default=None,
                   help="exit with status 1 when a finding at or above this severity exists (for CI)")
    p.add_argument("--width", type=int, default=None, help=argparse.SUPPRESS)


def _check_output(path: str, inputs: list[str], force: bool) -> None:
    out = os.path.abspath(path)
    for p in inputs:
        if os.path.abspath(p) == out:
            raise PerfDoctorError(f"{path}: refusing to write the report over an input trace")
    if os.path.exists(out) and not force:
        raise PerfDoctorError(f"{path}: already exists; use --force to overwrite")
    parent = os.path.dirname(out) or "."
    if not os.path.isdir(parent):
        raise PerfDoctorError(f"{path}: directory {parent} does not exist")


PROGRESS_MIN_BYTES = 8 << 20  # inputs smaller than this load too fast for a progress bar


def _analyze(args: argparse.Namespace, err: Console) -> Analysis:
    """Load and analyse the inputs, with a progress bar over the total input size when it is large."""
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

    from perfdoctor import pipeline
    from perfdoctor.trace import trace_files_in

    total = sum(os.path.getsize(f) for p in args.paths for f in trace_files_in(p) if os.path.isfile(f))
    if total < PROGRESS_MIN_BYTES or not err.is_terminal:
        with err.status("reading traces…", spinner="dots"):
            return pipeline.analyze_paths(args.paths, step_marker=args.step_marker)
    columns = (TextColumn("reading traces"), BarColumn(), DownloadColumn(), TimeRemainingColumn())
    with Progress(*columns, console=err, transient=True) as progress:
        task = progress.add_task("read", total=total)
        return pipeline.analyze_paths(args.paths, step_marker=args.step_marker,
                                      on_progress=lambda n: progress.advance(task, n))


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from perfdoctor import pipeline
    from perfdoctor.render.formats import format_for, render_bytes
    from perfdoctor.render.terminal import render_terminal

    out_format = None
    if args.output:
        out_format = format_for(args.output)
        _check_output(args.output, args.paths, args.force)
    from perfdoctor.checks import config, engine

    opts = config.resolve(args.select, args.ignore, args.rules, args.fail_on)
    catalogue, codes = engine.prepare(opts)
    err = Console(stderr=True)
    analysis = _analyze(args, err)
    results = engine.run_checks(analysis, catalogue, codes)
    analysis.extras.update(results.to_report())
    report = pipeline.report_dict(analysis)
    if args.format in ("json", "md"):
        sys.stdout.buffer.write(render_bytes(report, args.format))
        sys.stdout.flush()
    else:
        render_terminal(report, Console(width=args.width) if args.width else Console())
    if args.output:
        data = render_bytes(report, out_format)
        tmp = args.output + ".tmp"
        with open(tmp, "wb") as fh:
            fh.write(data)
        os.replace(tmp, args.output)
        err.print(f"report written to {args.output}")
    return engine.exit_code(results, opts.fail_on)
