"""Louvain community detection on a similarity graph (FLIC, Espinoza Castellon et al., IJCNN 2022, Sec. III-IV).

FLIC builds a weighted graph whose nodes are the clients seen so far and whose edge weights
are ``S_ij = 1 + cos`` (non-negative, as the Louvain method requires) and takes its
communities as clusters, so the number of clusters is not a parameter. Uses python-louvain's
``best_partition`` (seeded); numpy in, numpy out, no Flower, no torch.
"""

from __future__ import annotations

import community as community_louvain
import networkx as nx
import numpy as np


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
        raise ValueError("The 'similarity' parameter of similarity_graph must be a non-empty square "
                         f"(n, n) array. Got shape {s.shape} instead.")
    if not np.all(np.isfinite(s)) or np.any(s < 0) or not np.allclose(s, s.T, atol=1e-6):
        raise ValueError("The 'similarity' parameter of similarity_graph must be symmetric, finite and "
                         "non-negative. Got a matrix that is not instead.")
    graph = nx.Graph()
    graph.add_nodes_from(range(s.shape[0]))
    i, j = np.triu_indices(s.shape[0], k=1)
    keep = s[i, j] > 0
    graph.add_weighted_edges_from(zip(i[keep].tolist(), j[keep].tolist(), s[i, j][keep].tolist(), strict=True))
    return graph


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
        raise ValueError("The 'resolution' parameter of louvain_labels must be a float in the range "
                         f"(0.0, inf). Got {resolution!r} instead.")
    graph = similarity_graph(similarity)
    partition = community_louvain.best_partition(graph, weight="weight", resolution=float(resolution),
                                                 random_state=int(seed))
    raw = np.array([partition[i] for i in range(graph.number_of_nodes())])
    _, first, inverse = np.unique(raw, return_index=True, return_inverse=True)
    rank = np.argsort(np.argsort(first))
    return rank[inverse].astype(np.int64)
