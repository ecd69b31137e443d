"""Model aggregation on plain numpy arrays (no Flower, no torch)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

ArrayDict = Mapping[str, np.ndarray]


def weighted_average(models: Sequence[ArrayDict], weights: Sequence[float]) -> dict[str, np.ndarray]:
    """Average models key by key, weighted by ``weights`` (FedAvg's rule).

    Parameters
    ----------
    models : sequence of mappings ``name -> ndarray``
        One entry per client; every mapping has the same keys and shapes.
    weights : sequence of float, shape (n_models,)
        Non-negative, not all zero (typically ``num-examples``).

    Returns
    -------
    dict of str to ndarray
        Accumulated in float64 and cast back to each array's dtype; integer arrays (e.g.
        BatchNorm's ``num_batches_tracked``) are rounded first.

    Raises
    ------
    ValueError
        If there are no models, the weights do not match them, or keys/shapes differ.
    """
    if len(models) == 0:
        raise ValueError("The 'models' parameter of weighted_average must be non-empty. Got 0 models instead.")
    w = np.asarray(weights, dtype=np.float64)
    if w.shape != (len(models),) or not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
        raise ValueError(
            "The 'weights' parameter of weighted_average must be one finite non-negative "
            f"weight per model with a positive sum. Got {list(weights)!r} instead."
        )
    w = w / w.sum()
    first = models[0]
    out: dict[str, np.ndarray] = {}
    for key, ref in first.items():
        acc = np.zeros(ref.shape, dtype=np.float64)
        for model, wi in zip(models, w, strict=True):
            arr = model.get(key)
            if arr is None or arr.shape != ref.shape:
                got = None if arr is None else arr.shape
                raise ValueError(f"Array {key!r} must have shape {ref.shape} in every model. Got {got} instead.")
            acc += wi * arr
        if np.issubdtype(ref.dtype, np.integer):
            acc = np.rint(acc)
        out[key] = acc.astype(ref.dtype, copy=False)
    return out
