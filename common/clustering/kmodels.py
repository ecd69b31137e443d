"""Start state of K-model clustered FL (CFL-GP, Kim et al. ICML 2024 Alg. 1 inputs; IFCA,
Ghosh et al. NeurIPS 2020): K distinct initial models and random initial clusters.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from common.validation import check_int


def random_partition(pids: Sequence[int], num_clusters: int, rng: np.random.Generator) -> dict[int, int]:
    """A random balanced assignment: shuffled ``pids`` dealt to clusters ``0..K-1`` in turn.

    Every cluster gets ``floor(N / K)`` or ``ceil(N / K)`` clients.

    Raises
    ------
    ValueError
        Naming ``'num_clusters'`` if it is below 1.
    """
    k = check_int(num_clusters, "num_clusters", "random_partition", low=1)
    order = rng.permutation(np.asarray(sorted(pids), dtype=np.int64))
    return {int(pid): i % k for i, pid in enumerate(order)}


def redraw_like(arrays: Mapping[str, np.ndarray], rng: np.random.Generator) -> dict[str, np.ndarray]:
    """A fresh random initialisation at the scale of ``arrays``.

    Each floating array with a nonzero entry is redrawn uniformly in ``[-m, m]``, ``m`` its
    largest magnitude: PyTorch's default initialisations are uniform on a symmetric interval,
    whose bound ``m`` estimates (a one-element array gives only that bound). Constant arrays of
    more than one entry (zero biases, normalisation weights and statistics) and integer arrays
    are kept, as they are not random draws. Used for models ``1..K-1`` so that the K models
    differ, as the papers' K random initial models do (identical IFCA models would tie on loss).

    Returns
    -------
    dict of str to ndarray
        Same keys, shapes and dtypes as ``arrays``.
    """
    out = {}
    for name, arr in arrays.items():
        arr = np.asarray(arr)
        drawn = np.issubdtype(arr.dtype, np.floating) and (arr.size == 1 or np.ptp(arr) > 0)
        bound = float(np.abs(arr).max()) if drawn else 0.0
        if bound > 0:
            arr = rng.uniform(-bound, bound, size=arr.shape).astype(arr.dtype)
        out[name] = arr.copy()
    return out
