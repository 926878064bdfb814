"""The packages' import graph: no cycle among remat's modules, and every import along the layers.

``schedules`` <- ``solvers`` <- ``report`` <- ``service`` <- ``clients``: a package imports only the ones
to its left (``clients`` may import all four), and only ``clients.torch`` imports torch; ``remat compare``
loads no web framework. Imports are read with
:mod:`ast` from the sources, those inside functions included: an import deferred into a function
to get round a cycle is still a cycle.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src"
LAYERS = ("schedules", "solvers", "report", "service", "clients")
"""remat's packages, lowest first: each may import those before it."""


def _modules() -> dict[str, Path]:
    """Every module of the packages, by dotted name (a package by the name of its ``__init__``)."""
    found = {}
    for package in LAYERS:
        for path in sorted((SRC / "remat" / package).rglob("*.py")):
            parts = list(path.relative_to(SRC).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


MODULES = _modules()


def _imports(name: str, tree: ast.Module) -> Iterator[str]:
    """The modules ``name`` imports (a ``from P import x`` counts as P.x when that is a module)."""
    package = name if MODULES[name].name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                yield f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base


@cache
def import_graph() -> dict[str, set[str]]:
    """Module -> the modules it imports (all of them, remat's and others)."""
    return {name: set(_imports(name, ast.parse(path.read_text()))) for name, path in MODULES.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of remat's modules with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v] & MODULES.keys():
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while (w := stack.pop()) != v:
                component.append(w)
            component.append(v)
            if len(component) > 1 or v in graph[v]:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _layer(module: str) -> int | None:
    parts = module.split(".")
    return LAYERS.index(parts[1]) if parts[0] == "remat" and len(parts) > 1 and parts[1] in LAYERS else None


def test_no_module_imports_itself_through_others() -> None:
    assert cycles(import_graph()) == []


@pytest.mark.parametrize("name", sorted(MODULES))
def test_imports_follow_the_layers(name: str) -> None:
    mine = _layer(name)
    assert mine is not None
    for target in import_graph()[name]:
        theirs = _layer(target)
        assert theirs is None or theirs <= mine, f"{name} imports {target}, a layer above it"
        if target.split(".")[0] == "torch":
            assert name.startswith("remat.clients.torch"), f"{name} imports torch outside remat.clients.torch"


def test_compare_loads_no_web_framework() -> None:
    probe = "import sys, remat.clients._compare; print(sorted({'fastapi', 'rq'} & sys.modules.keys()))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == "[]", done.stdout
