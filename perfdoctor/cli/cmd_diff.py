"""``perfdoctor diff BEFORE AFTER``: did the change make training faster, by how much, why, and did the fix save
what was predicted. Several runs a side: ``perfdoctor diff B1 B2 B3 --vs A1 A2 A3``, or two directories of runs."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console

    from perfdoctor.diff.model import Diff
    from perfdoctor.diff.sides import Side

NAME = "diff"
HELP = (
    "Compare two runs (traces, per-rank directories, run directories or report JSON files), or several runs per "
    "side (B1 B2 B3 --vs A1 A2 A3, or two directories of run directories: the run-to-run noise is then measured): "
    "verdict with a 95% interval, where the time moved, top movers, findings resolved/new, predicted vs measured "
    "savings."
)
USAGE = (
    "perfdoctor diff [options] BEFORE AFTER\n"
    "       perfdoctor diff [options] BEFORE [BEFORE ...] --vs AFTER [AFTER ...]"
)

DIFF_FORMATS = {".html": "html", ".htm": "html", ".md": "md", ".markdown": "md", ".json": "json"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.usage = USAGE
    _add_sides(p)
    _add_gate(p)
    _add_work(p)
    _add_rules(p)


def _add_sides(p: argparse.ArgumentParser) -> None:
    """The two sides' paths and where the diff goes."""
    p.add_argument(
        "paths",
        nargs="+",
        metavar="BEFORE",
        help=(
            "a trace, directory of per-rank traces, run dir, report JSON, or a directory of run dirs (its runs); "
            "without --vs exactly two: BEFORE AFTER"
        ),
    )
    p.add_argument(
        "--vs",
        nargs="+",
        metavar="AFTER",
        default=None,
        help=(
            "the AFTER side's runs (every path up to the next option); the paths before --vs are BEFORE's runs. "
            "With 2 or more runs on a side the run-to-run noise is measured from them"
        ),
    )
    p.add_argument("-o", "--output", metavar="FILE", help="write the diff: .html, .md or .json (from the extension)")
    p.add_argument(
        "--format",
        choices=["terminal", "json", "md"],
        default="terminal",
        help="what to write to stdout (default: terminal summary)",
    )


def _add_gate(p: argparse.ArgumentParser) -> None:
    """The verdict's thresholds: the CI gate and the noise."""
    p.add_argument(
        "--fail-on-regression",
        type=float,
        metavar="PCT",
        default=None,
        help=(
            "exit 1 when AFTER is slower by more than PCT %% and the 95%% interval excludes 0 (per token or sample "
            "when the work per step differs), or when a side is a partial run (it crashed or was interrupted) (for CI)"
        ),
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


def _add_work(p: argparse.ArgumentParser) -> None:
    """The work per step of each side, overriding run.json and the traces."""
    p.add_argument(
        "--samples-per-step",
        metavar="A,B",
        default=None,
        help=(
            "samples per step of one rank, BEFORE,AFTER (default: run.json's, else the trace's input shape); when "
            "the work per step differs, the verdict is per sample"
        ),
    )
    p.add_argument(
        "--tokens-per-step",
        metavar="A,B",
        default=None,
        help=(
            "tokens per step of one rank, BEFORE,AFTER (default: run.json's, else the trace's input shape); when "
            "the work per step differs, the verdict is per token"
        ),
    )


def _add_rules(p: argparse.ArgumentParser) -> None:
    """The rules both sides run, the step marker, and the writing options."""
    p.add_argument("--select", metavar="CODES", help="findings to compare on both sides (codes, prefixes or names)")
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


def _output_format(args: argparse.Namespace, runs: list[str]) -> str | None:
    """The format of ``-o`` from its extension ("html", "md", "json"; None without ``-o``), after checking that
    the file may be written (:func:`perfdoctor.cli.output.check_output`).

    Raises:
        PerfDoctorError: the extension is not .html/.htm, .md/.markdown or .json, or the file may not be written.
    """
    import os

    from perfdoctor.cli.output import check_output
    from perfdoctor.errors import PerfDoctorError

    if args.output is None:
        return None
    check_output(args.output, runs, args.force)
    out_format = DIFF_FORMATS.get(os.path.splitext(args.output)[1].lower())
    if out_format is None:
        raise PerfDoctorError(f"{args.output}: cannot tell the diff format from the extension; use .html, .md or .json")
    return out_format


def _noise_pct(args: argparse.Namespace) -> float:
    """The noise threshold (%) after checking the numeric options (finite, ``--fail-on-regression`` ≥ 0,
    ``--noise-pct`` ≥ 0, ``--run-noise-pct`` in [0, 100)).

    Raises:
        PerfDoctorError: an option out of its range.
    """
    from perfdoctor.cli.numbers import check_finite
    from perfdoctor.diff import stats
    from perfdoctor.errors import PerfDoctorError

    check_finite(args, ("fail_on_regression", "noise_pct", "run_noise_pct"))
    if args.fail_on_regression is not None and args.fail_on_regression < 0:
        raise PerfDoctorError(f"--fail-on-regression must be ≥ 0 (got {args.fail_on_regression:g})")
    noise: float = stats.DEFAULT_NOISE_PCT if args.noise_pct is None else args.noise_pct
    if noise < 0:
        raise PerfDoctorError(f"--noise-pct must be ≥ 0 (got {noise:g})")
    if args.run_noise_pct is not None and not 0 <= args.run_noise_pct < 100:
        raise PerfDoctorError(f"--run-noise-pct must be in [0, 100) (got {args.run_noise_pct:g})")
    return noise


def _load_sides(
    args: argparse.Namespace, runs: tuple[list[str], list[str]], err: Console
) -> tuple[list[Side], list[Side]]:
    """Both sides' runs loaded with the rules of ``--select``/``--ignore``/``--rules``, showing the findings both
    sides show (a kept report JSON holds every rule's)."""
    from perfdoctor.checks import config, engine
    from perfdoctor.diff.sides import load_side

    opts = config.resolve(args.select, args.ignore, args.rules)
    cat, _ = engine.prepare(opts)
    codes = engine.shown_codes(cat, opts)
    with err.status("reading both sides…", spinner="dots"):
        before = [load_side(p, opts, codes, args.step_marker) for p in runs[0]]
        after = [load_side(p, opts, codes, args.step_marker) for p in runs[1]]
    return before, after


def _gate_lines(diff: Diff, limit_pct: float, failed: bool, refused: str | None) -> list[str]:
    """What the regression gate (``--fail-on-regression limit_pct``) says on stderr: why it was not passed (a
    partial side), that it could not judge, or the regression per unit of work or per step."""
    from perfdoctor.diff.stats import signed_pct

    lines = [f"regression gate not passed: {refused}"] if refused and not failed else []
    if diff.work.basis == "cannot-tell":
        lines.append(f"regression gate could not judge: {diff.work.reason}")
    if failed and diff.work.unit is not None:
        w = diff.work
        lines.append(
            f"regression: AFTER is {signed_pct(w.change_pct)} slower per {w.unit} ({w.unit}s/s "
            f"{signed_pct(w.throughput_change_pct)}; 95% CI of the time per {w.unit} excludes 0), beyond "
            f"--fail-on-regression {limit_pct:g}%"
        )
    elif failed:
        st = diff.statistics
        basis = (
            f"; run-to-run noise measured from {int(st.runs.before or 0)} + {int(st.runs.after or 0)} runs: "
            f"{st.run_noise_pct:.1f}%"
            if st.run_noise_measured
            else ""
        )
        lines.append(
            f"regression: AFTER is {signed_pct(diff.change_pct)} slower (95% CI excludes 0{basis}), beyond "
            f"--fail-on-regression {limit_pct:g}%"
        )
    return lines


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from perfdoctor.cli.console import output_width, show_then_exit, stdout_console
    from perfdoctor.cli.output import write_report
    from perfdoctor.cli.snapshot_cmds import diff_snapshots, snapshot_inputs
    from perfdoctor.diff.compare import compare, partial_gate, regression
    from perfdoctor.diff.sides import expand
    from perfdoctor.diff.work import parse_pair
    from perfdoctor.render.diff_terminal import render_diff_terminal

    if snapshot_inputs(args.paths + (args.vs or [])):  # two memory snapshots: peaks and call sites compared
        return diff_snapshots(args)
    before_paths, after_paths = _sides(args.paths, args.vs)
    before_runs, after_runs = expand(before_paths, "BEFORE"), expand(after_paths, "AFTER")
    out_format = _output_format(args, [*before_runs, *after_runs])
    noise = _noise_pct(args)
    samples = parse_pair(args.samples_per_step, "--samples-per-step")
    tokens = parse_pair(args.tokens_per_step, "--tokens-per-step")
    err = Console(stderr=True, width=output_width(None, sys.stderr))
    before, after = _load_sides(args, (before_runs, after_runs), err)
    diff = compare(before, after, noise, args.run_noise_pct, samples, tokens)
    if args.output and out_format:  # written before stdout, which a reader may close (`| head`)
        write_report(args.output, _render(diff, out_format))
        err.print(f"diff written to {args.output}")

    def show() -> None:
        if args.format in ("json", "md"):
            sys.stdout.buffer.write(_render(diff, args.format))
        else:
            render_diff_terminal(diff, stdout_console(args.width))

    if args.fail_on_regression is None:
        return show_then_exit(show, 0)
    failed = regression(diff, args.fail_on_regression)
    refused = partial_gate(diff)
    code = show_then_exit(show, 1 if failed or refused else 0)
    for line in _gate_lines(diff, args.fail_on_regression, failed, refused):
        err.print(line, highlight=False)
    return code


def _sides(paths: list[str], vs: list[str] | None) -> tuple[list[str], list[str]]:
    """(BEFORE's paths, AFTER's paths): ``BEFORE AFTER``, or every path before ``--vs`` against those after it.

    Raises:
        PerfDoctorError: without ``--vs``, other than two paths.
    """
    from perfdoctor.errors import PerfDoctorError

    if vs is not None:
        return paths, vs
    if len(paths) != 2:
        raise PerfDoctorError(
            f"diff takes BEFORE AFTER, or several runs a side as BEFORE1 BEFORE2 ... --vs AFTER1 AFTER2 ... "
            f"(got {len(paths)} paths and no --vs)"
        )
    return paths[:1], paths[1:]
