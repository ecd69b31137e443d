"""umbel's strategies, by name: the one registration of each.

``REGISTRY`` maps each run-config ``strategy`` value to its class (its ``name``); a strategy is
registered by one line in the tuple below. From it come the run-config keys of each strategy's
parameters (``common.schema``; their order is this tuple's), the ``strategy`` key's choices, the
``umbel run`` flags, pyproject's ``[tool.flwr.app.config]`` and docs/parameters.md
(``python -m server.derived``). ``get_strategy`` fails on unknown names with the list of known ones.
"""

from __future__ import annotations

from common.validation import check_choice

from .base import ClusteredStrategy
from .cfl_gp import CFLGP
from .cfl_sattler import CFLSattler
from .cflgt import CFLGT
from .fedavg import FedAvg
from .fedclust import FedClust
from .fedmedian import FedMedian
from .fedprox import FedProx
from .fesem import FeSEM
from .flag import FLAG
from .flhc import FLHC
from .flic import FLIC
from .ifca import IFCA
from .local import Local
from .pacfl import PACFL

REGISTRY: dict[str, type[ClusteredStrategy]] = {
    cls.name: cls
    for cls in (
        FedAvg,
        Local,
        CFLGT,
        FedClust,
        PACFL,
        FLHC,
        FLAG,
        FLIC,
        CFLSattler,
        CFLGP,
        FedProx,
        FedMedian,
        IFCA,
        FeSEM,
    )
}
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
    *(cls.__name__ for cls in REGISTRY.values()),
]
