"""FeSEM (Long et al., "Multi-center federated learning: clients clustering for better
personalization", World Wide Web 2023), implemented from its published description.

K centres in parameter space, one cluster model each. Every sampled client trains its cluster's
model; the server then puts the client in the cluster of the centre nearest its trained model by L2
distance (E-step, ``reply_cluster``) and moves each centre to the mean of its members' trained
models weighted by ``num-examples`` (M-step: the base's cluster aggregation). With ``fesem-init``
"clients" (modified) every client trains the one initial model in round 1 (not the round's fraction:
a seeding from 2 of 10 clients left the others in random clusters, which the L2 E-step keeps), for
``cluster-steps`` mini-batches (modified, FL+HC's clustering signal; 0 = ``local-epochs`` epochs,
the former seeding), and the centres are seeded from those trained models: with ``num-clusters`` K
by k-means++ with the run's generator, then refined (``common.clustering.fesem``); with
``num-clusters`` 0 (not given) K is chosen by the automatic cut of the HC tree of the cosine
distances of their round-1 updates (trained minus initial model; ``fesem-auto-metric cosine``,
modified: an update's length follows its client's sample count, so Euclidean distances of the
trained models, ``euclidean``, split a group by size) (``automatic_labels``, the rule of FedClust,
PACFL and FL+HC; at most ``fesem-auto-max-clusters``, by default half the clients, modified: the
shared ``max-clusters`` 8 stopped a federation of 10 groups at 8), each centre its cluster's
weighted mean. FeSEM itself does not estimate K: the paper's K is ``--num-clusters K``. With
"random" (the paper's random initialisation) the K centres (``num-clusters``, or ``max-clusters``
when 0) are the initial model and K - 1 seeded redraws at its scale, with a seeded random
assignment.
"""

from __future__ import annotations

from dataclasses import dataclass
from logging import INFO
from typing import ClassVar

import numpy as np
from flwr.app import Array, ArrayRecord, RecordDict
from flwr.common import log

from common import keys
from common.clustering import kmodels
from common.clustering.fesem import fesem_clusters, nearest_centres, update_centres
from common.clustering.hierarchical import (
    AUTO_LIMIT_HELP,
    auto_cut,
    automatic_max_clusters,
    check_auto_max_clusters,
    pairwise_distances,
    undecided_reason,
)
from common.clustering.similarity import sketch_rows, unit_rows
from common.clustering.subspaces import SAMPLE_SIZE
from common.params import check_params, param, run_config_key, shared

from .base import ClusteredStrategy
from .flat import flat, from_flat
from .replies import TrainUpdate

OWNER = "FeSEM"
INITS = ("clients", "random")
AUTO_METRICS = ("cosine", "euclidean")
"""What the automatic K cuts: ``cosine`` distances of the round-1 updates (trained model minus the
initial model; modified), or ``euclidean`` distances of the trained models (umbel's former rule)."""


@dataclass(frozen=True)
class FeSEMParams:
    """``num-clusters`` K (0: automatic with ``fesem-init clients``, at most ``fesem-auto-max-clusters``;
    ``max-clusters`` with random), ``fesem-init`` in {clients, random}."""

    key_prefix: ClassVar[str] = "fesem"
    num_clusters: int = shared(low=0)
    max_clusters: int = shared(low=2, help="with num-clusters 0 and fesem-init random: K")
    init: str = param(
        "clients",
        "the K initial centres: clients (modified) = every client trains in round 1, K from the automatic cut "
        "of those models (num-clusters 0) or k-means++ on them, seeded; "
        "random = the initial model and K-1 seeded redraws (the paper's random initialisation)",
        choices=INITS,
        paper="random",
    )
    auto_metric: str = param(
        AUTO_METRICS[0],
        "with num-clusters 0: the automatic K cuts cosine distances of the clients' round-1 updates (modified: "
        "an update's size follows its client's sample count, its direction its labels) or euclidean distances "
        "of their trained models",
        choices=AUTO_METRICS,
    )
    cluster_steps: int = shared(
        low=0,
        help="with fesem-init clients: mini-batches each client trains in the seeding round, whose models are the "
        "clustering signal (modified); 0: local-epochs epochs (the former seeding)",
    )
    auto_max_clusters: int = param(
        0,
        "with num-clusters 0 and fesem-init clients: the most clusters the automatic K keeps; "
        f"{AUTO_LIMIT_HELP} (modified: every cluster two clients on average; former cap: max-clusters, 8)",
        low=0,
    )

    def __post_init__(self) -> None:
        check_params(self, OWNER)
        check_auto_max_clusters(self.auto_max_clusters, run_config_key(type(self), "auto_max_clusters"), OWNER)

    @property
    def k(self) -> int:
        """The number of centres FeSEM keeps when K is not chosen automatically."""
        return self.num_clusters or self.max_clusters

    def auto_limit(self, num_clients: int) -> int:
        """The most clusters the automatic K keeps among ``num_clients`` (``automatic_max_clusters``)."""
        return automatic_max_clusters(num_clients, self.auto_max_clusters)

    @property
    def automatic(self) -> bool:
        """Whether K is chosen from the first round's trained models (``num-clusters`` 0, init clients)."""
        return self.num_clusters == 0 and self.init == "clients"


def automatic_labels(
    points: np.ndarray,
    max_clusters: int,
    seed: int,
    origin: np.ndarray | None = None,
    metric: str = "euclidean",
) -> np.ndarray:
    """Clusters of the clients' trained models by the automatic cut (``auto_cut``, average linkage) of
    their ``metric`` distances, at most ``max_clusters``; one cluster when no cut shows structure.

    With ``origin`` (the model every client started from, flat) the rows cut are the updates
    ``points - origin``; ``metric`` ``cosine`` then compares their directions only (an update's
    norm grows with its client's sample count). Above ``SAMPLE_SIZE`` points the cut is of a sample
    drawn with ``seed`` and every other point joins the nearest sample cluster's mean (its
    ``metric``); vectors too large to hold N x d are count-sketched (``sketch_rows``), which keeps
    Euclidean distances and cosines approximately.
    """
    rng = np.random.default_rng(seed)
    n = len(points)
    sample = np.arange(n) if n <= SAMPLE_SIZE else np.sort(rng.choice(n, SAMPLE_SIZE, replace=False))
    rows = sketch_rows(points[sample] if origin is None else points[sample] - origin, seed)
    if metric == "cosine":  # 1 - cos as half the squared distance of unit rows: finite for a zero update
        distances = pairwise_distances(unit_rows(rows), "sqeuclidean") / 2.0
    else:
        distances = pairwise_distances(rows, metric)
    labels, _ = auto_cut(distances, max_clusters=max_clusters)
    if labels.max() == 0:
        log(INFO, "FeSEM: automatic K keeps one cluster: %s", undecided_reason(distances))
    if n <= SAMPLE_SIZE:
        return labels
    start = np.zeros((int(labels.max()) + 1, points.shape[1]))
    if origin is None or metric != "cosine":
        centres = update_centres(points[sample], labels, np.ones(len(sample)), start)
        return np.unique(nearest_centres(points, centres), return_inverse=True)[1]  # no cluster left empty
    # cosine: the nearest mean direction (unit rows and unit centres: L2 order is cosine order)
    centres = unit_rows(update_centres(unit_rows(points[sample] - origin), labels, np.ones(len(sample)), start))
    joined = np.concatenate(
        [nearest_centres(unit_rows(points[lo : lo + CHUNK] - origin), centres) for lo in range(0, n, CHUNK)]
    )
    return np.unique(joined, return_inverse=True)[1]


CHUNK = 4096
"""Rows made into unit updates at a time when the clients above the sample join their clusters."""


class FeSEM(ClusteredStrategy):
    """K centres; each reply joins the centre nearest its trained model; centres are their members' mean."""

    name = "fesem"
    params_type = FeSEMParams
    state_fields: ClassVar[frozenset[str]] = frozenset({"seeded"})
    transient = ClusteredStrategy.transient | {"_centres", "_nearest"}

    def __init__(self, training=None, params=None) -> None:
        super().__init__(training, params)
        self._centres: tuple[int, np.ndarray] | None = None  # (round, the round's centres, flat), a cache
        self._nearest: dict[int, int] = {}  # this round's E-step, by partition id
        self.seeded = False  # whether the K centres exist (with fesem-init clients: after round 1's replies)

    def init_clusters(self, initial: ArrayRecord) -> None:
        """With ``fesem-init`` random K seeded centres and a random assignment; with clients one model first."""
        if self.params.init == "clients":
            self.set_clusters([initial], dict.fromkeys(self.clients, 0))
            self.seeded = self.params.k == 1
            return
        arrays = {name: a.numpy() for name, a in initial.items()}
        models = [initial.copy()] + [
            ArrayRecord({n: Array(a) for n, a in kmodels.redraw_like(arrays, self.rng).items()})
            for _ in range(self.params.k - 1)
        ]
        self.set_clusters(models, kmodels.random_partition(sorted(self.clients), self.params.k, self.rng))
        self.seeded = True

    def sample(self, server_round: int) -> list[int]:
        """Every client while the centres are seeded from trained models (``fesem-init clients``,
        modified: from all clients, not the round's fraction); then the base's seeded draw."""
        if not self.seeded and self.params.init == "clients":
            return sorted(pid for pid in self.clients if pid in self.assignment)
        return super().sample(server_round)

    def client_config(self, server_round: int, partition_id: int) -> dict[str, int]:
        """The seeding round trains ``cluster-steps`` mini-batches (its models are the clustering
        signal: clients of very different sizes train equally long); later rounds, ``local-epochs``."""
        if not self.seeded and self.params.init == "clients" and self.params.cluster_steps > 0:
            return {keys.CLUSTER_STEPS: self.params.cluster_steps}
        return {}

    def reply_cluster(self, server_round: int, partition_id: int, content: RecordDict, update: TrainUpdate) -> int:
        """E-step: the centre nearest the client's trained model (L2), from its checked ``update``."""
        sent = super().reply_cluster(server_round, partition_id, content, update)
        if not self.seeded or len(self.models) == 1:
            return sent
        if self._centres is None or self._centres[0] != server_round:
            centres = [flat({n: a.numpy() for n, a in model.items()}) for model in self.models]
            self._centres = (server_round, np.stack(centres))
        with self.clustering_timer():
            self._nearest[partition_id] = int(nearest_centres(flat(update.arrays)[None, :], self._centres[1])[0])
        return self._nearest[partition_id]

    def after_train(self, server_round: int, updates: dict[int, TrainUpdate]) -> None:
        """Each client that replied joins its centre; the first round's replies seed the K centres."""
        if self.seeded or not updates:
            self.assignment.update({pid: self._nearest[pid] for pid in updates if pid in self._nearest})
            self._nearest = {}
            return
        pids = sorted(updates)
        points = np.stack([flat(updates[p].arrays) for p in pids])
        weights = np.array([updates[p].num_examples for p in pids], dtype=np.float64)
        with self.clustering_timer():
            if self.params.automatic:
                labels = automatic_labels(
                    points,
                    self.params.auto_limit(len(pids)),
                    self.training.seed,
                    origin=flat(sent) if (sent := updates[pids[0]].sent) is not None else None,
                    metric=self.params.auto_metric,
                )
                k = total = int(labels.max()) + 1
                centres = update_centres(points, labels, weights, np.zeros((k, points.shape[1])))
                log(INFO, "FeSEM: automatic K = %d from %d clients' trained models", k, len(pids))
            else:
                k, total = min(self.params.k, len(pids)), self.params.k
                found = fesem_clusters(points, k, self.rng, weights)
                labels, centres = found.labels, found.centres
        template = self.models[0]
        models = [
            self.aggregate_cluster(j, [updates[p] for p, label in zip(pids, labels, strict=True) if label == j])
            if (labels == j).any()
            else from_flat(template, centres[j])
            for j in range(k)
        ]
        # Centres beyond the replies' number (fewer replies than K) start from the round's mean model.
        models += [template.copy() for _ in range(total - k)]
        others = sorted(set(self.assignment) - set(pids))
        assignment = {p: int(label) for p, label in zip(pids, labels, strict=True)}
        assignment.update(kmodels.random_partition(others, total, self.rng) if others else {})
        self.set_clusters(models, assignment)
        self.seeded = True
