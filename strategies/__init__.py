"""umbel's strategies, by name.

``REGISTRY`` maps each run-config ``strategy`` value to its class; ``get_strategy`` fails
on unknown names with the list of known ones.
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
        FedProx,
        FedClust,
        PACFL,
        FLHC,
        CFLGT,
        FLIC,
        FedMedian,
        CFLSattler,
        CFLGP,
        IFCA,
        FLAG,
    )
}


def get_strategy(name: str) -> type[ClusteredStrategy]:
    """The strategy class registered as ``name``.

    Raises
    ------
    ValueError
        If ``name`` is unknown; the message lists every registered name.
    """
    return REGISTRY[check_choice(name, "strategy", "the run config", REGISTRY)]


__all__ = [
    "CFLGP",
    "CFLGT",
    "FLAG",
    "FLHC",
    "FLIC",
    "IFCA",
    "PACFL",
    "REGISTRY",
    "CFLSattler",
    "ClusteredStrategy",
    "FedAvg",
    "FedClust",
    "FedMedian",
    "FedProx",
    "Local",
    "get_strategy",
]
