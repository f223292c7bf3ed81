"""Command-line interface: argument parsing only; the one place that prints or exits.

Each subcommand lives in its own module exposing ``NAME``, ``HELP``,
``add_arguments(parser)`` and ``run(args) -> int``; add it to ``COMMANDS``.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from types import ModuleType

from perfdoctor import __version__
from perfdoctor.errors import PerfDoctorError

# module names under perfdoctor.cli, in the order `perfdoctor --help` lists them
COMMANDS = ["report", "diff", "profile", "rules", "rule", "calibrate", "budget"]


def _available_commands() -> list[ModuleType]:
    mods = []
    for name in COMMANDS:
        try:
            mods.append(importlib.import_module(f"perfdoctor.cli.cmd_{name}"))
        except ModuleNotFoundError as exc:
            if exc.name != f"perfdoctor.cli.cmd_{name}":
                raise
    return mods


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="perfdoctor",
        description="Profiler-driven diagnosis of PyTorch training performance.",
    )
    parser.add_argument("--version", action="version", version=f"perfdoctor {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for mod in _available_commands():
        # argparse %-formats a subcommand's help in `perfdoctor --help`: a literal % ("95% interval") must be doubled
        p = sub.add_parser(mod.NAME, help=mod.HELP.replace("%", "%%"), description=mod.HELP)
        mod.add_arguments(p)
        p.set_defaults(_run=mod.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``perfdoctor`` console script; returns the exit code.

    Exit codes: 0 success, 1 a finding at or above ``--fail-on``, 2 bad input
    or usage (one clear line on stderr, never a traceback), 130 interrupted.
    """
    try:
        parser = build_parser()  # imports every subcommand: a Ctrl-C this early is an interruption too
        args = parser.parse_args(argv)
        if not getattr(args, "_run", None):
            parser.print_help(sys.stderr)
            return 2
        return int(args._run(args) or 0)
    except PerfDoctorError as exc:
        print(f"perfdoctor: error: {exc.message}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("perfdoctor: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader of our stdout went away (`perfdoctor report X | head`)
        from perfdoctor.cli.console import silence_stdout

        silence_stdout()
        return 0
    except OSError as exc:  # the environment, not the input: a full disk, a file we may not write
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"perfdoctor: error: {where}{exc.strerror or exc}", file=sys.stderr)
        return 2
