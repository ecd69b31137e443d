"""A model record seen as one flat vector of its floating-point entries, in record order.

The order is that of ``TrainUpdate.delta`` and of the clients' ``ModelUpdate``: every floating
array of the record, raveled, one after the other; integer arrays (counters) are not part of it.
"""

from __future__ import annotations

import numpy as np
from flwr.app import Array, ArrayRecord


def float_size(record: ArrayRecord) -> int:
    """Number of floating-point entries of a model (the length of its flattened update)."""
    return sum(int(np.prod(a.shape)) for a in record.values() if np.issubdtype(a.numpy().dtype, np.floating))


def add_flat(record: ArrayRecord, delta: np.ndarray) -> ArrayRecord:
    """``record + delta`` with ``delta`` of shape (``float_size(record)``,) laid over its floating
    arrays in record order, each result in its array's dtype; other arrays are copied.
    """
    if len(delta) != float_size(record):
        raise ValueError(
            f"The 'delta' parameter of add_flat must have {float_size(record)} entries. Got {len(delta)} instead."
        )
    out, start = {}, 0
    for name, arr in record.items():
        a = arr.numpy()
        if np.issubdtype(a.dtype, np.floating):
            out[name] = Array((a + delta[start : start + a.size].reshape(a.shape)).astype(a.dtype))
            start += a.size
        else:
            out[name] = Array(a.copy())
    return ArrayRecord(out)


def mean_rows(rows: list[np.ndarray], chunk: int = 512) -> np.ndarray:
    """Mean of equal-length vectors, stacking ``chunk`` at a time (float64 sum; never the whole set)."""
    total = np.zeros(np.shape(rows[0]), dtype=np.float64)
    for lo in range(0, len(rows), chunk):
        total += np.stack(rows[lo : lo + chunk]).sum(axis=0, dtype=np.float64)
    return total / len(rows)
