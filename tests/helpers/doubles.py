"""Test doubles of umbel's strategies."""

from __future__ import annotations

from strategies import ClusteredStrategy


class ByTrueGroup(ClusteredStrategy):
    """Test double: clusters = true groups, plus one cluster nobody is in."""

    name = "by-true-group"

    def init_clusters(self, initial):
        groups = sorted({c.true_group for c in self.clients.values()})
        models = [initial.copy() for _ in range(len(groups) + 1)]
        self.set_clusters(models, {pid: groups.index(c.true_group) for pid, c in self.clients.items()})
