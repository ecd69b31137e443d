"""No import circles among umbel's modules, counting imports under ``TYPE_CHECKING`` and inside functions.

A circle hidden behind ``TYPE_CHECKING`` or a function-level import still ties the two modules
together (neither can be read, typed or changed alone); a collaborator takes a small ``Protocol``
(``strategies.protocols.Core``, ``server.provenance.Experiment``) instead of the class that imports it.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.test_no_outside_refs import ROOT

PACKAGES = ("client", "common", "server", "strategies", "benchmarks")


def modules(root: Path, packages: tuple[str, ...]) -> dict[str, Path]:
    """Each module's dotted name (a package by its ``__init__``) and file."""
    found = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def import_graph(root: Path, packages: tuple[str, ...]) -> dict[str, set[str]]:
    """Module -> the modules of ``packages`` it imports anywhere in its file (``TYPE_CHECKING`` and functions too).

    ``from pkg import name`` points at ``pkg.name`` when that is a module, else at ``pkg``.
    """
    mods = modules(root, packages)

    def known(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {m: set() for m in mods}
    for module, path in mods.items():
        package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = ".".join(package[: len(package) - node.level + 1] + [node.module or ""]) if node.level else ""
                source = base.rstrip(".") if node.level else node.module or ""
                targets = [f"{source}.{a.name}" if f"{source}.{a.name}" in mods else source for a in node.names]
            graph[module] |= {t for t in map(known, targets) if t is not None and t != module}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while (w := stack.pop()) != v:
                group.append(w)
            if group:
                found.append(sorted([*group, v]))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def test_the_graph_counts_type_checking_and_function_imports(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .b import B\n")
    (pkg / "b.py").write_text("def f():\n    from pkg import c\n")
    (pkg / "c.py").write_text("import pkg.a as a\nfrom . import d\n")
    (pkg / "d.py").write_text("import os\n")
    graph = import_graph(tmp_path, ("pkg",))
    assert graph == {"pkg": set(), "pkg.a": {"pkg.b"}, "pkg.b": {"pkg.c"}, "pkg.c": {"pkg.a", "pkg.d"}, "pkg.d": set()}
    assert cycles(graph) == [["pkg.a", "pkg.b", "pkg.c"]]


def test_the_graph_sees_umbels_imports():
    graph = import_graph(ROOT, PACKAGES)
    assert {"strategies.phases", "strategies.admission"} <= graph["strategies.base"]
    assert "strategies.protocols" in graph["strategies.phases"]
    assert "server.provenance" in graph["server.experiment"]
    assert "client.signals.queries" in graph["client.signals"]


def test_no_import_circle_among_umbels_modules():
    found = cycles(import_graph(ROOT, PACKAGES))
    assert not found, "Import circles (take a Protocol instead of the class that imports you):\n" + "\n".join(
        " <-> ".join(group) for group in found
    )
