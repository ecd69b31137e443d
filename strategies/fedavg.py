"""FedAvg (McMahan et al., 2017) as the one-cluster case of ``ClusteredStrategy``.

Every client shares one model; each round a seeded sample of ``fraction`` of the clients
trains it and the server averages their models weighted by ``num-examples``. Its
aggregation equals Flower's own ``FedAvg`` (tested).
"""

from __future__ import annotations

from .base import ClusteredStrategy


class FedAvg(ClusteredStrategy):
    """Federated averaging: K = 1, the base's defaults unchanged."""

    name = "fedavg"
