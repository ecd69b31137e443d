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


def coordinate_median(models: Sequence[ArrayDict]) -> dict[str, np.ndarray]:
    """Coordinate-wise median of models, key by key (Yin et al., ICML 2018; FLIC's median defence).

    Unweighted: every model counts once, whatever its number of examples.

    Parameters
    ----------
    models : sequence of mappings ``name -> ndarray``
        One entry per client; every mapping has the same keys and shapes.

    Returns
    -------
    dict of str to ndarray
        The median of each coordinate (the mean of the two middle values for an even count),
        cast back to each array's dtype; integer arrays are rounded first.

    Raises
    ------
    ValueError
        If there are no models or keys/shapes differ.
    """
    if len(models) == 0:
        raise ValueError("The 'models' parameter of coordinate_median must be non-empty. Got 0 models instead.")
    out: dict[str, np.ndarray] = {}
    for key, ref in models[0].items():
        arrays = [model.get(key) for model in models]
        bad = [None if a is None else a.shape for a in arrays if a is None or a.shape != ref.shape]
        if bad:
            raise ValueError(f"Array {key!r} must have shape {ref.shape} in every model. Got {bad[0]} instead.")
        med = np.median(np.stack([a.astype(np.float64) for a in arrays]), axis=0)
        if np.issubdtype(ref.dtype, np.integer):
            med = np.rint(med)
        out[key] = med.astype(ref.dtype, copy=False)
    return out
