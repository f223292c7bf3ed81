"""``perfdoctor diff BEFORE AFTER``: did the change make training faster, by how much, why, and did the fix save
what was predicted."""

from __future__ import annotations

import argparse
import sys

NAME = "diff"
HELP = (
    "Compare two runs (traces, per-rank directories, run directories or report JSON files): verdict with a 95% "
    "interval, where the time moved, top movers, findings resolved/new, predicted vs measured savings."
)

DIFF_FORMATS = {".html": "html", ".htm": "html", ".md": "md", ".markdown": "md", ".json": "json"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("before", metavar="BEFORE", help="trace, directory of per-rank traces, run dir, or report JSON")
    p.add_argument("after", metavar="AFTER", help="the same kinds of input as BEFORE")
    p.add_argument("-o", "--output", metavar="FILE", help="write the diff: .html, .md or .json (from the extension)")
    p.add_argument(
        "--format",
        choices=["terminal", "json", "md"],
        default="terminal",
        help="what to write to stdout (default: terminal summary)",
    )
    p.add_argument(
        "--fail-on-regression",
        type=float,
        metavar="PCT",
        default=None,
        help="exit 1 when AFTER is slower by more than PCT %% and the 95%% interval excludes 0 (for CI)",
    )
    p.add_argument(
        "--noise-pct",
        type=float,
        metavar="PCT",
        default=None,
        help="changes smaller than this are 'no significant change' (default 2)",
    )
    p.add_argument(
        "--run-noise-pct",
        type=float,
        metavar="PCT",
        default=None,
        help=(
            "this machine's run-to-run noise: the standard deviation (%%) of the change between two runs of the "
            "same code (default: 14.6 for CPU runs, measured on a shared 2-core machine; 0 for GPU runs)"
        ),
    )
    p.add_argument("--select", metavar="CODES", help="rules to run on both sides (codes, prefixes or names)")
    p.add_argument("--ignore", metavar="CODES", help="rules to leave out on both sides")
    p.add_argument("--rules", action="append", metavar="DIR", help="load user TOML rules from DIR (repeatable)")
    p.add_argument("--step-marker", metavar="REGEX", help="annotation regex marking steps (default ProfilerStep#N)")
    p.add_argument("--force", action="store_true", help="overwrite an existing output file")
    p.add_argument("--width", type=int, default=None, help=argparse.SUPPRESS)


def _render(diff: object, fmt: str) -> bytes:
    from perfdoctor.diff.model import Diff

    assert isinstance(diff, Diff)
    if fmt == "json":
        return diff.to_json()
    if fmt == "md":
        from perfdoctor.render.diff_markdown import render_diff_markdown

        return render_diff_markdown(diff).encode()
    from perfdoctor.render.diff_html import render_diff_html

    return render_diff_html(diff).encode()


def run(args: argparse.Namespace) -> int:
    import os

    from rich.console import Console

    from perfdoctor.checks import config, engine
    from perfdoctor.cli.cmd_report import _check_output, _write_report
    from perfdoctor.cli.console import show_then_exit, stdout_console
    from perfdoctor.diff import stats
    from perfdoctor.diff.compare import compare, regression
    from perfdoctor.diff.sides import load_side
    from perfdoctor.diff.stats import signed_pct
    from perfdoctor.errors import PerfDoctorError
    from perfdoctor.render.diff_terminal import render_diff_terminal

    out_format = None
    if args.output is not None:
        _check_output(args.output, [args.before, args.after], args.force)
        out_format = DIFF_FORMATS.get(os.path.splitext(args.output)[1].lower())
        if out_format is None:
            raise PerfDoctorError(
                f"{args.output}: cannot tell the diff format from the extension; use .html, .md or .json"
            )
    if args.fail_on_regression is not None and args.fail_on_regression < 0:
        raise PerfDoctorError(f"--fail-on-regression must be ≥ 0 (got {args.fail_on_regression:g})")
    noise = stats.DEFAULT_NOISE_PCT if args.noise_pct is None else args.noise_pct
    if noise < 0:
        raise PerfDoctorError(f"--noise-pct must be ≥ 0 (got {noise:g})")
    if args.run_noise_pct is not None and not 0 <= args.run_noise_pct < 100:
        raise PerfDoctorError(f"--run-noise-pct must be in [0, 100) (got {args.run_noise_pct:g})")
    opts = config.resolve(args.select, args.ignore, args.rules)
    _, codes = engine.prepare(opts)
    err = Console(stderr=True)
    with err.status("reading both sides…", spinner="dots"):
        before = load_side(args.before, opts, codes, args.step_marker)
        after = load_side(args.after, opts, codes, args.step_marker)
    diff = compare(before, after, noise, args.run_noise_pct)
    if args.output and out_format:  # written before stdout, which a reader may close (`| head`)
        _write_report(args.output, _render(diff, out_format))
        err.print(f"diff written to {args.output}")

    def show() -> None:
        if args.format in ("json", "md"):
            sys.stdout.buffer.write(_render(diff, args.format))
        else:
            render_diff_terminal(diff, stdout_console(args.width))

    failed = args.fail_on_regression is not None and regression(diff, args.fail_on_regression)
    code = show_then_exit(show, 1 if failed else 0)
    if failed:
        err.print(
            f"regression: AFTER is {signed_pct(diff.change_pct)} slower (95% CI excludes 0), beyond "
            f"--fail-on-regression {args.fail_on_regression:g}%"
        )
    return code
