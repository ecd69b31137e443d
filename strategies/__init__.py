"""umbel's strategies, by name.

``REGISTRY`` maps each run-config ``strategy`` value to its class; ``get_strategy`` fails
on unknown names with the list of known ones.
"""

from __future__ import annotations

from common.validation import check_choice

from .base import ClusteredStrategy
from .fedavg import FedAvg
from .fedclust import FedClust
from .fedprox import FedProx
from .flag import FLAG
from .flhc import FLHC
from .local import Local
from .pacfl import PACFL

REGISTRY: dict[str, type[ClusteredStrategy]] = {
    cls.name: cls for cls in (FedAvg, Local, FedProx, FedClust, PACFL, FLHC, FLAG)
}


def get_strategy(name: str) -> type[ClusteredStrategy]:
    """The strategy class registered as ``name``.

    Raises
    ------
    ValueError
        If ``name`` is unknown; the message lists every registered name.
    """
    return REGISTRY[check_choice(name, "strategy", "the run config", REGISTRY)]


__all__ = ["FLAG", "FLHC", "PACFL", "REGISTRY", "ClusteredStrategy", "FedAvg", "FedClust", "FedProx", "Local", "get_strategy"]
