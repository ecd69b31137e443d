"""Sampled-and-assign forms of the quadratic server steps (umbel's departure, labelled).

Above ``SAMPLE_ABOVE`` clients (the default of each strategy's ``*-sample-above`` key; 0 keeps
the exact step at any size) a step runs exactly on a seeded uniform sample and places every
other client by a rule of the algorithm:

- FedClust, FL+HC (``sampled_cut``): the sample's tree is cut; the rest join the nearest
  sample-cluster mean under the step's metric (FedClust's own rule for newcomers, Alg. 2).
- FLIC (``sampled_flic``): Louvain on the sample's k-NN graph; the rest join by modularity gain
  (``join_by_modularity``, FLIC's rule for clients outside the graph).
- Sattler's CFL (``sampled_bipartition``): the complete-linkage bi-partition and Sattler et al.'s
  criteria (largest cross-half cosine against smallest within-half one) on the sample; the rest
  join the half whose mean update direction is closest in angle. Memory: the sample's cosines
  and two means, not N sketched updates and an N x N matrix.

Memory is ``O(S^2 + N K)`` numbers besides the signals, time ``O(S^2 D + N K D)``, instead of
``N x N`` float64 matrices (80 GB at 100,000 clients).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from scipy.spatial.distance import cdist

from .bipartition import SEPARATION, SEPARATIONS, bipartition, sattler_bipartition, separation
from .flic import flic_clusters, join_by_modularity
from .louvain import DENSE_MAX_NODES
from .hierarchical import pairwise_distances
from .similarity import SAMPLE_ABOVE as SAMPLE_ABOVE
from .similarity import UpdateSimilarity, cosine_matrix, sketch_rows, use_sample
from .subspaces import SAMPLE_SIZE

SAMPLE_ABOVE_HELP = (
    "above this many clients the step runs exactly on a seeded sample (2,000; FLIC 4,000) and places every "
    "other client in its nearest sample cluster (modified); 0: the exact step at every size"
)
SAMPLE_ABOVE_PAPER = "the exact step on all clients (sample-above 0)"

GRAPH_SAMPLE_SIZE = 2 * DENSE_MAX_NODES
"""FLIC's sample: Louvain on its k-NN graph, as FLIC's exact step above ``DENSE_MAX_NODES`` (a dense
graph of 2,000 nodes has 2 million edges, slower for Louvain than this sample's 80,000)."""

CHUNK = 512  # rows stacked at a time while assigning (a list of 100,000 DNN updates is never stacked whole)


def sample_rows(num_clients: int, rng: np.random.Generator, size: int = SAMPLE_SIZE) -> np.ndarray:
    """``min(size, num_clients)`` distinct client positions drawn with ``rng``, sorted."""
    if num_clients <= size:
        return np.arange(num_clients)
    return np.sort(rng.choice(num_clients, size=size, replace=False))


def _stack(rows: Sequence[np.ndarray] | np.ndarray, at: np.ndarray) -> np.ndarray:
    if isinstance(rows, np.ndarray):
        return np.asarray(rows[at], dtype=np.float64)
    return np.stack([np.asarray(rows[int(i)], dtype=np.float64) for i in at])


def _unit(x: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.where(norms > 0, norms, 1.0)


def cluster_means(
    rows: Sequence[np.ndarray] | np.ndarray, positions: np.ndarray, labels: np.ndarray, metric: str = "euclidean"
) -> np.ndarray:
    """Mean of each cluster's rows (of unit rows for ``cosine``), shape (K, D), float64; labels 0..K-1."""
    k = int(labels.max()) + 1
    dim = int(np.shape(rows[0])[-1])
    sums, counts = np.zeros((k, dim)), np.bincount(labels, minlength=k)
    for lo in range(0, len(positions), CHUNK):
        block = _stack(rows, positions[lo : lo + CHUNK])
        block = _unit(block) if metric == "cosine" else block
        at = labels[lo : lo + CHUNK]
        for c in np.unique(at):
            sums[c] += block[at == c].sum(axis=0)
    return sums / np.maximum(counts, 1)[:, None]


def assign_nearest(
    rows: Sequence[np.ndarray] | np.ndarray, positions: np.ndarray, means: np.ndarray, metric: str = "euclidean"
) -> np.ndarray:
    """Index of the nearest of ``means`` (``metric`` as ``cdist``) for each row at ``positions``, in chunks."""
    out = np.empty(len(positions), dtype=np.int64)
    for lo in range(0, len(positions), CHUNK):
        block = _stack(rows, positions[lo : lo + CHUNK])
        out[lo : lo + CHUNK] = np.argmin(cdist(block, means, metric=metric), axis=1)
    return out


def sampled_cut(
    rows: Sequence[np.ndarray] | np.ndarray,
    cut: Callable[[np.ndarray], np.ndarray],
    rng: np.random.Generator,
    *,
    metric: str = "euclidean",
    seed: int = 0,
    exact: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """An agglomerative step on a sample, then every other client to the nearest sample-cluster mean.

    Parameters
    ----------
    rows : sequence of N arrays (D,) or ndarray (N, D)
        One signal per client (final layer, update); never stacked whole.
    cut : callable
        ``cut(distances)`` -> labels 0..K-1 of the sample's ``(S, S)`` distance matrix.
    rng : numpy.random.Generator
        Draws the sample (from the run's seed).
    metric : str, default="euclidean"
        The step's distance (``pairwise_distances``); also the assignment's.
    seed, exact : int, bool
        The sample's sketch, as ``sketch_rows`` (``exact``: never sketch).

    Returns
    -------
    labels : ndarray of shape (N,), int64
    sample : ndarray of shape (S,), int64
        Positions clustered exactly.
    distances : ndarray of shape (S, S)
        The sample's distance matrix that was cut.
    """
    n = len(rows)
    sample = sample_rows(n, rng)
    picked = [rows[int(i)] for i in sample]
    distances = pairwise_distances(sketch_rows(picked, seed, exact=exact), metric)
    sample_labels = np.unique(np.asarray(cut(distances)), return_inverse=True)[1].astype(np.int64)
    labels = np.empty(n, dtype=np.int64)
    labels[sample] = sample_labels
    rest = np.setdiff1d(np.arange(n), sample)
    if rest.size:
        means = cluster_means(rows, sample, sample_labels, metric)
        labels[rest] = assign_nearest(rows, rest, means, metric)
    return labels, sample, distances


def sampled_flic(
    similarity: UpdateSimilarity, pids: Sequence[int], resolution: float | None, seed: int, sample_above: int = 0
) -> tuple[np.ndarray, float, list[int], np.ndarray]:
    """FLIC's step: Louvain on the graph of all ``pids``, or above ``sample_above`` > 0 on a sample's
    (``GRAPH_SAMPLE_SIZE`` clients).

    Sampled, every other client joins the sample community with the largest modularity gain
    (``join_by_modularity``: FLIC's own rule for clients outside the graph), ``CHUNK`` rows of
    links at a time; the sample is drawn from ``seed``.

    Returns
    -------
    labels : ndarray of shape (len(pids),), int64
    resolution : float
        As ``flic_clusters``.
    graph_pids : list of int
        The clients of the graph clustered (all, or the sample).
    graph : ndarray of shape (len(graph_pids), len(graph_pids))
        Its similarity matrix ``S``.
    """
    pids = [int(p) for p in pids]
    if not use_sample(len(pids), sample_above):
        graph = similarity.matrix(pids)
        labels, used = flic_clusters(graph, resolution, seed)
        return labels, used, pids, graph
    at = sample_rows(len(pids), np.random.default_rng(seed), GRAPH_SAMPLE_SIZE)
    graph_pids = [pids[i] for i in at]
    graph = similarity.matrix(graph_pids)
    graph_labels, used = flic_clusters(graph, resolution, seed)
    labels = np.empty(len(pids), dtype=np.int64)
    labels[at] = graph_labels
    rest = np.setdiff1d(np.arange(len(pids)), at)
    for lo in range(0, len(rest), CHUNK):
        part = rest[lo : lo + CHUNK]
        links = similarity.between([pids[i] for i in part], graph_pids)
        labels[part] = join_by_modularity(links, graph, graph_labels, used)
    return labels, used, graph_pids, graph


def sattler_split(
    pids: Sequence[int],
    updates: Sequence[np.ndarray],
    *,
    sketch_dim: int = 0,
    seed: int = 0,
    chunk: int = CHUNK,
    sample_above: int = 0,
    test: str = SEPARATION,
) -> tuple[list[int], list[int], float, float]:
    """Sattler's split of one cluster: ``sampled_bipartition`` above ``sample_above`` > 0 members, else exact.

    The exact form is ``bipartition.sattler_bipartition`` (every member's sketched update and the
    ``(N, N)`` cosines); the sample is drawn from ``seed``. ``test`` names the separation
    (``bipartition.SEPARATIONS``).
    """
    if use_sample(len(pids), sample_above):
        rng = np.random.default_rng(seed)
        return sampled_bipartition(pids, updates, rng, sketch_dim=sketch_dim, seed=seed, test=test)
    return sattler_bipartition(pids, updates, sketch_dim=sketch_dim, seed=seed, chunk=chunk, test=test)


def sampled_bipartition(
    pids: Sequence[int],
    updates: Sequence[np.ndarray],
    rng: np.random.Generator,
    *,
    sketch_dim: int = 0,
    seed: int = 0,
    test: str = SEPARATION,
) -> tuple[list[int], list[int], float, float]:
    """Sattler's split on a sample of the members, the rest by cosine to each half's mean direction.

    The sample's cosine matrix is split by complete linkage (``bipartition``) and its separation
    (``test``, ``bipartition.SEPARATIONS``) is measured on the sample; every other member joins the
    half whose mean unit update is closest in angle (their stationary gradient directions, which
    the criterion tells apart). Memory: the ``(S, S)``
    cosines and two means, not ``N`` sketched updates and an ``(N, N)`` matrix.

    Returns
    -------
    tuple
        The two halves' client ids (the half holding the first sampled member first), the
        sample's largest cross-half cosine and smallest within-half one.
    """
    ids = np.asarray(list(pids))
    sample = sample_rows(len(ids), rng)
    rows = sketch_rows([updates[int(i)] for i in sample], seed, sketch_dim=sketch_dim)
    cos = cosine_matrix(rows, rows)
    a, b = bipartition(cos)
    cross, intra = SEPARATIONS.get(test, separation)(cos, a, b)
    half = np.zeros(len(ids), dtype=np.int64)
    half[sample[b]] = 1
    rest = np.setdiff1d(np.arange(len(ids)), sample)
    if rest.size:
        sides = np.zeros(len(sample), dtype=np.int64)
        sides[b] = 1
        means = cluster_means(updates, sample, sides, "cosine")
        half[rest] = assign_nearest(updates, rest, means, "cosine")
    return ids[half == 0].tolist(), ids[half == 1].tolist(), cross, intra
