"""The house rules that keep the package small enough to live in, checked over its source (no import, no run).

- No production function exists only for the tests: every function, class and method defined in ``perfdoctor/`` is
  named somewhere in the product (the package, ``benchmarks/``, ``examples/``, ``rules/``, ``pyproject.toml``)
  besides its own definition, or nowhere in ``tests/`` either (then it is dead code, caught by the same count).
- Size: at most :data:`MAX_LONG_FUNCTIONS` functions over :data:`LONG_LINES` lines; at most :data:`MAX_ANY` uses of
  ``typing.Any``; at most :data:`MAX_CHECK_GETATTR` ``getattr``/``hasattr`` calls in ``perfdoctor/checks`` (a
  check that probes an object's attributes is asking what kind of object it holds: its type should say).

Names are matched as whole words, so a name used through ``getattr(module, "check")`` or a CLI entry point still
counts as used; dunder methods and the rule modules' ``check`` entry point are exempt.
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path

from conftest import REPO

PKG = REPO / "perfdoctor"
LONG_LINES = 60
MAX_LONG_FUNCTIONS = 10
MAX_ANY = 150
MAX_CHECK_GETATTR = 10


def _sources(root: Path, pattern: str = "*.py") -> dict[Path, str]:
    return {p: p.read_text() for p in sorted(root.rglob(pattern)) if "__pycache__" not in p.parts}


def _trees() -> dict[Path, ast.Module]:
    return {p: ast.parse(text) for p, text in _sources(PKG).items()}


def _defined(tree: ast.Module) -> list[str]:
    """Top-level functions and classes, and the methods of top-level classes (dunders excepted)."""
    names: list[str] = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(node.name)
        if isinstance(node, ast.ClassDef):
            names += [
                m.name
                for m in node.body
                if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef)) and not m.name.startswith("__")
            ]
    return [n for n in names if n != "check"]


def test_no_function_exists_only_for_the_tests() -> None:
    product = [*_sources(PKG).values(), *_sources(REPO / "benchmarks").values()]
    product += [*_sources(REPO / "examples").values(), *_sources(REPO / "rules", "*.toml").values()]
    product.append((REPO / "pyproject.toml").read_text())
    words = Counter(w for text in product for w in re.findall(r"\w+", text))
    tests = Counter(w for text in _sources(REPO / "tests").values() for w in re.findall(r"\w+", text))
    defined = Counter(n for tree in _trees().values() for n in _defined(tree))
    test_only = sorted(
        f"{p.relative_to(REPO)}: {n}"
        for p, tree in _trees().items()
        for n in _defined(tree)
        if words[n] <= defined[n] and tests[n] > 0
    )
    assert test_only == [], "defined in the package, named only by tests (delete, or use it in the product)"


def _long_functions() -> list[str]:
    return sorted(
        f"{p.relative_to(REPO)}:{n.name} ({n.end_lineno - n.lineno + 1} lines)"
        for p, tree in _trees().items()
        for n in ast.walk(tree)
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
        and n.end_lineno is not None
        and n.end_lineno - n.lineno + 1 > LONG_LINES
    )


def test_few_long_functions() -> None:
    long = _long_functions()
    assert len(long) <= MAX_LONG_FUNCTIONS, "\n".join(long)


def test_any_is_rare() -> None:
    uses = Counter(
        str(p.relative_to(REPO))
        for p, tree in _trees().items()
        for n in ast.walk(tree)
        if (isinstance(n, ast.Name) and n.id == "Any") or (isinstance(n, ast.Attribute) and n.attr == "Any")
    )
    assert sum(uses.values()) <= MAX_ANY, uses.most_common(15)


def test_checks_do_not_probe_attributes() -> None:
    calls = Counter(
        str(p.relative_to(REPO))
        for p, tree in _trees().items()
        if p.is_relative_to(PKG / "checks")
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in ("getattr", "hasattr")
    )
    assert sum(calls.values()) <= MAX_CHECK_GETATTR, calls.most_common()
