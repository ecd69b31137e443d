"""FedClust (Islam et al., "FedClust: Tackling Data Heterogeneity in Federated Learning through
Weight-Driven Client Clustering", ICPP 2024; Sec. 3.4-4, Alg. 1-2).

Round 1: every client trains the initial model on its train split for ``cluster-steps``
mini-batches (default 100, so that every client trains equally long; with 0, for
``fedclust-cluster-epochs`` epochs, which lets big clients move far and small ones barely) and uploads
only the final layer's weight and bias (``query.head``: clustering traffic, nothing is
aggregated). The server takes Euclidean distances between those vectors (Eq. 3) and cuts an
agglomerative tree at ``fedclust-lambda`` (or into ``num-clusters``); every cluster model starts
from the initial model. Newcomers (Alg. 2, run-config ``late-clients``) train the initial model
the same way and join the cluster whose stored final-layer centroid is nearest (Eq. 4); their
accuracy is logged apart at each evaluation and in ``summary.json`` (the paper's Table 6 lets
them personalise for 5 epochs first; here they train with their cluster as everyone does).
``lambda`` is a Python keyword, hence the run-config key ``fedclust-lambda``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from logging import INFO
from typing import Any, ClassVar

import numpy as np
from flwr.app import Message, MetricRecord
from flwr.common import log

from common import keys
from common.clustering.hierarchical import centroids, nearest
from common.clustering.oneshot import OneShotClusters, fedclust_clusters
from common.clustering.sampled import SAMPLE_ABOVE, SAMPLE_ABOVE_HELP, SAMPLE_ABOVE_PAPER
from common.signals.final_layer import FinalLayer
from common.params import check_params, param
from common.params import shared

from .oneshot import OneShotStrategy, check_cut


@dataclass(frozen=True)
class FedClustParams:
    """``fedclust_lambda`` >= 0 (the HC cut height), ``num_clusters`` >= 0 (0 = use lambda),
    ``linkage`` in {average, complete, single}, ``cluster_steps`` >= 0 mini-batches of training
    before the upload (0: ``cluster_epochs`` >= 1 epochs instead), ``sample_above`` >= 0 (more
    clients: ``sampled.sampled_cut``; 0: exact); keys ``fedclust-*`` but the shared
    ``num-clusters``, ``linkage`` and ``cluster-steps``.
    """

    key_prefix: ClassVar[str] = "fedclust"
    fedclust_lambda: float = param(
        0.0,
        "0 with num-clusters 0: automatic cut (silhouette; modified); > 0: the paper's fixed cut height lambda, "
        "a Euclidean distance between final layers (the former default 1.0)",
        low=0.0,
        paper="a fixed lambda (Alg. 1)",
    )
    num_clusters: int = shared()
    linkage: str = shared()
    cluster_epochs: int = param(1, "epochs of training for the signal when cluster-steps is 0", low=1)
    cluster_steps: int = shared(low=0, help="0: fedclust-cluster-epochs epochs")
    sample_above: int = param(SAMPLE_ABOVE, SAMPLE_ABOVE_HELP, low=0, paper=SAMPLE_ABOVE_PAPER)

    def __post_init__(self) -> None:
        check_params(self, "FedClust")
        check_cut(self, "FedClust")


class FedClust(OneShotStrategy):
    """One-shot HC on trained final layers; newcomers join the nearest stored centroid.

    Attributes
    ----------
    centroids : ndarray of shape (K, C * d + C) or None
        Mean final-layer vector of each cluster, from the clustering round.
    """

    name = "fedclust"
    queries = (FinalLayer,)
    state_fields: ClassVar[frozenset[str]] = frozenset({"centroids", "newcomers"})
    placement_rule = (
        "FedClust Alg. 2: the final layer after training the initial model (query.head), the nearest cluster centroid"
    )
    params_type = FedClustParams

    def describe_distances(self) -> str:
        """What ``distance_matrix`` measures."""
        return "Euclidean distance of final layers"

    def __init__(self, training=None, params=None) -> None:
        super().__init__(training, params)
        self.centroids: np.ndarray | None = None
        self.newcomers: set[int] = set()

    def admit(self, server_round: int, newcomers: list[int]) -> None:
        """Note the newcomers (their accuracy is reported apart), then place them."""
        self.newcomers.update(newcomers)
        super().admit(server_round, newcomers)

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        """As every strategy's, and the newcomers' mean accuracy logged apart (Table 6)."""
        metrics = super().aggregate_evaluate(server_round, replies)
        details = self.run_details()
        if details.get("newcomer-accuracy") is not None:
            log(
                INFO,
                "round %d: newcomers' accuracy %.4f (%d clients), the others' %.4f",
                server_round,
                details["newcomer-accuracy"],
                details["newcomers"],
                details["resident-accuracy"],
            )
        return metrics

    def run_details(self) -> dict[str, Any]:
        """With late clients: the last evaluation's mean accuracy of the newcomers and of the others."""
        if not self.newcomers:
            return {}
        acc = {p: a for p, (a, _) in self.last_eval.items()}
        new = [acc[p] for p in sorted(self.newcomers) if p in acc]
        old = [a for p, a in acc.items() if p not in self.newcomers]
        return {
            "newcomers": len(self.newcomers),
            "newcomer-accuracy": float(np.mean(new)) if new else None,
            "resident-accuracy": float(np.mean(old)) if old else None,
        }

    @property
    def threshold(self) -> float:
        """The cut height ``fedclust-lambda``."""
        return self.params.fedclust_lambda

    def collect(self, pids: Sequence[int], server_round: int) -> dict[int, FinalLayer]:
        """Each client's final layer after ``fedclust-cluster-epochs`` of training the initial model."""
        outputs, features = self.head_shape()
        return self.query_signal(
            keys.FINAL_LAYER_ACTION,
            pids,
            server_round,
            FinalLayer.from_arrays,
            models=[self.initial_model],
            config={keys.CLUSTER_EPOCHS: self.params.cluster_epochs, keys.CLUSTER_STEPS: self.params.cluster_steps},
            outputs=outputs,
            features=features,
        )

    def cluster_signals(self, signals: Sequence[FinalLayer]) -> OneShotClusters:
        """Euclidean distances between the final-layer vectors, cut (``fedclust_clusters``)."""
        vectors = np.stack([s.vector() for s in signals])
        return fedclust_clusters(vectors, self.hc_cut, self.params.sample_above, self.training.seed)

    def on_clustered(self, pids: list[int], labels: np.ndarray) -> None:
        """Keep each cluster's mean final layer, for newcomers."""
        self.centroids = centroids(np.stack([self.signals[p].vector() for p in pids]), labels, len(self.models))

    def place(self, newcomers: list[int], server_round: int) -> dict[int, int]:
        """Alg. 2: train the initial model, upload the final layer, take the nearest centroid."""
        centres = self.require(self.centroids, "centroids", "the clustering round (cluster)")
        layers = self.collect(newcomers, server_round)
        got = sorted(layers)
        placed: dict[int, int] = {}
        if got:
            with self.clustering_timer():
                chosen = nearest(np.stack([layers[p].vector() for p in got]), centres)
            placed = {p: int(k) for p, k in zip(got, chosen, strict=True)}
        return placed
