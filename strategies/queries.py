"""The signal queries a strategy declares, and the ClientApp's table built from every registered strategy's.

A strategy lists the signals it asks clients for in ``queries`` (``common.signals`` classes, each with its
``action`` and its client ``handler``); a class's queries are its own and its bases'. ``python -m
server.derived`` writes ``client/signals/queries.py`` from ``client_table(REGISTRY)`` (importing the
strategies in the ClientApp would cost each ClientApp process their imports), and ``query_signal`` refuses
an action its strategy did not declare, so no strategy can send a query the ClientApp was not built to
answer.
"""

from __future__ import annotations

from collections.abc import Iterable

from common.signals import Queried


def client_table(classes: Iterable[type]) -> dict[str, str]:
    """Every query the ``classes`` and their bases declare, action -> ``"module:function"``, sorted by action.

    Raises
    ------
    ValueError
        If two classes declare one action with different handlers.
    """
    table: dict[str, tuple[str, str]] = {}
    for cls in classes:
        for owner in reversed(cls.__mro__):
            signal: Queried
            for signal in vars(owner).get("queries", ()):
                known = table.setdefault(signal.action, (signal.handler, owner.__name__))
                if known[0] != signal.handler:
                    raise ValueError(
                        f"The query '{signal.action}' of {owner.__name__} must have one client handler. "
                        f"Got {signal.handler!r} instead of {known[1]}'s {known[0]!r}."
                    )
    return {action: table[action][0] for action in sorted(table)}


def check_declared(cls: type, action: str) -> None:
    """Raise ``RuntimeError`` unless ``cls`` or a base declares the query ``action`` in its ``queries``."""
    if action not in client_table((cls,)):
        raise RuntimeError(
            f"{cls.__name__} sends query.{action} but does not declare it: add its signal class to "
            f"{cls.__name__}.queries and run `python -m server.derived`, so the ClientApp answers it."
        )
