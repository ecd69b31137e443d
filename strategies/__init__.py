"""umbel's strategies, by name: the one registration of each.

A strategy is registered by one line, its import below (``as`` re-exports it): ``REGISTRY`` maps each run-config
``strategy`` value (the class's ``name``) to every ``ClusteredStrategy`` subclass imported here, in
this order. From it come the run-config keys of each strategy's parameters (``common.schema``; their
order is this one), the ``strategy`` key's choices, the ``umbel run`` flags, pyproject's
``[tool.flwr.app.config]``, docs/parameters.md and the ClientApp's queries (``python -m server.derived``).
``get_strategy`` fails on unknown names with the list of known ones.
"""

from __future__ import annotations

from collections.abc import Mapping

from common.validation import check_choice

from .base import ClusteredStrategy
from .fedavg import FedAvg as FedAvg
from .local import Local as Local
from .cflgt import CFLGT as CFLGT
from .fedclust import FedClust as FedClust
from .pacfl import PACFL as PACFL
from .flhc import FLHC as FLHC
from .flag import FLAG as FLAG
from .flic import FLIC as FLIC
from .cfl_sattler import CFLSattler as CFLSattler
from .cfl_gp import CFLGP as CFLGP
from .fedprox import FedProx as FedProx
from .fedmedian import FedMedian as FedMedian
from .ifca import IFCA as IFCA
from .fesem import FeSEM as FeSEM


def registry(namespace: Mapping[str, object]) -> dict[str, type[ClusteredStrategy]]:
    """The strategy classes in ``namespace`` (a module's globals, in import order) by their ``name``.

    Raises
    ------
    TypeError
        If a class does not declare its own ``name`` (it would take its base's).
    ValueError
        If two classes declare one ``name``.
    """
    found: dict[str, type[ClusteredStrategy]] = {}
    for cls in namespace.values():
        if not (isinstance(cls, type) and issubclass(cls, ClusteredStrategy)) or cls is ClusteredStrategy:
            continue
        if "name" not in vars(cls):
            raise TypeError(
                f"The strategy {cls.__name__} must declare its own 'name'. Got {cls.name!r} inherited instead."
            )
        if cls.name in found and found[cls.name] is not cls:
            raise ValueError(
                f"The 'name' of {cls.__name__} must be unique. Got {cls.name!r}, {found[cls.name].__name__}'s, instead."
            )
        found[cls.name] = cls
    return found


REGISTRY: dict[str, type[ClusteredStrategy]] = registry(globals())
DEFAULT_STRATEGY = CFLGT.name
"""The run-config ``strategy`` key's default (the main job: README, "Fresh machine")."""


def get_strategy(name: str) -> type[ClusteredStrategy]:
    """The strategy class registered as ``name``.

    Raises
    ------
    ValueError
        If ``name`` is unknown; the message lists every registered name.
    """
    return REGISTRY[check_choice(name, "strategy", "the run config", REGISTRY)]


__all__ = [  # noqa: PLE0604  # the registered classes by their names, derived from REGISTRY
    "DEFAULT_STRATEGY",
    "REGISTRY",
    "ClusteredStrategy",
    "get_strategy",
    "registry",
    *(cls.__name__ for cls in REGISTRY.values()),
]
