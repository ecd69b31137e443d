"""The registries agree: every query a strategy sends is declared and answered, every figure has a strategy."""

from __future__ import annotations

import ast
import importlib
import inspect

import pytest

from client.signals import QUERIES
from common import keys
from server.figures import FIGURES
import strategies.admission
import strategies.base
from strategies import REGISTRY, FedAvg
from strategies.queries import check_declared, client_table


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
def test_every_query_a_strategy_sends_is_declared_and_the_client_answers_it(name):
    declared = client_table((REGISTRY[name],))
    undeclared = _sent_actions(REGISTRY[name]) - set(declared)
    assert not undeclared, f"{name} sends queries it does not declare in its queries: {sorted(undeclared)}"
    unanswered = set(declared) - set(QUERIES)
    assert not unanswered, f"{name} declares queries the ClientApp does not answer: {sorted(unanswered)}"


def test_the_client_table_is_the_declared_handlers_themselves():
    for action, handler in client_table(REGISTRY.values()).items():
        module, _, function = handler.partition(":")
        assert QUERIES[action] is getattr(importlib.import_module(module), function)
    assert client_table((REGISTRY["flag"],)) == {
        keys.LOSSES_ACTION: "client.signals.losses:model_losses",  # the base's, inherited
        keys.HOLDOUT_ACTION: "client.signals.flag:holdout",
        keys.SUBSPACES_ACTION: "client.signals.subspaces:subspaces",
        keys.UPDATE_ACTION: "client.signals.update:model_update",
    }


class _Echo:
    action = keys.UPDATE_ACTION
    handler = "client.signals.echo:echo"


def test_one_action_with_two_handlers_is_refused():
    class Echoing(FedAvg):
        name = "echoing"
        queries = (_Echo,)

    assert client_table((Echoing,))[keys.UPDATE_ACTION] == _Echo.handler
    with pytest.raises(ValueError, match=r"The query 'update' of Echoing must have one client handler\. Got "):
        client_table((REGISTRY["flhc"], Echoing))


def test_a_strategy_that_sends_an_undeclared_query_fails_before_sending():
    class Talkative(FedAvg):
        name = "talkative"

    check_declared(Talkative, keys.LOSSES_ACTION)  # the base's query, inherited
    strategy = Talkative()
    with pytest.raises(RuntimeError, match=r"Talkative sends query\.update but does not declare it"):
        strategy.query_signal(keys.UPDATE_ACTION, [0], 1, lambda arrays: arrays)
    assert strategy.messenger.stats.asked == {}  # nothing went out


def test_the_generated_table_names_each_handler_by_module_and_refuses_one_outside_the_client():
    from server.derived import queries_module

    text = queries_module({keys.UPDATE_ACTION: "client.signals.echo:echo", "new": "client.signals.new:answer"})
    assert "from . import echo, new\n" in text
    assert "    keys.UPDATE_ACTION: echo.echo,\n    'new': new.answer,\n" in text
    with pytest.raises(ValueError, match=r"The handler of query 'x' must be a 'client.signals.<module>:<function>'"):
        queries_module({"x": "server.app:main"})


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
