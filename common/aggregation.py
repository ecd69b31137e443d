"""Model aggregation on plain numpy arrays (no Flower, no torch)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

ArrayDict = Mapping[str, np.ndarray]


def weighted_average(
    models: Sequence[ArrayDict], weights: Sequence[float], reference: ArrayDict | None = None
) -> dict[str, np.ndarray]:
    """Average models key by key, weighted by ``weights`` (FedAvg's rule).

    Parameters
    ----------
    models : sequence of mappings ``name -> ndarray``
        One entry per client; every mapping has the same keys and shapes.
    weights : sequence of float, shape (n_models,)
        Non-negative, not all zero (typically ``num-examples``).
    reference : mapping ``name -> ndarray``, optional
        The model the clients started from: the result has its keys, shapes and dtypes
        (default: the first model's).

    Returns
    -------
    dict of str to ndarray
        Accumulated in float64 and cast to the reference's dtype; integer arrays (e.g.
        BatchNorm's 0-d ``num_batches_tracked``) are rounded first and stay arrays.

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
    out: dict[str, np.ndarray] = {}
    for key, ref in (models[0] if reference is None else reference).items():
        acc = np.zeros(ref.shape, dtype=np.float64)
        for model, wi in zip(models, w, strict=True):
            arr = model.get(key)
            if arr is None or arr.shape != ref.shape:
                got = None if arr is None else arr.shape
                raise ValueError(f"Array {key!r} must have shape {ref.shape} in every model. Got {got} instead.")
            acc += wi * arr
        out[key] = _as_dtype(acc, ref.dtype)
    return out


def coordinate_median(models: Sequence[ArrayDict], reference: ArrayDict | None = None) -> dict[str, np.ndarray]:
    """Coordinate-wise median of models, key by key (Yin et al., ICML 2018; FLIC's median defence).

    Unweighted: every model counts once, whatever its number of examples.

    Parameters
    ----------
    models : sequence of mappings ``name -> ndarray``
        One entry per client; every mapping has the same keys and shapes.
    reference : mapping ``name -> ndarray``, optional
        The model the clients started from: the result has its keys, shapes and dtypes
        (default: the first model's).

    Returns
    -------
    dict of str to ndarray
        The median of each coordinate (the mean of the two middle values for an even count),
        cast to the reference's dtype; integer arrays are rounded first and 0-d ones stay arrays.

    Raises
    ------
    ValueError
        If there are no models or keys/shapes differ.
    """
    if len(models) == 0:
        raise ValueError("The 'models' parameter of coordinate_median must be non-empty. Got 0 models instead.")
    out: dict[str, np.ndarray] = {}
    for key, ref in (models[0] if reference is None else reference).items():
        found = [model.get(key) for model in models]
        arrays = [a for a in found if a is not None and a.shape == ref.shape]
        if len(arrays) < len(found):
            bad = next(None if a is None else a.shape for a in found if a is None or a.shape != ref.shape)
            raise ValueError(f"Array {key!r} must have shape {ref.shape} in every model. Got {bad} instead.")
        flat = [a.reshape(-1) for a in arrays]
        median = np.empty(ref.size)
        band = max(1, MEDIAN_BAND_BYTES // (8 * len(flat)))
        for start in range(0, ref.size, band):  # float64 copies of a band of coordinates, not of every model
            rows = np.stack([f[start : start + band] for f in flat], dtype=np.float64)
            median[start : start + band] = np.median(rows, axis=0, overwrite_input=True)
        out[key] = _as_dtype(median.reshape(ref.shape), ref.dtype)
    return out


MEDIAN_BAND_BYTES = 64 << 20
""":func:`coordinate_median` takes the median of this many bytes of float64 values at a time."""


def _as_dtype(values: np.ndarray | np.floating, dtype: np.dtype) -> np.ndarray:
    """``values`` as an array of ``dtype`` (rounded for integers), 0-d included: numpy reductions give scalars."""
    values = np.asarray(values, dtype=np.float64)
    if np.issubdtype(dtype, np.integer):
        values = np.rint(values)
    return np.asarray(values.astype(dtype, copy=False))
