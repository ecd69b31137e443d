"""Sattler's clustered FL (Sattler, Mueller and Samek, IEEE TNNLS 32(8), 2021, Alg. 1).

FedAvg inside each cluster; after each round, a cluster whose sampled members' mean update
is small (``||mean update|| < eps1``: the joint objective is near a stationary point) while
one member still moves far (``max ||update|| > eps2``), with more than 2 members and after
round ``split-after``, is split in two by complete linkage on ``1 - cos`` of its members'
latest updates (``common.clustering.bipartition``). Defaults are the reference code's
(felisat/clustered-federated-learning): eps1 0.4, eps2 1.6, after round 20.

As in the reference, both halves start from the cluster's pre-round model plus the average
update of their own members of this round. With partial participation (``fraction`` < 1,
the reference samples everyone) the split uses each member's latest stored update, and a
member never sampled yet joins the larger half. Positions inside a sub-cluster are mapped
back to partition ids (the reference code's pitfall; tested).
"""

from __future__ import annotations

from dataclasses import dataclass
from logging import INFO, WARNING
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord
from flwr.common import log

from common.clustering.bipartition import should_split, split_cluster, update_norms
from common.clustering.similarity import UpdateSimilarity
from common.validation import check_float, check_int

from .base import ClusteredStrategy
from .replies import TrainUpdate
from .updates import StoredUpdates


@dataclass(frozen=True)
class CFLSattlerParams:
    """``eps1`` > 0, ``eps2`` > 0, ``split_after`` >= 0, ``sketch_dim`` >= 0 (0: full updates)."""

    eps1: float = 0.4
    eps2: float = 1.6
    split_after: int = 20
    sketch_dim: int = 0

    def __post_init__(self) -> None:
        for name in ("eps1", "eps2"):
            object.__setattr__(self, name, check_float(getattr(self, name), name, "CFLSattler", low=0.0,
                                                       closed=(False, True)))
        object.__setattr__(self, "split_after", check_int(self.split_after, "split-after", "CFLSattler", low=0))
        object.__setattr__(self, "sketch_dim", check_int(self.sketch_dim, "sketch-dim", "CFLSattler", low=0))


class CFLSattler(StoredUpdates, ClusteredStrategy):
    """Recursive bi-partitioning of clusters by the cosine similarity of their members' updates.

    Attributes
    ----------
    norms : list of dict
        Per round and cluster with updates: ``round``, ``cluster``, ``size``, ``mean-norm``, ``max-norm``.
    splits : list of dict
        ``round``, ``cluster`` (split) and ``new`` (the second half's index).
    """

    name = "cfl-sattler"
    params_type = CFLSattlerParams

    def init_clusters(self, initial: ArrayRecord) -> None:
        super().init_clusters(initial)
        self.similarity: UpdateSimilarity | None = None
        self.norms: list[dict[str, Any]] = []
        self.splits: list[dict[str, int]] = []

    def phase(self, server_round: int) -> str:
        return "train" if server_round <= self.params.split_after else "cluster"

    def after_train(self, server_round: int, updates: dict[int, TrainUpdate]) -> None:
        if not updates:
            return
        pids = sorted(updates)
        with self.clustering_timer():
            deltas = {p: updates[p].delta() for p in pids}
            self.remember(pids, np.stack([deltas[p] for p in pids]), self.params.sketch_dim, self.training.seed)
            for k in sorted({self.assignment[p] for p in pids}):
                sampled = [p for p in pids if self.assignment[p] == k]
                mean_norm, max_norm = update_norms(np.stack([deltas[p] for p in sampled]))
                members = sorted(p for p, c in self.assignment.items() if c == k)
                self.norms.append({"round": server_round, "cluster": k, "size": len(members),
                                   "mean-norm": mean_norm, "max-norm": max_norm})
                if should_split(mean_norm, max_norm, len(members), server_round, eps1=self.params.eps1,
                                eps2=self.params.eps2, split_after=self.params.split_after):
                    self._split(server_round, k, members, {p: updates[p] for p in sampled})

    def _split(self, server_round: int, k: int, members: list[int], sampled: dict[int, TrainUpdate]) -> None:
        known = [p for p in members if p in self.similarity]
        if len(known) < 2:
            return
        first, second = split_cluster(known, self.similarity.matrix(known) - 1.0)
        unknown = [p for p in members if p not in self.similarity]
        if unknown:
            log(WARNING, "round %d: clients %s of cluster %d were never sampled; they join its larger half",
                server_round, unknown, k)
            (first if len(first) >= len(second) else second).extend(unknown)
        reference = ArrayRecord({n: Array(a) for n, a in next(iter(sampled.values())).sent.items()})
        halves = []
        for half in (first, second):
            ups = [sampled[p] for p in half if p in sampled]
            halves.append(self.aggregate_cluster(k, ups) if ups else reference.copy())
        new = len(self.models)
        self.models[k] = halves[0]
        self.models.append(halves[1])
        self.assignment.update({p: new for p in second})
        self.splits.append({"round": server_round, "cluster": k, "new": new})
        log(INFO, "round %d: CFL split cluster %d into %d + %d clients (new cluster %d)",
            server_round, k, len(first), len(second), new)

