"""CFL-GP's gradient-profile spectral clustering (Kim et al., "Clustered Federated Learning via
Gradient-based Partitioning", ICML 2024: Sec. 3, Alg. 1-4, App. G).

The server keeps a gradient profile: for each client ``c`` and model ``k`` a block ``g_{c,k}``
(the client's gradient or model gap on model ``k``, possibly compressed to ``D`` coordinates),
cumulatively averaged over the clustering updates that broadcast model ``k``. The profile matrix
``G`` of shape ``(K * D, N)`` stacks the blocks of each client in a column. Spectral clustering
projects the columns on the top-``K`` left singular vectors of ``G``, runs k-means, and relabels
the groups to agree as much as possible with the previous assignment (a linear assignment
problem). With K unknown (App. G) the largest gap in the singular values suggests the dimension
``s`` to project on, and the silhouette of k-means over ``2..K_max`` on that projection gives K.

Everything takes and returns numpy; random choices come from an explicit seed.
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass

import numpy as np
from scipy.optimize import linear_sum_assignment
from scipy.spatial.distance import cdist
from sklearn.cluster import KMeans
from sklearn.metrics import silhouette_score
from sklearn.utils.extmath import randomized_svd

from common.validation import check_choice, check_int

GRAM_MAX_COLUMNS = 4_000
"""Up to this many clients, the SVD goes through the exact N x N Gram matrix (tall ``G``)."""
RANDOMIZED_MIN_SIZE = 5_000_000
"""Otherwise, matrices with more entries than this use randomised SVD for the top vectors."""
_LOG = logging.getLogger("flwr")  # Flower's logger, by its name: common stays free of Flower


def moving_average_factor(previous_updates: int) -> float:
    """The weight ``beta`` of a new block value after ``previous_updates`` earlier ones.

    ``beta = 1 / (n + 1)`` makes the block the cumulative mean of everything it received. When
    every client answers every update and the models are broadcast round-robin every ``P``
    rounds, the ``u``-th update (0-based) of the run is the ``floor(u / K) + 1``-th of its block,
    so this equals the paper's ``beta_t = 1 / (floor(t / (K P)) + 1)`` at ``t = 1 + u P``, ``P >= 2``.

    Raises
    ------
    ValueError
        Naming ``'previous_updates'`` if it is not an int ``>= 0``.
    """
    n = check_int(previous_updates, "previous_updates", "moving_average_factor", low=0)
    return 1.0 / (n + 1)


def update_block(block: np.ndarray, new: np.ndarray, previous_updates: int) -> np.ndarray:
    """``(1 - beta) * block + beta * new`` with ``beta = moving_average_factor(previous_updates)``.

    Parameters
    ----------
    block : ndarray of shape (D,)
        The client's current block for the broadcast model (zeros before its first update).
    new : ndarray of shape (D,)
        The gradient or model gap the client just returned.
    previous_updates : int
        How many values this block has averaged so far.

    Returns
    -------
    ndarray of shape (D,), float32

    Raises
    ------
    ValueError
        Naming ``'new'`` if the shapes differ.
    """
    block = np.asarray(block, dtype=np.float32)
    new = np.asarray(new, dtype=np.float32)
    if block.shape != new.shape:
        raise ValueError(
            f"The 'new' parameter of update_block must have shape {block.shape}. Got shape {new.shape} instead."
        )
    beta = moving_average_factor(previous_updates)
    return ((1.0 - beta) * block + beta * new).astype(np.float32)


def round_robin(previous: int, num_models: int) -> int:
    """The next model to broadcast after ``previous`` (Alg. 2 line 6): ``(previous + 1) mod K``.

    Start with ``previous = num_models - 1`` so that model 0 goes first.
    """
    k = check_int(num_models, "num_models", "round_robin", low=1)
    return (check_int(previous, "previous", "round_robin", low=0, high=k - 1) + 1) % k


def profile_matrix(blocks: np.ndarray) -> np.ndarray:
    """Stack per-client blocks ``(N, K, D)`` into the paper's ``G`` of shape ``(K * D, N)``."""
    blocks = np.asarray(blocks)
    if blocks.ndim != 3:
        raise ValueError(
            f"The 'blocks' parameter of profile_matrix must be 3-D (N, K, D). Got shape {blocks.shape} instead."
        )
    return blocks.reshape(blocks.shape[0], -1).T


def _gram_spectrum(g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Singular values (descending) and right singular vectors ``(N, N)`` of a tall ``g``."""
    gram = np.asarray(g.T @ g, dtype=np.float64)
    eig, vecs = np.linalg.eigh((gram + gram.T) / 2)
    order = np.argsort(eig)[::-1]
    return np.sqrt(np.clip(eig[order], 0.0, None)), vecs[:, order]


def _uses_gram(g: np.ndarray) -> bool:
    return g.ndim == 2 and g.shape[0] >= g.shape[1] and g.shape[1] <= GRAM_MAX_COLUMNS


IMPUTE_ITERS = 10
"""Hard-impute iterations of :func:`impute_blocks` for blocks a client has not answered."""

SPECTRUM_VALUES = 16
"""Singular values kept for large ``G`` by default (App. G's gap search asks for ``K_max + 1``:
:func:`estimate_num_clusters`)."""


def _large(g: np.ndarray) -> bool:
    return min(g.shape) > GRAM_MAX_COLUMNS and g.size > RANDOMIZED_MIN_SIZE


def _top_svd(g: np.ndarray, count: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Seeded randomised SVD of ``g`` to ``count`` components (float32 stays float32)."""
    count = min(count, min(g.shape) - 1)
    return randomized_svd(
        g if g.dtype == np.float32 else g.astype(np.float64), n_components=count, n_iter=7, random_state=seed
    )


def singular_values(matrix: np.ndarray, seed: int = 0, count: int = SPECTRUM_VALUES) -> np.ndarray:
    """The singular values of ``G`` ``(rows, N)``, descending.

    All ``min(rows, N)`` of them from the smaller Gram matrix (exact up to rounding) while that
    has at most ``GRAM_MAX_COLUMNS`` columns; for a larger ``G`` (thousands of clients and
    coordinates: an ``N x N`` eigendecomposition would take minutes) the top ``count`` by seeded
    randomised SVD.
    """
    g = np.asarray(matrix)
    if _large(g):
        return _top_svd(g, count, seed)[1].astype(np.float64)
    return _gram_spectrum(g if g.shape[0] >= g.shape[1] else g.T)[0]


def top_left_singular_vectors(matrix: np.ndarray, k: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Top-``k`` left singular vectors of ``G`` and their singular values.

    Parameters
    ----------
    matrix : ndarray of shape (rows, N)
        Float32 or float64; float32 profiles are multiplied in float32.
    k : int
        ``1 <= k <= min(rows, N)``.
    seed : int, default=0
        Seeds the randomised SVD, used when ``N > GRAM_MAX_COLUMNS`` (or ``G`` is wide), the
        matrix has more than ``RANDOMIZED_MIN_SIZE`` entries and ``k < min(rows, N) / 2``.
        Tall matrices with few columns go through the ``N x N`` Gram matrix: ``u = G v / s``
        (columns with ``s = 0`` are zero); small ones use the exact SVD.

    Returns
    -------
    u : ndarray of shape (rows, k)
    s : ndarray of shape (k,), descending

    Raises
    ------
    ValueError
        Naming ``'k'`` when out of range.
    """
    g = np.asarray(matrix)
    k = check_int(k, "k", "top_left_singular_vectors", low=1, high=min(g.shape))
    if _uses_gram(g):
        u, s = _gram_left(g, k)
        return u, s[:k]
    g = g.astype(np.float64)
    if g.size > RANDOMIZED_MIN_SIZE and k < min(g.shape) // 2:
        u, s, _ = randomized_svd(g, n_components=k, n_iter=7, random_state=seed)
        return u, s
    u, s, _ = np.linalg.svd(g, full_matrices=False)
    return u[:, :k], s[:k]


def _gram_left(g: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-``k`` left singular vectors ``u = G v / s`` of a tall ``g`` and all its singular values, one Gram matrix."""
    s, v = _gram_spectrum(g)
    scale = np.divide(1.0, s[:k], out=np.zeros(k), where=s[:k] > 0)
    # float32 @ float64 would cast all of G to float64 (twice its size) first
    vectors = v[:, :k].astype(np.float32 if g.dtype == np.float32 else np.float64, copy=False)
    return np.asarray(g @ vectors, dtype=np.float64) * scale, s


def left_vectors_and_values(matrix: np.ndarray, k: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``top_left_singular_vectors(matrix, k, seed)[0]`` and ``singular_values(matrix, seed)``, from one
    Gram matrix where ``G`` is tall with at most ``GRAM_MAX_COLUMNS`` columns (its cost dominates)."""
    g = np.asarray(matrix)
    if _uses_gram(g):
        return _gram_left(g, check_int(k, "k", "left_vectors_and_values", low=1, high=min(g.shape)))
    return top_left_singular_vectors(g, k, seed)[0], singular_values(g, seed)


def project(matrix: np.ndarray, dims: int, seed: int = 0) -> np.ndarray:
    """Each client's column projected on the top-``dims`` left singular vectors: ``(N, dims)``.

    ``U_s^T G = S_s V_s^T``, so for tall ``G`` the projection needs only the Gram matrix.
    """
    g = np.asarray(matrix)
    dims = check_int(dims, "dims", "project", low=1, high=min(g.shape))
    if _uses_gram(g):
        s, v = _gram_spectrum(g)
        return v[:, :dims] * s[:dims]
    u, _ = top_left_singular_vectors(g, dims, seed)
    return (u.T @ g.astype(np.float64)).T


def kmeans_labels(features: np.ndarray, k: int, seed: int = 0, rows: np.ndarray | None = None) -> np.ndarray:
    """Seeded k-means (k-means++, 10 restarts) labels of ``features`` ``(N, f)``: ``(N,)`` int64.

    ``rows`` (the sampled forms): k-means runs on those rows only, which keep its labels; every other
    row joins the cluster whose mean over them is nearest.
    """
    x = np.asarray(features, dtype=np.float64)
    fit = x if rows is None else x[rows]
    km = KMeans(n_clusters=k, n_init=10, random_state=seed)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        labels = km.fit_predict(fit).astype(np.int64)
    for w in caught:  # scikit-learn's (duplicate points, ...): the log's debug level, not the console
        _LOG.debug("k-means with k = %d: %s", k, w.message)
    if rows is None:
        return labels
    present = np.unique(labels)
    means = np.stack([fit[labels == c].mean(axis=0) for c in present])
    placed = present[np.argmin(cdist(x, means), axis=1)]
    placed[rows] = labels
    return placed


def align_labels(new: np.ndarray, old: np.ndarray, num_clusters: int) -> np.ndarray:
    """Rename the groups of ``new`` so that as many clients as possible keep their ``old`` cluster.

    Solves Alg. 3 line 3 (a maximum-weight matching between new groups and old clusters) with
    ``scipy.optimize.linear_sum_assignment`` on the ``K x K`` contingency table.

    Parameters
    ----------
    new, old : ndarray of shape (N,)
        Labels in ``[0, num_clusters)``.
    num_clusters : int

    Returns
    -------
    ndarray of shape (N,), int64
        ``new`` with its labels permuted; the partition itself is unchanged.

    Raises
    ------
    ValueError
        Naming ``'new'`` or ``'old'`` if a label is out of range or the lengths differ.
    """
    k = check_int(num_clusters, "num_clusters", "align_labels", low=1)
    new = np.asarray(new, dtype=np.int64)
    old = np.asarray(old, dtype=np.int64)
    for name, arr in (("new", new), ("old", old)):
        if arr.shape != (len(new),) or (arr.size and (arr.min() < 0 or arr.max() >= k)):
            raise ValueError(
                f"The '{name}' parameter of align_labels must be {len(new)} labels in "
                f"[0, {k}). Got {arr.tolist()} instead."
            )
    table = np.zeros((k, k), dtype=np.int64)
    np.add.at(table, (new, old), 1)
    rows, cols = linear_sum_assignment(table, maximize=True)
    mapping = np.empty(k, dtype=np.int64)
    mapping[rows] = cols
    return mapping[new]


def spectral_clustering(
    matrix: np.ndarray, k: int, previous: np.ndarray, seed: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Alg. 3: project ``G`` on its top-``k`` left singular vectors, k-means, align to ``previous``.

    Parameters
    ----------
    matrix : ndarray of shape (rows, N)
        The profile matrix, one column per client.
    k : int
        Number of clusters, ``1 <= k <= min(rows, N)``.
    previous : ndarray of shape (N,)
        The current cluster of each column, in ``[0, k)``.
    seed : int, default=0

    Returns
    -------
    labels : ndarray of shape (N,), int64
        ``previous`` unchanged (logged) when k-means finds fewer than ``k`` distinct clusters.
    features : ndarray of shape (N, k)
        The projected columns ``U^T G`` (transposed) the labels come from.
    values : ndarray of shape (min(rows, N),) or (SPECTRUM_VALUES,)
        The singular values of ``G`` (for tall ``G`` from the same Gram matrix, at no extra cost;
        the top ``SPECTRUM_VALUES`` when both sides exceed ``GRAM_MAX_COLUMNS``).
    """
    g = np.asarray(matrix)
    k = check_int(k, "k", "spectral_clustering", low=1, high=min(g.shape))
    if _uses_gram(g):
        values, v = _gram_spectrum(g)
        features = v[:, :k] * values[:k]
    elif _large(g):
        _, values, vt = _top_svd(g, max(k, SPECTRUM_VALUES), seed)
        values = values.astype(np.float64)
        features = vt[:k].T.astype(np.float64) * values[:k]
    else:
        values, features = singular_values(g), project(g, k, seed)
    if k == 1:
        return np.zeros(features.shape[0], dtype=np.int64), features, values
    labels = kmeans_labels(features, k, seed)
    found = len(np.unique(labels))
    if found < k:
        return keep_previous(previous, found, k), features, values
    return align_labels(labels, previous, k), features, values


def keep_previous(previous: np.ndarray, found: int, k: int) -> np.ndarray:
    """``previous`` as int64, logging that k-means found only ``found`` of ``k`` distinct clusters."""
    _LOG.warning(
        "CFL-GP: k-means found %d distinct clusters of %d on the profile (clients' profiles coincide); "
        "the clustering is kept as it was",
        found,
        k,
    )
    return np.asarray(previous, dtype=np.int64)


@dataclass(frozen=True)
class NumClustersEstimate:
    """App. G's estimate: the gap dimension ``s``, the projection's dimension, the silhouettes and the chosen K.

    Attributes
    ----------
    num_clusters : int
        The k of ``silhouettes`` with the best one (the fewer clusters on a tie); 1 (all in one cluster)
        when there is none.
    gap_dims : int
        ``s``: the number of singular values of the centred profile before the largest gap.
    singular_values : ndarray
        Those singular values, descending.
    silhouettes : dict of int to float
        The silhouette on the ``dims``-dimensional projection of each k searched (``2..K_max``, stopped
        ``ESTIMATE_PATIENCE`` k after the best) for which k-means found k distinct clusters.
    labels : ndarray of shape (N,), int64
        The k-means clusters of the chosen K on that projection.
    dims : int
        The leading directions the clients were projected on: ``s`` under ``LARGEST_GAP``; under
        ``MAX_CLUSTERS`` ``K_max``, or the profile's length when it is shorter. 0 in a state saved
        before the field existed (its estimate projected on ``s``).
    """

    num_clusters: int
    gap_dims: int
    singular_values: np.ndarray
    silhouettes: dict[int, float]
    labels: np.ndarray
    dims: int = 0


ESTIMATE_PATIENCE = 10
""":func:`estimate_num_clusters` stops its search after this many successive k without a better silhouette."""
MAX_CLUSTERS = "max-clusters"
LARGEST_GAP = "largest-gap"
PROJECTIONS = (MAX_CLUSTERS, LARGEST_GAP)
"""The directions :func:`estimate_num_clusters` scores k on: the ``K_max`` leading ones (umbel's default,
modified), or the ``s`` before the largest gap (App. G's)."""


def largest_gap(values: np.ndarray, max_dims: int) -> int:
    """``s`` in ``[1, max_dims]`` maximising ``values[s-1] - values[s]`` (descending ``values``).

    Raises
    ------
    ValueError
        Naming ``'values'`` if fewer than two values are given.
    """
    values = np.asarray(values, dtype=np.float64)
    if values.ndim != 1 or values.size < 2:
        raise ValueError(
            f"The 'values' parameter of largest_gap must hold at least 2 singular values. Got {values.size} instead."
        )
    m = min(check_int(max_dims, "max_dims", "largest_gap", low=1), values.size - 1)
    return int(np.argmax(values[:m] - values[1 : m + 1])) + 1


def estimate_num_clusters(
    matrix: np.ndarray,
    max_clusters: int,
    seed: int = 0,
    scored: np.ndarray | None = None,
    projection: str = MAX_CLUSTERS,
) -> NumClustersEstimate:
    """App. G: number of clusters from the profile's spectrum, confirmed by the silhouette.

    The columns are centred first (the mean client profile subtracted): real profiles share
    a direction, all clients' gradients on one model pointing much the same way, and that
    direction alone gives the largest gap after the first singular value. ``s`` is the position of
    the largest gap among the first ``max_clusters + 1`` singular values of the centred profile
    (``K`` groups span ``K - 1`` centred directions). The centred columns are projected on the
    leading left singular vectors (``projection``: ``MAX_CLUSTERS``, the ``K_max`` leading ones;
    ``LARGEST_GAP``, App. G's ``s``), and k-means with k in ``2..K_max`` (``K_max =
    min(max_clusters, N - 1)``, N the clients ``scored``) is scored by silhouette; the best k is returned.
    The search stops once ``ESTIMATE_PATIENCE`` successive k have not raised the best silhouette: past
    the groups' number it falls, and a search to ``max_clusters`` 100 would run 99 k-means (the
    measurements: docs/strategies/cfl-gp-ifca.md).

    ``MAX_CLUSTERS`` keeps every direction ``K_max`` groups can span: when one group lies far from
    the others (early profiles), the largest gap comes after its one direction, and the others,
    merged on that one dimension, are lost to App. G's ``s``. App. G itself finds that more
    directions than the gap's (its s = 8 against 4) separate groups that the gap's merge.

    ``scored``: the client positions k-means fits and whose silhouettes score each k (None: all N);
    the others join the nearest of those clusters. The silhouette is quadratic in the clients
    scored (100,000 clients: 10^10 distances per k): the sampled form (``sampled.sampled_estimate``)
    fits and scores its seeded sample only.

    Raises
    ------
    ValueError
        Naming ``'max_clusters'`` if below 2, ``'matrix'`` if it has fewer than 3 columns, ``'scored'``
        if it holds fewer than 3 positions, or ``'projection'`` unless it is one of ``PROJECTIONS``.
    """
    g = np.asarray(matrix)
    g = g if g.dtype == np.float32 else g.astype(np.float64)
    k_max = check_int(max_clusters, "max_clusters", "estimate_num_clusters", low=2)
    check_choice(projection, "projection", "estimate_num_clusters", PROJECTIONS)
    if g.ndim != 2 or g.shape[1] < 3:
        raise ValueError(
            f"The 'matrix' parameter of estimate_num_clusters must have at least 3 columns "
            f"(clients). Got shape {g.shape} instead."
        )
    if scored is not None and len(scored) < 3:
        raise ValueError(
            f"The 'scored' parameter of estimate_num_clusters must hold at least 3 client positions. "
            f"Got {len(scored)} instead."
        )
    k_max = min(k_max, (g.shape[1] if scored is None else len(scored)) - 1)  # a silhouette needs k < points
    g = g - g.mean(axis=1, keepdims=True, dtype=np.float64).astype(g.dtype)  # float32 stays float32
    values = singular_values(g, seed, max(SPECTRUM_VALUES, k_max + 1))
    s = largest_gap(values, k_max)
    dims = min(k_max, *g.shape) if projection == MAX_CLUSTERS else s
    features = project(g, dims, seed)
    silhouettes: dict[int, float] = {}
    best, labels, misses = 0, np.zeros(g.shape[1], dtype=np.int64), 0
    at = slice(None) if scored is None else scored
    for k in range(2, k_max + 1):
        if misses >= ESTIMATE_PATIENCE:
            break
        found = kmeans_labels(features, k, seed, rows=scored)
        misses += 1
        # fewer distinct clusters than k: k is not a candidate; the silhouette needs 2 among the scored
        if len(np.unique(found)) == k and len(np.unique(found[at])) >= 2:
            silhouettes[k] = float(silhouette_score(features[at], found[at]))
            if not best or silhouettes[k] > silhouettes[best]:  # a tie keeps the fewer clusters
                best, labels, misses = k, found, 0
    if not silhouettes:
        _LOG.warning(
            "CFL-GP cannot estimate K: k-means finds no 2 distinct clusters in the profile (clients alike); "
            "all clients stay in one cluster"
        )
        return NumClustersEstimate(1, s, values, {}, labels, dims)
    return NumClustersEstimate(best, s, values, silhouettes, labels, dims)


def impute_blocks(
    blocks: np.ndarray,
    counts: np.ndarray,
    labels: np.ndarray,
    rank: int = 0,
    iters: int = IMPUTE_ITERS,
    seed: int = 0,
    *,
    overwrite_blocks: bool = False,
) -> np.ndarray:
    """Fill the blocks a client never answered: cluster means, then a rank-``rank`` completion.

    With ``cfl-gp-profile-fraction`` < 1 a client's block of model ``k`` stays empty until it is
    sampled at a broadcast of ``k``; left at zero it pulls the client towards the origin of the
    spectral projection, away from its group. It first gets the mean of the answered blocks of
    ``k`` in its current cluster (of all clients when none there answered; zero when none did).
    With ``rank`` > 0 the missing blocks are then refined ``iters`` times by the rank-``rank``
    approximation of ``G`` (hard-impute matrix completion; CFL-GP's clusters are the rank-K
    structure of ``G``), the answered blocks held fixed.

    Parameters
    ----------
    blocks : ndarray of shape (N, K, D)
    counts : ndarray of shape (N, K)
        Updates averaged into each block (0 = never answered).
    labels : ndarray of shape (N,)
        Each client's current cluster.
    rank : int, default=0
        >= 0; 0 keeps the cluster means.
    iters : int, default=IMPUTE_ITERS
    seed : int, default=0
        For the SVD of large ``G``.

    Returns
    -------
    ndarray of shape (N, K, D)
        A copy, answered blocks unchanged (``blocks`` itself, filled in, with ``overwrite_blocks``:
        saves a copy of the whole profile).

    Raises
    ------
    ValueError
        Naming ``'counts'`` or ``'labels'`` when their shapes do not match ``blocks``.
    """
    b = np.asarray(blocks) if overwrite_blocks else np.array(blocks, copy=True)
    c = np.asarray(counts)
    lab = np.asarray(labels)
    if b.ndim != 3 or c.shape != b.shape[:2]:
        raise ValueError(
            f"The 'counts' parameter of impute_blocks must have shape {b.shape[:2]}. Got {c.shape} instead."
        )
    if lab.shape != (b.shape[0],):
        raise ValueError(
            f"The 'labels' parameter of impute_blocks must have shape {(b.shape[0],)}. Got {lab.shape} instead."
        )
    for k in range(b.shape[1]):
        answered = c[:, k] > 0
        if answered.all() or not answered.any():
            continue
        overall = b[answered, k].mean(axis=0)
        for cluster in np.unique(lab[~answered]):
            peers = answered & (lab == cluster)
            b[~answered & (lab == cluster), k] = b[peers, k].mean(axis=0) if peers.any() else overall
    missing = c == 0
    rank = min(check_int(rank, "rank", "impute_blocks", low=0), min(b.shape[0], b.shape[1] * b.shape[2]))
    if rank == 0 or not missing.any() or missing.all():
        return b
    size = b.shape[2]
    for _ in range(check_int(iters, "iters", "impute_blocks", low=0)):
        g = profile_matrix(b)
        u, _ = top_left_singular_vectors(g, rank, seed)
        coef = _left_project(u, g)
        # the rank-``rank`` approximation u coef, only where blocks are missing, a band at a time
        for k in range(b.shape[1]):
            rows = u[k * size : (k + 1) * size]
            holes = np.flatnonzero(missing[:, k])
            for start in range(0, holes.size, IMPUTE_BAND):
                band = holes[start : start + IMPUTE_BAND]
                b[band, k] = (rows @ coef[:, band]).T
    return b


IMPUTE_BAND = 256
""":func:`impute_blocks` rebuilds at most this many clients' missing blocks at once."""
IMPUTE_BAND_BYTES = 64 << 20
"""Float64 rows of G that :func:`impute_blocks` converts at once."""


def _left_project(u: np.ndarray, g: np.ndarray, band: int | None = None) -> np.ndarray:
    """``u.T @ g`` ``(r, N)`` in float64, ``band`` rows of a float32 ``g`` at a time (no float64 copy
    of G); by default as many rows as make ``IMPUTE_BAND_BYTES`` of float64."""
    band = band or max(1, IMPUTE_BAND_BYTES // (8 * g.shape[1]))
    out = np.zeros((u.shape[1], g.shape[1]))
    for start in range(0, g.shape[0], band):
        out += u[start : start + band].T @ np.asarray(g[start : start + band], dtype=np.float64)
    return out


def completed_profile(
    blocks: np.ndarray, counts: np.ndarray, labels: np.ndarray, seed: int = 0, *, overwrite_blocks: bool = False
) -> np.ndarray:
    """``G`` of N clients' blocks ``(N, K, D)``; blocks a client never answered (``counts`` 0) are
    imputed first (:func:`impute_blocks`, rank K, clusters ``labels``).
    """
    if np.any(counts == 0):
        blocks = impute_blocks(
            blocks, counts, labels, rank=blocks.shape[1], seed=seed, overwrite_blocks=overwrite_blocks
        )
    return profile_matrix(blocks)


def cflgp_clusters(
    blocks: np.ndarray,
    counts: np.ndarray,
    previous: np.ndarray,
    *,
    impute_seed: int,
    seed: int,
    overwrite_blocks: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """CFL-GP's server step: K clusters of the clients' profile blocks ``(N, K, D)``.

    The completed profile (:func:`completed_profile`) clustered by :func:`spectral_clustering`
    into K, aligned with ``previous``; returns its labels, spectral features and singular values.
    ``overwrite_blocks``: impute into ``blocks`` instead of a copy (a caller's own stack).
    """
    matrix = completed_profile(blocks, counts, previous, impute_seed, overwrite_blocks=overwrite_blocks)
    return spectral_clustering(matrix, blocks.shape[1], previous, seed)
