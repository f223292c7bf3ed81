"""The package's import graph: no module imports itself through others (no cycle), and no package imports one
declared above it in :data:`LAYERS` (data flows one way: trace -> analysis -> replay -> crossrank -> findings ->
checks -> model -> ... -> cli). Imports under ``if TYPE_CHECKING:`` name a type for an annotation and are not
followed: they load nothing at run time (a later stage's result type on an earlier stage's container, e.g.
``Analysis.checks``).

Every ``import`` statement is read, at module level and inside functions alike (a function-level import is a
dependency all the same)."""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import REPO

PKG = REPO / "perfdoctor"

# the packages (and top-level modules) from the bottom up: each may import those before it, never one after it
LAYERS: list[str] = [
    "errors",
    "__version__",
    "vocab",
    "text",
    "trace",
    "analysis",
    "replay",
    "crossrank",
    "findings",
    "checks",
    "model",
    "snapshot",
    "capture",
    "timeline",
    "jobs",
    "pipeline",
    "diff",
    "budget",
    "render",
    "cli",
    "tools",
    "__main__",
]


def _module(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _type_checking_lines(tree: ast.Module) -> set[int]:
    """Line numbers of the statements inside ``if TYPE_CHECKING:`` blocks."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for child in node.body:
                out.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return out


def _graph() -> dict[str, set[str]]:
    modules = {_module(p): p for p in PKG.rglob("*.py")}

    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for mod, path in modules.items():
        tree = ast.parse(path.read_text())
        skip = _type_checking_lines(tree)
        deps: set[str] = set()
        for node in ast.walk(tree):
            if getattr(node, "lineno", 0) in skip:
                continue
            names: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("perfdoctor"):
                names = [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names if a.name.startswith("perfdoctor")]
            for name in names:
                target = resolve(name)
                if target is not None and target != mod:
                    deps.add(target)
        graph[mod] = deps
    return graph


def _layer(mod: str) -> str:
    parts = mod.split(".")
    return parts[1] if len(parts) > 1 else "perfdoctor"


def test_the_layers_name_every_package() -> None:
    found = {_layer(m) for m in _graph()} - {"perfdoctor"}
    assert found <= set(LAYERS), f"declare these packages' place in LAYERS: {sorted(found - set(LAYERS))}"


def test_no_import_cycle() -> None:
    graph = _graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert cycles == []


def test_no_import_against_the_declared_order() -> None:
    rank = {name: i for i, name in enumerate(LAYERS)}
    upward = sorted(
        f"{mod} -> {dep}"
        for mod, deps in _graph().items()
        for dep in deps
        if _layer(mod) != "perfdoctor" and _layer(dep) != "perfdoctor" and rank[_layer(dep)] > rank[_layer(mod)]
    )
    assert upward == []
