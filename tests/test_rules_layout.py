"""Every rule has its own test file, tests/rules/test_pdNNN.py, with a firing and a silent case (issue 9 item 4).

A test named ``test_pdNNN_fires...`` shows the rule firing on a trace whose numbers are worked out by hand, and
``test_pdNNN_silent...`` shows it quiet on a healthy one. ``NOT_YET_SPLIT`` names the rules whose cases still
live in a shared file (run end to end on real example scripts, or in another issue's file); it only shrinks.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

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
