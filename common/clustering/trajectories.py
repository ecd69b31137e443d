"""Gradient-trajectory clustering math of CFLGT (numpy, scikit-learn; no Flower, no torch).

Paper: R. Liu, J. Wang, S. Yu and K. Kant, "A Remedy for Heterogeneous Data: Clustered Federated
Learning with Gradient Trajectory" (CFLGT):
a client's trajectory is its C points ``(Z1'_c, Z2'_c)`` (Sec. III-B, Eq. 8); two
trajectories are as far apart as the mean L2 distance of their corresponding points
(Sec. IV-B); Affinity Propagation on the negated distances gives the clusters and their
number (Alg. 1, line 11); the Hopkins statistic and the coefficient of variation of the
coordinates describe the clustering tendency and the heterogeneity (Sec. III-C, IV-D).

A set of trajectories is an array of shape ``(N, C, 2)``: client, class, (pull, push).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.spatial.distance import cdist
from sklearn.cluster import AffinityPropagation
from sklearn.exceptions import ConvergenceWarning
from sklearn.metrics import silhouette_score

from common.clustering.hierarchical import AUTO_MIN_SILHOUETTE
from common.validation import check_choice, check_float, check_int

MEDIAN = "median"
MIDRANGE = "midrange"
SILHOUETTE = "silhouette"
PREFERENCES = (MEDIAN, MIDRANGE, SILHOUETTE)
"""AP's preference by rule: ``"median"`` of the similarities, diagonal included (scikit-learn's default);
``"midrange"``, halfway between the least and the most similar pair; ``"silhouette"``, the one of
``SILHOUETTE_GRID`` evenly spaced from the least to the most similar pair whose clustering scores the
best silhouette (umbel's CFLGT default, modified)."""
SILHOUETTE_GRID = 20
""":func:`affinity_propagation`'s ``"silhouette"`` rule runs AP at this many preferences."""
SHARES = "shares"
RAW = "raw"
POINTS = (SHARES, RAW)
"""What AP compares: ``"shares"``, :func:`share_points` of the forces (umbel's default, modified), or
``"raw"``, the forces as the clients sent them (the paper's)."""


def trajectories_from_forces(pull: np.ndarray, push: np.ndarray) -> np.ndarray:
    """Stack clients' pulling and pushing forces into trajectories.

    Parameters
    ----------
    pull, push : np.ndarray of shape (N, C)
        ``Z1'`` and ``Z2'`` of each client.

    Returns
    -------
    np.ndarray of shape (N, C, 2), float64
        Point ``c`` of client ``n`` is ``(pull[n, c], push[n, c])``.

    Raises
    ------
    ValueError
        Naming ``'pull'`` or ``'push'`` unless both are finite 2-D arrays of one shape.
    """
    pull = np.asarray(pull, dtype=np.float64)
    push = np.asarray(push, dtype=np.float64)
    for name, arr in (("pull", pull), ("push", push)):
        if arr.ndim != 2 or arr.shape != pull.shape or not np.all(np.isfinite(arr)):
            raise ValueError(
                f"The '{name}' parameter of trajectories_from_forces must be a finite "
                f"array of shape (N, C) like 'pull' {pull.shape}. Got shape {arr.shape} instead."
            )
    return np.stack([pull, push], axis=-1)


def _check_trajectories(trajectories: Any, name: str, owner: str) -> np.ndarray:
    arr = np.asarray(trajectories, dtype=np.float64)
    if arr.ndim != 3 or arr.shape[-1] != 2 or arr.shape[1] == 0 or not np.all(np.isfinite(arr)):
        raise ValueError(
            f"The '{name}' parameter of {owner} must be a finite array of shape (N, C, 2) "
            f"with C >= 1. Got shape {arr.shape} instead."
        )
    return arr


def share_points(trajectories: np.ndarray) -> np.ndarray:
    """Square roots of each client's pull and push shares over its classes (scale-free trajectories).

    A force is a sum over the client's samples of ``(1 - P) v`` or ``P v``: on a pre-trained model that
    already fits most samples it is carried by the few it does not, and its size (how well the shared
    model happens to fit this client) drowns which classes carry it (the label distribution the
    trajectory is meant to show, CFLGT Sec. III-C). Dividing each client's pull by its total pull (and
    push by its total push) removes the size; the square root is the Hellinger embedding of the shares,
    under which a class a client lacks stays far from one it holds however small the share.

    Parameters
    ----------
    trajectories : np.ndarray of shape (N, C, 2)
        Forces: non-negative behind a ReLU or sigmoid (Sec. III-B); a head fed unbounded features
        (``linear``) gives signed ones, whose signs are kept.

    Returns
    -------
    np.ndarray of shape (N, C, 2), float64
        ``sign(x) sqrt(|x| / sum_c |pull[n, c]|)`` for ``x = pull[n, c]``, and the same of push; a
        client whose pull (or push) is all zero keeps zeros there.

    Raises
    ------
    ValueError
        Naming ``'trajectories'`` for a wrong shape or non-finite values.
    """
    points = _check_trajectories(trajectories, "trajectories", "share_points")
    totals = np.abs(points).sum(axis=1, keepdims=True)
    return np.sign(points) * np.sqrt(np.abs(points) / np.where(totals > 0, totals, 1.0))


def trajectory_points(trajectories: np.ndarray, points: str) -> np.ndarray:
    """The points AP and the nearest-exemplar rule compare, shape (N, C, 2): see ``POINTS``.

    Raises
    ------
    ValueError
        Naming ``'points'`` unless it is one of ``POINTS``, or ``'trajectories'``.
    """
    check_choice(points, "points", "trajectory_points", POINTS)
    if points == SHARES:
        return share_points(trajectories)
    return _check_trajectories(trajectories, "trajectories", "trajectory_points")


def trajectory_distances(a: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
    """Mean L2 distance between corresponding points of trajectories (CFLGT Sec. IV-B).

    Parameters
    ----------
    a : np.ndarray of shape (N, C, 2)
    b : np.ndarray of shape (M, C, 2), optional
        Defaults to ``a`` (the symmetric N x N matrix with a zero diagonal).

    Returns
    -------
    np.ndarray of shape (N, M)
        ``D[i, j] = mean_c ||a[i, c] - b[j, c]||_2``. The order of the points does not
        change it (Sec. IV-D), as long as it is the same for every client.

    Raises
    ------
    ValueError
        Naming ``'a'`` or ``'b'`` for a wrong shape, non-finite values or a different C.
    """
    a = _check_trajectories(a, "a", "trajectory_distances")
    b = a if b is None else _check_trajectories(b, "b", "trajectory_distances")
    if b.shape[1] != a.shape[1]:
        raise ValueError(
            f"The 'b' parameter of trajectory_distances must have C = {a.shape[1]} points "
            f"like 'a'. Got {b.shape[1]} instead."
        )
    total = np.zeros((a.shape[0], b.shape[0]))
    for c in range(a.shape[1]):
        total += cdist(a[:, c], b[:, c])
    return total / a.shape[1]


@dataclass(frozen=True)
class APResult:
    """The outcome of :func:`affinity_propagation`.

    Attributes
    ----------
    labels : np.ndarray of shape (N,), int64
        Cluster of each input, ``0 .. K-1`` (exemplar order).
    exemplars : np.ndarray of shape (K,), int64
        Row index of each cluster's exemplar.
    preference : float
        The preference actually used.
    converged : bool
        False when AP did not converge at any damping tried (``"silhouette"``: at any preference);
        every input is then in one cluster with exemplar 0 (``"silhouette"``: the medoid).
    damping : float
        The damping of the run that gave the labels (the last one tried if none converged).
    """

    labels: np.ndarray
    exemplars: np.ndarray
    preference: float
    converged: bool
    damping: float = 0.5


AP_RETRIES = ((0.7, 2), (0.9, 4))
"""After a run that does not converge: (damping at least, times ``max_iter``) of each retry."""


def affinity_propagation(
    distances: np.ndarray,
    *,
    damping: float = 0.5,
    preference: float | str = MEDIAN,
    max_iter: int = 1000,
    convergence_iter: int = 15,
    seed: int = 0,
    retries: tuple[tuple[float, int], ...] = AP_RETRIES,
) -> APResult:
    """Affinity Propagation on precomputed similarities ``-distances`` (scikit-learn).

    Parameters
    ----------
    distances : np.ndarray of shape (N, N)
        Symmetric, finite, non-negative distances (e.g. :func:`trajectory_distances`).
    damping : float, default=0.5
        In ``[0.5, 1.0)``. When AP does not converge it is run again at the dampings and
        iteration counts of ``retries`` (oscillations die out under heavier damping).
    preference : float, "silhouette", "midrange" or "median", default="median"
        Self-similarity of every point (larger = more clusters). ``"median"`` is the median
        of the similarity matrix, diagonal included (scikit-learn's own default); ``"midrange"``
        the mean of the smallest and the largest similarity of two different points. The median
        depends on how many pairs lie within groups: it falls among the within-group similarities
        whenever those pairs (with the diagonal) are half of all, as they are for two groups of
        unequal size, and AP then splits tight groups; for many groups it falls among the
        between-group ones and AP merges groups. The midrange depends on the extremes only; with
        two points, or all pairs equally similar, it is their similarity and AP keeps one cluster.
        One client far from all others (a lying one) drags the least similarity, and with it the
        midrange, down: AP then merges groups. ``"silhouette"`` runs AP at ``SILHOUETTE_GRID``
        preferences evenly spaced from the least to the most similar pair and keeps the run of 2 to
        N - 1 clusters with the best silhouette on ``distances`` (a tie: the lower preference); one
        cluster (exemplar: the medoid, preference: the least similarity) when none scores above
        ``AUTO_MIN_SILHOUETTE`` or none converges (``converged`` False then). A far client is a
        cluster of its own there, and the others' silhouettes are those without it.
    max_iter, convergence_iter : int
        As scikit-learn's.
    seed : int, default=0
        scikit-learn's ``random_state`` (the tie-breaking noise).
    retries : tuple of (float, int), default=AP_RETRIES
        (damping at least, times ``max_iter``) of each further run after one that does not
        converge; ``()`` runs once.

    Returns
    -------
    APResult
        One cluster holding everything when ``N == 1``, when all distances are zero, or
        when AP does not converge at any damping tried (``converged`` False then).

    Raises
    ------
    ValueError
        Naming the parameter for a bad matrix, damping, preference or iteration count.
    """
    owner = "affinity_propagation"
    d = np.asarray(distances, dtype=np.float64)
    if (
        d.ndim != 2
        or d.shape[0] != d.shape[1]
        or d.shape[0] == 0
        or not np.all(np.isfinite(d))
        or np.any(d < 0)
        or not np.allclose(d, d.T)
    ):
        raise ValueError(
            f"The 'distances' parameter of {owner} must be a symmetric, finite, non-negative "
            f"(N, N) array with N >= 1. Got shape {d.shape} instead."
        )
    damping = check_float(damping, "damping", owner, low=0.5, high=1.0, closed=(True, False))
    max_iter = check_int(max_iter, "max_iter", owner, low=1)
    convergence_iter = check_int(convergence_iter, "convergence_iter", owner, low=1)
    similarities = -d
    n = d.shape[0]
    if preference == SILHOUETTE:
        return _best_silhouette(d, damping, max_iter, convergence_iter, seed, retries)
    if preference == MEDIAN:
        pref = float(np.median(similarities))
    elif preference == MIDRANGE:
        least, most = _pair_range(d)
        pref = (least + most) / 2
    elif isinstance(preference, str):
        raise ValueError(
            f"The 'preference' parameter of {owner} must be one of {PREFERENCES} or a float. "
            f"Got {preference!r} instead."
        )
    else:
        pref = check_float(preference, "preference", owner)
    one = APResult(np.zeros(n, dtype=np.int64), np.zeros(1, dtype=np.int64), pref, True, damping)
    if n == 1 or not np.any(d):
        return one
    schedule = [(damping, max_iter)] + [
        (max(damping, floor), max_iter * factor) for floor, factor in retries if floor > damping
    ]
    for run_damping, run_iter in schedule:
        ap = AffinityPropagation(
            affinity="precomputed",
            damping=run_damping,
            preference=pref,
            max_iter=run_iter,
            convergence_iter=convergence_iter,
            random_state=seed,
        )
        with warnings.catch_warnings():
            warnings.simplefilter("error", ConvergenceWarning)
            try:
                labels = ap.fit_predict(similarities)
            except ConvergenceWarning:
                continue
        return APResult(
            labels.astype(np.int64), np.asarray(ap.cluster_centers_indices_, dtype=np.int64), pref, True, run_damping
        )
    return APResult(one.labels, one.exemplars, pref, False, schedule[-1][0])


def _pair_range(d: np.ndarray) -> tuple[float, float]:
    """The least and the most similarity (``-distance``) of two different points of ``d``; 0, 0 for one point."""
    off = -d[~np.eye(d.shape[0], dtype=bool)]
    return (float(off.min()), float(off.max())) if off.size else (0.0, 0.0)


def _best_silhouette(
    d: np.ndarray,
    damping: float,
    max_iter: int,
    convergence_iter: int,
    seed: int,
    retries: tuple[tuple[float, int], ...],
) -> APResult:
    """The ``"silhouette"`` preference of :func:`affinity_propagation` on checked ``distances`` ``d``."""
    n = d.shape[0]
    medoid = int(np.argmin(d.sum(axis=1)))
    least, most = _pair_range(d)
    one = APResult(np.zeros(n, dtype=np.int64), np.array([medoid], dtype=np.int64), least, True, damping)
    if n < 3 or not np.any(d):
        return one
    best, score, converged = one, AUTO_MIN_SILHOUETTE, False
    for pref in np.linspace(least, most, SILHOUETTE_GRID):
        run = affinity_propagation(
            d,
            damping=damping,
            preference=float(pref),
            max_iter=max_iter,
            convergence_iter=convergence_iter,
            seed=seed,
            retries=retries,
        )
        converged = converged or run.converged
        if run.converged and 2 <= len(run.exemplars) <= n - 1:
            run_score = float(silhouette_score(d, run.labels, metric="precomputed"))
            if run_score > score:
                best, score = run, run_score
    return best if converged else APResult(one.labels, one.exemplars, least, False, run.damping)


AP_MAX_POINTS = 200
"""Above this many trajectories, :func:`cluster_trajectories` runs AP on a seeded sample.

AP with the median preference finds more clusters the more points it sees (5 planted groups of
noisy trajectories: 5 clusters from 200 points, 11-17 from 1,000); a sample of this size keeps
the behaviour of the paper's 100-client federations at any N, and the time and memory bounded."""


@dataclass(frozen=True)
class TrajectoryClusters:
    """The outcome of :func:`cluster_trajectories`.

    Attributes
    ----------
    result : APResult
        Labels of every trajectory; exemplars as row indices into all trajectories.
    sample : np.ndarray of shape (M,), int64
        Rows AP ran on (all N when N <= ``max_points``), sorted.
    distances : np.ndarray of shape (M, M)
        Their trajectory distances.
    """

    result: APResult
    sample: np.ndarray
    distances: np.ndarray


def cluster_trajectories(
    trajectories: np.ndarray,
    *,
    damping: float = 0.5,
    preference: float | str = MEDIAN,
    seed: int = 0,
    max_points: int | None = AP_MAX_POINTS,
) -> TrajectoryClusters:
    """CFLGT's clustering of N trajectories, bounded in time and memory for large N.

    Up to ``max_points`` trajectories: :func:`affinity_propagation` on all their
    :func:`trajectory_distances` (exactly CFLGT Alg. 1, line 11). Above: AP on a uniform sample
    of ``max_points`` trajectories drawn with ``seed``, then every other trajectory joins its
    :func:`nearest_exemplar`, the rule CFLGT already applies to newcomers. The sample keeps the
    number of clusters from growing with N (see ``AP_MAX_POINTS``) and bounds AP's ``O(N^2)``
    memory and time per iteration (4 GB and minutes at N = 10,000).

    Parameters
    ----------
    trajectories : np.ndarray of shape (N, C, 2)
    damping, preference, seed
        As :func:`affinity_propagation`.
    max_points : int or None, default=AP_MAX_POINTS
        >= 1; None: AP on every trajectory (the paper's rule at any N).

    Returns
    -------
    TrajectoryClusters

    Raises
    ------
    ValueError
        As :func:`trajectory_distances` and :func:`affinity_propagation`, or naming ``'max_points'``.
    """
    points = _check_trajectories(trajectories, "trajectories", "cluster_trajectories")
    n = points.shape[0]
    max_points = n if max_points is None else check_int(max_points, "max_points", "cluster_trajectories", low=1)
    sample = (
        np.arange(n, dtype=np.int64)
        if n <= max_points
        else np.sort(np.random.default_rng(seed).choice(n, size=max_points, replace=False)).astype(np.int64)
    )
    distances = trajectory_distances(points[sample])
    result = affinity_propagation(distances, damping=damping, preference=preference, seed=seed)
    if n > max_points:
        exemplars = sample[result.exemplars]
        labels = nearest_exemplar(points, points[exemplars])
        labels[exemplars] = np.arange(len(exemplars))
        result = APResult(labels, exemplars, result.preference, result.converged, result.damping)
    return TrajectoryClusters(result, sample, distances)


def nearest_exemplar(trajectories: np.ndarray, exemplars: np.ndarray) -> np.ndarray:
    """Index of the nearest exemplar trajectory of each trajectory (newcomers' cluster).

    Parameters
    ----------
    trajectories : np.ndarray of shape (M, C, 2)
    exemplars : np.ndarray of shape (K, C, 2)

    Returns
    -------
    np.ndarray of shape (M,), int64
        In ``0 .. K-1``; the first exemplar on ties.
    """
    return np.argmin(trajectory_distances(trajectories, exemplars), axis=1).astype(np.int64)


def hopkins_statistic(points: np.ndarray, *, sample_fraction: float = 0.1, seed: int = 0) -> float:
    """Hopkins statistic of clustering tendency (about 0.5 uniform, near 1 clustered).

    ``H = sum(u) / (sum(u) + sum(w))`` with ``m`` probes: ``u_i`` the distance from a point
    drawn uniformly in the data's bounding box to its nearest data point, ``w_i`` the
    distance from a sampled data point to its nearest other data point.

    Parameters
    ----------
    points : np.ndarray of shape (N, p)
        N >= 2 finite points (CFLGT: trajectories flattened to ``2C`` coordinates).
    sample_fraction : float, default=0.1
        ``m = max(1, round(sample_fraction * N))`` probes, ``0 < sample_fraction <= 1``.
    seed : int, default=0

    Returns
    -------
    float
        In ``[0, 1]``; 0.5 when all points coincide (no tendency can be measured).

    Raises
    ------
    ValueError
        Naming ``'points'`` or ``'sample_fraction'``.
    """
    owner = "hopkins_statistic"
    x = np.asarray(points, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] < 2 or not np.all(np.isfinite(x)):
        raise ValueError(
            f"The 'points' parameter of {owner} must be a finite (N, p) array with N >= 2. Got shape {x.shape} instead."
        )
    sample_fraction = check_float(sample_fraction, "sample_fraction", owner, low=0.0, high=1.0, closed=(False, True))
    rng = np.random.default_rng(seed)
    m = max(1, round(sample_fraction * x.shape[0]))
    probes = rng.uniform(x.min(axis=0), x.max(axis=0), size=(m, x.shape[1]))
    picked = rng.choice(x.shape[0], size=m, replace=False)
    u = _nearest_distances(probes, x)
    w = _nearest_distances(x[picked], x, exclude=picked)
    total = u.sum() + w.sum()
    return 0.5 if total == 0 else float(u.sum() / total)


def _nearest_distances(
    queries: np.ndarray, points: np.ndarray, exclude: np.ndarray | None = None, *, block: int = 2**20
) -> np.ndarray:
    """Each query's Euclidean distance to its nearest point (not ``points[exclude[i]]``), shape (m,).

    The (m, N) distances are never all held: ``block`` entries at a time (m is a tenth of N in
    ``hopkins_statistic``, so they would be 8 GB at 100,000 clients). The nearest is found on
    inner products and its distance recomputed from the coordinates.
    """
    norms = np.einsum("ij,ij->i", points, points)
    rows = max(1, block // max(1, points.shape[0]))
    out = np.empty(queries.shape[0])
    for start in range(0, queries.shape[0], rows):
        q = queries[start : start + rows]
        d2 = norms[None, :] - 2.0 * (q @ points.T)
        if exclude is not None:
            d2[np.arange(q.shape[0]), exclude[start : start + rows]] = np.inf
        nearest = points[np.argmin(d2, axis=1)]
        out[start : start + rows] = np.sqrt(((q - nearest) ** 2).sum(axis=1))
    return out


def coefficient_of_variation(values: np.ndarray) -> float:
    """``std / mean`` of all values (population std), CFLGT's heterogeneity measure (Sec. III-C).

    Returns NaN when the mean is 0 (the ratio is undefined).

    Raises
    ------
    ValueError
        Naming ``'values'`` when empty or non-finite.
    """
    v = np.asarray(values, dtype=np.float64).ravel()
    if v.size == 0 or not np.all(np.isfinite(v)):
        raise ValueError(
            "The 'values' parameter of coefficient_of_variation must be a non-empty finite "
            f"array. Got {v.size} values instead."
        )
    mean = v.mean()
    return float("nan") if mean == 0 else float(v.std() / mean)
