"""PACFL (Vahidian et al., "Efficient Distribution Similarity Identification in Clustered
Federated Learning via Principal Angles Between Client Data Subspaces", AAAI 2023).

Round 1: every client runs a truncated SVD of each of its classes' train data (not centred, as the
paper and its reference code) and sends the first ``pacfl-vectors`` (p) left singular vectors per
class with the classes they belong to (``query.subspaces``, no model; p = 3, the reference code's).

The distance between two clients (``pacfl-measure``), in degrees:

- ``per-class``, the default (modified, not the paper's): class by class, the mean principal
  angle between the two clients' bases of each class either holds, 90 for a class only one of them
  holds, averaged over those classes. The server reads which classes a client holds (the reply
  names them); the paper's server sees the bases only.
- the paper's, on each client's class bases stacked side by side: ``smallest`` is PACFL Eq. 3 as
  the paper states it, ``sum`` the trace variant, ``mean`` their mean, ``reference-signed`` the
  reference code's smallest angle between any two basis columns on the signed cosine,
  ``reference`` the same on ``|cos|`` (a singular vector's sign is arbitrary). The reference
  code's "average" linkage is WPGMA: ``linkage weighted``; the paper's settings are thus
  ``--pacfl-measure smallest`` or ``--pacfl-measure reference-signed --linkage weighted``.

Why the default departs: stacked, the bases of two classes that look alike (Fashion-MNIST's shirts
and pullovers) are as close as two samples of one class, so clients that share one of two labels,
or hold the same labels in other proportions, are not told apart on small clients (ARI 0.21-0.72 at
1,000 clients of 60 samples; docs/RESULTS.md, "Selection with defaults"). A shared class gives two
clients a near-zero smallest angle, so ``smallest`` and ``reference`` cannot tell clients that
share one class from clients that share all of them.

Agglomerative clustering cut at ``pacfl-threshold`` (or into ``num-clusters``); every cluster model
starts from the initial model. Newcomers send their bases too and join the cluster at the smallest
mean distance (PACFL's average-linkage criterion). Above 2,000 clients, the HC runs on a seeded
sample of 2,000 and every other client joins the sample cluster at the smallest mean distance to 20
of its members (the same rule; N^2 principal-angle problems would take minutes at 10,000 clients).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, overload
from logging import INFO, WARNING

import numpy as np
from flwr.common import log

from common import keys
from common.clustering import subspaces
from common.clustering.oneshot import OneShotClusters, pacfl_clusters
from common.clustering.subspaces import CLIENT_MEASURES, PER_CLASS, client_distances_between
from common.signals.subspaces import ClassSubspaces
from common.params import check_params, param
from common.params import shared

from .oneshot import OneShotStrategy, check_cut


@dataclass(frozen=True)
class PACFLParams:
    """``pacfl_threshold`` >= 0 degrees, ``pacfl_vectors`` >= 1, ``pacfl_measure`` in
    ``CLIENT_MEASURES``, ``num_clusters`` >= 0 (0 = use the threshold), ``linkage``;
    keys ``pacfl-*`` but the shared ``num-clusters`` and ``linkage``.
    """

    key_prefix: ClassVar[str] = "pacfl"
    pacfl_threshold: float = param(
        0.0,
        "0 with num-clusters 0: automatic cut (modified); > 0: the paper's fixed cut height in degrees "
        "(former default 30)",
        low=0.0,
        paper="a fixed threshold in degrees",
    )
    pacfl_vectors: int = param(
        3, "p: left singular vectors per class each client sends", low=1, paper="3 (reference code)"
    )
    pacfl_measure: str = param(
        PER_CLASS,
        "the clients' distance: per-class (modified: class by class, 90 for a class one lacks) or, on the "
        "stacked bases, smallest (PACFL Eq. 3), sum, mean, reference, reference-signed",
        choices=CLIENT_MEASURES,
        paper="smallest (Eq. 3) on the stacked bases",
    )
    num_clusters: int = shared()
    linkage: str = shared()

    def __post_init__(self) -> None:
        check_params(self, "PACFL")
        check_cut(self, "PACFL")


class ClassBases(Sequence[dict[int, np.ndarray]]):
    """The clients' class bases (``ClassSubspaces.by_class``), each read when indexed.

    The step reads a sample and then chunks of the others (``subspaces.sampled_clusters``), so the
    bases are held once, as the clients' float32 signals, and converted to float64 a chunk at a
    time, never as N copies (3.8 GB at 100,000 clients of 784 x 6).
    """

    def __init__(self, signals: Sequence[ClassSubspaces]) -> None:
        self.signals = signals

    def __len__(self) -> int:
        return len(self.signals)

    @overload
    def __getitem__(self, i: int) -> dict[int, np.ndarray]: ...

    @overload
    def __getitem__(self, i: slice) -> list[dict[int, np.ndarray]]: ...

    def __getitem__(self, i: int | slice) -> dict[int, np.ndarray] | list[dict[int, np.ndarray]]:
        if isinstance(i, slice):
            return [s.by_class() for s in self.signals[i]]
        return self.signals[i].by_class()


class PACFL(OneShotStrategy):
    """One-shot HC on principal angles between the clients' class subspaces."""

    name = "pacfl"
    queries = (ClassSubspaces,)
    placement_rule = (
        "PACFL: the client's class subspaces (query.subspaces), "
        "the cluster at the smallest mean distance (pacfl-measure) to its members"
    )
    params_type = PACFLParams

    def describe_distances(self) -> str:
        """What ``distance_matrix`` measures."""
        return f"principal angles ({self.params.pacfl_measure}), degrees"

    @property
    def threshold(self) -> float:
        """The cut height ``pacfl-threshold`` in degrees."""
        return self.params.pacfl_threshold

    def collect(self, pids: Sequence[int], server_round: int) -> dict[int, ClassSubspaces]:
        """Each client's per-class bases of its train data (no model travels).

        Bases whose row count differs from the clustered clients' (or, in the clustering
        round, from the most common one) are dropped with a warning.
        """
        got = self.query_signal(
            keys.SUBSPACES_ACTION,
            pids,
            server_round,
            ClassSubspaces.from_arrays,
            config={keys.SUBSPACE_VECTORS: self.params.pacfl_vectors},
            dim=None,
            num_classes=self.head_shape()[0],
            max_vectors=self.params.pacfl_vectors,
        )
        dims = [s.dim for s in (self.signals or got).values()]
        if not dims:
            return got
        common = max(set(dims), key=dims.count)
        for pid in sorted(p for p, s in got.items() if s.dim != common):
            log(
                WARNING,
                "round %d: client %d sent bases of %d rows, not %d; ignored",
                server_round,
                pid,
                got.pop(pid).dim,
                common,
            )
        return got

    def cluster_signals(self, signals: Sequence[ClassSubspaces]) -> OneShotClusters:
        """Principal angles between the clients' class bases, cut (``pacfl_clusters``): exact HC up to
        ``subspaces.SAMPLE_SIZE`` clients; above, a seeded sample's (no distance matrix).
        """
        if len(signals) > subspaces.SAMPLE_SIZE:
            log(
                INFO,
                "PACFL: HC of a seeded sample of %d of %d clients; the others join the sample cluster at the "
                "smallest mean angle to up to %d of its members",
                subspaces.SAMPLE_SIZE,
                len(signals),
                subspaces.REFERENCES_PER_CLUSTER,
            )
        return pacfl_clusters(ClassBases(signals), self.hc_cut, self.params.pacfl_measure, self.rng)

    def place(self, newcomers: list[int], server_round: int) -> dict[int, int]:
        """Each newcomer joins the cluster with the smallest mean distance to its members.

        The members are compared with every newcomer at once, ``subspaces.PLACE_CHUNK`` members at a
        time (their float64 copies never all held: 100,000 stacked bases are 3.8 GB).
        """
        bases = self.collect(newcomers, server_round)
        if not bases:
            return {}
        pids = sorted(bases)
        with self.clustering_timer():
            firsts = [bases[p].by_class() for p in pids]
            labels = np.array([self.assignment[q] for q in self.distance_pids], dtype=np.int64)
            sums = np.zeros((len(pids), len(self.models)))
            for lo in range(0, len(labels), subspaces.PLACE_CHUNK):
                chunk = self.distance_pids[lo : lo + subspaces.PLACE_CHUNK]
                members = [self.signals[q].by_class() for q in chunk]
                distances = client_distances_between(firsts, members, self.params.pacfl_measure)
                np.add.at(sums.T, labels[lo : lo + len(chunk)], distances.T)
            counts = np.bincount(labels, minlength=len(self.models))
            means = np.where(counts > 0, sums / np.maximum(counts, 1), np.inf)
            return {p: int(k) for p, k in zip(pids, np.argmin(means, axis=1), strict=True)}
