"""FedProx (Li et al., MLSys 2020): FedAvg whose clients add a proximal term.

Each client minimises ``loss + mu/2 * ||w - w_global||^2`` during local training; the
server side is FedAvg's. ``mu`` is the run-config key ``fedprox-mu``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from common import keys
from common.config import run_config_key
from common.validation import check_float

from .base import ClusteredStrategy


@dataclass(frozen=True)
class FedProxParams:
    """``mu`` >= 0 (0 gives FedAvg), key ``fedprox-mu``."""

    key_prefix: ClassVar[str] = "fedprox"
    mu: float = 0.01

    def __post_init__(self) -> None:
        object.__setattr__(self, "mu", check_float(self.mu, run_config_key(FedProxParams, "mu"), "FedProx", low=0.0))


class FedProx(ClusteredStrategy):
    """One cluster; the train config carries ``proximal-mu`` to every client."""

    name = "fedprox"
    params_type = FedProxParams

    def client_config(self, server_round: int, partition_id: int) -> dict[str, Any]:
        """``fedprox-mu`` (message key ``proximal-mu``) for the client's proximal term."""
        return {keys.PROXIMAL_MU: self.params.mu}
