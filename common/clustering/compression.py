"""CFL-GP's compressed profiles (Kim et al., ICML 2024, App. E.1): a random coordinate subset.

The server sends a seed and a size ``d_hat``; each client returns only those coordinates of
its gradient or model gap. Server and client both call :func:`coordinate_subset`, so they pick
identical coordinates, and every client of one clustering update returns the same subset.
"""

from __future__ import annotations

import math

import numpy as np

from common.validation import check_float, check_int


def compressed_size(dim: int, ratio: float) -> int:
    """``d_hat = ceil(dim / ratio)``: coordinates kept at compression ratio ``ratio >= 1``.

    Raises
    ------
    ValueError
        Naming ``'dim'`` (int >= 1) or ``'ratio'`` (float >= 1).
    """
    dim = check_int(dim, "dim", "compressed_size", low=1)
    ratio = check_float(ratio, "ratio", "compressed_size", low=1.0)
    return max(1, math.ceil(dim / ratio))


def coordinate_subset(dim: int, size: int, seed: int) -> np.ndarray:
    """The ``size`` coordinates (sorted, without replacement) of a ``dim``-vector that ``seed`` picks.

    Parameters
    ----------
    dim : int
        Length of the full vector, ``>= 1``.
    size : int
        ``d_hat``, in ``[1, dim]``; ``size == dim`` keeps every coordinate in order.
    seed : int
        ``>= 0``; equal arguments always give equal subsets.

    Returns
    -------
    ndarray of shape (size,), int64
    """
    dim = check_int(dim, "dim", "coordinate_subset", low=1)
    size = check_int(size, "size", "coordinate_subset", low=1, high=dim)
    seed = check_int(seed, "seed", "coordinate_subset", low=0)
    if size == dim:
        return np.arange(dim, dtype=np.int64)
    chosen = np.random.default_rng(seed).choice(dim, size=size, replace=False)
    return np.sort(chosen).astype(np.int64)


def block_seed(run_seed: int, block: int) -> int:
    """The subset seed of model ``block``'s profile block: fixed for the run, so averages line up."""
    return int(
        np.random.SeedSequence(
            [check_int(run_seed, "run_seed", "block_seed", low=0), check_int(block, "block", "block_seed", low=0)]
        ).generate_state(1)[0]
    )


PROFILE_BUDGET_BYTES = 512 * 2**20
"""Largest float32 profile of all clients (N x K x d_hat) kept without automatic compression."""


def blocks_within(num_clients: int, size: int, budget: int | None = None) -> int:
    """How many float32 blocks of ``size`` coordinates per client ``budget`` bytes hold (default
    ``PROFILE_BUDGET_BYTES``), at least 1.

    Raises
    ------
    ValueError
        Naming ``'num_clients'``, ``'size'`` (ints >= 1) or ``'budget'`` (>= 1).
    """
    owner = "blocks_within"
    n = check_int(num_clients, "num_clients", owner, low=1)
    size = check_int(size, "size", owner, low=1)
    budget = check_int(PROFILE_BUDGET_BYTES if budget is None else budget, "budget", owner, low=1)
    return max(1, budget // (n * size * 4))


def automatic_ratio(num_clients: int, num_blocks: int, dim: int, budget: int | None = None) -> float:
    """The compression ratio for ``cfl-gp-compression-ratio`` 0: 1 while the profile fits ``budget``.

    The profile holds ``num_blocks`` float32 blocks of ``d_hat`` coordinates per client (and the
    server stacks them once more to cluster). Above ``budget`` bytes (default
    ``PROFILE_BUDGET_BYTES``), the smallest power of 2
    whose ``d_hat = ceil(dim / ratio)`` brings it within ``budget`` (CFL-GP's App. E keeps its
    clustering up to ratio 1000).

    Raises
    ------
    ValueError
        Naming ``'num_clients'``, ``'num_blocks'``, ``'dim'`` (ints >= 1) or ``'budget'`` (>= 1).
    """
    owner = "automatic_ratio"
    n = check_int(num_clients, "num_clients", owner, low=1)
    k = check_int(num_blocks, "num_blocks", owner, low=1)
    dim = check_int(dim, "dim", owner, low=1)
    budget = check_int(PROFILE_BUDGET_BYTES if budget is None else budget, "budget", owner, low=1)
    ratio = 1
    while ratio < dim and n * k * compressed_size(dim, ratio) * 4 > budget:
        ratio *= 2
    return float(min(ratio, dim))
