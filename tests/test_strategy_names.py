"""No strategy name is written by hand outside its own module and the registry: the rest reads ``Cls.name``.

The scan reads every string in umbel's code (client/, server/, common/, benchmarks/, strategies/, deploy/)
except docstrings, which cite algorithms in prose. A string is a hand-written name when it is a strategy's
run-config name (``"fedclust"``), names it in quotes (``"strategy 'fedclust'"``) or, for names that are
not also English words, holds it as a word (``"pacfl, flhc"``; not ``--fedclust-lambda``, a key).
"""

from __future__ import annotations

import ast
import re

import pytest

from strategies import REGISTRY
from tests.test_no_outside_refs import ROOT, tracked_files

PACKAGES = ("client", "server", "common", "benchmarks", "strategies", "deploy")
WORDS = {"local", "flag"}  # names that are English words too: only a whole string or a quoted one counts
ALLOWED: dict[tuple[str, str], str] = {
    ("common/sources.py", "local"): "OWN_DATA, the dataset name of a run on the clients' own folders",
    ("server/cli.py", "local"): "CONNECTION, the name of Flower's simulation connection in config.toml",
}
"""Strings that spell a strategy's name but mean something else, each written once: (file, name) -> what."""
PENDING: set[str] = set()
"""Benchmarks that other branches changed while this test was written; their names become ``Cls.name`` at merge."""


def _docstrings(tree: ast.AST) -> set[int]:
    kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    return {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, kinds) and node.body and isinstance(node.body[0], ast.Expr)
    }


def named(text: str, names: set[str]) -> set[str]:
    """The strategy ``names`` that the string ``text`` writes by hand."""
    found = set()
    for name in names:
        quoted = any(f"{q}{name}{q}" in text for q in "'\"`")
        word = name not in WORDS and re.search(rf"(?<![\w+-]){re.escape(name)}(?![\w-])", text) is not None
        if text == name or quoted or word:
            found.add(name)
    return found


def hand_written(source: str, names: set[str]) -> list[tuple[int, str]]:
    """``(line, name)`` of each strategy name a string of ``source`` writes by hand (docstrings aside)."""
    tree = ast.parse(source)
    skip = _docstrings(tree)
    hits = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            hits += [(node.lineno, name) for name in sorted(named(node.value, names))]
    return sorted(hits)


def _own_names() -> dict[str, set[str]]:
    """Each file that may write names: a strategy's module its own name, the registry every name."""
    own: dict[str, set[str]] = {"strategies/__init__.py": set(REGISTRY)}
    for name, cls in REGISTRY.items():
        own.setdefault(cls.__module__.replace(".", "/") + ".py", set()).add(name)
    return own


def test_the_scan_finds_a_name_written_by_hand_and_leaves_keys_prose_and_reads_alone():
    names = {"fedclust", "pacfl", "flag", "cfl-gp"}
    source = '''"""Module docstring: fedclust and pacfl, as the papers call them."""
a = "fedclust"
b = "strategy 'flag' (holdout)"
c = f"{x} for pacfl, then"
d = ("--fedclust-lambda", "cfl-gp-rank", "flag", "a flag of umbel run", "fl+hc", FedClust.name)
'''
    assert hand_written(source, names) == [(2, "fedclust"), (3, "flag"), (4, "pacfl"), (5, "flag")]


def test_no_strategy_name_is_written_outside_its_module_and_the_registry():
    names, own = set(REGISTRY), _own_names()
    found = []
    for path in tracked_files():
        rel = path.relative_to(ROOT).as_posix()
        if path.suffix != ".py" or rel.split("/", 1)[0] not in PACKAGES or rel in PENDING:
            continue
        for line, name in hand_written(path.read_text(encoding="utf-8"), names - own.get(rel, set())):
            if (rel, name) not in ALLOWED:
                found.append(f"{rel}:{line}: {name!r}")
    assert not found, "Read the name from the strategy's class (Cls.name) instead of:\n" + "\n".join(found)


@pytest.mark.parametrize("rel", sorted(PENDING | {path for path, _ in ALLOWED}))
def test_each_exception_is_a_file_that_exists_and_needs_it(rel):
    path = ROOT / rel
    assert path.is_file(), f"{rel} is listed as an exception but does not exist: drop it from the list"
    hits = {name for _, name in hand_written(path.read_text(encoding="utf-8"), set(REGISTRY))}
    assert hits, f"{rel} writes no strategy name any more: drop it from the exceptions"
    assert {name for path_, name in ALLOWED if path_ == rel} <= hits
