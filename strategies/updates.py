"""Shared by the strategies that cluster on stored client updates (FLIC, Sattler's CFL)."""

from __future__ import annotations

import numpy as np
from flwr.app import Array, ArrayRecord

from common.clustering.similarity import CountSketch, UpdateSimilarity, auto_sketch_dim


class StoredUpdates:
    """Mixin: the latest update of every client in ``similarity``, drawn as the cosine-distance matrix."""

    similarity: UpdateSimilarity | None
    assignment: dict[int, int]
    clients: dict

    def remember(self, pids: list[int], deltas: np.ndarray, sketch_dim: int, seed: int) -> None:
        """Store this round's updates, shape (len(pids), d); the first call fixes the (seeded) sketch.

        ``sketch_dim`` 0 keeps full updates unless all clients' would pass 2 GiB (``auto_sketch_dim``).
        """
        if self.similarity is None:
            sketch_dim = auto_sketch_dim(len(self.clients), deltas.shape[1], sketch_dim)
            sketch = CountSketch(deltas.shape[1], sketch_dim, seed) if sketch_dim else None
            self.similarity = UpdateSimilarity(sketch)
        self.similarity.update(pids, deltas)

    @property
    def distance_pids(self) -> list[int]:
        """Clients with a stored update and a cluster (rows of ``distance_matrix``)."""
        return [] if self.similarity is None else [p for p in self.similarity.pids if p in self.assignment]

    @property
    def distance_matrix(self) -> np.ndarray | None:
        """Cosine distance ``2 - S = 1 - cos`` of the latest updates among ``distance_pids``, shape (n, n)."""
        pids = self.distance_pids
        return 2.0 - self.similarity.matrix(pids) if pids and self.similarity is not None else None


def float_size(record: ArrayRecord) -> int:
    """Number of floating-point entries of a model (the length of its flattened update)."""
    return sum(int(np.prod(a.shape)) for a in record.values() if np.issubdtype(a.numpy().dtype, np.floating))


def mean_rows(rows: list[np.ndarray], chunk: int = 512) -> np.ndarray:
    """Mean of equal-length vectors, stacking ``chunk`` at a time (float64 sum; never the whole set)."""
    total = np.zeros(np.shape(rows[0]), dtype=np.float64)
    for lo in range(0, len(rows), chunk):
        total += np.stack(rows[lo : lo + chunk]).sum(axis=0, dtype=np.float64)
    return total / len(rows)


def add_flat(record: ArrayRecord, delta: np.ndarray) -> ArrayRecord:
    """``record + delta`` with ``delta`` of shape (``float_size(record)``,) laid over its floating
    arrays in record order (the order of ``ModelUpdate``); other arrays are copied.
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
