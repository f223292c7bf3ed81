"""``perfdoctor rules``: list the rule catalogue."""

from __future__ import annotations

import argparse
import sys

NAME = "rules"
HELP = "List the diagnosis rules (code, name, category, default severity)."


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rules", action="append", metavar="DIR", help="also load the user rules in DIR (repeatable)")
    p.add_argument("--select", metavar="CODES", help="only these codes / prefixes / names (comma-separated)")
    p.add_argument("--ignore", metavar="CODES", help="leave out these codes / prefixes / names")
    p.add_argument("--format", choices=["terminal", "json"], default="terminal")
    p.add_argument("--width", type=int, default=None, help=argparse.SUPPRESS)


def run(args: argparse.Namespace) -> int:
    import orjson
    from rich import box
    from rich.markup import escape
    from rich.padding import Padding
    from rich.table import Table
    from rich.text import Text

    from perfdoctor.checks import config, contract, engine
    from perfdoctor.checks.catalogue import load_catalogue
    from perfdoctor.cli.console import stdout_console

    opts = config.resolve(args.select, args.ignore, args.rules)
    cat = load_catalogue(opts.rules_dirs)
    contract.validate(cat, engine.check_modules())  # a rule whose TOML does not fit its check: one line
    codes = engine.select_codes(
        cat, opts.select, opts.ignore, opts.source.get("select", "--select"), opts.source.get("ignore", "--ignore")
    )
    implemented = engine.check_modules()
    rules = [cat.rules[c] for c in codes]
    if args.format == "json":
        listing = [{**r.to_dict(), "implemented": r.code in implemented or r.when is not None} for r in rules]
        sys.stdout.buffer.write(orjson.dumps(listing, option=orjson.OPT_INDENT_2) + b"\n")
        return 0
    console = stdout_console(args.width)
    rows: list[tuple[str, str, str, str, str]] = []
    for r in rules:
        note = "" if (r.code in implemented or r.when is not None) else " (no check yet)"
        user = "" if r.builtin else " [user]"
        rows.append((r.code, r.name + user, r.category, r.severity, r.summary.split(". ")[0].rstrip(".") + note))
    if console.width < 120:  # a narrow terminal: one block per rule, the summary wrapped under its name
        console.print(f"perfdoctor rules ({len(rules)})\n", markup=False)
        for code, name, category, severity, detects in rows:
            console.print(f"[bold]{code}[/bold]  {escape(name)}  [dim]({severity}, {category})[/dim]")
            console.print(Padding(Text(detects), (0, 0, 1, 7)))
        console.print("`perfdoctor rule CODE` explains one rule.", markup=False)
        return 0
    table = Table(title=f"perfdoctor rules ({len(rules)})", title_justify="left", box=box.SIMPLE_HEAD)
    for col in ("code", "name", "category", "severity"):
        table.add_column(col, no_wrap=True)
    table.add_column("detects", ratio=1)
    for row in rows:
        table.add_row(*row)
    console.print(table)
    console.print("`perfdoctor rule CODE` explains one rule.")
    return 0
