"""Incremental update similarity of FLIC (Espinoza Castellon et al., IJCNN 2022, Sec. III, Eq. 7).

The server keeps the latest update of every client it has sampled and the matrix
``S_ij = 1 + cos(delta_i, delta_j)`` (Eq. 7), refreshing only the rows and columns of the
clients that trained this round: ``O(m N k)`` per round for ``m`` updates, ``N`` clients
seen so far and ``k`` stored coordinates, never ``O(N^2 k)``. Because a refreshed row is
recomputed against every stored update, ``S`` always equals the similarity of the latest
updates (the paper's "keep the most recent similarity").

A sketch optionally replaces each update by a seeded random projection (Johnson-Lindenstrauss:
cosines preserved up to ``O(1/sqrt(k))``), so that 10,000 clients of a large model fit in
memory: ``GaussianSketch`` (dense, ``O(d k)`` per update) or ``CountSketch`` (one random sign
and bucket per coordinate, ``O(d)`` per update: what the strategies use). numpy and
scipy.sparse only; no Flower, no torch.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import cache

import numpy as np
from scipy import sparse

SAMPLE_ABOVE = 5_000
"""Default of the ``*-sample-above`` keys: exact steps up to this many clients, sampled above
(``common.clustering.sampled``; modified: 10,000 before, whose exact steps at 10,000 clients hold
N x N float64 matrices, 800 MB each; the sampled steps' ARI was the exact steps' at 6,000 and 10,000)."""


ROW_BLOCK = 16
"""Rows read into the threads at a time (16 DNN updates: 10 MB, in the cache for a second pass)."""


def row_threads() -> int:
    """Threads for row-wise work (:func:`over_rows`): the CPUs this process may use, at most
    ``OMP_NUM_THREADS`` when set (as BLAS's own threads)."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    limit = os.environ.get("OMP_NUM_THREADS", "")
    return max(1, min(cpus, int(limit))) if limit.isdigit() and int(limit) > 0 else max(1, cpus)


@cache
def _pool(threads: int, pid: int) -> ThreadPoolExecutor:
    """One pool per process (``pid``: a forked child has none of its parent's threads)."""
    return ThreadPoolExecutor(threads, thread_name_prefix="umbel-rows")


def over_rows(count: int, work: Callable[[int, int, int], None], threads: int = 0) -> None:
    """``work(lo, hi, t)`` on ``threads`` contiguous slices of ``range(count)`` at once (0: :func:`row_threads`).

    ``t`` is the slice's index, for per-thread accumulators. The work must release the GIL
    (numpy loops, scipy.sparse products), call no BLAS (whose own threads would compete) and no
    ``over_rows`` (the pool's threads would wait on themselves); an error of any slice is raised here.
    """
    threads = min(threads or row_threads(), count)
    if threads <= 1:
        if count:
            work(0, count, 0)
        return
    bounds = np.linspace(0, count, threads + 1).astype(np.int64)
    pool = _pool(threads, os.getpid())
    for done in [pool.submit(work, int(bounds[t]), int(bounds[t + 1]), t) for t in range(threads)]:
        done.result()


def use_sample(num_clients: int, sample_above: int) -> bool:
    """Whether the sampled form runs: ``sample_above`` > 0 and more clients than it."""
    return sample_above > 0 and num_clients > sample_above


def cosine_matrix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cosine similarity of every row of ``a`` with every row of ``b``.

    Parameters
    ----------
    a : ndarray of shape (m, d)
    b : ndarray of shape (n, d)

    Returns
    -------
    ndarray of shape (m, n), float64
        In ``[-1, 1]``; a zero row has cosine 0 with everything.

    Raises
    ------
    ValueError
        If the inputs are not 2-D with the same number of columns.
    """
    a, b = np.asarray(a), np.asarray(b)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[1]:
        raise ValueError(
            "The 'a' and 'b' parameters of cosine_matrix must be 2-D arrays with the same "
            f"number of columns. Got shapes {a.shape} and {b.shape} instead."
        )
    if a.dtype == b.dtype == np.float32 and a.size + b.size > FLOAT32_GRAM_ENTRIES:
        # float64 copies of large update sets would take several times their size (1,000 DNN
        # updates: 1.3 GB each); the float32 Gram matrix is exact to about 1e-5. Scaled in place:
        # one (m, n) float64 array besides the float32 product, not five.
        cos = (a @ b.T).astype(np.float64)
        for norms, view in ((np.linalg.norm(a, axis=1), cos), (np.linalg.norm(b, axis=1), cos.T)):
            view *= np.divide(1.0, norms, out=np.zeros(len(norms)), where=norms > 0, dtype=np.float64)[:, None]
        return np.clip(cos, -1.0, 1.0, out=cos)
    a = a.astype(np.float64, copy=False)
    b = b.astype(np.float64, copy=False)
    return np.clip(unit_rows(a) @ unit_rows(b).T, -1.0, 1.0)


FLOAT32_GRAM_ENTRIES = 1 << 26
"""Above this many input entries (256 MB of float32), float32 inputs are multiplied in float32."""


def unit_rows(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Each row of ``x`` (m, d) over its norm; a zero row stays 0. ``out``: where to write them
    (``x`` itself normalises in place, with no copy of a large batch)."""
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return np.divide(x, np.where(norms > 0, norms, 1.0), out=out)


class GaussianSketch:
    """Seeded Gaussian random projection ``x -> x R`` with ``R`` of shape (d, k), entries N(0, 1/k).

    ``R`` is drawn in blocks of ``block`` input coordinates, block ``b`` from the generator
    seeded with ``(seed, b)``, so the projection depends only on ``(seed, d, k)``; blocks
    are cached while the whole matrix stays under ``cache_bytes`` and redrawn otherwise.

    Parameters
    ----------
    dim : int
        Input dimension d (>= 1).
    sketch_dim : int
        Output dimension k (>= 1).
    seed : int
        The run's seed.
    block : int, default=4096
    cache_bytes : int, default=256 MiB

    Raises
    ------
    ValueError
        If ``dim`` or ``sketch_dim`` is below 1.
    """

    def __init__(self, dim: int, sketch_dim: int, seed: int, block: int = 4096, cache_bytes: int = 256 * 2**20) -> None:
        for name, value in (("dim", dim), ("sketch_dim", sketch_dim), ("block", block)):
            if int(value) < 1:
                raise ValueError(
                    f"The '{name}' parameter of GaussianSketch must be an int >= 1. Got {value!r} instead."
                )
        self.dim, self.sketch_dim, self.seed, self.block = int(dim), int(sketch_dim), int(seed), int(block)
        self._cache: dict[int, np.ndarray] | None = {} if dim * sketch_dim * 4 <= cache_bytes else None

    def _rows(self, b: int) -> np.ndarray:
        if self._cache is not None and b in self._cache:
            return self._cache[b]
        rows = min(self.block, self.dim - b * self.block)
        rng = np.random.default_rng([self.seed, b])
        mat = rng.standard_normal((rows, self.sketch_dim), dtype=np.float32) / np.float32(np.sqrt(self.sketch_dim))
        if self._cache is not None:
            self._cache[b] = mat
        return mat

    def project(self, x: np.ndarray) -> np.ndarray:
        """Project rows.

        Parameters
        ----------
        x : ndarray of shape (m, d) or (d,)

        Returns
        -------
        ndarray of shape (m, k) or (k,), float32

        Raises
        ------
        ValueError
            If the last axis is not ``d``.
        """
        x2, single = _sketch_input(x, self.dim, "GaussianSketch.project")
        out = np.zeros((x2.shape[0], self.sketch_dim), dtype=np.float32)
        for b in range(-(-self.dim // self.block)):
            start = b * self.block
            out += x2[:, start : start + self.block] @ self._rows(b)
        return out[0] if single else out


class CountSketch:
    """Seeded sparse sign projection (CountSketch / feature hashing): ``x -> x R``, ``R`` of shape (d, k).

    Every input coordinate ``j`` is added, with a random sign ``s_j``, to one random output
    coordinate ``h_j`` (Charikar et al. 2002; Weinberger et al. 2009; a JL transform for
    inner products, Clarkson and Woodruff 2013): ``E[<x R, y R>] = <x, y>`` with variance at most
    ``2 ||x||^2 ||y||^2 / k``, like :class:`GaussianSketch`, but projecting costs ``O(d)`` per
    vector instead of ``O(d k)``, and ``R`` (one sign and bucket per coordinate) takes ``O(d)``.

    Parameters
    ----------
    dim : int
        Input dimension d (>= 1).
    sketch_dim : int
        Output dimension k (>= 1).
    seed : int
        The run's seed; ``R`` depends only on ``(seed, d, k)``.

    Raises
    ------
    ValueError
        If ``dim`` or ``sketch_dim`` is below 1.
    """

    def __init__(self, dim: int, sketch_dim: int, seed: int) -> None:
        for name, value in (("dim", dim), ("sketch_dim", sketch_dim)):
            if int(value) < 1:
                raise ValueError(f"The '{name}' parameter of CountSketch must be an int >= 1. Got {value!r} instead.")
        self.dim, self.sketch_dim, self.seed = int(dim), int(sketch_dim), int(seed)
        rng = np.random.default_rng([self.seed, self.dim, self.sketch_dim])
        buckets = rng.integers(0, self.sketch_dim, size=self.dim)
        signs = rng.choice(np.array([-1.0, 1.0], dtype=np.float32), size=self.dim)
        # R^T (k, d) as coordinates in increasing order: each is added to its bucket (x streamed, the k
        # outputs in cache; by bucket, x was gathered at random: 1.5-2x the CPU), so each bucket sums
        # its coordinates in increasing order, in float32: the values of x R. COO's one loop over the
        # d entries took 15% less CPU than CSC's loop over columns (the same sums, in the same order).
        self._by_bucket = sparse.coo_matrix(
            (signs, (buckets, np.arange(self.dim))), shape=(self.sketch_dim, self.dim), dtype=np.float32
        )

    def __eq__(self, other: object) -> bool:
        """The same projection: a ``CountSketch`` of the same ``(dim, sketch_dim, seed)``."""
        if not isinstance(other, CountSketch):
            return NotImplemented
        return (self.dim, self.sketch_dim, self.seed) == (other.dim, other.sketch_dim, other.seed)

    def __hash__(self) -> int:
        return hash((CountSketch, self.dim, self.sketch_dim, self.seed))

    def project(self, x: np.ndarray) -> np.ndarray:
        """Project rows: ``(m, d)`` or ``(d,)`` to ``(m, k)`` or ``(k,)``, float32.

        Raises
        ------
        ValueError
            If the last axis is not ``d``.
        """
        x2, single = _sketch_input(x, self.dim, "CountSketch.project")
        out = self.project_rows(x2)
        return out[0] if single else out

    def adjoint(self, u: np.ndarray) -> np.ndarray:
        """``u R^T``: rows ``(m, k)`` or ``(k,)`` back to ``(m, d)`` or ``(d,)``, float64, with
        ``<x R, u> = <x, u R^T>`` for every ``x`` (coordinate ``j`` of the result is ``s_j u[h_j]``):
        a comparison with ``u`` in the sketch costs one product in ``d`` coordinates, no projection.
        """
        u = np.asarray(u, dtype=np.float64)
        if u.shape[-1:] != (self.sketch_dim,) or u.ndim > 2:
            raise ValueError(
                f"The 'u' parameter of CountSketch.adjoint must have shape (m, {self.sketch_dim}) or "
                f"({self.sketch_dim},). Got {u.shape} instead."
            )
        return np.asarray(self._by_bucket.T @ u.T).T

    def project_rows(self, rows: Sequence[np.ndarray] | np.ndarray) -> np.ndarray:
        """Project ``m`` vectors ``(d,)`` (never stacked) to ``(m, k)`` float32, as :meth:`project`.

        ``ROW_BLOCK`` rows are read at a time and projected one by one in :func:`over_rows`' threads
        (the sparse product releases the GIL): the same float32 values as one thread.

        Raises
        ------
        ValueError
            If a row is not a vector of ``d`` numbers.
        """
        out = np.empty((len(rows), self.sketch_dim), dtype=np.float32)
        for lo in range(0, len(rows), ROW_BLOCK):
            part = [self._row(rows, i) for i in range(lo, min(lo + ROW_BLOCK, len(rows)))]

            def project(a: int, b: int, _: int, part: list[np.ndarray] = part, lo: int = lo) -> None:
                for i in range(a, b):
                    out[lo + i] = self._by_bucket @ part[i]

            over_rows(len(part), project)
        return out

    def project_row(self, row: np.ndarray) -> np.ndarray:
        """One vector ``(d,)`` projected to ``(k,)`` float32: its row of :meth:`project_rows`, in the caller's
        thread (for work that reads the vector for other results while it is in the cache).

        Raises
        ------
        ValueError
            If ``row`` is not a vector of ``d`` numbers.
        """
        return np.asarray(self._by_bucket @ self._row((row,), 0))

    def _row(self, rows: Sequence[np.ndarray] | np.ndarray, i: int) -> np.ndarray:
        row = np.asarray(rows[i], dtype=np.float32)
        if row.shape != (self.dim,):
            raise ValueError(
                f"The 'rows' parameter of CountSketch.project_rows must hold vectors of {self.dim} numbers. "
                f"Got shape {row.shape} at row {i} instead."
            )
        return row


AUTO_SKETCH_BYTES = 2 * 2**30
"""Full float32 updates of all clients above this size are sketched when no sketch is asked for."""
AUTO_SKETCH_DIM = 4096
"""The automatic sketch's dimension (cosines and distances kept to about 2-3%)."""


def auto_sketch_dim(num_clients: int, dim: int, sketch_dim: int = 0) -> int:
    """The sketch dimension to use: ``sketch_dim`` when given (> 0), else automatic.

    With ``sketch_dim == 0``, updates stay exact (0 is returned) while ``num_clients`` full
    float32 updates of ``dim`` coordinates take at most ``AUTO_SKETCH_BYTES`` (2 GiB: 3,376
    clients of the 159,010-parameter DNN), or when ``dim <= AUTO_SKETCH_DIM``; above, it is
    ``AUTO_SKETCH_DIM``, so 10,000 clients of any model take 160 MB instead of tens of GB.

    Raises
    ------
    ValueError
        Naming ``'num_clients'``, ``'dim'`` or ``'sketch_dim'`` when negative.
    """
    for name, value in (("num_clients", num_clients), ("dim", dim), ("sketch_dim", sketch_dim)):
        if int(value) < 0:
            raise ValueError(f"The '{name}' parameter of auto_sketch_dim must be an int >= 0. Got {value!r} instead.")
    if sketch_dim:
        return int(sketch_dim)
    big = int(num_clients) * int(dim) * 4 > AUTO_SKETCH_BYTES and int(dim) > AUTO_SKETCH_DIM
    return AUTO_SKETCH_DIM if big else 0


def update_similarity(num_clients: int, dim: int, sketch_dim: int, seed: int, summed: bool = False) -> UpdateSimilarity:
    """An empty store for the latest updates (``summed``: the sums of the updates) of ``num_clients``
    clients, of ``dim`` coordinates each.

    Updates are kept whole, or count-sketched (seeded) to ``auto_sketch_dim(num_clients, dim,
    sketch_dim)`` coordinates when that is not 0: FLIC's and Sattler's CFL's store. Above
    ``SAMPLE_ABOVE`` clients ``S`` is not kept (``dense`` False: 40 GB at 100,000) and
    ``matrix`` computes the asked block from the stored rows (the same numbers).
    """
    sketch_dim = auto_sketch_dim(num_clients, dim, sketch_dim)
    dense = not use_sample(num_clients, SAMPLE_ABOVE)
    return UpdateSimilarity(CountSketch(dim, sketch_dim, seed) if sketch_dim else None, dense, summed)


def row_sketch(num_rows: int, dim: int, seed: int, sketch_dim: int = 0) -> CountSketch | None:
    """The sketch :func:`sketch_rows` applies to ``num_rows`` vectors of ``dim`` floats (None: kept whole),
    for callers that sketch rows as they arrive; ``sketch_dim`` as there."""
    k = auto_sketch_dim(num_rows, dim, sketch_dim)
    return CountSketch(dim, k, seed) if k else None


def sketch_rows(
    rows: Sequence[np.ndarray] | np.ndarray, seed: int, *, sketch_dim: int = 0, exact: bool = False
) -> np.ndarray:
    """Clients' vectors as one array, sketched when large (:func:`auto_sketch_dim`).

    Parameters
    ----------
    rows : sequence of N arrays of shape (d,), or ndarray of shape (N, d)
        One flattened update per client.
    seed : int
        The run's seed (the :class:`CountSketch`).
    sketch_dim : int, default=0
        > 0: always sketch to this dimension; 0: automatic.
    exact : bool, default=False
        Never sketch (e.g. for L1 distances, which a sketch does not keep). A sketch projects the
        rows one at a time (never stacked).

    Returns
    -------
    ndarray of shape (N, d) as given (stacked), or (N, k) float32 when sketched.

    Raises
    ------
    ValueError
        If ``rows`` is empty or its rows differ in length.
    """
    n = len(rows)
    if n == 0:
        raise ValueError("The 'rows' parameter of sketch_rows must hold at least one vector. Got none instead.")
    dim = int(np.shape(rows[0])[-1])
    if any(np.shape(r) != (dim,) for r in rows):
        raise ValueError(
            f"The 'rows' parameter of sketch_rows must hold vectors of one length {dim}. "
            "Got vectors of other shapes instead."
        )
    sketch = None if exact else row_sketch(n, dim, seed, sketch_dim)
    if sketch is None:
        return np.asarray(rows) if isinstance(rows, np.ndarray) else np.stack(list(rows))
    return sketch.project_rows(rows)


SUM_RTOL = 1e-6
"""A summed store's sum shorter than this times the lengths it was made of is 0 (float32 rows round at
about 6e-8 of their length)."""


class UpdateSimilarity:
    """The latest update (or the sum of the updates) of every client seen and ``S = 1 + cos`` among them,
    refreshed incrementally.

    Parameters
    ----------
    sketch : GaussianSketch or CountSketch, optional
        Store projected updates instead of the full vectors.
    dense : bool, default=True
        Keep ``S`` (``N x N`` float32) and refresh it with each update; False: keep only the
        unit rows and compute ``matrix``'s block on demand (exact; for large federations).
    summed : bool, default=False
        Keep each client's sum of its updates so far instead of its latest (FLIC's ``flic-graph
        summed``): a client's row is the direction of the sum, kept as that unit row and the sum's
        norm (one number more a client, not a second copy of the rows). A sketch is linear, so the
        sketch of the sum is the sum of the sketches.

    Attributes
    ----------
    pids : list of int
        Clients with a stored update, in the order first seen (row order of ``S``).
    """

    def __init__(
        self, sketch: GaussianSketch | CountSketch | None = None, dense: bool = True, summed: bool = False
    ) -> None:
        self.sketch, self.dense, self.summed = sketch, dense, summed
        self.pids: list[int] = []
        self._row: dict[int, int] = {}
        self._vectors = np.zeros((0, 0), dtype=np.float32)
        self._norms = np.zeros(0)
        self._s = np.zeros((0, 0), dtype=np.float32)

    def __contains__(self, pid: object) -> bool:
        return pid in self._row

    def __len__(self) -> int:
        return len(self.pids)

    def update(
        self, pids: Sequence[int], updates: np.ndarray | Sequence[np.ndarray], *, projected: np.ndarray | None = None
    ) -> np.ndarray:
        """Store this round's updates and refresh their rows and columns of ``S``.

        Parameters
        ----------
        pids : sequence of int, length m
            Distinct partition ids.
        updates : ndarray of shape (m, d), or a sequence of m arrays (d,)
            Flattened updates (trained minus sent); projected first when a sketch is set, a row at
            a time (a sequence is then never stacked).
        projected : ndarray of shape (m, k), optional
            The updates already projected by ``sketch`` (they are not projected again; ``updates`` is
            then only checked for its number of rows).

        Returns
        -------
        ndarray of shape (m, k), float32
            The updates as stored before their scaling to unit norm: projected by ``sketch``, or
            as given (a caller that needs the same sketch need not project them again).

        Raises
        ------
        ValueError
            If the shapes disagree with ``pids`` or earlier updates, or ``pids`` repeat.
        """
        pids = [int(p) for p in pids]
        sketched = isinstance(self.sketch, CountSketch) and not isinstance(updates, np.ndarray)
        if not sketched:
            updates = np.asarray(updates, dtype=np.float32)
        shape = (len(updates), *np.shape(updates[0])) if sketched and len(updates) else np.shape(updates)
        if len(shape) != 2 or shape[0] != len(pids) or len(set(pids)) != len(pids):
            raise ValueError(
                "The 'updates' parameter of UpdateSimilarity.update must have one row per "
                f"distinct pid. Got shape {shape} for {len(pids)} pids instead."
            )
        if not pids:
            return np.zeros((0, self._vectors.shape[1]), dtype=np.float32)
        if projected is not None:
            vectors = np.asarray(projected, dtype=np.float32)
            if vectors.shape[0] != len(pids):
                raise ValueError(
                    "The 'projected' parameter of UpdateSimilarity.update must have one row per pid. "
                    f"Got shape {vectors.shape} for {len(pids)} pids instead."
                )
        elif isinstance(self.sketch, CountSketch):
            vectors = self.sketch.project_rows(updates)
        else:
            vectors = self.sketch.project(np.asarray(updates)) if self.sketch is not None else np.asarray(updates)
        if self.pids and vectors.shape[1] != self._vectors.shape[1]:
            raise ValueError(
                f"The 'updates' parameter of UpdateSimilarity.update must have "
                f"{self._vectors.shape[1]} columns. Got {vectors.shape[1]} instead."
            )
        for pid in pids:
            if pid not in self._row:
                self._row[pid] = len(self.pids)
                self.pids.append(pid)
        self._grow(len(self.pids), vectors.shape[1])
        rows = np.array([self._row[p] for p in pids])
        unit = vectors.astype(np.float64)
        if self.summed:  # the sum so far (unit row times its norm; 0 for a new client) plus this update
            scale = self._norms[rows] + np.linalg.norm(unit, axis=1)
            unit += self._vectors[rows].astype(np.float64) * self._norms[rows, None]
            norms = np.linalg.norm(unit, axis=1)
            cancelled = norms <= SUM_RTOL * scale  # float32 rows: what is left of a cancelled sum is rounding
            unit[cancelled] = 0.0
            self._norms[rows] = np.where(cancelled, 0.0, norms)
        unit_rows(unit, out=unit)
        if rows[-1] - rows[0] == len(rows) - 1 and (np.diff(rows) == 1).all():
            self._vectors[rows[0] : rows[-1] + 1] = unit  # new clients in order: a slice, not a gather
        else:
            self._vectors[rows] = unit
        if self.dense:
            n = len(self.pids)
            block = 1.0 + np.clip(self._vectors[rows] @ self._vectors[:n].T, -1.0, 1.0)
            self._s[rows, :n] = block
            self._s[:n, rows] = block.T
        return np.asarray(vectors, dtype=np.float32)

    def keep(
        self,
        pids: Sequence[int],
        updates: np.ndarray | Sequence[np.ndarray],
        sketch: object = None,
        projected: np.ndarray | None = None,
    ) -> np.ndarray | None:
        """Store the updates (:meth:`update`); their rows as stored in ``sketch``, or None (:meth:`in_sketch`).

        ``projected``: the updates' rows in ``sketch`` (m, k), already computed by the caller; stored as they
        are where this store projects by ``sketch``, else ignored (the store projects ``updates``).
        """
        mine = projected is not None and sketch is not None and self.sketch == sketch
        return self.in_sketch(self.update(pids, updates, projected=projected if mine else None), sketch)

    def in_sketch(self, rows: np.ndarray, sketch: object) -> np.ndarray | None:
        """``rows`` (as :meth:`update` returned them) where this store projects by ``sketch`` (an equal
        sketch: a caller comparing updates in it need not project them again), else None."""
        return rows if sketch is not None and self.sketch == sketch else None

    def reserve(self, count: int) -> None:
        """Room for ``count`` more clients, allocated once (no doubling), for updates stored in batches."""
        if self.pids and count > 0:
            self._grow(len(self.pids) + int(count), self._vectors.shape[1], spare=False)

    def _grow(self, n: int, k: int, spare: bool = True) -> None:
        if self._vectors.shape[0] >= n:
            return
        cap = max(n, 2 * self._vectors.shape[0], 8) if spare else n
        vectors = np.zeros((cap, k), dtype=np.float32)
        if self._vectors.size:
            vectors[: self._vectors.shape[0]] = self._vectors
        self._vectors = vectors
        self._norms = np.concatenate([self._norms, np.zeros(cap - self._norms.size)])
        if self.dense:
            s = np.zeros((cap, cap), dtype=np.float32)
            s[: self._s.shape[0], : self._s.shape[1]] = self._s
            self._s = s

    def between(self, rows: Sequence[int], cols: Sequence[int]) -> np.ndarray:
        """``S`` between clients ``rows`` and clients ``cols`` (all seen), shape (len(rows), len(cols)), float64."""
        a, b = ([self._row[int(p)] for p in pids] for pids in (rows, cols))
        if self.dense:
            return self._s[np.ix_(a, b)].astype(np.float64)
        return 1.0 + np.clip(self._vectors[a] @ self._vectors[b].T, -1.0, 1.0).astype(np.float64)

    def unit_rows(self, pids: Sequence[int]) -> np.ndarray:
        """The stored unit (sketched) updates of ``pids``, shape (len(pids), k), float32: ``S = 1 + u u^T``."""
        return self._vectors[[self._row[int(p)] for p in pids]]

    def matrix(self, pids: Sequence[int] | None = None) -> np.ndarray:
        """``S`` among ``pids`` (default: every client seen), shape (n, n), float64 in [0, 2].

        Raises
        ------
        ValueError
            If a pid has no stored update.
        """
        pids = self.pids if pids is None else [int(p) for p in pids]
        missing = [p for p in pids if p not in self._row]
        if missing:
            raise ValueError(
                f"The 'pids' parameter of UpdateSimilarity.matrix must name clients with a "
                f"stored update. Got unseen {missing} instead."
            )
        rows = np.array([self._row[p] for p in pids], dtype=np.int64)
        if not self.dense:
            v = self._vectors[rows]
            return 1.0 + np.clip(v @ v.T, -1.0, 1.0).astype(np.float64)
        return self._s[np.ix_(rows, rows)].astype(np.float64)


def _sketch_input(x: np.ndarray, dim: int, owner: str) -> tuple[np.ndarray, bool]:
    """``x`` as float32 rows ``(m, dim)`` and whether it was one row ``(dim,)``; else a ValueError."""
    arr = np.asarray(x, dtype=np.float32)
    single = arr.ndim == 1
    rows = arr[None, :] if single else arr
    if rows.ndim != 2 or rows.shape[1] != dim:
        raise ValueError(f"The 'x' parameter of {owner} must have {dim} columns. Got shape {arr.shape} instead.")
    return rows, single
