"""The recorder: one ``RoundRecord`` per round, the assignment history, and the round's counters.

``RoundStats`` is what the messenger, the reply guard and the roster count during one round
(traffic, failures, rejections, capped weights, clients lost and rejoined, clustering time);
``record_round`` turns it, the evaluation and the assignment into the round's ``RoundRecord``
(a ``metrics.jsonl`` line), appends it to the strategy's ``history`` and calls ``on_round``.
The assignment is kept as a list of changes (``_assignment_diffs``), rebuilt into snapshots by
``assignment_history``. The fields it writes are the strategy's own, so a checkpoint saves them
(``strategies.state``).
"""

from __future__ import annotations

import time
from logging import INFO
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
from flwr.app import MetricRecord
from flwr.common import log

from common import keys
from common.metrics import cluster_sizes, clustering_scores

from .federation import Exchange, Traffic
from .record import RoundRecord

Scored = tuple[tuple[list[int], list[int], list[int]], tuple[float, float] | None]
AssignmentDiff = tuple[int, dict[int, int | None]]  # (round, what changed; None: the client left)


@dataclass
class RoundStats:
    """What one round counted so far (the recorder turns it into the round's record)."""

    start: float = 0.0
    train_replies: int = 0
    failures: int = 0
    rejected: int = 0
    capped: int = 0
    clustering_seconds: float = 0.0
    lost: list[int] = field(default_factory=list)
    rejoined: list[int] = field(default_factory=list)
    down: Traffic = field(default_factory=Traffic)
    up: Traffic = field(default_factory=Traffic)
    logged: set[int] = field(default_factory=set)  # clients whose failure this round is logged
    faults: dict[str, str] = field(default_factory=dict)  # the first rejection per phase
    asked: dict[str, Exchange] = field(default_factory=dict)  # train and evaluate exchanges of the round

    def add(self, exchange: Exchange) -> None:
        """Count ``exchange``'s failures and traffic."""
        self.failures += len(exchange.failures)
        self.down += exchange.down
        self.up += exchange.up


@contextmanager
def clustering_time(stats: RoundStats) -> Iterator[None]:
    """Add the enclosed block's seconds to ``stats.clustering_seconds`` (server-side clustering work)."""
    start = time.perf_counter()
    try:
        yield
    finally:
        stats.clustering_seconds += time.perf_counter() - start


def log_start(strategy: Any) -> None:
    """Log the strategy, its parameters and the cluster state at the start of the run."""
    sizes = cluster_sizes(strategy.assignment, len(strategy.models)) if strategy.models else []
    name, n, k = type(strategy).__name__, len(strategy.clients), len(strategy.models)
    log(INFO, "%s: %s, %d clients, %d cluster models, sizes %s", name, strategy.params, n, k, sizes)


class Recorded(Protocol):
    """What the recorder reads and writes of a strategy."""

    models: list[Any]
    assignment: dict[int, int]
    last_eval: dict[int, tuple[float, float]]
    history: list[RoundRecord]
    _assignment_diffs: list[AssignmentDiff]
    _logged_assignment: dict[int, int]
    _scored: Scored | None
    on_round: Callable[[Any, RoundRecord], None] | None

    @property
    def num_clusters(self) -> int:
        """Number of non-empty clusters."""

    def phase(self, server_round: int) -> str:
        """Name of what this round does."""

    def true_group(self, pid: int) -> int:
        """A client's true group (-1: unknown)."""


def record_round(
    strategy: Recorded, server_round: int, eval_metrics: MetricRecord | None, stats: RoundStats
) -> RoundRecord:
    """Append the round's record to ``strategy.history``, log a changed assignment, call ``on_round``.

    ARI and AMI are recomputed only when the assignment or the truth changed (they cost
    milliseconds; most rounds keep the assignment).
    """
    pids = sorted(strategy.assignment)
    labels = [strategy.assignment[p] for p in pids]
    truth = [strategy.true_group(p) for p in pids]
    previous = strategy._scored
    changed = previous is None or previous[0] != (pids, labels, truth)
    if previous is None or changed:
        strategy._scored = (
            (pids, labels, truth),
            clustering_scores(np.array(truth), np.array(labels)) if pids else None,
        )
    scores = strategy._scored[1] if strategy._scored is not None else None
    s = stats
    record = RoundRecord(
        round=server_round,
        phase=strategy.phase(server_round),
        accuracy=None if eval_metrics is None else scalar(eval_metrics, keys.ACCURACY),
        accuracy_std=None if eval_metrics is None else scalar(eval_metrics, "accuracy-std"),
        loss=None if eval_metrics is None else scalar(eval_metrics, keys.LOSS),
        ari=None if scores is None else scores[0],
        ami=None if scores is None else scores[1],
        num_clusters=strategy.num_clusters,
        num_clients=len(pids),
        eval_clients=None if eval_metrics is None else len(strategy.last_eval),
        clients_lost=s.lost,
        clients_rejoined=s.rejoined,
        cluster_sizes=cluster_sizes(strategy.assignment, len(strategy.models)),
        train_replies=s.train_replies,
        failures=s.failures,
        rejected=s.rejected,
        capped=s.capped,
        bytes_down_model=s.down.model,
        bytes_up_model=s.up.model,
        bytes_down_signal=s.down.signal,
        bytes_up_signal=s.up.signal,
        clustering_seconds=round(s.clustering_seconds, 6),
        round_seconds=round(time.perf_counter() - s.start, 4),
    )
    strategy.history.append(record)
    if changed or not strategy._assignment_diffs:
        last, current = strategy._logged_assignment, dict(zip(pids, labels, strict=True))
        diff: dict[int, int | None] = {p: k for p, k in current.items() if last.get(p) != k}
        diff.update(dict.fromkeys(set(last) - set(current)))
        if diff or not strategy._assignment_diffs:
            strategy._assignment_diffs.append((server_round, diff))
            strategy._logged_assignment = current
    if strategy.on_round is not None:
        strategy.on_round(strategy, record)
    return record


def assignment_history(diffs: list[AssignmentDiff]) -> list[dict[str, Any]]:
    """``{"round", "assignment"}`` each time the assignment changed, rebuilt from the stored changes.

    Only what changed is kept during the run, so memory grows with the clients that change
    cluster, not with the federation times the rounds.
    """
    out: list[dict[str, Any]] = []
    state: dict[int, int] = {}
    for server_round, diff in diffs:
        for pid, k in diff.items():
            if k is None:
                state.pop(pid, None)
            else:
                state[pid] = k
        out.append({"round": server_round, "assignment": {str(p): state[p] for p in sorted(state)}})
    return out


def scalar(metrics: MetricRecord, key: str) -> float:
    """``metrics[key]`` as a float.

    Raises
    ------
    TypeError
        If the metric is a list.
    """
    value = metrics[key]
    if isinstance(value, list):
        raise TypeError(f"Metric {key!r} is a list, not a number.")
    return float(value)
