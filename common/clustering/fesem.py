"""FeSEM's clustering step (Long et al., "Multi-center federated learning: clients clustering for
better personalization", World Wide Web 2023): K centres in parameter space, each client in the
cluster of the centre nearest its locally trained model (L2), each centre the weighted mean of
its members' models. Implemented from the paper's published description (no copy is in this
repository); docs/strategies/fesem.md says where umbel departs from it.

Points are flat model vectors, shape (n, d); centres shape (K, d). Plain numpy, no Flower.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from common.validation import check_int

OWNER = "FeSEM"


@dataclass(frozen=True)
class FeSEMClusters:
    """The result of ``fesem_clusters``.

    Attributes
    ----------
    labels : ndarray of shape (n,)
        Each point's centre, in ``[0, K)``.
    centres : ndarray of shape (K, d)
        Each centre, the weighted mean of its members (a centre without members stays where it was).
    iterations : int
        Assignment-and-update steps until the labels stopped changing (or ``max_iter``).
    inertia : float
        Weighted sum of squared distances of the points to their centres.
    """

    labels: np.ndarray
    centres: np.ndarray
    iterations: int
    inertia: float


ROWS = 512
"""Replies converted to float64 at a time by the E- and M-steps (4,000 DNN replies are 5 GB in float64)."""


def squared_distances(points: np.ndarray, centres: np.ndarray) -> np.ndarray:
    """Squared L2 distance of every point to every centre, shape (n, K), in float64, never negative."""
    points = np.asarray(points)
    c = np.asarray(centres, dtype=np.float64)
    d = np.empty((len(points), len(c)))
    for lo in range(0, len(points), ROWS):  # float64 rows a block at a time, not a copy of every reply
        p = np.asarray(points[lo : lo + ROWS], dtype=np.float64)
        d[lo : lo + ROWS] = np.einsum("ij,ij->i", p, p)[:, None] - 2.0 * p @ c.T + (c * c).sum(axis=1)[None, :]
    return np.maximum(d, 0.0)


def nearest_centres(points: np.ndarray, centres: np.ndarray) -> np.ndarray:
    """FeSEM's E-step: the index of the centre nearest each point (L2; ties: the lowest index), shape (n,).

    Raises
    ------
    ValueError
        If ``points`` and ``centres`` are not 2-D with the same number of columns.
    """
    p, c = np.asarray(points), np.asarray(centres)
    if p.ndim != 2 or c.ndim != 2 or p.shape[1] != c.shape[1] or len(c) == 0:
        raise ValueError(
            f"The 'centres' parameter of nearest_centres must be a non-empty (K, {p.shape[-1]}) array for "
            f"points of shape {p.shape}. Got shape {c.shape} instead."
        )
    return np.argmin(squared_distances(p, c), axis=1)


def update_centres(points: np.ndarray, labels: np.ndarray, weights: np.ndarray, centres: np.ndarray) -> np.ndarray:
    """FeSEM's M-step: each centre the ``weights``-weighted mean of its members; an empty one is kept.

    Returns a new array of shape (K, d) in float64.
    """
    points = np.asarray(points)
    labels = np.asarray(labels)
    w = np.asarray(weights, dtype=np.float64)
    out = np.array(centres, dtype=np.float64, copy=True)
    sums, totals = np.zeros_like(out), np.bincount(labels, weights=w, minlength=len(out))
    for lo in range(0, len(points), ROWS):
        p, at, wt = np.asarray(points[lo : lo + ROWS], dtype=np.float64), labels[lo : lo + ROWS], w[lo : lo + ROWS]
        for k in np.unique(at):
            sums[k] += wt[at == k] @ p[at == k]
    filled = np.flatnonzero(totals > 0)
    out[filled] = sums[filled] / totals[filled, None]
    return out


def seed_centres(points: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """Indices of ``k`` distinct points chosen as initial centres by k-means++ with ``rng``.

    The first uniformly, each next with probability proportional to its squared distance to the
    nearest chosen one (Arthur and Vassilvitskii, SODA 2007); when every remaining point
    coincides with a chosen one, the next is drawn uniformly among the unchosen.

    Raises
    ------
    ValueError
        Naming ``'k'`` if it is not in ``[1, n]``.
    """
    p = np.asarray(points, dtype=np.float64)
    k = check_int(k, "k", "seed_centres", low=1, high=len(p))
    chosen = [int(rng.integers(len(p)))]
    nearest = squared_distances(p, p[chosen])[:, 0]
    while len(chosen) < k:
        weights = nearest.copy()
        weights[chosen] = 0.0
        if weights.sum() > 0:
            pick = int(rng.choice(len(p), p=weights / weights.sum()))
        else:
            pick = int(rng.choice(np.setdiff1d(np.arange(len(p)), chosen)))
        chosen.append(pick)
        nearest = np.minimum(nearest, squared_distances(p, p[[pick]])[:, 0])
    return np.asarray(chosen, dtype=np.int64)


def fesem_clusters(
    points: np.ndarray,
    k: int,
    rng: np.random.Generator,
    weights: np.ndarray | None = None,
    max_iter: int = 100,
) -> FeSEMClusters:
    """Cluster the clients' models into ``k`` centres: k-means++ seeds from ``rng``, then FeSEM's
    E-step (``nearest_centres``) and M-step (``update_centres``) until no label changes.

    Parameters
    ----------
    points : ndarray of shape (n, d)
        The clients' locally trained models, flattened.
    k : int
        Centres, in ``[1, n]``.
    rng : numpy.random.Generator
        The run's seeded generator (the seeds are drawn from it).
    weights : ndarray of shape (n,), optional
        Each client's weight in its centre's mean (its ``num-examples``); default 1 each.
    max_iter : int
        Steps at most.

    Raises
    ------
    ValueError
        If ``k`` is outside ``[1, n]``, ``weights`` is not ``n`` positive finite numbers, or the
        points are not a finite 2-D array.
    """
    p = np.asarray(points, dtype=np.float64)
    if p.ndim != 2 or len(p) == 0 or not np.isfinite(p).all():
        raise ValueError(
            f"The 'points' parameter of {OWNER} must be a non-empty finite 2-D array. Got shape {p.shape} instead."
        )
    k = check_int(k, "k", OWNER, low=1, high=len(p))
    max_iter = check_int(max_iter, "max_iter", OWNER, low=1)
    w = np.ones(len(p)) if weights is None else np.asarray(weights, dtype=np.float64)
    if w.shape != (len(p),) or not np.isfinite(w).all() or (w <= 0).any():
        raise ValueError(
            f"The 'weights' parameter of {OWNER} must be {len(p)} positive finite numbers. Got {weights!r} instead."
        )
    centres = p[seed_centres(p, k, rng)]
    labels = nearest_centres(p, centres)
    iterations = 0
    while iterations < max_iter:
        iterations += 1
        centres = update_centres(p, labels, w, centres)
        new = nearest_centres(p, centres)
        if np.array_equal(new, labels):
            break
        labels = new
    inertia = float((w * squared_distances(p, centres)[np.arange(len(p)), labels]).sum())
    return FeSEMClusters(labels, centres, iterations, inertia)
