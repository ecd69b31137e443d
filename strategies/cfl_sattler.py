"""Sattler's clustered FL (Sattler, Mueller and Samek, IEEE TNNLS 32(8), 2021, Alg. 1).

FedAvg inside each cluster. After each round, a cluster whose members' updates cancel (the
norm of their mean below eps1 times their RMS norm, estimated from the sampled members: the
joint objective is near a stationary point) while one member still moves
(``max ||update_i|| > eps2``), with more than 2 members
and after round ``cfl-sattler-split-after``, is a split candidate. At the start of the next round all its
members send their update of the cluster model (``query.update``, clustering-signal bytes:
Sattler's bi-partition uses every member's update at the same stationary point; the
reference samples everyone, we sample ``fraction``), which complete linkage on ``1 - cos``
splits in two (``common.clustering.bipartition``). The split is kept when it separates
(``cfl-sattler-separation``: ``nearest``, the default and modified, every member's most alike
same-half update beats every cross-half pair; ``strict``, Sattler's correctness condition, every
cosine inside a half above every cosine across; ``off``, the reference code, always); otherwise the
cluster is left alone for ``RETRY_AFTER`` rounds. Each half starts from the
cluster model plus its members' mean update, as in the reference.

eps1 is relative to the update norms by default (modified: the reference's absolute 0.4 / 1.6
assume its model and learning rate: our DNN at lr 0.001 moves less than 0.55 per round and
never splits); eps2 stays absolute, 0 (default) disables it, and ``cfl-sattler-eps2-relative``
(0.3, modified) asks the largest update to exceed that fraction of the first round's RMS update
norm: once a cluster holds one group its members fit its model and their updates shrink, and
without that floor their noise was split until clusters of a few clients remained (100 rounds).
``cfl-sattler-eps-absolute`` true is the paper's criterion: ``||mean update|| < eps1`` and
``max ||update_i|| > eps2``, both absolute, no relative floor (the reference code's values are
eps1 0.4, eps2 1.6). Positions inside a sub-cluster are mapped
back to partition ids (the reference code's pitfall; tested).

Above ``cfl-sattler-sample-above`` members (modified; 0 is the paper's split of all members) a
split asks a seeded sample of ``SPLIT_SAMPLE`` members first and bi-partitions it (its criteria
are the sample's); a kept split then asks the other members ``QUERY_BATCH`` at a time, each joining
the half whose mean unit update is nearer in cosine (as in the sample's sketch): at most one batch
of updates is held, not every member's (64 GB at 100,000 DNN clients), and a split that does not
separate costs the sample's updates only. Both forms are ``common.clustering.sampled.sattler_split``,
which this strategy calls with its requests (``query.update``) and its store of latest updates, and
which ``benchmarks.scaling`` measures; each update is read once, a block at a time, for its half and
the halves' sums (``bipartition.scan_round`` reads each round's updates once for their norms).

The store of latest updates (``distances.png`` and checkpoints; a split needs none) keeps every
client's, or when the federation is above ``cfl-sattler-sample-above`` clients at the first store a
seeded sample of ``SPLIT_SAMPLE`` of them (``sampled.kept_clients``; clients that join later are not
kept): sketching all of them was most of the server's work at 100,000 clients.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import takewhile
from logging import INFO, WARNING
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
from flwr.app import ArrayRecord
from flwr.common import log

from common import keys
from common.clustering.bipartition import SEPARATION, SEPARATION_CHOICES, scan_round, should_split
from common.clustering.sampled import (
    SAMPLE_ABOVE,
    SAMPLE_ABOVE_HELP,
    SAMPLE_ABOVE_PAPER,
    SattlerSplit,
    kept_clients,
    kept_store,
    sattler_split,
    scan_sketch,
)
from common.clustering.subspaces import SAMPLE_SIZE
from common.clustering.similarity import CountSketch, UpdateSimilarity
from common.params import check_params, param
from common.config import TrainingParams
from common.signals.update import ModelUpdate
from common.params import shared

from .base import ClusteredStrategy
from .flat import add_flat, float_size
from .replies import TrainUpdate
from .updates import StoredUpdates

RETRY_AFTER = 5
SPLIT_SAMPLE = SAMPLE_SIZE
"""Members split exactly in a sampled split (``sampled.sattler_split``'s ``sample_size``)."""
QUERY_BATCH = SAMPLE_SIZE
"""Members asked at a time for their fresh update in a sampled split (2,000 DNN updates: 1.3 GB)."""


@dataclass(frozen=True)
class CFLSattlerParams:
    """``eps1`` > 0 (relative, or absolute with ``eps_absolute``), ``eps2`` >= 0 (absolute; 0: off),
    ``split_after`` >= 0, the shared ``sketch_dim`` >= 0, ``sample_above`` >= 0 (the split of a
    larger cluster runs on a sample, the other members asked a batch at a time and joined by
    cosine, ``sampled.sattler_split``; 0: exact), the split's ``separation``
    test (``common.clustering.bipartition.SEPARATIONS``, or ``off``); keys ``cfl-sattler-*``.
    """

    key_prefix: ClassVar[str] = "cfl-sattler"
    eps1: float = param(
        0.5, "split a cluster when ||mean update|| < eps1 x RMS ||update||", low=0.0, closed=(False, True)
    )
    eps2: float = param(0.0, "and its largest update norm exceeds eps2; 0 = off", low=0.0)
    eps2_relative: float = param(
        0.3,
        "with eps-absolute false: and its largest update norm exceeds this fraction of the RMS update norm of the "
        "run's first round (modified: a cluster whose members all fit its model moves little, one that joins "
        "groups does not); 0 = off",
        low=0.0,
        paper="off: eps2 is absolute",
    )
    split_after: int = param(20, "no split before this round", low=0)
    sketch_dim: int = shared(low=0)
    eps_absolute: bool = param(
        False,
        "true: the paper's criterion, eps1 bounds the mean update's norm "
        "(reference code: eps1 0.4, eps2 1.6); false (modified): eps1 relative to the RMS update norm",
        paper="true: eps1 bounds the mean update's norm",
    )
    sample_above: int = param(SAMPLE_ABOVE, SAMPLE_ABOVE_HELP, low=0, paper=SAMPLE_ABOVE_PAPER)

    separation: str = param(
        SEPARATION,
        "a split is kept when: nearest (modified) each member's nearest same-half update beats every cross pair; "
        "strict: every same-half pair beats every cross pair (two groups only); off: always",
        choices=SEPARATION_CHOICES,
        paper="off: the reference code keeps every split eps1 and eps2 allow",
    )

    def __post_init__(self) -> None:
        check_params(self, "CFLSattler")


class CFLSattler(StoredUpdates, ClusteredStrategy):  # type: ignore[misc, override]  # distances computed on demand
    """Recursive bi-partitioning of clusters by the cosine similarity of their members' updates.

    Attributes
    ----------
    norms : list of dict
        Per round and cluster with updates: ``round``, ``cluster``, ``size``, ``sampled``,
        ``mean-norm``, ``rms-norm``, ``max-norm`` and ``ratio`` (``mean_update_ratio``).
    attempts : list of dict
        Each bi-partition tried: ``round``, ``cluster``, ``sizes``, ``alpha-cross-max``,
        ``alpha-intra-min``, ``gamma-max``, ``kept``.
    splits : list of dict
        Kept splits: ``round``, ``cluster`` (split) and ``new`` (the second half's index).
    """

    name = "cfl-sattler"
    queries = (ModelUpdate,)
    state_fields: ClassVar[frozenset[str]] = frozenset(
        {"_candidates", "_retry", "_stored_clients", "attempts", "norms", "similarity", "splits"}
    )
    params_type = CFLSattlerParams

    def describe_distances(self) -> str:
        """What ``distance_matrix`` measures."""
        return "cosine distance 1 - cos of updates"

    def __init__(self, training: TrainingParams | None = None, params: CFLSattlerParams | None = None) -> None:
        super().__init__(training, params)
        self.similarity: UpdateSimilarity | None = None
        self.norms: list[dict[str, Any]] = []
        self.attempts: list[dict[str, Any]] = []
        self.splits: list[dict[str, int]] = []
        self._candidates: set[int] = set()
        self._retry: dict[int, int] = {}
        self._stored_clients: tuple[bool, frozenset[int] | None] = (False, None)  # (drawn, kept)

    def init_clusters(self, initial: ArrayRecord) -> None:
        """One cluster of every client; warns when ``split-after`` leaves no round to split in."""
        super().init_clusters(initial)
        if self.params.split_after >= self.training.rounds:
            log(
                WARNING,
                "CFLSattler: cfl-sattler-split-after %d is not below rounds %d, so no cluster can split: "
                "this run is FedAvg",
                self.params.split_after,
                self.training.rounds,
            )

    def phase(self, server_round: int) -> str:
        """``train`` up to ``split-after``, ``cluster`` after (a split may happen)."""
        return "train" if server_round <= self.params.split_after else "cluster"

    def after_train(self, server_round: int, updates: dict[int, TrainUpdate]) -> None:
        """Store the round's updates and mark the clusters whose updates call for a split.

        ``bipartition.scan_round`` reads the updates a block at a time (their deltas are never all
        held: 20,000 DNN updates are 12.7 GB) and keeps each cluster's norms as running sums
        (``NormSums``).
        """
        if not updates:
            return
        pids = sorted(updates)
        deltas = _Deltas(updates, pids)
        with self.clustering_timer():
            store = self.store_for(int(np.shape(deltas[0])[-1]), self.params.sketch_dim, self.training.seed)
            sketch = scan_sketch(store, self._kept_clients())
            sums = scan_round(pids, deltas, [self.assignment[p] for p in pids], self._store, sketch=sketch)
            marked = []
            for k in sorted(sums):
                mean_norm, rms, max_norm = sums[k].norms()
                ratio = sums[k].ratio()
                size = sum(1 for c in self.assignment.values() if c == k)
                self.norms.append(
                    {
                        "round": server_round,
                        "cluster": k,
                        "size": size,
                        "sampled": sums[k].count,
                        "mean-norm": mean_norm,
                        "rms-norm": rms,
                        "max-norm": max_norm,
                        "ratio": ratio,
                    }
                )
                marked.append((k, mean_norm if self.params.eps_absolute else ratio, max_norm, size))
            eps2 = self.eps2_floor()
            for k, stationary, max_norm, size in marked:
                if should_split(
                    stationary,
                    max_norm,
                    size,
                    server_round,
                    eps1=self.params.eps1,
                    eps2=eps2,
                    split_after=self.params.split_after,
                ) and server_round >= self._retry.get(k, 0):
                    self._candidates.add(k)

    def first_rms(self) -> float | None:
        """The RMS update norm of the first round in ``norms``, pooled over its clusters (None before it)."""
        if not self.norms:
            return None
        first = list(takewhile(lambda r: r["round"] == self.norms[0]["round"], self.norms))  # rows in round order
        sampled = sum(r["sampled"] for r in first)
        return float(np.sqrt(sum(r["rms-norm"] ** 2 * r["sampled"] for r in first) / sampled))

    def eps2_floor(self) -> float:
        """The largest update norm a split candidate must exceed: ``eps2``, and with eps1 relative also
        ``eps2-relative`` x ``first_rms``."""
        first = self.first_rms()
        if self.params.eps_absolute or first is None:
            return self.params.eps2
        return max(self.params.eps2, self.params.eps2_relative * first)

    def before_round(self, server_round: int) -> None:
        """Try to bi-partition every cluster marked after the last round."""
        for k in sorted(self._candidates):
            self._try_split(server_round, k)
        self._candidates.clear()

    def _ask(self, server_round: int, k: int, pids: list[int]) -> tuple[list[int], list[np.ndarray]]:
        """The fresh updates of ``pids`` to cluster ``k``'s model: the members that replied, their deltas."""
        model = self.models[k]
        ups = self.query_signal(
            keys.UPDATE_ACTION, pids, server_round, ModelUpdate.from_arrays, models=[model], size=float_size(model)
        )
        replied = sorted(ups)
        return replied, [ups.pop(p).delta for p in replied]

    def _store(
        self,
        pids: list[int],
        block: list[np.ndarray],
        sketch: CountSketch | None,
        projected: np.ndarray | None = None,
    ) -> None:
        """Keep a block of updates as the latest of ``pids`` (``UpdateSimilarity.keep``; ``projected``: their
        rows in ``sketch``, already computed), of the clients in ``sampled.kept_clients`` only."""
        store = self.store_for(int(np.shape(block[0])[-1]), self.params.sketch_dim, self.training.seed)
        kept_store(store.keep, self._kept_clients())(pids, block, sketch, projected)

    def _kept_clients(self) -> frozenset[int] | None:
        """``sampled.kept_clients`` of the federation when the store first keeps an update, then the same
        set (a client that joins later is not kept), so that no kept client's stored update goes stale."""
        drawn, kept = self._stored_clients
        if not drawn:
            kept = kept_clients(list(self.clients), self.training.seed, self.params.sample_above, SPLIT_SAMPLE)
            self._stored_clients = (True, kept)
        return kept

    def _try_split(self, server_round: int, k: int) -> None:
        """Sattler's bi-partition of cluster ``k`` (``sampled.sattler_split``: every member, or above
        ``sample-above`` a seeded sample of ``SPLIT_SAMPLE`` first and the others ``QUERY_BATCH`` at a
        time); a kept split with two non-empty halves replaces the cluster."""
        members = sorted(p for p, c in self.assignment.items() if c == k)
        split = sattler_split(
            members,
            lambda pids: self._ask(server_round, k, pids),
            store=self._store,
            sketch_dim=self.params.sketch_dim,
            seed=self.training.seed,
            test=self.params.separation,
            sample_above=self.params.sample_above,
            sample_size=SPLIT_SAMPLE,
            batch=QUERY_BATCH,
            timer=self.clustering_timer,
        )
        if split is None or not self._kept(server_round, k, split):
            return
        first, second = split.halves
        if not first or not second:
            return
        self._apply_split(server_round, k, list(first), list(second), members, first + second, split.means)

    def _kept(self, server_round: int, k: int, split: SattlerSplit) -> bool:
        """Record the attempt; whether its split is kept (else the cluster waits ``RETRY_AFTER`` rounds)."""
        sizes, cross, intra, kept = split.sizes, split.cross, split.intra, split.kept
        self.attempts.append(
            {
                "round": server_round,
                "cluster": k,
                "sizes": sizes,
                "alpha-cross-max": cross,
                "alpha-intra-min": intra,
                "gamma-max": float(np.sqrt((1.0 - cross) / 2.0)),
                "kept": bool(kept),
            }
        )
        if not kept:
            self._retry[k] = server_round + RETRY_AFTER
            log(
                INFO,
                "round %d: CFL kept cluster %d whole: its bi-partition does not separate (cross %.2f >= intra %.2f)",
                server_round,
                k,
                cross,
                intra,
            )
        return bool(kept)

    def _apply_split(
        self,
        server_round: int,
        k: int,
        first: list[int],
        second: list[int],
        members: list[int],
        replied: list[int],
        means: list[np.ndarray] | np.ndarray,
    ) -> None:
        """Cluster ``k`` becomes ``first`` (plus the members that did not reply, on the larger side) and a
        new cluster ``second``; each starts from ``k``'s model plus its half's mean update ``means``."""
        (first if len(first) >= len(second) else second).extend(sorted(set(members) - set(replied)))
        model = self.models[k]
        halves = [add_flat(model, np.asarray(mean)) for mean in means]
        new = len(self.models)
        self.models[k] = halves[0]
        self.models.append(halves[1])
        self.assignment.update(dict.fromkeys(second, new))
        self.splits.append({"round": server_round, "cluster": k, "new": new})
        log(
            INFO,
            "round %d: CFL split cluster %d into %d + %d clients (new cluster %d)",
            server_round,
            k,
            len(first),
            len(second),
            new,
        )


class _Deltas(Sequence[np.ndarray]):
    """The round's deltas in ``pids`` order, each computed when read (never all held)."""

    def __init__(self, updates: dict[int, TrainUpdate], pids: list[int]) -> None:
        self.updates, self.pids = updates, pids

    def __len__(self) -> int:
        return len(self.pids)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self.updates[p].delta() for p in self.pids[i]]
        return self.updates[self.pids[i]].delta()
