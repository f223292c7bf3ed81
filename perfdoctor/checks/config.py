"""Options of the rule engine from ``[tool.perfdoctor]`` in pyproject.toml and the command line.

Keys (the command line's option names, ``-`` or ``_``): ``select``, ``ignore``
(lists of codes, prefixes or names), ``rules`` (a directory or a list of
directories of user TOML rules, relative to the pyproject.toml), ``fail-on``
(``low``/``medium``/``high``). A command-line option replaces the key.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from perfdoctor.errors import PerfDoctorError
from perfdoctor.findings import SEVERITIES

KEYS = ("select", "ignore", "rules", "fail-on")


@dataclass
class RuleOptions:
    """Resolved engine options; ``source`` names where each came from (for error messages)."""

    select: list[str] | None = None
    ignore: list[str] = field(default_factory=list)
    rules_dirs: list[str] = field(default_factory=list)
    fail_on: str | None = None
    source: dict[str, str] = field(default_factory=dict)


def find_pyproject(start: str | Path | None = None) -> Path | None:
    """The nearest pyproject.toml at or above ``start`` (default: the working directory)."""
    here = Path(start or Path.cwd()).resolve()
    for d in (here, *here.parents):
        p = d / "pyproject.toml"
        if p.is_file():
            return p
    return None


def _split(value: object, where: str) -> list[str]:
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return [v.strip() for v in value if v.strip()]
    raise PerfDoctorError(f"{where}: must be a string or a list of strings")


def load_pyproject(path: Path) -> RuleOptions:
    """Options from ``[tool.perfdoctor]`` of one pyproject.toml (empty when the table is absent).

    Raises:
        PerfDoctorError: invalid TOML, an unknown key or a bad value (names the file and key).
    """
    try:
        data = tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, OSError, UnicodeDecodeError) as exc:
        raise PerfDoctorError(f"{path}: cannot read [tool.perfdoctor] ({exc})") from None
    table = data.get("tool", {}).get("perfdoctor")
    opts = RuleOptions()
    if table is None:
        return opts
    if not isinstance(table, dict):
        raise PerfDoctorError(f"{path}: [tool.perfdoctor] must be a table")
    for key, value in table.items():
        norm = key.replace("_", "-")
        where = f"{path}: tool.perfdoctor.{key}"
        if norm not in KEYS:
            raise PerfDoctorError(f"{path}: unknown key tool.perfdoctor.{key} (known: {', '.join(KEYS)})")
        if norm == "select":
            opts.select = _split(value, where)
        elif norm == "ignore":
            opts.ignore = _split(value, where)
        elif norm == "rules":
            opts.rules_dirs = [str((path.parent / d).resolve()) for d in _split(value, where)]
        else:
            if value not in SEVERITIES:
                raise PerfDoctorError(f"{where}: {value!r} is not one of {', '.join(SEVERITIES)}")
            opts.fail_on = value
        opts.source[norm] = where
    return opts


def resolve(
    select: str | None = None,
    ignore: str | None = None,
    rules: list[str] | None = None,
    fail_on: str | None = None,
    pyproject: Path | None | bool = None,
) -> RuleOptions:
    """Merge ``[tool.perfdoctor]`` (found from the working directory unless ``pyproject`` is given,
    or skipped when it is False) with command-line values, which win."""
    path = find_pyproject() if pyproject is None or pyproject is True else (pyproject or None)
    opts = load_pyproject(path) if path else RuleOptions()
    if select is not None:
        opts.select = _split(select, "--select")
        opts.source["select"] = "--select"
    if ignore is not None:
        opts.ignore = _split(ignore, "--ignore")
        opts.source["ignore"] = "--ignore"
    if rules:
        opts.rules_dirs = list(rules)
        opts.source["rules"] = "--rules"
    if fail_on is not None:
        opts.fail_on = fail_on
    return opts
