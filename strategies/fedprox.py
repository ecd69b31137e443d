"""FedProx (Li et al., MLSys 2020): FedAvg whose clients add a proximal term.

Each client minimises ``loss + mu/2 * ||w - w_global||^2`` during local training; the
server side is FedAvg's. ``mu`` is the run-config key ``fedprox-mu``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from common import keys
from common.params import check_params, param

from .base import ClusteredStrategy


@dataclass(frozen=True)
class FedProxParams:
    """``mu`` >= 0 (0 gives FedAvg), key ``fedprox-mu``."""

    key_prefix: ClassVar[str] = "fedprox"
    mu: float = param(0.01, "FedProx's mu: weight of the proximal term; >= 0", low=0.0)

    def __post_init__(self) -> None:
        check_params(self, "FedProx")


class FedProx(ClusteredStrategy):
    """One cluster; the train config carries ``proximal-mu`` to every client."""

    name = "fedprox"
    params_type = FedProxParams

    def client_config(self, server_round: int, partition_id: int) -> dict[str, Any]:
        """``fedprox-mu`` (message key ``proximal-mu``) for the client's proximal term."""
        return {keys.PROXIMAL_MU: self.params.mu}
