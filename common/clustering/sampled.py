"""Sampled-and-assign forms of the quadratic server steps (umbel's departure, labelled).

Above ``SAMPLE_ABOVE`` clients (the default of each strategy's ``*-sample-above`` key; 0 keeps
the exact step at any size) a step runs exactly on a seeded uniform sample and places every
other client by a rule of the algorithm:

- FedClust, FL+HC (``sampled_cut``): the sample's tree is cut; the rest join the nearest
  sample-cluster mean under the step's metric (FedClust's own rule for newcomers, Alg. 2).
- FLIC (``sampled_flic``): Louvain on the sample's k-NN graph; the rest join by modularity gain
  (``join_by_modularity``, FLIC's rule for clients outside the graph).
- CFL-GP (``sampled_cflgp``): the top-K left singular vectors of a sample's profile columns; every
  client is projected on them and the rest join the nearest k-means centre of the sample's
  projections, aligned with the previous clusters as Alg. 3.
- CFL-GP's K estimate (``sampled_estimate``): the silhouettes of the sampled step's sample.
- FLAG (``flag.flag_sample``, ``flag.flag_place``) and PACFL (``subspaces.sampled_clusters``) in
  their own modules: the rest join the sample cluster of smallest mean affinity to its members.
- Sattler's CFL (``sattler_split``, which ``CFLSattler`` calls with its requests and store): the
  complete-linkage bi-partition and Sattler et al.'s criteria (largest cross-half cosine against
  smallest within-half one) on the sample; the other members, asked a batch at a time, join the
  half whose mean update direction is closest in angle (``split_sample`` then ``join_halves``).
  Memory: the sample's cosines and two means, not N sketched updates and an N x N matrix. The
  sample (here and in ``sampled_cut``) is sketched as the exact step would sketch all N; every other
  update is read once, ``SCAN_BLOCK`` at a time, for its half (through the sketch's adjoint, not
  projected) and the halves' sums.

Memory is ``O(S^2 + N K)`` numbers besides the signals, time ``O(S^2 D + N K D)``, instead of
``N x N`` float64 matrices (80 GB at 100,000 clients). The assignments are inner products (BLAS):
``nearest_means`` for the nearest mean (equal to ``cdist``'s), ``join_by_sums`` for FLIC's join
(the communities' sums of unit updates, equal to the ``n`` links of each client).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

import numpy as np
from scipy.spatial.distance import cdist

from . import spectral
from .blocks import CHUNK, row_blocks
from .bipartition import SCAN_BLOCK, SEPARATION, SEPARATIONS, bipartition, block_rows, fold_rows, separation
from .flic import flic_clusters, join_by_modularity
from .louvain import DENSE_MAX_NODES
from .hierarchical import pairwise_distances
from .similarity import SAMPLE_ABOVE as SAMPLE_ABOVE
from .similarity import (
    CountSketch,
    UpdateSimilarity,
    auto_sketch_dim,
    cosine_matrix,
    sketch_rows,
    unit_rows,
    use_sample,
)
from .subspaces import SAMPLE_SIZE

SAMPLE_ABOVE_HELP = (
    "above this many clients the step runs exactly on a seeded sample (2,000; FLIC 4,000) and places every "
    "other client in its nearest sample cluster (modified, as this default: 10,000-client federations sample); "
    "0: the exact step at every size"
)
SAMPLE_ABOVE_PAPER = "the exact step on all clients (sample-above 0)"

GRAPH_SAMPLE_SIZE = 2 * DENSE_MAX_NODES
"""FLIC's sample: Louvain on its k-NN graph, as FLIC's exact step above ``DENSE_MAX_NODES`` (a dense
graph of 2,000 nodes has 2 million edges, slower for Louvain than this sample's 80,000)."""


def sample_rows(num_clients: int, rng: np.random.Generator, size: int = SAMPLE_SIZE) -> np.ndarray:
    """``min(size, num_clients)`` distinct client positions drawn with ``rng``, sorted."""
    if num_clients <= size:
        return np.arange(num_clients)
    return np.sort(rng.choice(num_clients, size=size, replace=False))


def cluster_means(
    rows: Sequence[np.ndarray] | np.ndarray, positions: np.ndarray, labels: np.ndarray, metric: str = "euclidean"
) -> np.ndarray:
    """Mean of each cluster's rows (of unit rows for ``cosine``), shape (K, D), float64; labels 0..K-1."""
    k = int(labels.max()) + 1
    dim = int(np.shape(rows[0])[-1])
    sums, counts = np.zeros((k, dim)), np.bincount(labels, minlength=k)
    for lo, block in row_blocks(rows, positions, dtype=np.float64):
        at = labels[lo : lo + len(block)]
        weights = np.zeros((k, len(block)))  # one-hot rows (1 / ||x|| for cosine): no per-cluster copies
        if metric == "cosine":
            norms = np.linalg.norm(block, axis=1)
            weights[at, np.arange(len(block))] = np.divide(1.0, norms, out=np.zeros_like(norms), where=norms > 0)
        else:
            weights[at, np.arange(len(block))] = 1.0
        sums += weights @ block
    return sums / np.maximum(counts, 1)[:, None]


INNER_PRODUCT_METRICS = frozenset({"euclidean", "sqeuclidean", "cosine"})
"""Metrics whose nearest mean :func:`nearest_means` finds by inner products (BLAS) instead of ``cdist``."""

TIE_TOLERANCE = 1e-4
"""Rows whose two best float32 scores are closer than this share of the score's scale are decided again
by ``cdist`` in float64."""


def nearest_means(block: np.ndarray, means: np.ndarray, metric: str = "euclidean") -> np.ndarray:
    """``argmin(cdist(block, means, metric), axis=1)`` by inner products where the metric allows.

    For ``euclidean`` and ``sqeuclidean`` the nearest mean minimises ``||c||^2 - 2 x.c`` (the row's
    own ``||x||^2`` is common to all means); for ``cosine`` it maximises ``x.c / ||c||``. The
    products run in the block's float32 (one BLAS call, no float64 copy of the block); a row whose
    best two scores are within ``TIE_TOLERANCE`` of the scale ``||x|| max ||c||`` is decided again
    by ``cdist`` in float64, so the result is ``cdist``'s. Other metrics go to ``cdist``.

    Parameters
    ----------
    block : ndarray of shape (m, D)
    means : ndarray of shape (K, D)
    metric : str, default="euclidean"

    Returns
    -------
    ndarray of shape (m,), int64
    """
    means64 = np.asarray(means, dtype=np.float64)
    if metric not in INNER_PRODUCT_METRICS or len(means64) == 1:
        return np.argmin(cdist(np.asarray(block, dtype=np.float64), means64, metric=metric), axis=1).astype(np.int64)
    x = np.asarray(block)
    x = x if x.dtype in (np.float32, np.float64) else x.astype(np.float64)
    norms = np.linalg.norm(means64, axis=1)
    if metric == "cosine":
        centres, offset = means64 / np.where(norms > 0, norms, 1.0)[:, None], np.zeros(len(means64))
    else:
        centres, offset = 2.0 * means64, norms**2
    scores = offset - (x @ centres.T.astype(x.dtype)).astype(np.float64)  # smaller is nearer
    best = np.argmin(scores, axis=1)
    top2 = np.partition(scores, 1, axis=1)[:, :2]
    scale = np.sqrt(np.einsum("ij,ij->i", x, x).astype(np.float64)) * norms.max()  # a tolerance: float32 will do
    if metric != "cosine":
        scale = scale + norms.max() ** 2
    close = np.flatnonzero(top2[:, 1] - top2[:, 0] <= TIE_TOLERANCE * np.maximum(scale, np.finfo(float).tiny))
    if close.size:
        best[close] = np.argmin(cdist(np.asarray(x[close], dtype=np.float64), means64, metric=metric), axis=1)
    return best.astype(np.int64)


def assign_nearest(
    rows: Sequence[np.ndarray] | np.ndarray, positions: np.ndarray, means: np.ndarray, metric: str = "euclidean"
) -> np.ndarray:
    """Index of the nearest of ``means`` (``metric`` as ``cdist``) for each row at ``positions``, in chunks.

    Rows are stacked in their own float (float32 updates stay float32) and compared by
    :func:`nearest_means`.
    """
    out = np.empty(len(positions), dtype=np.int64)
    if not len(positions):
        return out
    dtype = np.float32 if np.asarray(rows[int(positions[0])]).dtype == np.float32 else np.float64
    for lo, block in row_blocks(rows, positions, dtype=dtype):
        out[lo : lo + len(block)] = nearest_means(block, means, metric)
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
        The sample's sketch, as ``sketch_rows`` would sketch all ``N`` rows (``auto_sketch_dim(N)``:
        the exact step's sketch at this size; ``exact``: never sketch).

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
    dim = int(np.shape(rows[0])[-1])
    distances = pairwise_distances(sketch_rows(picked, seed, sketch_dim=auto_sketch_dim(n, dim), exact=exact), metric)
    sample_labels = np.unique(np.asarray(cut(distances)), return_inverse=True)[1].astype(np.int64)
    labels = np.empty(n, dtype=np.int64)
    labels[sample] = sample_labels
    rest = np.setdiff1d(np.arange(n), sample)
    if rest.size:
        means = cluster_means(rows, sample, sample_labels, metric)
        labels[rest] = assign_nearest(rows, rest, means, metric)
    return labels, sample, distances


def sampled_flic(
    similarity: UpdateSimilarity,
    pids: Sequence[int],
    resolution: float | None,
    seed: int,
    sample_above: int = 0,
    *,
    condensed: bool = True,
    tolerance: float = 0.0,
    split: bool = False,
) -> tuple[np.ndarray, float, list[int], np.ndarray]:
    """FLIC's step: Louvain on the graph of all ``pids``, or above ``sample_above`` > 0 on a sample's
    (``GRAPH_SAMPLE_SIZE`` clients).

    Sampled, every other client joins the sample community with the largest modularity gain
    (``join_by_modularity``: FLIC's own rule for clients outside the graph), computed from the
    communities' sums of unit updates (``join_by_sums``; ``condensed`` False: ``CHUNK`` rows of
    links at a time, the same numbers); the sample is drawn from ``seed``.
    ``tolerance``, ``split``: as ``flic_clusters``.

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
        labels, used = flic_clusters(graph, resolution, seed, tolerance, split)
        return labels, used, pids, graph
    at = sample_rows(len(pids), np.random.default_rng(seed), GRAPH_SAMPLE_SIZE)
    graph_pids = [pids[i] for i in at]
    graph = similarity.matrix(graph_pids)
    graph_labels, used = flic_clusters(graph, resolution, seed, tolerance, split)
    labels = np.empty(len(pids), dtype=np.int64)
    labels[at] = graph_labels
    rest = np.setdiff1d(np.arange(len(pids)), at)
    if condensed:
        labels[rest] = join_by_sums(similarity, [pids[i] for i in rest], graph_pids, graph, graph_labels, used)
        return labels, used, graph_pids, graph
    for lo in range(0, len(rest), CHUNK):
        part = rest[lo : lo + CHUNK]
        links = similarity.between([pids[i] for i in part], graph_pids)
        labels[part] = join_by_modularity(links, graph, graph_labels, used)
    return labels, used, graph_pids, graph


def join_by_sums(
    similarity: UpdateSimilarity,
    newcomers: Sequence[int],
    graph_pids: Sequence[int],
    graph: np.ndarray,
    graph_labels: np.ndarray,
    resolution: float,
) -> np.ndarray:
    """``join_by_modularity`` of ``newcomers`` to the graph's communities, from community sums.

    With ``S = 1 + u_i . u_j`` (unit updates ``u``), a newcomer's links into community ``c`` sum
    to ``n_c + u_i . U_c`` (``U_c`` the sum of ``c``'s unit updates) and its degree to
    ``n + u_i . sum_c U_c``: ``O(K k)`` per newcomer instead of its ``n`` links (``O(n k)``).
    Equal to ``join_by_modularity(similarity.between(newcomers, graph_pids), graph, ...)`` up to
    rounding (``between`` clips cosines to [-1, 1], which unit vectors reach only by rounding).

    Returns
    -------
    ndarray of shape (len(newcomers),), int64
    """
    labels = np.asarray(graph_labels, dtype=np.int64)
    k = int(labels.max()) + 1
    s = np.asarray(graph, dtype=np.float64)
    degrees = s.sum(axis=1) - np.diag(s)
    two_m = max(float(degrees.sum()), 1e-12)
    sigma = np.bincount(labels, weights=degrees, minlength=k)
    sizes = np.bincount(labels, minlength=k).astype(np.float64)
    units = similarity.unit_rows(graph_pids).astype(np.float64)
    sums32 = np.stack([units[labels == c].sum(axis=0) for c in range(k)]).astype(np.float32)  # U_c
    out = np.empty(len(newcomers), dtype=np.int64)
    for lo in range(0, len(newcomers), CHUNK):
        dots = (similarity.unit_rows(newcomers[lo : lo + CHUNK]) @ sums32.T).astype(np.float64)  # (m, K)
        k_in = sizes + dots
        gain = k_in - resolution * np.outer(k_in.sum(axis=1), sigma) / two_m
        out[lo : lo + CHUNK] = np.argmax(gain, axis=1)
    return out


Ask = Callable[[list[int]], tuple[list[int], Sequence[np.ndarray]]]
"""Asks members for their fresh update: the ids that replied and their updates (d,), in that order."""
Store = Callable[[list[int], list[np.ndarray], "CountSketch | None", "np.ndarray | None"], object]
"""``store(ids, updates, sketch, projected)`` keeps a block of updates (``m`` arrays (d,)) of the given ids;
``projected``, when not None, is their rows ``(m, k)`` in ``sketch``, already computed (a store that
projects by the same sketch keeps them instead of projecting again). ``CFLSattler``: ``kept_store`` of
``UpdateSimilarity.keep``."""


def kept_store(store: Store, keep: Collection[int] | None) -> Store:
    """``store`` for the ids in ``keep`` only (None: every id); the others' updates are not kept."""
    if keep is None:
        return store

    def kept(
        ids: list[int], updates: list[np.ndarray], sketch: CountSketch | None, projected: np.ndarray | None
    ) -> None:
        at = [i for i, p in enumerate(ids) if p in keep]
        if at:
            rows = None if projected is None else projected[at]
            store([ids[i] for i in at], [updates[i] for i in at], sketch, rows)

    return kept


def scan_sketch(store: UpdateSimilarity, keep: Collection[int] | None) -> CountSketch | None:
    """The sketch ``bipartition.scan_round`` projects every update in, in the read of its norm, for
    ``store``: the store's ``CountSketch`` where it keeps every client's update (``keep`` None); None
    where it keeps a sample's (``kept_store``), whose few rows it projects itself."""
    return store.sketch if isinstance(store.sketch, CountSketch) and keep is None else None


def kept_clients(
    clients: Sequence[int], seed: int, sample_above: int, size: int = SAMPLE_SIZE
) -> frozenset[int] | None:
    """The clients whose latest updates Sattler's CFL keeps: all (None) up to ``sample_above`` (or up to
    ``size``), above it (where splits are sampled and need no stored update) a seeded sample of ``size``:
    the sample of a first split of all of them (:func:`sattler_split`), and the clients ``distances.png``
    shows."""
    if not use_sample(len(clients), sample_above) or len(clients) <= size:
        return None
    ordered = sorted(int(p) for p in clients)
    return frozenset(ordered[int(i)] for i in sample_rows(len(ordered), np.random.default_rng(seed), size))


@dataclass(frozen=True)
class SampleSplit:
    """Sattler's bi-partition of a sample of a cluster's members (:func:`split_sample`).

    Attributes
    ----------
    sides : ndarray of shape (S,), int64
        0 for the half holding the sample's first member, 1 for the other.
    cross, intra : float
        The sample's largest cross-half cosine and its within-half statistic of the separation test.
    directions : ndarray of shape (2, k), float64
        Each half's mean unit update as the split compares updates (``sketch``'s k coordinates, or all
        D): the direction the other members are compared with (``join_halves``).
    sums : ndarray of shape (2, D), float64
        Each half's sum of updates.
    sketch : CountSketch or None
        The split's sketch (None: updates compared whole).
    """

    sides: np.ndarray
    cross: float
    intra: float
    directions: np.ndarray
    sums: np.ndarray
    sketch: CountSketch | None


def split_sample(
    updates: Sequence[np.ndarray],
    *,
    sketch_dim: int = 0,
    seed: int = 0,
    test: str = SEPARATION,
    population: int = 0,
    pids: Sequence[int] = (),
    store: Store | None = None,
) -> SampleSplit:
    """Complete linkage on ``1 - cos`` of a sample's updates, its separation (``test``,
    ``bipartition.SEPARATIONS``), each half's mean unit update (sketched) and sum.

    Parameters
    ----------
    updates : sequence of S >= 2 arrays (D,)
    sketch_dim, seed : int
        The sample is sketched as ``sketch_rows`` would sketch the ``population`` members it was
        drawn from (``auto_sketch_dim``: the exact step's sketch at that size; 0: the sample's own).
    pids, store : optional
        ``store(pids, block, sketch, projected)`` keeps the updates, ``SCAN_BLOCK`` at a time, with their
        rows in the split's sketch (a store that projects by an equal sketch keeps those): each update
        is sketched once.
    """
    dim = int(np.shape(updates[0])[-1])
    k = auto_sketch_dim(max(population, len(updates)), dim, sketch_dim)
    sketch = CountSketch(dim, k, seed) if k else None
    rows = np.concatenate(
        [
            _split_rows(block_rows(updates, lo, lo + SCAN_BLOCK), pids[lo : lo + SCAN_BLOCK], store, sketch)
            for lo in range(0, len(updates), SCAN_BLOCK)
        ]
    )
    cos = cosine_matrix(rows, rows)
    a, b = bipartition(cos)
    cross, intra = SEPARATIONS.get(test, separation)(cos, a, b)
    del cos
    sides = np.zeros(len(updates), dtype=np.int64)
    sides[b] = 1
    directions = cluster_means(rows, np.arange(len(rows)), sides, "cosine")
    return SampleSplit(sides, cross, intra, directions, half_sums(updates, sides), sketch)


def _split_rows(
    block: list[np.ndarray], pids: Sequence[int], store: Store | None, sketch: CountSketch | None
) -> np.ndarray:
    """``block`` as the split compares it (projected by ``sketch``; stacked without one), then stored
    with those rows (a store projecting by this very sketch keeps them: each update projected once)."""
    rows = np.stack(block) if sketch is None else sketch.project_rows(block)
    if store is not None:
        store([int(p) for p in pids], block, sketch, None if sketch is None else rows)
    return rows


def half_sums(updates: Sequence[np.ndarray], sides: np.ndarray) -> np.ndarray:
    """Each half's sum of updates, shape (2, D), float64: ``SCAN_BLOCK`` rows at a time (``fold_rows``)."""
    sums = np.zeros((2, int(np.shape(updates[0])[-1])))
    for lo in range(0, len(updates), SCAN_BLOCK):
        block = block_rows(updates, lo, lo + SCAN_BLOCK)
        sums += fold_rows(block, sides[lo : lo + len(block)], 2, squares=False)[1]
    return sums


def join_halves(
    updates: Sequence[np.ndarray],
    directions: np.ndarray,
    *,
    sketch: CountSketch | None = None,
    pids: Sequence[int] = (),
    store: Store | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Each update's half (the nearer of ``directions`` in cosine, as the split compares updates) and
    each half's sum, ``SCAN_BLOCK`` rows at a time.

    No update is projected to be compared: the row's cosine with a direction ``c`` in the sketch
    ranks as ``<x R, c / ||c||> = <x, (c / ||c||) R^T>`` (``CountSketch.adjoint``), so each row is read
    once, in :func:`fold_rows`' threads, for its half and the halves' sums (about a third of the CPU of
    projecting it first). ``store(pids, block, None, None)`` keeps the block (when given), projecting
    what it keeps itself.

    Parameters
    ----------
    updates : sequence of m arrays (D,)
    directions : ndarray of shape (2, k)
        The halves' mean unit updates, projected by ``sketch`` (``SampleSplit.directions``).
    sketch : CountSketch, optional
        The split's sketch (None: ``directions`` has all D coordinates).
    pids, store : optional
        As :func:`split_sample`'s.

    Returns
    -------
    sides : ndarray of shape (m,), int64
    sums : ndarray of shape (2, D), float64
        The sum of the updates on each side (the halves' models start from their mean update).
    """
    unit = unit_rows(np.asarray(directions, dtype=np.float64))
    nearer = unit if sketch is None else sketch.adjoint(unit)
    sides = np.empty(len(updates), dtype=np.int64)
    sums = np.zeros((2, int(np.shape(updates[0])[-1])))
    for lo in range(0, len(updates), SCAN_BLOCK):
        block = block_rows(updates, lo, lo + SCAN_BLOCK)
        if store is not None:
            store([int(p) for p in pids[lo : lo + len(block)]], block, None, None)
        sums += fold_rows(block, sides[lo : lo + len(block)], 2, squares=False, nearer=nearer)[1]
    return sides, sums


@dataclass(frozen=True)
class SattlerSplit:
    """One bi-partition attempt of Sattler's CFL on a cluster (:func:`sattler_split`).

    Attributes
    ----------
    halves : (list of int, list of int)
        The members that replied, by half (sorted ids; the first half holds the first split member).
    sizes : list of int
        The sizes of the halves judged: the sample's (all replies in the exact split).
    cross, intra : float
        The largest cross-half cosine and the within-half statistic of the separation test.
    kept : bool
        ``intra > cross``, or the test is ``off``; a split not kept asked no member outside the sample.
    sums : ndarray of shape (2, D), float64
        Each half's sum of updates (of the sample only when the split is not kept).
    """

    halves: tuple[list[int], list[int]]
    sizes: list[int]
    cross: float
    intra: float
    kept: bool
    sums: np.ndarray

    @property
    def means(self) -> np.ndarray:
        """Each half's mean update, shape (2, D): what each half's model starts from."""
        counts = np.array([len(h) for h in self.halves])
        return self.sums / np.maximum(counts, 1)[:, None]


def sattler_split(
    members: Sequence[int],
    ask: Ask,
    *,
    store: Store | None = None,
    sketch_dim: int = 0,
    seed: int = 0,
    test: str = SEPARATION,
    sample_above: int = 0,
    sample_size: int = SAMPLE_SIZE,
    batch: int = SAMPLE_SIZE,
    timer: Callable[[], AbstractContextManager[object]] = nullcontext,
) -> SattlerSplit | None:
    """Sattler's split of one cluster, as ``CFLSattler`` runs it: exact, or above ``sample_above`` > 0
    members on a seeded sample with the other members joined a batch at a time.

    Exact (the paper's): every member is asked (``ask``), their updates stored (``store``) and split
    by complete linkage on their cosines, sketched as ``sketch_rows`` sketches all of them
    (``split_sample`` of every reply; the same split as ``bipartition.sattler_bipartition``).
    Sampled (modified): ``sample_size`` members drawn with ``seed`` are asked and split; the split's
    criteria are the sample's; a split kept asks the other members ``batch`` at a time, each joining
    the half whose mean unit update is nearer in cosine, compared as in the sample's sketch
    (``join_halves``), so that at most one batch of updates is held (64 GB for 100,000 DNN members
    at once).

    Parameters
    ----------
    members : sequence of int
        The cluster's client ids.
    ask : callable
        ``ask(ids) -> (replied ids, their updates)``; its time is not the step's (``timer`` is not
        held around it).
    store, timer : optional
        ``store`` as :func:`split_sample`'s; ``timer()`` wraps the step's own work.
    sketch_dim, seed, test : int, int, str
        The split's sketch (0: automatic) and seed; the separation test (``bipartition.SEPARATIONS``,
        or ``off``).

    Returns
    -------
    SattlerSplit or None
        None when fewer than 3 members replied to the first request.
    """
    members = [int(p) for p in members]
    sampled = use_sample(len(members), sample_above)
    at = sample_rows(len(members), np.random.default_rng(seed), sample_size) if sampled else np.arange(len(members))
    replied, deltas = ask([members[int(i)] for i in at])
    if len(replied) < 3:
        return None
    with timer():
        split = split_sample(
            deltas,
            sketch_dim=sketch_dim,
            seed=seed,
            test=test,
            population=len(members) if sampled else len(replied),
            pids=replied,
            store=store,
        )
    del deltas
    kept = split.intra > split.cross or test == "off"
    ids, sides, sums = list(replied), [split.sides], split.sums
    sizes = np.bincount(split.sides, minlength=2).tolist()
    if kept and sampled:
        asked = {members[int(i)] for i in at}
        rest = [p for p in members if p not in asked]
        for lo in range(0, len(rest), batch):
            part, deltas = ask(rest[lo : lo + batch])
            if len(part):
                with timer():
                    joined, part_sums = join_halves(
                        deltas, split.directions, sketch=split.sketch, pids=part, store=store
                    )
                ids.extend(part)
                sides.append(joined)
                sums = sums + part_sums
            del deltas
    side = np.concatenate(sides)
    halves = tuple(sorted(np.asarray(ids)[side == h].tolist()) for h in (0, 1))
    return SattlerSplit((halves[0], halves[1]), sizes, split.cross, split.intra, kept, sums)


def sampled_cflgp(
    blocks: np.ndarray,
    counts: np.ndarray,
    previous: np.ndarray,
    *,
    impute_seed: int,
    seed: int,
    sample_above: int = 0,
    overwrite_blocks: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """CFL-GP's step (``spectral.cflgp_clusters``), or above ``sample_above`` > 0 clients its sampled form.

    Sampled: the completed profile ``G`` of all clients is projected on the top-K left singular
    vectors of a seeded sample's columns (``SAMPLE_SIZE`` clients, through their small Gram
    matrix), k-means runs on the sample's projections, and every other client joins the nearest
    k-means centre in that projection (the same affinity); the labels are then aligned with
    ``previous`` as Alg. 3's. Memory: ``G`` and ``(N, K)`` features, not an ``N``-column SVD.

    Returns
    -------
    labels : ndarray of shape (N,), int64
    features : ndarray of shape (N, K)
        Every client's spectral projection.
    values : ndarray
        The singular values of ``G`` (exact form) or of the sample's columns (sampled).
    sample : ndarray of shape (S,), int64
        Positions clustered exactly (all ``N`` in the exact form).
    """
    n, k = blocks.shape[0], blocks.shape[1]
    if not use_sample(n, sample_above):
        labels, features, values = spectral.cflgp_clusters(
            blocks, counts, previous, impute_seed=impute_seed, seed=seed, overwrite_blocks=overwrite_blocks
        )
        return labels, features, values, np.arange(n)
    g = spectral.completed_profile(blocks, counts, previous, impute_seed, overwrite_blocks=overwrite_blocks)
    sample = sample_rows(n, np.random.default_rng(seed))
    part = np.ascontiguousarray(g[:, sample])
    k = min(k, min(part.shape))
    u, values = spectral.left_vectors_and_values(part, k, seed)
    features = np.asarray(g.T @ u.astype(g.dtype, copy=False), dtype=np.float64)  # (N, K): U^T G, in G's float
    if k == 1:
        return np.zeros(n, dtype=np.int64), features, values, sample
    labels = spectral.kmeans_labels(features, k, seed, rows=sample)
    if (found := len(np.unique(labels[sample]))) < k:
        return spectral.keep_previous(previous, found, k), features, values, sample
    return spectral.align_labels(labels, previous, k), features, values, sample


def sampled_estimate(
    matrix: np.ndarray, max_clusters: int, seed: int, sample_above: int = 0, projection: str = spectral.MAX_CLUSTERS
) -> spectral.NumClustersEstimate:
    """CFL-GP's K estimate (``spectral.estimate_num_clusters``), above ``sample_above`` > 0 clients with
    the silhouettes of a seeded sample.

    The sample is :func:`sampled_cflgp`'s for the same ``seed`` and client count
    (``sample_rows(N, default_rng(seed))``); the spectrum and projection stay on all N (linear),
    k-means fits the sample, the other clients join the nearest of its clusters (as in
    :func:`sampled_cflgp`), and the silhouettes are the sample's. Up to ``sample_above``: exact.
    """
    n = np.shape(matrix)[1]
    scored = sample_rows(n, np.random.default_rng(seed)) if use_sample(n, sample_above) else None
    return spectral.estimate_num_clusters(matrix, max_clusters, seed, scored, projection)
