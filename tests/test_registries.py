"""The explicit registries agree: every query a strategy sends has a client handler, every figure a strategy."""

from __future__ import annotations

import ast
import inspect

import pytest

from client.signals import QUERIES
from common import keys
from server.figures import FIGURES
import strategies.admission
import strategies.base
from strategies import REGISTRY


def _sent_actions(cls: type) -> set[str]:
    """The actions of every ``query_signal(...)`` call in the modules that define ``cls`` and its bases."""
    actions: set[str] = set()
    modules = {m for m in map(inspect.getmodule, cls.__mro__) if m is not None and m.__name__.startswith("strategies.")}
    if strategies.base in modules:  # the base's collaborators send queries for it (the loss query)
        modules.add(strategies.admission)
    for module in sorted(modules, key=lambda m: m.__name__):
        for node in ast.walk(ast.parse(inspect.getsource(module))):
            if not (isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "query_signal"):
                continue
            if isinstance(node.func.value, ast.Name) and node.func.value.id == "phases":
                continue  # the base's own query_signal, handing its caller's action to strategies.phases
            action = node.args[0] if node.args else None
            if isinstance(action, ast.Attribute) and isinstance(action.value, ast.Name) and action.value.id == "keys":
                actions.add(getattr(keys, action.attr))
            elif isinstance(action, ast.Constant) and isinstance(action.value, str):
                actions.add(action.value)
            else:
                pytest.fail(f"{module.__name__}:{node.lineno} sends a query action that is not a common.keys constant.")
    return actions


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_every_query_a_strategy_sends_has_a_client_handler(name):
    missing = _sent_actions(REGISTRY[name]) - set(QUERIES)
    assert not missing, f"{name} sends query actions no client handler answers: {sorted(missing)}"


def test_the_query_scan_sees_the_strategies_queries():
    assert keys.LOSSES_ACTION in _sent_actions(REGISTRY["ifca"])  # inherited from the base class
    assert keys.FORCES_ACTION in _sent_actions(REGISTRY["cflgt"])
    assert {keys.SUBSPACES_ACTION, keys.UPDATE_ACTION, keys.HOLDOUT_ACTION} <= _sent_actions(REGISTRY["flag"])
    assert _sent_actions(REGISTRY["fedavg"]) == {keys.LOSSES_ACTION}


def test_every_handler_answers_an_action_some_strategy_sends():
    sent = set().union(*(_sent_actions(cls) for cls in REGISTRY.values()))
    assert set(QUERIES) == sent
    assert keys.IDENTITY_ACTION not in QUERIES  # client.app answers it itself


@pytest.mark.parametrize("name", sorted(FIGURES))
def test_every_figure_belongs_to_a_registered_strategy(name):
    assert name in REGISTRY, f"FIGURES has {name!r}, which is not a strategy name: {sorted(REGISTRY)}"
    assert callable(FIGURES[name])


def test_the_registries_leave_their_modules_reachable():
    import client.signals
    import server.figures

    # ``import client.signals.forces as m`` (as tests patch a module) reads the package's attribute.
    for package, functions in ((client.signals, QUERIES.values()), (server.figures, FIGURES.values())):
        for fn in functions:
            assert inspect.ismodule(getattr(package, fn.__module__.rsplit(".", 1)[1]))
