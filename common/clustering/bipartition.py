"""Sattler's clustered FL: recursive bi-partitioning by update similarity.

Sattler, Mueller and Samek, "Clustered Federated Learning: Model-Agnostic Distributed
Multitask Optimization under Privacy Constraints", IEEE TNNLS 32(8), 2021 (Alg. 1; reference
code felisat/clustered-federated-learning). A cluster whose federated optimisation has
reached a stationary point of the joint objective (norm of the mean update below eps1) while
some client still moves far (largest update norm above eps2) is split in two by complete
linkage on ``1 - cos`` of its members' updates. The reference code returns the halves as
positions inside the cluster; :func:`split_cluster` maps them back to client ids (tested).
Numpy and scikit-learn only.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from sklearn.cluster import AgglomerativeClustering


def update_norms(updates: np.ndarray) -> tuple[float, float]:
    """``(||mean update||, max_i ||update_i||)`` of a cluster's updates.

    Parameters
    ----------
    updates : ndarray of shape (m, d), m >= 1

    Raises
    ------
    ValueError
        If ``updates`` is not a non-empty 2-D array.
    """
    u = np.asarray(updates, dtype=np.float64)
    if u.ndim != 2 or u.shape[0] == 0:
        raise ValueError("The 'updates' parameter of update_norms must be a non-empty (m, d) array. "
                         f"Got shape {u.shape} instead.")
    return float(np.linalg.norm(u.mean(axis=0))), float(np.linalg.norm(u, axis=1).max())


def should_split(mean_norm: float, max_norm: float, size: int, server_round: int, *,
                 eps1: float, eps2: float, split_after: int) -> bool:
    """Sattler's criterion: ``mean_norm < eps1`` and ``max_norm > eps2``, more than 2 members,
    ``server_round > split_after``."""
    return mean_norm < eps1 and max_norm > eps2 and size > 2 and server_round > split_after


def bipartition(cosine: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Split a cluster in two by complete linkage on the distance ``1 - cos``.

    Parameters
    ----------
    cosine : ndarray of shape (n, n), n >= 2
        Symmetric cosine similarities of the members' updates.

    Returns
    -------
    (ndarray, ndarray)
        Positions (``0..n-1``, sorted) of the two halves; the half holding position 0 first.

    Raises
    ------
    ValueError
        If ``cosine`` is not a square matrix of at least 2 x 2.
    """
    c = np.asarray(cosine, dtype=np.float64)
    if c.ndim != 2 or c.shape[0] != c.shape[1] or c.shape[0] < 2:
        raise ValueError("The 'cosine' parameter of bipartition must be a square (n, n) array with n >= 2. "
                         f"Got shape {c.shape} instead.")
    distance = np.clip(1.0 - (c + c.T) / 2.0, 0.0, 2.0)
    np.fill_diagonal(distance, 0.0)
    labels = AgglomerativeClustering(n_clusters=2, metric="precomputed", linkage="complete").fit_predict(distance)
    first = labels == labels[0]
    return np.flatnonzero(first), np.flatnonzero(~first)


def split_cluster(members: Sequence[int], cosine: np.ndarray) -> tuple[list[int], list[int]]:
    """Split the client ids ``members`` in two, with ``cosine`` ordered like ``members``.

    Returns
    -------
    (list of int, list of int)
        Client ids (not positions) of the two halves.
    """
    ids = np.asarray(list(members))
    if np.asarray(cosine).shape != (len(ids), len(ids)):
        raise ValueError("The 'cosine' parameter of split_cluster must have shape (len(members), "
                         f"len(members)) = {(len(ids), len(ids))}. Got {np.asarray(cosine).shape} instead.")
    a, b = bipartition(cosine)
    return ids[a].tolist(), ids[b].tolist()
