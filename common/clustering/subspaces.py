"""Principal angles between subspaces and the PACFL distance matrix.

PACFL (Vahidian et al., "Efficient Distribution Similarity Identification in Clustered
Federated Learning via Principal Angles Between Client Data Subspaces", AAAI 2023): each client
sends a few left singular vectors of each of its classes' data; the server measures how far
apart two clients' data subspaces are by the principal angles between them (the smallest angle,
Eq. 3, or their sum, the trace variant), or as the reference code does (the smallest angle
between any column of one basis and any column of the other), and clusters that matrix
hierarchically. umbel's default takes the angles class by class instead (:func:`client_distances`
with :data:`PER_CLASS`); FLAG's Eq. 3 takes the same class-by-class matrices
(:func:`class_angle_matrices`) with other values for a missing class. numpy/scipy only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from functools import partial
from typing import TypeAlias

import numpy as np
from scipy.linalg import subspace_angles
from threadpoolctl import threadpool_limits

from common.clustering.similarity import over_rows, row_threads
from common.validation import check_choice, check_float

MEASURES: tuple[str, ...] = ("smallest", "sum", "mean", "reference", "reference-signed")
"""Measures between two bases (a client's classes stacked side by side)."""
PER_CLASS = "per-class"
"""The client measure taken class by class (:func:`pairwise_class_angles`)."""
CLIENT_MEASURES: tuple[str, ...] = (PER_CLASS, *MEASURES)
"""Measures between two clients' class bases: :data:`PER_CLASS`, or one of :data:`MEASURES` on the stacked bases."""
ONE_CLASS_MISSING = 90.0
""":data:`PER_CLASS`: a class only one of the two clients holds counts as this angle, the largest principal angle."""

ClientBases: TypeAlias = Mapping[int, np.ndarray] | np.ndarray
"""One client's signal: its basis ``(d, p_c)`` of each class it holds, or those bases already stacked ``(d, P)``."""


def _basis(x: np.ndarray, name: str, owner: str, dim: int | None = None) -> np.ndarray:
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim != 2 or 0 in arr.shape or (dim is not None and arr.shape[0] != dim):
        want = f"({dim}, p)" if dim is not None else "(d, p)"
        raise ValueError(
            f"The '{name}' parameter of {owner} must be a non-empty 2-D basis {want}. Got shape {arr.shape} instead."
        )
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"The '{name}' parameter of {owner} must hold finite values. Got NaN or Inf instead.")
    return arr


def principal_angles(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Principal angles between the column spaces of ``a`` and ``b``, in degrees, ascending.

    Parameters
    ----------
    a : ndarray of shape (d, p)
    b : ndarray of shape (d, q)
        Columns need not be orthonormal (scipy orthonormalises them).

    Returns
    -------
    ndarray of shape (min(p, q),), float64
        In ``[0, 90]``; the first is the smallest angle.

    Raises
    ------
    ValueError
        Naming ``'a'`` or ``'b'`` unless both are finite 2-D arrays with the same row count.
    """
    a = _basis(a, "a", "principal_angles")
    b = _basis(b, "b", "principal_angles", dim=a.shape[0])
    return np.sort(np.degrees(subspace_angles(a, b)))


def subspace_angle(a: np.ndarray, b: np.ndarray, measure: str = "smallest") -> float:
    """One number for how far apart two subspaces are, in degrees.

    Parameters
    ----------
    a, b : ndarray of shape (d, p) and (d, q)
    measure : {"smallest", "sum", "mean", "reference"}, default="smallest"
        ``"smallest"``: the smallest principal angle (PACFL Eq. 3); ``"sum"``: the sum of all
        ``min(p, q)`` principal angles (PACFL's trace variant); ``"mean"``: their mean;
        ``"reference"``: PACFL's reference code, the smallest angle between one column of ``a``
        and one of ``b`` (columns scaled to unit length; ``|cos|``, so that the arbitrary sign
        of a singular vector does not matter); ``"reference-signed"``: the reference code
        exactly, ``min arccos(clip(a^T b))`` on the signed cosine.

    Returns
    -------
    float
    """
    check_choice(measure, "measure", "subspace_angle", MEASURES)
    if measure.startswith("reference"):
        a = _basis(a, "a", "subspace_angle")
        b = _basis(b, "b", "subspace_angle", dim=a.shape[0])
        cos = (a / np.linalg.norm(a, axis=0)).T @ (b / np.linalg.norm(b, axis=0))
        cos = cos if measure == "reference-signed" else np.abs(cos)
        return float(np.degrees(np.arccos(np.clip(cos.max(), -1.0, 1.0))))
    angles = principal_angles(a, b)
    if measure == "smallest":
        return float(angles[0])
    return float(angles.sum() if measure == "sum" else angles.mean())


def pairwise_subspace_angles(
    bases: Sequence[np.ndarray | None],
    measure: str = "smallest",
    *,
    one_missing: float = 90.0,
    both_missing: float = 0.0,
) -> np.ndarray:
    """Matrix of :func:`subspace_angle` between every pair of bases.

    Parameters
    ----------
    bases : sequence of length N of ndarray (d, p_i) or None
        One basis per client (all with the same ``d``); ``None`` where a client has no
        basis (FLAG: the client lacks this class).
    measure : {"smallest", "sum", "mean", "reference"}, default="smallest"
    one_missing : float, default=90.0
        Entry when exactly one of the two bases is ``None`` (FLAG Eq. 3 uses 180).
    both_missing : float, default=0.0
        Entry when both are ``None`` (and on the diagonal of a ``None`` basis).

    Returns
    -------
    ndarray of shape (N, N), float64
        Symmetric with a zero diagonal.

    Raises
    ------
    ValueError
        Naming ``'bases'`` if empty or of mixed ``d``, ``'measure'``, ``'one_missing'`` or
        ``'both_missing'`` (negative or not finite).
    """
    owner = "pairwise_subspace_angles"
    check_choice(measure, "measure", owner, MEASURES)
    one_missing = check_float(one_missing, "one_missing", owner, low=0.0)
    both_missing = check_float(both_missing, "both_missing", owner, low=0.0)
    if len(bases) == 0:
        raise ValueError(
            f"The 'bases' parameter of {owner} must hold at least one basis or None. Got an empty sequence instead."
        )
    present = [_basis(b, "bases", owner) if b is not None else None for b in bases]
    dims = {b.shape[0] for b in present if b is not None}
    if len(dims) > 1:
        raise ValueError(
            f"The 'bases' parameter of {owner} must hold bases with one row count d. "
            f"Got row counts {sorted(dims)} instead."
        )
    n = len(present)
    held = np.array([b is not None for b in present])
    out = np.full((n, n), one_missing)
    out[np.ix_(~held, ~held)] = both_missing
    rows = np.flatnonzero(held)
    if rows.size:
        chosen = [b for b in present if b is not None]  # the rows, in order
        out[np.ix_(rows, rows)] = (
            _reference_among(chosen, signed=measure == "reference-signed")
            if measure.startswith("reference")
            else _angles_among(chosen, measure)
        )
    np.fill_diagonal(out, 0.0)
    return out


def orthonormal_basis(a: np.ndarray, rcond: float | None = None) -> np.ndarray:
    """An orthonormal basis ``(d, r)`` of the column space of ``a`` ``(d, p)``, ``r`` its rank.

    The left singular vectors whose singular values exceed ``rcond * s_max`` (default
    ``eps * max(d, p)``), as ``scipy.linalg.orth`` (which ``scipy.linalg.subspace_angles`` uses).
    """
    u, sv, _ = np.linalg.svd(a, full_matrices=False)
    tol = (np.finfo(float).eps * max(a.shape) if rcond is None else rcond) * (sv[0] if sv.size else 0.0)
    return u[:, : int(np.sum(sv > tol))]


BLOCK_ENTRIES = 4_000_000
"""Cross products computed at a time by :func:`_angles_among` (about 32 MB of float64)."""


def _reference_among(bases: Sequence[np.ndarray], signed: bool = False) -> np.ndarray:
    """The ``"reference"`` measure between every pair of ``bases``: blocks of column cosines, no pair loop.

    Returns ``(n, n)`` with a zero diagonal; the largest ``|cos|`` of each pair of bases is a
    block-wise maximum (``np.maximum.reduceat``) of the cosines between all unit columns.
    """
    cols = np.concatenate([b / np.linalg.norm(b, axis=0) for b in bases], axis=1)
    starts = np.concatenate([[0], np.cumsum([b.shape[1] for b in bases])[:-1]])
    n = len(bases)
    out = np.zeros((n, n))
    step = max(1, BLOCK_ENTRIES // max(1, cols.shape[1]))
    for lo in range(0, n, step):
        hi = min(n, lo + step)
        first, last = starts[lo], starts[hi] if hi < n else cols.shape[1]
        cos = cols[:, first:last].T @ cols
        cos = cos if signed else np.abs(cos)
        cos = np.maximum.reduceat(np.maximum.reduceat(cos, starts[lo:hi] - first, axis=0), starts, axis=1)
        out[lo:hi] = np.degrees(np.arccos(np.clip(cos, -1.0, 1.0)))
    out = np.minimum(out, out.T)  # equal up to rounding; exactly symmetric
    np.fill_diagonal(out, 0.0)
    return out


def _angles_among(bases: Sequence[np.ndarray], measure: str) -> np.ndarray:
    """:func:`subspace_angle` between every pair of ``bases`` (all present, one ``d``), vectorised.

    Each basis is orthonormalised once; then, for blocks of pairs, the cosines of the principal
    angles are the singular values of ``Q_i^T Q_j``, taken as square roots of the eigenvalues of
    the smaller of ``M M^T`` and ``M^T M`` (batched LAPACK, no Python loop over pairs; for the
    ``"smallest"`` measure and ranks up to ``CLOSED_FORM_MAX_RANK``, only the largest, in closed
    form: :func:`_largest_gram_eigenvalue`). Pairs are
    grouped by the ranks of their bases. Agrees with scipy's ``subspace_angles`` to about 1e-6
    degrees. Returns ``(n, n)`` with a zero diagonal.
    """
    q = [orthonormal_basis(b) for b in bases]
    n = len(q)
    out = np.zeros((n, n))
    ranks = np.array([x.shape[1] for x in q])
    groups = {int(r): np.flatnonzero(ranks == r) for r in np.unique(ranks)}
    stacked = {r: np.stack([q[i] for i in idx]) for r, idx in groups.items() if r > 0}
    for ra, ia in groups.items():
        for rb, ib in groups.items():
            if rb < ra:
                continue
            if ra == 0 or rb == 0:
                out[np.ix_(ia, ib)] = 90.0
                out[np.ix_(ib, ia)] = 90.0
                continue
            qa, qb = stacked[ra], stacked[rb]
            step = max(1, BLOCK_ENTRIES // max(1, len(ib) * ra * rb))
            for start in range(0, len(ia), step):
                stop = min(start + step, len(ia))
                cols = ib[start:] if ra == rb else ib  # within one group, the pairs i <= j only
                right = qb[start:] if ra == rb else qb
                left = qa[start:stop].transpose(0, 2, 1).reshape(-1, qa.shape[1])  # (b * ra, d)
                m = left @ right.transpose(1, 0, 2).reshape(qa.shape[1], -1)  # (b * ra, nb * rb)
                m = m.reshape(stop - start, ra, len(cols), rb)
                if measure == "smallest" and ra <= CLOSED_FORM_MAX_RANK:
                    value = np.degrees(np.arccos(np.sqrt(np.clip(_largest_gram_eigenvalue(m), 0.0, 1.0))))
                else:
                    m = m.transpose(0, 2, 1, 3)
                    gram = m @ m.transpose(0, 1, 3, 2)  # (b, nb, ra, ra), ra <= rb
                    cos2 = np.clip(np.linalg.eigvalsh(gram)[..., ::-1], 0.0, 1.0)  # descending cosines^2
                    angles = np.degrees(np.arccos(np.sqrt(cos2)))  # ascending angles
                    if measure == "smallest":
                        value = angles[..., 0]
                    else:
                        value = angles.sum(axis=-1) if measure == "sum" else angles.mean(axis=-1)
                if ra == rb:  # pairs inside the block come twice (M and M^T): keep one, exactly symmetric
                    inner = value[:, : stop - start]
                    upper = np.triu_indices(stop - start, 1)
                    inner.T[upper] = inner[upper]
                out[np.ix_(ia[start:stop], cols)] = value
                out[np.ix_(cols, ia[start:stop])] = value.T
    np.fill_diagonal(out, 0.0)
    return out


CLOSED_FORM_MAX_RANK = 3
"""Smallest angles between bases of rank <= this come from :func:`_largest_gram_eigenvalue`."""


def _largest_gram_eigenvalue(m: np.ndarray) -> np.ndarray:
    """Largest eigenvalue of ``G = M M^T`` for a batch ``m`` of shape (b, r, nb, q), r <= 3, in closed form.

    ``G[..., a, c] = sum_k m[:, a, :, k] m[:, c, :, k]``; its largest eigenvalue is the squared
    cosine of the smallest principal angle (FLAG Eq. 1, PACFL Eq. 3). r = 1 is ``G`` itself, r = 2
    the quadratic formula and r = 3 the trigonometric solution of the characteristic cubic
    (Smith, CACM 4(4), 1961): elementwise array operations instead of one LAPACK call per pair.
    Returns shape (b, nb).
    """
    r = m.shape[1]
    g = {(a, c): np.einsum("bik,bik->bi", m[:, a], m[:, c]) for a in range(r) for c in range(a, r)}
    if r == 1:
        return g[0, 0]
    if r == 2:
        half = 0.5 * (g[0, 0] - g[1, 1])
        return 0.5 * (g[0, 0] + g[1, 1]) + np.sqrt(half * half + g[0, 1] ** 2)
    q = (g[0, 0] + g[1, 1] + g[2, 2]) / 3.0
    d0, d1, d2 = g[0, 0] - q, g[1, 1] - q, g[2, 2] - q
    off = g[0, 1] ** 2 + g[0, 2] ** 2 + g[1, 2] ** 2
    p = np.sqrt((d0 * d0 + d1 * d1 + d2 * d2 + 2.0 * off) / 6.0)
    det = (
        d0 * (d1 * d2 - g[1, 2] ** 2)
        - g[0, 1] * (g[0, 1] * d2 - g[1, 2] * g[0, 2])
        + g[0, 2] * (g[0, 1] * g[1, 2] - d1 * g[0, 2])
    )
    safe = np.where(p > 0, p, 1.0)
    half_det = np.clip(det / (2.0 * safe**3), -1.0, 1.0)
    return q + 2.0 * p * np.cos(np.arccos(half_det) / 3.0)


def stack_bases(per_class: Sequence[np.ndarray]) -> np.ndarray:
    """One client's PACFL basis: its per-class bases (d, p_c) side by side, (d, sum p_c).

    Raises
    ------
    ValueError
        Naming ``'per_class'`` if empty or of mixed ``d``.
    """
    if len(per_class) == 0:
        raise ValueError(
            "The 'per_class' parameter of stack_bases must hold at least one basis. Got an empty sequence instead."
        )
    mats = [_basis(b, "per_class", "stack_bases") for b in per_class]
    if len({m.shape[0] for m in mats}) > 1:
        raise ValueError(
            "The 'per_class' parameter of stack_bases must hold bases with one row "
            f"count d. Got row counts {sorted({m.shape[0] for m in mats})} instead."
        )
    return np.concatenate(mats, axis=1)


def angles_between(first: Sequence[np.ndarray], second: Sequence[np.ndarray], measure: str = "smallest") -> np.ndarray:
    """:func:`subspace_angle` of every basis in ``first`` with every basis in ``second``, shape (n, m).

    Vectorised over ``first`` (grouped by rank) for each basis of ``second``: meant for many
    clients against a few references. Agrees with :func:`pairwise_subspace_angles`.
    """
    check_choice(measure, "measure", "angles_between", MEASURES)
    out = np.empty((len(first), len(second)))
    if measure.startswith("reference"):
        cols = [b / np.linalg.norm(b, axis=0) for b in first]
        starts = np.concatenate([[0], np.cumsum([c.shape[1] for c in cols])[:-1]])
        stacked = np.concatenate(cols, axis=1)
        for j, b in enumerate(second):
            cos = stacked.T @ (b / np.linalg.norm(b, axis=0))
            cos = (cos if measure == "reference-signed" else np.abs(cos)).max(axis=1)
            out[:, j] = np.degrees(np.arccos(np.clip(np.maximum.reduceat(cos, starts), -1.0, 1.0)))
        return out
    return _cross_angles(first, second, measure)


GRAM_CONDITION = 1e-4
"""Bases whose Gram matrix ``B^T B`` has eigenvalues within this ratio are orthonormalised through it
(``Q = B V L^-1/2``, rounding about ``eps / GRAM_CONDITION``); the others by SVD."""


def orthonormal_groups(bases: Sequence[np.ndarray]) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Orthonormal bases of the column spaces of ``bases``, grouped by rank.

    For each basis shape, one batched eigendecomposition of the small Gram matrices ``B^T B``:
    where they are well conditioned (``GRAM_CONDITION``), ``Q = B V L^-1/2``, the left singular
    vectors (in another order); the others one at a time by :func:`orthonormal_basis` (SVD, which
    drops the directions below its rank tolerance). Rank-0 bases are left out.

    Returns
    -------
    dict of int to (ndarray of shape (g,), ndarray of shape (g, d, r))
        For each rank ``r`` > 0, the positions in ``bases`` and their ``(d, r)`` orthonormal bases, float64.
    """
    parts: dict[int, list[tuple[np.ndarray, np.ndarray]]] = {}
    shapes: dict[tuple[int, ...], list[int]] = {}
    for i, b in enumerate(bases):
        shapes.setdefault(tuple(np.shape(b)), []).append(i)
    for at_list in shapes.values():
        at = np.asarray(at_list)
        stack = np.stack([np.asarray(bases[int(i)], dtype=np.float64) for i in at])  # (g, d, p)
        values, vectors = np.linalg.eigh(stack.transpose(0, 2, 1) @ stack)  # ascending
        good = values[:, 0] > GRAM_CONDITION * values[:, -1]
        if good.any():
            scaled = vectors[good] / np.sqrt(values[good])[:, None, :]
            parts.setdefault(stack.shape[2], []).append((at[good], stack[good] @ scaled))
        for j in np.flatnonzero(~good):
            q = orthonormal_basis(stack[j])
            if q.shape[1]:
                parts.setdefault(q.shape[1], []).append((at[j : j + 1], q[None]))
    return {
        r: (np.concatenate([p[0] for p in found]), np.concatenate([p[1] for p in found]))
        for r, found in sorted(parts.items())
    }


def _cross_angles(first: Sequence[np.ndarray], second: Sequence[np.ndarray], measure: str) -> np.ndarray:
    """:func:`subspace_angle` (``smallest``, ``sum`` or ``mean``) of every basis in ``first`` with every
    basis in ``second``, both sides vectorised.

    Bases are orthonormalised in batches and grouped by rank (:func:`orthonormal_groups`); each
    pair of groups is one matrix product ``Q_a^T Q_b`` in blocks of ``BLOCK_ENTRIES``; the
    squared cosines are the eigenvalues of the smaller Gram matrix of each pair (batched
    LAPACK), the largest in closed form for the smallest angle at ranks up to
    ``CLOSED_FORM_MAX_RANK`` (:func:`_largest_gram_eigenvalue`). A rank-0 basis is at 90 degrees
    from everything.

    Returns
    -------
    ndarray of shape (len(first), len(second)), float64
    """
    out = np.full((len(first), len(second)), 90.0)
    if not len(first) or not len(second):
        return out

    right = orthonormal_groups(second)
    for ra, (ia, qa) in orthonormal_groups(first).items():
        for rb, (ib, qb) in right.items():
            small, large = (qa, qb) if ra <= rb else (qb, qa)
            r, q = small.shape[2], large.shape[2]
            cols = large.transpose(1, 0, 2).reshape(large.shape[1], -1)  # (d, n_large * q)
            value = np.empty((len(small), len(large)))
            step = max(1, BLOCK_ENTRIES // max(1, len(large) * r * q))

            threads = min(row_threads(), -(-len(small) // step))
            if threads > 1:
                # each thread's products on one BLAS thread: BLAS's own spare threads spin while
                # LAPACK's small problems run, which took more CPU than they saved
                with threadpool_limits(1, user_api="blas"):
                    over_rows(len(small), partial(_cross_rows, small, cols, measure, value, step), threads)
            else:
                _cross_rows(small, cols, measure, value, step, 0, len(small))
            out[np.ix_(ia, ib)] = value if ra <= rb else value.T
    return out


def _cross_rows(
    small: np.ndarray, cols: np.ndarray, measure: str, value: np.ndarray, step: int, start: int, stop: int, _: int = 0
) -> None:
    """Rows ``start:stop`` of :func:`_cross_angles`' ``value``, ``step`` bases of ``small`` (g, d, r) at a time
    against the ``(d, n * q)`` columns ``cols`` of the other side's n bases of rank q."""
    r = small.shape[2]
    for lo in range(start, stop, step):
        hi = min(lo + step, stop)
        left = small[lo:hi].transpose(0, 2, 1).reshape(-1, small.shape[1])  # (b * r, d)
        n = value.shape[1]
        m = (left @ cols).reshape(-1, r, n, cols.shape[1] // n)
        if measure == "smallest" and r <= CLOSED_FORM_MAX_RANK:
            cos2 = _largest_gram_eigenvalue(m)[..., None]
        else:
            m = m.transpose(0, 2, 1, 3)
            cos2 = np.linalg.eigvalsh(m @ m.transpose(0, 1, 3, 2))[..., ::-1]  # descending cosines^2
            cos2 = cos2[..., :1] if measure == "smallest" else cos2
        angles = np.degrees(np.arccos(np.sqrt(np.clip(cos2, 0.0, 1.0))))
        value[lo:hi] = angles.sum(axis=-1) if measure == "sum" else angles.mean(axis=-1)


def _stacked(client: ClientBases) -> np.ndarray:
    if isinstance(client, Mapping):
        return stack_bases([client[c] for c in sorted(client)])
    return np.asarray(client)


def _by_class(clients: Sequence[ClientBases], owner: str) -> list[Mapping[int, np.ndarray]]:
    out = []
    for client in clients:
        if not isinstance(client, Mapping):
            raise ValueError(
                f"The 'clients' parameter of {owner} must hold one mapping class -> basis per client for "
                f"measure {PER_CLASS!r}. Got {type(client).__name__} instead."
            )
        out.append(client)
    return out


def class_angle_matrices(
    first: Sequence[Mapping[int, np.ndarray]],
    second: Sequence[Mapping[int, np.ndarray]] | None = None,
    within: str = "mean",
    one_missing: float = ONE_CLASS_MISSING,
    *,
    classes: Iterable[int] | None = None,
    owner: str = "class_angle_matrices",
) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """For each class (``classes``; default: every class a client holds, ascending), ``(angles, left, right)``.

    ``angles`` (n, m): :func:`subspace_angle` (``within``) between the class bases of a client of
    ``first`` and one of ``second`` where both hold the class, ``one_missing`` where one does, 0
    where neither does. ``left`` (n,) and ``right`` (m,), bool: the clients that hold it. With
    ``second`` None, ``first`` against itself, each pair once (:func:`pairwise_subspace_angles`):
    symmetric, zero diagonal, ``right`` is ``left``. Errors for ``within`` and ``one_missing`` name ``owner``.
    """
    check_choice(within, "within", owner, MEASURES)
    one_missing = check_float(one_missing, "one_missing", owner, low=0.0)
    sides = first if second is None else (*first, *second)
    for c in sorted({int(c) for client in sides for c in client}) if classes is None else classes:
        left = np.array([c in client for client in first], dtype=bool)
        if second is None:
            bases = [client.get(c) for client in first]
            yield pairwise_subspace_angles(bases, within, one_missing=one_missing, both_missing=0.0), left, left
            continue
        right = np.array([c in client for client in second], dtype=bool)
        block = np.where(left[:, None] | right[None, :], one_missing, 0.0)
        if left.any() and right.any():
            block[np.ix_(left, right)] = angles_between(
                [client[c] for client, has in zip(first, left, strict=True) if has],
                [client[c] for client, has in zip(second, right, strict=True) if has],
                within,
            )
        yield block, left, right


def _mean_class_angles(
    first: Sequence[Mapping[int, np.ndarray]],
    second: Sequence[Mapping[int, np.ndarray]] | None,
    within: str,
    one_missing: float,
    owner: str,
) -> np.ndarray:
    """The mean of :func:`class_angle_matrices` over the classes either client of a pair holds."""
    shape = (len(first), len(first if second is None else second))
    total, union = np.zeros(shape), np.zeros(shape)
    for angles, left, right in class_angle_matrices(first, second, within, one_missing, owner=owner):
        total += angles
        union += left[:, None] | right[None, :]
    return total / np.maximum(union, 1.0)


def pairwise_class_angles(
    clients: Sequence[Mapping[int, np.ndarray]], within: str = "mean", one_missing: float = ONE_CLASS_MISSING
) -> np.ndarray:
    """Mean over the classes either of two clients holds of their angle in that class, for every pair.

    The angle in class ``c`` is :func:`subspace_angle` (``within``) between the two clients' class-c
    bases when both hold ``c``, and ``one_missing`` when one of them does not; classes neither holds
    are left out. Clients that hold the same classes with data of the same shape come out near 0;
    a class only one of them holds pulls them apart, whatever its data looks like.

    Parameters
    ----------
    clients : sequence of length N of mappings class -> ndarray (d, p_c)
        Each client's bases of the classes it holds (one ``d`` within a class).
    within : {"smallest", "sum", "mean", "reference", "reference-signed"}, default="mean"
    one_missing : float, default=ONE_CLASS_MISSING
        >= 0.

    Returns
    -------
    ndarray of shape (N, N), float64
        Symmetric with a zero diagonal; 0 for two clients that hold no class (never both empty in practice).
    """
    out = _mean_class_angles(clients, None, within, one_missing, "pairwise_class_angles")
    np.fill_diagonal(out, 0.0)
    return out


def class_angles_between(
    first: Sequence[Mapping[int, np.ndarray]],
    second: Sequence[Mapping[int, np.ndarray]],
    within: str = "mean",
    one_missing: float = ONE_CLASS_MISSING,
) -> np.ndarray:
    """:func:`pairwise_class_angles` of every client in ``first`` with every client in ``second``, shape (n, m)."""
    return _mean_class_angles(first, second, within, one_missing, "class_angles_between")


def client_distances(clients: Sequence[ClientBases], measure: str) -> np.ndarray:
    """PACFL's distance between every two clients, shape (N, N): :func:`pairwise_class_angles` for
    :data:`PER_CLASS`, else :func:`pairwise_subspace_angles` of the stacked bases.

    Raises
    ------
    ValueError
        Naming ``'measure'`` (not in :data:`CLIENT_MEASURES`) or ``'clients'`` (a stacked basis given
        for :data:`PER_CLASS`, which needs the classes).
    """
    owner = "client_distances"
    check_choice(measure, "measure", owner, CLIENT_MEASURES)
    if measure == PER_CLASS:
        return pairwise_class_angles(_by_class(clients, owner))
    return pairwise_subspace_angles([_stacked(c) for c in clients], measure)


def client_distances_between(first: Sequence[ClientBases], second: Sequence[ClientBases], measure: str) -> np.ndarray:
    """:func:`client_distances` of every client in ``first`` with every client in ``second``, shape (n, m)."""
    owner = "client_distances_between"
    check_choice(measure, "measure", owner, CLIENT_MEASURES)
    if measure == PER_CLASS:
        return class_angles_between(_by_class(first, owner), _by_class(second, owner))
    return angles_between([_stacked(c) for c in first], [_stacked(c) for c in second], measure)


SAMPLE_SIZE = 2_000
"""Above this many clients, :func:`sampled_clusters` clusters a seeded sample of this size."""
REFERENCES_PER_CLUSTER = 20
"""Members of each sample cluster that the other clients are compared with."""
PLACE_CHUNK = 4096
"""Clients placed at a time by :func:`sampled_clusters`: bases are read (and converted to float64) per chunk,
never all N at once."""


def place_by_references(
    num_clients: int,
    sample: np.ndarray,
    sample_labels: np.ndarray,
    against: Callable[[np.ndarray], Callable[[np.ndarray], np.ndarray]],
    rng: np.random.Generator,
    references: int = REFERENCES_PER_CLUSTER,
) -> np.ndarray:
    """Every client's cluster: the sample's own labels; every other client the sample cluster of
    smallest mean distance to up to ``references`` of its members (average linkage), drawn with ``rng``.

    Parameters
    ----------
    num_clients : int
    sample : ndarray of shape (S,), int64
        The clustered clients' positions, sorted.
    sample_labels : ndarray of shape (S,), int64
    against : callable
        ``against(refs)`` for the reference positions ``refs`` (R,) returns the distance function
        ``(at (m,) positions) -> (m, R)`` the algorithm places by; called once, then ``PLACE_CHUNK``
        clients at a time.
    rng : numpy Generator

    Returns
    -------
    ndarray of shape (N,), int64
    """
    sample_labels = np.asarray(sample_labels, dtype=np.int64)
    labels = np.full(num_clients, -1, dtype=np.int64)
    labels[sample] = sample_labels
    rest = np.setdiff1d(np.arange(num_clients), sample)
    if not rest.size:
        return labels
    clusters = np.unique(sample_labels)
    refs = [
        np.sort(
            rng.choice(sample[sample_labels == k], size=min(references, int(np.sum(sample_labels == k))), replace=False)
        )
        for k in clusters
    ]
    sizes = np.array([len(r) for r in refs])
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    distance = against(np.concatenate(refs))
    for lo in range(0, rest.size, PLACE_CHUNK):  # the others' signals read a chunk at a time
        at = rest[lo : lo + PLACE_CHUNK]
        labels[at] = clusters[np.argmin(np.add.reduceat(distance(at), starts, axis=1) / sizes, axis=1)]
    return labels


def sampled_clusters(
    bases: Sequence[ClientBases], measure: str, cut: Callable[[np.ndarray], np.ndarray], rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Cluster a seeded sample exactly, then place every other client by its mean angle.

    Up to ``SAMPLE_SIZE`` clients: ``cut(client_distances(bases, measure))`` itself.
    Above: the same on a uniform sample of ``SAMPLE_SIZE``; each other client joins the sample
    cluster with the smallest mean angle to up to ``REFERENCES_PER_CLUSTER`` of its members
    (PACFL's average-linkage rule for newcomers). ``O(S^2 + N K R)`` principal-angle problems
    instead of ``O(N^2)``; ``bases`` may be a lazy sequence (the strategy's float32 signals, each
    read when indexed): ``PLACE_CHUNK`` of them are converted at a time.

    Returns
    -------
    labels : ndarray of shape (N,), int64
    sample : ndarray of shape (S,), int64
        The clients clustered exactly (sorted).
    matrix : ndarray of shape (S, S)
        Their angle matrix.
    """
    n = len(bases)
    sample = np.arange(n) if n <= SAMPLE_SIZE else np.sort(rng.choice(n, size=SAMPLE_SIZE, replace=False))
    matrix = client_distances([bases[i] for i in sample], measure)
    sample_labels = np.asarray(cut(matrix), dtype=np.int64)

    def against(refs: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
        references = [bases[i] for i in refs]
        return lambda at: client_distances_between([bases[i] for i in at], references, measure)

    labels = place_by_references(n, sample, sample_labels, against, rng)
    return labels, sample, matrix
