"""One-shot clustering: every client sends a signal once, HC cuts the distance matrix, then
clustered training (FedClust, Islam et al. 2024, Alg. 1; PACFL, Vahidian et al. AAAI 2023;
FL+HC, Briggs et al. IJCNN 2020).

Subclasses say which signal they collect (``collect``), how they cluster the signals
(``cluster_signals``: their pure step in ``common.clustering.oneshot``, given ``hc_cut``), the
cut height (``threshold``) and the model every cluster starts from (``start_model``). The
shared run-config keys are ``num-clusters`` (0 = cut at the threshold) and ``linkage``. With the
threshold and ``num-clusters`` both 0 the cut is chosen without tuning (beyond the papers): the
cut with the most clusters whose silhouette is within 0.02 of the best (``auto_cut``), logged.
"""

from __future__ import annotations

from collections.abc import Sequence
from logging import INFO, WARNING
from typing import Any, ClassVar

import numpy as np
from flwr.app import ArrayRecord
from flwr.common import log

from common.clustering.hierarchical import LINKAGES, undecided_reason
from common.clustering.oneshot import Cut, OneShotClusters
from common.metrics import cluster_sizes
from common.validation import check_choice, check_int

from .base import ClusteredStrategy


def check_cut(params: Any, owner: str) -> None:
    """Validate the shared ``num_clusters`` (>= 0) and ``linkage`` fields of a frozen params dataclass."""
    object.__setattr__(params, "num_clusters", check_int(params.num_clusters, "num-clusters", owner, low=0))
    object.__setattr__(params, "linkage", check_choice(params.linkage, "linkage", owner, LINKAGES))


class OneShotStrategy(ClusteredStrategy):
    """Cluster all current clients once, before training round ``clustering_round()``.

    Attributes
    ----------
    distance_matrix : ndarray of shape (N, N) or None
        The clustered clients' distances (drawn as ``distances.png``).
    distance_pids : list of int
        Partition ids of its rows.
    signals : dict of int to signal
        The clustered clients' signals, kept for newcomers.
    """

    name = "one-shot"
    state_fields: ClassVar[frozenset[str]] = frozenset({"auto_silhouette", "clustered", "pending", "signals"})
    # Whether placing newcomers (or on_clustered) reads ``signals``; if not, they are dropped after clustering.
    keeps_signals: ClassVar[bool] = True

    def __init__(self, training: Any = None, params: Any = None) -> None:
        super().__init__(training, params)
        self.distance_matrix: np.ndarray | None = None
        self.distance_pids: list[int] = []
        self.signals: dict[int, Any] = {}
        self.clustered = False
        self.pending: set[int] = set()
        self.auto_silhouette: float | None = None

    # --------------------------------------------------------------- what subclasses say
    def collect(self, pids: Sequence[int], server_round: int) -> dict[int, Any]:
        """The checked signals of ``pids`` (missing = failed or rejected)."""
        raise NotImplementedError

    def cluster_signals(self, signals: Sequence[Any]) -> OneShotClusters:
        """Labels (and the distance matrix cut) of the clients that sent ``signals``, cut as ``hc_cut``."""
        raise NotImplementedError

    @property
    def threshold(self) -> float:
        """The cut height when ``num-clusters`` is 0."""
        raise NotImplementedError

    def start_model(self) -> ArrayRecord:
        """The model every cluster starts from (default: the initial model)."""
        return self.initial_model

    def clustering_round(self) -> int:
        """The round whose start runs the clustering (default 1)."""
        return 1

    # --------------------------------------------------------------- hooks
    def before_round(self, server_round: int) -> None:
        """Cluster once when due; afterwards, ask the clients without a signal again."""
        if not self.clustered and server_round >= self.clustering_round():
            self.cluster(server_round)
        elif self.pending:
            self._place_or_wait(sorted(self.pending), server_round)

    def phase(self, server_round: int) -> str:
        """``warmup`` before the clustering round, ``cluster`` in it, ``train`` after."""
        if server_round < self.clustering_round():
            return "warmup"
        return "cluster" if server_round == self.clustering_round() else "train"

    def admit(self, server_round: int, newcomers: list[int]) -> None:
        """Before clustering, newcomers wait in cluster 0 and are clustered with everyone."""
        if not self.clustered:
            self.assignment.update(dict.fromkeys(newcomers, 0))
            return
        self._place_or_wait(newcomers, server_round)

    def place(self, newcomers: list[int], server_round: int) -> dict[int, int]:
        """Clusters for clients that join after clustering (default: lowest train loss).

        Clients left out of the result (no signal) wait in the largest cluster and are asked again.
        """
        return self.assign_by_loss(newcomers, server_round)

    def _place_or_wait(self, pids: list[int], server_round: int) -> None:
        placed = self.place(pids, server_round)
        self.assignment.update(placed)
        self._wait(sorted(set(pids) - set(placed)), server_round)
        self.pending -= set(placed)

    def _wait(self, pids: list[int], server_round: int) -> None:
        if not pids:
            return
        largest = int(np.argmax(cluster_sizes(self.assignment, len(self.models))))
        for pid in pids:
            log(
                WARNING,
                "round %d: client %d sent no clustering signal; it trains with the largest cluster %d "
                "and is asked again next round",
                server_round,
                pid,
                largest,
            )
            self.assignment[pid] = largest
        self.pending |= set(pids)

    # --------------------------------------------------------------- the clustering
    def cluster(self, server_round: int) -> None:
        """Collect every client's signal, cut the HC tree, restart each cluster from ``start_model``."""
        pids = sorted(self.clients)
        signals = self.collect(pids, server_round)
        got = sorted(signals)
        if not got:
            log(WARNING, "round %d: no client sent a clustering signal; clustering again next round", server_round)
            return
        with self.clustering_timer():
            labels = self.cluster_labels([signals[pid] for pid in got])
        assignment = {pid: int(k) for pid, k in zip(got, labels, strict=True)}
        start = self.start_model()
        self.set_clusters([start.copy() for _ in range(int(labels.max()) + 1)], assignment)
        self._wait(sorted(set(pids) - set(got)), server_round)
        self.signals = signals if self.keeps_signals else {}
        self.distance_pids, self.clustered = got, True
        self.on_clustered(got, labels)
        log(
            INFO,
            "round %d: %s formed %d clusters, sizes %s",
            server_round,
            type(self).__name__,
            self.num_clusters,
            cluster_sizes(self.assignment, len(self.models)),
        )

    @property
    def hc_cut(self) -> Cut:
        """The cut: ``num-clusters``, else the threshold; both 0: the automatic cut."""
        return Cut(self.threshold, self.params.num_clusters, self.params.linkage)

    def cluster_labels(self, signals: Sequence[Any]) -> np.ndarray:
        """Labels of the clients that sent ``signals`` (``cluster_signals``); the matrix cut is kept in
        ``distance_matrix``, the automatic cut's silhouette in ``auto_silhouette``.
        """
        found = self.cluster_signals(signals)
        self.distance_matrix = found.distances
        if self.hc_cut.automatic:
            self.auto_silhouette = found.silhouette
            if found.silhouette is None:
                log(
                    WARNING,
                    "%s's automatic cut cannot decide (%s): all %d clients stay in one cluster; set num-clusters "
                    "or a threshold to split them",
                    type(self).__name__,
                    undecided_reason(found.distances),
                    len(found.labels),
                )
            else:
                log(
                    INFO,
                    "automatic cut (threshold and num-clusters 0): %d clusters, silhouette %.3f",
                    int(found.labels.max()) + 1,
                    found.silhouette,
                )
        return found.labels

    def on_clustered(self, pids: list[int], labels: np.ndarray) -> None:
        """Called once after clustering with the clustered clients and their labels."""
