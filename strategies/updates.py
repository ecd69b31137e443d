"""Shared by the strategies that cluster on stored client updates (FLIC, Sattler's CFL)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from common.clustering.similarity import UpdateSimilarity, update_similarity


class StoredUpdates:
    """Mixin: the latest update of every client in ``similarity``, drawn as the cosine-distance matrix.

    ``distance_matrix`` and ``distance_pids`` are read-only here, computed when read, where
    ``ClusteredStrategy`` declares them as plain attributes (hence the ``type: ignore`` on the
    classes that mix this in).
    """

    similarity: UpdateSimilarity | None
    assignment: dict[int, int]
    clients: dict

    def remember(
        self,
        pids: list[int],
        deltas: np.ndarray | Sequence[np.ndarray],
        sketch_dim: int,
        seed: int,
        summed: bool = False,
    ) -> np.ndarray:
        """Store this round's updates, shape (len(pids), d) or one array (d,) each (sketched a row at a
        time, never stacked); the first call fixes the (seeded) sketch and whether the store keeps each
        client's latest update or (``summed``) the sum of its updates. Returns them as stored
        (``UpdateSimilarity.update``).

        ``sketch_dim`` 0 keeps full updates unless all clients' would pass 2 GiB (``auto_sketch_dim``).
        """
        if self.similarity is None:
            self.store_for(int(np.shape(deltas[0])[-1]), sketch_dim, seed, summed)
        assert self.similarity is not None
        return self.similarity.update(pids, deltas)

    def store_for(self, dim: int, sketch_dim: int, seed: int, summed: bool = False) -> UpdateSimilarity:
        """The store of latest (``summed``: summed) updates, created on first use for updates of ``dim``
        coordinates (the first call fixes the seeded sketch; ``sketch_dim`` as :meth:`remember`'s)."""
        if self.similarity is None:
            self.similarity = update_similarity(len(self.clients), dim, sketch_dim, seed, summed)
        return self.similarity

    @property
    def distance_pids(self) -> list[int]:
        """Clients with a stored update and a cluster (rows of ``distance_matrix``)."""
        return [] if self.similarity is None else [p for p in self.similarity.pids if p in self.assignment]

    @property
    def distance_matrix(self) -> np.ndarray | None:
        """Cosine distance ``2 - S = 1 - cos`` of the latest updates among ``distance_pids``, shape (n, n)."""
        return self.plotted_distances()

    def plotted_distances(self, keep: np.ndarray | None = None) -> np.ndarray | None:
        """``distance_matrix``, or only among the clients at positions ``keep`` of ``distance_pids``, computed
        for them alone (``distances.png``'s sample of 100,000 clients: not the 40 GB of all of them)."""
        pids = self.distance_pids
        if not pids or self.similarity is None:
            return None
        s = self.similarity.matrix(pids if keep is None else [pids[int(i)] for i in keep])
        return np.subtract(2.0, s, out=s)  # in place: 800 MB at 10,000 clients, not twice that
