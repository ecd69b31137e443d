"""Sattler's clustered FL: recursive bi-partitioning by update similarity.

Sattler, Mueller and Samek, "Clustered Federated Learning: Model-Agnostic Distributed
Multitask Optimization under Privacy Constraints", IEEE TNNLS 32(8), 2021 (Alg. 1; reference
code felisat/clustered-federated-learning). A cluster whose federated optimisation has
reached a stationary point of the joint objective (its members' updates cancel: the norm of
their mean is small) while some client still moves far is split in two by complete linkage
on ``1 - cos`` of its members' updates. The reference code's absolute thresholds (eps1 0.4,
eps2 1.6) depend on the model, learning rate and local epochs; :func:`mean_update_ratio`
makes eps1 relative: the norm of the cluster's mean update over the members' RMS update norm,
estimated without bias from the sampled members (1 for aligned updates, ``sqrt(mean cos)``
for updates of equal norms, whatever the sample size). The split is kept only
when it separates: by default (modified) every member has a partner in its own half more alike
than any pair across (:func:`nearest_separation`), which a half holding several groups passes;
``strict`` is Sattler's correctness condition for two groups (Sec. III: every cosine inside a half
exceeds every cosine across, :func:`separation`), which such a half never passes; the reference
code keeps every split (``off``). ``gamma_max = sqrt((1 - alpha_cross_max) / 2)`` is the gradient
noise a separating split tolerates. The reference code returns the halves as positions inside
the cluster; :func:`split_cluster` maps them back to client ids (tested). Numpy and
scipy only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from scipy.cluster import hierarchy

from .blocks import row_blocks
from .similarity import ROW_BLOCK, CountSketch, cosine_matrix, over_rows, sketch_rows

SCAN_BLOCK = 4 * ROW_BLOCK
"""Updates read at a time (never stacked) where each is read for several results (its sketch for the
store, its norm, its half, the halves' sums): 64, as the store's refresh of a dense ``S`` (up to
``SAMPLE_ABOVE`` clients) is one product per call (16 rows a call took 2.2x its CPU at 4,000 clients);
the sketch projects them ``ROW_BLOCK`` at a time."""


def block_rows(rows: Sequence[np.ndarray] | np.ndarray, lo: int, hi: int) -> list[np.ndarray]:
    """Rows ``lo:hi`` of ``rows`` as a list of arrays (read once each; views of an array's rows)."""
    return [np.asarray(rows[i]) for i in range(lo, min(hi, len(rows)))]


def fold_rows(
    rows: Sequence[np.ndarray],
    groups: np.ndarray,
    num_groups: int,
    *,
    squares: bool = True,
    sketch: CountSketch | None = None,
    projected: np.ndarray | None = None,
    nearer: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Each row's squared norm and each group's sum of rows, every row read once, in threads (``over_rows``).

    Parameters
    ----------
    rows : list of m arrays (d,)
        Rows already read (never stacked); float32 rows are summed in float32 per thread, then in float64.
    groups : ndarray of shape (m,), int
        Each row's group, ``0 <= g < num_groups``.
    num_groups : int
    squares : bool, default=True
        False: the sums only (``squares`` comes back empty).
    sketch : CountSketch, optional
        Also project each row by it (``CountSketch.project_row``) into ``projected``, first, so that the
        norm and the sum read the row from the cache.
    projected : ndarray of shape (m, k), float32, optional
        Filled with the rows' projections when ``sketch`` is given (required then).
    nearer : ndarray of shape (2, d), optional
        Each row's group is chosen in the same read and written into ``groups`` (``num_groups`` 2):
        0 when its inner product with ``nearer[0]`` is at least that with ``nearer[1]``, else 1, by one
        product in the row's float, ``<row, nearer[0] - nearer[1]>`` (a row tied to within its
        rounding may go either way; the same way in every run on one machine, whatever the threads).

    Returns
    -------
    squares : ndarray of shape (m,) (or (0,)), float64
    sums : ndarray of shape (num_groups, d), float64

    Raises
    ------
    ValueError
        If a row is not a vector of the first row's length.
    """
    first = np.asarray(rows[0])
    dim = first.shape[-1] if first.ndim else 0
    bad = next((i for i, r in enumerate(rows) if np.shape(r) != (dim,)), None)
    if bad is not None:
        raise ValueError(
            f"The 'rows' parameter of fold_rows must hold vectors of one length {dim}. "
            f"Got shape {np.shape(rows[bad])} at row {bad} instead."
        )
    if sketch is not None and (projected is None or projected.shape != (len(rows), sketch.sketch_dim)):
        raise ValueError(
            f"The 'projected' parameter of fold_rows must be an array of shape {(len(rows), sketch.sketch_dim)} "
            f"with a sketch. Got {None if projected is None else projected.shape} instead."
        )
    if nearer is not None and (
        np.shape(nearer) != (2, dim)
        or num_groups != 2
        or not isinstance(groups, np.ndarray)
        or groups.shape != (len(rows),)
        or not np.issubdtype(groups.dtype, np.integer)
    ):
        raise ValueError(
            f"The 'nearer' parameter of fold_rows must be an array of shape {(2, dim)}, with 2 groups written "
            f"into 'groups', an int array of shape {(len(rows),)}. Got {np.shape(nearer)}, {num_groups} groups "
            f"and {type(groups).__name__} {np.shape(groups)} instead."
        )
    dtype = first.dtype if first.dtype in (np.float32, np.float64) else np.dtype(np.float64)
    if nearer is None:
        groups = np.asarray(groups, dtype=np.int64)
    else:
        apart = np.subtract(*np.asarray(nearer, dtype=np.float64)).astype(dtype)
    norms = np.empty(len(rows) if squares else 0)
    threads: dict[int, np.ndarray] = {}

    def fold(a: int, b: int, t: int) -> None:
        acc = threads[t] = np.zeros((num_groups, dim), dtype=dtype)
        for i in range(a, b):
            if sketch is not None:
                projected[i] = sketch.project_row(rows[i])  # type: ignore[index]
            r = np.asarray(rows[i], dtype=dtype)
            if squares:
                norms[i] = np.einsum("i,i->", r, r)
            if nearer is not None:
                groups[i] = 0 if np.einsum("i,i->", r, apart) >= 0 else 1
            np.add(acc[groups[i]], r, out=acc[groups[i]])

    over_rows(len(rows), fold)
    sums = np.zeros((num_groups, dim))
    for t in sorted(threads):  # in slice order: the same float64 sums whatever thread ends first
        sums += threads[t]
    return norms, sums


class NormSums:
    """Running sums for :func:`update_norms`: fed a block or a row at a time, never holding the updates.

    Attributes
    ----------
    total : ndarray of shape (d,), float64, or None
        Sum of the updates seen.
    squares, largest : float
        Sum and largest of their squared norms.
    count : int
    """

    def __init__(self) -> None:
        self.total: np.ndarray | None = None
        self.squares, self.largest, self.count = 0.0, 0.0, 0

    def add(self, block: np.ndarray) -> None:
        """Add updates of shape (m, d), m >= 1 (float64 sums, no float64 copy of the block).

        Raises
        ------
        ValueError
            If ``block`` is not a non-empty 2-D array.
        """
        u = np.asarray(block)
        u = u if np.issubdtype(u.dtype, np.floating) else u.astype(np.float64)
        if u.ndim != 2 or u.shape[0] == 0:
            raise ValueError(
                "The 'updates' parameter of update_norms must be a non-empty (m, d) array. "
                f"Got shape {u.shape} instead."
            )
        if u.dtype == np.float32:  # float32 products and sums (about 1e-6 relative), float64 totals
            sq = np.einsum("ij,ij->i", u, u).astype(np.float64)
            part = (np.ones(u.shape[0], dtype=np.float32) @ u).astype(np.float64)
        else:
            sq = np.einsum("ij,ij->i", u, u, dtype=np.float64)
            part = u.sum(axis=0, dtype=np.float64)
        self.add_folded(sq, part)

    def add_folded(self, squares: np.ndarray, total: np.ndarray) -> None:
        """Add ``m >= 1`` updates given by their squared norms (m,) and their sum (d,) (:func:`fold_rows`)."""
        self.total = np.array(total, dtype=np.float64) if self.total is None else self.total + total
        self.squares, self.largest = self.squares + float(squares.sum()), max(self.largest, float(squares.max()))
        self.count += len(squares)

    def add_rows(self, rows: Sequence[np.ndarray]) -> None:
        """Add updates given one array (d,) each, a row at a time (no stacked block)."""
        for row in rows:
            r = np.asarray(row)
            if r.ndim != 1 or (self.total is not None and r.shape != self.total.shape):
                self.add(r)  # raises, naming the shape
            sq = float(np.einsum("i,i->", r, r, dtype=np.float64))
            if self.total is None:
                self.total = r.astype(np.float64)
            else:
                self.total += r
            self.squares, self.largest, self.count = self.squares + sq, max(self.largest, sq), self.count + 1

    def norms(self) -> tuple[float, float, float]:
        """``(||mean update||, RMS ||update_i||, max_i ||update_i||)``; ValueError before any update."""
        if self.total is None:
            self.add(np.zeros((0, 0)))
        assert self.total is not None
        m = self.count
        return float(np.linalg.norm(self.total / m)), float(np.sqrt(self.squares / m)), float(np.sqrt(self.largest))

    def ratio(self) -> float:
        """:func:`mean_update_ratio` of the updates seen."""
        mean_norm, rms, _ = self.norms()
        return norms_ratio(mean_norm, rms, self.count)


def scan_round(
    pids: Sequence[int],
    rows: Sequence[np.ndarray] | np.ndarray,
    clusters: Sequence[int] | np.ndarray,
    store: Callable[..., object] | None = None,
    sums: dict[int, NormSums] | None = None,
    *,
    sketch: CountSketch | None = None,
    block: int = SCAN_BLOCK,
) -> dict[int, NormSums]:
    """One round's updates on the server of Sattler's CFL: each stored and added to its cluster's norms.

    ``block`` rows are read at a time (never stacked; a lazy sequence is never held whole):
    ``store(pids, rows, None, None)`` keeps them (``CFLSattler``: its store of latest updates), then
    each cluster's running :class:`NormSums` (of its criterion) adds its rows (:func:`fold_rows`). With
    ``sketch`` (the store's), each row is projected in the same read as its norm and sum, and the store
    gets them: ``store(pids, rows, sketch, projected)`` (``UpdateSimilarity.keep``).

    Parameters
    ----------
    pids : sequence of int
        The clients, in the order of ``rows``.
    rows : sequence of arrays (d,) or ndarray (m, d)
        Their updates.
    clusters : sequence of int
        Each client's cluster.
    store : callable, optional
    sums : dict, optional
        Running sums to add to (a cluster's is created when missing).

    Returns
    -------
    dict of int to NormSums
        ``sums``, by cluster.
    """
    sums = {} if sums is None else sums
    labels = np.asarray(clusters, dtype=np.int64)
    for lo in range(0, len(rows), block):
        part = block_rows(rows, lo, lo + block)
        ids = [int(p) for p in pids[lo : lo + len(part)]]
        ks, at = np.unique(labels[lo : lo + len(part)], return_inverse=True)
        if store is not None and sketch is not None:
            projected = np.empty((len(part), sketch.sketch_dim), dtype=np.float32)
            squares, totals = fold_rows(part, at, len(ks), sketch=sketch, projected=projected)
            store(ids, part, sketch, projected)
        else:
            if store is not None:
                store(ids, part, None, None)
            squares, totals = fold_rows(part, at, len(ks))
        for j, k in enumerate(ks):
            sums.setdefault(int(k), NormSums()).add_folded(squares[at == j], totals[j])
    return sums


def update_norms(updates: np.ndarray | Sequence[np.ndarray]) -> tuple[float, float, float]:
    """``(||mean update||, RMS ||update_i||, max_i ||update_i||)`` of a cluster's updates.

    Parameters
    ----------
    updates : ndarray of shape (m, d), m >= 1, or a sequence of m arrays (d,)
        A sequence is read 512 rows at a time into one reused block (never stacked whole).

    Raises
    ------
    ValueError
        If ``updates`` is not a non-empty 2-D array.
    """
    sums = NormSums()
    if isinstance(updates, np.ndarray) or len(updates) == 0:
        sums.add(np.asarray(updates) if len(updates) else np.zeros((0, 0)))
    else:
        for _, block in row_blocks(updates):
            sums.add(block)
    return sums.norms()


def mean_update_ratio(updates: np.ndarray | Sequence[np.ndarray]) -> float:
    """``||mu|| / sqrt(E ||u||^2)`` for the cluster's update distribution, from ``m`` sampled updates.

    ``E ||mean of m||^2 = ||mu||^2 + (E ||u||^2 - ||mu||^2) / m``, so ``(m ||mean||^2 - mean ||u_i||^2)
    / (m - 1)`` estimates ``||mu||^2`` without bias (clipped at 0). For updates of equal norms the
    ratio is the square root of their mean pairwise cosine.

    Parameters
    ----------
    updates : ndarray of shape (m, d)

    Returns
    -------
    float
        In ``[0, 1]``; NaN for fewer than 2 updates or all-zero updates.
    """
    mean_norm, rms, _ = update_norms(updates)
    return norms_ratio(mean_norm, rms, len(updates))


def norms_ratio(mean_norm: float, rms: float, m: int) -> float:
    """:func:`mean_update_ratio` from ``update_norms``' first two values and the count ``m``."""
    if m < 2 or rms == 0:
        return float("nan")
    mu2 = (m * mean_norm**2 - rms**2) / (m - 1)
    return float(np.sqrt(np.clip(mu2, 0.0, None)) / rms)


def should_split(
    ratio: float, max_norm: float, size: int, server_round: int, *, eps1: float, eps2: float, split_after: int
) -> bool:
    """Sattler's criterion with eps1 relative: ``ratio < eps1`` (:func:`mean_update_ratio`: the
    members' updates cancel) and ``max_norm > eps2`` (absolute, as in the reference), more than
    2 members, ``server_round > split_after``. A NaN ratio never splits.
    """
    return bool(ratio < eps1) and max_norm > eps2 and size > 2 and server_round > split_after


def separation(cosine: np.ndarray, first: np.ndarray, second: np.ndarray) -> tuple[float, float]:
    """``(alpha_cross_max, alpha_intra_min)`` of a bi-partition.

    Parameters
    ----------
    cosine : ndarray of shape (n, n)
        Cosine similarities of the members' updates.
    first, second : ndarray of int
        Positions of the two halves (non-empty, disjoint).

    Returns
    -------
    (float, float)
        The largest cosine across the halves and the smallest inside one (pairs of distinct
        members; 1.0 when both halves are single members). The split separates when
        ``alpha_intra_min > alpha_cross_max``.
    """
    return _separation(cosine, first, second, nearest=False)


def nearest_separation(cosine: np.ndarray, first: np.ndarray, second: np.ndarray) -> tuple[float, float]:
    """``(alpha_cross_max, alpha_nearest_min)`` of a bi-partition whose halves may each hold several groups.

    Parameters
    ----------
    cosine : ndarray of shape (n, n)
        Cosine similarities of the members' updates.
    first, second : ndarray of int
        Positions of the two halves (non-empty, disjoint).

    Returns
    -------
    (float, float)
        The largest cosine across the halves, and the smallest over members (of halves of 2 or
        more) of each one's largest cosine to another member of its own half; 1.0 when both halves
        are single members. The split separates when every member has a partner in its half more
        alike than any pair across: ``alpha_nearest_min > alpha_cross_max``. Unlike
        :func:`separation`, two groups on one side that are unlike each other do not veto the split.
    """
    return _separation(cosine, first, second, nearest=True)


def _separation(cosine: np.ndarray, first: np.ndarray, second: np.ndarray, *, nearest: bool) -> tuple[float, float]:
    c = np.asarray(cosine, dtype=np.float64)
    cross = float(c[np.ix_(first, second)].max())
    inside = []
    for h in (first, second):
        if len(h) > 1:
            block = c[np.ix_(h, h)]
            np.fill_diagonal(block, -np.inf if nearest else np.inf)
            inside.append(block.max(axis=1).min() if nearest else block.min())
    return cross, float(min(inside)) if inside else 1.0


SEPARATIONS = {"nearest": nearest_separation, "strict": separation}
"""A split's separation test by name (``cfl-sattler-separation``; ``off`` keeps every split)."""
SEPARATION = "nearest"
"""The default separation test (modified; the reference code's is ``off``)."""
SEPARATION_CHOICES = (*SEPARATIONS, "off")


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
        raise ValueError(
            "The 'cosine' parameter of bipartition must be a square (n, n) array with n >= 2. "
            f"Got shape {c.shape} instead."
        )
    # scikit-learn's AgglomerativeClustering(n_clusters=2, linkage="complete", metric="precomputed")
    # cuts this same scipy tree, after square index arrays of 8 N^2 bytes: built here row by row
    # into the condensed form (N^2 / 2 floats) instead.
    n = c.shape[0]
    condensed = np.empty(n * (n - 1) // 2)
    at = 0
    for i in range(n - 1):
        np.add(c[i, i + 1 :], c[i + 1 :, i], out=condensed[at : at + n - 1 - i])
        at += n - 1 - i
    condensed *= -0.5
    condensed += 1.0
    np.clip(condensed, 0.0, 2.0, out=condensed)
    labels = hierarchy.cut_tree(hierarchy.linkage(condensed, method="complete"), n_clusters=2).ravel()
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
        raise ValueError(
            "The 'cosine' parameter of split_cluster must have shape (len(members), "
            f"len(members)) = {(len(ids), len(ids))}. Got {np.asarray(cosine).shape} instead."
        )
    a, b = bipartition(cosine)
    return ids[a].tolist(), ids[b].tolist()


def sattler_bipartition(
    pids: Sequence[int],
    updates: Sequence[np.ndarray],
    *,
    sketch_dim: int = 0,
    seed: int = 0,
    test: str = SEPARATION,
) -> tuple[list[int], list[int], float, float]:
    """CFL's (Sattler et al.) server step on one cluster: split its members by their updates' cosines.

    Parameters
    ----------
    pids : sequence of int
        The members that sent an update, in the order of ``updates``.
    updates : sequence of ndarray (d,)
        Their fresh updates, sketched with ``seed`` to ``sketch_dim`` (0: automatic) when large
        (``sketch_rows``, a row at a time).

    Returns
    -------
    tuple
        The two halves (``split_cluster``), then the largest cross-half cosine and the within-half
        one of ``test`` (``SEPARATIONS``: ``nearest_separation`` or ``separation``): the split
        separates when the latter is larger.
    """
    rows = sketch_rows(updates, seed, sketch_dim=sketch_dim)
    cos = cosine_matrix(rows, rows)
    first, second = split_cluster(list(pids), cos)
    at = {p: i for i, p in enumerate(pids)}
    halves = np.array([at[p] for p in first]), np.array([at[p] for p in second])
    cross, intra = SEPARATIONS.get(test, separation)(cos, *halves)
    return first, second, cross, intra
