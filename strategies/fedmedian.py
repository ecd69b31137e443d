"""FedMedian: FedAvg with coordinate-wise median aggregation (Yin et al., ICML 2018).

The robust-aggregation baseline of FLIC (Espinoza Castellon et al., IJCNN 2022, Sec. IV-C):
against the "minus grad" attack it holds while attackers are a minority of each round's
sample and collapses once they are not. One cluster; every reply counts once, whatever its
``num-examples``.
"""

from __future__ import annotations

from flwr.app import Array, ArrayRecord

from common.aggregation import coordinate_median

from .base import ClusteredStrategy
from .replies import TrainUpdate


class FedMedian(ClusteredStrategy):
    """One cluster; the new model is the coordinate-wise median of the returned models."""

    name = "fedmedian"

    def aggregate_cluster(self, cluster: int, updates: list[TrainUpdate]) -> ArrayRecord:
        """The coordinate-wise median of the members' models (no weights)."""
        median = coordinate_median([u.arrays for u in updates], updates[0].sent)
        return ArrayRecord({name: Array(arr) for name, arr in median.items()})
