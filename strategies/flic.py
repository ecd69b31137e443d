"""FLIC: federated learning with incremental clustering (Espinoza Castellon et al., IJCNN 2022, Alg. 1).

Plain FedAvg rounds; the server keeps the latest update of every client it has sampled and
the similarity ``S = 1 + cos`` (Eq. 7), refreshing only the rows of this round's clients
(``common.clustering.similarity``; ``sketch-dim`` > 0 stores a seeded Gaussian projection
instead of the full update). At the clustering round, Louvain communities of the graph of
``S`` among the clients seen so far become clusters, each starting from the current global
model; FedAvg then runs per cluster. No extra communication: updates ride on train replies.

Clustering round (``cluster-round``): a given round ``c`` clusters before round ``c``'s
training, with the updates of rounds ``1..c-1``. ``0`` (default) means "when FedAvg has
stabilised": after the first ``STABLE_PATIENCE`` consecutive rounds whose relative change of
the global model ``||w_t - w_{t-1}|| / ||w_{t-1}||`` is below ``stable-tol``, and at the
latest before round ``rounds // 2 + 1``.

Clients never sampled before clustering wait until every cluster model has trained once
since clustering (at most ``UNSEEN_WAIT`` rounds, the paper's T_f), then join the cluster
whose model has the lowest loss on their TRAIN split; newcomers join the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from logging import INFO, WARNING

import numpy as np
from flwr.app import ArrayRecord
from flwr.common import log

from common.clustering.louvain import louvain_labels
from common.clustering.similarity import UpdateSimilarity
from common.validation import check_float, check_int

from .base import ClusteredStrategy
from .replies import TrainUpdate
from .updates import StoredUpdates

STABLE_PATIENCE = 3
UNSEEN_WAIT = 5


@dataclass(frozen=True)
class FLICParams:
    """``cluster_round`` >= 0 (0: automatic), ``resolution`` > 0, ``sketch_dim`` >= 0 (0: full updates),
    ``stable_tol`` > 0."""

    cluster_round: int = 0
    resolution: float = 1.0
    sketch_dim: int = 0
    stable_tol: float = 0.01

    def __post_init__(self) -> None:
        object.__setattr__(self, "cluster_round", check_int(self.cluster_round, "cluster-round", "FLIC", low=0))
        object.__setattr__(self, "resolution", check_float(self.resolution, "resolution", "FLIC", low=0.0,
                                                           closed=(False, True)))
        object.__setattr__(self, "sketch_dim", check_int(self.sketch_dim, "sketch-dim", "FLIC", low=0))
        object.__setattr__(self, "stable_tol", check_float(self.stable_tol, "stable-tol", "FLIC", low=0.0,
                                                           closed=(False, True)))


def flat_floats(arrays: dict[str, np.ndarray]) -> np.ndarray:
    """Every floating array of a model, flattened and concatenated: shape (d,), float64."""
    return np.concatenate([a.astype(np.float64).ravel() for a in arrays.values()
                           if np.issubdtype(a.dtype, np.floating)])


class FLIC(StoredUpdates, ClusteredStrategy):
    """FedAvg, then Louvain on the incremental update similarity, then FedAvg per cluster.

    Attributes
    ----------
    similarity : UpdateSimilarity or None
        Latest update per client seen and ``S`` among them.
    global_change : list of float
        Relative change of the global model each round before clustering.
    clustered_at : int or None
        The round whose training first ran per cluster.
    clustering_similarity : (list of int, ndarray of shape (n, n)) or None
        The clients Louvain clustered and their ``S`` at that moment.
    """

    name = "flic"
    params_type = FLICParams

    def init_clusters(self, initial: ArrayRecord) -> None:
        super().init_clusters(initial)
        self.similarity: UpdateSimilarity | None = None
        self.global_change: list[float] = []
        self.clustered_at: int | None = None
        self.unseen: list[int] = []
        self._trained: set[int] = set()
        self._stable_since: int | None = None
        self.clustering_similarity: tuple[list[int], np.ndarray] | None = None

    def phase(self, server_round: int) -> str:
        if self.clustered_at is None or server_round < self.clustered_at:
            return "fedavg"
        return "cluster" if server_round == self.clustered_at else "train"

    def before_round(self, server_round: int) -> None:
        if self.clustered_at is None and self._due(server_round):
            self._cluster(server_round)
        elif self.unseen and (len(self._trained) == len(self.models) or server_round == self.training.rounds
                              or server_round >= self.clustered_at + UNSEEN_WAIT):
            self.assignment.update(self.assign_by_loss(self.unseen, server_round))
            log(INFO, "round %d: FLIC assigned %d never-sampled clients by train loss", server_round,
                len(self.unseen))
            self.unseen = []

    def _due(self, server_round: int) -> bool:
        if self.params.cluster_round:
            return server_round >= self.params.cluster_round
        return self._stable_since is not None or server_round >= self.training.rounds // 2 + 1

    def _cluster(self, server_round: int) -> None:
        seen = [] if self.similarity is None else [p for p in self.similarity.pids if p in self.clients]
        if len(seen) < 2:
            log(WARNING, "round %d: FLIC has updates of %d clients; clustering postponed", server_round, len(seen))
            return
        with self.clustering_timer():
            labels = louvain_labels(self.similarity.matrix(seen), self.params.resolution, self.training.seed)
        self.clustering_similarity = (seen, self.similarity.matrix(seen))
        count = int(labels.max()) + 1
        self.set_clusters([self.models[0].copy() for _ in range(count)],
                          {pid: int(k) for pid, k in zip(seen, labels, strict=True)})
        self.unseen = sorted(set(self.clients) - set(seen))
        self.clustered_at = server_round
        log(INFO, "round %d: FLIC Louvain found %d clusters among %d clients seen (%d never sampled)",
            server_round, count, len(seen), len(self.unseen))

    def after_train(self, server_round: int, updates: dict[int, TrainUpdate]) -> None:
        if not updates:
            return
        pids = sorted(updates)
        with self.clustering_timer():
            self.remember(pids, np.stack([updates[p].delta() for p in pids]), self.params.sketch_dim,
                          self.training.seed)
        if self.clustered_at is not None:
            self._trained.update(self.assignment[p] for p in pids)
            return
        before = flat_floats(updates[pids[0]].sent)
        after = flat_floats({n: a.numpy() for n, a in self.models[0].items()})
        change = float(np.linalg.norm(after - before) / max(np.linalg.norm(before), 1e-12))
        self.global_change.append(change)
        recent = self.global_change[-STABLE_PATIENCE:]
        if len(recent) == STABLE_PATIENCE and max(recent) < self.params.stable_tol:
            self._stable_since = self._stable_since or server_round

