"""Shared by the strategies that cluster on stored client updates (FLIC, Sattler's CFL)."""

from __future__ import annotations

import numpy as np

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
