"""A finding's text is built in one module (:mod:`perfdoctor.text`): no code elsewhere in the package appends to,
searches or re-splits a message, headline or method.

Read off the syntax tree of every module: an attribute named ``message``, ``headline``, ``method`` or
``saving_method`` (a finding's, an estimate's, a report section's) may be assigned, passed and printed, but
outside the text builder it is never the left side of ``+=``, an operand of ``+``, the container of ``in``, the
object of a string method (``.replace``, ``.startswith``, ``.split``, ...) or a piece of an f-string."""

from __future__ import annotations

import ast
from collections.abc import Set

from conftest import REPO

PKG = REPO / "perfdoctor"
BUILDER = PKG / "text.py"
TEXT_ATTRS = {"message", "headline", "method", "saving_method"}
STR_METHODS = {
    "replace",
    "startswith",
    "endswith",
    "split",
    "rsplit",
    "find",
    "rfind",
    "index",
    "rindex",
    "count",
    "partition",
    "rpartition",
    "removeprefix",
    "removesuffix",
}
# attributes of these names that are not a finding's text: an error's one line (PerfDoctorError.message, a
# missing datum's reason: perfdoctor.analysis.missing.MissingReason.message), whose words the caller builds on
ERROR_OBJECTS = {"exc", "why", "missing", "err", "e"}
# per module, objects whose ``method`` is not a finding's: the diff's step-time comparison (perfdoctor.diff.model)
NOT_FINDINGS = {"perfdoctor/render/diff_view.py": {"s"}}


def _offences(tree: ast.AST, others: Set[str] = frozenset()) -> list[tuple[int, str]]:
    """(line, what) for each place the tree edits or inspects a finding's text; ``others``: names of objects in
    this module whose text attributes are not a finding's."""

    def _is_text(node: ast.AST) -> bool:
        """Whether ``node`` is ``X.message`` / ``X.headline`` / ``X.method`` / ``X.saving_method`` of a finding."""
        if not isinstance(node, ast.Attribute) or node.attr not in TEXT_ATTRS:
            return False
        return not (isinstance(node.value, ast.Name) and node.value.id in ERROR_OBJECTS | others)

    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.AugAssign) and _is_text(node.target):
            out.append((node.lineno, "appends to"))
        elif (
            isinstance(node, ast.BinOp)
            and isinstance(node.op, ast.Add)
            and (_is_text(node.left) or _is_text(node.right))
        ):
            out.append((node.lineno, "concatenates"))
        elif isinstance(node, ast.Compare) and any(
            isinstance(op, ast.In | ast.NotIn) and _is_text(right)
            for op, right in zip(node.ops, node.comparators, strict=True)
        ):
            out.append((node.lineno, "searches"))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in STR_METHODS
            and _is_text(node.func.value)
        ):
            out.append((node.lineno, f"calls .{node.func.attr} on"))
        elif isinstance(node, ast.JoinedStr) and any(
            isinstance(v, ast.FormattedValue) and _is_text(v.value) for v in node.values
        ):
            out.append((node.lineno, "interpolates"))
    return out


def test_no_code_outside_the_text_builder_edits_or_searches_a_findings_text() -> None:
    found = []
    for path in sorted(PKG.rglob("*.py")):
        if path == BUILDER:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        name = path.relative_to(REPO).as_posix()
        found += [
            f"{name}:{line}: {what} a finding's text" for line, what in _offences(tree, NOT_FINDINGS.get(name, set()))
        ]
    assert not found, "build it in perfdoctor/text.py instead:\n" + "\n".join(found)


def test_the_check_sees_each_kind_of_edit() -> None:
    """Each form the test forbids is caught, and the allowed ones (assign, pass, an error's message) are not."""
    caught = _offences(
        ast.parse(
            "f.message += ' x'\n"
            "m = est.method + '; y'\n"
            "ok = 'warm-up' in f.message\n"
            "r = f.saving_method.startswith('replay')\n"
            "s = f'{est.method}; z'\n"
            "t = f.headline.split('; ')[0]\n"
        )
    )
    assert [line for line, _ in caught] == [1, 2, 3, 4, 5, 6]
    assert not _offences(
        ast.parse("f.message = build(body)\nprint(f.headline)\nline = f'error: {exc.message}'\ng(f.method, note)\n")
    )
