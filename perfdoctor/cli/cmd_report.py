"""``perfdoctor report PATH...``: diagnose Kineto / torch.profiler traces."""

from __future__ import annotations

import argparse
import os
import sys

from perfdoctor.errors import PerfDoctorError

NAME = "report"
HELP = "Diagnose Kineto / torch.profiler traces (files, directories of per-rank traces, or a perfdoctor run directory)."


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("paths", nargs="+", metavar="PATH", help="trace .json/.json.gz, a directory of traces, or a run dir")
    p.add_argument("-o", "--output", metavar="FILE", help="write the report file (format from the extension)")
    p.add_argument("--format", choices=["terminal", "json"], default="terminal",
                   help="what to write to stdout (default: terminal summary)")
    p.add_argument("--step-marker", metavar="REGEX", help="annotation regex marking steps (default ProfilerStep#N)")
    p.add_argument("--force", action="store_true", help="overwrite an existing output file")
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


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from perfdoctor import pipeline
    from perfdoctor.render.json_out import render_json
    from perfdoctor.render.terminal import render_terminal

    if args.output:
        _check_output(args.output, args.paths, args.force)
    err = Console(stderr=True)
    with err.status("reading traces…", spinner="dots"):
        analysis = pipeline.analyze_paths(args.paths, step_marker=args.step_marker)
        report = pipeline.report_dict(analysis)
    if args.format == "json":
        sys.stdout.buffer.write(render_json(report))
        sys.stdout.flush()
    else:
        render_terminal(report, Console(width=args.width) if args.width else Console())
    if args.output:
        data = render_json(report)
        tmp = args.output + ".tmp"
        with open(tmp, "wb") as fh:
            fh.write(data)
        os.replace(tmp, args.output)
        if args.format != "json":
            Console().print(f"report written to {args.output}")
    return 0
