"""Shared by the strategies that cluster on stored client updates (FLIC, Sattler's CFL)."""

from __future__ import annotations

import numpy as np

from common.clustering.similarity import UpdateSimilarity


class StoredUpdates:
    """Mixin: ``similarity`` (an ``UpdateSimilarity`` or None) drawn as the cosine-distance matrix."""

    similarity: UpdateSimilarity | None
    assignment: dict[int, int]

    @property
    def distance_pids(self) -> list[int]:
        """Clients with a stored update and a cluster (rows of ``distance_matrix``)."""
        return [] if self.similarity is None else [p for p in self.similarity.pids if p in self.assignment]

    @property
    def distance_matrix(self) -> np.ndarray | None:
        """Cosine distance ``2 - S = 1 - cos`` of the latest updates among ``distance_pids``, shape (n, n)."""
        pids = self.distance_pids
        return 2.0 - self.similarity.matrix(pids) if pids and self.similarity is not None else None
