"""Order clients by cluster, so a distance matrix shows its clusters as diagonal blocks.

Used for the ordered distance-matrix plots of FedClust (Islam et al., 2024, Fig. 1), PACFL
and every other clustered strategy.
"""

from __future__ import annotations

import numpy as np


def order_by_cluster(labels: np.ndarray) -> np.ndarray:
    """Return the permutation that makes each cluster contiguous.

    Clusters come in increasing label order; inside a cluster clients keep their order
    (a stable sort).

    Parameters
    ----------
    labels : np.ndarray of shape (N,)
        Cluster of each client.

    Returns
    -------
    np.ndarray of shape (N,), int64
        ``labels[order]`` is sorted.

    Raises
    ------
    ValueError
        Naming ``'labels'`` unless it is 1-D.
    """
    labels = np.asarray(labels)
    if labels.ndim != 1:
        raise ValueError(
            f"The 'labels' parameter of order_by_cluster must be a 1-D array. Got shape {labels.shape} instead."
        )
    return np.argsort(labels, kind="stable").astype(np.int64)


def cluster_spans(sorted_labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Start (inclusive) and end (exclusive) index of each run of equal labels.

    Parameters
    ----------
    sorted_labels : np.ndarray of shape (N,)
        Labels already ordered by :func:`order_by_cluster`.

    Returns
    -------
    starts, ends : np.ndarray of shape (K,), int64
        Empty for ``N == 0``.
    """
    lab = np.asarray(sorted_labels)
    if lab.ndim != 1:
        raise ValueError(
            f"The 'sorted_labels' parameter of cluster_spans must be a 1-D array. Got shape {lab.shape} instead."
        )
    if lab.size == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    starts = np.flatnonzero(np.r_[True, lab[1:] != lab[:-1]]).astype(np.int64)
    return starts, np.r_[starts[1:], len(lab)].astype(np.int64)


def order_matrix(matrix: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows and columns of ``matrix`` (N, N) reordered by cluster; returns it and the sorted labels."""
    order = order_by_cluster(labels)
    mat = np.asarray(matrix)
    if mat.shape != (len(order), len(order)):
        raise ValueError(
            f"The 'matrix' parameter of order_matrix must have shape "
            f"({len(order)}, {len(order)}). Got shape {mat.shape} instead."
        )
    return mat[np.ix_(order, order)], np.asarray(labels)[order]
