"""``perfdoctor rule CODE``: explain one rule (its TOML half, thresholds and metrics)."""

from __future__ import annotations

import argparse
import sys

from perfdoctor.errors import PerfDoctorError

NAME = "rule"
HELP = "Explain one diagnosis rule: what it detects, why it costs time, the fix, an example."


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("code", metavar="CODE", help="rule code (PD101) or name (dataloader-starvation)")
    p.add_argument("--rules", action="append", metavar="DIR", help="also load the user rules in DIR (repeatable)")
    p.add_argument("--format", choices=["terminal", "json"], default="terminal")
    p.add_argument("--width", type=int, default=None, help=argparse.SUPPRESS)


def run(args: argparse.Namespace) -> int:
    import orjson

    from perfdoctor.checks import config, contract, engine
    from perfdoctor.checks.catalogue import load_catalogue
    from perfdoctor.cli.console import stdout_console
    from perfdoctor.render.rules_text import rule_text

    opts = config.resolve(rules=args.rules)
    cat = load_catalogue(opts.rules_dirs)
    contract.validate(cat, engine.check_modules())  # a rule whose TOML does not fit its check: one line
    spec = cat.get(args.code)
    if spec is None:
        raise PerfDoctorError(f"rule {args.code!r}: no such code or name (see `perfdoctor rules`)")
    mod = engine.check_modules().get(spec.code)
    metrics = dict(getattr(mod, "METRICS", {})) if mod else {}
    if args.format == "json":
        sys.stdout.buffer.write(
            orjson.dumps({**spec.to_dict(), "metrics": metrics}, option=orjson.OPT_INDENT_2) + b"\n"
        )
        return 0
    console = stdout_console(args.width)
    console.print(rule_text(spec, metrics, implemented=mod is not None or spec.when is not None))
    return 0
