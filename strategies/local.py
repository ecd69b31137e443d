"""Local training: one cluster per client, so nothing is ever shared.

The no-communication baseline of the clustered-FL papers: each client keeps its own model
and trains it whenever it is sampled. Every model starts from the same initial weights.
"""

from __future__ import annotations

from flwr.app import ArrayRecord

from .base import ClusteredStrategy


class Local(ClusteredStrategy):
    """K = N: client ``i`` is alone in cluster ``i``'s position of ``sorted(clients)``."""

    name = "local"

    def init_clusters(self, initial: ArrayRecord) -> None:
        """One copy of the initial model per client."""
        pids = sorted(self.clients)
        self.set_clusters([initial.copy() for _ in pids], {pid: k for k, pid in enumerate(pids)})

    def admit(self, server_round: int, newcomers: list[int]) -> None:
        """Each newcomer gets its own copy of the initial model."""
        initial = self.initial_model
        for pid in newcomers:
            self.assignment[pid] = len(self.models)
            self.models.append(initial.copy())
