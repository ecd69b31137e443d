"""The server-side clustering step of each one-shot algorithm, as a pure function.

Each takes the clients' signals as arrays (in the order of the clients) and the algorithm's
parameters, and returns the labels and the distance matrix it cut, so that the strategy
(``strategies.fedclust``, ``strategies.pacfl``, ``strategies.flhc``) and the scaling
benchmark run the same step.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .hierarchical import auto_cut, cut_tree, pairwise_distances
from .sampled import sampled_cut, use_sample
from .similarity import sketch_rows
from .subspaces import SAMPLE_SIZE, ClientBases, client_distances, sampled_clusters


@dataclass(frozen=True)
class Cut:
    """How to cut an agglomerative tree: ``num_clusters`` > 0 wins, else ``threshold`` > 0;
    both 0 is the automatic cut (``auto_cut``: the most clusters within 0.02 of the best silhouette).
    """

    threshold: float
    num_clusters: int = 0
    linkage: str = "average"

    @property
    def automatic(self) -> bool:
        """Whether neither a count nor a threshold is given."""
        return self.num_clusters == 0 and self.threshold == 0


@dataclass(frozen=True)
class OneShotClusters:
    """A one-shot step's result.

    Attributes
    ----------
    labels : ndarray of shape (N,)
        Cluster of each client, ``0..K-1``.
    distances : ndarray of shape (N, N) or None
        What was cut (None: PACFL above ``SAMPLE_SIZE`` clients, which cuts a sample).
    silhouette : float or None
        The automatic cut's silhouette (None when the cut was given, or undefined).
    """

    labels: np.ndarray
    distances: np.ndarray | None
    silhouette: float | None = None


def cut_distances(distances: np.ndarray, cut: Cut, tree: np.ndarray | None = None) -> tuple[np.ndarray, float | None]:
    """Labels of the HC tree of ``distances`` cut as ``cut`` says, and the automatic cut's silhouette.

    ``tree``: ``linkage_tree(distances, cut.linkage)`` when the caller already built it.
    """
    if cut.automatic:
        return auto_cut(distances, cut.linkage)
    labels = cut_tree(distances, threshold=cut.threshold, num_clusters=cut.num_clusters, linkage=cut.linkage, tree=tree)
    return labels, None


def fedclust_clusters(final_layers: np.ndarray, cut: Cut, sample_above: int = 0, seed: int = 0) -> OneShotClusters:
    """FedClust (Islam et al. 2024, Eq. 3): Euclidean distances between the final-layer vectors, cut.

    ``final_layers`` has shape (N, C * d + C), one client's weight and bias per row. Above
    ``sample_above`` > 0 clients: the cut of a sample drawn with ``seed``, the rest to the
    nearest sample-cluster centroid (``sampled.sampled_cut``; no distance matrix).
    """
    if use_sample(len(final_layers), sample_above):
        return _sampled(final_layers, cut, "euclidean", seed, exact=True)
    distances = pairwise_distances(final_layers)
    return OneShotClusters(*_labels(distances, cut))


def flhc_clusters(
    updates: Sequence[np.ndarray], cut: Cut, metric: str = "euclidean", seed: int = 0, sample_above: int = 0
) -> OneShotClusters:
    """FL+HC (Briggs et al. 2020): ``metric`` distances between the clients' updates, cut.

    Updates are sketched with ``seed`` when they would not fit (``sketch_rows``; never for
    ``cityblock``, which a sketch does not preserve). Above ``sample_above`` > 0 clients: the
    cut of a sample drawn with ``seed``, the rest to the nearest sample-cluster mean under
    ``metric`` (``sampled.sampled_cut``; no distance matrix).
    """
    exact = metric == "cityblock"
    if use_sample(len(updates), sample_above):
        return _sampled(updates, cut, metric, seed, exact)
    distances = pairwise_distances(sketch_rows(updates, seed, exact=exact), metric)
    return OneShotClusters(*_labels(distances, cut))


def _sampled(rows: Sequence[np.ndarray] | np.ndarray, cut: Cut, metric: str, seed: int, exact: bool) -> OneShotClusters:
    silhouettes: list[float | None] = []

    def cut_sample(distances: np.ndarray) -> np.ndarray:
        labels, silhouette = cut_distances(distances, cut)
        silhouettes.append(silhouette)
        return labels

    labels, _, _ = sampled_cut(rows, cut_sample, np.random.default_rng(seed), metric=metric, seed=seed, exact=exact)
    return OneShotClusters(labels, None, silhouettes[-1])


def pacfl_clusters(bases: Sequence[ClientBases], cut: Cut, measure: str, rng: np.random.Generator) -> OneShotClusters:
    """PACFL (Vahidian et al. 2023): principal angles between the clients' class bases (``client_distances``), cut.

    Above ``SAMPLE_SIZE`` clients, the tree of a sample drawn with ``rng`` is cut and every other
    client joins the sample cluster at the smallest mean angle (``sampled_clusters``); then there
    is no distance matrix, and an automatic cut's silhouette is the sample's.
    """
    if len(bases) <= SAMPLE_SIZE:
        distances = client_distances(bases, measure)
        return OneShotClusters(*_labels(distances, cut))
    silhouettes: list[float | None] = []

    def cut_sample(distances: np.ndarray) -> np.ndarray:
        labels, silhouette = cut_distances(distances, cut)
        silhouettes.append(silhouette)
        return labels

    labels, _, _ = sampled_clusters(bases, measure, cut_sample, rng)
    return OneShotClusters(labels, None, silhouettes[-1] if silhouettes else None)


def _labels(distances: np.ndarray, cut: Cut) -> tuple[np.ndarray, np.ndarray, float | None]:
    labels, silhouette = cut_distances(distances, cut)
    return labels, distances, silhouette
