"""FL+HC (Briggs, Fan and Andras, "Federated learning with hierarchical clustering of local
updates to improve training on non-IID data", IJCNN 2020).

``flhc-warmup-rounds`` rounds of FedAvg (by default none, modified; the ``paper`` preset: 10); then, before the
next round, every client trains the global model for ``cluster-steps`` mini-batches and sends its
update (``query.update``: clustering traffic). With ``cluster-steps`` 0 it trains for
``local-epochs`` as Briggs et al. do; then a client with 20 samples takes one step per epoch and
one with 2,000 a hundred, and clients almost without one of their labels join another group.
Agglomerative clustering on the distances between the updates (``flhc-metric``: cosine by
default, modified, the updates' directions; Euclidean also weighs their lengths, which follow how
far the global model already fits a client), into ``num-clusters`` clusters (or cut at
``flhc-threshold`` when ``num-clusters`` is 0), with ``linkage``; every cluster model starts from
the global model; then clustered training. Newcomers after the clustering join the cluster whose
model has the lowest loss on their train split. The paper's settings: ``--flhc-warmup-rounds N
--flhc-metric euclidean --num-clusters K`` (``benchmarks.compare``'s ``paper`` preset: N = 10).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from flwr.app import ArrayRecord

from common import keys
from common.clustering.hierarchical import METRICS
from common.clustering.oneshot import OneShotClusters, flhc_clusters
from common.clustering.sampled import SAMPLE_ABOVE, SAMPLE_ABOVE_HELP, SAMPLE_ABOVE_PAPER
from common.signals.update import ModelUpdate
from common.params import check_params, param
from common.params import shared

from .flat import float_size
from .oneshot import OneShotStrategy, check_cut


@dataclass(frozen=True)
class FLHCParams:
    """``warmup_rounds`` >= 0 FedAvg rounds before clustering (0: none, the clustering in round 1),
    ``num_clusters`` >= 0 (0 = cut at ``flhc_threshold`` >= 0, a distance between updates),
    ``flhc_metric`` (Briggs et al. compare euclidean, cityblock and cosine), ``linkage``,
    ``cluster_steps`` >= 0 mini-batches of training for the clustered update (0: ``local-epochs``
    epochs), ``sample_above`` >= 0 (more clients: ``sampled.sampled_cut``; 0: exact); keys
    ``flhc-*`` but the shared ``num-clusters``, ``linkage`` and ``cluster-steps``.
    """

    key_prefix: ClassVar[str] = "flhc"
    # Default 0, modified: the clustering runs in round 1 on updates of the initial model. With the training
    # defaults (lr 0.01, 5 local epochs) one FedAvg round already fits the global model to some groups more than
    # others, so the updates from it shrink unevenly and the Euclidean cut merged Fashion-MNIST groups (dev half:
    # ARI 0.44 and 0.79; benchmarks.selection, docs/results/selection.md, session 21).
    warmup_rounds: int = param(
        0,
        "FedAvg rounds before clustering; 0: none, the clustering in round 1 (modified; the paper preset: 10; "
        "the former defaults were 1 and, before, a tenth of rounds)",
        low=0,
    )
    num_clusters: int = shared()
    flhc_threshold: float = param(
        0.0,
        "0 with num-clusters 0: automatic cut (modified); > 0: the paper's fixed cut height (former default 1.0)",
        low=0.0,
        paper="a fixed cut height",
    )
    flhc_metric: str = param(
        "cosine",
        "distance between client updates (modified: cosine, the updates' directions; the former default "
        "euclidean also weighs their lengths)",
        choices=METRICS,
        paper="euclidean, cityblock or cosine (compared)",
    )
    linkage: str = shared()
    cluster_steps: int = shared(low=0, help="0: local-epochs epochs")
    sample_above: int = param(SAMPLE_ABOVE, SAMPLE_ABOVE_HELP, low=0, paper=SAMPLE_ABOVE_PAPER)

    def __post_init__(self) -> None:
        check_params(self, "FLHC")
        check_cut(self, "FLHC")


class FLHC(OneShotStrategy):
    """FedAvg warm-up, then one HC of all clients' updates from the global model."""

    name = "flhc"
    queries = (ModelUpdate,)
    keeps_signals = False  # newcomers join by train loss: the stored updates would be unused
    params_type = FLHCParams
    round_params: ClassVar[dict[str, int]] = {"warmup_rounds": 1}

    def describe_distances(self) -> str:
        """What ``distance_matrix`` measures."""
        return f"{self.params.flhc_metric} distance of updates"

    @property
    def threshold(self) -> float:
        """The cut height ``flhc-threshold``."""
        return self.params.flhc_threshold

    def clustering_round(self) -> int:
        """The round after the ``warmup-rounds`` FedAvg rounds."""
        return self.params.warmup_rounds + 1

    def start_model(self) -> ArrayRecord:
        """The warmed-up global model."""
        return self.models[0]

    def collect(self, pids: Sequence[int], server_round: int) -> dict[int, ModelUpdate]:
        """Each client's update from the global model after ``cluster-steps`` mini-batches."""
        return self.query_signal(
            keys.UPDATE_ACTION,
            pids,
            server_round,
            ModelUpdate.from_arrays,
            models=[self.models[0]],
            size=float_size(self.models[0]),
            config={keys.CLUSTER_STEPS: self.params.cluster_steps},
        )

    def cluster_signals(self, signals: Sequence[ModelUpdate]) -> OneShotClusters:
        """``flhc-metric`` distances between the updates, cut (``flhc_clusters``)."""
        deltas = [s.delta for s in signals]
        p = self.params
        return flhc_clusters(deltas, self.hc_cut, p.flhc_metric, self.training.seed, p.sample_above)
