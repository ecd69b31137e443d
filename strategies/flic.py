"""FLIC: federated learning with incremental clustering (Espinoza Castellon et al., IJCNN 2022, Alg. 1).

Plain FedAvg rounds; the server keeps an update of every client it has sampled and the
similarity ``S = 1 + cos`` (Eq. 7), refreshing only the rows of this round's clients
(``common.clustering.similarity``; ``sketch-dim`` > 0 stores a seeded projection instead of the
full update). ``flic-graph summed`` (the default, modified) keeps each client's sum of its updates
so far; ``last`` its latest update, the paper's. On small clients (about 100 samples) one update,
made from one round's global model, holds its client's group weakly; the sum of five does
(docs/results/selection.md, "What changed in the defaults"). At the clustering round, Louvain
communities of the graph of ``S`` among the clients seen so far become clusters, each starting
from the current global model; FedAvg then runs per cluster. The graph costs no extra
communication: updates ride on train replies.

Clustering round (``flic-cluster-round``): a given round ``c`` clusters before round ``c``'s
training, with the updates of rounds ``1..c-1``. ``0`` (default) means "when FedAvg has
stabilised": after the first round at which the mean training loss of the last
``STABLE_PATIENCE`` rounds fell, from the ``STABLE_PATIENCE`` rounds before, by less than
``flic-stable-tol`` times the fall between the first two such windows (``loss_plateau``), and at
the latest before round ``rounds // 2 + 1``, and not before the clients have sent
``flic-min-updates`` updates each on average (``rounds_for_updates``: from ``fraction`` and the
number of clients; umbel's modification, 5 by default, the paper's Fig. 5 point; 0 the plateau
alone). The paper's settings are ``--flic-graph last --flic-min-updates 0`` (or
``--flic-cluster-round T``). The relative change of the global model is no such test: at a fixed
learning rate it stays near its first value.

``flic-resolution`` 0 (default) picks Louvain's resolution per clustering: the partition with the
best silhouette on ``1 - cos`` over resolutions 0.5..2.0 (``common.clustering.flic``: at a
fixed resolution, modularity merges groups whose mutual cosine exceeds about the federation's
mean cosine, e.g. rotation's 0 and 180 degrees); a value > 0 fixes it. ``flic-tolerance`` > 0
keeps instead the partition with the most communities within that much silhouette of the best
(the one-shot automatic cut's rule); measured and not adopted (docs/results/selection.md).

Clients outside the graph (never sampled before clustering, and newcomers) send one update
of the model Louvain clustered on (``query.update``, clustering-signal bytes) and join the
community Louvain's local-moving step would give them (largest modularity gain, the others
fixed). The paper instead evaluates the cluster models on their data; that cannot tell an
attacker, whose data is clean, from a loyal client. After clustering, ``S`` is frozen.
"""

from __future__ import annotations

from dataclasses import dataclass
from logging import INFO, WARNING
from typing import Any, ClassVar

import numpy as np
from flwr.app import ArrayRecord
from flwr.common import log

from common import keys
from common.clustering.flic import clustering_round, join_by_modularity, loss_plateau, rounds_for_updates
from common.clustering.blocks import CHUNK
from common.clustering.sampled import SAMPLE_ABOVE, SAMPLE_ABOVE_HELP, SAMPLE_ABOVE_PAPER, sampled_flic
from common.clustering.similarity import UpdateSimilarity
from common.params import check_params, param
from common.config import TrainingParams
from common.signals.update import ModelUpdate
from common.params import shared

from .base import ClusteredStrategy
from .batches import QUERY_BATCH, in_batches
from .fedavg import FedAvg
from .flat import float_size
from .replies import TrainUpdate
from .updates import StoredUpdates

STABLE_PATIENCE = 3
SUMMED, LAST = "summed", "last"
GRAPHS = (SUMMED, LAST)
"""``flic-graph``: each client's sum of its updates so far, or its latest update (the paper's)."""


@dataclass(frozen=True)
class FLICParams:
    """``cluster_round`` >= 0 (0: automatic), ``min_updates`` >= 0 (the automatic round's wait),
    ``resolution`` >= 0 (0: by silhouette within ``tolerance``, in [0, 1)), ``sketch_dim`` >= 0
    (0: full updates), ``stable_tol`` > 0, ``sample_above`` >= 0 (more clients seen: Louvain on a
    sample's graph, the rest by modularity gain, ``sampled.sampled_flic``; 0: exact); keys
    ``flic-*`` but the shared ``sketch-dim``.
    """

    key_prefix: ClassVar[str] = "flic"
    cluster_round: int = param(
        0,
        "the clustering round; 0: once the training loss plateaus (flic-stable-tol), at the latest rounds // 2 + 1",
        low=0,
        paper="a round given by hand",
    )
    min_updates: float = param(
        5.0,
        "with flic-cluster-round 0: the clustering also waits until the clients have sent this many updates each "
        "on average (rounds * sampled / clients), at the latest rounds // 2 + 1 (modified; the paper's Fig. 5 "
        "finds the right clusters after about 5); 0 = the loss plateau alone",
        low=0.0,
        paper="0: once FedAvg has stabilised",
    )
    graph: str = param(
        SUMMED,
        "each client's update in the graph: summed (modified: the sum of its updates so far) or last (its "
        "latest update, the paper's Eq. 7)",
        choices=GRAPHS,
        paper=LAST,
    )
    resolution: float = param(0.0, "Louvain's resolution; 0 = the best silhouette over 0.5..2.0", low=0.0)
    tolerance: float = param(
        0.0,
        "with flic-resolution 0: the partition with the most communities whose silhouette is within this of the "
        "best; 0 = the best silhouette",
        low=0.0,
        high=1.0,
        closed=(True, False),
    )
    split_disagreeing: bool = param(
        False,
        "true: after Louvain, a client whose mean cosine to the rest of its community is below 0 forms a cluster "
        "alone (a one-client group); false: Louvain's communities as they are",
        paper="false: Louvain's communities",
    )
    sketch_dim: int = shared(low=0)
    stable_tol: float = param(
        0.1,
        "plateau: the last 3 rounds lowered the mean training loss by less than "
        "flic-stable-tol times the first 3 rounds did; > 0",
        low=0.0,
        closed=(False, True),
    )
    sample_above: int = param(SAMPLE_ABOVE, SAMPLE_ABOVE_HELP, low=0, paper=SAMPLE_ABOVE_PAPER)

    def __post_init__(self) -> None:
        check_params(self, "FLIC")


class FLIC(StoredUpdates, ClusteredStrategy):  # type: ignore[misc, override]  # distances computed on demand
    """FedAvg, then Louvain on the incremental update similarity, then FedAvg per cluster.

    Attributes
    ----------
    similarity : UpdateSimilarity or None
        Latest update per client seen before clustering (then frozen, plus joined clients).
    train_loss : list of float
        Mean training loss (weighted by examples) of each round before clustering.
    clustered_at : int or None
        The round whose training first ran per cluster.
    clustering_similarity : (list of int, ndarray of shape (n, n)) or None
        The clients Louvain clustered and their ``S`` at that moment.
    resolution : float or None
        The resolution Louvain used.
    joined : dict of int to int
        Round each client outside the graph joined in (by modularity gain).
    """

    name = "flic"
    queries = (ModelUpdate,)
    state_fields: ClassVar[frozenset[str]] = frozenset(
        {
            "_labels",
            "_reference",
            "_stable_since",
            "clustered_at",
            "clustering_similarity",
            "joined",
            "resolution",
            "similarity",
            "train_loss",
        }
    )
    placement_rule = (
        "FLIC: the client's update of the clustered model (query.update), the cluster of largest modularity gain"
    )
    params_type = FLICParams
    round_params: ClassVar[dict[str, int]] = {"cluster_round": 0}
    join_batch: ClassVar[int] = QUERY_BATCH

    def describe_distances(self) -> str:
        """What ``distance_matrix`` measures."""
        return "cosine distance 1 - cos of updates"

    def __init__(self, training: TrainingParams | None = None, params: FLICParams | None = None) -> None:
        super().__init__(training, params)
        self.similarity: UpdateSimilarity | None = None
        self.train_loss: list[float] = []
        self.clustered_at: int | None = None
        self._stable_since: int | None = None
        self.clustering_similarity: tuple[list[int], np.ndarray] | None = None
        self.resolution: float | None = None
        self.joined: dict[int, int] = {}
        self._labels: np.ndarray | None = None
        self._reference: ArrayRecord | None = None

    def phase(self, server_round: int) -> str:
        """``fedavg`` until the clustering round, ``cluster`` in it, ``train`` after."""
        if self.clustered_at is None or server_round < self.clustered_at:
            return FedAvg.name
        return "cluster" if server_round == self.clustered_at else "train"

    def before_round(self, server_round: int) -> None:
        """Cluster by Louvain once the loss plateaus (or in ``cluster-round``)."""
        if self.clustered_at is None and self._due(server_round):
            self._cluster(server_round)

    def _due(self, server_round: int) -> bool:
        if self.params.cluster_round:
            return server_round >= self.params.cluster_round
        return server_round >= clustering_round(self._stable_since, self.wait_rounds(), self.training.rounds)

    def wait_rounds(self) -> int:
        """Training rounds after which the clients have sent ``flic-min-updates`` updates each on average."""
        n = max(len(self.clients), 1)
        return rounds_for_updates(self.params.min_updates, n, self.training.num_sampled(n))

    def mean_updates(self, server_round: int) -> float:
        """Updates each client has sent on average before ``server_round``'s training."""
        n = max(len(self.clients), 1)
        return (server_round - 1) * self.training.num_sampled(n) / n

    def _cluster(self, server_round: int) -> None:
        similarity = self.similarity
        seen = [] if similarity is None else [p for p in similarity.pids if p in self.clients]
        if similarity is None or len(seen) < 2:
            log(WARNING, "round %d: FLIC has updates of %d clients; clustering postponed", server_round, len(seen))
            return
        with self.clustering_timer():
            labels, self.resolution, graph_pids, s = sampled_flic(
                similarity,
                seen,
                self.params.resolution,
                self.training.seed,
                self.params.sample_above,
                tolerance=self.params.tolerance,
                split=self.params.split_disagreeing,
            )
        row = {p: i for i, p in enumerate(seen)}
        graph_labels = labels[[row[p] for p in graph_pids]]
        self.clustering_similarity, self._labels = (graph_pids, s), graph_labels
        self._reference = self.models[0].copy()
        count = int(labels.max()) + 1
        self.set_clusters(
            [self.models[0].copy() for _ in range(count)], {pid: int(k) for pid, k in zip(seen, labels, strict=True)}
        )
        self.clustered_at = server_round
        if not self.params.cluster_round and server_round - 1 < self.wait_rounds():
            log(
                WARNING,
                "round %d: FLIC clusters at rounds // 2 + 1 on %.1f updates a client on average, fewer than "
                "flic-min-updates %g: raise rounds (or fraction) for a graph of %g updates a client",
                server_round,
                self.mean_updates(server_round),
                self.params.min_updates,
                self.params.min_updates,
            )
        unseen = sorted(set(self.clients) - set(seen))
        log(
            INFO,
            "round %d: FLIC Louvain (resolution %.2f) found %d clusters among %d clients seen (%d never sampled)",
            server_round,
            self.resolution,
            count,
            len(seen),
            len(unseen),
        )
        self.assignment.update(self._join(unseen, server_round))

    def admit(self, server_round: int, newcomers: list[int]) -> None:
        """Before clustering as every strategy; after, join by modularity gain."""
        if self.clustered_at is None:
            super().admit(server_round, newcomers)
        else:
            self.assignment.update(self._join(newcomers, server_round))

    def _join(self, pids: list[int], server_round: int) -> dict[int, int]:
        """Clusters of clients outside the graph, by the modularity gain of their update of the
        clustered model; the clients that do not reply are placed by train loss.

        The updates are asked ``join_batch`` clients at a time, each batch stored (sketched when
        the store sketches) and placed before the next is asked: every newcomer is placed alone,
        so the result is the one-query join's, with the server holding one batch of full updates.
        """
        if not pids:
            return {}
        hook = "the clustering (before_round)"
        reference = self.require(self._reference, "_reference", hook)
        similarity = self.require(self.similarity, "similarity", hook)
        similarity.reserve(len(pids))
        placed: dict[int, int] = {}
        for batch in in_batches(pids, self.join_batch):
            placed.update(self._join_batch(batch, reference, server_round))
        replied = len(placed)
        missing = sorted(set(pids) - set(placed))
        placed.update(self.assign_by_loss(missing, server_round))
        log(
            INFO,
            "round %d: FLIC placed %d clients outside the graph by modularity gain on an uploaded update "
            "(%d by train loss)",
            server_round,
            replied,
            len(missing),
        )
        return placed

    def _join_batch(self, pids: list[int], reference: ArrayRecord, server_round: int) -> dict[int, int]:
        """One batch of ``_join``: ask ``pids`` for an update of ``reference``; the repliers' clusters."""
        ups = self.query_signal(
            keys.UPDATE_ACTION,
            pids,
            server_round,
            ModelUpdate.from_arrays,
            models=[reference],
            size=float_size(reference),
        )
        replied = sorted(ups)
        if not replied:
            return {}
        hook = "the clustering (before_round)"
        seen, s = self.require(self.clustering_similarity, "clustering_similarity", hook)
        similarity = self.require(self.similarity, "similarity", hook)
        labelled = self.require(self._labels, "_labels", hook)
        resolution = self.require(self.resolution, "resolution", hook)
        with self.clustering_timer():
            similarity.update(replied, np.stack([ups.pop(p).delta for p in replied]))
            links = similarity.between(replied, seen)
            labels = join_by_modularity(links, s, labelled, resolution)
        self.joined.update(dict.fromkeys(replied, server_round))
        return {p: int(k) for p, k in zip(replied, labels, strict=True)}

    def run_details(self) -> dict[str, Any]:
        """The clustering round and how many clients joined by uploading a full update."""
        return {
            "clustered-at": self.clustered_at,
            "joined-by-upload": len(self.joined),
            "graph-clients": 0 if self._labels is None else len(self._labels),
            "train-loss-before-clustering": self.train_loss,
        }

    def after_train(self, server_round: int, updates: dict[int, TrainUpdate]) -> None:
        """Before clustering: store the updates and the round's mean train loss."""
        if not updates or self.clustered_at is not None:
            return
        pids = sorted(updates)
        with self.clustering_timer():
            for lo in range(0, len(pids), CHUNK):  # deltas never all held: 20,000 DNN updates are 12.7 GB
                part = pids[lo : lo + CHUNK]
                self.remember(
                    part,
                    [updates[p].delta() for p in part],
                    self.params.sketch_dim,
                    self.training.seed,
                    summed=self.params.graph == SUMMED,
                )
        self.train_loss.append(
            float(np.average([updates[p].loss for p in pids], weights=[max(updates[p].num_examples, 1) for p in pids]))
        )
        if loss_plateau(self.train_loss, STABLE_PATIENCE, self.params.stable_tol):
            self._stable_since = self._stable_since or server_round
