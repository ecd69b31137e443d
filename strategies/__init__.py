"""umbel's strategies, by name.

``REGISTRY`` maps each run-config ``strategy`` value to its class; ``get_strategy`` fails
on unknown names with the list of known ones.
"""

from __future__ import annotations

from common.validation import check_choice

from .base import ClusteredStrategy
from .cfl_gp import CFLGP
from .fedavg import FedAvg
from .fedprox import FedProx
from .ifca import IFCA
from .local import Local

REGISTRY: dict[str, type[ClusteredStrategy]] = {
    cls.name: cls for cls in (FedAvg, Local, FedProx, CFLGP, IFCA)
}


def get_strategy(name: str) -> type[ClusteredStrategy]:
    """The strategy class registered as ``name``.

    Raises
    ------
    ValueError
        If ``name`` is unknown; the message lists every registered name.
    """
    return REGISTRY[check_choice(name, "strategy", "the run config", REGISTRY)]


__all__ = ["CFLGP", "IFCA", "REGISTRY", "ClusteredStrategy", "FedAvg", "FedProx", "Local", "get_strategy"]
