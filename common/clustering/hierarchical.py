"""Pairwise distances, agglomerative clustering on a precomputed distance matrix, centroids.

The one-shot clustering of FedClust (Islam et al., 2024, Sec. 3.4 and Alg. 1-2: Euclidean
distances between final-layer weights, hierarchical clustering cut at a threshold lambda,
newcomers join the nearest cluster centroid), PACFL (Vahidian et al., AAAI 2023: HC on
principal-angle distances) and FL+HC (Briggs et al., IJCNN 2020: HC on model updates with a
given number of clusters) all end here. numpy in, numpy out.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy.cluster import hierarchy
from scipy.spatial.distance import cdist, pdist, squareform
from sklearn.metrics import silhouette_score

from common.validation import check_choice, check_float, check_int

LINKAGES: tuple[str, ...] = ("average", "complete", "single", "weighted")
"""``average`` is UPGMA (scikit-learn's and PACFL's paper); ``weighted`` is WPGMA, what PACFL's
reference code calls "average" (the mean of the two merged rows)."""
METRICS: tuple[str, ...] = ("euclidean", "cosine", "cityblock", "sqeuclidean")
AUTO_MAX_CLUSTERS = 100
""":func:`auto_cut` scores the cuts into 2 .. this many clusters."""
AUTO_LIMIT_HELP = f"0 = half the clients, at most {AUTO_MAX_CLUSTERS}"
"""What a strategy's ``*-auto-max-clusters`` key means at 0 (:func:`automatic_max_clusters`)."""
AUTO_TOLERANCE = 0.02
""":func:`auto_cut` keeps the finest cut within this much silhouette of the best one."""
AUTO_MIN_SILHOUETTE = 0.1
""":func:`auto_cut` keeps one cluster when no cut scores above this (no structure)."""
AUTO_MIN_SHARE = 0.01
""":func:`auto_cut` joins each cluster of fewer than ``int(AUTO_MIN_SHARE * N)`` clients (when that is
at least 2: from 200 clients) to its members' nearest larger clusters."""


def _vectors(x: np.ndarray, name: str, owner: str) -> np.ndarray:
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim != 2 or arr.shape[0] == 0 or arr.shape[1] == 0:
        raise ValueError(
            f"The '{name}' parameter of {owner} must be a non-empty 2-D array (N, D). Got shape {arr.shape} instead."
        )
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"The '{name}' parameter of {owner} must hold finite values. Got NaN or Inf instead.")
    return arr


def pairwise_distances(vectors: np.ndarray, metric: str = "euclidean") -> np.ndarray:
    """Distance between every pair of rows (FedClust Eq. 3 with the default metric).

    Parameters
    ----------
    vectors : ndarray of shape (N, D)
        One flattened vector per client (final-layer weights, model updates, ...).
    metric : {"euclidean", "cosine", "cityblock", "sqeuclidean"}, default="euclidean"
        As ``scipy.spatial.distance.pdist``; above ``PDIST_MAX_ROWS`` rows or ``PDIST_MAX_WORK``
        for ``N^2 D``, all but cityblock are computed from inner products (BLAS), agreeing
        with ``pdist`` to about 1e-7 relative.

    Returns
    -------
    ndarray of shape (N, N), float64
        Symmetric, zero diagonal. ``N == 1`` gives ``[[0.0]]``. Cosine: a zero row (a client whose
        update did not move) is at 1 from every other row, as if orthogonal.

    Raises
    ------
    ValueError
        Naming ``'vectors'`` unless it is a finite non-empty 2-D array, ``'metric'`` if unknown.
    """
    arr = _vectors(vectors, "vectors", "pairwise_distances")
    check_choice(metric, "metric", "pairwise_distances", METRICS)
    if arr.shape[0] == 1:
        return np.zeros((1, 1))
    n, dim = arr.shape
    if metric != "cityblock" and (n > PDIST_MAX_ROWS or n * n * dim > PDIST_MAX_WORK):
        return _gram_distances(arr, metric)
    out = squareform(pdist(arr, metric=metric))
    if metric == "cosine":  # a zero row has no direction: 1 from every other row, as _gram_distances gives
        np.nan_to_num(out, copy=False, nan=1.0)
        np.fill_diagonal(out, 0.0)
    return out


PDIST_MAX_ROWS = 2_000
PDIST_MAX_WORK = 2_000_000_000
"""Above this many rows, or ``N^2 D`` above this, Euclidean and cosine distances come from
BLAS inner products instead of ``pdist``'s scalar loop (100 times faster for model updates)."""


def _gram_distances(x: np.ndarray, metric: str, block: int = 1024) -> np.ndarray:
    """``pdist`` for ``euclidean``/``sqeuclidean``/``cosine`` through ``x x^T``, a band of rows at a time.

    ``||a - b||^2 = ||a||^2 + ||b||^2 - 2 a.b`` (clipped at 0) and ``1 - a.b / (||a|| ||b||)``
    (clipped to [0, 2]) in float64: a matrix product instead of ``pdist``'s scalar loop over
    ``N^2 / 2`` pairs (agrees to ~1e-7 relative for distances not far below the norms).
    Symmetric with a zero diagonal.
    """
    sq = np.einsum("ij,ij->i", x, x)
    n = x.shape[0]
    out = np.empty((n, n))
    for start in range(0, n, block):
        band = x[start : start + block] @ x.T
        if metric == "cosine":
            norms = np.sqrt(sq)
            denom = norms[start : start + block, None] * norms[None, :]
            band = 1.0 - np.divide(band, denom, out=np.zeros_like(band), where=denom > 0)
            np.clip(band, 0.0, 2.0, out=band)
        else:
            band *= -2.0
            band += sq[start : start + block, None]
            band += sq[None, :]
            np.maximum(band, 0.0, out=band)
            if metric == "euclidean":
                np.sqrt(band, out=band)
        out[start : start + block] = band
    out += out.T
    out *= 0.5
    np.fill_diagonal(out, 0.0)
    return out


def check_distance_matrix(distances: np.ndarray, owner: str, name: str = "distances") -> np.ndarray:
    """``distances`` as float64 if it is a finite, non-negative, symmetric (N, N) matrix.

    Raises
    ------
    ValueError
        Naming ``name`` otherwise (asymmetry is tolerated up to 1e-8 relative).
    """
    d = np.asarray(distances, dtype=np.float64)
    if d.ndim != 2 or d.shape[0] != d.shape[1] or d.shape[0] == 0:
        raise ValueError(
            f"The '{name}' parameter of {owner} must be a non-empty square (N, N) array. Got shape {d.shape} instead."
        )
    if not np.all(np.isfinite(d)) or np.any(d < 0):
        raise ValueError(
            f"The '{name}' parameter of {owner} must hold finite non-negative "
            "distances. Got a negative, NaN or Inf entry instead."
        )
    if not is_symmetric(d, rtol=1e-8, atol=1e-10):
        raise ValueError(
            f"The '{name}' parameter of {owner} must be symmetric. "
            f"Got a largest asymmetry of {np.max(np.abs(d - d.T))!r} instead."
        )
    return d


def is_symmetric(matrix: np.ndarray, *, rtol: float = 1e-8, atol: float = 1e-10, block: int = 1024) -> bool:
    """``np.allclose(matrix, matrix.T, rtol, atol)`` a band of rows at a time.

    The same answer with temporaries of ``O(block N)`` instead of several ``N x N`` copies
    (800 MB each at N = 10,000).
    """
    m = np.asarray(matrix)
    for start in range(0, m.shape[0], block):
        if not np.allclose(m[start : start + block], m[:, start : start + block].T, rtol=rtol, atol=atol):
            return False
    return True


def agglomerative(
    distances: np.ndarray,
    *,
    threshold: float | None = None,
    num_clusters: int | None = None,
    linkage: str = "average",
    tree: np.ndarray | None = None,
) -> np.ndarray:
    """Agglomerative (bottom-up) clustering of a precomputed distance matrix.

    Clusters keep merging while the linkage distance between the two closest clusters is
    below ``threshold`` (scikit-learn's ``distance_threshold``), or until ``num_clusters``
    remain. Exactly one of the two must be given.

    Parameters
    ----------
    distances : ndarray of shape (N, N)
        Symmetric, non-negative, finite.
    threshold : float, optional
        Cut height, >= 0: above the largest distance gives one cluster, at or below the
        smallest gives one cluster per point.
    num_clusters : int, optional
        In ``[1, N]``.
    linkage : {"average", "complete", "single", "weighted"}, default="average"
        ``"ward"`` is refused: it needs Euclidean feature vectors, not precomputed distances.
        ``"weighted"`` is WPGMA.
    tree : ndarray of shape (N - 1, 4), optional
        ``linkage_tree(distances, linkage)`` when the caller already built it (several cuts of
        one tree).

    Returns
    -------
    ndarray of shape (N,), int64
        Cluster labels ``0..K-1`` numbered in order of first appearance. ``N == 1`` gives ``[0]``.

    Raises
    ------
    ValueError
        Naming ``'distances'``, ``'threshold'``, ``'num_clusters'`` or ``'linkage'``.
    """
    owner = "agglomerative"
    d = check_distance_matrix(distances, owner)
    if linkage == "ward":
        raise ValueError(
            f"The 'linkage' parameter of {owner} must be one of {LINKAGES}; 'ward' "
            "needs Euclidean feature vectors and cannot use precomputed distances. "
            "Got 'ward' instead."
        )
    check_choice(linkage, "linkage", owner, LINKAGES)
    if (threshold is None) == (num_clusters is None):
        raise ValueError(
            f"The 'threshold' and 'num_clusters' parameters of {owner}: exactly one "
            f"must be given. Got threshold={threshold!r}, num_clusters={num_clusters!r} "
            "instead."
        )
    n = d.shape[0]
    if num_clusters is not None:
        num_clusters = check_int(num_clusters, "num_clusters", owner, low=1, high=n)
    else:
        threshold = check_float(threshold, "threshold", owner, low=0.0)
    if n == 1:
        return np.zeros(1, dtype=np.int64)
    return cut_linkage(
        linkage_tree(d, linkage) if tree is None else tree, threshold=threshold, num_clusters=num_clusters
    )


def linkage_tree(distances: np.ndarray, linkage: str = "average") -> np.ndarray:
    """The linkage matrix (scipy's) of a checked distance matrix: the tree scikit-learn builds.

    scikit-learn's ``AgglomerativeClustering`` (precomputed, no connectivity) calls the same
    ``scipy.cluster.hierarchy.linkage`` on the same condensed distances; this skips its two
    ``N^2`` int64 index arrays (1.6 GB at N = 10,000) and lets one tree serve several cuts.

    Parameters
    ----------
    distances : ndarray of shape (N, N)
        Already checked (:func:`check_distance_matrix`), N >= 2.
    linkage : {"average", "complete", "single", "weighted"}, default="average"

    Returns
    -------
    ndarray of shape (N - 1, 4), float64
        Merge ``i`` joins nodes ``tree[i, 0]`` and ``tree[i, 1]`` into node ``N + i`` at height
        ``tree[i, 2]``; heights never decrease for these linkages.
    """
    return hierarchy.linkage(squareform(distances, checks=False), method=linkage)


def cut_linkage(tree: np.ndarray, *, threshold: float | None = None, num_clusters: int | None = None) -> np.ndarray:
    """Labels of ``tree`` cut as scikit-learn cuts: into ``num_clusters``, or at ``threshold``.

    A threshold gives ``count(heights >= threshold) + 1`` clusters (scikit-learn's
    ``distance_threshold``); K clusters undo the last K - 1 merges (scikit-learn's ``_hc_cut``),
    so equal heights are broken as scikit-learn breaks them. O(N log N), where scipy's
    ``cut_tree`` is O(N^2).

    Parameters
    ----------
    tree : ndarray of shape (N - 1, 4)
        From :func:`linkage_tree`.
    threshold : float, optional
    num_clusters : int, optional
        In ``[1, N]``; wins when both are given.

    Returns
    -------
    ndarray of shape (N,), int64
        Numbered by first appearance.
    """
    n = tree.shape[0] + 1
    k = num_clusters if num_clusters is not None else int(np.count_nonzero(tree[:, 2] >= threshold)) + 1
    kept = n - min(max(int(k), 1), n)
    root = np.arange(2 * n - 1)
    merged = tree[:kept, :2].astype(np.int64)
    root[merged[:, 0]] = root[merged[:, 1]] = n + np.arange(kept)
    while True:  # pointer jumping: every node ends at the root of its kept subtree
        up = root[root]
        if np.array_equal(up, root):
            return relabel_by_appearance(root[:n])
        root = up


def relabel_by_appearance(labels: np.ndarray) -> np.ndarray:
    """Renumber ``labels`` (N,) to ``0..K-1`` in order of first appearance (int64)."""
    labels = np.asarray(labels)
    _, first, inverse = np.unique(labels, return_index=True, return_inverse=True)
    rank = np.argsort(np.argsort(first))
    return rank[inverse.ravel()].astype(np.int64)


def most_within_tolerance(candidates: Sequence[tuple[int, float]], tolerance: float) -> int:
    """The candidate partition with the most clusters among those scoring within ``tolerance`` of the best.

    Parameters
    ----------
    candidates : sequence of (int, float)
        Each partition's number of clusters and score (higher is better; ``-inf`` allowed); not empty.
    tolerance : float
        >= 0; 0 keeps the best score (ties: the most clusters).

    Returns
    -------
    int
        Index into ``candidates``; ties keep the first.
    """
    if not candidates:
        raise ValueError("The 'candidates' parameter of most_within_tolerance must not be empty. Got [] instead.")
    best = max(score for _, score in candidates)
    return max(
        (i for i, (_, score) in enumerate(candidates) if score >= best - tolerance), key=lambda i: candidates[i][0]
    )


def centroids(vectors: np.ndarray, labels: np.ndarray, num_clusters: int | None = None) -> np.ndarray:
    """Mean vector of each cluster.

    Parameters
    ----------
    vectors : ndarray of shape (N, D)
    labels : ndarray of shape (N,)
        Integer labels in ``[0, num_clusters)``.
    num_clusters : int, optional
        K; default ``labels.max() + 1``. An empty cluster's centroid is NaN.

    Returns
    -------
    ndarray of shape (K, D), float64

    Raises
    ------
    ValueError
        Naming ``'vectors'``, ``'labels'`` or ``'num_clusters'``.
    """
    owner = "centroids"
    arr = _vectors(vectors, "vectors", owner)
    lab = np.asarray(labels)
    if lab.shape != (arr.shape[0],) or not np.issubdtype(lab.dtype, np.integer) or lab.min() < 0:
        raise ValueError(
            f"The 'labels' parameter of {owner} must be {arr.shape[0]} non-negative "
            f"integers. Got shape {lab.shape}, dtype {lab.dtype} instead."
        )
    k = (
        int(lab.max()) + 1
        if num_clusters is None
        else check_int(num_clusters, "num_clusters", owner, low=int(lab.max()) + 1)
    )
    out = np.full((k, arr.shape[1]), np.nan)
    for c in np.unique(lab):
        out[c] = arr[lab == c].mean(axis=0)
    return out


def nearest(vectors: np.ndarray, references: np.ndarray) -> np.ndarray:
    """Index of the Euclidean-nearest reference for each vector (FedClust Eq. 4).

    Parameters
    ----------
    vectors : ndarray of shape (M, D)
    references : ndarray of shape (K, D)
        Rows that are NaN (empty clusters) are never chosen; at least one must be finite.

    Returns
    -------
    ndarray of shape (M,), int64
        The first nearest on ties.

    Raises
    ------
    ValueError
        Naming ``'vectors'`` or ``'references'``.
    """
    owner = "nearest"
    arr = _vectors(vectors, "vectors", owner)
    ref = np.asarray(references, dtype=np.float64)
    usable = np.all(np.isfinite(ref), axis=1) if ref.ndim == 2 else np.zeros(0, bool)
    if ref.ndim != 2 or ref.shape[1] != arr.shape[1] or not usable.any():
        raise ValueError(
            f"The 'references' parameter of {owner} must be a (K, {arr.shape[1]}) "
            f"array with a finite row. Got shape {ref.shape} instead."
        )
    dist = np.full((arr.shape[0], ref.shape[0]), np.inf)
    dist[:, usable] = cdist(arr, ref[usable])
    return np.argmin(dist, axis=1).astype(np.int64)


def cut_tree(
    distances: np.ndarray,
    *,
    threshold: float,
    num_clusters: int = 0,
    linkage: str = "average",
    tree: np.ndarray | None = None,
) -> np.ndarray:
    """:func:`agglomerative` with the run-config convention: ``num_clusters`` wins when > 0.

    Parameters
    ----------
    distances : ndarray of shape (N, N)
    threshold : float
        Used when ``num_clusters == 0``.
    num_clusters : int, default=0
        0 = not given; larger than N is clipped to N (every point alone).
    linkage : {"average", "complete", "single"}, default="average"
    tree : ndarray of shape (N - 1, 4), optional
        As :func:`agglomerative`.

    Returns
    -------
    ndarray of shape (N,), int64
    """
    n = np.asarray(distances).shape[0] if np.ndim(distances) == 2 else 0
    if num_clusters and num_clusters > 0:
        return agglomerative(distances, num_clusters=min(int(num_clusters), max(n, 1)), linkage=linkage, tree=tree)
    return agglomerative(distances, threshold=threshold, linkage=linkage, tree=tree)


def undecided_reason(distances: np.ndarray | None) -> str:
    """Why :func:`auto_cut` kept one cluster on ``distances``, in words for the log."""
    if distances is None:
        return f"no cut of the sample scores a silhouette above {AUTO_MIN_SILHOUETTE}"
    if distances.shape[0] < 3:
        return f"{distances.shape[0]} clients, fewer than the 3 that two groups and a silhouette need"
    if not np.any(distances):
        return "all clients' signals are alike"
    joins = int(AUTO_MIN_SHARE * distances.shape[0]) >= 2
    also = f", or every cluster but one holds under {AUTO_MIN_SHARE:.0%} of the clients" if joins else ""
    return f"no cut scores a silhouette above {AUTO_MIN_SILHOUETTE}{also}: no group structure"


def automatic_max_clusters(num_clients: int, given: int = 0) -> int:
    """The most clusters an automatic K keeps among ``num_clients``: ``given`` when > 0, else half the
    clients (a cluster of one client is local training), at least 2 and at most ``AUTO_MAX_CLUSTERS``
    (:func:`auto_cut`'s range)."""
    return given if given > 0 else max(2, min(AUTO_MAX_CLUSTERS, num_clients // 2))


def check_auto_max_clusters(value: int, key: str, owner: str) -> None:
    """Refuse 1 for a ``*-auto-max-clusters`` key (0: :func:`automatic_max_clusters`; else a K of at least 2).

    Raises
    ------
    ValueError
        Naming ``key`` when ``value`` is 1.
    """
    if value == 1:
        raise ValueError(
            f"The '{key}' parameter of {owner} must be 0 (half the clients) or an int >= 2. Got 1 instead."
        )


def auto_cut(
    distances: np.ndarray,
    linkage: str = "average",
    max_clusters: int = AUTO_MAX_CLUSTERS,
    tolerance: float = AUTO_TOLERANCE,
    min_share: float = AUTO_MIN_SHARE,
) -> tuple[np.ndarray, float | None]:
    """The cut of the HC tree chosen without a threshold: the most clusters whose silhouette is
    within ``tolerance`` of the best, its smallest clusters joined to their nearest larger ones.

    Every cut of the tree into ``2 .. min(N - 1, max_clusters)`` clusters is scored by the
    silhouette on ``distances`` (scikit-learn, precomputed). The cut kept is the one with the
    most clusters among those scoring at least the best score minus ``tolerance``: the best
    score alone prefers a coarse split of groups that are close (groups sharing labels) over
    the finer one, by less than the noise of the score. When no cut scores above
    ``AUTO_MIN_SILHOUETTE`` (no substantial structure) everything stays in one cluster.

    Clients whose updates lie far from everyone's (noisy updates of a few samples) come off the
    tree as clusters of one or a few, and peeling them off raises the silhouette, so the finest
    cut keeps them apart, each with a model of its own few samples. Each member of a cluster of
    fewer than ``int(min_share * N)`` clients therefore joins the cluster of its nearest client
    in a larger one (see :func:`join_small_clusters`).

    Parameters
    ----------
    distances : ndarray of shape (N, N)
    linkage : {"average", "complete", "single", "weighted"}, default="average"
    max_clusters : int, default=AUTO_MAX_CLUSTERS
        >= 2.
    tolerance : float, default=AUTO_TOLERANCE
        In [0, 1).
    min_share : float, default=AUTO_MIN_SHARE
        In [0, 1); 0 keeps every cluster of the cut.

    Returns
    -------
    labels : ndarray of shape (N,), int64
        Numbered by first appearance.
    silhouette : float or None
        The chosen cut's silhouette; None when one cluster was kept (or N < 3).

    Raises
    ------
    ValueError
        Naming ``'distances'``, ``'linkage'``, ``'max_clusters'``, ``'tolerance'`` or ``'min_share'``.
    """
    owner = "auto_cut"
    d = check_distance_matrix(distances, owner)
    check_choice(linkage, "linkage", owner, LINKAGES)
    max_clusters = check_int(max_clusters, "max_clusters", owner, low=2)
    tolerance = check_float(tolerance, "tolerance", owner, low=0.0, high=1.0, closed=(True, False))
    min_share = check_float(min_share, "min_share", owner, low=0.0, high=1.0, closed=(True, False))
    n = d.shape[0]
    one = np.zeros(n, dtype=np.int64)
    if n < 3 or not np.any(d):
        return one, None
    tree = hierarchy.linkage(squareform(d, checks=False), method=linkage)
    scored: list[tuple[int, float, np.ndarray]] = []
    for k in range(2, min(n - 1, max_clusters) + 1):
        labels = hierarchy.fcluster(tree, k, criterion="maxclust")
        found = len(np.unique(labels))
        if found < 2 or (scored and found == scored[-1][0]):
            continue
        scored.append((found, float(silhouette_score(d, labels, metric="precomputed")), labels))
    best = max((score for _, score, _ in scored), default=0.0)
    if best <= AUTO_MIN_SILHOUETTE:
        return one, None
    _, score, labels = scored[most_within_tolerance([(k, s) for k, s, _ in scored], tolerance)]
    joined = join_small_clusters(d, labels, int(min_share * n))
    if joined is labels:
        return relabel_by_appearance(labels), score
    if joined.max() == 0:
        return one, None
    return joined, float(silhouette_score(d, joined, metric="precomputed"))


def join_small_clusters(distances: np.ndarray, labels: np.ndarray, min_size: int) -> np.ndarray:
    """Each member of a cluster of fewer than ``min_size`` clients moved to the cluster of its nearest
    client in a cluster of at least ``min_size``.

    Parameters
    ----------
    distances : ndarray of shape (N, N)
    labels : ndarray of shape (N,), int
    min_size : int
        Below 2, or when no cluster is that large or none is smaller: ``labels`` itself comes back.

    Returns
    -------
    ndarray of shape (N,), int64
        Numbered by first appearance (or ``labels`` itself, unchanged).
    """
    _, inverse, sizes = np.unique(labels, return_inverse=True, return_counts=True)
    large = sizes[inverse.ravel()] >= min_size
    if min_size < 2 or large.all() or not large.any():
        return labels
    out = np.asarray(labels).copy()
    small, kept = np.flatnonzero(~large), np.flatnonzero(large)
    out[small] = out[kept[np.argmin(distances[np.ix_(small, kept)], axis=1)]]
    return relabel_by_appearance(out)
