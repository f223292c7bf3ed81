"""Every rule has its own test file, tests/rules/test_pdNNN.py, with a firing and a silent case (issue 9 item 4).

A test named ``test_pdNNN_fires...`` shows the rule firing on a trace whose numbers are worked out by hand, and
``test_pdNNN_silent...`` shows it quiet on a healthy one. ``NOT_YET_SPLIT`` names the rules whose cases still
live in a shared file (run end to end on real example scripts, or in another issue's file); it only shrinks.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from perfdoctor.checks import engine
from perfdoctor.checks.catalogue import load_catalogue

RULE_TESTS = Path(__file__).resolve().parent / "rules"
NOT_YET_SPLIT: dict[str, str] = {}  # every rule has its file now
BUILTIN = sorted(load_catalogue().rules)


def _test_names(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    return [n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")]


@pytest.mark.parametrize("code", BUILTIN)
def test_rule_has_one_test_file_with_a_firing_and_a_silent_case(code):
    path = RULE_TESTS / f"test_{code.lower()}.py"
    if code in NOT_YET_SPLIT:
        assert not path.exists(), f"{path.name} exists now: take {code} off NOT_YET_SPLIT"
        return
    assert path.exists(), f"{code} has no {path} (python -m perfdoctor.tools.new_rule writes the skeleton)"
    names = _test_names(path)
    prefix = f"test_{code.lower()}_"
    assert any(n.startswith(prefix + "fires") for n in names), f"{path.name}: no {prefix}fires... test"
    assert any(n.startswith(prefix + "silent") for n in names), f"{path.name}: no {prefix}silent... test"


def test_rule_test_files_name_rules_that_exist():
    files = sorted(p.stem.removeprefix("test_").upper() for p in RULE_TESTS.glob("test_pd*.py"))
    assert set(files) <= set(BUILTIN)
    assert set(NOT_YET_SPLIT) <= set(BUILTIN)


def todo_lines(path: Path) -> list[int]:
    """Line numbers (1-based) of ``path`` that still hold the scaffold's ``TODO``."""
    return [i for i, line in enumerate(path.read_text().splitlines(), 1) if "TODO" in line]


@pytest.mark.parametrize("code", BUILTIN)
def test_rule_has_no_todo_left(code):
    # python -m perfdoctor.tools.new_rule writes TODO where the author's words and numbers go: a rule ships
    # without one, in its TOML, its check module and its test file
    modules = engine.check_modules()
    paths = [Path(load_catalogue().rules[code].path), RULE_TESTS / f"test_{code.lower()}.py"]
    if code in modules:
        paths.append(Path(str(modules[code].__file__)))
    left = {p.name: todo_lines(p) for p in paths if p.exists() and todo_lines(p)}
    assert not left, f"{code} still has TODO at {left} (CONTRIBUTING.md, 'Adding a rule')"


def test_a_scaffolded_rule_fails_the_todo_check(tmp_path):
    from perfdoctor.tools import new_rule

    root = tmp_path / "repo"
    (root / "rules").mkdir(parents=True)
    for path in new_rule.scaffold("PD198", "todo-check", root):
        assert todo_lines(path), path.name
