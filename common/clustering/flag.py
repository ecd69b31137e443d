"""FLAG's proximity matrix and its choice of clustering threshold.

FLAG (anonymous, "FLAG: Clustered Federated Learning Combining Data and Gradient Information
in Heterogeneous Settings", under review, Sec. 3-4, appendix 8-10):

- Eq. 3: for each class c, the principal angle (Eq. 1, the smallest one, in degrees) between
  two clients' bases of class c; 180 when only one client holds c, 0 when neither does.
- Eq. 4: a weight per pair and class from the log class counts,
  ``max(ln(n_i + eps), ln(n_j + eps)) / min(...)``; Eq. 5 rescales the weights to
  ``[1 - delta, 1 + delta]``; Eq. 6 averages ``angle x weight`` over the C classes.
- Eq. 2: the angle in degrees between two clients' update directions.
- Both matrices are min-max normalised and combined, ``A = beta V + (1 - beta) G``.
- Alg. 3: cut the HC tree of A at thresholds alpha from 1 down to 0 and pick the clustering at
  the elbow of validation accuracy against the number of clusters.

numpy in, numpy out; the principal angles come from :mod:`common.clustering.subspaces`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from common.validation import check_choice, check_float, check_int

from .hierarchical import LINKAGES, check_distance_matrix, cut_linkage, linkage_tree
from .sampled import sample_rows
from .similarity import CountSketch, cosine_matrix, row_sketch, sketch_rows, use_sample
from .subspaces import (
    REFERENCES_PER_CLUSTER,
    SAMPLE_SIZE,
    angles_between,
    class_angle_matrices,
    pairwise_subspace_angles,
    place_by_references,
)

ONE_MISSING = 180.0
ELBOW_TOL = 0.01
"""Validation accuracies within this of the best count as reaching it (noise of a 30-client sample)."""


def class_angles(bases: Sequence[Mapping[int, np.ndarray]], num_classes: int) -> np.ndarray:
    """Eq. 3: the class-wise principal-angle matrices ``V'``.

    Parameters
    ----------
    bases : sequence of length N of mappings class -> ndarray (d, p_c)
        Each client's bases of the classes it holds (one ``d`` for all).
    num_classes : int
        C >= 1; classes are ``0..C-1``.

    Returns
    -------
    ndarray of shape (C, N, N), float64
        ``[c, i, j]``: smallest principal angle between the class-c bases of clients i and j in
        degrees; 180 if exactly one of them holds c; 0 if neither does (and on the diagonal).

    Raises
    ------
    ValueError
        Naming ``'num_classes'``, or ``'bases'`` if empty, with a class outside ``[0, C)`` or
        mixed ``d`` within a class.
    """
    owner = "class_angles"
    num_classes = check_int(num_classes, "num_classes", owner, low=1)
    _check_bases(bases, num_classes, owner)
    matrices = class_angle_matrices(bases, None, "smallest", ONE_MISSING, classes=range(num_classes), owner=owner)
    return np.stack([angles for angles, _, _ in matrices])


def class_weights(
    counts: np.ndarray | None,
    delta: float = 0.5,
    eps: float = 1.0,
    num_clients: int | None = None,
    num_classes: int | None = None,
) -> np.ndarray:
    """Eq. 4-5: quantity-shift weights rescaled to ``[1 - delta, 1 + delta]``.

    Parameters
    ----------
    counts : ndarray of shape (N, C) or None
        Train samples of each class on each client (0 = class absent). ``None`` gives the
        paper's privacy variant, uniform weights (all 1).
    delta : float, default=0.5
        In ``[0, 1]``.
    eps : float, default=1.0
        The paper's epsilon, > 0. With 1, ``ln(n + 1) > 0`` for every class held, so the ratio is
        finite.
    num_clients, num_classes : int, optional
        N and C, needed only when ``counts`` is None.

    Returns
    -------
    ndarray of shape (C, N, N), float64
        Where both clients hold c: Eq. 4 rescaled by Eq. 5 with ``w_min`` / ``w_max`` taken over
        those entries (diagonal included, so ``w_min = 1``); all equal gives 1. Where exactly
        one holds c (an infinite ratio): ``1 + delta``, the largest gap. Where neither does: 1
        (its angle is 0 anyway).

    Raises
    ------
    ValueError
        Naming ``'counts'`` (not (N, C), negative or not finite), ``'delta'``, ``'eps'``, or
        ``'num_clients'`` / ``'num_classes'`` when ``counts`` is None.
    """
    owner = "class_weights"
    delta = check_float(delta, "delta", owner, low=0.0, high=1.0)
    eps = check_float(eps, "eps", owner, low=0.0, closed=(False, True))
    if counts is None:
        n = check_int(num_clients, "num_clients", owner, low=1)
        c = check_int(num_classes, "num_classes", owner, low=1)
        return np.ones((c, n, n))
    cnt = np.asarray(counts, dtype=np.float64)
    if cnt.ndim != 2 or 0 in cnt.shape or not np.all(np.isfinite(cnt)) or np.any(cnt < 0):
        raise ValueError(
            f"The 'counts' parameter of {owner} must be a non-negative finite (N, C) array. "
            f"Got shape {cnt.shape} with minimum {np.min(cnt) if cnt.size else None} instead."
        )
    logs = np.log(cnt.T + eps)  # (C, N)
    held = cnt.T > 0
    both = held[:, :, None] & held[:, None, :]
    one = held[:, :, None] ^ held[:, None, :]
    hi = np.maximum(logs[:, :, None], logs[:, None, :])
    lo = np.minimum(logs[:, :, None], logs[:, None, :])
    raw = np.divide(hi, lo, out=np.ones_like(hi), where=both)
    out = np.ones_like(raw)
    if both.any():
        w_min, w_max = raw[both].min(), raw[both].max()
        if w_max > w_min:
            out[both] = (1 - delta) + (raw[both] - w_min) * (2 * delta) / (w_max - w_min)
    out[one] = 1 + delta
    return out


def weighted_class_similarity(angles: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Eq. 6: ``V = (1 / C) sum_c V'[c] * W'[c]``.

    Parameters
    ----------
    angles, weights : ndarray of shape (C, N, N)

    Returns
    -------
    ndarray of shape (N, N), float64

    Raises
    ------
    ValueError
        Naming ``'angles'`` (not (C, N, N)) or ``'weights'`` (another shape).
    """
    a = np.asarray(angles, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    if a.ndim != 3 or a.shape[1] != a.shape[2] or 0 in a.shape:
        raise ValueError(
            f"The 'angles' parameter of weighted_class_similarity must have shape (C, N, N). Got {a.shape} instead."
        )
    if w.shape != a.shape:
        raise ValueError(
            f"The 'weights' parameter of weighted_class_similarity must have shape {a.shape}. Got {w.shape} instead."
        )
    return (a * w).mean(axis=0)


def data_similarity(
    bases: Sequence[Mapping[int, np.ndarray]],
    counts: np.ndarray | None,
    num_classes: int,
    delta: float = 0.5,
    *,
    w_max: float | None = None,
) -> np.ndarray:
    """Eq. 3-6 in one call: V from the clients' class bases and class counts.

    Parameters
    ----------
    bases : sequence of length N of mappings class -> ndarray (d, p_c)
    counts : ndarray of shape (N, C) or None
        None: uniform weights (the paper's privacy variant).
    num_classes : int
    delta : float, default=0.5
    w_max : float, optional
        Eq. 5's largest log-count ratio; None: that of ``counts`` (a sampled form passes the
        whole federation's, so that its sample's V is the exact V's block).

    Returns
    -------
    ndarray of shape (N, N), float64
        In degrees x weight, symmetric, zero diagonal.
    """
    owner = "data_similarity"
    num_classes = check_int(num_classes, "num_classes", owner, low=1)
    delta = check_float(delta, "delta", owner, low=0.0, high=1.0)
    _check_bases(bases, num_classes, owner)
    n = len(bases)
    cnt, logs = _class_logs(counts, n, num_classes, owner)
    w_max = _largest_weight(cnt, logs) if w_max is None else w_max

    def weights(rows: np.ndarray, cols: np.ndarray, c: int) -> np.ndarray | float:
        """Eq. 4-5 for the pairs rows x cols of class c, as :func:`class_weights` gives them."""
        return _pair_weights(cnt, logs, rows, cnt, logs, cols, c, delta, w_max)

    # One class at a time into one (N, N) sum, never the (C, N, N) stacks of Eq. 3-5.
    # A pair where one client holds c (basis and count) and the other neither adds 180 x (1 + delta)
    # (x 1 without counts): summed over classes by one product of indicator matrices.
    total = np.zeros((n, n))
    has = np.zeros((n, num_classes))
    lacks = np.zeros((n, num_classes))
    for c in range(num_classes):
        held = np.array([c in b for b in bases])
        rows, others = np.flatnonzero(held), np.flatnonzero(~held)
        if rows.size == 0:
            continue
        angles = pairwise_subspace_angles([bases[int(i)][c] for i in rows], "smallest")
        total[np.ix_(rows, rows)] += angles * weights(rows, rows, c)
        odd = np.zeros(n, dtype=bool) if cnt is None else held != (cnt[:, c] > 0)
        has[:, c], lacks[:, c] = held & ~odd, ~held & ~odd
        for first, second in ((rows, others[odd[others]]), (rows[odd[rows]], others[~odd[others]])):
            if first.size and second.size:
                gap = ONE_MISSING * weights(first, second, c)
                total[np.ix_(first, second)] += gap
                total[np.ix_(second, first)] += np.transpose(gap)
    gap = ONE_MISSING * (1.0 if logs is None else 1.0 + delta)
    step = max(1, (1 << 22) // n)
    for lo in range(0, n, step):
        total[lo : lo + step] += gap * (has[lo : lo + step] @ lacks.T + lacks[lo : lo + step] @ has.T)
    total /= num_classes
    return total


def _class_logs(
    counts: np.ndarray | None, n: int, num_classes: int, owner: str
) -> tuple[np.ndarray | None, np.ndarray | None]:
    """The checked counts (N, C) as float64 and Eq. 4's ``ln(n + 1)`` (eps = 1, as :func:`class_weights`)."""
    if counts is None:
        return None, None
    cnt = np.asarray(counts, dtype=np.float64)
    if cnt.shape != (n, num_classes) or not np.all(np.isfinite(cnt)) or np.any(cnt < 0):
        raise ValueError(
            f"The 'counts' parameter of {owner} must be a non-negative finite array of shape "
            f"{(n, num_classes)}. Got shape {cnt.shape} instead."
        )
    return cnt, np.log(cnt + 1.0)


def _largest_weight(cnt: np.ndarray | None, logs: np.ndarray | None) -> float:
    """Eq. 5's ``w_max``: the largest max/min log-count ratio of a class (``w_min`` is 1, a client with
    itself); 1 without counts."""
    if cnt is None or logs is None:
        return 1.0
    held = cnt > 0
    return max(
        (logs[held[:, c], c].max() / logs[held[:, c], c].min() for c in range(cnt.shape[1]) if held[:, c].any()),
        default=1.0,
    )


def _pair_weights(
    cnt_a: np.ndarray | None,
    logs_a: np.ndarray | None,
    rows: np.ndarray,
    cnt_b: np.ndarray | None,
    logs_b: np.ndarray | None,
    cols: np.ndarray,
    c: int,
    delta: float,
    w_max: float,
) -> np.ndarray | float:
    """Eq. 4-5 for the pairs ``rows`` (of the counts ``a``) x ``cols`` (of ``b``) of class c."""
    if cnt_a is None or logs_a is None or cnt_b is None or logs_b is None:
        return 1.0
    li, lj = logs_a[rows, c][:, None], logs_b[cols, c][None, :]
    hi_, hj = (cnt_a[rows, c] > 0)[:, None], (cnt_b[cols, c] > 0)[None, :]
    both = hi_ & hj
    out = np.where(hi_ ^ hj, 1.0 + delta, 1.0)
    if w_max > 1.0:
        raw = np.divide(np.maximum(li, lj), np.minimum(li, lj), out=np.ones(both.shape), where=both)
        out = np.where(both, (1 - delta) + (raw - 1.0) * (2 * delta) / (w_max - 1.0), out)
    return out


def gradient_angles(updates: np.ndarray) -> np.ndarray:
    """Eq. 2: the angle in degrees between every pair of update directions.

    Parameters
    ----------
    updates : ndarray of shape (N, P)
        One flattened update per client. An all-zero update has no direction: it is at 90
        degrees to every other (cosine 0).

    Returns
    -------
    ndarray of shape (N, N), float64
        In ``[0, 180]``, symmetric, zero diagonal.

    Raises
    ------
    ValueError
        Naming ``'updates'`` unless it is a finite non-empty 2-D array.
    """
    u = np.asarray(updates)
    u = u if np.issubdtype(u.dtype, np.floating) else u.astype(np.float64)
    if u.ndim != 2 or 0 in u.shape or not np.all(np.isfinite(u)):
        raise ValueError(
            "The 'updates' parameter of gradient_angles must be a finite non-empty (N, P) "
            f"array. Got shape {u.shape} instead."
        )
    out = cosine_matrix(u, u)  # float32 Gram for large float32 sketches
    np.degrees(np.arccos(out, out=out), out=out)  # in place: one (N, N) array, 0.8 GB at 10,000 clients
    np.fill_diagonal(out, 0.0)
    out += out.T
    out *= 0.5
    return out


def min_max(matrix: np.ndarray) -> np.ndarray:
    """Min-max normalisation to ``[0, 1]`` over all entries; a constant matrix gives zeros.

    Raises
    ------
    ValueError
        Naming ``'matrix'`` if empty or not finite.
    """
    m = np.asarray(matrix, dtype=np.float64)
    if m.size == 0 or not np.all(np.isfinite(m)):
        raise ValueError(
            f"The 'matrix' parameter of min_max must be a finite non-empty array. Got shape {m.shape} instead."
        )
    low, span = m.min(), m.max() - m.min()
    if not span > 0:
        return np.zeros_like(m)
    out = m - low
    out /= span
    return out


def proximity(data: np.ndarray, gradient: np.ndarray, beta: float = 0.5) -> np.ndarray:
    """FLAG's proximity matrix ``A = beta min_max(V) + (1 - beta) min_max(G)``.

    Parameters
    ----------
    data : ndarray of shape (N, N)
        V (Eq. 6).
    gradient : ndarray of shape (N, N)
        G (Eq. 2).
    beta : float, default=0.5
        In ``[0, 1]``: 1 is data only, 0 gradient only.

    Returns
    -------
    ndarray of shape (N, N), float64
        In ``[0, 1]``.

    Raises
    ------
    ValueError
        Naming ``'beta'``, ``'data'`` or ``'gradient'``.
    """
    beta = check_float(beta, "beta", "proximity", low=0.0, high=1.0)
    v = check_distance_matrix(data, "proximity", "data")
    g = check_distance_matrix(gradient, "proximity", "gradient")
    if g.shape != v.shape:
        raise ValueError(f"The 'gradient' parameter of proximity must have shape {v.shape}. Got {g.shape} instead.")
    out = min_max(v)
    out *= beta
    scaled = min_max(g)
    scaled *= 1 - beta
    out += scaled  # in place: three (N, N) arrays at a time, not five
    return out


def flag_distances(
    bases: Sequence[Mapping[int, np.ndarray]],
    counts: np.ndarray | None,
    updates: Sequence[np.ndarray],
    num_classes: int,
    *,
    beta: float,
    delta: float,
    seed: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """FLAG's server-side step up to the tree: ``(A, V, G)`` of N clients.

    Parameters
    ----------
    bases : sequence of length N of mapping of int to ndarray (d, p_c)
        Each client's class bases by class.
    counts : ndarray of shape (N, num_classes) or None
        Samples per class (None: uniform weights).
    updates : sequence of length N of ndarray (D,)
        Each client's update, sketched with ``seed`` when large (``sketch_rows``).
    num_classes : int
        C.
    beta, delta : float
        The weight of V in A, and the class-weight mix of V (``data_similarity``).
    seed : int
        The sketch seed.

    Returns
    -------
    tuple of three ndarray of shape (N, N)
        A = beta minmax(V) + (1 - beta) minmax(G) (``proximity``), V (``data_similarity``) and G
        (``gradient_angles``).
    """
    data = data_similarity(bases, counts, num_classes, delta)
    gradient = gradient_angles(sketch_rows(list(updates), seed))
    return proximity(data, gradient, beta), data, gradient


def data_similarity_between(
    bases: Sequence[Mapping[int, np.ndarray]],
    counts: np.ndarray | None,
    others: Sequence[Mapping[int, np.ndarray]],
    other_counts: np.ndarray | None,
    num_classes: int,
    delta: float,
    w_max: float,
) -> np.ndarray:
    """V (Eq. 3-6) between every client of ``bases`` and every client of ``others``: (n, m).

    The entries :func:`data_similarity` gives the same pairs when it is called on both sets at
    once with this ``w_max``: the smallest principal angle x Eq. 4-5's weight where both hold a
    class, 180 x the weight where one does, 0 where neither does, averaged over the classes.
    ``counts`` and ``other_counts`` are both given or both None (uniform weights).
    """
    owner = "data_similarity_between"
    cnt_a, logs_a = _class_logs(counts, len(bases), num_classes, owner)
    cnt_b, logs_b = _class_logs(other_counts, len(others), num_classes, owner)
    total = np.zeros((len(bases), len(others)))
    for c in range(num_classes):
        held_a = np.array([c in b for b in bases], dtype=bool)
        held_b = np.array([c in b for b in others], dtype=bool)
        rows, cols = np.flatnonzero(held_a), np.flatnonzero(held_b)
        if rows.size and cols.size:
            angles = angles_between([bases[int(i)][c] for i in rows], [others[int(j)][c] for j in cols], "smallest")
            total[np.ix_(rows, cols)] += angles * _pair_weights(
                cnt_a, logs_a, rows, cnt_b, logs_b, cols, c, delta, w_max
            )
        for first, second in ((rows, np.flatnonzero(~held_b)), (np.flatnonzero(~held_a), cols)):
            if first.size and second.size:
                weight = _pair_weights(cnt_a, logs_a, first, cnt_b, logs_b, second, c, delta, w_max)
                total[np.ix_(first, second)] += ONE_MISSING * np.broadcast_to(weight, (first.size, second.size))
    total /= num_classes
    return total


@dataclass(frozen=True)
class FlagSample:
    """FLAG's matrices on a seeded sample of the clients (the sampled form) and what placing the
    others needs.

    Attributes
    ----------
    positions : ndarray of shape (S,), int64
        The sampled clients' positions, sorted.
    proximity, data, gradient : ndarray of shape (S, S)
        A, V and G of the sample (A min-max normalised over the sample's V and G).
    rows : ndarray of shape (S, k)
        The sample's updates, sketched as all N would be (``row_sketch``).
    sketch : CountSketch or None
        That sketch (None: kept whole).
    w_max : float
        Eq. 5's largest log-count ratio over all N clients.
    """

    positions: np.ndarray
    proximity: np.ndarray
    data: np.ndarray
    gradient: np.ndarray
    rows: np.ndarray
    sketch: CountSketch | None
    w_max: float


def flag_sample(
    bases: Sequence[Mapping[int, np.ndarray]],
    counts: np.ndarray | None,
    updates: Sequence[np.ndarray],
    num_classes: int,
    *,
    beta: float,
    delta: float,
    seed: int,
    size: int = SAMPLE_SIZE,
) -> FlagSample:
    """FLAG's A, V and G (:func:`flag_distances`) on a sample of ``size`` clients drawn with ``seed``.

    umbel's sampled form (modified; ``flag-sample-above``): the HC, the alpha sweep and its
    elbow run on this sample's A, and :func:`flag_place` puts every other client in a sample
    cluster by the same affinity. Eq. 5's ``w_max`` and the update sketch are those of all N
    clients, so the sample's V and G are the exact V's and G's blocks; only A's min-max
    normalisation is the sample's.

    Raises
    ------
    ValueError
        Naming ``'updates'`` when its length differs from ``bases``', or as :func:`flag_distances`.
    """
    owner = "flag_sample"
    num_classes = check_int(num_classes, "num_classes", owner, low=1)
    _check_bases(bases, num_classes, owner)
    n = len(bases)
    if len(updates) != n:
        raise ValueError(
            f"The 'updates' parameter of {owner} must hold one update per client ({n}). Got {len(updates)} instead."
        )
    cnt, logs = _class_logs(counts, n, num_classes, owner)
    w_max = _largest_weight(cnt, logs)
    positions = sample_rows(n, np.random.default_rng(seed), check_int(size, "size", owner, low=2))
    data = data_similarity(
        [bases[int(i)] for i in positions], None if cnt is None else cnt[positions], num_classes, delta, w_max=w_max
    )
    sketch = row_sketch(n, int(np.shape(updates[0])[-1]), seed)
    rows = _sketched(updates, positions, sketch)
    gradient = gradient_angles(rows)
    return FlagSample(positions, proximity(data, gradient, beta), data, gradient, rows, sketch, w_max)


def flag_place(
    sample: FlagSample,
    sample_labels: np.ndarray,
    bases: Sequence[Mapping[int, np.ndarray]],
    counts: np.ndarray | None,
    updates: Sequence[np.ndarray],
    num_classes: int,
    *,
    beta: float,
    delta: float,
    seed: int,
    references: int = REFERENCES_PER_CLUSTER,
) -> np.ndarray:
    """Every client's cluster: the sample's ``sample_labels``, the others the cluster nearest by A.

    A client outside the sample gets its A to up to ``references`` members of each sample
    cluster (drawn with ``seed``): V by :func:`data_similarity_between`, G by the angle of its
    (sketched) update, both min-max scaled by the sample's V and G as in :func:`proximity`; it
    joins the cluster of smallest mean A (average linkage, FLAG's tree's). ``O(N K R)`` pairs,
    ``PLACE_CHUNK`` clients at a time, instead of ``N x N`` matrices.

    Returns
    -------
    ndarray of shape (N,), int64
    """
    cnt, _ = _class_logs(counts, len(bases), num_classes, "flag_place")
    scale = [(m.min(), np.ptp(m)) for m in (sample.data, sample.gradient)]

    def against(refs: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
        ref_bases = [bases[int(i)] for i in refs]
        ref_counts = None if cnt is None else cnt[refs]
        ref_rows = sample.rows[np.searchsorted(sample.positions, refs)]

        def distance(at: np.ndarray) -> np.ndarray:
            v = data_similarity_between(
                [bases[int(i)] for i in at],
                None if cnt is None else cnt[at],
                ref_bases,
                ref_counts,
                num_classes,
                delta,
                sample.w_max,
            )
            g = np.degrees(np.arccos(cosine_matrix(_sketched(updates, at, sample.sketch), ref_rows)))
            a = np.zeros_like(v)
            for weight, m, (low, span) in ((beta, v, scale[0]), (1 - beta, g, scale[1])):
                if span > 0:
                    a += weight * (m - low) / span
            return a

        return distance

    rng = np.random.default_rng([seed, 1])
    return place_by_references(len(bases), sample.positions, sample_labels, against, rng, references)


def flag_proximity(
    bases: Sequence[Mapping[int, np.ndarray]],
    counts: np.ndarray | None,
    updates: Sequence[np.ndarray],
    num_classes: int,
    *,
    beta: float,
    delta: float,
    seed: int,
    sample_above: int = 0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, FlagSample | None]:
    """FLAG's A, V and G as ``FLAG`` computes them: of every client (:func:`flag_distances`), or above
    ``sample_above`` > 0 clients of a seeded sample (:func:`flag_sample`, umbel's sampled form).

    Returns
    -------
    proximity, data, gradient : ndarray of shape (n, n)
        Of all N clients, or of the sample's S.
    sample : FlagSample or None
        The sample (None: exact); :func:`flag_labels` places the other clients.
    """
    if use_sample(len(bases), sample_above):
        sample = flag_sample(bases, counts, updates, num_classes, beta=beta, delta=delta, seed=seed)
        return sample.proximity, sample.data, sample.gradient, sample
    a, v, g = flag_distances(bases, counts, updates, num_classes, beta=beta, delta=delta, seed=seed)
    return a, v, g, None


def flag_labels(
    sample: FlagSample | None,
    labels: np.ndarray,
    bases: Sequence[Mapping[int, np.ndarray]],
    counts: np.ndarray | None,
    updates: Sequence[np.ndarray],
    num_classes: int,
    *,
    beta: float,
    delta: float,
    seed: int,
) -> np.ndarray:
    """Every client's cluster from the cut of :func:`flag_proximity`'s A: ``labels`` themselves (exact),
    or the sample's with every other client placed by :func:`flag_place`."""
    if sample is None:
        return np.asarray(labels)
    return flag_place(sample, labels, bases, counts, updates, num_classes, beta=beta, delta=delta, seed=seed)


def _sketched(updates: Sequence[np.ndarray], at: np.ndarray, sketch: CountSketch | None) -> np.ndarray:
    """The updates at positions ``at`` stacked (float32 stays float32), or projected row by row through
    ``sketch`` (never stacked)."""
    picked = [updates[int(i)] for i in at]
    return np.stack([np.asarray(u) for u in picked]) if sketch is None else sketch.project_rows(picked)


def threshold_grid(step: float) -> np.ndarray:
    """Alg. 3's thresholds: 1, 1 - step, 1 - 2 step, ... while above 0.

    Parameters
    ----------
    step : float
        In ``(0, 1]``.

    Returns
    -------
    ndarray of shape (floor(1 / step),) or so, float64
        Decreasing, every value in ``(0, 1]``, rounded to 10 decimals.

    Raises
    ------
    ValueError
        Naming ``'step'``.
    """
    step = check_float(step, "step", "threshold_grid", low=0.0, high=1.0, closed=(False, True))
    alphas = np.round(1.0 - step * np.arange(int(np.floor(1.0 / step + 1e-9)) + 1), 10)
    return alphas[alphas > 0]


def sweep_cuts(
    distances: np.ndarray, alphas: Iterable[float], linkage: str = "average", *, tree: np.ndarray | None = None
) -> list[np.ndarray]:
    """The HC labels of ``distances`` cut at each threshold in ``alphas``.

    Parameters
    ----------
    distances : ndarray of shape (N, N)
    alphas : iterable of float
        Thresholds, >= 0.
    linkage : {"average", "complete", "single", "weighted"}, default="average"
    tree : ndarray of shape (N - 1, 4), optional
        ``linkage_tree(distances, linkage)`` when the caller already has it.

    Returns
    -------
    list of ndarray of shape (N,), int64
        One per alpha, labels numbered by first appearance (equal clusterings compare equal),
        the same as :func:`~common.clustering.hierarchical.agglomerative` at each threshold,
        from one linkage tree instead of one per threshold.
    """
    d = check_distance_matrix(distances, "sweep_cuts")
    check_choice(linkage, "linkage", "sweep_cuts", LINKAGES)
    thresholds = [check_float(a, "alphas", "sweep_cuts", low=0.0) for a in alphas]
    if d.shape[0] == 1:
        return [np.zeros(1, dtype=np.int64) for _ in thresholds]
    tree = linkage_tree(d, linkage) if tree is None else tree
    return [cut_linkage(tree, threshold=t) for t in thresholds]


def elbow(num_clusters: Sequence[float], accuracy: Sequence[float], tol: float = ELBOW_TOL) -> int:
    """Index of the elbow (knee) of accuracy against the number of clusters (Kneedle).

    The points are sorted by cluster count and both axes min-max normalised to ``[0, 1]``;
    the knee is the point farthest above the chord from the first to the last point (for a
    rising curve Kneedle's ``argmax(y - x)``): where a steep rise turns into a plateau. The
    paper keeps the number of clusters minimal, so the knee is never past the smallest count
    whose accuracy is within ``tol`` of the best. A curve whose last point reaches the best
    (still rising, or a tied or noisy plateau) has no knee: that smallest count is taken, not
    the far end. Fewer than three points, or an accuracy spread within ``tol``, give it too.

    Parameters
    ----------
    num_clusters : sequence of length M
        Cluster count of each clustering, distinct values expected.
    accuracy : sequence of length M
        Its validation accuracy.
    tol : float, default=ELBOW_TOL
        >= 0, in accuracy units: how far below the best a count still "reaches" it.

    Returns
    -------
    int
        An index into the given (unsorted) sequences.

    Raises
    ------
    ValueError
        Naming ``'num_clusters'``, ``'accuracy'`` (empty, other length, not finite) or ``'tol'``.
    """
    k = np.asarray(num_clusters, dtype=np.float64)
    acc = np.asarray(accuracy, dtype=np.float64)
    tol = check_float(tol, "tol", "elbow", low=0.0)
    if k.ndim != 1 or k.size == 0 or not np.all(np.isfinite(k)):
        raise ValueError(
            "The 'num_clusters' parameter of elbow must be a finite non-empty 1-D sequence. "
            f"Got shape {k.shape} instead."
        )
    if acc.shape != k.shape or not np.all(np.isfinite(acc)):
        raise ValueError(
            f"The 'accuracy' parameter of elbow must be {k.size} finite values. Got shape {acc.shape} instead."
        )
    order = np.argsort(k, kind="stable")
    x, y = k[order], acc[order]
    plateau = int(np.argmax(y >= y.max() - tol))
    if x.size < 3 or np.ptp(y) <= tol or np.ptp(x) == 0 or y[-1] >= y.max() - tol:
        return int(order[plateau])
    xn = (x - x[0]) / np.ptp(x)
    yn = (y - y.min()) / np.ptp(y)
    chord = yn[0] + (yn[-1] - yn[0]) * xn
    return int(order[min(int(np.argmax(yn - chord)), plateau)])


def choose_threshold(num_clusters: Sequence[int], accuracy: Sequence[float | None]) -> int | None:
    """Alg. 3's choice over a sweep: the elbow among the distinct clusterings.

    Parameters
    ----------
    num_clusters : sequence of int of length M
        Cluster count at each threshold, in sweep order (alpha decreasing). Cuts of one HC tree
        with equal counts are equal clusterings; the first of each count represents it.
    accuracy : sequence of float or None of length M
        Validation accuracy at each threshold; None (no replies) is skipped.

    Returns
    -------
    int or None
        Index into the sweep of the chosen threshold (the largest alpha giving the elbow's
        clustering); None when no accuracy is known.

    Raises
    ------
    ValueError
        Naming ``'accuracy'`` if its length differs from ``num_clusters``.
    """
    if len(accuracy) != len(num_clusters):
        raise ValueError(
            f"The 'accuracy' parameter of choose_threshold must have {len(num_clusters)} entries. "
            f"Got {len(accuracy)} instead."
        )
    first: dict[int, tuple[int, float]] = {}  # cluster count -> (row, accuracy) of its first finite row
    for i, (k, acc) in enumerate(zip(num_clusters, accuracy, strict=True)):
        if acc is not None and np.isfinite(acc):
            first.setdefault(int(k), (i, float(acc)))
    if not first:
        return None
    rows = [row for row, _ in first.values()]
    return rows[elbow(list(first), [acc for _, acc in first.values()])]


def _check_bases(bases: Sequence[Mapping[int, np.ndarray]], num_classes: int, owner: str) -> None:
    """A ValueError naming ``'bases'`` when empty or holding a class outside ``[0, num_classes)``."""
    if len(bases) == 0:
        raise ValueError(
            f"The 'bases' parameter of {owner} must hold one mapping per client. Got an empty sequence instead."
        )
    bad = sorted({int(c) for b in bases for c in b if not 0 <= int(c) < num_classes})
    if bad:
        raise ValueError(
            f"The 'bases' parameter of {owner} must only hold classes in [0, {num_classes}). Got classes {bad} instead."
        )
