"""Louvain community detection on a similarity graph (FLIC, Espinoza Castellon et al., IJCNN 2022, Sec. III-IV).

FLIC builds a weighted graph whose nodes are the clients seen so far and whose edge weights
are ``S_ij = 1 + cos`` (non-negative, as the Louvain method requires) and takes its
communities as clusters, so the number of clusters is not a parameter. Uses python-louvain's
``best_partition`` (seeded); numpy in, numpy out, no Flower, no torch.

Above ``DENSE_MAX_NODES`` clients the complete graph (``n^2 / 2`` networkx edges: tens of GB
at 10,000 clients) is replaced by the symmetrised ``KNN``-nearest-neighbour graph of the same
similarities (each client keeps its edges to its ``KNN`` most similar clients), the usual
sparsification for community detection at scale; below it the result is unchanged.
"""

from __future__ import annotations

import community as community_louvain
import networkx as nx
import numpy as np

from .hierarchical import is_symmetric

DENSE_MAX_NODES = 2_000
"""Up to this many nodes Louvain runs on the complete similarity graph."""
KNN = 20
"""Neighbours kept per node above ``DENSE_MAX_NODES``."""


def similarity_graph(similarity: np.ndarray) -> nx.Graph:
    """The undirected weighted graph of a similarity matrix (no self-loops, no zero edges).

    Parameters
    ----------
    similarity : ndarray of shape (n, n)
        Symmetric, finite, non-negative.

    Returns
    -------
    networkx.Graph
        Nodes ``0..n-1``; an edge ``(i, j)`` of weight ``S_ij`` for every ``i < j`` with ``S_ij > 0``.

    Raises
    ------
    ValueError
        If ``similarity`` is not square, symmetric, finite and non-negative.
    """
    s = np.asarray(similarity, dtype=np.float64)
    if s.ndim != 2 or s.shape[0] != s.shape[1] or s.shape[0] == 0:
        raise ValueError(
            "The 'similarity' parameter of similarity_graph must be a non-empty square "
            f"(n, n) array. Got shape {s.shape} instead."
        )
    if not np.all(np.isfinite(s)) or np.any(s < 0) or not is_symmetric(s, rtol=0.0, atol=1e-6):
        raise ValueError(
            "The 'similarity' parameter of similarity_graph must be symmetric, finite and "
            "non-negative. Got a matrix that is not instead."
        )
    graph = nx.Graph()
    graph.add_nodes_from(range(s.shape[0]))
    i, j = knn_edges(s, KNN) if s.shape[0] > DENSE_MAX_NODES else np.triu_indices(s.shape[0], k=1)
    keep = s[i, j] > 0
    graph.add_weighted_edges_from(zip(i[keep].tolist(), j[keep].tolist(), s[i, j][keep].tolist(), strict=True))
    return graph


def knn_edges(similarity: np.ndarray, k: int, block: int = 1024) -> tuple[np.ndarray, np.ndarray]:
    """The edges ``(i, j)``, ``i < j``, of the symmetrised k-nearest-neighbour graph.

    Parameters
    ----------
    similarity : ndarray of shape (n, n)
        Symmetric; larger is more similar.
    k : int
        Neighbours per node (>= 1; at most ``n - 1`` are kept). An edge is kept when either end
        has the other among its ``k`` most similar nodes (ties broken by ``argpartition``).
    block : int, default=1024
        Rows handled at a time (memory ``O(block n)``).

    Returns
    -------
    (ndarray, ndarray) of shape (E,), int64
        Distinct edges with ``i < j``, sorted; ``n k / 2 <= E <= n k``.
    """
    s = np.asarray(similarity)
    n = s.shape[0]
    k = min(int(k), n - 1)
    if k < 1:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    heads, tails = [], []
    for start in range(0, n, block):
        rows = np.array(s[start : start + block], dtype=np.float64)
        rows[np.arange(rows.shape[0]), np.arange(start, start + rows.shape[0])] = -np.inf
        nearest = np.argpartition(-rows, k - 1, axis=1)[:, :k]
        heads.append(np.repeat(np.arange(start, start + rows.shape[0]), k))
        tails.append(nearest.ravel())
    i, j = np.concatenate(heads), np.concatenate(tails)
    lo, hi = np.minimum(i, j), np.maximum(i, j)
    pairs = np.unique(lo * n + hi)
    return (pairs // n).astype(np.int64), (pairs % n).astype(np.int64)


def louvain_labels(similarity: np.ndarray, resolution: float = 1.0, seed: int = 0) -> np.ndarray:
    """Louvain communities of the similarity graph as cluster labels.

    Parameters
    ----------
    similarity : ndarray of shape (n, n)
        Symmetric, non-negative (FLIC: ``1 + cos``).
    resolution : float, default=1.0
        Louvain's resolution (> 0): larger values give more, smaller communities.
    seed : int, default=0
        ``random_state`` of the node order; the same seed gives the same labels.

    Returns
    -------
    ndarray of shape (n,), int64
        Labels ``0..K-1`` numbered by first appearance (node 0 is in cluster 0). A graph
        without edges (one node, or all similarities 0) gives one cluster per node.

    Raises
    ------
    ValueError
        On a bad matrix or a resolution that is not positive.
    """
    if not isinstance(resolution, (int, float)) or not np.isfinite(resolution) or resolution <= 0:
        raise ValueError(
            "The 'resolution' parameter of louvain_labels must be a float in the range "
            f"(0.0, inf). Got {resolution!r} instead."
        )
    graph = similarity_graph(similarity)
    partition = community_louvain.best_partition(
        graph, weight="weight", resolution=float(resolution), random_state=int(seed)
    )
    raw = np.array([partition[i] for i in range(graph.number_of_nodes())])
    _, first, inverse = np.unique(raw, return_index=True, return_inverse=True)
    rank = np.argsort(np.argsort(first))
    return rank[inverse].astype(np.int64)
