"""FeSEM (Long et al., "Multi-center federated learning: clients clustering for better
personalization", World Wide Web 2023), implemented from its published description.

K centres in parameter space, one cluster model each. Every sampled client trains its cluster's
model; the server then puts the client in the cluster of the centre nearest its trained model
by L2 distance (E-step, ``reply_cluster``) and moves each centre to the mean of its members'
trained models weighted by ``num-examples`` (M-step: the base's cluster aggregation). With
``fesem-init`` "clients" (modified) the first round trains one shared model and the K centres
are seeded from the clients' trained models by k-means++ with the run's generator, then refined
(``common.clustering.fesem``); clients not sampled in that round get a seeded random cluster
until they are. With "random" (the paper's random initialisation) the K centres are the
initial model and K - 1 seeded redraws at its scale, with a seeded random assignment.
``num-clusters`` 0 (not given) means ``max-clusters`` centres: FeSEM does not estimate K.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from flwr.app import Array, ArrayRecord, RecordDict

from common.clustering import kmodels
from common.clustering.fesem import fesem_clusters, nearest_centres
from common.params import shared
from common.params import check_params, param

from .base import ClusteredStrategy
from .flat import flat, from_flat
from .replies import TrainUpdate

OWNER = "FeSEM"
INITS = ("clients", "random")


@dataclass(frozen=True)
class FeSEMParams:
    """``num-clusters`` K (0: ``max-clusters``), ``fesem-init`` in {clients, random}."""

    key_prefix: ClassVar[str] = "fesem"
    num_clusters: int = shared(0, low=0)
    max_clusters: int = shared(8, low=2, help="K when num-clusters is 0")
    init: str = param(
        "clients",
        "the K initial centres: clients (modified) = k-means++ on the first round's trained models, seeded; "
        "random = the initial model and K-1 seeded redraws (the paper's random initialisation)",
        choices=INITS,
        paper="random",
    )

    def __post_init__(self) -> None:
        check_params(self, OWNER)

    @property
    def k(self) -> int:
        """The number of centres FeSEM keeps."""
        return self.num_clusters or self.max_clusters


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
        k = min(self.params.k, len(pids))
        with self.clustering_timer():
            found = fesem_clusters(
                np.stack([flat(updates[p].arrays) for p in pids]),
                k,
                self.rng,
                np.array([updates[p].num_examples for p in pids], dtype=np.float64),
            )
        template = self.models[0]
        models = [
            self.aggregate_cluster(j, [updates[p] for p, label in zip(pids, found.labels, strict=True) if label == j])
            if (found.labels == j).any()
            else from_flat(template, found.centres[j])
            for j in range(k)
        ]
        # Centres beyond the replies' number (fewer replies than K) start from the round's mean model.
        models += [template.copy() for _ in range(self.params.k - k)]
        others = sorted(set(self.assignment) - set(pids))
        assignment = {p: int(label) for p, label in zip(pids, found.labels, strict=True)}
        assignment.update(kmodels.random_partition(others, self.params.k, self.rng) if others else {})
        self.set_clusters(models, assignment)
        self.seeded = True
