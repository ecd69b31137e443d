"""``RoundRecord``: what one round did, as ``ClusteredStrategy.history`` keeps it.

``to_dict`` is the line ``metrics.jsonl`` holds (hyphenated keys, JSON values) and
``from_dict`` reads one back, so the results files keep their keys while the server, the
figures and the benchmarks read the fields by name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any


@dataclass(kw_only=True)
class RoundRecord:
    """One round's record (a ``metrics.jsonl`` line).

    Attributes
    ----------
    round : int
        The server round.
    phase : str
        What the round did (``ClusteredStrategy.phase``: ``train``, ``cluster``, ``warmup``, ...).
    accuracy, accuracy_std, loss : float or None
        Mean and std of the clients' local test accuracy, and their mean loss; None when not evaluated.
    ari, ami : float or None
        Adjusted Rand and adjusted mutual information of the assignment against the true groups.
    num_clusters : int
        Non-empty clusters.
    num_clients : int or None
        Clients with a cluster (None: a record written before it was kept).
    eval_clients : int or None
        Clients whose evaluation came back; None when not evaluated.
    clients_lost, clients_rejoined : list of int
        Clients whose node went offline or came back this round.
    cluster_sizes : list of int
        Members per cluster model, empty clusters included.
    train_replies, failures, rejected, capped : int
        Accepted train replies, failed messages, rejected replies, and updates whose weight was capped.
    bytes_down_model, bytes_up_model, bytes_down_signal, bytes_up_signal : int
        Traffic by direction, models apart from clustering signals.
    clustering_seconds, round_seconds : float
        Server-side clustering time (``clustering_timer``) and the whole round's wall time.
    """

    round: int
    phase: str
    accuracy: float | None = None
    accuracy_std: float | None = None
    loss: float | None = None
    ari: float | None = None
    ami: float | None = None
    num_clusters: int
    num_clients: int | None = None
    eval_clients: int | None = None
    clients_lost: list[int] = field(default_factory=list)
    clients_rejoined: list[int] = field(default_factory=list)
    cluster_sizes: list[int] = field(default_factory=list)
    train_replies: int = 0
    failures: int = 0
    rejected: int = 0
    capped: int = 0
    bytes_down_model: int = 0
    bytes_up_model: int = 0
    bytes_down_signal: int = 0
    bytes_up_signal: int = 0
    clustering_seconds: float = 0.0
    round_seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """The ``metrics.jsonl`` line: every field under its hyphenated key, in field order."""
        return {_key(f.name): getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RoundRecord:
        """A record from a ``metrics.jsonl`` line; keys it does not know are ignored, missing ones default.

        Raises
        ------
        ValueError
            If ``round``, ``phase`` or ``num-clusters`` is missing.
        """
        names = {_key(f.name): f.name for f in fields(cls)}
        missing = [key for key in ("round", "phase", "num-clusters") if key not in data]
        if missing:
            raise ValueError(f"The 'data' parameter of RoundRecord.from_dict must hold {missing}. Got {sorted(data)}.")
        return cls(**{names[key]: value for key, value in data.items() if key in names})


def _key(name: str) -> str:
    return name.replace("_", "-")
