"""A model record seen as one flat vector of its floating-point entries, in record order.

The order is that of ``TrainUpdate.delta`` and of the clients' ``ModelUpdate``: every floating
array of the record, raveled, one after the other; integer arrays (counters) are not part of it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
from flwr.app import Array, ArrayRecord

from common.clustering.blocks import row_blocks


def float_size(record: ArrayRecord) -> int:
    """Number of floating-point entries of a model (the length of its flattened update)."""
    return sum(int(np.prod(a.shape)) for a in record.values() if np.issubdtype(a.numpy().dtype, np.floating))


def flat(arrays: Mapping[str, np.ndarray]) -> np.ndarray:
    """The floating arrays of a model (name -> array, record order), raveled one after the other, float64."""
    parts = [a.astype(np.float64).ravel() for a in arrays.values() if np.issubdtype(a.dtype, np.floating)]
    return np.concatenate(parts) if parts else np.zeros(0)


def add_flat(record: ArrayRecord, delta: np.ndarray) -> ArrayRecord:
    """``record + delta`` with ``delta`` of shape (``float_size(record)``,) laid over its floating
    arrays in record order, each result in its array's dtype; other arrays are copied.
    """
    return _laid_over(record, delta, "'delta' parameter of add_flat", np.add)


def from_flat(template: ArrayRecord, vector: np.ndarray) -> ArrayRecord:
    """``template`` with its floating arrays read from ``vector`` (record order, ``flat``'s), each in its dtype."""
    return _laid_over(template, vector, "'vector' parameter of from_flat", lambda _, part: part)


def _laid_over(
    record: ArrayRecord, vector: np.ndarray, what: str, combine: Callable[[np.ndarray, np.ndarray], np.ndarray]
) -> ArrayRecord:
    if len(vector) != float_size(record):
        raise ValueError(f"The {what} must have {float_size(record)} entries. Got {len(vector)} instead.")
    out, start = {}, 0
    for name, arr in record.items():
        a = arr.numpy()
        if np.issubdtype(a.dtype, np.floating):
            out[name] = Array(combine(a, vector[start : start + a.size].reshape(a.shape)).astype(a.dtype))
            start += a.size
        else:
            out[name] = Array(a.copy())
    return ArrayRecord(out)


def mean_rows(rows: list[np.ndarray], chunk: int = 512) -> np.ndarray:
    """Mean of equal-length vectors, stacking ``chunk`` at a time (float64 sum; never the whole set)."""
    total = np.zeros(np.shape(rows[0]), dtype=np.float64)
    for _, block in row_blocks(rows, chunk=chunk):
        total += block.sum(axis=0, dtype=np.float64)
    return total / len(rows)
